//! Scheduler configuration (KAI `SchedulingShard` placement strategy and proportion args).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    #[default]
    Binpack,
    Spread,
}

/// How nodes (and devices for fractions) are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// The default. `fragmentation-aware` when some pod of the snapshot asks for a GPU
    /// share (`gpu-fraction` / `gpu-memory`) and the GPU strategy is binpack, else `kai`
    /// (whole-GPU clusters keep KAI's bin-pack; spread keeps KAI's spread).
    #[default]
    Auto,
    /// KAI scoring: `gpusharingorder`, `resourcetype`, `nodeplacement` with the strategies
    /// above, `gpupack` / `gpuspread` inside the node.
    Kai,
    /// Gantry's GPU-sharing policy (`gpushare::SharePolicy::Gantry`): FGD's score of the
    /// node's fragmentation change against every task type of the snapshot (CPU-only pods
    /// included), a share on the fitting device with the least free (KAI's `gpupack`); among
    /// equal scores a CPU-only pod goes where the least GPU is free, other ties by the seeded
    /// node order. MIG requests and shares over several devices keep KAI's scoring.
    FragmentationAware,
    /// Benchmark baselines.
    RandomFit,
    BestFit,
    FirstFit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allocate,
    Consolidation,
    Reclaim,
    Preempt,
    StaleGangEviction,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    pub gpu_strategy: Strategy,
    pub cpu_strategy: Strategy,
    pub policy: Policy,
    pub actions: Vec<Action>,
    /// Seeds tie-breaking among equal nodes (and the random-fit baseline).
    pub seed: u64,
    /// Most jobs each victim-seeking action considers per cycle (KAI `queueDepthPerAction`).
    pub queue_depth_per_action: usize,
    /// Most pods consolidation may move for one job (KAI `--max-consolidation-preemptees`).
    pub max_consolidation_preemptees: usize,
    /// Most victim jobs one reclaim / preempt scenario may take.
    pub max_victim_jobs: usize,
    /// Proportion argument `relcaimerSaturationMultiplier` (values < 1 reset to 1).
    pub reclaimer_saturation_multiplier: f64,
    /// Time-based fair share weight of historical usage (KAI `kValue`).
    pub k_value: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            gpu_strategy: Strategy::Binpack,
            cpu_strategy: Strategy::Binpack,
            policy: Policy::Auto,
            actions: vec![
                Action::Allocate,
                Action::Consolidation,
                Action::Reclaim,
                Action::Preempt,
                Action::StaleGangEviction,
            ],
            seed: 0,
            queue_depth_per_action: 100,
            max_consolidation_preemptees: 16,
            max_victim_jobs: 32,
            reclaimer_saturation_multiplier: 1.0,
            k_value: 1.0,
        }
    }
}

impl Config {
    /// Consolidation is off whenever either strategy spreads (as KAI's operator renders it).
    pub fn consolidation_enabled(&self) -> bool {
        self.gpu_strategy == Strategy::Binpack
            && self.cpu_strategy == Strategy::Binpack
            && self.max_consolidation_preemptees > 0
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown placement policy {0:?} (auto, kai, fragmentation-aware, random-fit, best-fit, first-fit)"
)]
pub struct PolicyError(pub String);

impl std::str::FromStr for Policy {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Policy, PolicyError> {
        Ok(match s.trim() {
            "auto" => Policy::Auto,
            "kai" => Policy::Kai,
            "fragmentation-aware" | "frag" => Policy::FragmentationAware,
            "random-fit" => Policy::RandomFit,
            "best-fit" => Policy::BestFit,
            "first-fit" | "binpack" => Policy::FirstFit,
            other => return Err(PolicyError(other.to_string())),
        })
    }
}
