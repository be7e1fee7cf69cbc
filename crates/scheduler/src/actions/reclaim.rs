//! reclaim: a queue below its fair share takes resources back from other queues, by KAI's
//! reclaim strategies. A victim's queue (compared at the level where the two queues' paths
//! diverge) may lose the victim when, *before* the victim is taken, either it is above its
//! allocatable share (MaintainFairShare), or the reclaimer stays within its deserved quota
//! and the victim's queue is above its deserved quota in some resource
//! (GuaranteeDeservedQuota). The victim's queue may end below its deserved quota: a queue
//! with quota 1 running a 2-GPU job loses it to a queue claiming its guaranteed GPU.
//! A quota of `-1` is unlimited in these comparisons (never exceeded).

use super::lazy_sort::LazySorted;
use super::solver::{Problem, Unit, solve, units_of};
use super::{JobOrder, Session};
use crate::decisions::EvictReason;
use crate::snapshot::{GroupId, QueueId, Res};

const EPS: f64 = 1e-9;

/// Candidate jobs for the victim-seeking actions, in fair order, capped per action: the jobs
/// allocate could not place, or, when allocate does not run this cycle, every job with a
/// pending pod (as each KAI action iterates the pending jobs itself).
pub fn candidates(sess: &Session<'_>, keep: impl Fn(GroupId) -> bool) -> Vec<GroupId> {
    let pending: Vec<GroupId>;
    let from: &[GroupId] = if sess.cfg.actions.contains(&crate::config::Action::Allocate) {
        &sess.failed
    } else {
        pending = (0..sess.s.groups.len() as GroupId)
            .filter(|&g| {
                !sess.s.groups[g as usize].foreign && sess.pending_pods(g).next().is_some()
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
        if out.len() >= sess.cfg.queue_depth_per_action {
            break;
        }
        out.push(g);
    }
    out
}

/// The two queues under the same parent on the paths of `a` and `b` (None if same path).
fn diverge(sess: &Session<'_>, a: QueueId, b: QueueId) -> Option<(QueueId, QueueId)> {
    let pa: Vec<QueueId> = sess.s.ancestry(a).collect();
    let pb: Vec<QueueId> = sess.s.ancestry(b).collect();
    let (mut i, mut j) = (pa.len(), pb.len());
    while i > 0 && j > 0 && pa[i - 1] == pb[j - 1] {
        i -= 1;
        j -= 1;
    }
    (i > 0 && j > 0).then(|| (pa[i - 1], pb[j - 1]))
}

/// Scheduling signature: jobs with the same queue and the same task shapes fare the same
/// in a victim search, so one failure stands for all of them this action.
pub type Signature = (
    Option<QueueId>,
    Vec<(
        crate::snapshot::ClassId,
        crate::request::GpuRequest,
        i64,
        i64,
    )>,
);

pub fn signature(sess: &Session<'_>, job: GroupId, tasks: &[crate::snapshot::PodId]) -> Signature {
    let mut shapes: Vec<_> = tasks
        .iter()
        .map(|&t| {
            let p = &sess.s.pods[t as usize];
            (p.class, p.gpu.clone(), p.res.0[1], p.res.0[2])
        })
        .collect();
    shapes.sort();
    (sess.s.groups[job as usize].queue, shapes)
}

/// KAI `CanReclaimResources`: the reclaimer's queue with the job stays within its fair
/// share in every resource (non-preemptible quota is checked separately).
pub fn can_reclaim(sess: &Session<'_>, q: QueueId, req: &Res) -> bool {
    let with = sess.st.q_alloc[q as usize].plus(req).to_f();
    let fair = sess.fs.fair[q as usize];
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
    let ra_alloc = sess.st.q_alloc[ra as usize].to_f();
    let va_alloc = sess.st.q_alloc[va as usize].to_f();
    if !le_all(ra_alloc, need, sess.fs.deserved_bound(sess.s, ra)) {
        // Only MaintainFairShare can apply: the victim side must be above its allocatable share.
        return !le_all(va_alloc, [0.0; 3], sess.fs.allocatable_bound(sess.s, va));
    }
    let deserved = sess.fs.deserved_bound(sess.s, va);
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
    let jobs = candidates(sess, |_| true);
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
        let Some(q) = sess.s.groups[job as usize].queue else {
            continue;
        };
        if sess.non_preemptible_quota_error(job, &req).is_some() || !can_reclaim(sess, q, &req) {
            continue;
        }
        // Victims: preemptible running jobs of other queues that a strategy may take from,
        // most over-served queue first, then lowest priority, newest.
        let open_queue: Vec<bool> = (0..sess.s.queues.len() as QueueId)
            .map(|vq| {
                vq != q && sess.s.queues[vq as usize].is_leaf() && filter_victim(sess, q, &req, vq)
            })
            .collect();
        if !open_queue.contains(&true) {
            // No queue may lose anything to this job: skip the walk over every victim.
            continue;
        }
        let limit = sess.cfg.max_victim_jobs * 4;
        let order = order.get_or_insert_with(|| victim_order(sess));
        let mut units: Vec<Unit> = Vec::new();
        let (mut next, mut taken) = (0, 0);
        while taken < limit
            && let Some((_, _, _, v)) = order.get(next)
        {
            next += 1;
            let open = sess.s.groups[v as usize]
                .queue
                .is_some_and(|vq| open_queue[vq as usize]);
            if open && sess.helps(v, &req) {
                taken += 1;
                units.extend(units_of(sess, v).into_iter().filter(|u| {
                    crate::min_runtime::allows(
                        sess.s,
                        &sess.cfg.min_runtime,
                        crate::min_runtime::Kind::Reclaim,
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
        let reclaimer_queue = sess.s.queues[q as usize].name.clone();
        let reason = move |s: &Session<'_>, g: GroupId| EvictReason::Reclaim {
            by_job: job_name.clone(),
            by_queue: reclaimer_queue.clone(),
            victim_queue: s.s.groups[g as usize]
                .queue
                .map(|vq| s.s.queues[vq as usize].name.clone())
                .unwrap_or_default(),
        };
        let before = sess.st.q_alloc.clone();
        let accept = |s: &Session<'_>, unit: &Unit| accept_victim(s, q, &req, unit);
        let validate =
            |s: &Session<'_>| s.within_limits(job, &req) && saturation_ok(s, q, &req, &before);
        let pb = Problem {
            tasks,
            units,
            max_units: sess.cfg.max_victim_jobs,
            relocate: false,
            reason: &reason,
            accept: &accept,
            validate: &validate,
        };
        if !solve(sess, &pb) {
            tried.push(sig);
        }
    }
}

/// Victim order fixed at the start of the action (KAI's victim queue: job order reversed):
/// most over-served queue first, then lowest priority, newest. The dominant share enters the
/// key as its rank among the queues' (equal shares, equal rank), so the key is an integer
/// tuple.
pub(super) fn victim_order(sess: &Session<'_>) -> LazySorted<(u32, i32, i64, GroupId)> {
    let dom: Vec<f64> = (0..sess.s.queues.len() as QueueId)
        .map(|vq| {
            sess.fs
                .dominant_share(sess.s, vq, sess.st.q_alloc[vq as usize].to_f())
        })
        .collect();
    let mut by_dom = dom.clone();
    by_dom.sort_by(|a, b| b.total_cmp(a));
    by_dom.dedup();
    let rank: Vec<u32> = dom
        .iter()
        .map(|d| by_dom.partition_point(|x| x > d) as u32)
        .collect();
    let order = sess
        .victim_jobs
        .iter()
        .filter_map(|&g| {
            let grp = &sess.s.groups[g as usize];
            grp.queue
                .map(|vq| (rank[vq as usize], grp.priority, -grp.creation, g))
        })
        .collect();
    LazySorted::new(order)
}

/// KAI's reclaim strategies at the level where the queues' paths diverge, decided on the
/// victim side's share *before* this victim is taken (the state already lacks the victims
/// chosen earlier in the scenario, but not the job's tasks).
fn accept_victim(sess: &Session<'_>, q: QueueId, req: &Res, unit: &Unit) -> bool {
    let Some(vq) = sess.s.groups[unit.group as usize].queue else {
        return false;
    };
    let Some((ra, va)) = diverge(sess, q, vq) else {
        return false;
    };
    let remaining = sess.st.q_alloc[va as usize].to_f();
    // MaintainFairShare: the victim side is above its allocatable share in some resource.
    if !le_all(remaining, [0.0; 3], sess.fs.allocatable_bound(sess.s, va)) {
        return true;
    }
    // GuaranteeDeservedQuota: the reclaimer side stays within its deserved quota with the job,
    // and the victim side is above its deserved quota in some resource.
    let ra_alloc = sess.st.q_alloc[ra as usize].to_f();
    le_all(ra_alloc, req.to_f(), sess.fs.deserved_bound(sess.s, ra))
        && !le_all(remaining, [0.0; 3], sess.fs.deserved_bound(sess.s, va))
}

/// After the scenario, at every level of the reclaimer's path: a queue that ends above its
/// fair share must stay relatively less saturated than each sibling that lost victims, in
/// every resource involved (`relcaimerSaturationMultiplier`; siblings with no fair share in
/// a resource are not compared there).
fn saturation_ok(sess: &Session<'_>, q: QueueId, req: &Res, before: &[Res]) -> bool {
    let mult = sess.cfg.reclaimer_saturation_multiplier.max(1.0);
    let ratio = |a: QueueId, r: usize| {
        let alloc = sess.st.q_alloc[a as usize].to_f()[r];
        let fair = sess.fs.fair[a as usize][r];
        if fair > EPS {
            alloc / fair
        } else if alloc > EPS {
            f64::INFINITY
        } else {
            0.0
        }
    };
    for a in sess.s.ancestry(q) {
        let roots: Vec<QueueId>;
        let siblings: &[QueueId] = match sess.s.queues[a as usize].parent {
            Some(p) => &sess.s.queues[p as usize].children,
            None => {
                roots = (0..sess.s.queues.len() as QueueId)
                    .filter(|&x| sess.s.queues[x as usize].parent.is_none())
                    .collect();
                &roots
            }
        };
        for &sib in siblings.iter().filter(|&&x| x != a) {
            let (now, was) = (sess.st.q_alloc[sib as usize], before[sib as usize]);
            if !(0..3).any(|x| now.0[x] < was.0[x]) {
                continue; // lost no victim in this scenario
            }
            for r in (0..3).filter(|&r| req.0[r] > 0 || now.0[r] < was.0[r]) {
                let own = ratio(a, r);
                if own > 1.0 + EPS
                    && sess.fs.fair[sib as usize][r] > EPS
                    && mult * own >= ratio(sib, r)
                {
                    return false;
                }
            }
        }
    }
    true
}
