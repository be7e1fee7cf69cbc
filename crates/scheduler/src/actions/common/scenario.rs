//! The one victim-seeking loop (KAI's reclaim / preempt / consolidation action body): take
//! the candidate jobs in fair order, skip a job whose scheduling signature already failed
//! this action, let the action state its problem (victims and rules), and solve it.

use super::job_order::JobOrder;
use super::solver::{Problem, solve};
use crate::config::Action;
use crate::framework::Session;
use crate::request::GpuRequest;
use crate::snapshot::{ClassId, GroupId, PodId, QueueId, Res};

/// What one victim-seeking action brings to the shared loop.
pub trait VictimAction {
    /// Whether the action tries this job at all (consolidation: preemptible jobs only).
    fn serves(&self, _sess: &Session<'_>, _job: GroupId) -> bool {
        true
    }

    /// The problem for one job asking `req` with `tasks`, or None when the action cannot
    /// help it (its pre-checks fail or no victim is open to it).
    fn problem<'p>(
        &'p mut self,
        sess: &Session<'_>,
        job: GroupId,
        tasks: Vec<PodId>,
        req: Res,
    ) -> Option<Problem<'p>>;
}

/// Scheduling signature: jobs with the same queue, priority and task shapes fare the same in
/// a victim search, so one failure stands for all of them this action.
type Signature = (Option<QueueId>, i32, Vec<(ClassId, GpuRequest, i64, i64)>);

fn signature(sess: &Session<'_>, job: GroupId, tasks: &[PodId]) -> Signature {
    let mut shapes: Vec<_> = tasks
        .iter()
        .map(|&t| {
            let p = &sess.snapshot.pods[t as usize];
            (p.class, p.gpu.clone(), p.res.0[1], p.res.0[2])
        })
        .collect();
    shapes.sort();
    let grp = &sess.snapshot.groups[job as usize];
    (grp.queue, grp.priority, shapes)
}

/// Run a victim-seeking action over this cycle's candidate jobs.
pub fn run(sess: &mut Session<'_>, action: &mut dyn VictimAction) {
    let jobs = candidates(sess, |g| action.serves(sess, g));
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
        let Some(pb) = action.problem(sess, job, tasks, req) else {
            continue;
        };
        if !solve(sess, &pb) {
            tried.push(sig);
        }
    }
}

/// Candidate jobs in fair order, capped per action: the jobs allocate could not place, or,
/// when allocate does not run this cycle, every job with a pending pod (as each KAI action
/// iterates the pending jobs itself).
fn candidates(sess: &Session<'_>, keep: impl Fn(GroupId) -> bool) -> Vec<GroupId> {
    let pending: Vec<GroupId>;
    let from: &[GroupId] = if sess.config.actions.contains(&Action::Allocate) {
        &sess.failed_jobs
    } else {
        pending = (0..sess.snapshot.groups.len() as GroupId)
            .filter(|&g| {
                !sess.snapshot.groups[g as usize].foreign && sess.pending_pods(g).next().is_some()
            })
            .collect();
        &pending
    };
    let mut jobs: Vec<GroupId> = from
        .iter()
        .copied()
        .filter(|&g| !sess.hopeless[g as usize] && keep(g))
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    let mut order = JobOrder::new(sess, jobs);
    let mut out = Vec::new();
    while let Some(g) = order.pop(sess) {
        if out.len() >= sess.config.queue_depth_per_action {
            break;
        }
        out.push(g);
    }
    out
}
