//! The record of a cycle: what the session committed, as decisions (binds in pod order with
//! their GPU binding, evictions with reasons, why pending pods stay pending, queue figures).

use super::releasing;
use crate::decisions::{
    Bind, Decisions, EvictReason, Eviction, GpuBinding, QueueReport, Unschedulable,
};
use crate::framework::Session;
use crate::framework::state::GpuPlacement;
use crate::snapshot::{NodeId, PodId, QueueId, Snapshot};
use std::collections::BTreeMap;

/// Turn what the session committed into the cycle's decisions.
pub fn decisions(sess: Session<'_>) -> Decisions {
    let s = sess.snapshot;
    let mut d = Decisions {
        issues: sess.issues,
        stale_marks: sess.stale_marks,
        ..Default::default()
    };
    // Evictions and binds each in pod order; only running pods are ever evicted.
    for (&i, reason) in &sess.evicted {
        let p = &s.pods[i as usize];
        if !p.running {
            continue;
        }
        let node = p
            .node
            .map(|n| s.nodes[n as usize].name.to_string())
            .unwrap_or_default();
        let reason = match (reason, &sess.state.placement[i as usize]) {
            (EvictReason::Consolidation { by_job, .. }, Some(pl)) => EvictReason::Consolidation {
                by_job: by_job.clone(),
                relocate_to: s.nodes[pl.node as usize].name.to_string(),
            },
            (r, _) => r.clone(),
        };
        d.evictions.push(Eviction {
            pod: i,
            namespace: p.namespace.to_string(),
            name: p.name.to_string(),
            node,
            reason,
        });
    }
    let waits = releasing::nodes_waiting(s, &sess.state, &sess.evicted);
    let mut groups: BTreeMap<NodeId, Vec<(u32, u32)>> = BTreeMap::new();
    for (i, p) in s.pods.iter().enumerate() {
        if p.running {
            continue;
        }
        if let Some(pl) = &sess.state.placement[i] {
            let node_groups = groups
                .entry(pl.node)
                .or_insert_with(|| s.nodes[pl.node as usize].groups.clone());
            d.binds.push(Bind {
                pod: i as PodId,
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                node: s.nodes[pl.node as usize].name.to_string(),
                node_id: pl.node,
                gpu: gpu_binding(s, pl.node, &pl.gpu, node_groups),
                pipelined: sess.pipelined[i] || waits[pl.node as usize],
            });
        } else if let Some(msg) = sess.unschedulable.get(&(i as PodId)) {
            d.unschedulable.push(Unschedulable {
                pod: i as PodId,
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                message: msg.clone(),
            });
        }
    }
    for q in 0..s.queues.len() {
        let qid = q as QueueId;
        d.queues.push(QueueReport {
            name: s.queues[q].name.clone(),
            quota: s.queues[q].quota,
            deserved: sess.fair_share.deserved(s, qid),
            fair_share: sess.fair_share.fair[q],
            allocated: sess.state.q_alloc[q].to_f(),
            allocated_non_preemptible: sess.state.q_alloc_np[q].to_f(),
            requested: sess.fair_share.requested[q],
            usage: s.queues[q].usage,
        });
    }
    d
}

/// The binding for a placement on `node` (KAI `receivedResourceType`). Shares are bound
/// under their GPU's fraction group; `groups` starts as the node's and gains the groups this
/// cycle opens (so two new groups never get one index).
pub fn gpu_binding(
    s: &Snapshot<'_>,
    node: NodeId,
    g: &GpuPlacement,
    groups: &mut Vec<(u32, u32)>,
) -> GpuBinding {
    match g {
        GpuPlacement::None => GpuBinding::None,
        GpuPlacement::Whole(i) => GpuBinding::Whole {
            indices: i.iter().map(|&x| u32::from(x)).collect(),
        },
        GpuPlacement::Shared { gpus, milli } => GpuBinding::Fraction {
            indices: gpus
                .iter()
                .map(|&x| {
                    let gpu = u32::from(x);
                    let slots = s.nodes[node as usize].gpus;
                    let g = crate::snapshot::devices::group_for(groups, slots, gpu);
                    if !groups.contains(&(g, gpu)) {
                        groups.push((g, gpu));
                    }
                    g
                })
                .collect(),
            milli: u32::from(*milli),
        },
        GpuPlacement::Mig { profile, count } => GpuBinding::Mig {
            resource: s.mig_profiles[*profile as usize].clone(),
            count: *count,
        },
    }
}
