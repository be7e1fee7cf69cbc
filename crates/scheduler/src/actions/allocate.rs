//! allocate: place pending jobs into free capacity, gang all-or-nothing, in queue-fair order.

use super::common::{JobOrder, try_place};
use crate::framework::Session;
use crate::framework::statement::Statement;
use crate::request::GpuRequest;
use crate::snapshot::{ClassId, GroupId, PodId};
use std::collections::HashMap;

pub fn run(sess: &mut Session<'_>) {
    // Jobs with a pending pod (as `pending_pods`), found in one pass over the pods.
    let mut pending = vec![false; sess.snapshot.groups.len()];
    for (id, p) in sess.snapshot.pods.iter().enumerate() {
        if !p.running && !p.releasing && p.invalid.is_none() && sess.state.placement[id].is_none() {
            pending[p.group as usize] = true;
        }
    }
    let jobs: Vec<GroupId> = (0..sess.snapshot.groups.len() as GroupId)
        .filter(|&g| pending[g as usize] && !sess.snapshot.groups[g as usize].foreign)
        .collect();
    let mut order = JobOrder::new(sess, jobs);
    // Scheduling signatures: allocate only consumes capacity, so a single-pod job whose
    // exact shape already failed this action fails again.
    let mut failed_shapes: HashMap<(ClassId, GpuRequest, i64, i64), String> = HashMap::new();
    while let Some(g) = order.pop(sess) {
        let tasks = sess.tasks_to_allocate(g);
        if tasks.is_empty() {
            if sess.pending_pods(g).next().is_some() {
                let grp = &sess.snapshot.groups[g as usize];
                let msg = format!(
                    "podgroup {} has fewer pods than its minimum members",
                    sess.job_name(g)
                );
                let _ = grp;
                mark(sess, g, &msg);
                sess.hopeless[g as usize] = true;
            }
            continue;
        }
        let req = sess.request_of(&tasks);
        if let Some(msg) = sess.non_preemptible_quota_error(g, &req) {
            mark(sess, g, &msg);
            sess.hopeless[g as usize] = true;
            continue;
        }
        if let Some(msg) = sess.limit_error(g, &req) {
            // Preempt may still free the queue's own quota from lower-priority jobs.
            mark(sess, g, &msg);
            sess.failed_jobs.push(g);
            continue;
        }
        let shape_of = |p: PodId| {
            let p = &sess.snapshot.pods[p as usize];
            (p.class, p.gpu.clone(), p.res.0[1], p.res.0[2])
        };
        if let Some((t, msg)) = tasks
            .iter()
            .find_map(|&t| failed_shapes.get(&shape_of(t)).map(|m| (t, m)))
        {
            let msg = gang_message(sess, &tasks, t, msg);
            mark(sess, g, &msg);
            sess.failed_jobs.push(g);
            continue;
        }
        let mut stmt = Statement::new();
        match try_place(sess, &mut stmt, &tasks) {
            Ok(()) => {
                sess.commit(stmt);
                if sess.pending_pods(g).next().is_some() {
                    order.requeue(sess, g);
                }
            }
            Err(task) => {
                if let Some(msg) = super::common::topology::explain(sess, &tasks, task) {
                    // A domain's failure says nothing about the shape elsewhere.
                    mark(sess, g, &msg);
                    sess.failed_jobs.push(g);
                    continue;
                }
                let explain = sess.placer.explain(sess.snapshot, &sess.state, task);
                // Scheduling signature: a shape that fails on the committed state fails
                // for every later job this action (allocate only consumes capacity).
                if task == tasks[0] {
                    failed_shapes.insert(shape_of(task), explain.clone());
                }
                let msg = gang_message(sess, &tasks, task, &explain);
                mark(sess, g, &msg);
                sess.failed_jobs.push(g);
            }
        }
    }
}

fn gang_message(sess: &Session<'_>, tasks: &[PodId], task: PodId, explain: &str) -> String {
    if tasks.len() > 1 {
        let p = &sess.snapshot.pods[task as usize];
        format!(
            "gang of {} pods cannot be placed together: pod {} has {explain}",
            tasks.len(),
            p.name
        )
    } else {
        explain.to_string()
    }
}

/// Record the reason on every still-pending pod of the job.
pub fn mark(sess: &mut Session<'_>, g: GroupId, msg: &str) {
    let pods: Vec<PodId> = sess.pending_pods(g).collect();
    for p in pods {
        sess.unschedulable.insert(p, msg.to_string());
    }
}
