//! The MigClusterPolicy reconciler: turns cluster-wide MIG layouts into per-node
//! `nvidia.com/mig.config` labels (and, for inline layouts, named configs in Gantry's
//! `gantry-mig-custom-layouts` ConfigMap that the MIG manager merges into its mig-parted file),
//! rolling out at most `maxUnavailable` nodes per policy at a time.
//!
//! - [`plan`]: pure — (policies, nodes) → label writes, evictions, statuses, finalizers.
//! - [`custom`]: pure — the inline layouts as a mig-parted file.
//! - this module: the shell — list, decide, write; woken by watches and a periodic requeue.

pub mod custom;
pub mod plan;

use gantry_runtime::touch::Touch;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

use gantry_api::lenient::Lenient;
use gantry_api::mig_cluster_policy::MigClusterPolicy;
use gantry_api::mig_parted::MigPartedConfig;
use gantry_api::names::{self, mig_config_state};
use gantry_runtime::rounds::{Rounds, on_changes};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, EvictParams, ListParams, PartialObjectMeta, Patch, PatchParams};
use serde_json::json;

use crate::FIELD_MANAGER;
use crate::node_watch::NodeWatch;
use plan::{Action, NodeView};

/// Options of the reconciler.
#[derive(Debug, Clone)]
pub struct MigPolicyOptions {
    /// Operator namespace: where the custom-layouts ConfigMap lives.
    pub namespace: String,
    /// Periodic re-plan even without events.
    pub requeue: Duration,
    /// Shortest gap between two rounds.
    pub min_interval: Duration,
}

impl MigPolicyOptions {
    pub fn new(namespace: impl Into<String>) -> Self {
        MigPolicyOptions {
            namespace: namespace.into(),
            requeue: Duration::from_secs(30),
            min_interval: Duration::from_millis(100),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MigPolicyError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the node watch stopped before its first list")]
    NodeWatchStopped,
    #[error("ConfigMap {namespace}/{name} key {key}: {reason}")]
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
        reason: String,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> MigPolicyError {
    let what = what.into();
    move |source| MigPolicyError::Api { what, source }
}

/// After a round that took `d`, the next waits at least `ROUND_PACE × d` (as the operator's
/// other loops): a round reads every node, and at thousands of nodes their labels change many
/// times a second.
const ROUND_PACE: u32 = 4;

/// Runs until `shutdown` resolves; a failed round is logged and retried with backoff.
pub async fn run<F>(client: kube::Client, opts: MigPolicyOptions, nodes: NodeWatch, shutdown: F)
where
    F: Future<Output = ()> + Send,
{
    let mut rounds = Rounds::new("MigClusterPolicy", opts.min_interval).pace(ROUND_PACE);
    rounds.trigger(nodes.clone().notify(rounds.wake()));
    // Metadata only: a trigger needs to know that something changed, not what. Pods matter
    // only to a policy's eviction rules, so without a policy there is no pod watch at all (a
    // rollout at thousands of nodes changes operand pods many times a second, and the API
    // server sends each change to every pod watch).
    let (with_policies, open) = watch::channel(false);
    rounds.trigger(pod_changes_while(client.clone(), open, rounds.wake()));
    rounds.on_changes(Api::<Touch<MigClusterPolicy>>::all(client.clone()));
    let (client, opts, nodes, with_policies) = (&client, &opts, &nodes, &with_policies);
    rounds
        .run(shutdown, move || async move {
            let (n, policies) = round(client, opts, nodes).await?;
            with_policies.send_if_modified(|open| {
                let was = std::mem::replace(open, policies > 0);
                was != *open
            });
            if n > 0 {
                tracing::debug!(actions = n, "MigClusterPolicy round");
            }
            Ok::<_, MigPolicyError>(opts.requeue)
        })
        .await;
}

/// Wakes `wake` on every pod change while `open` holds, with a watch of pod metadata that
/// runs only then.
async fn pod_changes_while(
    client: kube::Client,
    mut open: watch::Receiver<bool>,
    wake: Arc<Notify>,
) {
    loop {
        if open.wait_for(|o| *o).await.is_err() {
            return;
        }
        let pods = Api::<Touch<Pod>>::all(client.clone());
        tokio::select! {
            () = on_changes(pods, wake.clone(), "MigClusterPolicy") => return,
            closed = open.wait_for(|o| !*o) => {
                if closed.is_err() {
                    return;
                }
            }
        }
    }
}

/// A pod that holds GPUs: running or about to, asking for `nvidia.com/gpu`, `nvidia.com/mig-*`
/// or a KAI GPU fraction.
pub fn uses_gpus(pod: &Pod) -> bool {
    if matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    let fraction = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(names::ANNOTATION_GPU_FRACTION));
    let Some(spec) = &pod.spec else { return false };
    let gpu_key =
        |k: &String| k == names::RESOURCE_GPU || k.starts_with(names::RESOURCE_MIG_PREFIX);
    fraction
        || spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .filter_map(|c| c.resources.as_ref())
            .flat_map(|r| r.limits.iter().flatten().chain(r.requests.iter().flatten()))
            .any(|(k, _)| gpu_key(k))
}

/// node -> `namespace/name` of each pod there that holds GPUs.
async fn gpu_pods_by_node(
    client: &kube::Client,
) -> Result<BTreeMap<String, Vec<String>>, MigPolicyError> {
    // Lenient: one stored pod a typed client cannot decode must not fail every round.
    let api_pods = Api::<Lenient<Pod>>::all(client.clone());
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let fetch = |p: ListParams| {
        let api = api_pods.clone();
        async move { api.list(&p).await }
    };
    gantry_runtime::paged::each_page(ListParams::default(), PODS_PAGE, fetch, |items| {
        let items = items.into_iter().filter_map(Lenient::salvaged);
        for p in items.filter(uses_gpus) {
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                out.entry(node).or_default().push(format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                ));
            }
        }
    })
    .await
    .map_err(api("listing Pods"))?;
    Ok(out)
}

const PODS_PAGE: u32 = 500;

/// One round: read, decide, write. Returns the number of writes.
pub async fn reconcile_once(
    client: &kube::Client,
    opts: &MigPolicyOptions,
    node_watch: &NodeWatch,
) -> Result<usize, MigPolicyError> {
    Ok(round(client, opts, node_watch).await?.0)
}

/// [`reconcile_once`], also telling how many policies there are.
async fn round(
    client: &kube::Client,
    opts: &MigPolicyOptions,
    node_watch: &NodeWatch,
) -> Result<(usize, usize), MigPolicyError> {
    let papi: Api<MigClusterPolicy> = Api::all(client.clone());
    let mut policies = match papi.list(&ListParams::default()).await {
        Ok(l) => l.items,
        // The CRD is not installed (yet): nothing to do until it is.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok((0, 0)),
        Err(e) => return Err(api("listing MigClusterPolicies")(e)),
    };
    policies.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut writes = ensure_finalizers(&papi, &mut policies).await?;
    // Without a policy, nodes matter only to the inline layouts some may still use: with no
    // layouts ConfigMap either there is nothing to do, and no node is read (at thousands of
    // nodes their labels change many times a second, and each change wakes this loop).
    let layouts = layouts_config_map(client, opts).await?;
    if policies.is_empty() && layouts.is_none() {
        return Ok((writes, 0));
    }

    // Labels and annotations are all a node view needs: the shared metadata cache.
    if !node_watch.ready().await {
        return Err(MigPolicyError::NodeWatchStopped);
    }
    let nodes = node_watch.store().state();
    // Pods matter only to a policy's eviction rules: none, no list (a 1,000-node cluster's
    // pods are many megabytes), otherwise paged and reduced to node -> GPU pods as it goes.
    let mut gpu_pods = if policies.is_empty() {
        BTreeMap::new()
    } else {
        gpu_pods_by_node(client).await?
    };
    // Without a policy only the MIG config label matters (custom layouts still in use): a
    // copy of every node's labels each round was megabytes at 1,000 nodes.
    let labels_of = |n: &PartialObjectMeta<Node>| -> BTreeMap<String, String> {
        let all = n.metadata.labels.as_ref();
        if policies.is_empty() {
            all.and_then(|l| l.get_key_value(names::LABEL_MIG_CONFIG))
                .map(|(k, v)| (k.clone(), v.clone()))
                .into_iter()
                .collect()
        } else {
            all.cloned().unwrap_or_default()
        }
    };
    let views: Vec<NodeView> = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            NodeView {
                gpu_pods: gpu_pods.remove(&name).unwrap_or_default(),
                name,
                labels: labels_of(n),
                error: n
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(names::ANNOTATION_MIG_CONFIG_ERROR).cloned()),
            }
        })
        .collect();

    // Inline layouts first, so a node's MIG manager finds its config when the label arrives.
    writes += sync_custom_layouts(client, opts, layouts, &policies, &views).await?;

    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let decision = plan::decide(&policies, &views, &now);
    for a in &decision.actions {
        writes += 1;
        carry_out(client, a).await?;
    }
    for p in &policies {
        let Some(name) = &p.metadata.name else {
            continue;
        };
        let Some(status) = decision.statuses.get(name) else {
            continue;
        };
        if p.status.as_ref() != Some(status) {
            papi.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(api(format!("writing status of MigClusterPolicy {name}")))?;
            writes += 1;
        }
    }
    for name in &decision.finalize {
        if let Some(p) = policies
            .iter()
            .find(|p| p.metadata.name.as_ref() == Some(name))
        {
            set_finalizer(&papi, p, false).await?;
            writes += 1;
        }
    }
    Ok((writes, policies.len()))
}

/// Policies with `resetOnDelete` carry the finalizer; others do not (unless being deleted,
/// when [`plan::decide`] says when it may go).
async fn ensure_finalizers(
    papi: &Api<MigClusterPolicy>,
    policies: &mut [MigClusterPolicy],
) -> Result<usize, MigPolicyError> {
    let mut writes = 0;
    for p in policies.iter_mut() {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let has = has_finalizer(p);
        let want = p.spec.reset_on_delete();
        if has != want {
            *p = set_finalizer(papi, p, want).await?;
            writes += 1;
        }
    }
    Ok(writes)
}

fn has_finalizer(p: &MigClusterPolicy) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == names::FINALIZER_MIG_CLUSTER_POLICY)
}

async fn set_finalizer(
    papi: &Api<MigClusterPolicy>,
    p: &MigClusterPolicy,
    on: bool,
) -> Result<MigClusterPolicy, MigPolicyError> {
    let name = p.metadata.name.clone().unwrap_or_default();
    let mut list: Vec<String> = p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != names::FINALIZER_MIG_CLUSTER_POLICY)
        .cloned()
        .collect();
    if on {
        list.push(names::FINALIZER_MIG_CLUSTER_POLICY.to_string());
    }
    // The resourceVersion makes this a compare-and-swap on the list.
    let patch =
        json!({"metadata": {"finalizers": list, "resourceVersion": p.metadata.resource_version}});
    papi.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api(format!(
            "updating finalizers of MigClusterPolicy {name}"
        )))
}

/// Gantry's custom-layouts ConfigMap, if there is one.
async fn layouts_config_map(
    client: &kube::Client,
    opts: &MigPolicyOptions,
) -> Result<Option<ConfigMap>, MigPolicyError> {
    let (ns, name) = (&opts.namespace, names::CONFIG_MAP_MIG_CUSTOM_LAYOUTS);
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(api(format!("reading ConfigMap {ns}/{name}")))
}

async fn sync_custom_layouts(
    client: &kube::Client,
    opts: &MigPolicyOptions,
    existing: Option<ConfigMap>,
    policies: &[MigClusterPolicy],
    nodes: &[NodeView],
) -> Result<usize, MigPolicyError> {
    let ns = &opts.namespace;
    let name = names::CONFIG_MAP_MIG_CUSTOM_LAYOUTS;
    let key = names::MIG_PARTED_CONFIG_KEY;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let old_text = existing
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(key));
    let old: Option<MigPartedConfig> = match old_text {
        Some(t) => Some(
            serde_yaml::from_str(t).map_err(|e| MigPolicyError::ConfigMap {
                namespace: ns.clone(),
                name: name.to_string(),
                key: key.to_string(),
                reason: format!("not a mig-parted file ({e}); fix or delete it"),
            })?,
        ),
        None => None,
    };
    let wanted = custom::custom_layouts(
        policies,
        nodes
            .iter()
            .filter_map(|n| n.labels.get(names::LABEL_MIG_CONFIG).map(String::as_str)),
        old.as_ref(),
    );
    if old.as_ref() == Some(&wanted) || (existing.is_none() && wanted.mig_configs.is_empty()) {
        return Ok(0);
    }
    let text = serde_yaml::to_string(&wanted).map_err(|e| MigPolicyError::ConfigMap {
        namespace: ns.clone(),
        name: name.to_string(),
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    gantry_runtime::ensure_namespace(client, ns)
        .await
        .map_err(api(format!("creating Namespace {ns}")))?;
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"app.kubernetes.io/managed-by": "gantry"}},
        "data": {key: text},
    });
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    cms.patch(name, &pp, &Patch::Apply(&cm))
        .await
        .map_err(api(format!("writing ConfigMap {ns}/{name}")))?;
    Ok(1)
}

async fn carry_out(client: &kube::Client, action: &Action) -> Result<(), MigPolicyError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    match action {
        Action::SetConfig { node, config } => {
            tracing::info!(%node, %config, "MigClusterPolicy: selecting MIG config");
            let patch = json!({"metadata": {"labels": {
                names::LABEL_MIG_CONFIG: config,
                names::LABEL_MIG_CONFIG_STATE: mig_config_state::PENDING,
            }}});
            nodes
                .patch(node, &pp, &Patch::Merge(&patch))
                .await
                .map_err(api(format!("labelling Node {node}")))?;
        }
        Action::Claim { node } => {
            let patch = json!({"metadata": {"labels": {
                names::LABEL_MIG_CONFIG_STATE: mig_config_state::PENDING,
            }}});
            nodes
                .patch(node, &pp, &Patch::Merge(&patch))
                .await
                .map_err(api(format!("labelling Node {node}")))?;
        }
        Action::Evict { node, pods } => {
            for p in pods {
                let Some((ns, name)) = p.split_once('/') else {
                    continue;
                };
                tracing::info!(%node, pod = %p, "MigClusterPolicy: evicting GPU pod");
                let api_pods: Api<Pod> = Api::namespaced(client.clone(), ns);
                match api_pods.evict(name, &EvictParams::default()).await {
                    Ok(_) => {}
                    // Gone already, or a disruption budget says not now: retried next round.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 429 => {}
                    Err(e) => return Err(api(format!("evicting pod {p} from Node {node}"))(e)),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn gpu_pods_are_those_asking_for_gpus_mig_devices_or_fractions() {
        let whole = pod(json!({"metadata": {"name": "a"}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}));
        let mig = pod(json!({"metadata": {"name": "b"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}}));
        let fraction = pod(
            json!({"metadata": {"name": "c", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"containers": [{"name": "c"}]}}),
        );
        let cpu = pod(json!({"metadata": {"name": "d"}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}));
        let done = pod(json!({"metadata": {"name": "e"}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Succeeded"}}));
        assert!(uses_gpus(&whole) && uses_gpus(&mig) && uses_gpus(&fraction));
        assert!(!uses_gpus(&cpu) && !uses_gpus(&done));
    }
}
