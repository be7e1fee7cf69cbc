//! Each policy's [`Scorer`]: how it ranks the nodes for one pod. The choice itself (best
//! score, then the seeded order) is [`super::choose`]'s, the same for all of them.

use super::choose::Scorer;
use super::fit::can_fit;
use crate::config::Strategy;
use crate::frag::Mix;
use crate::frag_index::FragIndex;
use crate::gpushare::policy::{Choice, Score};
use crate::request::GpuRequest;
use crate::sharing::{fits_existing_share, shared_milli};
use crate::snapshot::{CPU, FastMap, MEM, NodeId, PodId, Snapshot};
use crate::state::State;

/// KAI's node score, as a lexicographic key since each plugin's magnitude dwarfs the next:
/// gpusharingorder (binpack only) > resourcetype > nodeplacement (binpack: least free;
/// spread: largest free ratio).
#[derive(Clone, Copy, Debug)]
pub(super) struct KaiKey {
    pub(super) bonus: bool,
    restype: bool,
    placement: f64,
    /// The node's free GPU (or CPU), for the binpack stop.
    free: f64,
}

#[derive(Clone, Copy)]
pub(super) struct Kai<'a, 's> {
    s: &'a Snapshot<'s>,
    st: &'a State,
    pod: PodId,
    gpu_task: bool,
    strategy: Strategy,
    sharing_bonus: bool,
    want_gpu: i64,
}

impl<'a, 's> Kai<'a, 's> {
    pub(super) fn new(
        s: &'a Snapshot<'s>,
        st: &'a State,
        pod: PodId,
        gpu_strategy: Strategy,
        cpu_strategy: Strategy,
    ) -> Self {
        let p = &s.pods[pod as usize];
        let gpu_task = p.gpu.wants_gpu();
        Kai {
            s,
            st,
            pod,
            gpu_task,
            strategy: if gpu_task { gpu_strategy } else { cpu_strategy },
            sharing_bonus: p.gpu.is_shared() && gpu_strategy == Strategy::Binpack,
            want_gpu: p.res.0[0],
        }
    }

    /// KAI's gpusharingorder: the node already has a shared device this share fits on.
    pub(super) fn bonus(&self, n: NodeId) -> bool {
        let p = &self.s.pods[self.pod as usize];
        self.sharing_bonus
            && shared_milli(self.s, n, &p.gpu)
                .is_ok_and(|m| fits_existing_share(self.st.node_gpus(n), m))
    }
}

impl Scorer for Kai<'_, '_> {
    type Key = KaiKey;
    fn key(&mut self, n: NodeId) -> Option<KaiKey> {
        let (s, st) = (self.s, self.st);
        let p = &s.pods[self.pod as usize];
        let i = n as usize;
        // Cheap necessary conditions of `can_fit` first.
        if st.free_pods[i] < 1 || st.free_cpu[i] < p.res.0[CPU] || st.free_mem[i] < p.res.0[MEM] {
            return None;
        }
        if self.gpu_task
            && !matches!(p.gpu, GpuRequest::Mig { .. })
            && st.free_gpu[i] < self.want_gpu.min(1000)
        {
            return None;
        }
        if let GpuRequest::Whole(k) = p.gpu
            && u32::from(st.idle_gpus[i]) < k
        {
            return None;
        }
        let node = &s.nodes[i];
        let bonus = self.bonus(n);
        let restype = !self.gpu_task && node.gpus == 0 && node.mig.is_empty();
        let (free, total) = if self.gpu_task {
            (st.free_gpu[i] as f64, f64::from(node.gpus) * 1000.0)
        } else {
            (st.free_cpu[i] as f64, node.cpu_milli as f64)
        };
        let placement = match self.strategy {
            Strategy::Binpack => -free,
            Strategy::Spread if total > 0.0 => free / total,
            Strategy::Spread => 0.0,
        };
        Some(KaiKey {
            bonus,
            restype,
            placement,
            free,
        })
    }
    fn beats(&self, a: &KaiKey, b: &KaiKey) -> bool {
        (a.bonus, a.restype)
            .cmp(&(b.bonus, b.restype))
            .then(
                a.placement
                    .partial_cmp(&b.placement)
                    .unwrap_or(std::cmp::Ordering::Equal),
            )
            .is_gt()
    }
    fn fits(&mut self, n: NodeId) -> bool {
        can_fit(self.s, self.st, n, self.pod).is_ok()
    }
    fn unbeatable(&self, k: &KaiKey) -> bool {
        self.strategy == Strategy::Binpack
            && self.gpu_task
            && (k.bonus || !self.sharing_bonus)
            && k.free <= self.want_gpu as f64
    }
}

/// The benchmark baselines: best fit (least normalised capacity left after placing) and
/// plain bin-pack (the first node that fits: every key ties, the first is unbeatable).
pub(super) struct Baseline<'a, 's> {
    pub(super) s: &'a Snapshot<'s>,
    pub(super) st: &'a State,
    pub(super) pod: PodId,
    pub(super) first_fit: bool,
}

impl Scorer for Baseline<'_, '_> {
    type Key = f64;
    fn key(&mut self, n: NodeId) -> Option<f64> {
        if self.first_fit {
            return Some(0.0);
        }
        let (s, st) = (self.s, self.st);
        let p = &s.pods[self.pod as usize];
        let node = &s.nodes[n as usize];
        let i = n as usize;
        let gpu_left = if node.gpus > 0 {
            (st.free_gpu[i] - p.res.0[0]) as f64 / (f64::from(node.gpus) * 1000.0)
        } else {
            0.0
        };
        let cpu_left = (st.free_cpu[i] - p.res.0[CPU]) as f64 / node.cpu_milli.max(1) as f64;
        let mem_left = (st.free_mem[i] - p.res.0[MEM]) as f64 / node.memory_bytes.max(1) as f64;
        let left = if p.gpu.wants_gpu() {
            gpu_left * 4.0 + cpu_left + mem_left
        } else {
            gpu_left + cpu_left + mem_left
        };
        Some(-left)
    }
    fn beats(&self, a: &f64, b: &f64) -> bool {
        a > b
    }
    fn fits(&mut self, n: NodeId) -> bool {
        can_fit(self.s, self.st, n, self.pod).is_ok()
    }
    fn unbeatable(&self, _k: &f64) -> bool {
        self.first_fit
    }
}

/// (request shape, node version, the node's score and devices; `None`: does not fit).
pub(super) type FragMemo = (u32, u32, Option<(Score, Choice)>);

/// Where the fragmentation-aware policy keeps answers it already has.
pub(super) enum FragMemos<'a> {
    /// Per node, until the node changes (the node scan).
    Nodes(&'a mut [Vec<FragMemo>]),
    /// Per class of alike nodes, for good (`FragIndex`): a class key is the whole state
    /// the score reads.
    Classes {
        index: &'a FragIndex,
        memo: &'a mut FastMap<(u32, u32), Option<(Score, Choice)>>,
    },
}

/// Gantry's GPU-sharing policy (FGD's fragmentation score against the snapshot's mix).
pub(super) struct Frag<'a, 's> {
    pub(super) s: &'a Snapshot<'s>,
    pub(super) st: &'a State,
    pub(super) pod: PodId,
    pub(super) mix: &'a Mix,
    pub(super) shape: u32,
    pub(super) memos: FragMemos<'a>,
}

impl Frag<'_, '_> {
    fn score(&self, n: NodeId) -> Option<(Score, Choice)> {
        can_fit(self.s, self.st, n, self.pod).ok()?;
        self.mix.score_on_node(self.s, self.st, self.pod, n)
    }

    /// The answer kept for node `n`, if any.
    fn cached(&self, n: NodeId) -> Option<Option<(Score, Choice)>> {
        match &self.memos {
            FragMemos::Nodes(cache) => {
                let version = self.st.node_version[n as usize];
                cache[n as usize]
                    .iter()
                    .find(|e| e.0 == self.shape && e.1 == version)
                    .map(|e| e.2)
            }
            FragMemos::Classes { index, memo } => index
                .class_of(n)
                .and_then(|c| memo.get(&(c, self.shape)).copied()),
        }
    }

    fn remember(&mut self, n: NodeId, r: Option<(Score, Choice)>) {
        let version = self.st.node_version[n as usize];
        match &mut self.memos {
            FragMemos::Nodes(cache) => {
                let memo = &mut cache[n as usize];
                memo.retain(|e| e.1 == version);
                memo.push((self.shape, version, r));
            }
            // Nodes the policy cannot model have no class: they are scored each time.
            FragMemos::Classes { index, memo } => {
                if let Some(c) = index.class_of(n) {
                    memo.insert((c, self.shape), r);
                }
            }
        }
    }
}

impl Scorer for Frag<'_, '_> {
    type Key = (Score, Choice);
    fn key(&mut self, n: NodeId) -> Option<(Score, Choice)> {
        if let Some(r) = self.cached(n) {
            return r;
        }
        let r = self.score(n);
        self.remember(n, r);
        r
    }
    fn beats(&self, a: &(Score, Choice), b: &(Score, Choice)) -> bool {
        a.0.beats(&b.0)
    }
}
