//! Scheduler configuration (KAI `SchedulingShard` placement strategy and proportion args).

pub use crate::duration::GoDuration;
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
    /// KAI `SchedulingShard.spec.minRuntime`: the defaults below every queue's own
    /// `preemptMinRuntime` / `reclaimMinRuntime` (the `minruntime` plugin's arguments).
    pub min_runtime: crate::min_runtime::MinRuntimeConfig,
    /// KAI `SchedulingShard.spec.usageDBConfig`: where historical queue usage comes from
    /// (absent: none, usage is 0, as in KAI).
    #[serde(rename = "usageDBConfig", skip_serializing_if = "Option::is_none")]
    pub usage_db_config: Option<crate::usage::UsageDbConfig>,
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
            min_runtime: Default::default(),
            usage_db_config: None,
        }
    }
}

/// The scheduling-shard keys [`Config::from_shard_spec`] reads.
pub const SHARD_KEYS: &[&str] = &[
    "placementStrategy",
    "kValue",
    "minRuntime",
    "usageDBConfig",
    "gpuStrategy",
    "cpuStrategy",
    "policy",
    "actions",
    "seed",
    "queueDepthPerAction",
    "maxConsolidationPreemptees",
    "maxVictimJobs",
    "reclaimerSaturationMultiplier",
];

impl Config {
    /// Settings from a KAI `SchedulingShard.spec`-style mapping (`kValue`, `minRuntime`,
    /// `usageDBConfig`, `placementStrategy: {gpu, cpu}`) plus this `Config`'s own keys; the
    /// rest keep their defaults. An unknown key or a bad value is an error naming it.
    pub fn from_shard_spec(v: serde_json::Value) -> Result<Config, String> {
        let serde_json::Value::Object(mut m) = v else {
            return Err("scheduler config: must be a mapping".into());
        };
        if let Some(k) = m.keys().find(|k| !SHARD_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "scheduler config: unknown key {k:?} (known: {})",
                SHARD_KEYS.join(", ")
            ));
        }
        if let Some(p) = m.remove("placementStrategy") {
            for (kai, ours) in [("gpu", "gpuStrategy"), ("cpu", "cpuStrategy")] {
                if let Some(s) = p.get(kai) {
                    m.insert(ours.into(), s.clone());
                }
            }
        }
        let c: Config = serde_json::from_value(serde_json::Value::Object(m))
            .map_err(|e| format!("scheduler config: {e}"))?;
        if let Some(u) = &c.usage_db_config {
            u.validate()?;
        }
        Ok(c)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kai_shard_keys_parse() {
        let c: Config = serde_json::from_value(serde_json::json!({
            "kValue": 0.5,
            "minRuntime": {"preemptMinRuntime": "5m", "reclaimMinRuntime": "10m"},
            "usageDBConfig": {
                "clientType": "prometheus",
                "connectionString": "http://prom:9090",
                "usageParams": {"windowSize": "168h", "halfLifePeriod": "10m", "windowType": "sliding"}
            }
        }))
        .unwrap();
        assert_eq!(c.k_value, 0.5);
        assert_eq!(
            c.min_runtime.preempt_min_runtime,
            Some(GoDuration::from_secs(300))
        );
        assert_eq!(
            c.min_runtime.reclaim_min_runtime,
            Some(GoDuration::from_secs(600))
        );
        let u = c.usage_db_config.unwrap();
        assert_eq!(
            u.usage_params.half_life_period,
            Some(GoDuration::from_secs(600))
        );
        assert_eq!(
            u.usage_params.window_size(),
            GoDuration::from_secs(168 * 3600)
        );
        let bad = serde_json::from_value::<Config>(serde_json::json!({
            "minRuntime": {"preemptMinRuntime": "5 minutes"}
        }));
        let msg = bad.unwrap_err().to_string();
        assert!(msg.contains("5 minutes"), "{msg}");
    }

    #[test]
    fn shard_spec_maps_kai_keys_and_refuses_unknown_ones() {
        let c = Config::from_shard_spec(serde_json::json!({
            "placementStrategy": {"gpu": "spread", "cpu": "binpack"},
            "kValue": 2.0,
        }))
        .unwrap();
        assert_eq!(c.gpu_strategy, Strategy::Spread);
        assert_eq!(c.k_value, 2.0);
        let e = Config::from_shard_spec(serde_json::json!({"kvalue": 2})).unwrap_err();
        assert!(e.contains("unknown key \"kvalue\""), "{e}");
        let e = Config::from_shard_spec(serde_json::json!({
            "usageDBConfig": {"clientType": "prometheus"}
        }))
        .unwrap_err();
        assert!(e.contains("connectionString"), "{e}");
        let e = Config::from_shard_spec(serde_json::json!({
            "usageDBConfig": {"clientType": "mysql"}
        }))
        .unwrap_err();
        assert!(e.contains("mysql"), "{e}");
    }

    #[test]
    fn go_duration_prints_like_go() {
        assert_eq!(GoDuration::from_secs(5400).to_string(), "1h30m0s");
        assert_eq!(GoDuration::from_secs(90).to_string(), "1m30s");
        assert_eq!(GoDuration::from_secs(0).to_string(), "0s");
        assert_eq!(GoDuration(1500).to_string(), "1500ns");
    }
}
