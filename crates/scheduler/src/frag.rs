//! Fragmentation measure for GPU sharing (after Weng et al., ATC'23): the free GPU capacity
//! of a node that the expected pod mix could not use, weighted by how common each pod shape
//! is. Placing a pod where this grows least keeps free fragments usable.

use crate::request::GpuRequest;
use crate::snapshot::{NodeId, Snapshot};
use crate::state::{GpuSlot, State};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// One device with this much free (milli).
    Share(u32),
    /// This many idle devices.
    Whole(u32),
}

#[derive(Clone, Debug, PartialEq)]
struct TaskType {
    shape: Shape,
    cpu: i64,
    mem: i64,
    weight: f64,
}

/// The expected pod mix: the most common GPU pod shapes of the snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mix {
    types: Vec<TaskType>,
}

const MAX_TYPES: usize = 64;

impl Mix {
    pub fn from_snapshot(s: &Snapshot<'_>) -> Mix {
        let mut hist: BTreeMap<(u8, u32, i64, i64), u64> = BTreeMap::new();
        let max_mib = s.nodes.iter().filter_map(|n| n.gpu_memory_mib).max();
        for p in s.pods.iter().filter(|p| p.invalid.is_none()) {
            let (kind, amount) = match &p.gpu {
                GpuRequest::Whole(n) => (1, *n),
                GpuRequest::Fraction { milli, .. } => (0, *milli),
                GpuRequest::Memory { mib, .. } => {
                    match max_mib.and_then(|m| crate::request::memory_to_milli(*mib, m)) {
                        Some(m) => (0, m),
                        None => continue,
                    }
                }
                _ => continue,
            };
            // Coarse CPU/memory buckets keep the mix small.
            let cpu = bucket(p.res.0[crate::snapshot::CPU]);
            let mem = bucket(p.res.0[crate::snapshot::MEM]);
            *hist.entry((kind, amount, cpu, mem)).or_default() += 1;
        }
        let mut v: Vec<((u8, u32, i64, i64), u64)> = hist.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(MAX_TYPES);
        let total: u64 = v.iter().map(|e| e.1).sum();
        let types = v
            .into_iter()
            .map(|((kind, amount, cpu, mem), c)| TaskType {
                shape: if kind == 0 {
                    Shape::Share(amount)
                } else {
                    Shape::Whole(amount)
                },
                cpu,
                mem,
                weight: c as f64 / total.max(1) as f64,
            })
            .collect();
        Mix { types }
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Expected unusable free GPU milli of a node with these devices and free CPU/memory.
    pub fn node_frag(&self, free_cpu: i64, free_mem: i64, slots: &[GpuSlot]) -> f64 {
        let total: u32 = slots.iter().map(GpuSlot::free_milli).sum();
        if total == 0 {
            return 0.0;
        }
        let idle = slots.iter().filter(|g| g.is_idle()).count() as u32;
        let partial: u32 = slots
            .iter()
            .filter(|g| !g.is_idle())
            .map(GpuSlot::free_milli)
            .sum();
        let mut f = 0.0;
        for t in &self.types {
            let unusable = if free_cpu < t.cpu || free_mem < t.mem {
                total
            } else {
                match t.shape {
                    Shape::Whole(k) => {
                        if idle >= k {
                            partial
                        } else {
                            total
                        }
                    }
                    Shape::Share(r) => slots
                        .iter()
                        .map(GpuSlot::free_milli)
                        .filter(|&free| free < r)
                        .sum(),
                }
            };
            f += t.weight * f64::from(unusable);
        }
        f
    }

    /// Growth of the node's fragmentation if a pod taking `cpu`/`mem` and the given device
    /// shares (`(index, milli)`; milli 1000 on an idle device = whole) is placed there.
    pub fn delta(
        &self,
        st: &State,
        node: NodeId,
        cpu: i64,
        mem: i64,
        take: &[(u8, u32, bool)],
    ) -> f64 {
        let slots = st.node_gpus(node);
        let before = self.node_frag(
            st.free_cpu[node as usize],
            st.free_mem[node as usize],
            slots,
        );
        let mut after: Vec<GpuSlot> = slots.to_vec();
        for &(i, milli, whole) in take {
            let g = &mut after[i as usize];
            if whole {
                g.whole = true;
            } else {
                g.shared_milli += milli as u16;
                g.shared_pods += 1;
            }
        }
        self.node_frag(
            st.free_cpu[node as usize] - cpu,
            st.free_mem[node as usize] - mem,
            &after,
        ) - before
    }
}

/// Requests rounded up to a 1/8 step of their power of two, so near-identical pods share
/// a type without understating what they need.
fn bucket(v: i64) -> i64 {
    if v <= 0 {
        return 0;
    }
    let step = ((1i64 << (63 - v.leading_zeros())) / 8).max(1);
    (v + step - 1) / step * step
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(types: Vec<(Shape, f64)>) -> Mix {
        Mix {
            types: types
                .into_iter()
                .map(|(shape, weight)| TaskType {
                    shape,
                    cpu: 0,
                    mem: 0,
                    weight,
                })
                .collect(),
        }
    }

    #[test]
    fn fragments_counted_against_the_mix() {
        let m = mix(vec![(Shape::Share(500), 0.5), (Shape::Whole(1), 0.5)]);
        let idle = GpuSlot::default();
        let quarter_free = GpuSlot {
            whole: false,
            shared_milli: 750,
            shared_pods: 1,
        };
        // Two idle devices: nothing is a fragment for either shape.
        assert_eq!(m.node_frag(0, 0, &[idle, idle]), 0.0);
        // 250 free on a shared device is unusable by both shapes: 0.5*250 + 0.5*250.
        assert_eq!(m.node_frag(0, 0, &[idle, quarter_free]), 250.0);
        // No idle device: the whole-GPU shape sees all 250 as fragment too.
        assert_eq!(m.node_frag(0, 0, &[quarter_free]), 250.0);
    }
}
