//! The cache shape the Kubernetes adapter fills: plain, string-keyed objects close to the
//! API objects. `Snapshot::build` turns this into the indexed model the actions use.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything one scheduling cycle looks at.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClusterInput {
    /// Cycle time, Unix seconds (staleness and min-runtime arithmetic).
    pub now: i64,
    pub nodes: Vec<NodeInput>,
    pub queues: Vec<QueueInput>,
    pub pod_groups: Vec<PodGroupInput>,
    pub pods: Vec<PodInput>,
    /// KAI `Topology` objects (topology-aware placement).
    #[serde(default)]
    pub topologies: Vec<TopologyInput>,
}

/// A KAI `Topology`: node label keys of its levels, outermost first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TopologyInput {
    pub name: String,
    pub levels: Vec<String>,
    /// Why the object is unusable (its levels break upstream's rules); jobs naming it wait.
    #[serde(default)]
    pub problem: Option<String>,
}

/// A job's topology constraint (PodGroup `spec.topologyConstraint`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TopologyConstraintInput {
    /// Name of the `Topology` object.
    pub topology: String,
    /// Level (node label key) all the job's pods must share.
    pub required: Option<String>,
    /// Level the scheduler tries to keep the pods within, widening when none fits.
    pub preferred: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeInput {
    pub name: String,
    /// Node labels; GPU model and memory come from the GFD labels
    /// `nvidia.com/gpu.product` and `nvidia.com/gpu.memory`.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// False when the node is not Ready or is cordoned.
    pub schedulable: bool,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub pods: u32,
    /// Allocatable `nvidia.com/gpu` (whole GPUs; MIG devices under the `single` strategy).
    pub gpus: u32,
    /// Allocatable `nvidia.com/mig-<profile>` resources, keyed by full resource name.
    pub mig: BTreeMap<String, u32>,
    /// The node's physical GPUs as its device plugin publishes them (annotation
    /// `node.gantry.dev/gpu-devices`); empty: unknown, GPUs are slots `0..gpus-1`.
    #[serde(default)]
    pub gpu_devices: Vec<gantry_api::gpu_devices::GpuDevice>,
}

// Taints, tolerations and node affinity are the shared Kubernetes rules' own types, so the
// scheduler evaluates them exactly as the sim and kube-scheduler do.
pub use gantry_k8s_rules::affinity::{NodeSelector, NodeSelectorTerm};
pub use gantry_k8s_rules::{Taint, TaintEffect, Toleration, TolerationOperator};

/// One resource of a queue, in KAI units: GPUs (fractions allowed), millicores, MB (10^6 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueResourceInput {
    /// Deserved amount; `-1` = everything available at this level.
    pub quota: f64,
    /// Hard cap; `-1` = unlimited; `0` = none of this resource at all (KAI's omitted value).
    pub limit: f64,
    pub over_quota_weight: f64,
}

impl Default for QueueResourceInput {
    /// KAI's default queues: quota 0, unlimited, weight 1.
    fn default() -> Self {
        QueueResourceInput {
            quota: 0.0,
            limit: -1.0,
            over_quota_weight: 1.0,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct QueueInput {
    pub name: String,
    pub parent: Option<String>,
    /// `None` = 100 (KAI's default queue priority).
    pub priority: Option<i32>,
    pub gpu: QueueResourceInput,
    pub cpu: QueueResourceInput,
    pub memory: QueueResourceInput,
    /// Unix seconds; older queues win ties.
    pub creation: i64,
    /// Historical usage per resource (gpu, cpu, memory), normalised to cluster capacity
    /// (time-based fair share); zeros without a usage database.
    #[serde(default)]
    pub usage: [f64; 3],
    /// `spec.preemptMinRuntime` / `spec.reclaimMinRuntime` in nanoseconds (`None`: unset,
    /// inherited from the parent queue or the scheduler's default).
    #[serde(default)]
    pub preempt_min_runtime: Option<i64>,
    #[serde(default)]
    pub reclaim_min_runtime: Option<i64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PodGroupInput {
    pub namespace: String,
    pub name: String,
    pub queue: String,
    /// `None` = 50 (`train`).
    pub priority: Option<i32>,
    /// `None` = derived from priority (< 100 preemptible).
    pub preemptible: Option<bool>,
    /// `None` = 1; `0` = no gang.
    pub min_member: Option<u32>,
    pub sub_groups: Vec<SubGroupInput>,
    pub creation: i64,
    /// Seconds a gang may stay below its minimum before eviction; `None` = 60; negative = never.
    pub staleness_grace_secs: Option<i64>,
    /// When the scheduler first saw the gang below its minimum (annotation
    /// `kai.scheduler/stale-podgroup-timestamp`), Unix seconds.
    pub stale_since: Option<i64>,
    /// When the job last started (annotation `kai.scheduler/last-start-timestamp`), Unix
    /// seconds; min-runtime counts from here.
    #[serde(default)]
    pub last_start: Option<i64>,
    /// Required/preferred topology placement.
    #[serde(default)]
    pub topology: Option<TopologyConstraintInput>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SubGroupInput {
    pub name: String,
    pub min_member: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PodPhase {
    #[default]
    Pending,
    /// Bound or running: holds its resources.
    Running,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PodInput {
    pub namespace: String,
    pub name: String,
    /// Name of the PodGroup (annotation `pod-group-name`), in the pod's namespace.
    pub pod_group: String,
    /// Label `kai.scheduler/subgroup-name`.
    pub sub_group: Option<String>,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    /// Extended resource requests: `nvidia.com/gpu`, `nvidia.com/mig-<profile>`.
    pub extended: BTreeMap<String, i64>,
    /// Pod annotations (only the GPU-sharing ones are read).
    pub annotations: BTreeMap<String, String>,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity (`None`: none; terms are ORed, and no usable term matches
    /// no node).
    pub affinity: Option<NodeSelector>,
    pub tolerations: Vec<Toleration>,
    pub phase: PodPhase,
    pub node: Option<String>,
    /// GPU indices on `node` the pod holds: the physical GPUs of whole-GPU pods, the GPU
    /// groups (reservations) of fractions.
    pub gpu_indices: Vec<u32>,
    /// UUIDs of the GPUs the node reports the pod holds (a reservation pod's report, the
    /// kubelet's allocation record); they win over `gpu_indices` where the node names them.
    #[serde(default)]
    pub gpu_uuids: Vec<String>,
    /// A GPU reservation pod (holds the GPU of the fraction group in `gpu_indices`).
    #[serde(default)]
    pub reservation: bool,
    pub creation: i64,
    /// Label `kai.scheduler/task-priority`.
    pub task_priority: i32,
    /// Bound but terminating (KAI's `Releasing`): it still holds its node's resources until
    /// it is gone, but is neither a victim nor counted in its queue; work placed onto what it
    /// frees is bound only once it is gone (pipelined).
    #[serde(default)]
    pub releasing: bool,
}
