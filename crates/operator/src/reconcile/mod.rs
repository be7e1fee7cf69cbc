//! The ClusterPolicy controller: read (caches) -> plan node labels and render (pure) ->
//! write what differs (server-side apply, one field manager) -> delete what no state renders
//! any more -> status (pure) -> write it if it changed.
//!
//! ClusterPolicies are watched untyped so that one the API server stored but the operator
//! cannot parse (e.g. `mig.strategy: bogus` on a server without schema validation) still
//! reaches the reconciler and becomes a condition instead of a watch error. Nodes are watched
//! metadata-only and filtered to label/annotation changes; every operand kind is watched by
//! the render's `LABEL_STATE` label, so deleting or editing an operand object reconciles.

pub mod apply;
mod nodes;
mod operand_pods;
mod operands;
pub mod plugin_config;
mod psa;

use gantry_runtime::touch::Touch;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use gantry_api::cluster_policy::{ClusterPolicy, ClusterPolicyStatus, condition};
use gantry_runtime::rounds::Rounds;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::FIELD_MANAGER;
use crate::metrics::{Metrics, Outcome};
use crate::render::{self, ClusterFacts, LABEL_STATE};
use crate::status::{self, Observed};

/// Requeue while any operand state is not ready (upstream: 5 s).
pub const REQUEUE_NOT_READY: Duration = Duration::from_secs(5);
/// Periodic resync of a ready policy.
pub const RESYNC: Duration = Duration::from_secs(300);

/// What the controller needs besides the client.
#[derive(Clone, Debug)]
pub struct ReconcileOptions {
    /// The operator's namespace (operand objects go here).
    pub namespace: String,
    /// Gantry's image, run by the operand DaemonSets.
    pub image: String,
    /// Upstream's OLM-style image variables (`DRIVER_IMAGE`, ...) of the operator process.
    pub image_env: BTreeMap<String, String>,
    /// Labels of the operator's own pods (the metrics Service selects them); empty: upstream's.
    pub operator_labels: BTreeMap<String, String>,
}

/// The operator-pod image variables upstream reads (`reference/gpu-operator.md` §1.2).
pub const IMAGE_ENV_VARS: &[&str] = &[
    "DRIVER_IMAGE",
    "VGPU_MANAGER_IMAGE",
    "CONTAINER_TOOLKIT_IMAGE",
    "DEVICE_PLUGIN_IMAGE",
    "SANDBOX_DEVICE_PLUGIN_IMAGE",
    "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
    "DCGM_EXPORTER_IMAGE",
    "DCGM_IMAGE",
    "GFD_IMAGE",
    "VALIDATOR_IMAGE",
    "MIG_MANAGER_IMAGE",
    "DRIVER_MANAGER_IMAGE",
    "GDS_IMAGE",
    "GDRCOPY_IMAGE",
    "VFIO_MANAGER_IMAGE",
    "VGPU_DEVICE_MANAGER_IMAGE",
    "KATA_MANAGER_IMAGE",
    "CC_MANAGER_IMAGE",
    "CUDA_BASE_IMAGE",
];

/// The image variables set in this process's environment.
pub fn image_env_from_process() -> BTreeMap<String, String> {
    IMAGE_ENV_VARS
        .iter()
        .filter_map(|k| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (k.to_string(), v))
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {object}: {source}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("rendered object of state {state} has no apiVersion, kind or metadata.name")]
    BadObject { state: &'static str },
    #[error(
        "rendered object {name} of state {state}: kind {kind} ({api_version}) is not one the operator can address"
    )]
    UnknownKind {
        state: &'static str,
        api_version: String,
        kind: String,
        name: String,
    },
}

impl Error {
    pub(crate) fn api(
        action: &'static str,
        object: impl Into<String>,
        source: kube::Error,
    ) -> Self {
        Error::Api {
            action,
            object: object.into(),
            source,
        }
    }
}

/// The ClusterPolicy resource.
pub fn cluster_policy_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nvidia.com", "v1", "ClusterPolicy"),
        "clusterpolicies",
    )
}

/// Per-controller state shared by every reconcile.
pub struct Ctx {
    pub(crate) client: kube::Client,
    pub(crate) opts: ReconcileOptions,
    pub(crate) metrics: Metrics,
    pub(crate) policies: Store<DynamicObject>,
    pub(crate) nodes: Store<PartialObjectMeta<Node>>,
    /// Pods in the operator's namespace, as much as the status rules read
    /// ([`operand_pods::OperandPod`]): for the readiness of OnDelete or not-yet-ready
    /// DaemonSets, instead of listing them per reconcile.
    pub(crate) pods: Store<operand_pods::OperandPod>,
    pub(crate) children: Vec<(apply::KindInfo, Store<DynamicObject>)>,
    /// (GPU node, its container runtime), read once per node rather than every reconcile.
    runtime: std::sync::Mutex<Option<(String, String)>>,
    synced: AtomicBool,
}

/// Drop the managers' bookkeeping from a watched object: no rule reads it, and at 1,000 nodes
/// it is most of a cached object's size.
pub(crate) fn strip_managed_fields<K: kube::Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Shortest gap between two rounds: a burst of operand events costs one round.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// After a round that took `d`, the next waits at least `ROUND_PACE × d`. A round plans every
/// GPU node and compares every operand object, so at thousands of nodes, where operand pods
/// change many times a second, back-to-back rounds would take a whole core; paced, the loop
/// spends at most a fifth of its time in rounds, and a small cluster still reacts in 100 ms.
const ROUND_PACE: u32 = 4;

/// Drive a reflector's stream: its store is what the round reads; every change (or none, for
/// a cache that is not a trigger) reaches `wake`.
async fn drive<S, T, E>(stream: S, wake: Option<Arc<tokio::sync::Notify>>, what: &'static str)
where
    S: futures::Stream<Item = Result<T, E>>,
    E: std::fmt::Display,
{
    futures::pin_mut!(stream);
    while let Some(r) = stream.next().await {
        match r {
            Ok(_) => {
                if let Some(w) = &wake {
                    w.notify_one();
                }
            }
            Err(e) => tracing::debug!(error = %e, "{what} watch (retrying)"),
        }
    }
}

/// Run the ClusterPolicy loop until `shutdown` resolves: one round reconciles every policy
/// (the oldest is in charge, the others are marked ignored); it runs again on any change of a
/// policy, a GPU node's labels or an operand object, and when a policy's requeue is due.
pub async fn run(
    client: kube::Client,
    opts: ReconcileOptions,
    metrics: Metrics,
    node_watch: crate::node_watch::NodeWatch,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let cp = cluster_policy_resource();
    let mut rounds = Rounds::new("ClusterPolicy", MIN_INTERVAL).pace(ROUND_PACE);
    let wake = rounds.wake();
    let mut waits = Vec::new();

    // ClusterPolicies, untyped (see the module header).
    let writer = reflector::store::Writer::new(cp.clone());
    let policies = writer.as_reader();
    rounds.trigger(drive(
        reflector::reflector(
            writer,
            watcher(
                Api::all_with(client.clone(), &cp),
                watcher::Config::default(),
            )
            .default_backoff(),
        ),
        Some(wake.clone()),
        "ClusterPolicy",
    ));
    waits.push({
        let s = policies.clone();
        async move { s.wait_until_ready().await.is_ok() }.boxed()
    });

    // Nodes: the shared metadata cache; a round on label/annotation changes.
    let nodes = node_watch.store().clone();
    rounds.trigger(node_watch.clone().notify(wake.clone()));
    waits.push({
        let w = node_watch.clone();
        async move { w.ready().await }.boxed()
    });

    // Operand pods: cached, not a trigger (a not-ready policy requeues every 5 s anyway).
    let (pods, pod_writer) = reflector::store();
    rounds.trigger(drive(
        reflector::reflector(
            pod_writer,
            watcher(
                Api::<operand_pods::OperandPod>::namespaced(client.clone(), &opts.namespace),
                watcher::Config::default(),
            )
            .default_backoff(),
        ),
        None,
        "operand pod",
    ));
    waits.push({
        let s = pods.clone();
        async move { s.wait_until_ready().await.is_ok() }.boxed()
    });

    // The operator namespace's ConfigMaps: the device-plugin config the status depends on
    // (created, edited, deleted) must be re-decided at once, not at the next resync.
    rounds.on_changes(Api::<Touch<ConfigMap>>::namespaced(
        client.clone(),
        &opts.namespace,
    ));

    // Operand objects, by the render's state label.
    let mut children = Vec::new();
    for kind in apply::watched() {
        let api: Api<DynamicObject> = if kind.namespaced {
            Api::namespaced_with(client.clone(), &opts.namespace, &kind.resource)
        } else {
            Api::all_with(client.clone(), &kind.resource)
        };
        let writer = reflector::store::Writer::new(kind.resource.clone());
        let store = writer.as_reader();
        rounds.trigger(drive(
            reflector::reflector(
                writer,
                watcher(api, watcher::Config::default().labels(LABEL_STATE))
                    .default_backoff()
                    .modify(strip_managed_fields),
            ),
            Some(wake.clone()),
            "operand",
        ));
        waits.push({
            let s = store.clone();
            async move { s.wait_until_ready().await.is_ok() }.boxed()
        });
        children.push((kind, store));
    }

    let ctx = Arc::new(Ctx {
        client,
        opts,
        metrics,
        policies,
        nodes,
        pods,
        children,
        runtime: std::sync::Mutex::new(None),
        synced: AtomicBool::new(false),
    });
    // Reconciling before every cache is filled could delete objects it has not seen yet.
    let sync_ctx = ctx.clone();
    rounds.trigger(async move {
        let all = futures::future::join_all(waits).await;
        tracing::debug!(caches = ?all, "operator caches filled");
        if all.into_iter().all(|ok| ok) {
            sync_ctx.synced.store(true, Ordering::Release);
            sync_ctx.metrics.set_ready(true);
            wake.notify_one();
        }
    });
    let ctx = &ctx;
    rounds.run(shutdown, move || round(ctx)).await;
}

/// Reconcile every policy once; returns when the next round is due without a change, or
/// the policies that failed (their failure is counted and written to their status; the loop
/// logs it and retries with backoff).
async fn round(ctx: &Ctx) -> Result<Duration, String> {
    if !ctx.synced.load(Ordering::Acquire) {
        return Ok(Duration::from_millis(500));
    }
    let mut next = RESYNC;
    let mut failed = Vec::new();
    for obj in ctx.policies.state() {
        let name = obj.metadata.name.clone().unwrap_or_default();
        match reconcile(obj, ctx).await {
            Ok(Some(requeue)) => next = next.min(requeue),
            Ok(None) => {}
            Err(e) => failed.push(format!("ClusterPolicy {name}: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(next)
    } else {
        Err(failed.join("; "))
    }
}

/// The active policy: oldest creationTimestamp, ties broken by lowest name.
pub fn active_name(all: &[Arc<DynamicObject>]) -> Option<String> {
    gantry_api::cluster_policy::active(all, |p| &p.metadata).and_then(|p| p.metadata.name.clone())
}

/// Reconcile one policy; `Some(after)`: reconcile it again `after` even without a change.
async fn reconcile(obj: Arc<DynamicObject>, ctx: &Ctx) -> Result<Option<Duration>, Error> {
    if !ctx.synced.load(Ordering::Acquire) {
        return Ok(Some(Duration::from_millis(500)));
    }
    let started = Instant::now();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let active = active_name(&ctx.policies.state());
    if active.as_deref() != Some(name.as_str()) {
        let active = active.unwrap_or_default();
        write_status(ctx, &obj, status::ignored(&ctx.opts.namespace, &active)).await?;
        return Ok(None);
    }
    let result = reconcile_active(&obj, ctx).await;
    let secs = started.elapsed().as_secs_f64();
    match result {
        Ok((outcome, action)) => {
            ctx.metrics.reconciled(outcome, secs);
            Ok(action)
        }
        Err(e) => {
            ctx.metrics.reconciled(Outcome::Failed, secs);
            let st = status::failed(
                &ctx.opts.namespace,
                condition::REASON_RECONCILE_FAILED,
                e.to_string(),
            );
            if let Err(se) = write_status(ctx, &obj, st).await {
                tracing::warn!(error = %se, "writing the failure status");
            }
            Err(e)
        }
    }
}

/// Why a stored ClusterPolicy does not parse, naming the fields.
fn explain_invalid(obj: &serde_json::Value, err: &serde_json::Error) -> String {
    let problems = gantry_api::validate::validate_value(obj);
    if problems.is_empty() {
        format!("invalid spec: {err}")
    } else {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        format!("invalid spec: {}", list.join("; "))
    }
}

async fn reconcile_active(
    obj: &DynamicObject,
    ctx: &Ctx,
) -> Result<(Outcome, Option<Duration>), Error> {
    let ns = ctx.opts.namespace.as_str();
    let json = serde_json::to_value(obj).unwrap_or_default();
    let policy: ClusterPolicy = match serde_json::from_value(json.clone()) {
        Ok(p) => p,
        Err(e) => {
            let msg = explain_invalid(&json, &e);
            let st = status::failed(ns, condition::REASON_RECONCILE_FAILED, msg);
            write_status(ctx, obj, st).await?;
            return Ok((Outcome::Failed, None));
        }
    };
    let spec = &policy.spec;

    // Node labels: planned now, written only once the render accepted the spec.
    let plans = nodes::plan_all(spec, &ctx.nodes.state());
    ctx.metrics.observed(
        plans.gpu_nodes.len(),
        plans.nfd_present,
        spec.driver_auto_upgrade(),
    );
    let facts = ClusterFacts {
        namespace: ns.to_string(),
        operator_image: ctx.opts.image.clone(),
        gpu_nodes: plans.gpu_nodes.clone(),
        has_service_monitor_crd: operands::crd_exists(ctx, "servicemonitors.monitoring.coreos.com")
            .await?,
        has_prometheus_rule_crd: operands::crd_exists(ctx, "prometheusrules.monitoring.coreos.com")
            .await?,
        image_env: ctx.opts.image_env.clone(),
        container_runtime: container_runtime(ctx, &plans.gpu_nodes).await?,
        operator_labels: ctx.opts.operator_labels.clone(),
        owner: Some(OwnerReference {
            api_version: "nvidia.com/v1".into(),
            kind: "ClusterPolicy".into(),
            name: obj.metadata.name.clone().unwrap_or_default(),
            uid: obj.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }),
    };
    let rendered = match render::render(&policy, &facts) {
        Ok(r) => r,
        Err(e) => {
            let st = status::failed(ns, condition::REASON_RECONCILE_FAILED, e.to_string());
            write_status(ctx, obj, st).await?;
            return Ok((Outcome::Failed, None));
        }
    };

    // An unusable device-plugin ConfigMap holds back only the states that read it.
    let plugin_problem = plugin_config::check(ctx, spec).await?;
    let held: &[render::State] = if let Some(msg) = &plugin_problem {
        tracing::warn!(error = %msg, "holding back the device plugin: its config is unusable");
        plugin_config::HELD
    } else {
        &[]
    };
    psa::ensure(ctx, spec).await?;
    nodes::write_all(ctx, &plans.changes).await?;
    let desired = operands::apply_all(ctx, &rendered, held).await?;
    operands::delete_stale(ctx, &desired, &facts, held).await?;

    let (states, crash_looping) = operands::readiness(ctx, &rendered).await?;
    let observed = Observed {
        states,
        crash_looping,
        gpu_nodes: plans.gpu_nodes.len(),
        nfd_present: plans.nfd_present,
        held: plugin_problem.map(|message| status::Held {
            reason: plugin_config::REASON,
            message,
            states: held.to_vec(),
        }),
    };
    let st = status::compute(ns, &observed);
    let ready = st.state == gantry_api::cluster_policy::ClusterPolicyState::Ready;
    write_status(ctx, obj, st).await?;
    Ok(if ready {
        (Outcome::Ready, Some(RESYNC))
    } else {
        (Outcome::NotReady, Some(REQUEUE_NOT_READY))
    })
}

/// The container runtime of the GPU nodes, as upstream detects it: from the first GPU node's
/// `status.nodeInfo.containerRuntimeVersion` prefix (`containerd`, `cri-o` -> `crio`,
/// `docker`); empty (the render's containerd) when unknown.
async fn container_runtime(ctx: &Ctx, gpu_nodes: &[render::NodeFacts]) -> Result<String, Error> {
    let Some(first) = gpu_nodes.first() else {
        return Ok(String::new());
    };
    if let Ok(cached) = ctx.runtime.lock()
        && let Some((node, rt)) = cached.as_ref()
        && *node == first.name
    {
        return Ok(rt.clone());
    }
    let api: Api<Node> = Api::all(ctx.client.clone());
    let node = api
        .get_opt(&first.name)
        .await
        .map_err(|e| Error::api("reading", format!("Node {}", first.name), e))?;
    let version = node
        .and_then(|n| n.status)
        .and_then(|s| s.node_info)
        .map(|i| i.container_runtime_version)
        .unwrap_or_default();
    let rt = runtime_of(&version).to_string();
    if let Ok(mut cached) = ctx.runtime.lock() {
        *cached = Some((first.name.clone(), rt.clone()));
    }
    Ok(rt)
}

/// `containerd://1.7.0` -> `containerd`; `cri-o://…` -> `crio`; unknown -> "".
pub fn runtime_of(version: &str) -> &'static str {
    let scheme = version.split("://").next().unwrap_or("");
    match scheme {
        "containerd" => "containerd",
        "cri-o" => "crio",
        "docker" => "docker",
        _ => "",
    }
}

/// Write `new` as the policy's status unless the stored one already says the same.
async fn write_status(
    ctx: &Ctx,
    obj: &DynamicObject,
    new: ClusterPolicyStatus,
) -> Result<(), Error> {
    let old: Option<ClusterPolicyStatus> = obj
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let new = status::with_times(new, old.as_ref(), k8s_openapi::jiff::Timestamp::now());
    if old.as_ref().is_some_and(|o| status::same_status(o, &new)) {
        return Ok(());
    }
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &cluster_policy_resource());
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let body = serde_json::json!({ "status": new });
    ctx.metrics.wrote();
    api.patch_status(&name, &pp, &Patch::Merge(&body))
        .await
        .map_err(|e| Error::api("writing status of", format!("ClusterPolicy {name}"), e))?;
    Ok(())
}
