//! A transaction over the session state (KAI's Statement): place and evict are recorded
//! so a what-if can be rolled back to any checkpoint; nothing reaches the decisions until
//! the session commits it.

use super::state::{Placement, State};
use crate::decisions::EvictReason;
use crate::snapshot::{PodId, Snapshot};

#[derive(Clone, Debug)]
pub enum Op {
    Place(PodId),
    Evict {
        pod: PodId,
        from: Placement,
        reason: EvictReason,
    },
}

#[derive(Debug, Default)]
pub struct Statement {
    ops: Vec<Op>,
}

pub type Checkpoint = usize;

impl Statement {
    pub fn new() -> Statement {
        Statement::default()
    }
    pub fn checkpoint(&self) -> Checkpoint {
        self.ops.len()
    }
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
    pub fn has_evictions(&self) -> bool {
        self.ops.iter().any(|o| matches!(o, Op::Evict { .. }))
    }

    pub fn place(&mut self, s: &Snapshot<'_>, st: &mut State, pod: PodId, pl: Placement) {
        debug_assert!(st.placement[pod as usize].is_none());
        st.apply(s, pod, pl);
        self.ops.push(Op::Place(pod));
    }

    pub fn evict(&mut self, s: &Snapshot<'_>, st: &mut State, pod: PodId, reason: EvictReason) {
        if let Some(from) = st.unapply(s, pod) {
            self.ops.push(Op::Evict { pod, from, reason });
        }
    }

    /// Change why a pod evicted in this statement goes (a victim placed again is moved).
    pub fn set_reason(&mut self, pod: PodId, why: EvictReason) {
        for op in self.ops.iter_mut().rev() {
            if let Op::Evict { pod: p, reason, .. } = op
                && *p == pod
            {
                *reason = why;
                return;
            }
        }
    }

    /// Undo every operation after `cp`, newest first.
    pub fn rollback(&mut self, s: &Snapshot<'_>, st: &mut State, cp: Checkpoint) {
        while self.ops.len() > cp {
            match self.ops.pop() {
                Some(Op::Place(pod)) => {
                    st.unapply(s, pod);
                }
                Some(Op::Evict { pod, from, .. }) => st.apply(s, pod, from),
                None => break,
            }
        }
    }

    /// Undo everything: the state is as before the statement began.
    pub fn discard(mut self, s: &Snapshot<'_>, st: &mut State) {
        self.rollback(s, st, 0);
    }

    /// Keep the changes; the operations go to the caller for the decision record.
    pub fn commit(self) -> Vec<Op> {
        self.ops
    }
}
