//! The MIG strategy (`none`, `single`, `mixed`): how the device plugin and GPU feature
//! discovery advertise MIG-enabled GPUs. One type for the ClusterPolicy field, the config
//! file's `flags.migStrategy`, the agents' `--mig-strategy` / `MIG_STRATEGY`.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// MIG strategy: how MIG devices are advertised.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MigStrategy {
    /// MIG-enabled GPUs are still advertised as whole `nvidia.com/gpu`.
    #[default]
    None,
    /// All MIG devices (one profile) advertised as `nvidia.com/gpu`.
    Single,
    /// One resource per profile: `nvidia.com/mig-<profile>`.
    Mixed,
}

/// A MIG strategy name that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown MIG strategy {0:?} (none, single, mixed)")]
pub struct UnknownMigStrategy(pub String);

impl MigStrategy {
    pub const ALL: [MigStrategy; 3] = [MigStrategy::None, MigStrategy::Single, MigStrategy::Mixed];

    pub fn as_str(self) -> &'static str {
        match self {
            MigStrategy::None => "none",
            MigStrategy::Single => "single",
            MigStrategy::Mixed => "mixed",
        }
    }
}

impl std::str::FromStr for MigStrategy {
    type Err = UnknownMigStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MigStrategy::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMigStrategy(s.to_string()))
    }
}

impl fmt::Display for MigStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in MigStrategy::ALL {
            assert_eq!(m.as_str().parse::<MigStrategy>(), Ok(m));
            assert_eq!(serde_json::to_string(&m).expect("json"), format!("\"{m}\""));
        }
        let e = "Mixed".parse::<MigStrategy>().expect_err("case matters");
        assert_eq!(
            e.to_string(),
            "unknown MIG strategy \"Mixed\" (none, single, mixed)"
        );
    }
}
