//! preempt: inside one queue, a higher-priority job evicts strictly lower-priority
//! preemptible jobs. As in KAI, only the non-preemptible quota is checked before victims are
//! tried; the queue's `limit` is checked with the victims out, so a job at its queue's limit
//! (KAI's `build` preempting `train` in a queue limited to 1 GPU) takes the quota they free.

use super::Session;
use super::lazy_sort::LazySorted;
use super::reclaim::{Signature, candidates, signature};
use super::solver::{Problem, Unit, solve, units_of};
use crate::decisions::EvictReason;
use crate::snapshot::GroupId;

pub fn run(sess: &mut Session<'_>) {
    let jobs = candidates(sess, |_| true);
    if jobs.is_empty() {
        return;
    }
    // Built when a job first needs it.
    let mut by_queue = None;
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
        if sess.non_preemptible_quota_error(job, &req).is_some() {
            continue;
        }
        let order = &mut by_queue.get_or_insert_with(|| victim_orders(sess))[q as usize];
        let mut units: Vec<Unit> = Vec::new();
        let (mut next, mut taken) = (0, 0);
        while let Some((vprio, _, v)) = order.get(next) {
            next += 1;
            if vprio >= prio || taken == sess.cfg.max_victim_jobs * 4 {
                break;
            }
            if v != job && sess.helps(v, &req) {
                taken += 1;
                units.extend(units_of(sess, v).into_iter().filter(|u| {
                    crate::min_runtime::allows(
                        sess.s,
                        &sess.cfg.min_runtime,
                        crate::min_runtime::Kind::Preempt,
                        q,
                        v,
                        sess.running_pods(v).len() - u.pods.len(),
                    )
                }));
            }
        }
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
            validate: &|s| s.within_limits(job, &req),
        };
        if !solve(sess, &pb) {
            tried.push(sig);
        }
    }
}

/// Victims by queue (only a job's own queue is searched), lowest priority, newest first.
fn victim_orders(sess: &Session<'_>) -> Vec<LazySorted<(i32, i64, GroupId)>> {
    let mut by_queue: Vec<Vec<(i32, i64, GroupId)>> = vec![Vec::new(); sess.s.queues.len()];
    for &g in &sess.victim_jobs {
        let grp = &sess.s.groups[g as usize];
        if let Some(q) = grp.queue {
            by_queue[q as usize].push((grp.priority, -grp.creation, g));
        }
    }
    by_queue.into_iter().map(LazySorted::new).collect()
}
