//! How each GPU-sharing policy scores one node for one pod, and which devices it takes
//! there. Baselines follow the FGD paper's definitions (its simulator's score plugins),
//! integer scores and all; higher is better.

use super::fgd::TaskMix;
use super::model::{MAX_GPUS, MILLI, NodeFree, PodShape};

/// Normalisation constants of the paper's scores (largest node: 128 CPUs, 8 GPUs).
const MAX_SPEC_CPU: f64 = 128_000.0;
const MAX_SPEC_GPU: f64 = 8_000.0;
const MAX_SCORE: i64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SharePolicy {
    /// A random node that fits; a random device that fits.
    Random,
    /// Tetris: least dot product of free and requested (CPU, total GPU), normalised.
    DotProd,
    /// Nodes already hosting the same GPU request kind first, then fuller ones.
    GpuClustering,
    /// Partly used devices first, then idle devices of used nodes, then idle nodes.
    GpuPacking,
    /// Least CPU and GPU left over (half weight each).
    BestFit,
    /// The first node that fits, in node order.
    FirstFit,
    /// Fragmentation gradient descent as the paper ships it: sigmoid of the fragmentation
    /// drop, as an integer score 0-100.
    Fgd,
    /// Gantry's: FGD's integer score of the drop in the node's expected waste, the free GPU
    /// still unused when a stream of arrivals from the workload's mix has filled what it can
    /// ([`TaskMix::node_waste`]), against every task type of the workload (not only the most
    /// common ones covering 95 %), less the GPU taken from pods confined to the node's pool
    /// ([`TaskMix::displaced`]); the fitting device with the least free for a share (as
    /// KAI's `gpupack`); among equal scores a CPU-only pod goes where the least GPU is free;
    /// then node order.
    Gantry,
}

impl SharePolicy {
    pub const ALL: [SharePolicy; 8] = [
        SharePolicy::Random,
        SharePolicy::DotProd,
        SharePolicy::GpuClustering,
        SharePolicy::GpuPacking,
        SharePolicy::BestFit,
        SharePolicy::FirstFit,
        SharePolicy::Fgd,
        SharePolicy::Gantry,
    ];
    pub fn name(self) -> &'static str {
        match self {
            SharePolicy::Random => "Random",
            SharePolicy::DotProd => "DotProd",
            SharePolicy::GpuClustering => "GpuClustering",
            SharePolicy::GpuPacking => "GpuPacking",
            SharePolicy::BestFit => "BestFit",
            SharePolicy::FirstFit => "FirstFit",
            SharePolicy::Fgd => "FGD",
            SharePolicy::Gantry => "Gantry",
        }
    }
    /// Whether equal best scores are broken at random; otherwise the lowest node index wins.
    /// Only Random draws: with random ties the paper's FGD and packing baselines spread
    /// CPU-only pods (which they all score alike) and run out of CPU far earlier than its
    /// published figures, so its simulator keeps the first node of the list on ties.
    pub fn random_ties(self) -> bool {
        matches!(self, SharePolicy::Random)
    }
    /// Whether the policy needs the task mix.
    pub fn uses_mix(self) -> bool {
        matches!(self, SharePolicy::Fgd | SharePolicy::Gantry)
    }
}

impl std::str::FromStr for SharePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<SharePolicy, String> {
        SharePolicy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = SharePolicy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown policy {s:?} (one of {})", names.join(", "))
            })
    }
}

/// Lexicographic score: higher `primary` wins, then higher `secondary`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    pub primary: f64,
    pub secondary: f64,
}

impl Score {
    fn int(v: i64) -> Score {
        Score {
            primary: v as f64,
            secondary: 0.0,
        }
    }
    pub fn beats(&self, o: &Score) -> bool {
        self.primary > o.primary || (self.primary == o.primary && self.secondary > o.secondary)
    }
}

/// Which devices a pod takes on the node that was scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// CPU-only pod.
    NoGpu,
    /// The lowest-index idle devices.
    Exclusive,
    /// The lowest-index device whose free milli is one of these values.
    Share { values: [u16; MAX_GPUS], len: u8 },
    /// A device drawn at random among those that fit (the Random baseline).
    RandomShare,
}

impl Choice {
    fn share_of(values: &[u16]) -> Choice {
        let mut v = [0u16; MAX_GPUS];
        v[..values.len()].copy_from_slice(values);
        Choice::Share {
            values: v,
            len: values.len() as u8,
        }
    }
    /// The device mask on this node; `pick` draws the random device (index among fitting).
    pub fn resolve(&self, n: &NodeFree, p: &PodShape, pick: impl FnOnce(usize) -> usize) -> u16 {
        match *self {
            Choice::NoGpu => 0,
            Choice::Exclusive => n.exclusive_mask(p.num_gpu).unwrap_or(0),
            Choice::Share { values, len } => {
                let values = &values[..usize::from(len)];
                n.gpus()
                    .iter()
                    .position(|g| values.contains(g))
                    .map_or(0, |i| 1 << i)
            }
            Choice::RandomShare => {
                let fit: Vec<usize> = (0..usize::from(n.n))
                    .filter(|&i| n.gpu[i] >= p.milli)
                    .collect();
                if fit.is_empty() {
                    0
                } else {
                    1 << fit[pick(fit.len()).min(fit.len() - 1)]
                }
            }
        }
    }
}

/// GpuClustering's kind of a GPU request: shared, or the number of whole devices (1..=8+).
pub fn kind_tag(p: &PodShape) -> Option<usize> {
    if !p.wants_gpu() {
        None
    } else if p.is_share() {
        Some(0)
    } else {
        Some(usize::from(p.num_gpu.min(15)))
    }
}

/// Device choice of every baseline but Random: the fitting device with the least free.
fn best_fit_device(n: &NodeFree, p: &PodShape) -> Choice {
    if !p.wants_gpu() {
        return Choice::NoGpu;
    }
    if !p.is_share() {
        return Choice::Exclusive;
    }
    let best = n.gpus().iter().copied().filter(|&g| g >= p.milli).min();
    best.map_or(Choice::Exclusive, |b| Choice::share_of(&[b]))
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The paper's integer score of a fragmentation drop (milli-GPU): `sigmoid(drop / 1000) * 100`.
fn quantized(drop: f64) -> f64 {
    (sigmoid(drop / 1000.0) * MAX_SCORE as f64) as i64 as f64
}

/// Score of one node for one pod, or `None` when the pod does not fit there. `kinds` is
/// this node's row of GpuClustering's kind counts.
pub fn score_node(
    policy: SharePolicy,
    n: &NodeFree,
    p: &PodShape,
    mix: &TaskMix,
    kinds: &[u8],
) -> Option<(Score, Choice)> {
    if !n.fits(p) {
        return None;
    }
    let gpu_left = n.gpu_free();
    Some(match policy {
        SharePolicy::Random => (
            Score::int(0),
            if p.is_share() {
                Choice::RandomShare
            } else {
                best_fit_device(n, p)
            },
        ),
        SharePolicy::FirstFit => (Score::int(0), best_fit_device(n, p)),
        SharePolicy::DotProd => {
            let dot = (n.cpu as f64 / MAX_SPEC_CPU) * (p.cpu as f64 / MAX_SPEC_CPU)
                + (gpu_left as f64 / MAX_SPEC_GPU) * (p.gpu_total() as f64 / MAX_SPEC_GPU);
            let s = (MAX_SCORE as f64 * (1.0 - dot / 2.0)) as i64;
            (Score::int(s), best_fit_device(n, p))
        }
        SharePolicy::BestFit => {
            let left = 0.5 * (n.cpu - p.cpu) as f64 / MAX_SPEC_CPU
                + 0.5 * (gpu_left - p.gpu_total()) as f64 / MAX_SPEC_GPU;
            let s = ((1.0 - left) * MAX_SCORE as f64) as i64;
            (Score::int(s), best_fit_device(n, p))
        }
        SharePolicy::GpuPacking => (Score::int(packing_score(n, p)), best_fit_device(n, p)),
        SharePolicy::GpuClustering => (
            Score::int(clustering_score(n, p, kinds)),
            best_fit_device(n, p),
        ),
        SharePolicy::Fgd => fgd_score(n, p, mix),
        SharePolicy::Gantry => {
            let c = best_fit_device(n, p);
            let mask = c.resolve(n, p, |_| 0);
            // What the node's waste drops by, less the GPU taken from pods that can only run
            // on its model's pool.
            let drop = mix.node_waste(n)
                - mix.node_waste(&n.after(p, mask))
                - p.gpu_total() as f64 * mix.displaced(p, n.model);
            // Among equal scores a CPU-only pod takes CPU where the least GPU is left: CPU
            // taken beside free GPUs is what strands them. GPU pods keep the node order.
            let secondary = if p.wants_gpu() {
                0.0
            } else {
                -(gpu_left as f64)
            };
            (
                Score {
                    primary: quantized(drop),
                    secondary,
                },
                c,
            )
        }
    })
}

/// The paper's integer score of the fragmentation drop (before − after) for the best
/// device choice.
fn fgd_score(n: &NodeFree, p: &PodShape, mix: &TaskMix) -> (Score, Choice) {
    let before = mix.node_frag(n);
    let value = quantized;
    if !p.is_share() {
        let mask = if p.wants_gpu() {
            n.exclusive_mask(p.num_gpu).unwrap_or(0)
        } else {
            0
        };
        let after = mix.node_frag(&n.after(p, mask));
        let c = if p.wants_gpu() {
            Choice::Exclusive
        } else {
            Choice::NoGpu
        };
        return (Score::int(0).with(value(before - after)), c);
    }
    // Shared pod: every distinct free value is one candidate; the lowest index among the
    // best ones is taken (the paper keeps the first device with the highest score).
    let mut best: Option<f64> = None;
    let mut winners: Vec<u16> = Vec::new();
    let mut seen: Vec<u16> = Vec::new();
    for (i, &g) in n.gpus().iter().enumerate() {
        if g < p.milli || seen.contains(&g) {
            continue;
        }
        seen.push(g);
        let after = mix.node_frag(&n.after(p, 1 << i));
        let v = value(before - after);
        match best {
            Some(b) if v < b => {}
            Some(b) if v == b => winners.push(g),
            _ => {
                best = Some(v);
                winners.clear();
                winners.push(g);
            }
        }
    }
    (
        Score::int(0).with(best.unwrap_or(f64::NEG_INFINITY)),
        Choice::share_of(&winners),
    )
}

impl Score {
    fn with(self, primary: f64) -> Score {
        Score { primary, ..self }
    }
}

/// GpuPacking's tiers: shared devices (50-100), idle devices of a used node (33-50), an
/// idle node (0-33).
fn packing_score(n: &NodeFree, p: &PodShape) -> i64 {
    if !p.wants_gpu() {
        return 0;
    }
    let idle = n.idle() as i64;
    if idle == i64::from(n.n) {
        return (MAX_SCORE / 3 - idle).max(idle);
    }
    let mut order: Vec<usize> = (0..usize::from(n.n)).collect();
    order.sort_by_key(|&i| n.gpu[i]);
    let (mut want, mut idle_used, mut free_ratio) = (p.num_gpu, 0i64, 0i64);
    for i in order {
        if want == 0 {
            break;
        }
        let g = n.gpu[i];
        if p.milli <= g {
            want -= 1;
            if g == MILLI {
                idle_used += 1;
            }
            free_ratio += i64::from(g) * 100 / i64::from(MILLI);
        }
    }
    if idle_used > 0 {
        (MAX_SCORE / 2 - idle_used).max(MAX_SCORE / 3)
    } else {
        (MAX_SCORE - free_ratio / 10).max(MAX_SCORE / 2)
    }
}

/// GpuClustering's tiers: only this kind on the node (75-100), this kind among others
/// (50-75), a node without GPU pods (25-50), other kinds only (0-25); fuller is better
/// inside a tier.
fn clustering_score(n: &NodeFree, p: &PodShape, kinds: &[u8]) -> i64 {
    let Some(tag) = kind_tag(p) else {
        return 0;
    };
    let fill = MAX_SCORE / 4 * (MAX_SPEC_GPU as i64 - n.gpu_free()) / MAX_SPEC_GPU as i64;
    let present = kinds.iter().filter(|&&c| c > 0).count();
    let mine = kinds.get(tag).copied().unwrap_or(0) > 0;
    let tier = match (mine, present) {
        (true, 1) => 3,
        (true, _) => 2,
        (false, 0) => 1,
        (false, _) => 0,
    };
    fill + tier * MAX_SCORE / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpushare::fgd::TaskType;
    use crate::gpushare::model::ModelSet;

    fn pod(num_gpu: u8, milli: u16) -> PodShape {
        PodShape {
            cpu: 1000,
            mem: 0,
            num_gpu,
            milli,
            models: ModelSet::Any,
            spec: 0,
        }
    }

    fn node(gpus: &[u16]) -> NodeFree {
        let mut n = NodeFree::new(64_000, 1 << 20, 0, gpus.len() as u8);
        n.gpu[..gpus.len()].copy_from_slice(gpus);
        n
    }

    #[test]
    fn packing_tiers() {
        let half = pod(1, 500);
        // Shared device with 600 free: 100 - 60/10 = 94.
        assert_eq!(packing_score(&node(&[600, 1000]), &half), 94);
        // Must use an idle device of a used node: 50 - 1.
        assert_eq!(packing_score(&node(&[200, 1000]), &half), 49);
        // Idle 8-GPU node: 33 - 8.
        assert_eq!(packing_score(&node(&[1000; 8]), &half), 25);
    }

    #[test]
    fn clustering_prefers_same_kind() {
        let half = pod(1, 500);
        let n = node(&[500, 1000]);
        let mut kinds = [0u8; 16];
        kinds[0] = 1;
        let same = clustering_score(&n, &half, &kinds);
        kinds[1] = 1;
        let mixed = clustering_score(&n, &half, &kinds);
        assert!(same > mixed && mixed > clustering_score(&n, &half, &[0u8; 16]));
    }

    #[test]
    fn fgd_takes_the_device_that_keeps_the_mix_usable() {
        // Mix: half-GPU pods only. Devices with 500 and 700 free: putting a 500 pod on the
        // 700 device leaves 200 nobody can use; on the 500 device it leaves nothing.
        let mix = TaskMix {
            types: vec![TaskType {
                shape: pod(1, 500),
                weight: 1.0,
            }],
            ..TaskMix::default()
        };
        let n = node(&[700, 500]);
        for policy in [SharePolicy::Fgd, SharePolicy::Gantry] {
            let (_, c) = score_node(policy, &n, &pod(1, 500), &mix, &[]).unwrap();
            assert_eq!(c.resolve(&n, &pod(1, 500), |_| 0), 0b10, "{policy:?}");
        }
        // Quantized: a drop of 0 scores sigmoid(0) * 100 = 50.
        let (s, _) = score_node(SharePolicy::Fgd, &n, &pod(1, 500), &mix, &[]).unwrap();
        assert_eq!(s.primary, 50.0);
        assert!(score_node(SharePolicy::Fgd, &n, &pod(2, 1000), &mix, &[]).is_none());
    }

    #[test]
    fn gantry_sends_cpu_pods_where_the_least_gpu_is_free() {
        // Whole-GPU pods only: a small CPU pod changes no node's fragment, so the score ties.
        let mix = TaskMix {
            types: vec![TaskType {
                shape: pod(1, MILLI),
                weight: 1.0,
            }],
            ..TaskMix::default()
        };
        let cpu = pod(0, 0);
        let (free, _) =
            score_node(SharePolicy::Gantry, &node(&[1000, 1000]), &cpu, &mix, &[]).unwrap();
        let (used, _) = score_node(SharePolicy::Gantry, &node(&[0, 300]), &cpu, &mix, &[]).unwrap();
        assert_eq!(free.primary, used.primary);
        assert!(used.beats(&free));
        // GPU pods tie: node order decides.
        let p = pod(1, MILLI);
        let (a, _) = score_node(SharePolicy::Gantry, &node(&[1000, 1000]), &p, &mix, &[]).unwrap();
        let (b, _) = score_node(SharePolicy::Gantry, &node(&[0, 1000]), &p, &mix, &[]).unwrap();
        assert!(!a.beats(&b) && !b.beats(&a));
        // A share goes to the fitting device with the least free (KAI's gpupack).
        let n = node(&[1000, 600, 300]);
        let (_, c) = score_node(SharePolicy::Gantry, &n, &pod(1, 250), &mix, &[]).unwrap();
        assert_eq!(c.resolve(&n, &pod(1, 250), |_| 0), 0b100);
    }

    #[test]
    fn policy_names_parse() {
        for p in SharePolicy::ALL {
            assert_eq!(p.name().parse::<SharePolicy>(), Ok(p));
        }
        assert!("nope".parse::<SharePolicy>().is_err());
    }
}
