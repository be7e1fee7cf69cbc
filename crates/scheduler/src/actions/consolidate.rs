//! consolidation: move preemptible running pods to other nodes so a pending preemptible job
//! fits. A move plan is accepted only if every moved pod is placed again. Victims are tried
//! in KAI's victim order (most over-served queue, lowest priority, newest job first), so the
//! newest job moves first.

use super::Session;
use super::reclaim::{Signature, candidates, signature, victim_order};
use super::solver::{Problem, Unit, solve, units_of};
use crate::decisions::EvictReason;
use crate::snapshot::{CPU, GPU, GroupId};

pub fn run(sess: &mut Session<'_>) {
    let jobs = candidates(sess, |g| sess.s.groups[g as usize].preemptible);
    if jobs.is_empty() {
        return;
    }
    // Built when a job first needs it, which is before this action has changed anything.
    let mut order = None;
    let mut tried: Vec<Signature> = Vec::new();
    for job in jobs {
        let tasks = sess.tasks_to_allocate(job);
        if tasks.is_empty() {
            continue;
        }
        let sig = signature(sess, job, &tasks);
        if tried.contains(&sig) {
            continue;
        }
        let req = sess.request_of(&tasks);
        if sess.capacity_error(job, &req).is_some() {
            continue;
        }
        // Only worth trying when the free capacity exists, just in the wrong places.
        let free_gpu: i64 = sess.st.free_gpu.iter().sum();
        let free_cpu: i64 = sess.st.free_cpu.iter().sum();
        if free_gpu < req.0[GPU] || free_cpu < req.0[CPU] {
            continue;
        }
        let mut budget = sess.cfg.max_consolidation_preemptees;
        let order = order.get_or_insert_with(|| victim_order(sess));
        let mut units: Vec<Unit> = Vec::new();
        let mut next = 0;
        while let Some((_, _, _, g)) = order.get(next) {
            next += 1;
            if budget == 0 {
                break;
            }
            if g == job || !sess.helps(g, &req) {
                continue;
            }
            for u in units_of(sess, g) {
                if u.pods.len() <= budget {
                    budget -= u.pods.len();
                    units.push(u);
                }
            }
        }
        if units.is_empty() {
            continue;
        }
        let job_name = sess.job_name(job);
        let reason = move |_: &Session<'_>, _: GroupId| EvictReason::Consolidation {
            by_job: job_name.clone(),
            relocate_to: String::new(),
        };
        let pb = Problem {
            tasks,
            units,
            max_units: usize::MAX,
            relocate: true,
            reason: &reason,
            accept: &|_, _| true,
            validate: &|_| true,
        };
        if !solve(sess, &pb) {
            tried.push(sig);
        }
    }
}
