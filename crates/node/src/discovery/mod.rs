//! `gantry node discovery`: GPU Feature Discovery labels (`nvidia.com/gpu.product`, …) computed
//! from the GPU backend and the device plugin config, applied to the node's own Node object by
//! server-side apply (one field manager, so labels that no longer hold are removed).

pub mod args;
pub mod config;
mod error;
pub mod facts;
pub mod labels;
pub mod sharing;
mod wake;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use gantry_api::device_plugin_config::sharing_refused;
use gantry_gpu::{Backend, GpuError};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};

pub use error::DiscoveryError;
pub use labels::{GpuFacts, LabelOptions, Labels, MigStrategy, NodeFacts, compute_labels};
pub use sharing::{Sharing, SharingStrategy};

/// Command-line options; `None` = take it from the config file, else the GFD default.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryOptions {
    pub node_name: Option<String>,
    /// Where the host's `/sys` is found (`/` on a node, a temp dir in tests).
    pub host_root: PathBuf,
    pub config_file: Option<PathBuf>,
    /// Named configs in a ConfigMap (`namespace`, `name`) read through the API, the key
    /// picked by the node label `nvidia.com/device-plugin.config`, else `default_config`
    /// (what the device plugin's `--config-map` does).
    pub config_map: Option<(String, String)>,
    pub default_config: Option<String>,
    pub mig_strategy: Option<MigStrategy>,
    /// `Some(None)` = infinite.
    pub sleep_interval: Option<Option<Duration>>,
    pub oneshot: bool,
    pub no_timestamp: bool,
    /// Also write the labels to this file (NFD's local feature file format).
    pub output_file: Option<PathBuf>,
    /// Where the machine type is read; `None`: `<host_root>/sys/class/dmi/id/product_name`.
    pub machine_type_file: Option<PathBuf>,
}

impl DiscoveryOptions {
    fn machine_file(&self) -> PathBuf {
        self.machine_type_file
            .clone()
            .unwrap_or_else(|| self.host_root.join(facts::MACHINE_TYPE_FILE))
    }
}

/// GFD's default re-label period.
pub const DEFAULT_SLEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Options merged with the config file: flags win over the file, the file over defaults.
#[derive(Debug, Clone)]
struct Effective {
    label_opts: LabelOptions,
    sharing: Sharing,
    sleep: Option<Duration>,
    oneshot: bool,
}

fn effective(
    opts: &DiscoveryOptions,
    started: u64,
    from_api: Option<config::DiscoveryConfig>,
) -> Result<Effective, DiscoveryError> {
    let file = match (from_api, &opts.config_file) {
        (Some(c), _) => c,
        (None, Some(path)) => config::load(path)?,
        (None, None) => config::DiscoveryConfig::default(),
    };
    let no_timestamp = opts.no_timestamp || file.no_timestamp.unwrap_or(false);
    let mig_strategy = opts.mig_strategy.or(file.mig_strategy).unwrap_or_default();
    Ok(Effective {
        label_opts: LabelOptions {
            mig_strategy,
            timestamp: (!no_timestamp).then_some(started),
        },
        sharing: applied_sharing(file.sharing, mig_strategy),
        sleep: opts
            .sleep_interval
            .or(file.sleep_interval)
            .unwrap_or(Some(DEFAULT_SLEEP_INTERVAL)),
        oneshot: opts.oneshot || file.oneshot.unwrap_or(false),
    })
}

/// The sharing the device plugin applies: none when it refuses the config's strategy under
/// `mig` (the same decision, [`sharing_refused`]), so the labels never claim replicas the
/// node does not advertise.
fn applied_sharing(sharing: Sharing, mig: MigStrategy) -> Sharing {
    match sharing_refused(sharing.strategy, mig) {
        Some(why) => {
            tracing::warn!(
                "the device plugin refuses this sharing config ({why}): labelling the GPUs as not shared"
            );
            Sharing::none()
        }
        None => sharing,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Compute the labels once (what `--print` shows).
pub fn labels_once(
    opts: &DiscoveryOptions,
    backend: &dyn Backend,
) -> Result<Labels, DiscoveryError> {
    let eff = effective(opts, unix_now(), None)?;
    let facts = facts::collect(backend, &opts.host_root, &opts.machine_file())?;
    compute_labels(&facts, &eff.sharing, &eff.label_opts)
}

/// `key=value` lines, sorted, as GFD writes its feature file.
pub fn render(labels: &Labels) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// A client from the environment: in-cluster service account, else `KUBECONFIG`.
pub async fn client_from_env() -> Result<kube::Client, DiscoveryError> {
    kube::Client::try_default()
        .await
        .map_err(DiscoveryError::Client)
}

/// The config named by the node's `nvidia.com/device-plugin.config` label (else `default`)
/// among the keys of ConfigMap `namespace/name`; none named: the defaults.
pub async fn config_from_map(
    client: &kube::Client,
    node: &str,
    namespace: &str,
    name: &str,
    default: Option<&str>,
) -> Result<config::DiscoveryConfig, DiscoveryError> {
    let where_ = format!("ConfigMap {namespace}/{name}");
    let err = |message: String| DiscoveryError::Config {
        path: where_.clone(),
        message,
    };
    let label = node_labels(client, node)
        .await
        .map_err(|e| err(format!("reading node {node}'s config label: {e}")))?
        .and_then(|mut l| l.remove(gantry_api::names::LABEL_DEVICE_PLUGIN_CONFIG))
        .filter(|v| !v.is_empty());
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        kube::Api::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| err(e.to_string()))?;
    let data = cm.data.unwrap_or_default();
    let available: Vec<String> = data
        .keys()
        .filter(|k| !k.starts_with('.'))
        .cloned()
        .collect();
    let chosen = crate::device_plugin::named::select(&available, label.as_deref(), default, &[])
        .map_err(err)?;
    let Some(key) = chosen else {
        return Ok(config::DiscoveryConfig::default());
    };
    let text = data.get(&key).map(String::as_str).unwrap_or_default();
    config::parse(text).map_err(|message| DiscoveryError::Config {
        path: format!("{where_} key {key}"),
        message,
    })
}

/// The labels as NFD's local feature file, replaced atomically (a reader never sees half).
pub fn write_feature_file(path: &Path, labels: &Labels) -> Result<(), DiscoveryError> {
    let err = |e: std::io::Error| DiscoveryError::Config {
        path: path.display().to_string(),
        message: format!("writing the feature file: {e}"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, render(labels)).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Server-side apply `labels` as the node's label set owned by the discovery field manager.
pub async fn apply_labels(
    client: &kube::Client,
    node: &str,
    labels: &Labels,
) -> Result<(), DiscoveryError> {
    let api: kube::Api<Node> = kube::Api::all(client.clone());
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": node, "labels": labels },
    });
    let params = PatchParams::apply(gantry_api::names::FIELD_MANAGER_DISCOVERY).force();
    api.patch(node, &params, &Patch::Apply(&body))
        .await
        .map(|_| ())
        .map_err(|source| DiscoveryError::Apply {
            node: node.to_string(),
            source,
        })
}

/// Node `node`'s labels, read with its metadata only.
async fn node_labels(client: &kube::Client, node: &str) -> kube::Result<Option<Labels>> {
    let api: kube::Api<Node> = kube::Api::all(client.clone());
    Ok(api.get_metadata(node).await?.metadata.labels)
}

/// Whether node `node` carries every one of `labels` with its value now (a failed read: no).
async fn node_carries(client: &kube::Client, node: &str, labels: &Labels) -> bool {
    match node_labels(client, node).await {
        Ok(have) => carries(have.as_ref(), labels),
        Err(_) => false,
    }
}

/// Whether `have` holds every one of `want` with the same value.
fn carries(have: Option<&Labels>, want: &Labels) -> bool {
    want.iter()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

/// Whether the config the source holds now gives other settings than `eff` (a failed read
/// counts as unchanged: the last good config stays).
async fn config_changed(
    opts: &DiscoveryOptions,
    client: &kube::Client,
    node: &str,
    eff: &Effective,
) -> bool {
    let from_api = match &opts.config_map {
        Some((ns, name)) => {
            match config_from_map(client, node, ns, name, opts.default_config.as_deref()).await {
                Ok(c) => Some(c),
                Err(_) => return false,
            }
        }
        None => None,
    };
    match effective(opts, eff.label_opts.timestamp.unwrap_or(0), from_api) {
        Ok(now) => {
            now.sharing != eff.sharing
                || now.label_opts.mig_strategy != eff.label_opts.mig_strategy
                || now.sleep != eff.sleep
                || now.oneshot != eff.oneshot
        }
        Err(_) => false,
    }
}

/// Label the node, then (unless oneshot or an infinite interval) again every sleep interval
/// until `shutdown` completes, or at once when the device plugin config changes (see
/// [`wake`]). The config is re-read on every pass.
pub fn run<'a>(
    opts: DiscoveryOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    shutdown: impl Future<Output = ()> + Send + 'a,
) -> futures::future::BoxFuture<'a, Result<(), DiscoveryError>> {
    run_boxed(opts, backend, client, Box::pin(shutdown))
}

// Not generic and never inlined, so the body's state machine is compiled here once, not in
// every crate that calls [`run`] (docs/benchmarks.md, "Build time").
#[inline(never)]
fn run_boxed<'a>(
    opts: DiscoveryOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    shutdown: futures::future::BoxFuture<'a, ()>,
) -> futures::future::BoxFuture<'a, Result<(), DiscoveryError>> {
    Box::pin(run_inner(opts, backend, client, shutdown))
}

async fn run_inner(
    opts: DiscoveryOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    shutdown: futures::future::BoxFuture<'_, ()>,
) -> Result<(), DiscoveryError> {
    let node = opts.node_name.clone().ok_or(DiscoveryError::NoNodeName)?;
    let started = unix_now();
    tokio::pin!(shutdown);
    // A missing or broken ConfigMap must not take the labels away: keep the last good config
    // (the defaults until there is one) and say what is wrong.
    let mut last_good: Option<config::DiscoveryConfig> = None;
    // The labels last applied: a pass that computes the same ones reads the node and applies
    // them again only if they are no longer all there (a no-op apply every sleep interval on
    // every node was a fifth of the API server's CPU at rest with 5,000 simulated nodes).
    let mut applied: Option<Labels> = None;
    let mut changes = wake::changes(
        &client,
        &node,
        opts.config_map.as_ref(),
        opts.config_file.clone(),
    );
    loop {
        let from_api = match &opts.config_map {
            Some((ns, name)) => {
                match config_from_map(&client, &node, ns, name, opts.default_config.as_deref())
                    .await
                {
                    Ok(c) => {
                        last_good = Some(c.clone());
                        Some(c)
                    }
                    Err(e) => {
                        tracing::warn!(node = %node, error = %e, "keeping the last good sharing config");
                        Some(last_good.clone().unwrap_or_default())
                    }
                }
            }
            None => None,
        };
        let eff = effective(&opts, started, from_api)?;
        let b = backend.clone();
        let root = opts.host_root.clone();
        let machine = opts.machine_file();
        let facts =
            tokio::task::spawn_blocking(move || facts::collect(b.as_ref(), &root, &machine))
                .await
                .map_err(|e| {
                    DiscoveryError::Gpu(GpuError::Nvml {
                        call: "collect facts".into(),
                        message: e.to_string(),
                    })
                })??;
        let labels = compute_labels(&facts, &eff.sharing, &eff.label_opts)?;
        if applied.as_ref() != Some(&labels) || !node_carries(&client, &node, &labels).await {
            apply_labels(&client, &node, &labels).await?;
            applied = Some(labels.clone());
        }
        if let Some(path) = &opts.output_file {
            write_feature_file(path, &labels)?;
        }
        tracing::info!(node = %node, labels = labels.len(), "applied GPU feature labels");
        if eff.oneshot {
            return Ok(());
        }
        // Sleep until the interval is up (never when `infinite`: a DaemonSet pod must not exit)
        // or the config source changes to something else.
        let until = eff.sleep.map(|s| tokio::time::Instant::now() + s);
        let interval_up = async move {
            match until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(interval_up);
        loop {
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = &mut interval_up => break,
                Some(()) = changes.next() => {
                    if config_changed(&opts, &client, &node, &eff).await {
                        tracing::info!(node = %node, "device plugin config changed: relabelling now");
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_carries_the_labels_only_with_every_one_and_its_value() {
        let want: Labels = [("a", "1"), ("b", "2")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let mut have = want.clone();
        have.insert("other".into(), "x".into());
        assert!(carries(Some(&have), &want));
        have.insert("b".into(), "3".into());
        assert!(!carries(Some(&have), &want), "a value changed");
        have.remove("b");
        assert!(!carries(Some(&have), &want), "a label removed");
        assert!(!carries(None, &want));
        assert!(carries(None, &Labels::new()));
    }

    #[test]
    fn the_feature_file_is_replaced_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("features.d/gfd");
        let mut labels = Labels::new();
        labels.insert("nvidia.com/gpu.count".into(), "8".into());
        labels.insert("nvidia.com/gpu.present".into(), "true".into());
        write_feature_file(&path, &labels).expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "nvidia.com/gpu.count=8\nnvidia.com/gpu.present=true\n"
        );
        labels.remove("nvidia.com/gpu.count");
        write_feature_file(&path, &labels).expect("rewrite");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "nvidia.com/gpu.present=true\n"
        );
        assert!(!path.with_extension("tmp").exists());
    }

    #[test]
    fn labels_agree_with_what_the_device_plugin_advertises() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("config.yaml");
        let text = "version: v1\nflags:\n  migStrategy: mixed\n  mpsRoot: /run/nvidia/mps\n\
                    sharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 10}\n";
        std::fs::write(&cfg, text).expect("write");
        let backend = gantry_gpu::SimBackend::new(
            gantry_gpu::SimConfig::for_model("H100-80GB", 2, 1).expect("model"),
        );
        let mut opts = DiscoveryOptions {
            config_file: Some(cfg.clone()),
            host_root: dir.path().into(),
            no_timestamp: true,
            ..Default::default()
        };
        let gpu = |l: &Labels, k: &str| l.get(&format!("nvidia.com/gpu.{k}")).cloned();
        // Under mixed the device plugin refuses MPS: no MPS replicas to label.
        let refused = crate::device_plugin::load::parse_settings(&cfg, text.as_bytes());
        assert!(refused.is_err_and(|e| e.to_string().contains("migStrategy: mixed")));
        let labels = labels_once(&opts, &backend).expect("labels");
        assert_eq!(gpu(&labels, "sharing-strategy").as_deref(), Some("none"));
        assert_eq!(gpu(&labels, "replicas").as_deref(), Some("1"));
        // With MIG_STRATEGY=none folded in, the plugin takes the same file: 10 MPS replicas.
        let overrides = crate::device_plugin::Overrides {
            mig_strategy: Some(MigStrategy::None),
            ..Default::default()
        };
        crate::device_plugin::load::parse_settings_with(&cfg, text.as_bytes(), &overrides)
            .expect("accepted without mixed");
        opts.mig_strategy = Some(MigStrategy::None);
        let labels = labels_once(&opts, &backend).expect("labels");
        assert_eq!(gpu(&labels, "sharing-strategy").as_deref(), Some("mps"));
        assert_eq!(gpu(&labels, "replicas").as_deref(), Some("10"));
    }
}
