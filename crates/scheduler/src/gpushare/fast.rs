//! The same choice as [`super::cluster::choose_simple`] for the fragmentation policies,
//! without scoring every node: nodes in the same state (model, CPU, memory, the multiset of
//! free device milli) form one class and score alike, so each pod scores each live class
//! once, and a class's score for a request shape is remembered until the class empties.
//! Only the node a pod lands on changes class.

use super::cluster::{Cluster, Decision, break_tie, resolve};
use super::fgd::TaskMix;
use super::model::{NodeFree, PodShape};
use super::policy::{Choice, Score, SharePolicy, score_node};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

type Memo = Vec<Option<Option<(Score, Choice)>>>;

pub struct FastChooser {
    policy: SharePolicy,
    /// Whether scores look at memory (else memory only decides where a pod fits).
    mem_scored: bool,
    class_of: Vec<u32>,
    class_ids: HashMap<NodeFree, u32>,
    class_state: Vec<NodeFree>,
    /// Per class: its nodes, ascending.
    members: Vec<Vec<u32>>,
    /// Per class: the score class it uses.
    score_class: Vec<u32>,
    live: Vec<u32>,
    live_pos: Vec<usize>,
    score_ids: HashMap<NodeFree, u32>,
    score_state: Vec<NodeFree>,
    /// Per score class: live classes using it, and its remembered scores by shape.
    score_users: Vec<u32>,
    memo: Vec<Memo>,
    shape_ids: HashMap<PodShape, u32>,
}

const NOT_LIVE: usize = usize::MAX;

impl FastChooser {
    pub fn new(policy: SharePolicy, c: &Cluster, mix: &TaskMix) -> FastChooser {
        let mut f = FastChooser {
            policy,
            mem_scored: mix.check_mem,
            class_of: vec![u32::MAX; c.free.len()],
            class_ids: HashMap::new(),
            class_state: Vec::new(),
            members: Vec::new(),
            score_class: Vec::new(),
            live: Vec::new(),
            live_pos: Vec::new(),
            score_ids: HashMap::new(),
            score_state: Vec::new(),
            score_users: Vec::new(),
            memo: Vec::new(),
            shape_ids: HashMap::new(),
        };
        for (i, n) in c.free.iter().enumerate() {
            f.join(i as u32, n);
        }
        f
    }

    /// Whether the fast path gives this policy's choice (the baselines need per-node facts
    /// or randomness the classes do not keep).
    pub fn supports(policy: SharePolicy) -> bool {
        matches!(policy, SharePolicy::Fgd | SharePolicy::Gantry)
    }

    fn scored_state(&self, n: &NodeFree) -> NodeFree {
        let mut k = n.canonical();
        if !self.mem_scored {
            k.mem = 0;
        }
        k
    }

    fn join(&mut self, node: u32, n: &NodeFree) {
        let key = n.canonical();
        let next = self.class_state.len() as u32;
        let class = *self.class_ids.entry(key).or_insert(next);
        if class == next {
            self.class_state.push(key);
            self.members.push(Vec::new());
            self.live_pos.push(NOT_LIVE);
            let skey = self.scored_state(n);
            let snext = self.score_state.len() as u32;
            let sc = *self.score_ids.entry(skey).or_insert(snext);
            if sc == snext {
                self.score_state.push(skey);
                self.score_users.push(0);
                self.memo.push(Vec::new());
            }
            self.score_class.push(sc);
        }
        let c = class as usize;
        if self.members[c].is_empty() {
            self.live_pos[c] = self.live.len();
            self.live.push(class);
            self.score_users[self.score_class[c] as usize] += 1;
        }
        let m = &mut self.members[c];
        let at = m.binary_search(&node).unwrap_or_else(|e| e);
        m.insert(at, node);
        self.class_of[node as usize] = class;
    }

    fn leave(&mut self, node: u32) {
        let c = self.class_of[node as usize] as usize;
        let m = &mut self.members[c];
        if let Ok(at) = m.binary_search(&node) {
            m.remove(at);
        }
        if m.is_empty() {
            let pos = self.live_pos[c];
            self.live.swap_remove(pos);
            if let Some(&moved) = self.live.get(pos) {
                self.live_pos[moved as usize] = pos;
            }
            self.live_pos[c] = NOT_LIVE;
            let sc = self.score_class[c] as usize;
            self.score_users[sc] -= 1;
            if self.score_users[sc] == 0 {
                self.memo[sc] = Vec::new();
            }
        }
    }

    /// Tell the chooser a node changed (after [`Cluster::apply`]).
    pub fn moved(&mut self, c: &Cluster, node: u32) {
        self.leave(node);
        self.join(node, &c.free[node as usize]);
    }

    pub fn choose(
        &mut self,
        c: &Cluster,
        p: &PodShape,
        mix: &TaskMix,
        rng: &mut ChaCha8Rng,
    ) -> Option<Decision> {
        let mut sp = *p;
        if !self.mem_scored {
            sp.mem = 0;
        }
        let next = self.shape_ids.len() as u32;
        let shape = *self.shape_ids.entry(sp).or_insert(next) as usize;
        let mut best: Option<Score> = None;
        let mut ties: Vec<(u32, Choice)> = Vec::new();
        for li in 0..self.live.len() {
            let class = self.live[li] as usize;
            if !self.class_state[class].fits(p) {
                continue;
            }
            let sc = self.score_class[class] as usize;
            let memo = &mut self.memo[sc];
            if memo.len() <= shape {
                memo.resize(shape + 1, None);
            }
            let r = match memo[shape] {
                Some(r) => r,
                None => {
                    let r = score_node(self.policy, &self.score_state[sc], &sp, mix, &[]);
                    self.memo[sc][shape] = Some(r);
                    r
                }
            };
            let Some((s, choice)) = r else { continue };
            match &best {
                Some(b) if b.beats(&s) => continue,
                Some(b) if !s.beats(b) => ties.push((class as u32, choice)),
                _ => {
                    best = Some(s);
                    ties.clear();
                    ties.push((class as u32, choice));
                }
            }
        }
        if ties.is_empty() {
            return None;
        }
        let (node, choice) = self.pick(&ties, rng);
        let mask = resolve(&choice, &c.free[node as usize], p, rng);
        Some(Decision { node, mask })
    }

    /// The tied node `choose_simple` would take: ties there are in node order, so take the
    /// k-th smallest node over the tied classes.
    fn pick(&self, ties: &[(u32, Choice)], rng: &mut ChaCha8Rng) -> (u32, Choice) {
        let total: usize = ties
            .iter()
            .map(|(c, _)| self.members[*c as usize].len())
            .sum();
        let k = break_tie(self.policy, total, rng);
        if ties.len() == 1 {
            let (c, choice) = ties[0];
            return (self.members[c as usize][k], choice);
        }
        if k == 0 {
            return ties
                .iter()
                .map(|&(c, choice)| (self.members[c as usize][0], choice))
                .min_by_key(|e| e.0)
                .unwrap_or((0, Choice::NoGpu));
        }
        let mut all: Vec<(u32, Choice)> = ties
            .iter()
            .flat_map(|&(c, choice)| self.members[c as usize].iter().map(move |&n| (n, choice)))
            .collect();
        all.select_nth_unstable_by_key(k, |e| e.0);
        all[k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpushare::fgd::{ALL_TYPES, COVERAGE};
    use crate::gpushare::model::{ModelSet, Models, NodeSpec};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    /// A small cluster of three models and a workload of few shapes (many ties), with
    /// CPU-only, shared, whole and multi-GPU pods, some constrained to models.
    fn world(seed: u64) -> (Vec<NodeSpec>, Vec<PodShape>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut models = Models::default();
        let names = ["T4", "V100", "G2"];
        let ids: Vec<u8> = names.iter().map(|n| models.intern(n).unwrap()).collect();
        let nodes = (0..60)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                cpu: [32_000, 64_000, 96_000][rng.random_range(0..3)],
                mem: [131_072, 262_144][rng.random_range(0..2)],
                gpus: [0, 2, 4, 8][rng.random_range(0..4)],
                model: ids[rng.random_range(0..3)],
            })
            .collect();
        let shapes: Vec<PodShape> = (0..12)
            .map(|_| {
                let (num_gpu, milli) = match rng.random_range(0..4) {
                    0 => (0, 0),
                    1 => (1, [250, 500, 300][rng.random_range(0..3)]),
                    2 => (1, 1000),
                    _ => ([2, 4, 8][rng.random_range(0..3)], 1000),
                };
                PodShape {
                    cpu: [1000, 4000, 8000, 16_000][rng.random_range(0..4)],
                    mem: [2048, 16_384, 65_536][rng.random_range(0..3)],
                    num_gpu,
                    milli,
                    models: if rng.random_range(0..4) == 0 {
                        models.set_of(&[names[rng.random_range(0..3)]])
                    } else {
                        ModelSet::Any
                    },
                    spec: 0,
                }
            })
            .collect();
        let pods = (0..900)
            .map(|_| shapes[rng.random_range(0..shapes.len())])
            .collect();
        (nodes, pods)
    }

    /// Where each arrival went (`None`: did not fit), placing them one at a time with the
    /// fast chooser where it applies or the straightforward scan, against the policy's mix.
    fn place_all(
        policy: SharePolicy,
        nodes: &[NodeSpec],
        pods: &[PodShape],
        seed: u64,
        fast: bool,
    ) -> Vec<Option<Decision>> {
        let coverage = if policy == SharePolicy::Fgd {
            COVERAGE
        } else {
            ALL_TYPES
        };
        let mut mix = TaskMix::from_workload(pods, coverage, false);
        if policy == SharePolicy::Gantry {
            mix.set_reach(nodes.iter().map(|n| (n.model, n.gpus)));
        }
        let mut c = Cluster::new(nodes.to_vec());
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut chooser =
            (fast && FastChooser::supports(policy)).then(|| FastChooser::new(policy, &c, &mix));
        let mut trail = Vec::with_capacity(pods.len());
        for p in pods {
            let d = match chooser.as_mut() {
                Some(f) => f.choose(&c, p, &mix, &mut rng),
                None => super::super::cluster::choose_simple(policy, &c, p, &mix, &mut rng),
            };
            if let Some(d) = d {
                c.apply(p, d);
                if let Some(f) = chooser.as_mut() {
                    f.moved(&c, d.node);
                }
            }
            trail.push(d);
        }
        trail
    }

    #[test]
    fn fast_and_straightforward_choose_alike_on_several_seeds() {
        for seed in 1..=6 {
            let (nodes, pods) = world(seed);
            for policy in [SharePolicy::Fgd, SharePolicy::Gantry] {
                let slow = place_all(policy, &nodes, &pods, seed, false);
                let quick = place_all(policy, &nodes, &pods, seed, true);
                assert_eq!(slow, quick, "{policy:?} seed {seed}");
                // The workload overflows the cluster: both placements and refusals occur.
                let placed = slow.iter().flatten().count();
                assert!(
                    placed > 0 && placed < slow.len(),
                    "{policy:?} seed {seed}: {placed}"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever the workload, no node ends with negative CPU, memory or device milli,
        /// and a pod lands only on a model it accepts.
        #[test]
        fn placements_never_overcommit(seed in 0u64..10_000, policy in 0usize..8) {
            let policy = SharePolicy::ALL[policy];
            let (nodes, pods) = world(seed);
            let trail = place_all(policy, &nodes, &pods, seed, true);
            let mut c = Cluster::new(nodes.clone());
            for (p, d) in pods.iter().zip(&trail) {
                let Some(d) = d else { continue };
                let n = c.free[d.node as usize];
                prop_assert!(n.fits(p));
                let want = if p.wants_gpu() { u32::from(p.num_gpu) } else { 0 };
                prop_assert_eq!(d.mask.count_ones(), want);
                c.apply(p, *d);
                let after = c.free[d.node as usize];
                prop_assert!(after.cpu >= 0 && after.mem >= 0);
                prop_assert!(after.gpus().iter().all(|&g| g <= 1000));
            }
        }
    }
}
