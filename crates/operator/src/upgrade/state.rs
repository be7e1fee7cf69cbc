//! The per-node upgrade states: the values of the `nvidia.com/gpu-driver-upgrade-state` label.

use std::fmt;

/// One node's place in the driver upgrade, in flow order (reference §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpgradeState {
    /// No label (or a value this operator does not drive, e.g. the maintenance-operator states).
    Unknown,
    UpgradeRequired,
    CordonRequired,
    WaitForJobsRequired,
    PodDeletionRequired,
    DrainRequired,
    PodRestartRequired,
    ValidationRequired,
    UncordonRequired,
    UpgradeDone,
    UpgradeFailed,
}

impl UpgradeState {
    /// Every state, in flow order.
    pub const ALL: [UpgradeState; 11] = [
        UpgradeState::Unknown,
        UpgradeState::UpgradeRequired,
        UpgradeState::CordonRequired,
        UpgradeState::WaitForJobsRequired,
        UpgradeState::PodDeletionRequired,
        UpgradeState::DrainRequired,
        UpgradeState::PodRestartRequired,
        UpgradeState::ValidationRequired,
        UpgradeState::UncordonRequired,
        UpgradeState::UpgradeDone,
        UpgradeState::UpgradeFailed,
    ];

    /// The label value (`""` for [`UpgradeState::Unknown`]).
    pub fn label(self) -> &'static str {
        match self {
            UpgradeState::Unknown => "",
            UpgradeState::UpgradeRequired => "upgrade-required",
            UpgradeState::CordonRequired => "cordon-required",
            UpgradeState::WaitForJobsRequired => "wait-for-jobs-required",
            UpgradeState::PodDeletionRequired => "pod-deletion-required",
            UpgradeState::DrainRequired => "drain-required",
            UpgradeState::PodRestartRequired => "pod-restart-required",
            UpgradeState::ValidationRequired => "validation-required",
            UpgradeState::UncordonRequired => "uncordon-required",
            UpgradeState::UpgradeDone => "upgrade-done",
            UpgradeState::UpgradeFailed => "upgrade-failed",
        }
    }

    /// Parse a label value; values this operator does not know read as `Unknown`, so the node is
    /// re-evaluated from scratch.
    pub fn parse(value: &str) -> UpgradeState {
        Self::ALL
            .into_iter()
            .find(|s| s.label() == value)
            .unwrap_or(UpgradeState::Unknown)
    }

    /// Whether a node in this state holds an upgrade slot (cordon-required .. uncordon-required).
    /// `upgrade-failed` does not: a failed node is parked and the rest go on (a deviation from
    /// upstream, which counts it and so stalls every other node behind one failure).
    pub fn in_flight(self) -> bool {
        matches!(
            self,
            UpgradeState::CordonRequired
                | UpgradeState::WaitForJobsRequired
                | UpgradeState::PodDeletionRequired
                | UpgradeState::DrainRequired
                | UpgradeState::PodRestartRequired
                | UpgradeState::ValidationRequired
                | UpgradeState::UncordonRequired
        )
    }
}

impl fmt::Display for UpgradeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpgradeState::Unknown => f.write_str("unknown"),
            s => f.write_str(s.label()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_unknown_values_reset() {
        for s in UpgradeState::ALL {
            assert_eq!(UpgradeState::parse(s.label()), s);
        }
        assert_eq!(
            UpgradeState::parse("node-maintenance-required"),
            UpgradeState::Unknown
        );
        assert_eq!(UpgradeState::parse(""), UpgradeState::Unknown);
    }

    #[test]
    fn in_flight_is_cordon_through_uncordon() {
        let flying: Vec<_> = UpgradeState::ALL
            .into_iter()
            .filter(|s| s.in_flight())
            .collect();
        assert_eq!(flying.first(), Some(&UpgradeState::CordonRequired));
        assert_eq!(flying.last(), Some(&UpgradeState::UncordonRequired));
        assert_eq!(flying.len(), 7);
        assert!(!UpgradeState::UpgradeFailed.in_flight());
    }
}
