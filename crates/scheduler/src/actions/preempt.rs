//! preempt: inside one queue, a higher-priority job evicts strictly lower-priority
//! preemptible jobs.

use super::Session;
use super::reclaim::{Signature, candidates, signature};
use super::solver::{Problem, Unit, solve, units_of};
use crate::decisions::EvictReason;
use crate::snapshot::GroupId;

pub fn run(sess: &mut Session<'_>) {
    let jobs = candidates(sess, |_| true);
    if jobs.is_empty() {
        return;
    }
    let mut order: Vec<(i32, i64, GroupId)> = sess
        .victim_jobs
        .iter()
        .map(|&g| {
            (
                sess.s.groups[g as usize].priority,
                -sess.s.groups[g as usize].creation,
                g,
            )
        })
        .collect();
    order.sort_unstable();
    let mut tried: Vec<(Signature, i32)> = Vec::new();
    for job in jobs {
        let tasks = sess.tasks_to_allocate(job);
        if tasks.is_empty() {
            continue;
        }
        let sig = (
            signature(sess, job, &tasks),
            sess.s.groups[job as usize].priority,
        );
        if tried.contains(&sig) {
            continue;
        }
        let req = sess.request_of(&tasks);
        let grp = &sess.s.groups[job as usize];
        let (Some(q), prio) = (grp.queue, grp.priority) else {
            continue;
        };
        if sess.capacity_error(job, &req).is_some() {
            continue;
        }
        let units: Vec<Unit> = order
            .iter()
            .take_while(|v| v.0 < prio)
            .filter(|v| {
                v.2 != job && sess.s.groups[v.2 as usize].queue == Some(q) && sess.helps(v.2, &req)
            })
            .take(sess.cfg.max_victim_jobs * 4)
            .flat_map(|v| units_of(sess, v.2))
            .collect();
        if units.is_empty() {
            continue;
        }
        let job_name = sess.job_name(job);
        let reason = move |s: &Session<'_>, g: GroupId| EvictReason::Preempt {
            by_job: job_name.clone(),
            priority: prio,
            victim_priority: s.s.groups[g as usize].priority,
        };
        let pb = Problem {
            tasks,
            units,
            max_units: sess.cfg.max_victim_jobs,
            relocate: false,
            reason: &reason,
            accept: &|_, _| true,
            validate: &|_| true,
        };
        if !solve(sess, &pb) {
            tried.push(sig);
        }
    }
}
