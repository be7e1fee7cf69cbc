//! The controllers' caches: DaemonSets, Jobs, Nodes and Pods, one watch each, with pods
//! indexed by their controller's uid, and what changed since the last pass ([`Dirty`]). A pass
//! then reconciles only the owners whose object or pods changed, and every DaemonSet only when a
//! node came, went or changed where placement looks (labels, taints, unschedulable) — not on the
//! kubelets' status heartbeats, which at 5,000 nodes are a hundred Node writes a second (the
//! real DaemonSet controller ignores those too: `shouldIgnoreNodeUpdate`).
//!
//! Pods are read as [`Lenient`]: one stored pod a typed client cannot decode neither fails the
//! relist nor is lost; what can be read of it (owner, node, phase, deletion) still counts.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use gantry_api::lenient::Lenient;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, PodStatus};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What changed since the last pass.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Everything (a relist, or the periodic resync).
    pub all: bool,
    /// Every DaemonSet: a node came, went, or changed where placement looks.
    pub daemonsets: bool,
    /// Owners (DaemonSet or Job uids) whose object or pods changed.
    pub owners: HashSet<String>,
    /// Pods (`namespace/name`) the watch showed added, changed or deleted: a pod created and
    /// deleted between two passes never shows in the cache, but its events do, and without
    /// them its node would wait for the creation expectation to time out.
    pub seen_pods: HashSet<String>,
}

/// The four caches and the pod index.
#[derive(Default)]
pub struct Caches {
    pub dss: BTreeMap<String, Arc<DaemonSet>>,
    pub jobs: BTreeMap<String, Arc<Job>>,
    pub nodes: BTreeMap<String, Arc<Node>>,
    pub pods: HashMap<String, Arc<Pod>>,
    /// Controller uid → its pods' keys.
    by_owner: HashMap<String, BTreeSet<String>>,
    pub dirty: Dirty,
    /// Kinds listed at least once (a pass before that would see a partial cluster).
    synced: [bool; 4],
}

pub type Shared = Arc<Mutex<Caches>>;

pub fn lock(c: &Shared) -> MutexGuard<'_, Caches> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

fn key_of<K: Resource>(o: &K) -> String {
    key(
        o.meta().namespace.as_deref(),
        o.meta().name.as_deref().unwrap_or_default(),
    )
}

/// The uid of the pod's controller (owner reference with `controller: true`).
pub fn controller_uid(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Drops what no controller reads of a pod: its volumes, each container's command, env,
/// mounts, probes and security context, and the containers' statuses (placement, requests,
/// tolerations, owners, phase and conditions stay). k8s-openapi keeps every volume source
/// inline, so a typed operand pod is ~50 KB; at thousands of nodes the cache of every pod was
/// gigabytes. A typed container status is 752 bytes before its strings, 17 of them for the
/// operand pods of one node. Containers are read only for their requests, so one that
/// requests nothing is dropped (an operand pod's all are): a typed `Container` is 2 KB inline.
fn slim(mut p: Pod) -> Pod {
    if let Some(s) = p.status.as_mut() {
        s.container_statuses = None;
        s.init_container_statuses = None;
        s.ephemeral_container_statuses = None;
    }
    if let Some(s) = p.spec.as_mut() {
        s.volumes = None;
        s.ephemeral_containers = None;
        for c in s
            .containers
            .iter_mut()
            .chain(s.init_containers.iter_mut().flatten())
        {
            c.command = None;
            c.args = None;
            c.env = None;
            c.env_from = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
            c.security_context = None;
        }
        let requests_nothing = |c: &Container| {
            c.resources.as_ref().is_none_or(|r| {
                r.requests.as_ref().is_none_or(|m| m.is_empty())
                    && r.limits.as_ref().is_none_or(|m| m.is_empty())
            })
        };
        for list in std::iter::once(&mut s.containers).chain(s.init_containers.as_mut()) {
            list.retain(|c| !requests_nothing(c));
            list.shrink_to_fit();
        }
    }
    p
}

/// A pod as the caches keep it ([`slim`]). One that does not decode, as [`Lenient::salvaged`]
/// reads it (only the metadata that decodes); when even that fails, what the controllers
/// need: identity, owners, node, phase.
fn pod_of(p: Lenient<Pod>) -> Pod {
    let Lenient::Undecodable { meta, raw, error } = p else {
        return slim(p.salvaged().unwrap_or_default());
    };
    tracing::debug!(pod = ?meta.name, %error, "controllers: pod does not decode; using what can be read");
    let str_at = |p: &str| raw.pointer(p).and_then(Value::as_str).map(str::to_string);
    let minimal = Pod {
        metadata: (*meta).clone(),
        spec: Some(PodSpec {
            node_name: str_at("/spec/nodeName"),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: str_at("/status/phase"),
            ..Default::default()
        }),
    };
    Lenient::Undecodable { meta, raw, error }
        .salvaged()
        .unwrap_or(minimal)
}

/// What decides DaemonSet placement on a node.
fn placement_changed(old: &Node, new: &Node) -> bool {
    let spec = |n: &Node| n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable));
    old.metadata.labels != new.metadata.labels || spec(old) != spec(new)
}

impl Caches {
    pub fn synced(&self) -> bool {
        self.synced.iter().all(|s| *s)
    }

    /// The pods controlled by `uid`.
    pub fn pods_of(&self, uid: &str) -> Vec<Arc<Pod>> {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k).cloned())
            .collect()
    }

    fn index(&mut self, key: &str, pod: &Pod) {
        if let Some(uid) = controller_uid(pod) {
            self.by_owner
                .entry(uid.to_string())
                .or_default()
                .insert(key.to_string());
            self.dirty.owners.insert(uid.to_string());
        }
    }

    fn unindex(&mut self, key: &str, pod: &Pod) {
        if let Some(uid) = controller_uid(pod) {
            if let Some(set) = self.by_owner.get_mut(uid) {
                set.remove(key);
                if set.is_empty() {
                    self.by_owner.remove(uid);
                }
            }
            self.dirty.owners.insert(uid.to_string());
        }
    }

    fn pod_applied(&mut self, pod: Pod) {
        let k = key_of(&pod);
        let pod = Arc::new(pod);
        if let Some(old) = self.pods.insert(k.clone(), pod.clone()) {
            self.unindex(&k, &old);
        }
        self.index(&k, &pod);
        self.dirty.seen_pods.insert(k);
    }

    fn pod_deleted(&mut self, pod: &Pod) {
        let k = key_of(pod);
        if let Some(old) = self.pods.remove(&k) {
            self.unindex(&k, &old);
        }
        if let Some(uid) = controller_uid(pod) {
            self.dirty.owners.insert(uid.to_string());
        }
        self.dirty.seen_pods.insert(k);
    }

    fn pods_relisted(&mut self, pods: Vec<Pod>) {
        self.pods.clear();
        self.by_owner.clear();
        for p in pods {
            let k = key_of(&p);
            self.index(&k, &p);
            self.pods.insert(k, Arc::new(p));
        }
        self.dirty.all = true;
        self.synced[3] = true;
    }

    fn node_applied(&mut self, node: Node) {
        let name = node.name_any();
        let node = Arc::new(node);
        let changed = match self.nodes.insert(name, node.clone()) {
            Some(old) => placement_changed(&old, &node),
            None => true,
        };
        self.dirty.daemonsets |= changed;
    }
}

/// How one kind's events land in the caches.
enum Change<K> {
    Relisted(Vec<K>),
    Applied(K),
    Deleted(K),
}

fn on_ds(c: &mut Caches, ch: Change<DaemonSet>) {
    match ch {
        Change::Relisted(all) => {
            c.dss = all.into_iter().map(|d| (key_of(&d), Arc::new(d))).collect();
            c.dirty.all = true;
            c.synced[0] = true;
        }
        Change::Applied(d) => {
            c.dirty.owners.extend(d.metadata.uid.clone());
            c.dss.insert(key_of(&d), Arc::new(d));
        }
        Change::Deleted(d) => {
            c.dss.remove(&key_of(&d));
        }
    }
}

fn on_job(c: &mut Caches, ch: Change<Job>) {
    match ch {
        Change::Relisted(all) => {
            c.jobs = all.into_iter().map(|j| (key_of(&j), Arc::new(j))).collect();
            c.dirty.all = true;
            c.synced[1] = true;
        }
        Change::Applied(j) => {
            c.dirty.owners.extend(j.metadata.uid.clone());
            c.jobs.insert(key_of(&j), Arc::new(j));
        }
        Change::Deleted(j) => {
            c.jobs.remove(&key_of(&j));
        }
    }
}

fn on_node(c: &mut Caches, ch: Change<Node>) {
    match ch {
        Change::Relisted(all) => {
            c.nodes = all
                .into_iter()
                .map(|n| (n.name_any(), Arc::new(n)))
                .collect();
            c.dirty.all = true;
            c.synced[2] = true;
        }
        Change::Applied(n) => c.node_applied(n),
        Change::Deleted(n) => {
            c.nodes.remove(&n.name_any());
            c.dirty.daemonsets = true;
        }
    }
}

fn on_pod(c: &mut Caches, ch: Change<Pod>) {
    match ch {
        Change::Relisted(all) => c.pods_relisted(all),
        Change::Applied(p) => c.pod_applied(p),
        Change::Deleted(p) => c.pod_deleted(&p),
    }
}

/// Follow one kind into the caches; every change wakes the reconciler. `keep` makes each
/// object what the cache holds as it arrives: a relist holds every object until its end, and
/// 35,000 whole pods decoded at once were a gigabyte where their slim copies are a tenth.
fn follow<K, T>(
    api: Api<K>,
    caches: Shared,
    trigger: Arc<Notify>,
    keep: fn(K) -> T,
    on: fn(&mut Caches, Change<T>),
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(crate::strip::strip_managed_fields);
    tokio::spawn(async move {
        let mut s = stream.boxed();
        let mut relist: Vec<T> = Vec::new();
        while let Some(ev) = s.next().await {
            let change = match ev {
                Err(e) => {
                    tracing::debug!(error = %e, "controller watch error (retrying)");
                    continue;
                }
                Ok(watcher::Event::Init) => {
                    relist.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(o)) => {
                    relist.push(keep(o));
                    continue;
                }
                Ok(watcher::Event::InitDone) => Change::Relisted(std::mem::take(&mut relist)),
                Ok(watcher::Event::Apply(o)) => Change::Applied(keep(o)),
                Ok(watcher::Event::Delete(o)) => Change::Deleted(keep(o)),
            };
            on(&mut lock(&caches), change);
            trigger.notify_one();
        }
    })
}

/// Start the four watches.
pub fn start(client: &kube::Client, caches: &Shared, trigger: &Arc<Notify>) -> Vec<JoinHandle<()>> {
    vec![
        follow(
            Api::<DaemonSet>::all(client.clone()),
            caches.clone(),
            trigger.clone(),
            std::convert::identity,
            on_ds,
        ),
        follow(
            Api::<Job>::all(client.clone()),
            caches.clone(),
            trigger.clone(),
            std::convert::identity,
            on_job,
        ),
        follow(
            Api::<Node>::all(client.clone()),
            caches.clone(),
            trigger.clone(),
            std::convert::identity,
            on_node,
        ),
        follow(
            Api::<Lenient<Pod>>::all(client.clone()),
            caches.clone(),
            trigger.clone(),
            pod_of,
            on_pod,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cache_keeps_what_controllers_read_of_a_pod() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "tolerations": [{"operator": "Exists"}],
                "initContainers": [{"name": "i", "command": ["x"],
                    "resources": {"requests": {"cpu": "2"}}}],
                "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                    {"name": "plain", "image": "i"},
                    {"name": "limited", "resources": {"limits": {"memory": "1Gi"}}}],
                "volumes": [{"name": "v", "hostPath": {"path": "/"}}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0,
                    "image": "i", "imageID": "i"}],
                "initContainerStatuses": [{"name": "i", "ready": true, "restartCount": 0,
                    "image": "i", "imageID": "i"}]}
        }))
        .unwrap();
        let s = slim(p);
        let spec = s.spec.as_ref().unwrap();
        assert!(spec.volumes.is_none() && spec.containers[0].env.is_none());
        assert_eq!(
            crate::controllers::default_scheduler::requests(spec),
            BTreeMap::from([
                ("cpu".to_string(), 2000),
                ("memory".to_string(), 1_073_741_824_000),
                ("nvidia.com/gpu".to_string(), 1000)
            ])
        );
        // The container that requests nothing is not kept.
        let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["c", "limited"]);
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
        let status = s.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
        assert!(status.container_statuses.is_none() && status.init_container_statuses.is_none());
    }

    fn pod(name: &str, owner: &str, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                                     "uid": owner, "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]}
        }))
        .unwrap()
    }

    fn node(name: &str, labels: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    #[test]
    fn pods_are_indexed_by_controller_and_mark_it_dirty() {
        let mut c = Caches::default();
        c.pods_relisted(vec![pod("a", "u1", "n1"), pod("b", "u2", "n1")]);
        assert!(c.dirty.all);
        c.dirty = Dirty::default();
        c.pod_applied(pod("c", "u1", "n2"));
        let names = |v: Vec<Arc<Pod>>| {
            let mut v: Vec<String> = v.iter().map(|p| p.name_any()).collect();
            v.sort();
            v
        };
        assert_eq!(names(c.pods_of("u1")), ["a", "c"]);
        assert_eq!(c.dirty.owners, HashSet::from(["u1".to_string()]));
        assert!(c.dirty.seen_pods.contains("ns/c"));
        // a pod that changes controller leaves the old one's index (and dirties both)
        c.pod_applied(pod("c", "u2", "n2"));
        assert_eq!(names(c.pods_of("u1")), ["a"]);
        assert_eq!(names(c.pods_of("u2")), ["b", "c"]);
        c.pod_deleted(&pod("b", "u2", "n1"));
        assert_eq!(names(c.pods_of("u2")), ["c"]);
        assert!(c.dirty.owners.contains("u2"));
    }

    #[test]
    fn only_placement_changes_of_nodes_dirty_the_daemonsets() {
        let mut c = Caches::default();
        c.node_applied(node("n1", json!({"gpu": "true"})));
        assert!(c.dirty.daemonsets, "a new node");
        c.dirty = Dirty::default();
        let mut heartbeat = node("n1", json!({"gpu": "true"}));
        heartbeat.status = serde_json::from_value(json!({"allocatable": {"cpu": "4"}})).unwrap();
        c.node_applied(heartbeat);
        assert!(!c.dirty.daemonsets, "a status write");
        c.node_applied(node("n1", json!({"gpu": "false"})));
        assert!(c.dirty.daemonsets, "a label change");
    }

    #[test]
    fn an_undecodable_pod_keeps_its_owner_node_and_phase() {
        for spec in [
            json!({"nodeName": "n1", "containers": [{"name": "c"}]}),
            json!({"nodeName": "n1", "containers": 5}),
        ] {
            let raw = json!({
                "metadata": {"name": "bad", "namespace": "ns", "uid": "p1", "labels": {"a": 1},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                                         "uid": "u1", "controller": true}]},
                "spec": spec,
                "status": {"phase": "Running"}
            });
            let l: Lenient<Pod> = serde_json::from_value(raw).unwrap();
            assert!(l.decoded().is_none());
            let p = pod_of(l);
            assert_eq!(controller_uid(&p), Some("u1"));
            assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("n1"));
            assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
        }
    }
}
