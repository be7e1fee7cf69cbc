//! reclaim: a queue below its fair share takes resources back from other queues, by KAI's
//! reclaim strategies. A victim's queue (compared at the level where the two queues' paths
//! diverge) may lose the victim when, *before* the victim is taken, either it is above its
//! allocatable share (MaintainFairShare), or the reclaimer stays within its deserved quota
//! and the victim's queue is above its deserved quota in some resource
//! (GuaranteeDeservedQuota). The victim's queue may end below its deserved quota: a queue
//! with quota 1 running a 2-GPU job loses it to a queue claiming its guaranteed GPU.
//! A quota of `-1` is unlimited in these comparisons (never exceeded).

use super::common::scenario::{self, VictimAction};
use super::common::solver::{Problem, Relocate};
use super::common::victims::{self, Budget, Unit, Verdict, VictimOrder};
use crate::decisions::EvictReason;
use crate::framework::Session;
use crate::snapshot::{GroupId, PodId, QueueId, Res};

const EPS: f64 = 1e-9;

/// The two queues under the same parent on the paths of `a` and `b` (None if same path).
fn diverge(sess: &Session<'_>, a: QueueId, b: QueueId) -> Option<(QueueId, QueueId)> {
    let pa: Vec<QueueId> = sess.snapshot.ancestry(a).collect();
    let pb: Vec<QueueId> = sess.snapshot.ancestry(b).collect();
    let (mut i, mut j) = (pa.len(), pb.len());
    while i > 0 && j > 0 && pa[i - 1] == pb[j - 1] {
        i -= 1;
        j -= 1;
    }
    (i > 0 && j > 0).then(|| (pa[i - 1], pb[j - 1]))
}

/// KAI `CanReclaimResources`: the reclaimer's queue with the job stays within its fair
/// share in every resource (non-preemptible quota is checked separately).
pub fn can_reclaim(sess: &Session<'_>, q: QueueId, req: &Res) -> bool {
    let with = sess.state.q_alloc[q as usize].plus(req).to_f();
    let fair = sess.fair_share.fair[q as usize];
    (0..3).all(|r| with[r] <= fair[r] + EPS)
}

/// Whether `alloc + add` stays within `bound` in every resource (`INFINITY` = unlimited).
fn le_all(alloc: [f64; 3], add: [f64; 3], bound: [f64; 3]) -> bool {
    (0..3).all(|r| alloc[r] + add[r] <= bound[r] + EPS)
}

/// KAI's proportion `FilterVictim`: can any strategy ever take a job of `vq` for a job of
/// `q` asking `req`? Decided on the queues as they are when the job's search starts.
fn filter_victim(sess: &Session<'_>, q: QueueId, req: &Res, vq: QueueId) -> bool {
    let Some((ra, va)) = diverge(sess, q, vq) else {
        return false;
    };
    let need = req.to_f();
    let ra_alloc = sess.state.q_alloc[ra as usize].to_f();
    let va_alloc = sess.state.q_alloc[va as usize].to_f();
    if !le_all(
        ra_alloc,
        need,
        sess.fair_share.deserved_bound(sess.snapshot, ra),
    ) {
        // Only MaintainFairShare can apply: the victim side must be above its allocatable share.
        return !le_all(
            va_alloc,
            [0.0; 3],
            sess.fair_share.allocatable_bound(sess.snapshot, va),
        );
    }
    let deserved = sess.fair_share.deserved_bound(sess.snapshot, va);
    let mut under = false;
    for r in (0..3).filter(|&r| need[r] > 0.0 && deserved[r].is_finite()) {
        if va_alloc[r] > deserved[r] + EPS {
            return true;
        }
        if va_alloc[r] < deserved[r] - EPS {
            under = true;
        }
    }
    !under
}

pub fn run(sess: &mut Session<'_>) {
    scenario::run(sess, &mut Reclaim { order: None });
}

struct Reclaim {
    /// Built when a job first needs it, which is before this action has changed anything.
    order: Option<VictimOrder>,
}

impl VictimAction for Reclaim {
    fn problem<'p>(
        &'p mut self,
        sess: &Session<'_>,
        job: GroupId,
        tasks: Vec<PodId>,
        req: Res,
    ) -> Option<Problem<'p>> {
        let q = sess.snapshot.groups[job as usize].queue?;
        if sess.non_preemptible_quota_error(job, &req).is_some() || !can_reclaim(sess, q, &req) {
            return None;
        }
        // Victims: preemptible jobs of other queues that a strategy may take from.
        let open_queue: Vec<bool> = (0..sess.snapshot.queues.len() as QueueId)
            .map(|vq| {
                vq != q
                    && sess.snapshot.queues[vq as usize].is_leaf()
                    && filter_victim(sess, q, &req, vq)
            })
            .collect();
        if !open_queue.contains(&true) {
            // No queue may lose anything to this job: skip the walk over every victim.
            return None;
        }
        let order = self
            .order
            .get_or_insert_with(|| VictimOrder::by_share(sess));
        let budget = Budget::victim_jobs(&sess.config);
        let open = |v: GroupId, _| match sess.snapshot.groups[v as usize].queue {
            Some(vq) if open_queue[vq as usize] => Verdict::Take,
            _ => Verdict::Skip,
        };
        let units = victims::collect(
            sess,
            order,
            q,
            &req,
            budget,
            &open,
            Some(crate::min_runtime::Kind::Reclaim),
        );
        if units.is_empty() {
            return None;
        }
        let job_name = sess.job_name(job);
        let reclaimer_queue = sess.snapshot.queues[q as usize].name.clone();
        let before = sess.state.q_alloc.clone();
        Some(Problem {
            job,
            tasks,
            req,
            units,
            max_units: sess.config.max_victim_jobs,
            relocate: Relocate::victims(&sess.config),
            reason: Box::new(move |s: &Session<'_>, g: GroupId| EvictReason::Reclaim {
                by_job: job_name.clone(),
                by_queue: reclaimer_queue.clone(),
                victim_queue: s.snapshot.groups[g as usize]
                    .queue
                    .map(|vq| s.snapshot.queues[vq as usize].name.clone())
                    .unwrap_or_default(),
            }),
            accept: Box::new(move |s: &Session<'_>, unit: &Unit| accept_victim(s, q, &req, unit)),
            validate: Box::new(move |s: &Session<'_>| {
                s.within_limits(job, &req) && saturation_ok(s, q, &req, &before)
            }),
        })
    }
}

/// KAI's reclaim strategies at the level where the queues' paths diverge, decided on the
/// victim side's share *before* this victim is taken (the state already lacks the victims
/// chosen earlier in the scenario, but not the job's tasks).
fn accept_victim(sess: &Session<'_>, q: QueueId, req: &Res, unit: &Unit) -> bool {
    let Some(vq) = sess.snapshot.groups[unit.group as usize].queue else {
        return false;
    };
    let Some((ra, va)) = diverge(sess, q, vq) else {
        return false;
    };
    let remaining = sess.state.q_alloc[va as usize].to_f();
    // MaintainFairShare: the victim side is above its allocatable share in some resource.
    if !le_all(
        remaining,
        [0.0; 3],
        sess.fair_share.allocatable_bound(sess.snapshot, va),
    ) {
        return true;
    }
    // GuaranteeDeservedQuota: the reclaimer side stays within its deserved quota with the job,
    // and the victim side is above its deserved quota in some resource.
    let ra_alloc = sess.state.q_alloc[ra as usize].to_f();
    le_all(
        ra_alloc,
        req.to_f(),
        sess.fair_share.deserved_bound(sess.snapshot, ra),
    ) && !le_all(
        remaining,
        [0.0; 3],
        sess.fair_share.deserved_bound(sess.snapshot, va),
    )
}

/// After the scenario, at every level of the reclaimer's path: a queue that ends above its
/// fair share must stay relatively less saturated than each sibling that lost victims, in
/// every resource involved (`relcaimerSaturationMultiplier`; siblings with no fair share in
/// a resource are not compared there).
fn saturation_ok(sess: &Session<'_>, q: QueueId, req: &Res, before: &[Res]) -> bool {
    let mult = sess.config.reclaimer_saturation_multiplier.max(1.0);
    let ratio = |a: QueueId, r: usize| {
        let alloc = sess.state.q_alloc[a as usize].to_f()[r];
        let fair = sess.fair_share.fair[a as usize][r];
        if fair > EPS {
            alloc / fair
        } else if alloc > EPS {
            f64::INFINITY
        } else {
            0.0
        }
    };
    for a in sess.snapshot.ancestry(q) {
        let roots: Vec<QueueId>;
        let siblings: &[QueueId] = match sess.snapshot.queues[a as usize].parent {
            Some(p) => &sess.snapshot.queues[p as usize].children,
            None => {
                roots = (0..sess.snapshot.queues.len() as QueueId)
                    .filter(|&x| sess.snapshot.queues[x as usize].parent.is_none())
                    .collect();
                &roots
            }
        };
        for &sib in siblings.iter().filter(|&&x| x != a) {
            let (now, was) = (sess.state.q_alloc[sib as usize], before[sib as usize]);
            if !(0..3).any(|x| now.0[x] < was.0[x]) {
                continue; // lost no victim in this scenario
            }
            for r in (0..3).filter(|&r| req.0[r] > 0 || now.0[r] < was.0[r]) {
                let own = ratio(a, r);
                if own > 1.0 + EPS
                    && sess.fair_share.fair[sib as usize][r] > EPS
                    && mult * own >= ratio(sib, r)
                {
                    return false;
                }
            }
        }
    }
    true
}
