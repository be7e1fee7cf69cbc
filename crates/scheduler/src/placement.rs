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
use crate::sharing::{GpuOrder, can_fit_gpu, fit_gpu, fits_existing_share, shared_milli};
use crate::snapshot::{CPU, MEM, NodeId, PodId, Snapshot};
use crate::state::{GpuPlacement, Placement, State};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

mod gpu_index;
use gpu_index::{GpuIndex, least_fitting};

/// (request shape, node version, the node's score and devices; `None`: does not fit).
type FragMemo = (u32, u32, Option<(Score, Choice)>);

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
    /// Score every node instead of using `frag_index` (to check they agree).
    pub frag_scan: bool,
    shapes: HashMap<(GpuRequest, i64, i64), u32>,
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
            frag_scan: false,
            shapes: HashMap::new(),
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

    /// Cheap dynamic checks, then the GPU fit (devices chosen).
    fn fit(
        &self,
        s: &Snapshot<'_>,
        st: &State,
        node: NodeId,
        pod: PodId,
    ) -> Result<GpuPlacement, NodeReason> {
        self.can_fit(s, st, node, pod)?;
        fit_gpu(s, st, node, &s.pods[pod as usize].gpu, self.gpu_order())
    }

    /// Whether the pod fits the node now, without choosing devices.
    fn can_fit(
        &self,
        s: &Snapshot<'_>,
        st: &State,
        node: NodeId,
        pod: PodId,
    ) -> Result<(), NodeReason> {
        let p = &s.pods[pod as usize];
        let n = node as usize;
        if st.free_pods[n] < 1 {
            return Err(NodeReason::TooManyPods);
        }
        if st.free_cpu[n] < p.res.0[CPU] {
            return Err(NodeReason::InsufficientCpu);
        }
        if st.free_mem[n] < p.res.0[MEM] {
            return Err(NodeReason::InsufficientMemory);
        }
        can_fit_gpu(s, st, node, &p.gpu)
    }

    /// The best placement for `pod`, or `None` when no node fits.
    pub fn place(&mut self, s: &Snapshot<'_>, st: &State, pod: PodId) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let class = p.class;
        let list = std::mem::take(&mut self.classes.get(s, class).nodes);
        let out = self.place_in(s, st, pod, &list);
        self.classes.get(s, class).nodes = list;
        out
    }

    /// The best placement for `pod` among the nodes `allowed` marks (a topology domain).
    /// Scans the restricted list: the indexes cover whole classes, and the scan makes
    /// the same choice.
    pub fn place_among(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        allowed: &[bool],
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let list: Vec<NodeId> = (self.classes.get(s, p.class).nodes.iter())
            .copied()
            .filter(|&n| allowed[n as usize])
            .collect();
        match self.cfg.policy {
            Policy::Kai | Policy::Auto => self.place_kai(s, st, pod, &list),
            Policy::FragmentationAware
                if !self.mix.is_empty() && crate::frag::models_request(&p.gpu) =>
            {
                let (cpu, mem) = (p.res.0[CPU], p.res.0[MEM]);
                let next = self.shapes.len() as u32;
                let shape = *self.shapes.entry((p.gpu.clone(), cpu, mem)).or_insert(next);
                self.place_frag_scan(s, st, pod, &list, shape)
            }
            _ => self.place_in(s, st, pod, &list),
        }
    }

    fn place_in(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        match self.cfg.policy {
            // `Auto` is resolved in `new`; it reads as KAI should it ever reach here.
            Policy::Kai | Policy::Auto
                if self.cfg.gpu_strategy == Strategy::Binpack
                    && matches!(
                        p.gpu,
                        GpuRequest::Whole(_)
                            | GpuRequest::Fraction { .. }
                            | GpuRequest::Memory { .. }
                    ) =>
            {
                self.place_indexed(s, st, pod, list)
            }
            Policy::Kai | Policy::Auto => self.place_kai(s, st, pod, list),
            Policy::FragmentationAware
                if !self.mix.is_empty() && crate::frag::models_request(&p.gpu) =>
            {
                self.place_frag(s, st, pod, list)
            }
            Policy::FragmentationAware => self.place_kai(s, st, pod, list),
            Policy::FirstFit => {
                let node = list
                    .iter()
                    .copied()
                    .find(|&n| self.can_fit(s, st, n, pod).is_ok())?;
                Some(Placement {
                    node,
                    gpu: self.fit(s, st, node, pod).ok()?,
                })
            }
            Policy::RandomFit => {
                let fits: Vec<NodeId> = list
                    .iter()
                    .copied()
                    .filter(|&n| self.can_fit(s, st, n, pod).is_ok())
                    .collect();
                if fits.is_empty() {
                    return None;
                }
                let node = fits[self.rng.random_range(0..fits.len())];
                Some(Placement {
                    node,
                    gpu: self.fit(s, st, node, pod).ok()?,
                })
            }
            Policy::BestFit => {
                // Least normalised capacity left over after placing (GPU, CPU, memory).
                let mut best: Option<(f64, NodeId)> = None;
                for &n in list {
                    if self.can_fit(s, st, n, pod).is_err() {
                        continue;
                    }
                    let node = &s.nodes[n as usize];
                    let i = n as usize;
                    let gpu_left = if node.gpus > 0 {
                        (st.free_gpu[i] - p.res.0[0]) as f64 / (f64::from(node.gpus) * 1000.0)
                    } else {
                        0.0
                    };
                    let cpu_left =
                        (st.free_cpu[i] - p.res.0[CPU]) as f64 / node.cpu_milli.max(1) as f64;
                    let mem_left =
                        (st.free_mem[i] - p.res.0[MEM]) as f64 / node.memory_bytes.max(1) as f64;
                    let left = if p.gpu.wants_gpu() {
                        gpu_left * 4.0 + cpu_left + mem_left
                    } else {
                        gpu_left + cpu_left + mem_left
                    };
                    if best.as_ref().is_none_or(|b| left < b.0) {
                        best = Some((left, n));
                    }
                }
                let (_, node) = best?;
                Some(Placement {
                    node,
                    gpu: self.fit(s, st, node, pod).ok()?,
                })
            }
        }
    }

    /// KAI's node score, as a lexicographic key since each plugin's magnitude dwarfs the next:
    /// gpusharingorder (binpack only) > resourcetype > nodeplacement (binpack: least free;
    /// spread: largest free ratio). First in the seeded order wins ties.
    fn place_kai(
        &self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let gpu_task = p.gpu.wants_gpu();
        let strategy = if gpu_task {
            self.cfg.gpu_strategy
        } else {
            self.cfg.cpu_strategy
        };
        let sharing_bonus = p.gpu.is_shared() && self.cfg.gpu_strategy == Strategy::Binpack;
        let want_gpu = p.res.0[0];
        let mut best: Option<((bool, bool, f64), NodeId)> = None;
        for &n in list {
            let i = n as usize;
            if st.free_pods[i] < 1 || st.free_cpu[i] < p.res.0[CPU] || st.free_mem[i] < p.res.0[MEM]
            {
                continue;
            }
            if gpu_task
                && !matches!(p.gpu, GpuRequest::Mig { .. })
                && st.free_gpu[i] < want_gpu.min(1000)
            {
                continue;
            }
            if let GpuRequest::Whole(k) = p.gpu
                && u32::from(st.idle_gpus[i]) < k
            {
                continue;
            }
            let node = &s.nodes[i];
            let bonus = sharing_bonus
                && shared_milli(s, n, &p.gpu)
                    .is_ok_and(|m| fits_existing_share(st.node_gpus(n), m));
            let restype = !gpu_task && node.gpus == 0 && node.mig.is_empty();
            let (free, total) = if gpu_task {
                (st.free_gpu[i] as f64, f64::from(node.gpus) * 1000.0)
            } else {
                (st.free_cpu[i] as f64, node.cpu_milli as f64)
            };
            let placement = match strategy {
                Strategy::Binpack => -free,
                Strategy::Spread => {
                    if total > 0.0 {
                        free / total
                    } else {
                        0.0
                    }
                }
            };
            let key = (bonus, restype, placement);
            if best.as_ref().is_some_and(|(b, _)| !gt(&key, b)) {
                continue;
            }
            if self.can_fit(s, st, n, pod).is_err() {
                continue;
            }
            best = Some((key, n));
            // Binpack cannot beat a node left with nothing free after this pod.
            if strategy == Strategy::Binpack
                && gpu_task
                && (bonus || !sharing_bonus)
                && free <= want_gpu as f64
            {
                break;
            }
        }
        let (_, node) = best?;
        let gpu = self.fit(s, st, node, pod).ok()?;
        Some(Placement { node, gpu })
    }

    /// KAI binpack for GPU pods through the free-GPU index: same choice as `place_kai`
    /// (sharing bonus first, then least free GPU, then seeded order) without a full scan.
    fn place_indexed(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let class = p.class as usize;
        if self.members[class].is_none() {
            let mut m = vec![false; s.nodes.len()];
            for &n in list {
                m[n as usize] = true;
            }
            self.members[class] = Some(m);
        }
        self.index.sync(st, &self.rank);
        let members = self.members[class].as_deref().unwrap_or(&[]);
        let lower = match p.gpu {
            GpuRequest::Whole(k) => i64::from(k) * 1000,
            _ => 1,
        };
        let from = (lower, 0u32, 0 as NodeId);
        let fits = |n: NodeId| members[n as usize] && self.can_fit(s, st, n, pod).is_ok();
        // The buckets only skip nodes the request cannot fit: the choice is the same as
        // walking `all` (or `shared`) in order.
        let chosen = match p.gpu {
            // Nodes with fewer than k idle devices never fit.
            GpuRequest::Whole(k) => Some(least_fitting(
                self.index.by_idle.iter().skip(k as usize),
                from,
                fits,
            )),
            // A share fits only where one device (shared, for the bonus) has `milli` free.
            GpuRequest::Fraction { milli, .. } => {
                let joined = least_fitting(
                    self.index.by_shared_free.range(milli..).map(|(_, set)| set),
                    from,
                    fits,
                );
                Some(joined.or_else(|| {
                    least_fitting(
                        self.index.by_device_free.range(milli..).map(|(_, set)| set),
                        from,
                        fits,
                    )
                }))
            }
            _ => None,
        };
        if let Some(chosen) = chosen {
            let (_, _, n) = chosen?;
            return Some(Placement {
                node: n,
                gpu: self.fit(s, st, n, pod).ok()?,
            });
        }
        if p.gpu.is_shared() {
            for &(_, _, n) in self.index.shared.range(from..) {
                if !members[n as usize] || self.can_fit(s, st, n, pod).is_err() {
                    continue;
                }
                if shared_milli(s, n, &p.gpu).is_ok_and(|m| fits_existing_share(st.node_gpus(n), m))
                {
                    return Some(Placement {
                        node: n,
                        gpu: self.fit(s, st, n, pod).ok()?,
                    });
                }
            }
        }
        for &(_, _, n) in self.index.all.range(from..) {
            if members[n as usize] && self.can_fit(s, st, n, pod).is_ok() {
                return Some(Placement {
                    node: n,
                    gpu: self.fit(s, st, n, pod).ok()?,
                });
            }
        }
        None
    }

    /// Fragmentation-aware (Gantry's GPU-sharing policy, `gpushare::SharePolicy::Gantry`):
    /// the best score, then the seeded node order, over classes of alike nodes
    /// (`frag_index`); pods whose static filter keeps few nodes scan those nodes.
    fn place_frag(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
    ) -> Option<Placement> {
        let p = &s.pods[pod as usize];
        let (cpu, mem) = (p.res.0[CPU], p.res.0[MEM]);
        let next = self.shapes.len() as u32;
        let shape = *self.shapes.entry((p.gpu.clone(), cpu, mem)).or_insert(next);
        if self.frag_scan || list.len() * 4 < s.nodes.len() {
            return self.place_frag_scan(s, st, pod, list, shape);
        }
        let class = p.class as usize;
        if self.members[class].is_none() {
            let mut m = vec![false; s.nodes.len()];
            for &n in list {
                m[n as usize] = true;
            }
            self.members[class] = Some(m);
        }
        let mut index = std::mem::take(&mut self.frag_index);
        let members = self.members[class].as_deref().unwrap_or(&[]);
        let chosen = index.choose(
            s,
            st,
            &self.mix,
            &self.rank,
            shape,
            |n| members[n as usize],
            |n| {
                self.can_fit(s, st, n, pod).ok()?;
                self.mix.score_on_node(s, st, pod, n)
            },
        );
        self.frag_index = index;
        let (node, choice) = chosen?;
        let gpu = self.mix.placement_on(s, st, pod, node, &choice)?;
        Some(Placement { node, gpu })
    }

    /// The same choice by scoring every node of the list; each node's answer for a request
    /// shape is kept until the node changes.
    fn place_frag_scan(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        pod: PodId,
        list: &[NodeId],
        shape: u32,
    ) -> Option<Placement> {
        let mut best: Option<(Score, NodeId, Choice)> = None;
        for &n in list {
            let version = st.node_version[n as usize];
            let cached = self.frag_cache[n as usize]
                .iter()
                .find(|e| e.0 == shape && e.1 == version)
                .map(|e| e.2);
            let r = match cached {
                Some(c) => c,
                None => {
                    let r = if self.can_fit(s, st, n, pod).is_ok() {
                        self.mix.score_on_node(s, st, pod, n)
                    } else {
                        None
                    };
                    let memo = &mut self.frag_cache[n as usize];
                    memo.retain(|e| e.1 == version);
                    memo.push((shape, version, r));
                    r
                }
            };
            let Some((score, choice)) = r else { continue };
            if best.as_ref().is_none_or(|b| score.beats(&b.0)) {
                best = Some((score, n, choice));
            }
        }
        let (_, node, choice) = best?;
        let gpu = self.mix.placement_on(s, st, pod, node, &choice)?;
        Some(Placement { node, gpu })
    }

    /// "0/40 nodes: 32 insufficient nvidia.com/gpu, 8 untolerated taint nvidia.com/gpu".
    pub fn explain(&mut self, s: &Snapshot<'_>, st: &State, pod: PodId) -> String {
        let class = s.pods[pod as usize].class;
        let cn = self.classes.get(s, class);
        let mut counts = cn.rejected.clone();
        let list = cn.nodes.clone();
        let mut fit = 0;
        for n in list {
            match self.can_fit(s, st, n, pod) {
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

fn gt(a: &(bool, bool, f64), b: &(bool, bool, f64)) -> bool {
    (a.0, a.1)
        .cmp(&(b.0, b.1))
        .then(a.2.partial_cmp(&b.2).unwrap_or(std::cmp::Ordering::Equal))
        == std::cmp::Ordering::Greater
}
