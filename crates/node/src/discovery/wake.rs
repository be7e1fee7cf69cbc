//! Why a relabel pass may not wait for the sleep interval: the device plugin config changed.
//!
//! Upstream's config-manager sidecar restarts GFD as soon as the node's config label or the
//! file changes, so labels follow the plugin within seconds. Waiting for the next pass
//! (60 s by default) left `sharing-strategy`/`replicas` stale while the plugin already
//! advertised the new replicas. Here the config source is watched (ConfigMap through the API:
//! the Node's config label and the ConfigMap; a file: its bytes, polled) and any change ends
//! the sleep; the caller re-reads the config and relabels only if it differs.

use std::path::PathBuf;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::runtime::{WatchStreamExt, watcher};

/// How often a config file is looked at between passes (a local read: cheap).
pub const FILE_POLL: Duration = Duration::from_secs(2);

/// A stream that yields whenever the config source may have changed. Never ends on its own.
pub fn changes(
    client: &kube::Client,
    node: &str,
    config_map: Option<&(String, String)>,
    file: Option<PathBuf>,
) -> BoxStream<'static, ()> {
    if let Some((ns, name)) = config_map {
        let nodes = kube::Api::<Node>::all(client.clone());
        let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
        // Only the config label matters on the Node (its status changes all the time).
        let label = watcher(nodes, by_name(node))
            .default_backoff()
            .applied_objects()
            .filter_map(|n| async move {
                let n = n.ok()?;
                Some(
                    n.metadata
                        .labels
                        .and_then(|l| {
                            l.get(gantry_api::names::LABEL_DEVICE_PLUGIN_CONFIG)
                                .cloned()
                        })
                        .unwrap_or_default(),
                )
            })
            .scan(None::<String>, |last, v| {
                let changed = last.as_ref() != Some(&v);
                *last = Some(v);
                futures::future::ready(Some(changed))
            })
            .filter_map(|changed| async move { changed.then_some(()) });
        let cms = kube::Api::<ConfigMap>::namespaced(client.clone(), ns);
        let cm = watcher(cms, by_name(name))
            .default_backoff()
            .applied_objects()
            .filter_map(|c| async move { c.ok().map(|_| ()) });
        return stream::select(label, cm).chain(stream::pending()).boxed();
    }
    match file {
        Some(path) => {
            let ticks =
                tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(FILE_POLL));
            ticks
                .map(move |_| std::fs::read(&path).ok())
                .scan(None::<Option<Vec<u8>>>, |last, bytes| {
                    let changed = last.as_ref().is_some_and(|l| *l != bytes);
                    *last = Some(bytes);
                    futures::future::ready(Some(changed))
                })
                .filter_map(|changed| async move { changed.then_some(()) })
                .boxed()
        }
        None => stream::pending().boxed(),
    }
}
