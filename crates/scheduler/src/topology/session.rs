//! The glue between [`plan`] and a cycle: a job with a topology constraint places its pods
//! inside the first node set of its plan that takes them all (one statement, rolled back
//! between tries), and says which level could not be satisfied when none does.

use super::{Plan, plan_in};
use crate::actions::Session;
use crate::snapshot::{GroupId, PodId};
use crate::statement::Statement;

fn group_of(sess: &Session<'_>, tasks: &[PodId]) -> Option<GroupId> {
    let &first = tasks.first()?;
    let g = sess.s.pods[first as usize].group;
    sess.s.groups[g as usize].topology.map(|_| g)
}

/// Place `tasks` (pods of one job) under the job's topology constraint. `None`: the job has
/// none (place as usual); `Err`: the pod that found no node (nothing is left placed).
pub fn try_place(
    sess: &mut Session<'_>,
    stmt: &mut Statement,
    tasks: &[PodId],
) -> Option<Result<(), PodId>> {
    let g = group_of(sess, tasks)?;
    let attempts = match plan_in(&mut sess.topology, sess.s, &sess.st, g, tasks) {
        Plan::Any => return None,
        Plan::Unsatisfiable(_) => return Some(Err(tasks[0])),
        Plan::Domains(a) => a,
    };
    let mut allowed = vec![false; sess.s.nodes.len()];
    let mut failed = tasks[0];
    for a in &attempts {
        a.nodes.iter().for_each(|&n| allowed[n as usize] = true);
        let cp = stmt.checkpoint();
        let mut all = true;
        for &t in tasks {
            match sess.placer.place_among(sess.s, &sess.st, t, &allowed) {
                Some(pl) => stmt.place(sess.s, &mut sess.st, t, pl),
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
        stmt.rollback(sess.s, &mut sess.st, cp);
        a.nodes.iter().for_each(|&n| allowed[n as usize] = false);
    }
    Some(Err(failed))
}

/// Why a job with a topology constraint is not placed (`None`: it has none).
pub fn explain(sess: &mut Session<'_>, tasks: &[PodId], failed: PodId) -> Option<String> {
    let g = group_of(sess, tasks)?;
    match plan_in(&mut sess.topology, sess.s, &sess.st, g, tasks) {
        Plan::Any => None,
        Plan::Unsatisfiable(why) => Some(why),
        Plan::Domains(a) => {
            let tried: Vec<&str> = a.iter().map(|a| a.what.as_str()).collect();
            let pod = sess.s.pods[failed as usize].name;
            let why = sess.placer.explain(sess.s, &sess.st, failed);
            Some(format!(
                "topology: the job's {} pods fit {} by room but not together (pod {pod} has {why})",
                tasks.len(),
                tried.join(", ")
            ))
        }
    }
}
