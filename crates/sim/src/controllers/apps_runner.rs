//! The Deployment and ReplicaSet controllers' and the default scheduler's shell: watch
//! Deployments, ReplicaSets, Nodes and Pods into local stores and, on any change (debounced)
//! or every resync period, reconcile them through the pure plans (`apps.rs`). The loop and the
//! memory of recently created pods are `gantry_runtime`'s `Rounds` and `Expectations`, as in
//! `runner.rs` (a pass whose writes did not reach the API server fails its round: the loop
//! backs off).
//! (DaemonSets and Jobs have their own indexed caches: `runner.rs`.)

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gantry_runtime::events::Recorder;
use gantry_runtime::expectations::Expectations;
use gantry_runtime::rounds::Rounds;
use gantry_runtime::task::AbortOnDrop;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::writes::{Tally, Unreached};

const DEBOUNCE: Duration = Duration::from_millis(100);
const RESYNC: Duration = Duration::from_secs(5);

/// Names of pods the watch has shown (added, changed or deleted) since the last reconcile.
type Observed = Arc<std::sync::Mutex<HashSet<String>>>;

fn cache<K>(
    api: Api<K>,
    trigger: Arc<Notify>,
    observed: Option<Observed>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let task = tokio::spawn(async move {
        let mut s = stream.boxed();
        while let Some(ev) = s.next().await {
            match ev {
                Err(e) => tracing::debug!(error = %e, "controller watch error (retrying)"),
                // Not a relist's InitApply: the store takes those only at InitDone.
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                    if let Some(seen) = &observed
                        && let Ok(mut seen) = seen.lock()
                    {
                        seen.insert(o.name_any());
                    }
                }
                Ok(_) => {}
            }
            trigger.notify_one();
        }
    });
    (reader, task)
}

/// Which optional parts run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Bind pods of `schedulerName: default-scheduler` (kube-scheduler's part): on for a
    /// whole cluster (`gantry up`), off where tests want unscheduled pods to stay pending.
    pub default_scheduler: bool,
}

/// Start the Deployment and ReplicaSet controllers (and the default scheduler if `opts` says).
pub(super) fn start(client: kube::Client, opts: Options) -> Vec<JoinHandle<()>> {
    // Woken by the watches on every change; a pass at least every RESYNC.
    let mut rounds = Rounds::new("deployment and replicaset controllers", DEBOUNCE);
    let trigger = rounds.wake();
    let observed = Observed::default();
    let (deployments, t1) = cache(
        Api::<Deployment>::all(client.clone()),
        trigger.clone(),
        None,
    );
    let (rss, t2) = cache(
        Api::<ReplicaSet>::all(client.clone()),
        trigger.clone(),
        None,
    );
    let main = tokio::spawn(async move {
        for s in [
            deployments.clone().wait_until_ready().await,
            rss.clone().wait_until_ready().await,
        ] {
            if s.is_err() {
                return;
            }
        }
        // The pod and node watches cost every pod change in the cluster a decode here: they
        // start with the first Deployment or ReplicaSet (at once for the default scheduler).
        while !opts.default_scheduler && deployments.is_empty() && rss.is_empty() {
            rounds.until_next(RESYNC).await;
        }
        let (nodes, t3) = cache(Api::<Node>::all(client.clone()), trigger.clone(), None);
        let (pods, t4) = cache(
            Api::<Pod>::all(client.clone()),
            trigger.clone(),
            Some(observed.clone()),
        );
        // Aborting this task drops these, which stops the watches.
        let _watches = (AbortOnDrop(t3), AbortOnDrop(t4));
        let events = Recorder::new(
            client.clone(),
            super::default_scheduler::NAME,
            super::default_scheduler::NAME,
        );
        let mut r = Reconciler {
            events,
            client,
            deployments,
            rss,
            nodes,
            pods,
            expected: Expectations::default(),
            observed,
            opts,
            unreached: Unreached::default(),
        };
        let _ = r.nodes.wait_until_ready().await;
        let _ = r.pods.wait_until_ready().await;
        loop {
            let outcome = r.reconcile_all().await;
            rounds.next(outcome.map(|()| RESYNC)).await;
        }
    });
    vec![t1, t2, main]
}

pub(super) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

pub(super) fn owned_by(p: &Pod, uid: &str) -> bool {
    controlled_by(&p.metadata, uid)
}

/// Whether `uid` is the object's controller.
pub(super) fn controlled_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    uid: &str,
) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

pub(super) struct Reconciler {
    pub(super) client: kube::Client,
    pub(super) deployments: Store<Deployment>,
    pub(super) rss: Store<ReplicaSet>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// Pods created (owner uid, pod name) that the watch has not shown yet.
    expected: Expectations,
    /// A pod created and deleted between two passes never shows in the cache, but its events
    /// do: without them its node would wait for the expectation to time out.
    observed: Observed,
    opts: Options,
    /// The default scheduler's Events (kube-scheduler's counting of repeats).
    pub(super) events: Recorder,
    /// This pass's writes that did not reach the API server.
    pub(super) unreached: Unreached,
}

impl Reconciler {
    /// Reconcile everything; fails if some write did not reach the API server.
    async fn reconcile_all(&mut self) -> Result<(), Tally> {
        // Taken before the snapshot: the reflector updates the store before it yields an event,
        // so every name seen here is already reflected in `pods`.
        let seen = self
            .observed
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        let pods = self.pods.state();
        self.expected.settle(Instant::now(), |owner, name| {
            seen.contains(name)
                || pods
                    .iter()
                    .any(|p| p.metadata.name.as_deref() == Some(name) && owned_by(p, owner))
        });
        let nodes = self.nodes.state();
        self.reconcile_apps(&pods).await;
        if self.opts.default_scheduler {
            self.schedule_defaults(&nodes, &pods).await;
        }
        self.unreached.take()
    }

    pub(super) fn pending(&self, owner: &str) -> Vec<Option<String>> {
        self.expected.pending(owner)
    }

    /// Create `pods` (each with the node it is for) and expect them until the watch shows them.
    pub(super) async fn create_pods(&mut self, owner_uid: &str, pods: Vec<(Pod, Option<String>)>) {
        for (_, name, node) in super::writes::create_pods(&self.client, &self.unreached, pods).await
        {
            self.expected.expect(owner_uid, name, node, Instant::now());
        }
    }

    pub(super) async fn delete_pod(&self, ns: &str, name: &str) {
        super::writes::delete_pod(&self.client, &self.unreached, ns, name).await
    }

    pub(super) async fn patch_status<K, S>(&self, obj: &K, current: Option<&S>, status: &S)
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        S: Serialize + PartialEq,
    {
        super::writes::patch_status(&self.client, &self.unreached, obj, current, status).await
    }
}
