//! The shell: list the cluster, build the view, plan, apply. Woken by watches on Nodes, the
//! operator namespace's Pods, DaemonSets and ClusterPolicies, by a short requeue while a node
//! is mid upgrade, and by a periodic requeue (upstream: every 2 minutes).
//!
//! Node writes are JSON merge patches under their own field manager: removing a label or an
//! annotation someone else set (`…upgrade-requested`) and flipping `spec.unschedulable`, which
//! `kubectl cordon` shares, are exactly what server-side apply's ownership makes awkward.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::lenient::Lenient;
use gantry_api::names;
use gantry_api::nvidia_driver::NVIDIADriver;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use serde_json::json;
use tokio::sync::Notify;

use crate::node_watch::NodeWatch;

use super::plan::{self, Action, Config, PlanError};
use super::pools::plan_pools;
use super::state::UpgradeState;
use super::view::{self, ClusterView};

/// Field manager of the upgrade controller's node writes.
pub const FIELD_MANAGER: &str = "gantry-operator-upgrade";
/// Event reason (upper-cased driver name + `DriverUpgrade`, as upstream).
pub const EVENT_REASON: &str = "GPUDriverUpgrade";

#[derive(Debug, Clone)]
pub struct UpgradeOptions {
    /// Namespace of the driver DaemonSets (the operator namespace).
    pub namespace: String,
    /// Periodic re-plan even without events.
    pub requeue: Duration,
    /// Re-plan at least this often while a node is mid-upgrade: its waits (the driver's
    /// minimum ready time, job and validation time-outs) end without any event.
    pub busy_requeue: Duration,
    /// Shortest gap between two rounds (a busy cluster's pod events are coalesced).
    pub min_interval: Duration,
    /// A driver pod counts as ready once its containers have run this long (the DaemonSet
    /// `minReadySeconds` idea; keeps a crash-looping driver's brief Ready from counting).
    pub driver_min_ready: Duration,
    pub config: Config,
}

impl UpgradeOptions {
    /// Upstream's timings for the operator in `namespace`.
    pub fn new(namespace: &str) -> Self {
        UpgradeOptions {
            namespace: namespace.into(),
            ..Default::default()
        }
    }
}

impl Default for UpgradeOptions {
    fn default() -> Self {
        UpgradeOptions {
            namespace: "gpu-operator".into(),
            requeue: Duration::from_secs(120),
            busy_requeue: Duration::from_secs(2),
            min_interval: Duration::from_secs(1),
            driver_min_ready: Duration::from_secs(5),
            config: Config::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("listing {what}: {source}")]
    List {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("driver upgrade: {count} action(s) failed; first: {first}")]
    Apply { count: usize, first: String },
    #[error("the node watch stopped before its first list")]
    NodeWatchStopped,
}

fn list_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> UpgradeError {
    let what = what.into();
    move |source| UpgradeError::List { what, source }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Run until `shutdown` resolves. A failed round is logged and retried on the next wake-up.
pub async fn run<F>(client: kube::Client, opts: UpgradeOptions, nodes: NodeWatch, shutdown: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let wake = Arc::new(Notify::new());
    let triggers = vec![
        tokio::spawn(nodes.clone().notify(wake.clone())),
        // The operator namespace's pods only (driver and validator pods): a node mid upgrade
        // re-plans every `busy_requeue` anyway, and every pod of a busy cluster waking a
        // round was most of this loop's work.
        tokio::spawn(crate::wake::on_changes(
            Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), &opts.namespace),
            wake.clone(),
            "driver upgrade",
        )),
        tokio::spawn(crate::wake::on_changes(
            Api::<PartialObjectMeta<DaemonSet>>::namespaced(client.clone(), &opts.namespace),
            wake.clone(),
            "driver upgrade",
        )),
        tokio::spawn(crate::wake::on_changes(
            Api::<PartialObjectMeta<ClusterPolicy>>::all(client.clone()),
            wake.clone(),
            "driver upgrade",
        )),
        tokio::spawn(crate::wake::on_changes(
            Api::<PartialObjectMeta<NVIDIADriver>>::all(client.clone()),
            wake.clone(),
            "driver upgrade",
        )),
    ];
    tokio::pin!(shutdown);
    loop {
        let mut next = opts.requeue;
        match reconcile_once(&client, &opts, &nodes).await {
            Ok(r) => {
                if r.actions > 0 {
                    tracing::debug!(actions = r.actions, "driver upgrade round");
                }
                if r.in_flight {
                    next = next.min(opts.busy_requeue);
                }
            }
            Err(e) => tracing::warn!(error = %e, "driver upgrade round failed"),
        }
        tokio::select! {
            () = &mut shutdown => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(next) => {}
        }
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(opts.min_interval) => {}
        }
    }
    for t in triggers {
        t.abort();
    }
}

/// The ClusterPolicy in charge: the oldest (others are `ignored`).
fn active_policy(mut list: Vec<ClusterPolicy>) -> Option<ClusterPolicy> {
    list.sort_by(|a, b| {
        let t = |c: &ClusterPolicy| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(a).cmp(&t(b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    list.into_iter().next()
}

fn owned_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid)
}

fn label_is(labels: Option<&BTreeMap<String, String>>, key: &str, value: &str) -> bool {
    labels.and_then(|l| l.get(key)).map(String::as_str) == Some(value)
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// Actions applied.
    pub actions: usize,
    /// Some node is mid-upgrade (holds an upgrade slot) after the round.
    pub in_flight: bool,
}

/// One round: list, plan, apply.
pub async fn reconcile_once(
    client: &kube::Client,
    opts: &UpgradeOptions,
    node_watch: &NodeWatch,
) -> Result<Round, UpgradeError> {
    let lp = ListParams::default();
    let policies = match Api::<ClusterPolicy>::all(client.clone()).list(&lp).await {
        Ok(l) => l.items,
        Err(e) if not_found(&e) => Vec::new(),
        Err(e) => return Err(list_err("ClusterPolicies")(e)),
    };
    let Some(policy) = active_policy(policies) else {
        return Ok(Round::default());
    };
    let dss = Api::<DaemonSet>::namespaced(client.clone(), &opts.namespace)
        .list(&lp)
        .await
        .map_err(list_err(format!("DaemonSets in {}", opts.namespace)))?
        .items;
    let is_driver = |d: &DaemonSet| {
        label_is(
            d.metadata.labels.as_ref(),
            names::LABEL_APP_COMPONENT,
            names::COMPONENT_NVIDIA_DRIVER,
        )
    };
    let drivers: Vec<&DaemonSet> = dss.iter().filter(|d| is_driver(d)).collect();
    let validator_expected = dss.iter().any(|d| {
        label_is(
            d.spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.as_ref()),
            names::LABEL_APP,
            names::app::OPERATOR_VALIDATOR,
        )
    });
    // With NVIDIADriver CRs each CR's pool is walked under that CR's upgrade policy.
    let pools = if policy.spec.use_nvidia_driver_crd() {
        Some(match crate::nvdriver::upgrade_policies(client).await {
            Ok(p) => p,
            Err(e) if not_found(&e) => Vec::new(),
            Err(e) => return Err(list_err("NVIDIADrivers")(e)),
        })
    } else {
        None
    };
    let auto = match &pools {
        Some(p) => p.iter().any(|(_, up)| up.auto_upgrade),
        None => policy.spec.driver_auto_upgrade(),
    };
    if auto && drivers.is_empty() {
        // No driver DaemonSet (yet, or the driver is not managed here): nothing to walk, and
        // the labels stay as they are in case it is only being recreated.
        return Ok(Round::default());
    }
    if auto && let Some(ds) = drivers.iter().find(|d| !scheduled_everywhere(d)) {
        // The plan would wait for the missing pods anyway (see `build_view`); during a rollout
        // this check spares every round the node and pod lists.
        tracing::debug!(
            daemonset = ds.metadata.name.as_deref().unwrap_or_default(),
            "driver upgrade waiting: a driver DaemonSet is still placing its pods"
        );
        return Ok(Round::default());
    }
    let (nodes, uids) = list_nodes(client, auto, node_watch).await?;
    let in_flight: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| {
            UpgradeState::parse(n.label(names::LABEL_UPGRADE_STATE).unwrap_or("")).in_flight()
        })
        .map(|n| n.name.as_str())
        .collect();
    let busy = !in_flight.is_empty();

    // A driver pod that is Ready but not yet for `driver_min_ready` turns ready by the clock
    // alone: no watch event will say so, so the round must come back on its own.
    let mut settling = false;
    let (plan, planned_view_nodes) = if !auto {
        let v = ClusterView {
            nodes,
            ..Default::default()
        };
        (plan::disable(&v), v.nodes.len())
    } else {
        let up = policy.spec.driver_upgrade_policy();
        if pools.is_none() && up.is_none() {
            return Ok(Round::default());
        }
        let pods = list_pods(client, &opts.namespace, &drivers, &in_flight).await?;
        let revisions = match Api::<ControllerRevision>::namespaced(client.clone(), &opts.namespace)
            .list(&lp)
            .await
        {
            Ok(l) => l.items,
            Err(e) if not_found(&e) => Vec::new(),
            Err(e) => return Err(list_err("ControllerRevisions")(e)),
        };
        let now = Timestamp::now().as_second();
        let v = build_view(
            nodes,
            &drivers,
            &revisions,
            &pods,
            validator_expected,
            &opts.namespace,
            (now, opts.driver_min_ready.as_secs() as i64),
        );
        settling = v.driver_pods.iter().any(|d| d.settling);
        match (&pools, up) {
            (Some(pools), _) => (plan_pools(&v, pools, &opts.config, now), v.nodes.len()),
            (None, Some(up)) => (plan::plan(&v, &up, &opts.config, now)?, v.nodes.len()),
            (None, None) => return Ok(Round::default()),
        }
    };
    if let Some(w) = &plan.waiting {
        tracing::debug!(nodes = planned_view_nodes, "driver upgrade waiting: {w}");
    }
    let actions = apply(client, &plan.actions, &uids).await?;
    Ok(Round {
        actions,
        // A round that moved something is likely to have started a wait.
        in_flight: busy || settling || actions > 0,
    })
}

/// Whether the DaemonSet's status says it has a pod on every node it wants one on.
fn scheduled_everywhere(ds: &DaemonSet) -> bool {
    ds.status.as_ref().is_some_and(|s| {
        s.current_number_scheduled + s.number_misscheduled >= s.desired_number_scheduled
    })
}

/// The pods a round reads: the driver pods (the operator namespace, paged, kept only if a driver
/// DaemonSet owns them or they are orphaned driver pods) and every pod on a node that is mid
/// upgrade (the waits, deletions, drains and validation read those). Not every pod of the
/// cluster: at 1,000 nodes that list was tens of megabytes, every round.
async fn list_pods(
    client: &kube::Client,
    namespace: &str,
    drivers: &[&DaemonSet],
    in_flight: &BTreeSet<&str>,
) -> Result<Vec<Pod>, UpgradeError> {
    let uids: Vec<&str> = drivers
        .iter()
        .filter_map(|d| d.metadata.uid.as_deref())
        .collect();
    let mut out: BTreeMap<(String, String), Pod> = BTreeMap::new();
    let mut keep = |mut p: Pod| {
        p.metadata.managed_fields = None;
        let key = (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        );
        out.insert(key, p);
    };
    // Lenient: one stored pod a typed client cannot decode must not fail every round.
    let in_ns = Api::<Lenient<Pod>>::namespaced(client.clone(), namespace);
    let fetch = |p: ListParams| {
        let api = in_ns.clone();
        async move { api.list(&p).await }
    };
    crate::paged::each_page(ListParams::default(), PODS_PAGE, fetch, |items| {
        for p in items.into_iter().filter_map(Lenient::salvaged) {
            if uids.iter().any(|u| owned_by(&p, u)) || orphan_driver_pod(&p) {
                keep(p);
            }
        }
    })
    .await
    .map_err(list_err(format!("Pods in {namespace}")))?;
    if in_flight.is_empty() {
        return Ok(out.into_values().collect());
    }
    let all = Api::<Lenient<Pod>>::all(client.clone());
    let fetch = |p: ListParams| {
        let api = all.clone();
        async move { api.list(&p).await }
    };
    // A few nodes: one field-selected list each; many: one paged pass over every pod.
    let selectors: Vec<Option<String>> = if in_flight.len() <= PER_NODE_LISTS {
        in_flight
            .iter()
            .map(|n| Some(format!("spec.nodeName={n}")))
            .collect()
    } else {
        vec![None]
    };
    for sel in selectors {
        let params = match &sel {
            Some(f) => ListParams::default().fields(f),
            None => ListParams::default(),
        };
        crate::paged::each_page(params, PODS_PAGE, &fetch, |items| {
            for p in items.into_iter().filter_map(Lenient::salvaged) {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if node.is_some_and(|n| in_flight.contains(n)) {
                    keep(p);
                }
            }
        })
        .await
        .map_err(list_err("Pods on nodes mid upgrade"))?;
    }
    Ok(out.into_values().collect())
}

/// A driver pod no DaemonSet owns (its DaemonSet was deleted with orphan propagation).
fn orphan_driver_pod(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .as_ref()
        .is_none_or(Vec::is_empty)
        && is_driver_pod(p)
}

fn is_driver_pod(p: &Pod) -> bool {
    let labels = p.metadata.labels.as_ref();
    label_is(labels, names::LABEL_APP, names::app::DRIVER)
        || label_is(
            labels,
            names::LABEL_APP_COMPONENT,
            names::COMPONENT_NVIDIA_DRIVER,
        )
}

const PODS_PAGE: u32 = 500;
/// Up to this many nodes mid upgrade, their pods are listed node by node.
const PER_NODE_LISTS: usize = 8;

/// The nodes as the plan sees them, and their uids (for Events). Without auto-upgrade the round
/// only clears labels, so the shared metadata cache is enough; a walk also reads
/// `spec.unschedulable` and the `Ready` condition: listed in pages, each page reduced to views
/// before the next is asked for.
async fn list_nodes(
    client: &kube::Client,
    full: bool,
    node_watch: &NodeWatch,
) -> Result<(Vec<view::NodeView>, BTreeMap<String, String>), UpgradeError> {
    let mut views = Vec::new();
    let mut uids = BTreeMap::new();
    let mut take = |node: &Node| {
        if let Some(v) = view::node_view(node) {
            if let Some(uid) = &node.metadata.uid {
                uids.insert(v.name.clone(), uid.clone());
            }
            views.push(v);
        }
    };
    if !full {
        if !node_watch.ready().await {
            return Err(UpgradeError::NodeWatchStopped);
        }
        // Labels and annotations only: what clearing the upgrade labels reads.
        for m in node_watch.store().state() {
            let Some(name) = &m.metadata.name else {
                continue;
            };
            if let Some(uid) = &m.metadata.uid {
                uids.insert(name.clone(), uid.clone());
            }
            views.push(view::NodeView {
                name: name.clone(),
                labels: m.metadata.labels.clone().unwrap_or_default(),
                annotations: m.metadata.annotations.clone().unwrap_or_default(),
                unschedulable: false,
                ready: false,
            });
        }
        return Ok((views, uids));
    }
    let api = Api::<Node>::all(client.clone());
    let fetch = |p: ListParams| {
        let api = api.clone();
        async move { api.list(&p).await }
    };
    crate::paged::each_page(
        ListParams::default(),
        NODES_PAGE,
        fetch,
        |items: Vec<Node>| items.iter().for_each(&mut take),
    )
    .await
    .map_err(list_err("Nodes"))?;
    Ok((views, uids))
}

const NODES_PAGE: u32 = 500;

/// Build the core's view from listed objects.
pub fn build_view(
    nodes: Vec<view::NodeView>,
    drivers: &[&DaemonSet],
    revisions: &[ControllerRevision],
    pods: &[Pod],
    validator_expected: bool,
    namespace: &str,
    (now, min_ready_s): (i64, i64),
) -> ClusterView {
    let mut driver_pods = Vec::new();
    let mut complete = true;
    for ds in drivers {
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let owned: Vec<&Pod> = pods.iter().filter(|p| owned_by(p, &uid)).collect();
        let desired = ds
            .status
            .as_ref()
            .map(|s| s.desired_number_scheduled)
            .unwrap_or(0);
        if i32::try_from(owned.len()).unwrap_or(i32::MAX) != desired {
            complete = false;
        }
        let rev = view::current_revision(ds, revisions, &owned);
        driver_pods.extend(
            owned
                .iter()
                .filter_map(|p| view::driver_pod(p, Some(&rev), now, min_ready_s)),
        );
    }
    // Orphaned driver pods (their DaemonSet was deleted with orphan propagation) need upgrading.
    for p in pods {
        if p.metadata.namespace.as_deref() == Some(namespace) && orphan_driver_pod(p) {
            driver_pods.extend(view::driver_pod(p, None, now, min_ready_s));
        }
    }
    let driver_keys: HashSet<(String, String)> = driver_pods
        .iter()
        .map(|d| (d.key.namespace.clone(), d.key.name.clone()))
        .collect();
    let others = pods
        .iter()
        .filter(|p| {
            !driver_keys.contains(&(
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            ))
        })
        .filter_map(view::pod_view)
        .collect();
    ClusterView {
        nodes,
        driver_pods,
        pods: others,
        driver_pods_complete: complete,
        validator_expected,
    }
}

async fn patch_node(
    client: &kube::Client,
    node: &str,
    body: serde_json::Value,
) -> Result<(), kube::Error> {
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    Api::<Node>::all(client.clone())
        .patch(node, &pp, &Patch::Merge(&body))
        .await
        .map(|_| ())
}

async fn event(
    client: &kube::Client,
    node: &str,
    uid: Option<&String>,
    warning: bool,
    message: &str,
) {
    let now = Timestamp::now();
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(format!("{node}.{:x}", now.as_nanosecond())),
            namespace: Some("default".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            uid: uid.cloned(),
            ..Default::default()
        },
        reason: Some(EVENT_REASON.into()),
        message: Some(message.to_string()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(crate::FIELD_MANAGER.into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    };
    if let Err(e) = Api::<Event>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ev)
        .await
    {
        tracing::debug!(node, error = %e, "recording a driver upgrade event failed");
    }
}

/// Apply actions in order; a failed action skips the rest of its node's actions this round
/// (so the state label, which comes last, is not advanced past work that did not happen).
async fn apply(
    client: &kube::Client,
    actions: &[Action],
    uids: &BTreeMap<String, String>,
) -> Result<usize, UpgradeError> {
    let mut broken: HashSet<String> = HashSet::new();
    let mut failures: Vec<String> = Vec::new();
    let mut done = 0usize;
    for a in actions {
        let node = a.node();
        if broken.contains(node) {
            continue;
        }
        let result: Result<(), kube::Error> = match a {
            Action::SetState { node, state } => {
                let r = patch_node(
                    client,
                    node,
                    json!({"metadata": {"labels": {names::LABEL_UPGRADE_STATE: state.label()}}}),
                )
                .await;
                if r.is_ok() {
                    tracing::info!(node, state = %state, "driver upgrade state");
                    let warning = *state == super::UpgradeState::UpgradeFailed;
                    let msg = format!("Successfully updated node state label to {state}");
                    event(client, node, uids.get(node), warning, &msg).await;
                }
                r
            }
            Action::ClearState { node } => {
                patch_node(
                    client,
                    node,
                    json!({"metadata": {"labels": {names::LABEL_UPGRADE_STATE: null}}}),
                )
                .await
            }
            Action::Annotate { node, key, value } => {
                patch_node(
                    client,
                    node,
                    json!({"metadata": {"annotations": {*key: value}}}),
                )
                .await
            }
            Action::Cordon { node } => {
                patch_node(client, node, json!({"spec": {"unschedulable": true}})).await
            }
            Action::Uncordon { node } => {
                patch_node(client, node, json!({"spec": {"unschedulable": null}})).await
            }
            Action::Evict { pod, .. } => {
                let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
                match api.evict(&pod.name, &EvictParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(e) if not_found(&e) => Ok(()),
                    // A PodDisruptionBudget says not now: try again next round (the timeout
                    // annotation bounds how long).
                    Err(kube::Error::Api(s)) if s.code == 429 => {
                        tracing::info!(pod = %pod, "eviction blocked by a disruption budget; retrying");
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Action::DeletePod { pod, .. } => {
                let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
                match api.delete(&pod.name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(e) if not_found(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Action::Event {
                node,
                warning,
                message,
            } => {
                event(client, node, uids.get(node), *warning, message).await;
                Ok(())
            }
        };
        match result {
            Ok(()) => done += 1,
            Err(e) => {
                broken.insert(node.to_string());
                failures.push(format!("node {node}: {a:?}: {e}"));
            }
        }
    }
    match failures.first() {
        None => Ok(done),
        Some(first) => Err(UpgradeError::Apply {
            count: failures.len(),
            first: first.clone(),
        }),
    }
}
