//! The fragmentation policy's choice without scoring every node: nodes with the same
//! [`ClassKey`] (free CPU, memory and device milli, model, device memory, a free pod slot)
//! score alike and fit alike, so a pod is scored once per live class, and a class's answer
//! for a request shape is remembered for good (a key is the whole state the score reads).
//! Among the best classes the node first in the seeded order wins, as in the node scan.

use crate::frag::{ClassKey, Mix};
use crate::gpushare::policy::{Choice, Score};
use crate::snapshot::{NodeId, Snapshot};
use crate::state::State;
use std::collections::{BTreeSet, HashMap};

const NOT_LIVE: usize = usize::MAX;

#[derive(Default)]
pub struct FragIndex {
    class_of: Vec<Option<u32>>,
    ids: HashMap<ClassKey, u32>,
    /// Per class: its nodes as (seeded rank, node), ascending.
    members: Vec<BTreeSet<(u32, NodeId)>>,
    live: Vec<u32>,
    live_pos: Vec<usize>,
    /// (class, request shape) -> the class's score and device choice; `None`: no fit.
    memo: HashMap<(u32, u32), Option<(Score, Choice)>>,
    /// Nodes the policy cannot model (more devices than a mask holds): scanned one by one.
    loose: BTreeSet<(u32, NodeId)>,
    cursor: usize,
    built: bool,
}

impl FragIndex {
    fn sync(&mut self, s: &Snapshot<'_>, st: &State, mix: &Mix, rank: &[u32]) {
        if !self.built || self.cursor > st.changes.len() {
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

    /// The best node among those `eligible` accepts and its device choice: highest score,
    /// then first in the seeded order. `score` answers for one node (`None`: no fit).
    #[allow(clippy::too_many_arguments)]
    pub fn choose(
        &mut self,
        s: &Snapshot<'_>,
        st: &State,
        mix: &Mix,
        rank: &[u32],
        shape: u32,
        eligible: impl Fn(NodeId) -> bool,
        mut score: impl FnMut(NodeId) -> Option<(Score, Choice)>,
    ) -> Option<(NodeId, Choice)> {
        self.sync(s, st, mix, rank);
        let mut best: Option<(Score, (u32, NodeId), Choice)> = None;
        let better = |best: &Option<(Score, (u32, NodeId), Choice)>, sc: &Score, e| match best {
            None => true,
            Some((b, be, _)) => sc.beats(b) || (!b.beats(sc) && e < *be),
        };
        for li in 0..self.live.len() {
            let c = self.live[li];
            let members = &self.members[c as usize];
            let Some(&rep) = members.first() else {
                continue;
            };
            let r = *self.memo.entry((c, shape)).or_insert_with(|| score(rep.1));
            let Some((sc, ch)) = r else { continue };
            // Only a class that could win needs its first eligible node.
            if best.as_ref().is_some_and(|(b, _, _)| b.beats(&sc)) {
                continue;
            }
            if let Some(&e) = members.iter().find(|e| eligible(e.1))
                && better(&best, &sc, e)
            {
                best = Some((sc, e, ch));
            }
        }
        for &e in &self.loose {
            if eligible(e.1)
                && let Some((sc, ch)) = score(e.1)
                && better(&best, &sc, e)
            {
                best = Some((sc, e, ch));
            }
        }
        best.map(|(_, e, ch)| (e.1, ch))
    }
}
