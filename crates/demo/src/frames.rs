//! What a phase's frame must show before the phase counts as done: counts read off a
//! [`Snapshot`], so the picture printed under a sentence is the state the sentence claims.

use gantry_sim::ui::Snapshot;

/// A demo frame: the caption it was printed under and the cluster it showed.
#[derive(Clone, Debug)]
pub struct Frame {
    pub caption: String,
    pub snapshot: Snapshot,
}

/// Holders of `queue` of one kind: `whole`, `fraction`, `replica`, or `mig` (any
/// profile) / `mig:<profile>`.
pub fn held(s: &Snapshot, queue: &str, kind: &str) -> usize {
    s.nodes
        .iter()
        .flat_map(|n| n.gpus.iter())
        .flat_map(|g| g.holders.iter())
        .filter(|h| h.queue.as_deref() == Some(queue))
        .filter(|h| match kind {
            "mig" => h.kind.starts_with("mig:"),
            k => h.kind == k,
        })
        .count()
}

/// `Ok` when every node of `names` is in the picture and Ready; else which is not.
pub fn nodes_ready<'a>(
    s: &Snapshot,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    for name in names {
        match s.nodes.iter().find(|n| n.name == name) {
            None => return Err(format!("node {name} not registered")),
            Some(n) if !n.ready => return Err(format!("node {name} not Ready")),
            Some(_) => {}
        }
    }
    Ok(())
}

/// `Ok` when `queue`'s holders of `kind` number `want`.
pub fn expect_held(s: &Snapshot, queue: &str, kind: &str, want: usize) -> Result<(), String> {
    match held(s, queue, kind) {
        n if n == want => Ok(()),
        n => Err(format!("{queue} holds {n} {kind} GPU(s), want {want}")),
    }
}

/// The queue's allocation as the scheduler publishes it (`status.allocated`).
pub fn queue_allocated(s: &Snapshot, queue: &str) -> f64 {
    s.queues
        .iter()
        .find(|q| q.name == queue)
        .map(|q| q.allocated)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_sim::ui::snapshot::{GpuView, Holder, NodeView};

    fn holder(queue: &str, kind: &str) -> Holder {
        Holder {
            pod: "ns/p".into(),
            queue: Some(queue.into()),
            share: 1.0,
            kind: kind.into(),
        }
    }

    #[test]
    fn counts_by_queue_and_kind() {
        let s = Snapshot {
            nodes: vec![NodeView {
                name: "n0".into(),
                ready: true,
                gpus: vec![
                    GpuView {
                        holders: vec![holder("a", "whole")],
                        ..Default::default()
                    },
                    GpuView {
                        holders: vec![holder("b", "mig:1g.10gb"), holder("b", "mig:2g.20gb")],
                        ..Default::default()
                    },
                    GpuView {
                        holders: vec![holder("a", "fraction"), holder("b", "fraction")],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(held(&s, "a", "whole"), 1);
        assert_eq!(held(&s, "b", "mig"), 2);
        assert_eq!(held(&s, "b", "mig:1g.10gb"), 1);
        assert_eq!(held(&s, "a", "fraction"), 1);
        assert!(expect_held(&s, "b", "whole", 0).is_ok());
        assert!(
            expect_held(&s, "a", "whole", 2)
                .unwrap_err()
                .contains("holds 1")
        );
        assert!(nodes_ready(&s, ["n0"]).is_ok());
        assert!(
            nodes_ready(&s, ["n1"])
                .unwrap_err()
                .contains("not registered")
        );
    }
}
