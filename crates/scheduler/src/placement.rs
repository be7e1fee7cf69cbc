//! Choosing a node (and devices) for one pod: static class filter, dynamic fit, then the
//! configured scoring. Nodes are visited in a seeded order so equal scores break ties the
//! same way on every run.

use crate::config::{Config, Policy, Strategy};
use crate::decisions::{NodeReason, summarize};
use crate::frag::Mix;
use crate::frag_index::FragIndex;
use crate::gpushare::policy::{Choice, Score};
use crate::predicates::ClassCache;
use crate::request::GpuRequest;
use crate::sharing::{GpuOrder, fit_gpu};
use crate::snapshot::{CPU, FastMap, MEM, NodeId, PodId, Snapshot};
use crate::state::{GpuPlacement, Placement, State};
use fit::can_fit;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod choose;
mod fit;
mod gpu_index;
mod scorers;
#[cfg(test)]
mod tests;
use choose::{Best, Order};
use gpu_index::GpuIndex;
use scorers::{Baseline, Frag, FragMemo, FragMemos, Kai};

pub struct Placer {
    pub cfg: Config,
    classes: ClassCache,
    /// Seeded visiting order of nodes; class lists are kept in this order.
    rank: Vec<u32>,
    mix: Mix,
    rng: ChaCha8Rng,
    /// Fragmentation-aware memo per node (the node scan).
    frag_cache: Vec<Vec<FragMemo>>,
    /// Fragmentation-aware classes of alike nodes (the same choice as the scan).
    frag_index: FragIndex,
    /// (class, request shape) -> the class's score and devices, for good.
    frag_memo: FastMap<(u32, u32), Option<(Score, Choice)>>,
    /// Score every node of the class list instead of using the free-GPU or class index
    /// (to check they agree).
    pub scan: bool,
    shapes: FastMap<(GpuRequest, i64, i64), u32>,
    index: GpuIndex,
    /// Per class: which nodes pass its static filter (for index scans).
    members: Vec<Option<Vec<bool>>>,
}

impl Placer {
    pub fn new(s: &Snapshot<'_>, cfg: &Config) -> Placer {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut order: Vec<u32> = (0..s.nodes.len() as u32).collect();
        // Fisher-Yates with the seeded generator.
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
        let mut rank = vec![0u32; s.nodes.len()];
        for (r, &n) in order.iter().enumerate() {
            rank[n as usize] = r as u32;
        }
        let mut cfg = cfg.clone();
        if cfg.policy == Policy::Auto {
            cfg.policy = if cfg.gpu_strategy == Strategy::Binpack && crate::frag::auto_applies(s) {
                Policy::FragmentationAware
            } else {
                Policy::Kai
            };
        }
        let mix = if cfg.policy == Policy::FragmentationAware {
            Mix::from_snapshot(s)
        } else {
            Mix::default()
        };
        let frag_cache = if mix.is_empty() {
            Vec::new()
        } else {
            vec![Vec::new(); s.nodes.len()]
        };
        Placer {
            cfg,
            classes: ClassCache::new(s, order),
            rank,
            mix,
            rng,
            frag_cache,
            frag_index: FragIndex::default(),
            frag_memo: FastMap::default(),
            scan: false,
            shapes: FastMap::default(),
            index: GpuIndex::default(),
            members: vec![None; s.classes.len()],
        }
    }

    fn gpu_order(&self) -> GpuOrder {
        match self.cfg.gpu_strategy {
            Strategy::Binpack => GpuOrder::Pack,
            Strategy::Spread => GpuOrder::Spread,
        }
    }

    /// The best placement for `pod`, or `None` when no node fits.
    pub fn place(&mut self, s: &Snapshot<'_>, st: &State, pod: PodId) -> Option<Placement> {
        self.place_where(s, st, pod, |_| true)
    }

    /// The best placement for `pod` among the nodes `allowed` accepts (a topology domain,
    /// say) besides the pod's own static filter; `None` when none of them fits.
    pub fn place_where(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        allowed: impl Fn(NodeId) -> bool,
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let class = p.class as usize;
        let list = std::mem::take(&mut self.classes.get(s, p.class).nodes);
        if self.members[class].is_none() {
            let mut m = vec![false; s.nodes.len()];
            for &n in &list {
                m[n as usize] = true;
            }
            self.members[class] = Some(m);
        }
        let members = self.members[class].take().unwrap_or_default();
        let eligible = |n: NodeId| members[n as usize] && allowed(n);
        let out = self.choose(s, st, pod, &list, &eligible);
        self.members[class] = Some(members);
        self.classes.get(s, p.class).nodes = list;
        out
    }

    /// The policy's scorer over the candidates its index offers, then the devices.
    fn choose(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
        eligible: &impl Fn(NodeId) -> bool,
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let in_list = || list.iter().copied().filter(|&n| eligible(n));
        let node = match self.cfg.policy {
            Policy::FragmentationAware
                if !self.mix.is_empty() && crate::frag::models_request(&p.gpu) =>
            {
                return self.choose_frag(s, st, pod, list, eligible);
            }
            // `Auto` is resolved in `new`; it reads as KAI should it ever reach here.
            Policy::Kai | Policy::Auto | Policy::FragmentationAware => {
                let mut kai = Kai::new(s, st, pod, self.cfg.gpu_strategy, self.cfg.cpu_strategy);
                let mut best = Best::new();
                // The fragmentation-aware policy's fallback keeps the scan it always had.
                let indexed = !self.scan
                    && self.cfg.policy != Policy::FragmentationAware
                    && self.cfg.gpu_strategy == Strategy::Binpack
                    && matches!(
                        p.gpu,
                        GpuRequest::Whole(_)
                            | GpuRequest::Fraction { .. }
                            | GpuRequest::Memory { .. }
                    );
                if indexed {
                    self.index.sync(st, &self.rank);
                    self.index
                        .offer(&mut best, &mut kai, &self.rank, &p.gpu, eligible);
                } else {
                    best.offer(&mut kai, &self.rank, in_list(), Order::Seeded);
                }
                best.into_inner()?.1
            }
            Policy::FirstFit | Policy::BestFit => {
                let mut sc = Baseline {
                    s,
                    st,
                    pod,
                    first_fit: self.cfg.policy == Policy::FirstFit,
                };
                let mut best = Best::new();
                best.offer(&mut sc, &self.rank, in_list(), Order::Seeded);
                best.into_inner()?.1
            }
            // Not a best-score choice: uniform over the nodes that fit.
            Policy::RandomFit => {
                let fits: Vec<NodeId> = in_list()
                    .filter(|&n| can_fit(s, st, n, pod).is_ok())
                    .collect();
                if fits.is_empty() {
                    return None;
                }
                fits[self.rng.random_range(0..fits.len())]
            }
        };
        let gpu = self.fit(s, st, node, pod).ok()?;
        Some(Placement { node, gpu })
    }

    /// Gantry's GPU-sharing policy: over classes of alike nodes (`frag_index`), or, for
    /// pods whose static filter keeps few nodes, over those nodes with a per-node memo.
    fn choose_frag(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
        eligible: &impl Fn(NodeId) -> bool,
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let (cpu, mem) = (p.res.0[CPU], p.res.0[MEM]);
        let next = self.shapes.len() as u32;
        let shape = *self.shapes.entry((p.gpu.clone(), cpu, mem)).or_insert(next);
        let scan = self.scan || list.len() * 4 < s.nodes.len();
        if !scan && self.frag_index.sync(s, st, &self.mix, &self.rank) {
            self.frag_memo.clear();
        }
        let mut frag = Frag {
            s,
            st,
            pod,
            mix: &self.mix,
            shape,
            memos: if scan {
                FragMemos::Nodes(&mut self.frag_cache)
            } else {
                FragMemos::Classes {
                    index: &self.frag_index,
                    memo: &mut self.frag_memo,
                }
            },
        };
        let mut best = Best::new();
        if scan {
            let nodes = list.iter().copied().filter(|&n| eligible(n));
            best.offer(&mut frag, &self.rank, nodes, Order::Seeded);
        } else {
            let nodes = self.frag_index.candidates(eligible);
            best.offer(&mut frag, &self.rank, nodes, Order::Any);
        }
        let ((_, choice), node) = best.into_inner()?;
        let gpu = self.mix.placement_on(s, st, pod, node, &choice)?;
        Some(Placement { node, gpu })
    }

    /// The devices KAI's in-node order picks (the node's fit is already known).
    fn fit(
        &self,
        s: &Snapshot<'_>,
        st: &State,
        node: NodeId,
        pod: PodId,
    ) -> Result<GpuPlacement, NodeReason> {
        can_fit(s, st, node, pod)?;
        fit_gpu(s, st, node, &s.pods[pod as usize].gpu, self.gpu_order())
    }

    /// "0/40 nodes: 32 insufficient nvidia.com/gpu, 8 untolerated taint nvidia.com/gpu".
    pub fn explain(&mut self, s: &Snapshot<'_>, st: &State, pod: PodId) -> String {
        let class = s.pods[pod as usize].class;
        let cn = self.classes.get(s, class);
        let mut counts = cn.rejected.clone();
        let list = cn.nodes.clone();
        let mut fit = 0;
        for n in list {
            match can_fit(s, st, n, pod) {
                Ok(_) => fit += 1,
                Err(r) => match counts.iter_mut().find(|(x, _)| *x == r) {
                    Some(e) => e.1 += 1,
                    None => counts.push((r, 1)),
                },
            }
        }
        summarize(s.nodes.len(), fit, &counts)
    }

    pub fn rank(&self, n: NodeId) -> u32 {
        self.rank[n as usize]
    }
}
