//! What a cycle decides: binds, evictions with reasons, and why pending pods stay pending.

use crate::snapshot::{NodeId, PodId};
use serde::Serialize;
use std::fmt;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Decisions {
    pub binds: Vec<Bind>,
    pub evictions: Vec<Eviction>,
    pub unschedulable: Vec<Unschedulable>,
    /// Gangs whose stale timestamp changes: `since` set when first seen below minimum,
    /// `None` when the gang recovered (annotation `kai.scheduler/stale-podgroup-timestamp`).
    pub stale_marks: Vec<StaleMark>,
    pub queues: Vec<QueueReport>,
    pub issues: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bind {
    pub pod: PodId,
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub node_id: NodeId,
    pub gpu: GpuBinding,
    /// The resources are still held by pods evicted this cycle: bind once they are gone.
    pub pipelined: bool,
}

/// What the binder hands the pod (KAI `receivedResourceType`); built from a placement by
/// `actions::gpu_binding`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum GpuBinding {
    None,
    /// `Regular`: whole devices by index.
    Whole {
        indices: Vec<u32>,
    },
    /// `Fraction`: this share (milli) in each listed GPU group (its index names the group's
    /// reservation; on nodes that publish their GPUs it need not be the GPU's index).
    Fraction {
        indices: Vec<u32>,
        milli: u32,
    },
    /// `MigInstance`.
    Mig {
        resource: String,
        count: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Eviction {
    pub pod: PodId,
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub reason: EvictReason,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum EvictReason {
    /// Another queue below its fair share takes back over-quota resources.
    Reclaim {
        by_job: String,
        by_queue: String,
        victim_queue: String,
    },
    /// A higher-priority job of the same queue.
    Preempt {
        by_job: String,
        priority: i32,
        victim_priority: i32,
    },
    /// Moved to make room; the pod is expected back on `relocate_to`.
    Consolidation { by_job: String, relocate_to: String },
    /// The gang stayed below its minimum longer than its grace period.
    StaleGang { since: i64, grace_secs: i64 },
}

impl fmt::Display for EvictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvictReason::Reclaim {
                by_job,
                by_queue,
                victim_queue,
            } => {
                write!(
                    f,
                    "reclaimed by job {by_job} of queue {by_queue}: queue {victim_queue} is over its fair share"
                )
            }
            EvictReason::Preempt {
                by_job,
                priority,
                victim_priority,
            } => {
                write!(
                    f,
                    "preempted by job {by_job} (priority {priority} > {victim_priority}) in the same queue"
                )
            }
            EvictReason::Consolidation {
                by_job,
                relocate_to,
            } => {
                write!(
                    f,
                    "consolidated to node {relocate_to} to make room for job {by_job}"
                )
            }
            EvictReason::StaleGang { since, grace_secs } => {
                write!(
                    f,
                    "gang below its minimum members since {since} for longer than {grace_secs}s"
                )
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unschedulable {
    pub pod: PodId,
    pub namespace: String,
    pub name: String,
    /// Job-level reason (`OverLimit`, gang, queue ...) or the node summary.
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleMark {
    pub namespace: String,
    pub pod_group: String,
    pub since: Option<i64>,
}

/// Per-queue figures for the queue status and PodGroup conditions (natural units:
/// GPUs, millicores, bytes).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueReport {
    pub name: String,
    /// The queue's own quota as written (`-1` kept: unlimited).
    pub quota: [f64; 3],
    pub deserved: [f64; 3],
    pub fair_share: [f64; 3],
    pub allocated: [f64; 3],
    pub allocated_non_preemptible: [f64; 3],
    pub requested: [f64; 3],
    /// Historical usage normalised to cluster capacity (time-based fair share; 0 without).
    pub usage: [f64; 3],
}

/// Why one node cannot take one pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NodeReason {
    NotSchedulable,
    NodeSelector,
    Affinity,
    Taint(String),
    InsufficientCpu,
    InsufficientMemory,
    TooManyPods,
    InsufficientGpu,
    InsufficientGpuShare,
    GpuMemoryUnknown,
    GpuMemoryTooSmall,
    MigNodeNoFractions,
    InsufficientMig(String),
}

impl fmt::Display for NodeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeReason::NotSchedulable => f.write_str("node not ready or cordoned"),
            NodeReason::NodeSelector => f.write_str("node selector mismatch"),
            NodeReason::Affinity => f.write_str("node affinity mismatch"),
            NodeReason::Taint(k) => write!(f, "untolerated taint {k}"),
            NodeReason::InsufficientCpu => f.write_str("insufficient cpu"),
            NodeReason::InsufficientMemory => f.write_str("insufficient memory"),
            NodeReason::TooManyPods => f.write_str("too many pods"),
            NodeReason::InsufficientGpu => {
                write!(f, "insufficient {}", gantry_api::names::RESOURCE_GPU)
            }
            NodeReason::InsufficientGpuShare => f.write_str("insufficient free GPU share"),
            NodeReason::GpuMemoryUnknown => write!(
                f,
                "GPU memory unknown (label {} missing)",
                gantry_api::names::LABEL_GPU_MEMORY
            ),
            NodeReason::GpuMemoryTooSmall => {
                f.write_str("GPU memory smaller than gpu-memory request")
            }
            NodeReason::MigNodeNoFractions => f.write_str("MIG node does not host GPU fractions"),
            NodeReason::InsufficientMig(r) => write!(f, "insufficient {r}"),
        }
    }
}

/// "0/40 nodes: 32 insufficient nvidia.com/gpu, 8 untolerated taint nvidia.com/gpu"
/// (largest count first, then by reason for a stable message).
pub fn summarize(total: usize, fit: usize, counts: &[(NodeReason, u32)]) -> String {
    let mut v: Vec<&(NodeReason, u32)> = counts.iter().filter(|(_, c)| *c > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let parts: Vec<String> = v.iter().map(|(r, c)| format!("{c} {r}")).collect();
    if parts.is_empty() {
        format!("{fit}/{total} nodes")
    } else {
        format!("{fit}/{total} nodes: {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_format() {
        let s = summarize(
            40,
            0,
            &[
                (NodeReason::Taint("nvidia.com/gpu".into()), 8),
                (NodeReason::InsufficientGpu, 32),
            ],
        );
        assert_eq!(
            s,
            "0/40 nodes: 32 insufficient nvidia.com/gpu, 8 untolerated taint nvidia.com/gpu"
        );
    }
}
