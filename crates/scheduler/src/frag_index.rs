//! The fragmentation policy's choice without scoring every node: nodes with the same
//! [`ClassKey`] (free CPU, memory and device milli, model, device memory, a free pod slot)
//! score alike and fit alike, so a pod is scored once per live class (the placer remembers
//! a class's answer for a request shape for good: a key is the whole state the score
//! reads), on the class's first eligible node in the seeded order.

use crate::frag::{ClassKey, Mix};
use crate::snapshot::{FastMap, NodeId, Snapshot};
use crate::state::State;
use std::collections::BTreeSet;

const NOT_LIVE: usize = usize::MAX;

#[derive(Default)]
pub struct FragIndex {
    class_of: Vec<Option<u32>>,
    ids: FastMap<ClassKey, u32>,
    /// Per class: its nodes as (seeded rank, node), ascending.
    members: Vec<BTreeSet<(u32, NodeId)>>,
    live: Vec<u32>,
    live_pos: Vec<usize>,
    /// Nodes the policy cannot model (more devices than a mask holds): scanned one by one.
    loose: BTreeSet<(u32, NodeId)>,
    cursor: usize,
    built: bool,
}

impl FragIndex {
    /// Refile the nodes the state changed since the last call; `true` when the index was
    /// built afresh (its class ids are new).
    pub fn sync(&mut self, s: &Snapshot<'_>, st: &State, mix: &Mix, rank: &[u32]) -> bool {
        let fresh = !self.built || self.cursor > st.changes.len();
        if fresh {
            *self = FragIndex {
                class_of: vec![None; s.nodes.len()],
                built: true,
                ..Default::default()
            };
            for n in 0..s.nodes.len() as NodeId {
                self.file(s, st, mix, rank, n);
            }
            self.cursor = st.changes.len();
        }
        while self.cursor < st.changes.len() {
            let n = st.changes[self.cursor];
            self.cursor += 1;
            self.unfile(rank, n);
            self.file(s, st, mix, rank, n);
        }
        fresh
    }

    fn unfile(&mut self, rank: &[u32], n: NodeId) {
        let e = (rank[n as usize], n);
        let Some(c) = self.class_of[n as usize].take() else {
            self.loose.remove(&e);
            return;
        };
        let c = c as usize;
        self.members[c].remove(&e);
        if self.members[c].is_empty() {
            let pos = self.live_pos[c];
            self.live.swap_remove(pos);
            if let Some(&moved) = self.live.get(pos) {
                self.live_pos[moved as usize] = pos;
            }
            self.live_pos[c] = NOT_LIVE;
        }
    }

    fn file(&mut self, s: &Snapshot<'_>, st: &State, mix: &Mix, rank: &[u32], n: NodeId) {
        let e = (rank[n as usize], n);
        let Some(key) = mix.class_key(s, st, n) else {
            self.loose.insert(e);
            return;
        };
        let next = self.members.len() as u32;
        let c = *self.ids.entry(key).or_insert(next);
        if c == next {
            self.members.push(BTreeSet::new());
            self.live_pos.push(NOT_LIVE);
        }
        let ci = c as usize;
        if self.members[ci].is_empty() {
            self.live_pos[ci] = self.live.len();
            self.live.push(c);
        }
        self.members[ci].insert(e);
        self.class_of[n as usize] = Some(c);
    }

    /// The class of alike nodes `n` is filed in (`None`: a node the policy cannot model).
    pub fn class_of(&self, n: NodeId) -> Option<u32> {
        self.class_of.get(n as usize).copied().flatten()
    }

    /// The nodes a pod needs scored, once [`FragIndex::sync`] has put the index in step
    /// with the state: per live class its first node (in the seeded order) that `eligible`
    /// accepts, then every eligible node the policy cannot model. The best of them is the
    /// best of all eligible nodes.
    pub fn candidates<'i>(
        &'i self,
        eligible: &'i impl Fn(NodeId) -> bool,
    ) -> impl Iterator<Item = NodeId> + 'i {
        let first = |c: &u32| {
            self.members[*c as usize]
                .iter()
                .find(|e| eligible(e.1))
                .map(|e| e.1)
        };
        let loose = self.loose.iter().map(|e| e.1).filter(|&n| eligible(n));
        self.live.iter().filter_map(first).chain(loose)
    }
}
