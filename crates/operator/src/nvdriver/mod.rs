//! The NVIDIADriver controller: per-pool drivers, active while the ClusterPolicy in charge sets
//! `driver.useNvidiaDriverCRD: true` (the ClusterPolicy then renders no driver of its own).
//!
//! Each round: list the ClusterPolicies and NVIDIADrivers, decide node ownership
//! ([`assign`], pure), write the owner labels that differ, render each CR's objects
//! ([`crate::render::render_nvidia_driver`], pure), apply those not up to date (server-side
//! apply), delete what no CR renders any more, and write each CR's status ([`status`], pure)
//! where it changed. A round with nothing to change writes nothing.
//!
//! A CR whose spec cannot be rendered keeps the objects it had: a typo must not take the
//! driver off its nodes. Its status says what is wrong.

pub mod assign;
pub mod status;
mod writes;

pub use writes::{NODE_FIELD_MANAGER, list_crs, upgrade_policies};
use writes::{apply_one, delete_stale, set_owner, write_status};

use gantry_runtime::touch::Touch;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::time::Duration;

use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::names;
use gantry_api::nvidia_driver::{NVIDIADriver, NVIDIADriverState, NVIDIADriverStatus};
use gantry_runtime::rounds::Rounds;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};

use crate::node_watch::NodeWatch;
use crate::reconcile::apply::ObjectKey;
use crate::render::{self, ClusterFacts, LABEL_NVIDIA_DRIVER, NODE_LABELS, NodeFacts};
use assign::{CrView, NodeIn, Owner};
use status::{Observed, Problem};

#[derive(Debug, Clone)]
pub struct NvDriverOptions {
    /// Where the driver DaemonSets go (the operator namespace).
    pub namespace: String,
    /// Gantry's image (for `ClusterFacts`; the driver itself is NVIDIA's image).
    pub image: String,
    /// The operator's image env vars (`DRIVER_MANAGER_IMAGE`, `GDS_IMAGE`, ...).
    pub image_env: BTreeMap<String, String>,
    /// Periodic round while everything is ready.
    pub requeue: Duration,
    /// Round period while some CR is not ready.
    pub busy_requeue: Duration,
    pub min_interval: Duration,
}

impl NvDriverOptions {
    pub fn new(namespace: &str) -> Self {
        NvDriverOptions {
            namespace: namespace.into(),
            image: String::new(),
            image_env: BTreeMap::new(),
            requeue: Duration::from_secs(60),
            busy_requeue: Duration::from_secs(5),
            min_interval: Duration::from_millis(200),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NvDriverError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the node watch stopped before its first list")]
    NodeWatchStopped,
    #[error("a rendered NVIDIADriver object has {0}")]
    BadObject(&'static str),
}

pub(crate) fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> NvDriverError {
    let what = what.into();
    move |source| NvDriverError::Api { what, source }
}

pub(crate) fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    pub writes: usize,
    /// Some CR is not ready yet: come back soon.
    pub busy: bool,
}

/// Run until `shutdown` resolves; a failed round is logged and retried with backoff.
pub async fn run<F>(client: kube::Client, opts: NvDriverOptions, nodes: NodeWatch, shutdown: F)
where
    F: Future<Output = ()> + Send,
{
    let mut rounds = Rounds::new("NVIDIADriver", opts.min_interval);
    rounds.trigger(nodes.clone().notify(rounds.wake()));
    rounds.on_changes(Api::<Touch<NVIDIADriver>>::all(client.clone()));
    rounds.on_changes(Api::<Touch<ClusterPolicy>>::all(client.clone()));
    rounds.on_changes(Api::<Touch<DaemonSet>>::namespaced(
        client.clone(),
        &opts.namespace,
    ));
    let memo = HandedBack::default();
    let (client, opts, nodes, memo) = (&client, &opts, &nodes, &memo);
    rounds
        .run(shutdown, move || async move {
            let r = reconcile(client, opts, nodes, memo).await?;
            if r.writes > 0 {
                tracing::debug!(writes = r.writes, "NVIDIADriver round");
            }
            Ok::<_, NvDriverError>(if r.busy {
                opts.busy_requeue
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

fn name_of(cr: &NVIDIADriver) -> &str {
    cr.metadata.name.as_deref().unwrap_or_default()
}

/// Why the last round handed everything back and found nothing left to hand back. While no
/// NVIDIADriver exists, the reason is the same and no node carries an owner label, a round
/// stops after its two lists: every node change wakes this loop, and at 1,000 nodes the
/// hand-back's six label-selected lists and its copy of every node's labels ran several times
/// a second for nothing.
#[derive(Default)]
struct HandedBack(std::sync::Mutex<Option<String>>);

/// One round, nothing remembered from an earlier one.
pub async fn reconcile_once(
    client: &kube::Client,
    opts: &NvDriverOptions,
    node_watch: &NodeWatch,
) -> Result<Round, NvDriverError> {
    reconcile(client, opts, node_watch, &HandedBack::default()).await
}

/// One round: read, decide, write.
async fn reconcile(
    client: &kube::Client,
    opts: &NvDriverOptions,
    node_watch: &NodeWatch,
    handed_back: &HandedBack,
) -> Result<Round, NvDriverError> {
    let lp = ListParams::default();
    let crs_api: Api<NVIDIADriver> = Api::all(client.clone());
    // Listed untyped and parsed one by one: one CR the API server stored but this version
    // cannot read gets an error in its status instead of stopping every other CR.
    let (mut crs, unreadable) = match list_crs(client).await {
        Ok(l) => l,
        // The CRD is not installed: nothing to reconcile.
        Err(e) if not_found(&e) => return Ok(Round::default()),
        Err(e) => return Err(api_err("listing NVIDIADrivers")(e)),
    };
    crs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let policies = match Api::<ClusterPolicy>::all(client.clone()).list(&lp).await {
        Ok(l) => l.items,
        Err(e) if not_found(&e) => Vec::new(),
        Err(e) => return Err(api_err("listing ClusterPolicies")(e)),
    };
    if !node_watch.ready().await {
        return Err(NvDriverError::NodeWatchStopped);
    }
    let mut round = Round::default();
    for (o, why) in &unreadable {
        let name = o.metadata.name.clone().unwrap_or_default();
        let old: Option<NVIDIADriverStatus> = o
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let obs = Observed {
            namespace: opts.namespace.clone(),
            generation: o.metadata.generation,
            problems: vec![Problem::Invalid(format!(
                "NVIDIADriver {name} cannot be read: {why}"
            ))],
            ..Default::default()
        };
        let st = status::compute(&obs, old.as_ref(), Timestamp::now());
        round.writes += write_status(&crs_api, &name, old.as_ref(), st).await?;
    }

    let policy = active_policy(policies);
    let disabled = match &policy {
        None => Some(
            "no ClusterPolicy exists: NVIDIADrivers are reconciled only while the \
                      ClusterPolicy sets spec.driver.useNvidiaDriverCRD: true"
                .to_string(),
        ),
        Some(p) if !p.spec.use_nvidia_driver_crd() => Some(format!(
            "ClusterPolicy {} does not set spec.driver.useNvidiaDriverCRD: true, so its own \
             driver section manages the driver and this NVIDIADriver is not reconciled",
            p.metadata.name.as_deref().unwrap_or_default()
        )),
        Some(_) => None,
    };
    let nodes = node_watch.store().state();
    let quiet = crs.is_empty() && unreadable.is_empty();
    if let Some(why) = &disabled
        && quiet
        && handed_back.0.lock().is_ok_and(|m| m.as_ref() == Some(why))
        && !nodes.iter().any(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(names::LABEL_DRIVER_OWNER))
        })
    {
        return Ok(round);
    }
    let labels_of: BTreeMap<String, BTreeMap<String, String>> = nodes
        .iter()
        .filter_map(|n| {
            Some((
                n.metadata.name.clone()?,
                n.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect();
    if let Some(why) = disabled {
        // Hand back: no CR objects, no owner labels.
        round.writes += delete_stale(client, opts, &HashSet::new(), &BTreeSet::new()).await?;
        for (node, labels) in &labels_of {
            if labels.contains_key(names::LABEL_DRIVER_OWNER) {
                round.writes += set_owner(client, node, None).await?;
            }
        }
        for cr in &crs {
            let o = Observed {
                namespace: opts.namespace.clone(),
                generation: cr.metadata.generation,
                disabled: Some(why.clone()),
                ..Default::default()
            };
            let st = status::compute(&o, cr.status.as_ref(), Timestamp::now());
            round.writes += write_status(&crs_api, name_of(cr), cr.status.as_ref(), st).await?;
        }
        if let Ok(mut m) = handed_back.0.lock() {
            *m = (quiet && round.writes == 0).then_some(why);
        }
        return Ok(round);
    }
    if let Ok(mut m) = handed_back.0.lock() {
        *m = None;
    }
    let Some(policy) = policy else {
        return Ok(round);
    };

    // Ownership.
    let views: Vec<CrView<'_>> = crs
        .iter()
        .map(|c| CrView {
            name: name_of(c),
            spec: &c.spec,
            created: c
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
        })
        .collect();
    let gpu: Vec<NodeIn<'_>> = labels_of
        .iter()
        .filter(|(_, l)| assign::is_gpu_node(l))
        .map(|(n, l)| NodeIn { name: n, labels: l })
        .collect();
    let plan = assign::assign(&views, &gpu);
    let current: BTreeMap<String, String> = labels_of
        .iter()
        .filter_map(|(n, l)| Some((n.clone(), l.get(names::LABEL_DRIVER_OWNER)?.clone())))
        .collect();
    for (node, have) in &current {
        let want = match plan.nodes.get(node) {
            Some(Owner::Cr(c)) => Some(render::owner_value(c)),
            Some(Owner::Keep) => continue,
            Some(Owner::None) | None => None,
        };
        if want.as_ref() != Some(have) {
            round.writes += set_owner(client, node, want.as_deref()).await?;
        }
    }
    for (node, o) in &plan.nodes {
        if let Owner::Cr(c) = o
            && !current.contains_key(node)
        {
            round.writes += set_owner(client, node, Some(&render::owner_value(c))).await?;
        }
    }

    // Render and apply, CR by CR.
    let mut desired: HashSet<ObjectKey> = HashSet::new();
    let mut kept: BTreeSet<String> = BTreeSet::new();
    let mut observed: Vec<(usize, Observed, Vec<String>)> = Vec::new();
    for (i, cr) in crs.iter().enumerate() {
        let name = name_of(cr);
        let mut o = Observed {
            namespace: opts.namespace.clone(),
            generation: cr.metadata.generation,
            ..Default::default()
        };
        if let Some(d) = plan.refused_defaults.get(name) {
            o.problems
                .push(Problem::SecondDefault { default: d.clone() });
        }
        if let Some(list) = plan.conflicts.get(name) {
            o.problems.push(Problem::Conflicts(
                list.iter()
                    .map(|c| (c.node.clone(), c.others.clone()))
                    .collect(),
            ));
        }
        let gpu_nodes: Vec<NodeFacts> = plan
            .owned_by(name, &current)
            .map(|n| NodeFacts {
                name: n.to_string(),
                labels: labels_of
                    .get(n)
                    .map(|l| {
                        l.iter()
                            .filter(|(k, _)| NODE_LABELS.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        o.nodes = gpu_nodes.len();
        let facts = ClusterFacts {
            namespace: opts.namespace.clone(),
            operator_image: opts.image.clone(),
            gpu_nodes,
            image_env: opts.image_env.clone(),
            owner: Some(OwnerReference {
                api_version: "nvidia.com/v1alpha1".into(),
                kind: "NVIDIADriver".into(),
                name: name.to_string(),
                uid: cr.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }),
            ..Default::default()
        };
        let mut ds_names = Vec::new();
        match render::render_nvidia_driver(&policy.spec, cr, &facts) {
            Ok(objs) => {
                for obj in objs {
                    let (key, wrote) = apply_one(client, obj).await?;
                    round.writes += usize::from(wrote);
                    if key.1 == "DaemonSet" {
                        ds_names.push(key.3.clone());
                    }
                    desired.insert(key);
                }
            }
            Err(e) => {
                o.problems.insert(0, Problem::Invalid(e.to_string()));
                kept.insert(render::owner_value(name));
            }
        }
        observed.push((i, o, ds_names));
    }
    round.writes += delete_stale(client, opts, &desired, &kept).await?;

    // Readiness and status.
    let dss: BTreeMap<String, DaemonSet> =
        Api::<DaemonSet>::namespaced(client.clone(), &opts.namespace)
            .list(&ListParams::default().labels(LABEL_NVIDIA_DRIVER))
            .await
            .map_err(api_err(format!("listing DaemonSets in {}", opts.namespace)))?
            .items
            .into_iter()
            .filter_map(|d| Some((d.metadata.name.clone()?, d)))
            .collect();
    for (i, mut o, ds_names) in observed {
        o.daemonsets = ds_names
            .into_iter()
            .map(|n| {
                let why = dss
                    .get(&n)
                    .map_or_else(|| Some("not created yet".to_string()), daemonset_not_ready);
                (n, why)
            })
            .collect();
        let cr = &crs[i];
        let st = status::compute(&o, cr.status.as_ref(), Timestamp::now());
        if st.state != NVIDIADriverState::Ready {
            round.busy = true;
        }
        round.writes += write_status(&crs_api, name_of(cr), cr.status.as_ref(), st).await?;
    }
    Ok(round)
}

/// Why a driver DaemonSet is not ready (`None`: every node it wants runs a ready pod of its
/// current template). OnDelete: pods of an older template count as not updated.
pub fn daemonset_not_ready(ds: &DaemonSet) -> Option<String> {
    let generation = ds.metadata.generation.unwrap_or(0);
    let Some(s) = &ds.status else {
        return Some("no status yet".into());
    };
    if s.observed_generation.unwrap_or(0) < generation {
        return Some("its controller has not seen the latest spec yet".into());
    }
    let want = s.desired_number_scheduled;
    let updated = s.updated_number_scheduled.unwrap_or(0);
    if s.number_ready < want || updated < want {
        return Some(format!(
            "{} of {want} driver pods ready, {updated} on the current spec",
            s.number_ready
        ));
    }
    None
}
