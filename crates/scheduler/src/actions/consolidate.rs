//! consolidation: move preemptible running pods to other nodes so a pending preemptible job
//! fits. A move plan is accepted only if every moved pod is placed again.

use super::Session;
use super::reclaim::candidates;
use super::solver::{Problem, Unit, solve, units_of};
use crate::decisions::EvictReason;
use crate::snapshot::{GroupId, CPU, GPU};

pub fn run(sess: &mut Session<'_>) {
    let jobs = candidates(sess, |g| sess.s.groups[g as usize].preemptible);
    for job in jobs {
        let tasks = sess.tasks_to_allocate(job);
        if tasks.is_empty() {
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
        // Victims on the emptiest nodes first: moving them away frees whole nodes.
        let mut units: Vec<(i64, i64, usize, Unit)> = Vec::new();
        for (g, grp) in sess.s.groups.iter().enumerate() {
            if !grp.preemptible || grp.foreign || g as GroupId == job {
                continue;
            }
            for u in units_of(sess, g as GroupId) {
                let node_free = u.pods.first().and_then(|&p| sess.st.placement[p as usize].as_ref()).map_or(0, |pl| sess.st.free_gpu[pl.node as usize]);
                let size: i64 = u.pods.iter().map(|&p| sess.s.pods[p as usize].res.0[GPU]).sum();
                units.push((-node_free, size, units.len(), u));
            }
        }
        units.sort_by_key(|u| (u.0, u.1, u.2));
        let mut budget = sess.cfg.max_consolidation_preemptees;
        let units: Vec<Unit> = units
            .into_iter()
            .map(|u| u.3)
            .filter(|u| {
                let ok = u.pods.len() <= budget;
                if ok {
                    budget -= u.pods.len();
                }
                ok
            })
            .collect();
        if units.is_empty() {
            continue;
        }
        let job_name = sess.job_name(job);
        let reason = move |_: &Session<'_>, _: GroupId| EvictReason::Consolidation { by_job: job_name.clone(), relocate_to: String::new() };
        let pb = Problem {
            tasks,
            units,
            max_units: usize::MAX,
            relocate: true,
            reason: &reason,
            accept: &|_, _| true,
            validate: &|_| true,
        };
        solve(sess, &pb);
    }
}
