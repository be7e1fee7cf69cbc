//! The shell: list the cluster, build the view, plan, apply. Woken by watches on Nodes, the
//! operator namespace's Pods, DaemonSets and ClusterPolicies, by a short requeue while a node
//! is mid upgrade, and by a periodic requeue (upstream: every 2 minutes).
//!
//! Node writes are JSON merge patches under their own field manager: removing a label or an
//! annotation someone else set (`…upgrade-requested`) and flipping `spec.unschedulable`, which
//! `kubectl cordon` shares, are exactly what server-side apply's ownership makes awkward.

use gantry_runtime::touch::Touch;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::time::Duration;

use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::names;
use gantry_api::nvidia_driver::NVIDIADriver;
use gantry_runtime::rounds::Rounds;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use serde_json::json;

mod lists;
mod writes;

pub use lists::build_view;
use lists::*;
use writes::*;

use crate::node_watch::NodeWatch;

use super::plan::{self, Action, Config, PlanError, PolicyAt};
use super::pools::plan_pools;
use super::state::UpgradeState;
use super::view::{self, ClusterView};

/// Field manager of the upgrade controller's node writes.
pub const FIELD_MANAGER: &str = "gantry-operator-upgrade";
/// Event reason (upper-cased driver name + `DriverUpgrade`, as upstream).
pub const EVENT_REASON: &str = "GPUDriverUpgrade";

/// After a round that took `d`, the next waits at least `ROUND_PACE × d`: each node moves one
/// state per round, so on a small cluster the walk goes as fast as the writes land, while a
/// large cluster's rounds (thousands of nodes and pods listed) take at most a fifth of the
/// loop's time.
pub const ROUND_PACE: u32 = 4;

#[derive(Debug, Clone)]
pub struct UpgradeOptions {
    /// Namespace of the driver DaemonSets (the operator namespace).
    pub namespace: String,
    /// Periodic re-plan even without events.
    pub requeue: Duration,
    /// Re-plan at least this often while a node is mid-upgrade: its waits (the driver's
    /// minimum ready time, job and validation time-outs) end without any event.
    pub busy_requeue: Duration,
    /// Shortest gap between two rounds (a busy cluster's pod events are coalesced). Rounds are
    /// also paced by their cost ([`ROUND_PACE`]), so a short gap costs a large cluster nothing.
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
            min_interval: Duration::from_millis(200),
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

/// Run until `shutdown` resolves. A failed round is logged and retried with backoff.
pub async fn run<F>(client: kube::Client, opts: UpgradeOptions, nodes: NodeWatch, shutdown: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut rounds = Rounds::new("driver upgrade", opts.min_interval).pace(ROUND_PACE);
    rounds.trigger(nodes.clone().notify(rounds.wake()));
    // The operator namespace's pods only (driver and validator pods): a node mid upgrade
    // re-plans every `busy_requeue` anyway, and every pod of a busy cluster waking a
    // round was most of this loop's work.
    rounds.on_changes(Api::<Touch<Pod>>::namespaced(
        client.clone(),
        &opts.namespace,
    ));
    rounds.on_changes(Api::<Touch<DaemonSet>>::namespaced(
        client.clone(),
        &opts.namespace,
    ));
    rounds.on_changes(Api::<Touch<ClusterPolicy>>::all(client.clone()));
    rounds.on_changes(Api::<Touch<NVIDIADriver>>::all(client.clone()));
    let (client, opts, nodes) = (&client, &opts, &nodes);
    rounds
        .run(shutdown, move || async move {
            let r = reconcile_once(client, opts, nodes).await?;
            if r.actions > 0 {
                tracing::debug!(actions = r.actions, "driver upgrade round");
            }
            Ok::<_, UpgradeError>(if r.in_flight {
                opts.requeue.min(opts.busy_requeue)
            } else {
                opts.requeue
            })
        })
        .await;
}

/// The ClusterPolicy in charge (one rule for the whole operator: `cluster_policy::active`).
fn active_policy(list: Vec<ClusterPolicy>) -> Option<ClusterPolicy> {
    gantry_api::cluster_policy::active(&list, |p| &p.metadata).cloned()
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
            (None, Some(up)) => {
                let at =
                    PolicyAt::cluster_policy(policy.metadata.name.as_deref().unwrap_or_default());
                (plan::plan(&v, &up, &at, &opts.config, now)?, v.nodes.len())
            }
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
