//! Expectations, as client-go's `ControllerExpectations`: objects a controller created and
//! has not yet seen through its watch. Until the watch shows them (or [`EXPECTATION_TTL`]
//! passes), the controller counts them as there, so a watch that lags its own writes cannot
//! make it create the same pod twice.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a created object is expected before the controller stops waiting for the watch
/// to show it: five minutes, upstream's `ExpectationsTimeout`. (At 1,000 nodes on a loaded
/// machine the pod watch fell more than 30 s behind the creates, and a shorter wait created
/// a second pod for ~100 nodes.)
pub const EXPECTATION_TTL: Duration = Duration::from_secs(300);

/// Created objects per owner: (owner uid, object key) → when, and the node it is for.
#[derive(Debug, Default)]
pub struct Expectations {
    created: HashMap<(String, String), (Instant, Option<String>)>,
}

impl Expectations {
    /// Expect `key` (created at `now` for `owner`, placed on `node` if it names one).
    pub fn expect(&mut self, owner: &str, key: String, node: Option<String>, now: Instant) {
        self.created.insert((owner.to_string(), key), (now, node));
    }

    /// Drop the expectations that are met (`seen(owner, key)`: the watch showed the object)
    /// or older than [`EXPECTATION_TTL`] at `now`.
    pub fn settle(&mut self, now: Instant, mut seen: impl FnMut(&str, &str) -> bool) {
        self.created.retain(|(owner, key), (at, _)| {
            now.duration_since(*at) < EXPECTATION_TTL && !seen(owner, key)
        });
    }

    /// The nodes of `owner`'s expected objects (`None` for one bound to no node).
    pub fn pending(&self, owner: &str) -> Vec<Option<String>> {
        self.created
            .iter()
            .filter(|((o, _), _)| o == owner)
            .map(|(_, (_, node))| node.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.created.len()
    }

    pub fn is_empty(&self) -> bool {
        self.created.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_last_until_seen_or_expired() {
        let t0 = Instant::now();
        let mut e = Expectations::default();
        e.expect("ds", "ns/a".into(), Some("n1".into()), t0);
        e.expect("ds", "ns/b".into(), Some("n2".into()), t0);
        e.expect("job", "ns/c".into(), None, t0);
        let mut nodes = e.pending("ds");
        nodes.sort();
        assert_eq!(nodes, [Some("n1".to_string()), Some("n2".to_string())]);
        assert_eq!(e.pending("job"), [None]);

        // A lagging watch: nothing seen, nothing dropped (even after 30 s).
        e.settle(t0 + Duration::from_secs(30), |_, _| false);
        assert_eq!(e.len(), 3);
        // The watch shows one of the DaemonSet's pods.
        e.settle(t0 + Duration::from_secs(31), |o, k| {
            o == "ds" && k == "ns/a"
        });
        assert_eq!(e.pending("ds"), [Some("n2".to_string())]);
        // Past the TTL every expectation goes.
        e.settle(t0 + EXPECTATION_TTL, |_, _| false);
        assert!(e.is_empty());
    }
}
