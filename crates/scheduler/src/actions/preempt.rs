//! preempt: inside one queue, a higher-priority job evicts strictly lower-priority
//! preemptible jobs. As in KAI, only the non-preemptible quota is checked before victims are
//! tried; the queue's `limit` is checked with the victims out, so a job at its queue's limit
//! (KAI's `build` preempting `train` in a queue limited to 1 GPU) takes the quota they free.

use super::common::scenario::{self, VictimAction};
use super::common::solver::{Problem, Relocate};
use super::common::victims::{self, Budget, Verdict, VictimOrder};
use crate::decisions::EvictReason;
use crate::framework::Session;
use crate::snapshot::{GroupId, PodId, Res};

pub fn run(sess: &mut Session<'_>) {
    scenario::run(sess, &mut Preempt { order: None });
}

struct Preempt {
    /// Built when a job first needs it.
    order: Option<VictimOrder>,
}

impl VictimAction for Preempt {
    fn problem<'p>(
        &'p mut self,
        sess: &Session<'_>,
        job: GroupId,
        tasks: Vec<PodId>,
        req: Res,
    ) -> Option<Problem<'p>> {
        let grp = &sess.snapshot.groups[job as usize];
        let (q, prio) = (grp.queue?, grp.priority);
        if sess.non_preemptible_quota_error(job, &req).is_some() {
            return None;
        }
        let order = self
            .order
            .get_or_insert_with(|| VictimOrder::per_queue(sess));
        let budget = Budget::victim_jobs(&sess.config);
        let lower = |v: GroupId, vprio: i32| {
            if vprio >= prio {
                Verdict::Stop
            } else if v == job {
                Verdict::Skip
            } else {
                Verdict::Take
            }
        };
        let units = victims::collect(
            sess,
            order,
            q,
            &req,
            budget,
            &lower,
            Some(crate::min_runtime::Kind::Preempt),
        );
        if units.is_empty() {
            return None;
        }
        let job_name = sess.job_name(job);
        Some(Problem {
            job,
            tasks,
            req,
            units,
            max_units: sess.config.max_victim_jobs,
            relocate: Relocate::victims(&sess.config),
            reason: Box::new(move |s: &Session<'_>, g: GroupId| EvictReason::Preempt {
                by_job: job_name.clone(),
                priority: prio,
                victim_priority: s.snapshot.groups[g as usize].priority,
            }),
            accept: Box::new(|_, _| true),
            validate: Box::new(move |s: &Session<'_>| s.within_limits(job, &req)),
        })
    }
}
