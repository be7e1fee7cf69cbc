//! The one placement choice every policy makes: among the candidate nodes, the one with the
//! best score that fits, ties going to the node first in the seeded order. A policy brings
//! only its [`Scorer`]; the free-GPU and class indexes only change which candidates are
//! offered and in what order, never the rule.

use crate::snapshot::NodeId;

/// A policy's view of the nodes for one pod.
pub(super) trait Scorer {
    type Key;
    /// The node's score, or `None` when the pod surely does not fit there. May be a cheap
    /// bound: [`Scorer::fits`] confirms a node before it becomes the best.
    fn key(&mut self, n: NodeId) -> Option<Self::Key>;
    /// Whether `a` is strictly better than `b`.
    fn beats(&self, a: &Self::Key, b: &Self::Key) -> bool;
    /// The full fit check, asked only of a node that would become the best.
    fn fits(&mut self, _n: NodeId) -> bool {
        true
    }
    /// No later node of a seeded-order scan can beat `k` (binpack's node left with
    /// nothing free).
    fn unbeatable(&self, _k: &Self::Key) -> bool {
        false
    }
}

/// How a run of candidates is ordered.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// The seeded node order: an unbeatable node ends the choice.
    Seeded,
    /// Best first (key, then rank), as the free-GPU index walks them: the run ends at its
    /// first fitting node or at the first node that cannot beat the best.
    BestFirst,
    /// No order (one node per class of alike nodes).
    Any,
}

/// The best node so far: (key, seeded rank, node).
pub(super) struct Best<K> {
    pub(super) best: Option<(K, u32, NodeId)>,
    done: bool,
}

impl<K> Best<K> {
    pub(super) fn new() -> Best<K> {
        Best {
            best: None,
            done: false,
        }
    }

    /// Offer a run of candidates.
    pub(super) fn offer<S: Scorer<Key = K>>(
        &mut self,
        sc: &mut S,
        rank: &[u32],
        nodes: impl IntoIterator<Item = NodeId>,
        order: Order,
    ) {
        if self.done {
            return;
        }
        for n in nodes {
            let Some(k) = sc.key(n) else { continue };
            let r = rank[n as usize];
            if let Some((bk, br, _)) = &self.best
                && !(sc.beats(&k, bk) || (!sc.beats(bk, &k) && r < *br))
            {
                if order == Order::BestFirst {
                    return;
                }
                continue;
            }
            if !sc.fits(n) {
                continue;
            }
            let top = order == Order::Seeded && sc.unbeatable(&k);
            self.best = Some((k, r, n));
            if top {
                self.done = true;
                return;
            }
            if order == Order::BestFirst {
                return;
            }
        }
    }

    pub(super) fn found(&self) -> bool {
        self.best.is_some()
    }

    pub(super) fn into_inner(self) -> Option<(K, NodeId)> {
        self.best.map(|(k, _, n)| (k, n))
    }
}
