//! A cluster of GPU nodes as plain values, and the straightforward way to place one pod:
//! score every node, keep the best. [`super::fast`] must choose exactly the same.

use super::fgd::TaskMix;
use super::model::{NodeFree, NodeSpec, PodShape};
use super::policy::{Choice, Score, SharePolicy, kind_tag, score_node};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Per node: how many pods of each GPU request kind it hosts (GpuClustering's affinity).
pub type Kinds = [u8; 16];

#[derive(Clone, Debug)]
pub struct Cluster {
    pub specs: Vec<NodeSpec>,
    pub free: Vec<NodeFree>,
    pub kinds: Vec<Kinds>,
}

/// Where a pod goes: node index and the devices it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub node: u32,
    pub mask: u16,
}

impl Cluster {
    pub fn new(specs: Vec<NodeSpec>) -> Cluster {
        let free = specs.iter().map(NodeSpec::empty).collect();
        let kinds = vec![[0u8; 16]; specs.len()];
        Cluster { specs, free, kinds }
    }
    /// GPU capacity in milli.
    pub fn gpu_capacity(&self) -> i64 {
        self.specs.iter().map(|s| i64::from(s.gpus) * 1000).sum()
    }
    pub fn apply(&mut self, p: &PodShape, d: Decision) {
        let i = d.node as usize;
        self.free[i] = self.free[i].after(p, d.mask);
        if let Some(t) = kind_tag(p) {
            self.kinds[i][t] = self.kinds[i][t].saturating_add(1);
        }
    }
}

/// Among tied nodes (ascending index): a random one where the policy breaks ties at random,
/// else the first.
pub fn break_tie(policy: SharePolicy, ties: usize, rng: &mut ChaCha8Rng) -> usize {
    if policy.random_ties() && ties > 1 {
        rng.random_range(0..ties)
    } else {
        0
    }
}

/// The device mask for a chosen node; the Random baseline draws its device here.
pub fn resolve(c: &Choice, n: &NodeFree, p: &PodShape, rng: &mut ChaCha8Rng) -> u16 {
    c.resolve(n, p, |len| rng.random_range(0..len))
}

/// Score every node and keep the best (ties as the policy breaks them).
pub fn choose_simple(
    policy: SharePolicy,
    c: &Cluster,
    p: &PodShape,
    mix: &TaskMix,
    rng: &mut ChaCha8Rng,
) -> Option<Decision> {
    let mut best: Option<Score> = None;
    let mut ties: Vec<(u32, Choice)> = Vec::new();
    for (i, n) in c.free.iter().enumerate() {
        let Some((s, choice)) = score_node(policy, n, p, mix, &c.kinds[i]) else {
            continue;
        };
        match &best {
            Some(b) if b.beats(&s) => continue,
            Some(b) if !s.beats(b) => ties.push((i as u32, choice)),
            _ => {
                best = Some(s);
                ties.clear();
                ties.push((i as u32, choice));
            }
        }
        if policy == SharePolicy::FirstFit {
            break;
        }
    }
    if ties.is_empty() {
        return None;
    }
    let (node, choice) = ties[break_tie(policy, ties.len(), rng)];
    let mask = resolve(&choice, &c.free[node as usize], p, rng);
    Some(Decision { node, mask })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpushare::model::ModelSet;
    use rand::SeedableRng;

    fn spec(name: &str, gpus: u8) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            cpu: 32_000,
            mem: 1 << 18,
            gpus,
            model: 0,
        }
    }

    #[test]
    fn first_fit_takes_the_first_node_and_the_tightest_device() {
        let mut c = Cluster::new(vec![spec("a", 0), spec("b", 2), spec("c", 2)]);
        let p = PodShape {
            cpu: 1000,
            mem: 0,
            num_gpu: 1,
            milli: 400,
            models: ModelSet::Any,
            spec: 0,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mix = TaskMix::default();
        let d = choose_simple(SharePolicy::FirstFit, &c, &p, &mix, &mut rng).unwrap();
        assert_eq!(d, Decision { node: 1, mask: 1 });
        c.apply(&p, d);
        c.free[1].gpu[1] = 500;
        // 600 left on device 0, 500 on device 1: the tighter one.
        let d = choose_simple(SharePolicy::FirstFit, &c, &p, &mix, &mut rng).unwrap();
        assert_eq!(d, Decision { node: 1, mask: 2 });
        // Nothing fits a 3-GPU pod.
        let big = PodShape {
            num_gpu: 3,
            milli: 1000,
            ..p
        };
        assert!(choose_simple(SharePolicy::BestFit, &c, &big, &mix, &mut rng).is_none());
    }
}
