//! A node's GPUs as physical devices, when its device plugin publishes them (Node annotation
//! `node.gantry.dev/gpu-devices`): slot `i` is NVML GPU `i`, withdrawn (Unhealthy) GPUs take
//! no new work, and pods land on the GPUs the node reports they hold — a reservation pod's
//! UUID, the kubelet's allocation — rather than on slots `0..allocatable-1`. Fraction groups
//! are named by an index (`runai-gpu-group` derives from it) that need not be their GPU's:
//! the kubelet picks the reservation's device, so each group is mapped to the GPU its
//! reservation reports.

use crate::input::{NodeInput, PodInput, PodPhase};
use gantry_api::names;
use std::borrow::Cow;
use std::collections::BTreeSet;

/// A node's GPU slots when it publishes its GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    pub count: u32,
    /// Slots that take no new work: Unhealthy or unlisted GPUs, and healthy ones beyond
    /// what the kubelet advertises (highest first: the plugin and the node status disagree
    /// for a moment; the kubelet admits by its own count).
    pub withdrawn: Vec<u8>,
}

/// `None` when the node does not publish its GPUs, or advertises more `nvidia.com/gpu` than
/// it lists (time-slicing: the replicas are the units).
pub fn physical(n: &NodeInput) -> Option<Slots> {
    if n.gpu_devices.is_empty() || n.gpus as usize > n.gpu_devices.len() {
        return None;
    }
    let count = n.gpu_devices.iter().map(|d| d.index + 1).max()?;
    if count > 255 {
        return None;
    }
    let healthy = |i: u32| n.gpu_devices.iter().any(|d| d.index == i && d.healthy);
    let mut withdrawn: Vec<u8> = (0..count)
        .filter(|&i| !healthy(i))
        .map(|i| i as u8)
        .collect();
    let mut usable: Vec<u8> = (0..count)
        .filter(|&i| healthy(i))
        .map(|i| i as u8)
        .collect();
    while usable.len() > n.gpus as usize {
        withdrawn.extend(usable.pop());
    }
    withdrawn.sort_unstable();
    Some(Slots { count, withdrawn })
}

fn index_of(n: &NodeInput, uuid: &str) -> Option<u32> {
    n.gpu_devices
        .iter()
        .find(|d| d.uuid == uuid)
        .map(|d| d.index)
}

/// A fractional pod: its indices name GPU groups, not GPUs.
fn names_groups(p: &PodInput) -> bool {
    p.reservation || p.extended.get(names::RESOURCE_GPU).is_none_or(|&v| v == 0)
}

/// The node's fraction groups: (group index, GPU). Groups whose reservation reports its
/// GPU are placed there; the others (reservation not allocated yet) on their own index
/// when no reported group claims it, else on the first unclaimed slot.
pub fn groups<'a>(
    n: &NodeInput,
    slots: &Slots,
    bound_here: impl Iterator<Item = &'a PodInput>,
) -> Vec<(u32, u32)> {
    let mut known: Vec<(u32, u32)> = Vec::new();
    let mut unknown: BTreeSet<u32> = BTreeSet::new();
    for p in bound_here.filter(|p| p.phase == PodPhase::Running && names_groups(p)) {
        match (p.reservation, p.gpu_indices.as_slice(), p.gpu_uuids.first()) {
            (true, &[g], Some(u)) if index_of(n, u).is_some() => {
                if let Some(i) = index_of(n, u)
                    && !known.iter().any(|&(k, _)| k == g)
                {
                    known.push((g, i));
                }
            }
            _ => unknown.extend(p.gpu_indices.iter().copied()),
        }
    }
    let mut out = known.clone();
    for g in unknown {
        if out.iter().any(|&(k, _)| k == g) {
            continue;
        }
        let claimed = |i: u32| out.iter().any(|&(_, gpu)| gpu == i);
        let gpu = if g < slots.count && !claimed(g) {
            Some(g)
        } else {
            (0..slots.count).find(|&i| !claimed(i))
        };
        if let Some(gpu) = gpu {
            out.push((g, gpu));
        }
    }
    out.sort_unstable();
    out
}

/// The GPUs a bound pod holds on a node that publishes its GPUs.
pub fn pod_gpus<'a>(p: &'a PodInput, n: &NodeInput, groups: &[(u32, u32)]) -> Cow<'a, [u32]> {
    if !p.gpu_uuids.is_empty()
        && let Some(found) = p
            .gpu_uuids
            .iter()
            .map(|u| index_of(n, u))
            .collect::<Option<Vec<u32>>>()
    {
        return Cow::Owned(found);
    }
    if names_groups(p) {
        let gpu = |g: u32| groups.iter().find(|&&(k, _)| k == g).map_or(g, |&(_, i)| i);
        return Cow::Owned(p.gpu_indices.iter().map(|&g| gpu(g)).collect());
    }
    Cow::Borrowed(&p.gpu_indices)
}

/// The group index a new share on `gpu` is bound under: the group already there, else
/// `gpu` itself when no group of the node uses it, else the first unused index past the
/// node's slots.
pub fn group_for(groups: &[(u32, u32)], slots: u32, gpu: u32) -> u32 {
    if let Some(&(g, _)) = groups.iter().find(|&&(_, i)| i == gpu) {
        return g;
    }
    let used = |g: u32| groups.iter().any(|&(k, _)| k == g);
    if !used(gpu) {
        return gpu;
    }
    (slots..).find(|&g| !used(g)).unwrap_or(gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::gpu_devices::GpuDevice;

    fn node(gpus: u32, devices: &[(u32, &str, bool)]) -> NodeInput {
        NodeInput {
            name: "n".into(),
            gpus,
            gpu_devices: devices
                .iter()
                .map(|&(index, uuid, healthy)| GpuDevice {
                    index,
                    uuid: uuid.into(),
                    healthy,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn reservation(group: u32, uuid: Option<&str>) -> PodInput {
        PodInput {
            phase: PodPhase::Running,
            node: Some("n".into()),
            gpu_indices: vec![group],
            gpu_uuids: uuid.into_iter().map(str::to_string).collect(),
            reservation: true,
            ..Default::default()
        }
    }

    #[test]
    fn withdrawn_gpus_and_the_kubelet_count() {
        let n = node(1, &[(0, "a", true), (1, "b", false)]);
        assert_eq!(physical(&n).unwrap().withdrawn, vec![1]);
        // The plugin says both healthy, the kubelet still advertises one: one usable.
        let n = node(1, &[(0, "a", true), (1, "b", true)]);
        assert_eq!(physical(&n).unwrap().withdrawn, vec![1]);
        // Time-slicing (more advertised than listed) and unpublished: slots as before.
        assert_eq!(physical(&node(8, &[(0, "a", true), (1, "b", true)])), None);
        assert_eq!(physical(&node(2, &[])), None);
    }

    #[test]
    fn groups_follow_their_reservations_gpu() {
        let n = node(1, &[(0, "a", true), (1, "b", false)]);
        let s = physical(&n).unwrap();
        // Group 0's reservation sits on GPU 1 (b); group 1 has no report yet.
        let pods = [reservation(0, Some("b")), reservation(1, None)];
        let g = groups(&n, &s, pods.iter());
        assert_eq!(g, vec![(0, 1), (1, 0)]);
        let fraction = PodInput {
            phase: PodPhase::Running,
            gpu_indices: vec![0],
            ..Default::default()
        };
        assert_eq!(&*pod_gpus(&fraction, &n, &g), &[1]);
        // A whole-GPU pod the kubelet gave b is on GPU 1, whatever index it was bound with.
        let mut whole = fraction.clone();
        whole.extended.insert(names::RESOURCE_GPU.into(), 1);
        whole.gpu_uuids = vec!["b".into()];
        assert_eq!(&*pod_gpus(&whole, &n, &g), &[1]);
        // New shares: on GPU 1 under group 0; on GPU 0 under group 1; elsewhere a fresh one.
        assert_eq!(group_for(&g, 2, 1), 0);
        assert_eq!(group_for(&g, 2, 0), 1);
        assert_eq!(group_for(&[(0, 1)], 2, 0), 2);
        assert_eq!(group_for(&[(0, 1), (1, 2)], 3, 0), 3);
    }
}
