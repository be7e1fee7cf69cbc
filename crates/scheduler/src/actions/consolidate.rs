//! consolidation: move preemptible running pods to other nodes so a pending preemptible job
//! fits. A move plan is accepted only if every moved pod is placed again. Victims are tried
//! in KAI's victim order (most over-served queue, lowest priority, newest job first), so the
//! newest job moves first.

use super::common::scenario::{self, VictimAction};
use super::common::solver::{Problem, Relocate};
use super::common::victims::{self, Budget, Verdict, VictimOrder};
use crate::decisions::EvictReason;
use crate::framework::Session;
use crate::snapshot::{CPU, GPU, GroupId, PodId, Res};

pub fn run(sess: &mut Session<'_>) {
    scenario::run(sess, &mut Consolidate { order: None });
}

struct Consolidate {
    /// Built when a job first needs it, which is before this action has changed anything.
    order: Option<VictimOrder>,
}

impl VictimAction for Consolidate {
    fn serves(&self, sess: &Session<'_>, job: GroupId) -> bool {
        sess.snapshot.groups[job as usize].preemptible
    }

    fn problem<'p>(
        &'p mut self,
        sess: &Session<'_>,
        job: GroupId,
        tasks: Vec<PodId>,
        req: Res,
    ) -> Option<Problem<'p>> {
        let q = sess.snapshot.groups[job as usize].queue?;
        if sess.capacity_error(job, &req).is_some() {
            return None;
        }
        // Only worth trying when the free capacity exists, just in the wrong places.
        let free_gpu: i64 = sess.state.free_gpu.iter().sum();
        let free_cpu: i64 = sess.state.free_cpu.iter().sum();
        if free_gpu < req.0[GPU] || free_cpu < req.0[CPU] {
            return None;
        }
        let order = self
            .order
            .get_or_insert_with(|| VictimOrder::by_share(sess));
        let budget = Budget {
            jobs: usize::MAX,
            pods: sess.config.max_consolidation_preemptees,
        };
        let other = |v: GroupId, _| {
            if v == job {
                Verdict::Skip
            } else {
                Verdict::Take
            }
        };
        let units = victims::collect(sess, order, q, &req, budget, &other, None);
        if units.is_empty() {
            return None;
        }
        let job_name = sess.job_name(job);
        Some(Problem {
            job,
            tasks,
            req,
            units,
            max_units: usize::MAX,
            relocate: Relocate::All,
            reason: Box::new(
                move |_: &Session<'_>, _: GroupId| EvictReason::Consolidation {
                    by_job: job_name.clone(),
                    relocate_to: String::new(),
                },
            ),
            accept: Box::new(|_, _| true),
            validate: Box::new(|_| true),
        })
    }
}
