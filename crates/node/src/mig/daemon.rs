//! The MIG manager daemon: watches its Node's `nvidia.com/mig.config` label and, on a change,
//! carries the named layout out as upstream's mig-manager does — plan (pure, refusing layouts the
//! GPUs cannot hold before anything is touched), state `pending`, pause the GPU clients' deploy
//! labels and wait for their pods to leave, apply through [`Backend`], restore the labels, state
//! `success` | `failed` (with the error as a Node annotation and a Node event).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gantry_api::lenient::Lenient;
use gantry_api::mig_parted::MigPartedConfig;
use gantry_api::names::{self, mig_config_state};
use gantry_gpu::Backend;
use gantry_runtime::events::{Recorder, Said, object_ref};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use super::{clients, labels, plan, render, state};

/// Where the mig-parted config comes from; it is re-read for every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    /// A ConfigMap with the file under key `config.yaml` (upstream's `default-mig-parted-config`).
    ConfigMap {
        namespace: String,
        name: String,
    },
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "file {}", p.display()),
            ConfigSource::ConfigMap { namespace, name } => {
                write!(f, "ConfigMap {namespace}/{name}")
            }
        }
    }
}

/// Options of the daemon.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub node_name: String,
    pub source: ConfigSource,
    /// Gantry's ConfigMap of MigClusterPolicy inline layouts (`namespace`, `name`), merged into
    /// the config when it exists; its configs never replace ones of the main config.
    pub custom_layouts: Option<(String, String)>,
    /// How long to wait for the GPU client pods to leave the node (upstream: 5 minutes).
    pub clients_timeout: Duration,
    /// How often to re-list pods while waiting.
    pub poll_interval: Duration,
}

impl DaemonOptions {
    pub fn new(node_name: impl Into<String>, source: ConfigSource) -> Self {
        DaemonOptions {
            node_name: node_name.into(),
            source,
            custom_layouts: None,
            clients_timeout: Duration::from_secs(300),
            poll_interval: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("Node {node}: {what}: {source}")]
    Api {
        node: String,
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// `NS/NAME` → (`NS`, `NAME`).
pub fn parse_namespaced(s: &str) -> Option<(String, String)> {
    let (ns, name) = s.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (ns.to_string(), name.to_string()))
}

/// Where Gantry's inline-layout ConfigMap lives by default: beside the mig-parted ConfigMap,
/// else in the pod's namespace (the operator namespace the DaemonSet runs in).
pub fn default_custom_layouts(
    source: &ConfigSource,
    pod_namespace: Option<&str>,
) -> Option<(String, String)> {
    let ns = match source {
        ConfigSource::ConfigMap { namespace, .. } => Some(namespace.as_str()),
        ConfigSource::File(_) => pod_namespace,
    }?;
    Some((
        ns.to_string(),
        names::CONFIG_MAP_MIG_CUSTOM_LAYOUTS.to_string(),
    ))
}

/// Merge the configs of `extra` that `base` does not have.
pub fn merge_configs(mut base: MigPartedConfig, extra: MigPartedConfig) -> MigPartedConfig {
    for (name, entries) in extra.mig_configs {
        if !base.mig_configs.contains_key(&name) {
            base.mig_configs.insert(name, entries);
        }
    }
    base
}

/// Runs until `shutdown` resolves. Errors of single changes end up in the Node's state, not here.
pub fn run<'a>(
    opts: DaemonOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    shutdown: impl Future<Output = ()> + Send + 'a,
) -> futures::future::BoxFuture<'a, Result<(), DaemonError>> {
    run_boxed(opts, backend, client, Box::pin(shutdown))
}

// Not generic and never inlined, so the body's state machine is compiled here once, not in
// every crate that calls [`run`] (docs/benchmarks.md, "Build time").
#[inline(never)]
fn run_boxed<'a>(
    opts: DaemonOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    shutdown: futures::future::BoxFuture<'a, ()>,
) -> futures::future::BoxFuture<'a, Result<(), DaemonError>> {
    Box::pin(run_inner(opts, backend, client, shutdown))
}

async fn run_inner(
    opts: DaemonOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    shutdown: futures::future::BoxFuture<'_, ()>,
) -> Result<(), DaemonError> {
    tokio::pin!(shutdown);
    let nodes: Api<Node> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", opts.node_name));
    let stream = watcher(nodes, cfg).default_backoff().applied_objects();
    tokio::pin!(stream);
    let events = Recorder::on_node(client.clone(), names::app::MIG_MANAGER, &opts.node_name);
    let m = Manager {
        opts,
        backend,
        client,
        events,
    };
    // The config last carried out (success or failed); `None` at start so the current label is
    // checked once (a restart in the middle of a change repairs it).
    let mut handled: Option<String> = None;
    loop {
        let node = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            next = stream.next() => match next {
                Some(Ok(n)) => n,
                Some(Err(e)) => {
                    tracing::warn!(node = %m.opts.node_name, error = %e, "watching the Node");
                    continue;
                }
                None => return Ok(()),
            },
        };
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        match labels::selected_config(&node_labels) {
            None => {
                handled = None;
                // A change interrupted before: do not leave the GPU clients paused.
                m.restore_clients().await?;
            }
            Some(name) if handled.as_deref() == Some(name) => {}
            Some(name) => {
                let name = name.to_string();
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    r = m.handle(&name) => r?,
                }
                handled = Some(name);
            }
        }
    }
}

struct Manager {
    opts: DaemonOptions,
    backend: Arc<dyn Backend>,
    client: kube::Client,
    events: Recorder,
}

/// Why a change failed, as shown in the state annotation and the Node event.
type Failure = String;

impl Manager {
    fn node(&self) -> &str {
        &self.opts.node_name
    }

    fn api_err(&self, what: &str) -> impl Fn(kube::Error) -> DaemonError + '_ {
        let what = what.to_string();
        move |source| DaemonError::Api {
            node: self.node().to_string(),
            what: what.clone(),
            source,
        }
    }

    async fn handle(&self, name: &str) -> Result<(), DaemonError> {
        tracing::info!(node = %self.node(), config = %name, "MIG config selected");
        let outcome = self.carry_out(name).await?;
        let node = self.get_node().await?;
        let labels_now = node.metadata.labels.clone().unwrap_or_default();
        if labels::selected_config(&labels_now) != Some(name) {
            // A newer config was selected meanwhile: the loop handles it next; the state stays.
            tracing::info!(node = %self.node(), config = %name, "MIG config changed while applying");
            return Ok(());
        }
        match outcome {
            Ok(changed) => {
                self.set_state(mig_config_state::SUCCESS, None).await?;
                if changed {
                    self.event(
                        "Normal",
                        "MigConfigApplied",
                        &format!("MIG config {name:?} applied"),
                    )
                    .await;
                }
            }
            Err(why) => {
                tracing::error!(node = %self.node(), config = %name, error = %why, "MIG config failed");
                self.set_state(mig_config_state::FAILED, Some(&why)).await?;
                self.event("Warning", "MigConfigFailed", &why).await;
            }
        }
        Ok(())
    }

    /// `Ok(Ok(changed))` when the GPUs now match; `Ok(Err(why))` when the change failed.
    async fn carry_out(&self, name: &str) -> Result<Result<bool, Failure>, DaemonError> {
        let config = match self.load_config().await {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        let planned = match self.plan(&config, name).await {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        if !planned.changes() {
            self.restore_clients().await?;
            return Ok(Ok(false));
        }
        tracing::info!(node = %self.node(), "{}", render::render(&planned));
        self.set_state(mig_config_state::PENDING, None).await?;
        self.pause_clients().await?;
        let result = match self.wait_for_clients().await? {
            Err(why) => Err(why),
            Ok(()) => self.apply(config, name).await,
        };
        self.restore_clients().await?;
        Ok(result.map(|()| true))
    }

    async fn load_config(&self) -> Result<MigPartedConfig, Failure> {
        load_config(
            &self.client,
            &self.opts.source,
            self.opts.custom_layouts.as_ref(),
        )
        .await
    }

    async fn plan(&self, config: &MigPartedConfig, name: &str) -> Result<plan::MigPlan, Failure> {
        let backend = self.backend.clone();
        let facts = tokio::task::spawn_blocking(move || {
            state::observe(state::ReadOnly::new(backend.as_ref()))
        })
        .await
        .map_err(|e| format!("reading the GPUs: {e}"))?
        .map_err(|e| format!("reading the GPUs: {e}"))?;
        plan::plan(config, name, &facts).map_err(|e| e.to_string())
    }

    async fn apply(&self, config: MigPartedConfig, name: &str) -> Result<(), Failure> {
        let backend = self.backend.clone();
        let n = name.to_string();
        tokio::task::spawn_blocking(move || super::apply::reconcile(backend.as_ref(), &config, &n))
            .await
            .map_err(|e| format!("applying MIG config {name:?}: {e}"))?
            .map(|report| {
                tracing::info!(node = %self.node(), config = %name, gpus = ?report.changed, "MIG config applied");
            })
            .map_err(|e| format!("applying MIG config {name:?}: {e}"))
    }

    async fn get_node(&self) -> Result<Node, DaemonError> {
        Api::<Node>::all(self.client.clone())
            .get(self.node())
            .await
            .map_err(self.api_err("reading the Node"))
    }

    async fn patch_node(&self, patch: serde_json::Value, what: &str) -> Result<(), DaemonError> {
        let pp = PatchParams {
            field_manager: Some(names::FIELD_MANAGER_MIG_MANAGER.to_string()),
            ..PatchParams::default()
        };
        Api::<Node>::all(self.client.clone())
            .patch(self.node(), &pp, &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(self.api_err(what))
    }

    async fn set_state(&self, state: &str, error: Option<&str>) -> Result<(), DaemonError> {
        let patch = json!({"metadata": {
            "labels": {names::LABEL_MIG_CONFIG_STATE: state},
            "annotations": {names::ANNOTATION_MIG_CONFIG_ERROR: error},
        }});
        self.patch_node(
            patch,
            &format!("setting {}={state}", names::LABEL_MIG_CONFIG_STATE),
        )
        .await
    }

    async fn pause_clients(&self) -> Result<(), DaemonError> {
        let node = self.get_node().await?;
        let change = labels::pause(&node.metadata.labels.unwrap_or_default());
        self.write_labels(change, "pausing the GPU clients").await
    }

    async fn restore_clients(&self) -> Result<(), DaemonError> {
        let node = self.get_node().await?;
        let change = labels::restore(&node.metadata.labels.unwrap_or_default());
        self.write_labels(change, "restoring the GPU clients").await
    }

    async fn write_labels(
        &self,
        change: BTreeMap<String, String>,
        what: &str,
    ) -> Result<(), DaemonError> {
        if change.is_empty() {
            return Ok(());
        }
        tracing::info!(node = %self.node(), labels = ?change, "{what}");
        self.patch_node(json!({"metadata": {"labels": change}}), what)
            .await
    }

    /// Waits until no GPU client pod is left on the node, deleting validator pods on the way.
    async fn wait_for_clients(&self) -> Result<Result<(), Failure>, DaemonError> {
        // Lenient: one stored pod a typed client cannot decode must not fail the wait.
        let pods: Api<Lenient<Pod>> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node()));
        let deadline = tokio::time::Instant::now() + self.opts.clients_timeout;
        loop {
            let items: Vec<Pod> = pods
                .list(&lp)
                .await
                .map_err(self.api_err("listing the node's pods"))?
                .items
                .into_iter()
                .filter_map(Lenient::salvaged)
                .collect();
            for p in items.iter().filter(|p| clients::is_validator(p)) {
                let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                let name = p.metadata.name.as_deref().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                if let Err(e) = api.delete(name, &DeleteParams::default()).await {
                    tracing::warn!(pod = %clients::pod_ref(p), error = %e, "deleting validator pod");
                }
            }
            let left: Vec<String> = items
                .iter()
                .filter(|p| clients::is_gpu_client(p))
                .map(clients::pod_ref)
                .collect();
            if left.is_empty() {
                return Ok(Ok(()));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(format!(
                    "GPU client pods still on the node after {}s: {}",
                    self.opts.clients_timeout.as_secs(),
                    left.join(", ")
                )));
            }
            tokio::time::sleep(self.opts.poll_interval).await;
        }
    }

    /// A Node event through the one recorder (repeats counted); failing to write one is
    /// logged, not fatal.
    async fn event(&self, kind: &str, reason: &str, message: &str) {
        let uid = self.get_node().await.ok().and_then(|n| n.metadata.uid);
        let node = object_ref("Node", None, self.node(), uid.as_deref());
        let said = if kind == "Warning" {
            Said::warning(reason, message)
        } else {
            Said::normal(reason, message)
        };
        if let Err(e) = self.events.try_publish(&node, &said, None).await {
            tracing::warn!(node = %self.node(), error = %e, "writing Node event {reason}");
        }
    }
}

/// Read the mig-parted config from `source`, merged with the inline-layouts ConfigMap
/// `custom` when that exists. The error names the file or ConfigMap.
pub async fn load_config(
    client: &kube::Client,
    source: &ConfigSource,
    custom: Option<&(String, String)>,
) -> Result<MigPartedConfig, String> {
    let main =
        match source {
            ConfigSource::File(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("reading mig-parted config {}: {e}", p.display()))?;
                parse(&text, source)?
            }
            ConfigSource::ConfigMap { namespace, name } => config_map(client, namespace, name)
                .await?
                .ok_or_else(|| format!("mig-parted ConfigMap {namespace}/{name} not found"))?,
        };
    let Some((ns, cm)) = custom else {
        return Ok(main);
    };
    Ok(match config_map(client, ns, cm).await? {
        Some(extra) => merge_configs(main, extra),
        None => main,
    })
}

/// The mig-parted file in ConfigMap `ns/name` (`None` when the ConfigMap does not exist).
async fn config_map(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Option<MigPartedConfig>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading ConfigMap {ns}/{name}: {e}"))?;
    let Some(cm) = cm else { return Ok(None) };
    let key = names::MIG_PARTED_CONFIG_KEY;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| format!("ConfigMap {ns}/{name} has no key {key:?}"))?;
    let source = ConfigSource::ConfigMap {
        namespace: ns.to_string(),
        name: name.to_string(),
    };
    parse(text, &source).map(Some)
}

fn parse(text: &str, source: &ConfigSource) -> Result<MigPartedConfig, Failure> {
    serde_yaml::from_str(text).map_err(|e| format!("parsing mig-parted config in {source}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_names() {
        assert_eq!(
            parse_namespaced("gpu-operator/default-mig-parted-config"),
            Some(("gpu-operator".into(), "default-mig-parted-config".into()))
        );
        assert_eq!(parse_namespaced("nons"), None);
        assert_eq!(parse_namespaced("/x"), None);
        assert_eq!(parse_namespaced("a/b/c"), None);
    }

    #[test]
    fn merge_keeps_main_configs_and_adds_new_ones() {
        let main = gantry_api::mig_parted::default_config();
        let extra: MigPartedConfig = serde_yaml::from_str(
            "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: true\n  gantry-mcp-x:\n    - devices: all\n      mig-enabled: false\n",
        )
        .unwrap();
        let merged = merge_configs(main.clone(), extra);
        assert_eq!(
            merged.mig_configs.get("all-disabled"),
            main.mig_configs.get("all-disabled")
        );
        assert!(merged.mig_configs.contains_key("gantry-mcp-x"));
    }
}
