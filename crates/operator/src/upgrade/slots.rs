//! How many nodes may leave `upgrade-required` this round (reference §4.4).

use gantry_api::common::{EffectiveUpgradePolicy, scaled_int_or_percent};

use super::state::UpgradeState;

/// The counts the slot rule reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotInput {
    /// Managed nodes (those with a driver pod).
    pub total: u32,
    /// Nodes in cordon-required .. uncordon-required.
    pub in_flight: u32,
    pub upgrade_required: u32,
    /// Cordoned or NotReady managed nodes, plus those in cordon-required.
    pub unavailable: u32,
}

impl SlotInput {
    pub fn count(
        nodes: impl IntoIterator<Item = (UpgradeState, bool /* unavailable */)>,
    ) -> SlotInput {
        let mut s = SlotInput::default();
        for (state, unavailable) in nodes {
            s.total += 1;
            if state.in_flight() {
                s.in_flight += 1;
            }
            if state == UpgradeState::UpgradeRequired {
                s.upgrade_required += 1;
            }
            if unavailable || state == UpgradeState::CordonRequired {
                s.unavailable += 1;
            }
        }
        s
    }
}

/// `maxUnavailable` against the managed total (percent rounds up). `None` when malformed.
pub fn max_unavailable(policy: &EffectiveUpgradePolicy, total: u32) -> Option<u32> {
    scaled_int_or_percent(&policy.max_unavailable, total)
}

/// Upgrade slots open now. `max_unavailable` is already resolved.
pub fn available(policy: &EffectiveUpgradePolicy, s: SlotInput, max_unavailable: u32) -> u32 {
    let parallel = u32::try_from(policy.max_parallel_upgrades).unwrap_or(0);
    let mut avail = if parallel == 0 {
        s.upgrade_required
    } else {
        parallel.saturating_sub(s.in_flight)
    };
    avail = avail.min(max_unavailable);
    if s.unavailable >= max_unavailable {
        0
    } else if max_unavailable < s.total {
        avail.min(max_unavailable - s.unavailable)
    } else {
        avail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn policy(parallel: i32, unavail: IntOrString) -> EffectiveUpgradePolicy {
        let mut p = gantry_api::common::UpgradePolicy::default().effective(true);
        p.max_parallel_upgrades = parallel;
        p.max_unavailable = unavail;
        p
    }

    fn input(total: u32, in_flight: u32, required: u32, unavailable: u32) -> SlotInput {
        SlotInput {
            total,
            in_flight,
            upgrade_required: required,
            unavailable,
        }
    }

    #[test]
    fn parallel_limit_minus_in_flight() {
        let p = policy(2, IntOrString::String("100%".into()));
        let mu = max_unavailable(&p, 10).unwrap();
        assert_eq!(mu, 10);
        assert_eq!(available(&p, input(10, 0, 10, 0), mu), 2);
        assert_eq!(available(&p, input(10, 1, 9, 1), mu), 1);
        assert_eq!(available(&p, input(10, 2, 8, 2), mu), 0);
        assert_eq!(available(&p, input(10, 3, 8, 3), mu), 0);
    }

    #[test]
    fn zero_parallel_means_every_required_node() {
        let p = policy(0, IntOrString::String("100%".into()));
        assert_eq!(available(&p, input(10, 0, 7, 0), 10), 7);
    }

    #[test]
    fn max_unavailable_percent_rounds_up_and_caps() {
        let p = policy(0, IntOrString::String("25%".into()));
        let mu = max_unavailable(&p, 10).unwrap();
        assert_eq!(mu, 3);
        assert_eq!(available(&p, input(10, 0, 10, 0), mu), 3);
        // One node already cordoned by someone: two left.
        assert_eq!(available(&p, input(10, 0, 10, 1), mu), 2);
        assert_eq!(available(&p, input(10, 0, 10, 3), mu), 0);
        assert_eq!(available(&p, input(10, 0, 10, 5), mu), 0);
    }

    #[test]
    fn max_unavailable_count() {
        let p = policy(5, IntOrString::Int(1));
        let mu = max_unavailable(&p, 4).unwrap();
        assert_eq!(available(&p, input(4, 0, 4, 0), mu), 1);
        assert_eq!(available(&p, input(4, 0, 4, 1), mu), 0);
        assert_eq!(
            max_unavailable(&policy(1, IntOrString::String("x%".into())), 4),
            None
        );
    }

    #[test]
    fn counting() {
        let s = SlotInput::count([
            (UpgradeState::UpgradeRequired, false),
            (UpgradeState::CordonRequired, false),
            (UpgradeState::DrainRequired, true),
            (UpgradeState::UpgradeDone, true),
            (UpgradeState::UpgradeFailed, true),
        ]);
        assert_eq!(s, input(5, 2, 1, 4));
    }
}
