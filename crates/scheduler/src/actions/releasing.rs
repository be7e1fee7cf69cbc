//! Releasing pods (KAI's `Releasing` status): bound pods that are terminating. The cycle
//! treats what they hold as free, so work is placed onto it at once, but those binds are
//! pipelined: the shell binds them only when the releasing pods are gone, so no node is
//! ever over-committed meanwhile. Bound GPU reservation pods are Releasing holders too (see
//! the k8s cache): the node keeps their device until they are gone.

use crate::decisions::EvictReason;
use crate::framework::state::State;
use crate::request::GpuRequest;
use crate::snapshot::{CPU, GPU, MEM, PodId, Snapshot};
use std::collections::BTreeMap;

/// What still physically holds a node until it is gone: its releasing pods, and on such
/// nodes the pods evicted this cycle too.
#[derive(Default, Clone)]
struct Held {
    res: [i64; 3],
    pods: i64,
    /// Milli held per known device (summed over pods); `1000` = the whole device.
    devices: BTreeMap<u32, u32>,
    /// (MIG profile, count).
    mig: Vec<(u16, i64)>,
    /// Devices of reservation pods (they request no GPU of their own).
    reserved: Vec<u32>,
}

/// Per node: must binds onto it wait? True when the node holds releasing pods and what is
/// placed there now, plus what those pods (and this cycle's victims on it) still hold, does
/// not fit the node: in CPU, memory, pod slots, GPUs, MIG devices, or on one GPU device.
pub fn nodes_waiting(
    s: &Snapshot<'_>,
    st: &State,
    evicted: &BTreeMap<PodId, EvictReason>,
) -> Vec<bool> {
    let mut held: BTreeMap<u32, Held> = BTreeMap::new();
    for p in s.pods.iter().filter(|p| p.releasing) {
        if let Some(n) = p.node {
            held.entry(n).or_default();
        }
    }
    let mut waits = vec![false; s.nodes.len()];
    if held.is_empty() {
        return waits;
    }
    let victims = evicted
        .keys()
        .map(|&p| &s.pods[p as usize])
        .filter(|p| p.running);
    for p in s.pods.iter().filter(|p| p.releasing).chain(victims) {
        let Some(h) = p.node.and_then(|n| held.get_mut(&n)) else {
            continue;
        };
        for r in [GPU, CPU, MEM] {
            h.res[r] += p.res.0[r];
        }
        h.pods += 1;
        let per_device = match &p.gpu {
            GpuRequest::Whole(_) => Some(1000),
            GpuRequest::Fraction { .. } | GpuRequest::Memory { .. } => {
                let devices = p.gpu_indices.len().max(1) as i64;
                Some((p.res.0[GPU] / devices) as u32)
            }
            GpuRequest::Mig { profile, count } => {
                h.mig.push((*profile, i64::from(*count)));
                None
            }
            // A GPU reservation pod: it holds its device for fractions, which may join
            // it; only a whole-GPU placement on that device must wait.
            GpuRequest::None if !p.gpu_indices.is_empty() => {
                h.reserved.extend_from_slice(&p.gpu_indices);
                Some(0)
            }
            GpuRequest::None => None,
        };
        if let Some(m) = per_device {
            for &i in p.gpu_indices.iter() {
                *h.devices.entry(i).or_default() += m;
            }
        }
    }
    for (&n, h) in &held {
        let ni = n as usize;
        let slots = st.node_gpus(n);
        // A reservation beyond the node's slots (its GPU was withdrawn, so allocatable
        // shrank) is invisible to the per-device check, yet the kubelet still counts its
        // device against allocatable: it holds a whole GPU of the node's count.
        let hidden = h
            .reserved
            .iter()
            .filter(|&&i| i as usize >= slots.len())
            .count() as i64;
        let held_gpu = h.res[GPU] + 1000 * hidden;
        let device_conflict = h.devices.iter().any(|(&i, &m)| {
            slots.get(i as usize).is_some_and(|g| {
                (m >= 1000 && !g.is_idle()) || g.whole || u32::from(g.shared_milli) + m > 1000
            })
        });
        let mig_short = h.mig.iter().any(|&(profile, count)| {
            st.mig_free[ni]
                .iter()
                .find(|(p, _)| *p == profile)
                .is_some_and(|&(_, free)| free < count)
        });
        waits[ni] = st.free_cpu[ni] < h.res[CPU]
            || st.free_mem[ni] < h.res[MEM]
            || st.free_pods[ni] < h.pods
            || st.free_gpu[ni] < held_gpu
            || device_conflict
            || mig_short;
    }
    waits
}
