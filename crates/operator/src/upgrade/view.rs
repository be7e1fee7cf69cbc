//! The cluster as the upgrade core sees it: plain values, built from API objects by the pure
//! functions here (the shell lists, these convert).

use std::collections::BTreeMap;

use gantry_api::names;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};

/// The DaemonSet controller's pod labels.
pub const LABEL_REVISION_HASH: &str = "controller-revision-hash";
pub const LABEL_TEMPLATE_GENERATION: &str = "pod-template-generation";
/// Static (mirror) pods carry this annotation; a drain leaves them alone.
pub const ANNOTATION_MIRROR_POD: &str = "kubernetes.io/config.mirror";

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub unschedulable: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
}

impl NodeView {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// The driver pod of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverPod {
    pub key: PodKey,
    pub node: String,
    /// Runs the driver DaemonSet's current revision (false for an orphan).
    pub in_sync: bool,
    /// Every container Ready.
    pub ready: bool,
    /// Every container Ready, but not yet for the minimum time: ready after a timer, with no
    /// event to announce it.
    pub settling: bool,
    /// The highest restart count among its containers.
    pub restarts: i32,
    pub terminating: bool,
    /// Creation time, Unix seconds.
    pub created: i64,
}

/// Any other pod on a managed node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodView {
    pub key: PodKey,
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub phase: String,
    /// A container requests or limits `nvidia.com/gpu*` or `nvidia.com/mig-*`, or the pod
    /// shares a GPU as a fraction (it has [`PodView::gpu_groups`]).
    pub uses_gpu: bool,
    /// A GPU reservation pod (the scheduler's, as KAI's binder makes them: `app` label
    /// `kai-resource-reservation`): the GPU group it holds for fractional pods.
    pub reservation: Option<String>,
    /// The GPU groups a fractional pod shares (label `runai-gpu-group`, or one
    /// `runai-gpu-group/<group>` label per GPU); empty for every other pod.
    pub gpu_groups: Vec<String>,
    /// Owned by a DaemonSet (drains and GPU pod deletion leave these alone).
    pub daemonset: bool,
    /// Has a controller owner (a Job, ReplicaSet, ...): recreated elsewhere once evicted.
    pub controlled: bool,
    pub mirror: bool,
    pub empty_dir: bool,
    pub terminating: bool,
    pub ready: bool,
    pub created: i64,
}

impl PodView {
    pub fn finished(&self) -> bool {
        self.phase == "Succeeded" || self.phase == "Failed"
    }
}

/// Everything one planning round looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
    pub driver_pods: Vec<DriverPod>,
    /// Non-driver pods bound to nodes.
    pub pods: Vec<PodView>,
    /// Every driver DaemonSet has as many pods as it wants (upstream aborts the round otherwise:
    /// a node whose driver pod is being replaced has none for a moment).
    pub driver_pods_complete: bool,
    /// An operator-validator DaemonSet exists, so validation waits for its pods.
    pub validator_expected: bool,
}

impl ClusterView {
    /// The part of the view on `nodes`: one NVIDIADriver's pool, planned with its own policy.
    pub fn restrict(&self, nodes: &std::collections::BTreeSet<&str>) -> ClusterView {
        ClusterView {
            nodes: self
                .nodes
                .iter()
                .filter(|n| nodes.contains(n.name.as_str()))
                .cloned()
                .collect(),
            driver_pods: self
                .driver_pods
                .iter()
                .filter(|d| nodes.contains(d.node.as_str()))
                .cloned()
                .collect(),
            pods: self
                .pods
                .iter()
                .filter(|p| nodes.contains(p.node.as_str()))
                .cloned()
                .collect(),
            driver_pods_complete: self.driver_pods_complete,
            validator_expected: self.validator_expected,
        }
    }
}

fn ts(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    t.map(|t| t.0.as_second()).unwrap_or(0)
}

fn condition_true(pod: &Pod, kind: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

pub fn node_view(node: &Node) -> Option<NodeView> {
    let name = node.metadata.name.clone()?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(NodeView {
        name,
        labels: node.metadata.labels.clone().unwrap_or_default(),
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        ready,
    })
}

/// Whether any container (init included) requests or limits a GPU resource.
pub fn uses_gpu(spec: &PodSpec) -> bool {
    let gpu = |k: &String| {
        k.starts_with(names::RESOURCE_GPU) || k.starts_with(names::RESOURCE_MIG_PREFIX)
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref())
        .any(|r| {
            r.requests.iter().flatten().any(|(k, _)| gpu(k))
                || r.limits.iter().flatten().any(|(k, _)| gpu(k))
        })
}

fn key_of(pod: &Pod) -> Option<PodKey> {
    Some(PodKey {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone()?,
    })
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// The GPU group a reservation pod holds, from its labels.
fn reservation_group(labels: &BTreeMap<String, String>) -> Option<String> {
    let app = labels.get(names::LABEL_APP).map(String::as_str);
    (app == Some(names::RESERVATION_APP))
        .then(|| labels.get(names::LABEL_GPU_GROUP).cloned())
        .flatten()
}

/// The GPU groups a (non-reservation) pod shares, from its labels.
fn shared_groups(labels: &BTreeMap<String, String>) -> Vec<String> {
    let multi = format!("{}/", names::LABEL_GPU_GROUP);
    labels
        .iter()
        .filter(|(k, _)| *k == names::LABEL_GPU_GROUP || k.starts_with(&multi))
        .map(|(_, v)| v.clone())
        .collect()
}

pub fn pod_view(pod: &Pod) -> Option<PodView> {
    let spec = pod.spec.as_ref()?;
    let owners = pod.metadata.owner_references.iter().flatten();
    let controller = owners.clone().find(|o| o.controller == Some(true));
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let reservation = reservation_group(&labels);
    let gpu_groups = if reservation.is_some() {
        Vec::new()
    } else {
        shared_groups(&labels)
    };
    Some(PodView {
        key: key_of(pod)?,
        node: node_of(pod)?,
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        uses_gpu: uses_gpu(spec) || !gpu_groups.is_empty(),
        reservation,
        gpu_groups,
        labels,
        daemonset: controller.is_some_and(|o| o.kind == "DaemonSet"),
        controlled: controller.is_some(),
        mirror: pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_MIRROR_POD)),
        empty_dir: spec.volumes.iter().flatten().any(|v| v.empty_dir.is_some()),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        ready: condition_true(pod, "Ready"),
        created: ts(pod.metadata.creation_timestamp.as_ref()),
    })
}

/// What "the DaemonSet's current revision" is, to compare a pod against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revision {
    /// The `controller-revision-hash` of the newest ControllerRevision (real clusters).
    Hash(String),
    /// No ControllerRevisions (the sim keeps none): pods stamped with the DaemonSet's current
    /// `pod-template-generation` carry the current hash; with none yet, the generation itself
    /// is the measure.
    Generation {
        generation: i64,
        hash: Option<String>,
    },
}

/// The current revision of `ds` from its ControllerRevisions (any order) and its pods.
pub fn current_revision(
    ds: &DaemonSet,
    revisions: &[ControllerRevision],
    pods: &[&Pod],
) -> Revision {
    let uid = ds.metadata.uid.as_deref();
    let newest = revisions
        .iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(o.uid.as_str()) == uid)
        })
        .max_by_key(|r| r.revision);
    if let Some(r) = newest {
        let from_label = r
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_REVISION_HASH))
            .cloned();
        let ds_name = ds.metadata.name.clone().unwrap_or_default();
        let from_name = r
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix(&format!("{ds_name}-")))
            .map(str::to_string);
        if let Some(h) = from_label.or(from_name) {
            return Revision::Hash(h);
        }
    }
    let generation = ds.metadata.generation.unwrap_or(1);
    let gen_s = generation.to_string();
    let hash = pods
        .iter()
        .filter(|p| label(p, LABEL_TEMPLATE_GENERATION) == Some(gen_s.as_str()))
        .find_map(|p| label(p, LABEL_REVISION_HASH).map(str::to_string));
    Revision::Generation { generation, hash }
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn pod_in_sync(pod: &Pod, rev: &Revision) -> bool {
    let hash = label(pod, LABEL_REVISION_HASH);
    match rev {
        Revision::Hash(h) => hash == Some(h.as_str()),
        Revision::Generation { hash: Some(h), .. } => hash == Some(h.as_str()),
        Revision::Generation {
            generation,
            hash: None,
        } => label(pod, LABEL_TEMPLATE_GENERATION) == Some(generation.to_string().as_str()),
    }
}

/// The driver pod view; `rev` is `None` for an orphan (no DaemonSet owns it). Like a
/// DaemonSet's `minReadySeconds`, the pod counts as ready only once every container has been
/// running for `min_ready_s` (at `now`, Unix seconds): a crash-looping driver is Ready for a
/// moment after each start, and that moment must not pass for an installed driver.
pub fn driver_pod(
    pod: &Pod,
    rev: Option<&Revision>,
    now: i64,
    min_ready_s: i64,
) -> Option<DriverPod> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let settled = |c: &k8s_openapi::api::core::v1::ContainerStatus| {
        min_ready_s <= 0
            || c.state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .is_some_and(|t| now - t.0.as_second() >= min_ready_s)
    };
    let running_since = |c: &k8s_openapi::api::core::v1::ContainerStatus| {
        c.state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some_and(|r| r.started_at.is_some())
    };
    let containers_ready = !statuses.is_empty() && statuses.iter().all(|c| c.ready);
    let all_ready = containers_ready && statuses.iter().all(settled);
    let pod_ready = condition_true(pod, "Ready");
    Some(DriverPod {
        key: key_of(pod)?,
        node: node_of(pod)?,
        in_sync: rev.is_some_and(|r| pod_in_sync(pod, r)),
        ready: all_ready && pod_ready,
        settling: containers_ready && pod_ready && !all_ready && statuses.iter().all(running_since),
        restarts: statuses.iter().map(|c| c.restart_count).max().unwrap_or(0),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        created: ts(pod.metadata.creation_timestamp.as_ref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn gpu_pods_are_recognised_by_resource_prefix() {
        let p = pod(json!({"metadata": {"name": "a", "namespace": "d",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
                     "volumes": [{"name": "s", "emptyDir": {}}]},
            "status": {"phase": "Running"}}));
        let v = pod_view(&p).unwrap();
        assert!(v.uses_gpu && v.controlled && !v.daemonset && v.empty_dir);
        let cpu = pod(json!({"metadata": {"name": "b"}, "spec": {"nodeName": "n",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}));
        let v = pod_view(&cpu).unwrap();
        assert!(!v.uses_gpu && !v.controlled);
        let init = pod(json!({"metadata": {"name": "b"}, "spec": {"nodeName": "n",
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu.shared": "1"}}}],
            "containers": [{"name": "c"}]}}));
        assert!(pod_view(&init).unwrap().uses_gpu);
        let unbound = pod(json!({"metadata": {"name": "b"}, "spec": {"containers": []}}));
        assert!(pod_view(&unbound).is_none());
    }

    #[test]
    fn reservation_pods_and_their_fractional_tenants_are_recognised() {
        let r = pod(
            json!({"metadata": {"name": "gpu-reservation-1", "namespace": "gantry-reservation",
            "labels": {"app": "kai-resource-reservation", "runai-gpu-group": "g1"}},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
        );
        let v = pod_view(&r).unwrap();
        assert_eq!(v.reservation.as_deref(), Some("g1"));
        assert!(v.uses_gpu && !v.controlled && v.gpu_groups.is_empty());
        // A fraction asks for no GPU resource: its group label makes it a GPU pod.
        let half = pod(json!({"metadata": {"name": "half", "namespace": "team",
            "labels": {"runai-gpu-group": "g1"}, "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}));
        let v = pod_view(&half).unwrap();
        assert_eq!(
            (v.reservation, v.gpu_groups, v.uses_gpu),
            (None, vec!["g1".to_string()], true)
        );
        let two = pod(json!({"metadata": {"name": "two",
            "labels": {"runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2"}},
            "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}));
        assert_eq!(pod_view(&two).unwrap().gpu_groups, ["g1", "g2"]);
    }

    fn ds(generation: i64) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "nvidia-driver-daemonset", "uid": "ds-1", "generation": generation},
            "spec": {"selector": {}, "template": {}}}))
        .unwrap()
    }

    fn dpod(hash: &str, generation: i64) -> Pod {
        pod(
            json!({"metadata": {"name": "d", "namespace": "gpu-operator",
            "labels": {LABEL_REVISION_HASH: hash, LABEL_TEMPLATE_GENERATION: generation.to_string()}},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 3}]}}),
        )
    }

    #[test]
    fn revision_from_controller_revisions_wins() {
        let revs: Vec<ControllerRevision> = [(1, "old"), (2, "new")]
            .into_iter()
            .map(|(n, h)| {
                serde_json::from_value(json!({"metadata": {"name": format!("nvidia-driver-daemonset-{h}"),
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "ds-1"}]},
                    "revision": n}))
                .unwrap()
            })
            .collect();
        let rev = current_revision(&ds(5), &revs, &[]);
        assert_eq!(rev, Revision::Hash("new".into()));
        assert!(pod_in_sync(&dpod("new", 1), &rev));
        assert!(!pod_in_sync(&dpod("old", 5), &rev));
    }

    #[test]
    fn revision_falls_back_to_generation_then_hash() {
        let old = dpod("h1", 1);
        let rev = current_revision(&ds(2), &[], &[&old]);
        assert_eq!(
            rev,
            Revision::Generation {
                generation: 2,
                hash: None
            }
        );
        assert!(!pod_in_sync(&old, &rev));
        let new = dpod("h2", 2);
        let rev = current_revision(&ds(2), &[], &[&old, &new]);
        assert!(pod_in_sync(&new, &rev));
        assert!(!pod_in_sync(&old, &rev));
        // Same template under an older generation stamp: still in sync.
        assert!(pod_in_sync(&dpod("h2", 1), &rev));
    }

    #[test]
    fn driver_pod_readiness_and_restarts() {
        let d = driver_pod(&dpod("h", 1), None, 0, 0).unwrap();
        assert!(d.ready && !d.in_sync);
        assert_eq!(d.restarts, 3);
    }

    #[test]
    fn driver_pod_must_stay_ready_for_min_ready_seconds() {
        let mut p = dpod("h", 1);
        if let Some(cs) = p
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            cs[0].state =
                serde_json::from_value(json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}))
                    .unwrap();
        }
        let started = 1_767_225_600; // 2026-01-01T00:00:00Z
        let young = driver_pod(&p, None, started + 4, 5).unwrap();
        assert!(!young.ready && young.settling);
        let settled = driver_pod(&p, None, started + 5, 5).unwrap();
        assert!(settled.ready && !settled.settling);
        // Not running at all (waiting in a crash loop): never ready with a settle time.
        let looping = driver_pod(&dpod("h", 1), None, started + 60, 5).unwrap();
        assert!(!looping.ready && !looping.settling);
    }
}
