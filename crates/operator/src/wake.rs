//! The event side of the operator's round-based loops (driver upgrade, MigClusterPolicy):
//! a watch whose only job is to say "something changed", so the next round starts.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;

/// Notify `wake` on every change of `K` (use `PartialObjectMeta<…>` where the content does
/// not matter: the round lists what it needs). `loop_name` names the loop in logs.
pub async fn on_changes<K>(api: Api<K>, wake: Arc<Notify>, loop_name: &'static str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let mut s = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                wake.notify_one();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "{loop_name} trigger watch (retrying)");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
