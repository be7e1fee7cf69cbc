//! What the actions share (KAI's `actions/common` and `actions/utils`): the job order, placing
//! a job's tasks in a statement, and the one victim-seeking scenario loop that consolidation,
//! reclaim and preempt all run ([`scenario::run`]), with its victim order ([`victims`]) and
//! solver ([`solver`]).

pub mod job_order;
pub mod lazy_sort;
pub mod scenario;
pub mod solver;
pub mod topology;
pub mod victims;

use crate::framework::Session;
use crate::framework::statement::Statement;
use crate::snapshot::PodId;

pub use job_order::JobOrder;

/// Try to place `tasks` in one statement (KAI `AllocateJob`). On failure everything is
/// rolled back and the first task that found no node is returned.
pub fn try_place(
    sess: &mut Session<'_>,
    stmt: &mut Statement,
    tasks: &[PodId],
) -> Result<(), PodId> {
    if let Some(r) = topology::try_place(sess, stmt, tasks) {
        return r;
    }
    let cp = stmt.checkpoint();
    for &t in tasks {
        match sess.placer.place(sess.snapshot, &sess.state, t) {
            Some(pl) => stmt.place(sess.snapshot, &mut sess.state, t, pl),
            None => {
                stmt.rollback(sess.snapshot, &mut sess.state, cp);
                return Err(t);
            }
        }
    }
    Ok(())
}
