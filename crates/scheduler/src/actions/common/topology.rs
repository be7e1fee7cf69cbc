//! The glue between [`crate::topology::plan`] and a cycle: a job with a topology constraint places its pods
//! inside the first node set of its plan that takes them all (one statement, rolled back
//! between tries), and says which level could not be satisfied when none does.

use crate::framework::Session;
use crate::snapshot::{GroupId, PodId};
use crate::statement::Statement;
use crate::topology::{Plan, plan_in};

fn group_of(sess: &Session<'_>, tasks: &[PodId]) -> Option<GroupId> {
    let &first = tasks.first()?;
    let g = sess.snapshot.pods[first as usize].group;
    sess.snapshot.groups[g as usize].topology.map(|_| g)
}

/// Place `tasks` (pods of one job) under the job's topology constraint. `None`: the job has
/// none (place as usual); `Err`: the pod that found no node (nothing is left placed).
pub fn try_place(
    sess: &mut Session<'_>,
    stmt: &mut Statement,
    tasks: &[PodId],
) -> Option<Result<(), PodId>> {
    let g = group_of(sess, tasks)?;
    let attempts = match plan_in(&mut sess.topology, sess.snapshot, &sess.state, g, tasks) {
        Plan::Any => return None,
        Plan::Unsatisfiable(_) => return Some(Err(tasks[0])),
        Plan::Domains(a) => a,
    };
    let mut allowed = vec![false; sess.snapshot.nodes.len()];
    let mut failed = tasks[0];
    for a in &attempts {
        a.nodes.iter().for_each(|&n| allowed[n as usize] = true);
        let cp = stmt.checkpoint();
        let mut all = true;
        for &t in tasks {
            match sess
                .placer
                .place_where(sess.snapshot, &sess.state, t, |n| allowed[n as usize])
            {
                Some(pl) => stmt.place(sess.snapshot, &mut sess.state, t, pl),
                None => {
                    failed = t;
                    all = false;
                    break;
                }
            }
        }
        if all {
            return Some(Ok(()));
        }
        stmt.rollback(sess.snapshot, &mut sess.state, cp);
        a.nodes.iter().for_each(|&n| allowed[n as usize] = false);
    }
    Some(Err(failed))
}

/// Why a job with a topology constraint is not placed (`None`: it has none).
pub fn explain(sess: &mut Session<'_>, tasks: &[PodId], failed: PodId) -> Option<String> {
    let g = group_of(sess, tasks)?;
    match plan_in(&mut sess.topology, sess.snapshot, &sess.state, g, tasks) {
        Plan::Any => None,
        Plan::Unsatisfiable(why) => Some(why),
        Plan::Domains(a) => {
            let tried: Vec<&str> = a.iter().map(|a| a.what.as_str()).collect();
            let pod = sess.snapshot.pods[failed as usize].name;
            let why = sess.placer.explain(sess.snapshot, &sess.state, failed);
            Some(format!(
                "topology: the job's {} pods fit {} by room but not together (pod {pod} has {why})",
                tasks.len(),
                tried.join(", ")
            ))
        }
    }
}
