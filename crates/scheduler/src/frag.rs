//! The scheduler's side of the GPU-sharing policy: the snapshot's pods and nodes seen as
//! [`crate::gpushare`] values, so the scheduler scores placements with exactly the policy
//! the paper-protocol benchmark measures (`SharePolicy::Gantry`).

use crate::gpushare::fgd::TaskMix;
use crate::gpushare::model::{MAX_GPUS, NO_MODEL};
use crate::gpushare::policy::{Choice, Score, SharePolicy, score_node};
use crate::gpushare::{ModelSet, Models, NodeFree, PodShape};
use crate::request::{GpuRequest, memory_to_milli};
use crate::snapshot::{CPU, MEM, NodeId, PodId, Snapshot};
use crate::state::{GpuPlacement, State};
use gantry_api::names;
use gantry_k8s_rules::Operator;

/// The expected pod mix of the snapshot and the GPU model of every node.
#[derive(Clone, Debug, Default)]
pub struct Mix {
    mix: TaskMix,
    node_model: Vec<u8>,
}

impl Mix {
    /// Task types from every valid pod of the snapshot that this scheduler places (running
    /// and pending, CPU-only included), as the paper computes them from the workload. Other
    /// schedulers' and bare pods (DaemonSets, system pods) hold resources but are not
    /// arrivals the policy places, so they are no task type.
    pub fn from_snapshot(s: &Snapshot<'_>) -> Mix {
        let mut models = Models::default();
        let node_model: Vec<u8> = s
            .nodes
            .iter()
            .map(|n| models.intern(n.gpu_model).unwrap_or(NO_MODEL))
            .collect();
        let max_mib = s.nodes.iter().filter_map(|n| n.gpu_memory_mib).max();
        // Sized up front: grown by doubling, this 140k-entry list was copied and page-faulted
        // afresh a dozen times per cycle.
        let mut shapes: Vec<PodShape> = Vec::with_capacity(s.pods.len());
        shapes.extend(
            s.pods
                .iter()
                .filter(|p| p.invalid.is_none() && !s.groups[p.group as usize].foreign)
                .filter_map(|p| {
                    let (num_gpu, milli) = match p.gpu {
                        GpuRequest::Memory { mib, devices: 1 } => {
                            (1, memory_to_milli(mib, max_mib?)? as u16)
                        }
                        ref g => gpu_of(g)?,
                    };
                    Some(PodShape {
                        cpu: p.res.0[CPU],
                        mem: p.res.0[MEM],
                        num_gpu,
                        milli,
                        models: pod_models(s, &models, p.class as usize),
                        spec: 0,
                    })
                }),
        );
        let gpus = s
            .nodes
            .iter()
            .map(|n| u8::try_from(n.gpus).unwrap_or(u8::MAX));
        let mix = TaskMix::observed(&shapes, node_model.iter().copied().zip(gpus));
        Mix { mix, node_model }
    }

    pub fn is_empty(&self) -> bool {
        self.mix.is_empty()
    }

    /// The node as the policy sees it.
    pub fn node_free(&self, st: &State, n: NodeId) -> Option<NodeFree> {
        let slots = st.node_gpus(n);
        if slots.len() > MAX_GPUS {
            return None;
        }
        let i = n as usize;
        let mut f = NodeFree::new(
            st.free_cpu[i],
            st.free_mem[i],
            self.node_model.get(i).copied().unwrap_or(NO_MODEL),
            slots.len() as u8,
        );
        for (g, slot) in f.gpu.iter_mut().zip(slots) {
            // A device with shares on it is not idle even when the shares sum to nothing.
            *g = if slot.is_idle() {
                1000
            } else {
                slot.free_milli().min(999) as u16
            };
        }
        Some(f)
    }

    /// The pod's request on node `n` (a `gpu-memory` share depends on the node's device
    /// memory); `None` for requests the policy does not model (MIG, shares on several
    /// devices): those keep KAI's placement.
    pub fn shape(&self, s: &Snapshot<'_>, pod: PodId, n: NodeId) -> Option<PodShape> {
        let p = &s.pods[pod as usize];
        let (num_gpu, milli) = match p.gpu {
            GpuRequest::Memory { devices: 1, .. } => {
                let m = crate::sharing::shared_milli(s, n, &p.gpu).ok()?;
                (1, u16::try_from(m).ok().filter(|&m| m > 0 && m <= 1000)?)
            }
            ref g => gpu_of(g)?,
        };
        Some(PodShape {
            cpu: p.res.0[CPU],
            mem: p.res.0[MEM],
            num_gpu,
            milli,
            models: ModelSet::Any,
            spec: 0,
        })
    }

    /// Gantry's score of node `n` for the pod and the devices it would take (by free milli,
    /// resolved on the node by [`placement_on`]); `None` when the pod does not fit there by
    /// CPU, memory or devices.
    pub fn score_on_node(
        &self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        n: NodeId,
    ) -> Option<(Score, Choice)> {
        let shape = self.shape(s, pod, n)?;
        let free = self.node_free(st, n)?;
        score_node(SharePolicy::Gantry, &free, &shape, &self.mix, &[])
    }

    /// The devices `choice` names on node `n` as the state's placement.
    pub fn placement_on(
        &self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        n: NodeId,
        choice: &Choice,
    ) -> Option<GpuPlacement> {
        let shape = self.shape(s, pod, n)?;
        let free = self.node_free(st, n)?;
        let mask = choice.resolve(&free, &shape, |_| 0);
        let devices: crate::snapshot::GpuIdx = (0..MAX_GPUS as u8)
            .filter(|i| mask & (1 << i) != 0)
            .collect();
        Some(match choice {
            Choice::NoGpu => GpuPlacement::None,
            Choice::Exclusive => GpuPlacement::Whole(devices),
            Choice::Share { .. } | Choice::RandomShare => GpuPlacement::Shared {
                gpus: devices,
                milli: shape.milli,
            },
        })
    }

    /// What makes two nodes score alike for every pod: the policy's view of the node plus
    /// the facts the fit checks read beside it.
    pub fn class_key(&self, s: &Snapshot<'_>, st: &State, n: NodeId) -> Option<ClassKey> {
        let node = &s.nodes[n as usize];
        Some(ClassKey {
            free: self.node_free(st, n)?.canonical(),
            has_slot: st.free_pods[n as usize] >= 1,
            gpu_memory_mib: node.gpu_memory_mib,
            mig_enabled: node.mig_enabled,
        })
    }
}

/// Nodes with equal keys get equal scores (and equal fit answers) for every pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClassKey {
    free: NodeFree,
    has_slot: bool,
    gpu_memory_mib: Option<u64>,
    mig_enabled: bool,
}

/// Fewest pods of this scheduler a snapshot must hold before `auto` trusts its task mix.
/// FGD scores a node by the fragmentation the *expected* arrivals would meet; the expectation
/// is the snapshot's own mix of request shapes, and a handful of pods is no estimate of it
/// (with 100 pods a type's share is known to about ±10 points). Below this, `auto` keeps
/// KAI's bin-pack, which is also what KAI's own small test clusters expect (a share joins
/// the running share's device; preemption frees the device KAI frees).
pub const AUTO_MIN_PODS: usize = 100;

/// Whether `auto` uses the fragmentation-aware policy on this snapshot: some pod asks for a
/// GPU share (`gpu-fraction` / `gpu-memory`), and the snapshot holds at least
/// [`AUTO_MIN_PODS`] pods of this scheduler to take the task mix from.
pub fn auto_applies(s: &Snapshot<'_>) -> bool {
    let ours = || {
        s.pods
            .iter()
            .filter(|p| p.invalid.is_none() && !s.groups[p.group as usize].foreign)
    };
    ours().any(|p| p.gpu.is_shared()) && ours().count() >= AUTO_MIN_PODS
}

/// Whether the policy models this request (else KAI places it).
pub fn models_request(g: &GpuRequest) -> bool {
    matches!(g, GpuRequest::Memory { devices: 1, .. }) || gpu_of(g).is_some()
}

/// (devices, milli per device) of a request the policy models without a node.
fn gpu_of(g: &GpuRequest) -> Option<(u8, u16)> {
    match *g {
        GpuRequest::None => Some((0, 0)),
        GpuRequest::Whole(k) if k as usize <= MAX_GPUS => Some((k as u8, 1000)),
        GpuRequest::Fraction { milli, devices: 1 } if milli > 0 && milli < 1000 => {
            Some((1, milli as u16))
        }
        _ => None,
    }
}

/// GPU models a pod's constraint class allows (node selector or required affinity on the
/// GFD product label); any when it names none.
fn pod_models(s: &Snapshot<'_>, models: &Models, class: usize) -> ModelSet {
    let Some(c) = s.classes.get(class) else {
        return ModelSet::Any;
    };
    if let Some((_, v)) = c
        .node_selector
        .iter()
        .find(|(k, _)| k == names::LABEL_GPU_PRODUCT)
    {
        return models.set_of(std::slice::from_ref(v));
    }
    // One term only: with several, any term may match and the pod is not bound to a list.
    if let Some(sel) = &c.affinity
        && let [term] = sel.terms.as_slice()
        && let Some(r) = term
            .match_expressions
            .iter()
            .find(|r| r.key() == names::LABEL_GPU_PRODUCT && r.operator() == Operator::In)
    {
        return models.set_of(r.values());
    }
    ModelSet::Any
}
