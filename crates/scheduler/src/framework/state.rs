//! The mutable side of a cycle: free capacity per node and per GPU, where each pod is
//! placed, and what each queue and gang holds. Built from the snapshot's running pods;
//! changed only through a `Statement` so every what-if can be rolled back.

use crate::decisions::NodeReason;
use crate::request::{GpuRequest, memory_to_milli};
use crate::snapshot::{CPU, GpuIdx, GroupId, MEM, NodeId, PodId, Res, Snapshot};

/// One physical GPU: idle, held whole, or shared by fractions (never both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuSlot {
    pub whole: bool,
    /// Milli-GPU in use by fractions.
    pub shared_milli: u16,
    pub shared_pods: u16,
    /// Takes no new work: the GPU is withdrawn (Unhealthy), or the kubelet's count of the
    /// node's GPUs is used up by holders of withdrawn ones. What runs there stays counted.
    pub withdrawn: bool,
}

impl GpuSlot {
    pub fn is_idle(&self) -> bool {
        !self.whole && self.shared_pods == 0 && !self.withdrawn
    }
    /// Milli-GPU still free on this device.
    pub fn free_milli(&self) -> u32 {
        if self.whole || self.withdrawn {
            0
        } else {
            1000u32.saturating_sub(u32::from(self.shared_milli))
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuPlacement {
    None,
    /// Whole devices by index on the node.
    Whole(GpuIdx),
    /// The same share on each listed device (a fraction slot).
    Shared {
        gpus: GpuIdx,
        milli: u16,
    },
    Mig {
        profile: u16,
        count: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Placement {
    pub node: NodeId,
    pub gpu: GpuPlacement,
}

#[derive(Clone, Debug)]
pub struct State {
    pub free_cpu: Vec<i64>,
    pub free_mem: Vec<i64>,
    pub free_pods: Vec<i64>,
    /// Idle GPUs per node.
    pub idle_gpus: Vec<u16>,
    /// Free GPU capacity per node in milli (idle devices plus free shares).
    pub free_gpu: Vec<i64>,
    /// Offset of each node's GPUs in `gpus`.
    pub gpu_base: Vec<u32>,
    pub gpus: Vec<GpuSlot>,
    /// Free MIG devices per node: (profile, count).
    pub mig_free: Vec<Vec<(u16, i64)>>,
    pub placement: Vec<Option<Placement>>,
    /// Allocated per queue, rolled up to every ancestor.
    pub q_alloc: Vec<Res>,
    pub q_alloc_np: Vec<Res>,
    /// Bumped on every change to a node, so per-node caches know when they are stale.
    pub node_version: Vec<u32>,
    /// Append-only log of changed nodes, for indexes kept outside the state.
    pub changes: Vec<NodeId>,
    /// Placed pods per gang and per (gang, sub-group).
    pub group_placed: Vec<u32>,
    pub sub_base: Vec<u32>,
    pub sub_placed: Vec<u32>,
}

impl State {
    /// Start from the running pods. Running pods that do not fit the node as reported
    /// (stale cache) are still counted: the state mirrors reality, so capacity may go negative.
    pub fn new(s: &Snapshot<'_>, issues: &mut Vec<String>) -> State {
        let n = s.nodes.len();
        let mut gpu_base = Vec::with_capacity(n);
        let mut total = 0u32;
        for node in &s.nodes {
            gpu_base.push(total);
            total += node.gpus;
        }
        let mut sub_base = Vec::with_capacity(s.groups.len());
        let mut subs = 0u32;
        for g in &s.groups {
            sub_base.push(subs);
            subs += g.sub_groups.len() as u32;
        }
        let mut st = State {
            free_cpu: s.nodes.iter().map(|n| n.cpu_milli).collect(),
            free_mem: s.nodes.iter().map(|n| n.memory_bytes).collect(),
            free_pods: s.nodes.iter().map(|n| i64::from(n.pods)).collect(),
            idle_gpus: s.nodes.iter().map(|n| n.gpus as u16).collect(),
            free_gpu: s.nodes.iter().map(|n| i64::from(n.gpus) * 1000).collect(),
            gpu_base,
            gpus: vec![GpuSlot::default(); total as usize],
            mig_free: s
                .nodes
                .iter()
                .map(|n| n.mig.iter().map(|&(p, c)| (p, i64::from(c))).collect())
                .collect(),
            placement: vec![None; s.pods.len()],
            node_version: vec![0; n],
            changes: Vec::new(),
            q_alloc: vec![Res::default(); s.queues.len()],
            q_alloc_np: vec![Res::default(); s.queues.len()],
            group_placed: vec![0; s.groups.len()],
            sub_base,
            sub_placed: vec![0; subs as usize],
        };
        for (n, node) in s.nodes.iter().enumerate() {
            for &i in &node.withdrawn {
                st.withdraw(n, i);
            }
        }
        for (id, p) in s.pods.iter().enumerate() {
            let (true, Some(node)) = (p.running, p.node) else {
                continue;
            };
            let gpu = st.running_gpu(s, id as PodId, node, issues);
            st.apply(s, id as PodId, Placement { node, gpu });
        }
        st.hold_count_of_withdrawn(s);
        st
    }

    fn withdraw(&mut self, n: usize, i: u8) {
        let base = self.gpu_base[n] as usize;
        if let Some(slot) = self.gpus.get_mut(base + usize::from(i))
            && !slot.withdrawn
        {
            if slot.is_idle() {
                self.idle_gpus[n] = self.idle_gpus[n].saturating_sub(1);
            }
            if !slot.whole {
                self.free_gpu[n] -= 1000 - i64::from(slot.shared_milli.min(1000));
            }
            slot.withdrawn = true;
        }
    }

    /// The kubelet admits by count: a pod on a withdrawn GPU (a whole-GPU pod, a reservation
    /// with or without its fractions) still counts against the node's allocatable GPUs,
    /// which no longer include that GPU. So each such GPU takes one idle healthy one out of
    /// use (the highest), or a whole-GPU pod bound there would be refused.
    fn hold_count_of_withdrawn(&mut self, s: &Snapshot<'_>) {
        for (n, node) in s.nodes.iter().enumerate() {
            if node.withdrawn.is_empty() {
                continue;
            }
            let reserved = |i: u8| {
                s.pods.iter().any(|p| {
                    p.node == Some(n as NodeId)
                        && matches!(p.gpu, GpuRequest::None)
                        && p.gpu_indices.contains(&u32::from(i))
                })
            };
            let slots = self.node_gpus(n as NodeId);
            let held = node
                .withdrawn
                .iter()
                .filter(|&&i| {
                    slots
                        .get(usize::from(i))
                        .is_some_and(|g| g.whole || g.shared_pods > 0 || reserved(i))
                })
                .count();
            let idle: Vec<u8> = (0..slots.len() as u8)
                .rev()
                .filter(|&i| slots[usize::from(i)].is_idle())
                .take(held)
                .collect();
            for i in idle {
                self.withdraw(n, i);
            }
        }
    }

    /// GPU placement of a running pod from its reported indices, or the first devices that
    /// fit when the cache did not say.
    fn running_gpu(
        &self,
        s: &Snapshot<'_>,
        pod: PodId,
        node: NodeId,
        issues: &mut Vec<String>,
    ) -> GpuPlacement {
        let p = &s.pods[pod as usize];
        let count = s.nodes[node as usize].gpus;
        let valid = || -> GpuIdx {
            p.gpu_indices
                .iter()
                .filter(|&&i| i < count)
                .map(|&i| i as u8)
                .collect()
        };
        let slots = self.node_gpus(node);
        match &p.gpu {
            GpuRequest::None => GpuPlacement::None,
            GpuRequest::Mig { profile, count } => GpuPlacement::Mig {
                profile: *profile,
                count: *count,
            },
            GpuRequest::Whole(n) => {
                let mut idx = valid();
                if idx.len() != *n as usize {
                    idx = (0..count as u8)
                        .filter(|&i| slots[i as usize].is_idle())
                        .take(*n as usize)
                        .collect();
                    if idx.len() < *n as usize {
                        issues.push(format!(
                            "pod {}/{}: holds more GPUs than node {} has free",
                            p.namespace, p.name, s.nodes[node as usize].name
                        ));
                    }
                }
                GpuPlacement::Whole(idx)
            }
            GpuRequest::Fraction { devices, .. } | GpuRequest::Memory { devices, .. } => {
                let milli = shared_milli(s, node, &p.gpu).unwrap_or(1000) as u16;
                let mut idx = valid();
                if idx.len() != *devices as usize {
                    idx = (0..count as u8)
                        .filter(|&i| {
                            !slots[i as usize].whole
                                && slots[i as usize].free_milli() >= u32::from(milli)
                        })
                        .take(*devices as usize)
                        .collect();
                }
                GpuPlacement::Shared { gpus: idx, milli }
            }
        }
    }

    pub fn node_gpus(&self, node: NodeId) -> &[GpuSlot] {
        let base = self.gpu_base[node as usize] as usize;
        let end = self
            .gpu_base
            .get(node as usize + 1)
            .map_or(self.gpus.len(), |&e| e as usize);
        &self.gpus[base..end]
    }

    pub fn apply(&mut self, s: &Snapshot<'_>, pod: PodId, pl: Placement) {
        self.change(s, pod, &pl, 1);
        self.placement[pod as usize] = Some(pl);
    }

    pub fn unapply(&mut self, s: &Snapshot<'_>, pod: PodId) -> Option<Placement> {
        let pl = self.placement[pod as usize].take()?;
        self.change(s, pod, &pl, -1);
        Some(pl)
    }

    fn change(&mut self, s: &Snapshot<'_>, pod: PodId, pl: &Placement, sign: i64) {
        let p = &s.pods[pod as usize];
        let n = pl.node as usize;
        self.node_version[n] = self.node_version[n].wrapping_add(1);
        self.changes.push(pl.node);
        self.free_cpu[n] -= sign * p.res.0[CPU];
        self.free_mem[n] -= sign * p.res.0[MEM];
        self.free_pods[n] -= sign;
        let base = self.gpu_base[n] as usize;
        match &pl.gpu {
            GpuPlacement::None => {}
            GpuPlacement::Whole(idx) => {
                // A withdrawn GPU's capacity was never counted free.
                let mut k = 0u16;
                for &i in idx {
                    let slot = &mut self.gpus[base + i as usize];
                    slot.whole = sign > 0;
                    k += u16::from(!slot.withdrawn);
                }
                self.free_gpu[n] -= sign * i64::from(k) * 1000;
                self.idle_gpus[n] = if sign > 0 {
                    self.idle_gpus[n].saturating_sub(k)
                } else {
                    self.idle_gpus[n] + k
                };
            }
            GpuPlacement::Shared { gpus, milli } => {
                for &i in gpus {
                    let slot = &mut self.gpus[base + i as usize];
                    if !slot.withdrawn {
                        self.free_gpu[n] -= sign * i64::from(*milli);
                    }
                    let was_idle = slot.is_idle();
                    if sign > 0 {
                        slot.shared_milli += milli;
                        slot.shared_pods += 1;
                    } else {
                        slot.shared_milli = slot.shared_milli.saturating_sub(*milli);
                        slot.shared_pods = slot.shared_pods.saturating_sub(1);
                    }
                    let now_idle = slot.is_idle();
                    if was_idle && !now_idle {
                        self.idle_gpus[n] = self.idle_gpus[n].saturating_sub(1);
                    } else if !was_idle && now_idle {
                        self.idle_gpus[n] += 1;
                    }
                }
            }
            GpuPlacement::Mig { profile, count } => {
                if let Some(e) = self.mig_free[n].iter_mut().find(|(p, _)| p == profile) {
                    e.1 -= sign * i64::from(*count);
                }
            }
        }
        let g = &s.groups[p.group as usize];
        if let Some(q) = g.queue {
            for a in s.ancestry(q) {
                if sign > 0 {
                    self.q_alloc[a as usize].add(&p.res);
                    if !g.preemptible {
                        self.q_alloc_np[a as usize].add(&p.res);
                    }
                } else {
                    self.q_alloc[a as usize].sub(&p.res);
                    if !g.preemptible {
                        self.q_alloc_np[a as usize].sub(&p.res);
                    }
                }
            }
        }
        let gi = p.group as usize;
        self.group_placed[gi] = (i64::from(self.group_placed[gi]) + sign) as u32;
        let si = (self.sub_base[gi] + u32::from(p.sub_group)) as usize;
        self.sub_placed[si] = (i64::from(self.sub_placed[si]) + sign) as u32;
    }

    /// A gang is satisfied when every sub-group has its minimum placed.
    pub fn gang_satisfied(&self, s: &Snapshot<'_>, g: GroupId) -> bool {
        let base = self.sub_base[g as usize] as usize;
        s.sub_groups_of(g)
            .iter()
            .enumerate()
            .all(|(i, sg)| self.sub_placed[base + i] >= sg.min_member)
    }
}

/// Share per device (milli) a sharing request takes on `node`.
pub fn shared_milli(s: &Snapshot<'_>, node: NodeId, req: &GpuRequest) -> Result<u32, NodeReason> {
    match req {
        GpuRequest::Fraction { milli, .. } => Ok(*milli),
        GpuRequest::Memory { mib, .. } => {
            let gpu_mib = s.nodes[node as usize]
                .gpu_memory_mib
                .ok_or(NodeReason::GpuMemoryUnknown)?;
            memory_to_milli(*mib, gpu_mib).ok_or(NodeReason::GpuMemoryTooSmall)
        }
        _ => Ok(1000),
    }
}
