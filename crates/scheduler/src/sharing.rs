//! GPU fit inside one node: whole devices, fractions (by share or by memory, on one or
//! several devices) and MIG slices. A device is either whole or shared, never both.

use crate::decisions::NodeReason;
pub use crate::framework::state::shared_milli;
use crate::framework::state::{GpuPlacement, GpuSlot, State};
use crate::request::GpuRequest;
use crate::snapshot::{GpuIdx, NodeId, Snapshot};

/// Order of candidate devices for fractions (KAI `gpupack` / `gpuspread`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuOrder {
    /// Fullest shared device first, idle devices last.
    Pack,
    /// Idle devices first, then least used.
    Spread,
}

/// Whether the request can fit on the node's GPUs at all right now (cheap checks first).
pub fn fit_gpu(
    s: &Snapshot<'_>,
    st: &State,
    node: NodeId,
    req: &GpuRequest,
    order: GpuOrder,
) -> Result<GpuPlacement, NodeReason> {
    match req {
        GpuRequest::None => Ok(GpuPlacement::None),
        GpuRequest::Whole(n) => {
            if u32::from(st.idle_gpus[node as usize]) < *n {
                return Err(NodeReason::InsufficientGpu);
            }
            let idx: GpuIdx = st
                .node_gpus(node)
                .iter()
                .enumerate()
                .filter(|(_, g)| g.is_idle())
                .map(|(i, _)| i as u8)
                .take(*n as usize)
                .collect();
            if idx.len() < *n as usize {
                return Err(NodeReason::InsufficientGpu);
            }
            Ok(GpuPlacement::Whole(idx))
        }
        GpuRequest::Mig { profile, count } => {
            let free = st.mig_free[node as usize]
                .iter()
                .find(|(p, _)| p == profile)
                .map_or(0, |e| e.1);
            if free < i64::from(*count) {
                return Err(NodeReason::InsufficientMig(
                    s.mig_profiles[*profile as usize].clone(),
                ));
            }
            Ok(GpuPlacement::Mig {
                profile: *profile,
                count: *count,
            })
        }
        GpuRequest::Fraction { devices, .. } | GpuRequest::Memory { devices, .. } => {
            let n = &s.nodes[node as usize];
            if n.mig_enabled {
                return Err(NodeReason::MigNodeNoFractions);
            }
            if n.gpus == 0 {
                return Err(NodeReason::InsufficientGpu);
            }
            let milli = shared_milli(s, node, req)?;
            if st.free_gpu[node as usize] < i64::from(milli) * i64::from(*devices) {
                return Err(NodeReason::InsufficientGpuShare);
            }
            let gpus = pick_shared(st.node_gpus(node), milli, *devices, order)
                .ok_or(NodeReason::InsufficientGpuShare)?;
            Ok(GpuPlacement::Shared {
                gpus,
                milli: milli as u16,
            })
        }
    }
}

/// The same checks as `fit_gpu` without choosing devices (no allocation: the hot path).
pub fn can_fit_gpu(
    s: &Snapshot<'_>,
    st: &State,
    node: NodeId,
    req: &GpuRequest,
) -> Result<(), NodeReason> {
    match req {
        GpuRequest::None => Ok(()),
        GpuRequest::Whole(n) => {
            if u32::from(st.idle_gpus[node as usize]) < *n {
                Err(NodeReason::InsufficientGpu)
            } else {
                Ok(())
            }
        }
        GpuRequest::Mig { profile, count } => {
            let free = st.mig_free[node as usize]
                .iter()
                .find(|(p, _)| p == profile)
                .map_or(0, |e| e.1);
            if free < i64::from(*count) {
                return Err(NodeReason::InsufficientMig(
                    s.mig_profiles[*profile as usize].clone(),
                ));
            }
            Ok(())
        }
        GpuRequest::Fraction { devices, .. } | GpuRequest::Memory { devices, .. } => {
            let n = &s.nodes[node as usize];
            if n.mig_enabled {
                return Err(NodeReason::MigNodeNoFractions);
            }
            if n.gpus == 0 {
                return Err(NodeReason::InsufficientGpu);
            }
            let milli = shared_milli(s, node, req)?;
            if st.free_gpu[node as usize] < i64::from(milli) * i64::from(*devices) {
                return Err(NodeReason::InsufficientGpuShare);
            }
            let fitting = st
                .node_gpus(node)
                .iter()
                .filter(|g| g.free_milli() >= milli)
                .count();
            if fitting < *devices as usize {
                Err(NodeReason::InsufficientGpuShare)
            } else {
                Ok(())
            }
        }
    }
}

/// Choose `devices` distinct devices with at least `milli` free.
pub fn pick_shared(slots: &[GpuSlot], milli: u32, devices: u32, order: GpuOrder) -> Option<GpuIdx> {
    let mut cand: Vec<(u32, bool, u8)> = slots
        .iter()
        .enumerate()
        .filter(|(_, g)| g.free_milli() >= milli)
        .map(|(i, g)| (g.free_milli(), g.is_idle(), i as u8))
        .collect();
    if cand.len() < devices as usize {
        return None;
    }
    match order {
        // Shared devices before idle ones, fullest (least free) first.
        GpuOrder::Pack => cand.sort_by_key(|&(free, idle, i)| (idle, free, i)),
        GpuOrder::Spread => {
            cand.sort_by_key(|&(free, idle, i)| (!idle, std::cmp::Reverse(free), i))
        }
    }
    let mut out: Vec<u8> = cand.iter().take(devices as usize).map(|c| c.2).collect();
    out.sort_unstable();
    Some(out.into())
}

/// Whether the node already has a shared device this request fits on (KAI `gpusharingorder`).
pub fn fits_existing_share(slots: &[GpuSlot], milli: u32) -> bool {
    slots
        .iter()
        .any(|g| !g.whole && g.shared_pods > 0 && g.free_milli() >= milli)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(used: u16, pods: u16) -> GpuSlot {
        GpuSlot {
            whole: false,
            shared_milli: used,
            shared_pods: pods,
            withdrawn: false,
        }
    }

    #[test]
    fn pack_prefers_fullest_shared_device() {
        let slots = [
            GpuSlot::default(),
            slot(500, 1),
            slot(750, 2),
            GpuSlot {
                whole: true,
                ..Default::default()
            },
        ];
        assert_eq!(
            pick_shared(&slots, 250, 1, GpuOrder::Pack).map(|v| v.to_vec()),
            Some(vec![2])
        );
        assert_eq!(
            pick_shared(&slots, 500, 1, GpuOrder::Pack).map(|v| v.to_vec()),
            Some(vec![1])
        );
        assert_eq!(
            pick_shared(&slots, 250, 1, GpuOrder::Spread).map(|v| v.to_vec()),
            Some(vec![0])
        );
        assert_eq!(
            pick_shared(&slots, 600, 2, GpuOrder::Pack).map(|v| v.to_vec()),
            None,
            "whole device is never shared"
        );
        assert_eq!(
            pick_shared(&slots, 250, 3, GpuOrder::Pack).map(|v| v.to_vec()),
            Some(vec![0, 1, 2])
        );
    }
}
