//! Kubernetes objects -> the core's input shapes, pure. Pods are stripped to what scheduling
//! needs (requests, the sharing annotations, placement constraints), so the cache stays small.

use crate::input::{
    NodeInput, PodGroupInput, PodInput, PodPhase, QueueInput, QueueResourceInput, SubGroupInput,
};
use gantry_api::kai::{Limit, PodGroup, Queue, QueueResourceKind, Quota};
use gantry_api::names;
use gantry_k8s_rules::RequiredNodeAffinity;
use gantry_k8s_rules::taints::{taints_from_k8s, tolerations_from_k8s};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// A quantity in base units (`"500m"` -> 0.5, `"2Gi"` -> 2^31); `None` if malformed.
fn quantity(q: &Quantity) -> Option<f64> {
    gantry_k8s_rules::quantity::parse_f64(&q.0).ok()
}

/// A problem in one object, named for the person who reads the Event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn res_map(
    m: Option<&BTreeMap<String, Quantity>>,
    out: &mut BTreeMap<String, f64>,
    path: &str,
) -> Result<(), FieldError> {
    for (k, v) in m.into_iter().flatten() {
        let n = quantity(v).ok_or_else(|| FieldError {
            field: format!("{path}[{k}]"),
            message: format!("{:?} is not a quantity", v.0),
        })?;
        let e = out.entry(k.clone()).or_insert(0.0);
        *e = e.max(0.0) + n;
    }
    Ok(())
}

/// Effective requests of a pod: sum of containers (limits fill in missing requests, as the
/// API server defaults them), max'ed with each init container.
pub fn pod_requests(pod: &Pod) -> Result<BTreeMap<String, f64>, FieldError> {
    let mut sum: BTreeMap<String, f64> = BTreeMap::new();
    let Some(spec) = &pod.spec else {
        return Ok(sum);
    };
    for (i, c) in spec.containers.iter().enumerate() {
        let mut one = BTreeMap::new();
        let r = c.resources.as_ref();
        res_map(
            r.and_then(|r| r.limits.as_ref()),
            &mut one,
            &format!("spec.containers[{i}].resources.limits"),
        )?;
        let mut req = BTreeMap::new();
        res_map(
            r.and_then(|r| r.requests.as_ref()),
            &mut req,
            &format!("spec.containers[{i}].resources.requests"),
        )?;
        one.extend(req);
        for (k, v) in one {
            *sum.entry(k).or_insert(0.0) += v;
        }
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let mut one = BTreeMap::new();
        let r = c.resources.as_ref();
        res_map(
            r.and_then(|r| r.limits.as_ref()),
            &mut one,
            &format!("spec.initContainers[{i}].resources.limits"),
        )?;
        let mut req = BTreeMap::new();
        res_map(
            r.and_then(|r| r.requests.as_ref()),
            &mut req,
            &format!("spec.initContainers[{i}].resources.requests"),
        )?;
        one.extend(req);
        for (k, v) in one {
            let e = sum.entry(k).or_insert(0.0);
            *e = e.max(v);
        }
    }
    Ok(sum)
}

/// The controlling owner of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// What the cache keeps of a pod.
#[derive(Clone, Debug)]
pub struct CachedPod {
    pub uid: String,
    pub input: PodInput,
    /// `spec.schedulerName` is ours.
    pub ours: bool,
    /// Succeeded or Failed: holds nothing.
    pub terminal: bool,
    pub terminating: bool,
    pub owner: Option<OwnerRef>,
    /// Labels the pod grouper reads (queue, project, priority class, preemptibility).
    pub labels: BTreeMap<String, String>,
    pub priority_class: Option<String>,
    pub skip_podgrouper: bool,
    /// Label `runai-gpu-group` (fraction tenants and reservation pods).
    pub gpu_group: Option<String>,
    /// A GPU reservation pod (namespace + app label).
    pub reservation: bool,
    /// Reservation pods: the GPU UUID the device plugin gave it, once known.
    pub reserved_uuid: Option<String>,
    /// Something in the pod the scheduler cannot use; reported as an Event.
    pub problem: Option<String>,
}

const KEPT_ANNOTATIONS: [&str; 5] = [
    names::ANNOTATION_GPU_FRACTION,
    names::ANNOTATION_GPU_MEMORY,
    names::ANNOTATION_GPU_FRACTION_NUM_DEVICES,
    names::ANNOTATION_GPU_FRACTION_CONTAINER_NAME,
    names::ANNOTATION_MPS,
];
const KEPT_LABELS: [&str; 5] = [
    names::LABEL_QUEUE,
    names::LABEL_PROJECT,
    names::LABEL_PRIORITY_CLASS_NAME,
    names::LABEL_PREEMPTIBILITY,
    names::LABEL_NODE_POOL,
];

fn time_secs(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    t.map_or(0, |t| t.0.as_second())
}

/// The GPU UUID a reservation pod holds: its own report (`run.ai/reserve_for_gpu_index`, as
/// KAI's reservation image writes it) or, in the sim, the kubelet's allocation record.
pub fn reserved_uuid(pod: &Pod) -> Option<String> {
    let ann = pod.metadata.annotations.as_ref()?;
    if let Some(u) = ann.get(names::ANNOTATION_RESERVE_FOR_GPU_INDEX)
        && !u.is_empty()
    {
        return Some(u.clone());
    }
    allocated_uuids(pod).into_iter().next()
}

/// The GPUs (`nvidia.com/gpu`) the node allocated to the pod's containers, by UUID, from
/// the sim kubelet's allocation record (replica suffixes `::n` dropped). Empty when the node
/// does not say (a real kubelet keeps this in its PodResources API, node-local).
pub fn allocated_uuids(pod: &Pod) -> Vec<String> {
    let Some(rec) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_SIM_ALLOCATED))
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for c in rec.as_object().into_iter().flat_map(|o| o.values()) {
        let Some(gpu) = c.get(names::RESOURCE_GPU) else {
            continue;
        };
        let ids: Vec<String> = match gpu
            .get("envs")
            .and_then(|e| e.get("NVIDIA_VISIBLE_DEVICES"))
            .and_then(|v| v.as_str())
        {
            Some(env) => env.split(',').map(str::to_string).collect(),
            None => gpu
                .get("deviceIDs")
                .and_then(|d| d.as_array())
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .map(|id| id.split("::").next().unwrap_or(id).to_string())
                .collect(),
        };
        for id in ids {
            if !id.is_empty() && !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// Strip a pod to its cache entry. Never fails: problems land in `problem`.
pub fn pod(pod: &Pod, scheduler_name: &str, reservation_ns: &str) -> CachedPod {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let labels_all = meta.labels.clone().unwrap_or_default();
    let ann_all = meta.annotations.as_ref();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let phase_str = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let node = spec
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let mut problem = None;
    let requests = match pod_requests(pod) {
        Ok(r) => r,
        Err(e) => {
            problem = Some(format!(
                "pod {}/{}: {e}",
                namespace,
                meta.name.as_deref().unwrap_or("")
            ));
            BTreeMap::new()
        }
    };
    let mut extended = BTreeMap::new();
    for (k, v) in &requests {
        if k == names::RESOURCE_GPU || k.starts_with(names::RESOURCE_MIG_PREFIX) {
            extended.insert(k.clone(), v.ceil() as i64);
        }
    }
    let annotations: BTreeMap<String, String> = KEPT_ANNOTATIONS
        .iter()
        .filter_map(|k| Some((k.to_string(), ann_all?.get(*k)?.clone())))
        .collect();
    if problem.is_none()
        && let Err(errs) = gantry_api::kai::pod_gpu_sharing(pod)
    {
        let msg: Vec<String> = errs.iter().map(ToString::to_string).collect();
        problem = Some(format!(
            "pod {}/{}: {}",
            namespace,
            meta.name.as_deref().unwrap_or(""),
            msg.join("; ")
        ));
    }
    // Terms kube-scheduler could not parse never match; the pod's problem says why.
    let (placement, affinity_errors) = spec
        .map(RequiredNodeAffinity::from_pod_spec)
        .unwrap_or_default();
    if problem.is_none()
        && !affinity_errors.is_empty()
        && placement
            .affinity
            .as_ref()
            .is_some_and(|a| a.terms.is_empty())
    {
        let msg: Vec<String> = affinity_errors.iter().map(ToString::to_string).collect();
        problem = Some(format!(
            "pod {}/{}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: {}",
            namespace,
            meta.name.as_deref().unwrap_or(""),
            msg.join("; ")
        ));
    }
    let gpu_indices = ann_all
        .and_then(|a| a.get(names::ANNOTATION_SCHEDULER_GPU_INDICES))
        .map(|v| v.split(',').filter_map(|i| i.trim().parse().ok()).collect())
        .unwrap_or_default();
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| OwnerRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        });
    let reservation = namespace == reservation_ns
        && labels_all.get(names::LABEL_APP).map(String::as_str) == Some(names::RESERVATION_APP);
    let input = PodInput {
        namespace,
        name: meta.name.clone().unwrap_or_default(),
        pod_group: ann_all
            .and_then(|a| a.get(names::ANNOTATION_POD_GROUP_NAME))
            .cloned()
            .unwrap_or_default(),
        sub_group: labels_all.get(names::LABEL_SUBGROUP_NAME).cloned(),
        cpu_milli: (requests.get("cpu").copied().unwrap_or(0.0) * 1000.0).ceil() as i64,
        memory_bytes: requests.get("memory").copied().unwrap_or(0.0).ceil() as i64,
        extended,
        annotations,
        node_selector: placement.node_selector,
        affinity: placement.affinity,
        tolerations: tolerations_from_k8s(
            spec.and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
        ),
        phase: if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        },
        gpu_uuids: if node.is_some() {
            allocated_uuids(pod)
        } else {
            Vec::new()
        },
        reservation: false,
        node,
        gpu_indices,
        creation: time_secs(meta.creation_timestamp.as_ref()),
        task_priority: labels_all
            .get(names::LABEL_TASK_PRIORITY)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        releasing: false,
    };
    CachedPod {
        uid: meta.uid.clone().unwrap_or_default(),
        ours: spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name),
        terminal: matches!(phase_str, "Succeeded" | "Failed"),
        terminating: meta.deletion_timestamp.is_some(),
        owner,
        labels: KEPT_LABELS
            .iter()
            .filter_map(|k| Some((k.to_string(), labels_all.get(*k)?.clone())))
            .collect(),
        priority_class: spec.and_then(|s| s.priority_class_name.clone()),
        skip_podgrouper: ann_all
            .and_then(|a| a.get(names::ANNOTATION_SKIP_PODGROUPER))
            .is_some_and(|v| v == "true"),
        gpu_group: labels_all.get(names::LABEL_GPU_GROUP).cloned(),
        reserved_uuid: if reservation {
            reserved_uuid(pod)
        } else {
            None
        },
        reservation,
        problem,
        input,
    }
}

/// A Node as the core sees it: allocatable, GFD labels, taints, readiness.
pub fn node(n: &Node) -> NodeInput {
    let status = n.status.as_ref();
    let alloc = status.and_then(|s| s.allocatable.as_ref());
    let get = |k: &str| {
        alloc
            .and_then(|a| a.get(k))
            .and_then(quantity)
            .unwrap_or(0.0)
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let spec = n.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    NodeInput {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints: taints_from_k8s(spec.and_then(|s| s.taints.as_deref()).unwrap_or_default()),
        schedulable: ready && !cordoned,
        cpu_milli: (get("cpu") * 1000.0) as i64,
        memory_bytes: get("memory") as i64,
        pods: get("pods") as u32,
        gpus: get(names::RESOURCE_GPU) as u32,
        mig: alloc
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(names::RESOURCE_MIG_PREFIX))
            .filter_map(|(k, q)| Some((k.clone(), quantity(q)? as u32)))
            .collect(),
        gpu_devices: gpu_devices(n),
    }
}

/// The node's published GPU identities; a value that does not parse is logged and ignored
/// (the node's GPUs are then slots, as without it).
fn gpu_devices(n: &Node) -> Vec<gantry_api::gpu_devices::GpuDevice> {
    let Some(v) = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_GPU_DEVICES))
    else {
        return Vec::new();
    };
    gantry_api::gpu_devices::parse(v).unwrap_or_else(|e| {
        tracing::warn!(
            node = n.metadata.name.as_deref().unwrap_or(""),
            "annotation {}: {e}; GPUs taken as slots",
            names::ANNOTATION_GPU_DEVICES
        );
        Vec::new()
    })
}

/// A Queue as the core sees it (KAI's omitted-value rules).
pub fn queue(q: &Queue) -> QueueInput {
    let res = |kind| {
        let e = q.spec.resource(kind);
        QueueResourceInput {
            quota: match e.quota {
                Quota::AllAvailable => -1.0,
                Quota::Amount(v) => v,
            },
            limit: match e.limit {
                Limit::Unlimited => -1.0,
                Limit::Max(v) => v,
            },
            over_quota_weight: e.over_quota_weight,
        }
    };
    QueueInput {
        name: q.metadata.name.clone().unwrap_or_default(),
        parent: q.spec.parent().map(str::to_string),
        priority: q.spec.priority,
        gpu: res(QueueResourceKind::Gpu),
        cpu: res(QueueResourceKind::Cpu),
        memory: res(QueueResourceKind::Memory),
        creation: time_secs(q.metadata.creation_timestamp.as_ref()),
        usage: [0.0; 3],
        preempt_min_runtime: q.spec.preempt_min_runtime_nanos(),
        reclaim_min_runtime: q.spec.reclaim_min_runtime_nanos(),
    }
}

/// A PodGroup as the core sees it; `priority_of` resolves a PriorityClass name.
pub fn pod_group(pg: &PodGroup, priority_of: impl Fn(&str) -> Option<i32>) -> PodGroupInput {
    let spec = &pg.spec;
    let priority = spec
        .priority_class_name
        .as_deref()
        .and_then(&priority_of)
        .unwrap_or(names::DEFAULT_POD_GROUP_PRIORITY);
    let ann = pg.metadata.annotations.as_ref();
    PodGroupInput {
        namespace: pg.metadata.namespace.clone().unwrap_or_default(),
        name: pg.metadata.name.clone().unwrap_or_default(),
        queue: spec.queue().unwrap_or(names::DEFAULT_QUEUE).to_string(),
        priority: Some(priority),
        preemptible: Some(
            spec.preemptibility(priority) == gantry_api::kai::Preemptibility::Preemptible,
        ),
        min_member: Some(spec.min_member().max(0) as u32),
        sub_groups: spec
            .sub_groups()
            .iter()
            .filter(|sg| spec.is_leaf(&sg.name))
            .map(|sg| SubGroupInput {
                name: sg.name.clone(),
                min_member: sg.min_member.unwrap_or(0).max(0) as u32,
            })
            .collect(),
        creation: time_secs(pg.metadata.creation_timestamp.as_ref()),
        staleness_grace_secs: spec
            .staleness_grace_period_nanos()
            .map(|n| n / 1_000_000_000),
        stale_since: ann
            .and_then(|a| a.get(names::ANNOTATION_STALE_PODGROUP_TIMESTAMP))
            .and_then(|v| chrono::DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.timestamp()),
        last_start: ann
            .and_then(|a| a.get(names::ANNOTATION_LAST_START_TIMESTAMP))
            .and_then(|v| chrono::DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.timestamp()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_json(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn pod_is_stripped_to_what_scheduling_needs() {
        let p = pod_json(json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1",
                "labels": {"kai.scheduler/queue": "team-a", "unrelated": "x"},
                "annotations": {"gpu-fraction": "0.5", "pod-group-name": "pg-a", "noise": "y"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "d"}]}
        }));
        let c = pod(&p, "kai-scheduler", "gantry-reservation");
        assert!(c.ours && c.problem.is_none());
        // KAI's rule: any nvidia.com/gpu limit, even "0", excludes a share.
        let mut zero = p.clone();
        if let Some(s) = zero.spec.as_mut() {
            s.containers[1].resources =
                Some(serde_json::from_value(json!({"limits": {"nvidia.com/gpu": "0"}})).unwrap());
        }
        let z = pod(&zero, "kai-scheduler", "gantry-reservation");
        assert!(
            z.problem
                .is_some_and(|m| m.contains("whole nvidia.com/gpu limit"))
        );
        assert_eq!(c.input.cpu_milli, 500);
        assert_eq!(c.input.memory_bytes, 1 << 30);
        assert_eq!(c.input.pod_group, "pg-a");
        assert_eq!(c.input.annotations.len(), 1);
        assert_eq!(c.labels.len(), 1);
        assert_eq!(c.input.phase, PodPhase::Pending);
    }

    #[test]
    fn bad_fraction_is_a_problem_not_a_panic() {
        let p = pod_json(json!({
            "metadata": {"name": "a", "namespace": "ns", "annotations": {"gpu-fraction": "1.5"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}
        }));
        let c = pod(&p, "kai-scheduler", "r");
        let msg = c.problem.unwrap();
        assert!(
            msg.contains("gpu-fraction") && msg.contains("ns/a"),
            "{msg}"
        );
    }

    #[test]
    fn bad_quantity_names_the_field() {
        let p = pod_json(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}
        }));
        let c = pod(&p, "kai-scheduler", "r");
        assert!(
            c.problem
                .unwrap()
                .contains("spec.containers[0].resources.requests[cpu]")
        );
    }

    #[test]
    fn reservation_uuid_from_sim_record() {
        let rec = json!({"resource-reservation": {"nvidia.com/gpu": {
            "deviceIDs": ["GPU-123"], "envs": {"NVIDIA_VISIBLE_DEVICES": "GPU-123"}}}});
        let p = pod_json(json!({
            "metadata": {"name": "r", "namespace": "gantry-reservation",
                "labels": {"app": "kai-resource-reservation", "runai-gpu-group": "g1"},
                "annotations": {"sim.gantry.dev/allocated-devices": rec.to_string()}},
            "spec": {"nodeName": "n1", "containers": [{"name": "resource-reservation"}]}
        }));
        let c = pod(&p, "kai-scheduler", "gantry-reservation");
        assert!(c.reservation);
        assert_eq!(c.reserved_uuid.as_deref(), Some("GPU-123"));
        assert_eq!(c.gpu_group.as_deref(), Some("g1"));
    }

    #[test]
    fn node_readiness_and_gpus() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.memory": "81559"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let i = node(&n);
        assert!(i.schedulable);
        assert_eq!((i.gpus, i.cpu_milli, i.pods), (8, 16000, 110));
        assert_eq!(i.taints.len(), 1);
    }
}
