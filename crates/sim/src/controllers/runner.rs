//! The controllers' shell: watch DaemonSets, Jobs, Nodes and Pods into local caches
//! ([`cache`]), and after a change (debounced) reconcile the DaemonSets and Jobs it concerns
//! through the pure plans; every resync period, all of them. The loop and the memory of
//! recently created pods (so a slow watch cannot cause duplicates) are `gantry_runtime`'s
//! `Rounds` and `Expectations`, as every controller's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_runtime::expectations::Expectations;
use gantry_runtime::rounds::Rounds;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::writes::{Tally, Unreached};
use super::{cache, daemonset, job};

const DEBOUNCE: Duration = Duration::from_millis(100);
/// Every change wakes a pass for what it concerns; the resync is a safety net only. Every
/// 5 s it re-planned each DaemonSet over every node, ~13 % of the API server process's CPU
/// with 5,000 nodes at rest (docs/benchmarks.md, issue #42).
const RESYNC: Duration = Duration::from_secs(30);
/// The most pods one pass creates for one DaemonSet (upstream's `burstReplicas`): the rest
/// come in the next passes, so a DaemonSet for thousands of new nodes does not hold back the
/// others' pods (a node needs all of its operands to be of use).
const BURST_REPLICAS: usize = 250;

/// Running controllers; dropping stops them.
pub struct Controllers {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Controllers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

pub use super::apps_runner::Options;

/// Start the DaemonSet, Job, Deployment, ReplicaSet and node-lifecycle controllers.
pub fn start(client: kube::Client) -> Controllers {
    start_with(client, Options::default())
}

/// [`start`], with the optional parts `opts` turns on.
pub fn start_with(client: kube::Client, opts: Options) -> Controllers {
    let apps = super::apps_runner::start(client.clone(), opts);
    // Woken by the caches on every change; a pass at least every RESYNC.
    let mut rounds = Rounds::new("daemonset and job controllers", DEBOUNCE);
    let trigger = rounds.wake();
    let caches = cache::Shared::default();
    let mut tasks = cache::start(&client, &caches, &trigger);
    tasks.push(super::node_lifecycle_runner::start(
        client.clone(),
        caches.clone(),
    ));
    let mut r = Reconciler {
        client,
        caches,
        expected: Expectations::default(),
        unreached: Unreached::default(),
        more: false,
    };
    tasks.push(tokio::spawn(async move {
        while !cache::lock(&r.caches).synced() {
            trigger.notified().await;
        }
        let mut resync = Instant::now() + RESYNC;
        loop {
            if Instant::now() >= resync {
                cache::lock(&r.caches).dirty.all = true;
                resync = Instant::now() + RESYNC;
            }
            let outcome = r.reconcile_dirty().await;
            let requeue = if std::mem::take(&mut r.more) {
                DEBOUNCE
            } else {
                resync.saturating_duration_since(Instant::now())
            };
            rounds.next(outcome.map(|()| requeue)).await;
        }
    }));
    tasks.extend(apps);
    Controllers { tasks }
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn owned_by(p: &Pod, uid: &str) -> bool {
    cache::controller_uid(p) == Some(uid)
}

struct Reconciler {
    client: kube::Client,
    caches: cache::Shared,
    /// Pods created (owner uid, pod key `ns/name`) that the watch has not shown yet.
    expected: Expectations,
    /// This pass's writes that did not reach the API server.
    unreached: Unreached,
    /// A DaemonSet has pods left to create after this pass's burst: pass again soon.
    more: bool,
}

/// One pass's work, copied out of the caches under their lock.
struct Work {
    dss: Vec<(Arc<DaemonSet>, Vec<Arc<Pod>>)>,
    jobs: Vec<(Arc<Job>, Vec<Arc<Pod>>)>,
    nodes: Vec<Arc<Node>>,
}

impl Reconciler {
    /// Reconcile what changed since the last pass: the owners whose object or pods changed,
    /// every DaemonSet when a node's placement did, everything on a relist or resync. Fails
    /// if some write did not reach the API server; the retry then reconciles everything.
    async fn reconcile_dirty(&mut self) -> Result<(), Tally> {
        let work = {
            let mut c = cache::lock(&self.caches);
            let dirty = std::mem::take(&mut c.dirty);
            self.expected.settle(Instant::now(), |owner, key| {
                dirty.seen_pods.contains(key) || c.pods.get(key).is_some_and(|p| owned_by(p, owner))
            });
            let wanted = |uid: Option<&String>, every: bool| {
                every || uid.is_some_and(|u| dirty.owners.contains(u))
            };
            let live = |m: &kube::api::ObjectMeta| m.deletion_timestamp.is_none();
            let dss: Vec<_> = c
                .dss
                .values()
                .filter(|d| live(&d.metadata))
                .filter(|d| wanted(d.metadata.uid.as_ref(), dirty.all || dirty.daemonsets))
                .map(|d| {
                    (
                        d.clone(),
                        c.pods_of(d.metadata.uid.as_deref().unwrap_or_default()),
                    )
                })
                .collect();
            let jobs = c
                .jobs
                .values()
                .filter(|j| live(&j.metadata))
                .filter(|j| wanted(j.metadata.uid.as_ref(), dirty.all))
                .map(|j| {
                    (
                        j.clone(),
                        c.pods_of(j.metadata.uid.as_deref().unwrap_or_default()),
                    )
                })
                .collect();
            let nodes = if dss.is_empty() {
                Vec::new()
            } else {
                c.nodes.values().cloned().collect()
            };
            Work { dss, jobs, nodes }
        };
        for (ds, pods) in &work.dss {
            self.reconcile_ds(ds, &work.nodes, pods).await;
        }
        for (j, pods) in &work.jobs {
            self.reconcile_job(j, pods).await;
        }
        let outcome = self.unreached.take();
        if outcome.is_err() {
            cache::lock(&self.caches).dirty.all = true;
        }
        outcome
    }

    /// Create `pods` (each with the node it is for) and expect them until the watch shows them.
    async fn create_pods<I>(&mut self, owner_uid: &str, pods: I)
    where
        I: IntoIterator<Item = (Pod, Option<String>)>,
        I::IntoIter: Send,
    {
        for (ns, name, node) in
            super::writes::create_pods(&self.client, &self.unreached, pods).await
        {
            let key = cache::key(Some(&ns), &name);
            self.expected.expect(owner_uid, key, node, Instant::now());
        }
    }

    async fn delete_pod(&self, ns: &str, name: &str) {
        super::writes::delete_pod(&self.client, &self.unreached, ns, name).await
    }

    async fn patch_status<K, S>(&self, obj: &K, current: Option<&S>, status: &S)
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        S: Serialize + PartialEq,
    {
        super::writes::patch_status(&self.client, &self.unreached, obj, current, status).await
    }

    async fn reconcile_ds(&mut self, ds: &DaemonSet, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) {
        let Some(uid) = ds.metadata.uid.clone() else {
            return;
        };
        let ns = ds.namespace().unwrap_or_default();
        let plan = daemonset::plan(ds, nodes, pods);
        let pending: HashSet<String> = self.expected.pending(&uid).into_iter().flatten().collect();
        let mut wanted: Vec<String> = plan
            .create
            .into_iter()
            .filter(|node| !pending.contains(node))
            .collect();
        if wanted.len() > BURST_REPLICAS {
            wanted.truncate(BURST_REPLICAS);
            cache::lock(&self.caches).dirty.owners.insert(uid.clone());
            self.more = true;
        }
        // Built as they are sent (see `writes::create_pods`).
        let new = wanted.into_iter().map(|node| {
            let name = format!("{}-{}", ds.name_any(), random_suffix());
            (daemonset::new_pod(ds, &node, &name), Some(node))
        });
        self.create_pods(&uid, new).await;
        for name in &plan.delete {
            self.delete_pod(&ns, name).await;
        }
        self.patch_status(ds, ds.status.as_ref(), &plan.status)
            .await;
    }

    async fn reconcile_job(&mut self, j: &Job, pods: &[Arc<Pod>]) {
        let Some(uid) = j.metadata.uid.clone() else {
            return;
        };
        let ns = j.namespace().unwrap_or_default();
        let mine: Vec<Pod> = pods.iter().map(|p| (**p).clone()).collect();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let plan = job::plan(j, &mine, &now);
        let pending = self.expected.pending(&uid).len() as i32;
        let new = (0..(plan.create - pending).max(0)).map(|_| {
            let name = format!("{}-{}", j.name_any(), random_suffix());
            (job::new_pod(j, &name), None)
        });
        self.create_pods(&uid, new).await;
        for name in &plan.delete {
            self.delete_pod(&ns, name).await;
        }
        // Conditions carry timestamps: compare without them to stay idempotent.
        let strip = |s: &k8s_openapi::api::batch::v1::JobStatus| {
            let mut s = s.clone();
            for c in s.conditions.iter_mut().flatten() {
                c.last_probe_time = None;
                c.last_transition_time = None;
            }
            s
        };
        let unchanged = j.status.as_ref().map(strip) == Some(strip(&plan.status));
        if !unchanged {
            self.patch_status(j, j.status.as_ref(), &plan.status).await;
        }
    }
}
