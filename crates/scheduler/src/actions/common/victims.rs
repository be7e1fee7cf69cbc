//! Victims for the victim-seeking actions: the orders they are tried in (KAI's victim queue:
//! the job order reversed), the units they are taken in, and the one place where a victim's
//! eligibility is decided ([`eligible`]).

use super::lazy_sort::LazySorted;
use crate::framework::Session;
use crate::min_runtime::Kind;
use crate::snapshot::{GroupId, PodId, QueueId, Res};

/// Pods that are evicted together: a whole gang core, or one elastic pod above the minimum.
#[derive(Clone, Debug)]
pub struct Unit {
    pub group: GroupId,
    pub pods: Vec<PodId>,
    /// One pod above the job's minimum (taking it leaves the gang whole).
    pub elastic: bool,
}

/// Victim units of a job holding a place (running pods, or pods placed this cycle, which a
/// scenario may undo): its elastic extras one by one (last in task order first), then the
/// gang core as one unit.
pub fn units_of(sess: &Session<'_>, g: GroupId) -> Vec<Unit> {
    let placed = sess.placed_pods(g);
    if placed.is_empty() {
        return Vec::new();
    }
    let base = sess.state.sub_base[g as usize] as usize;
    let mut extra: Vec<u32> = sess
        .snapshot
        .sub_groups_of(g)
        .iter()
        .enumerate()
        .map(|(i, sg)| sess.state.sub_placed[base + i].saturating_sub(sg.min_member))
        .collect();
    let mut units = Vec::new();
    let mut core = Vec::new();
    for &p in placed.iter().rev() {
        let sg = sess.snapshot.pods[p as usize].sub_group as usize;
        if extra[sg] > 0 {
            extra[sg] -= 1;
            units.push(Unit {
                group: g,
                pods: vec![p],
                elastic: true,
            });
        } else {
            core.push(p);
        }
    }
    if !core.is_empty() {
        units.push(Unit {
            group: g,
            pods: core,
            elastic: false,
        });
    }
    units
}

/// Whether a job may be a victim for a job asking `req`. Every victim-seeking action
/// decides eligibility here and nowhere else (victim filters such as a minimum runtime
/// belong in this function).
pub fn eligible(sess: &Session<'_>, victim: GroupId, req: &Res) -> bool {
    sess.helps(victim, req)
}

/// Whether a unit of an eligible victim may be taken, the job holding `placed` pods: a job
/// still inside its queue's minimum runtime (`preemptMinRuntime` / `reclaimMinRuntime`) gives
/// up only pods above its minimum.
fn unit_allowed(
    sess: &Session<'_>,
    min_runtime: Option<Kind>,
    q: QueueId,
    unit: &Unit,
    placed: usize,
) -> bool {
    let Some(kind) = min_runtime else {
        return true;
    };
    crate::min_runtime::allows(
        sess.snapshot,
        &sess.config.min_runtime,
        kind,
        q,
        unit.group,
        placed.saturating_sub(unit.pods.len()),
    )
}

/// The order victims are tried in, fixed when an action first needs it.
pub enum VictimOrder {
    /// Reclaim and consolidation: most over-served queue first (its dominant share's rank
    /// among the queues', so the key is an integer tuple), then lowest priority, newest.
    ByShare(LazySorted<(u32, i32, i64, GroupId)>),
    /// Preempt: only a job's own queue is searched, lowest priority, newest first.
    PerQueue(Vec<LazySorted<(i32, i64, GroupId)>>),
}

impl VictimOrder {
    pub fn by_share(sess: &Session<'_>) -> VictimOrder {
        let s = sess.snapshot;
        let dom: Vec<f64> = (0..s.queues.len() as QueueId)
            .map(|vq| {
                sess.fair_share
                    .dominant_share(s, vq, sess.state.q_alloc[vq as usize].to_f())
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
            .victim_jobs()
            .into_iter()
            .filter_map(|g| {
                let grp = &s.groups[g as usize];
                grp.queue
                    .map(|vq| (rank[vq as usize], grp.priority, -grp.creation, g))
            })
            .collect();
        VictimOrder::ByShare(LazySorted::new(order))
    }

    pub fn per_queue(sess: &Session<'_>) -> VictimOrder {
        let s = sess.snapshot;
        let mut by_queue: Vec<Vec<(i32, i64, GroupId)>> = vec![Vec::new(); s.queues.len()];
        for g in sess.victim_jobs() {
            let grp = &s.groups[g as usize];
            if let Some(q) = grp.queue {
                by_queue[q as usize].push((grp.priority, -grp.creation, g));
            }
        }
        VictimOrder::PerQueue(by_queue.into_iter().map(LazySorted::new).collect())
    }

    /// The `i`-th victim job (with its priority) for a job of queue `q`.
    fn get(&mut self, q: QueueId, i: usize) -> Option<(i32, GroupId)> {
        match self {
            VictimOrder::ByShare(o) => o.get(i).map(|(_, prio, _, g)| (prio, g)),
            VictimOrder::PerQueue(o) => o[q as usize].get(i).map(|(prio, _, g)| (prio, g)),
        }
    }
}

/// What an action says of the next victim job in its order.
pub enum Verdict {
    Take,
    Skip,
    /// No later job can be a victim either.
    Stop,
}

/// How far one victim walk goes.
pub struct Budget {
    /// Most victim jobs taken.
    pub jobs: usize,
    /// Most pods taken (units that do not fit are skipped).
    pub pods: usize,
}

impl Budget {
    /// Reclaim and preempt: four times the victim jobs one scenario may take, any pods.
    pub fn victim_jobs(config: &crate::config::Config) -> Budget {
        Budget {
            jobs: config.max_victim_jobs * 4,
            pods: usize::MAX,
        }
    }
}

/// Walk the order for a job of queue `q` asking `req`, taking units of the jobs `judge`
/// accepts that are [`eligible`], within the budget; `min_runtime` names the action whose
/// minimum runtime protects victims (none for consolidation, which KAI does not limit). KAI's elastic victim order: every
/// taken job's pods above its minimum come before any job's gang core.
pub fn collect(
    sess: &Session<'_>,
    order: &mut VictimOrder,
    q: QueueId,
    req: &Res,
    mut budget: Budget,
    judge: &dyn Fn(GroupId, i32) -> Verdict,
    min_runtime: Option<Kind>,
) -> Vec<Unit> {
    let (mut elastic, mut cores) = (Vec::new(), Vec::new());
    let mut next = 0;
    while budget.jobs > 0
        && budget.pods > 0
        && let Some((prio, v)) = order.get(q, next)
    {
        next += 1;
        match judge(v, prio) {
            Verdict::Stop => break,
            Verdict::Skip => continue,
            Verdict::Take if !eligible(sess, v, req) => continue,
            Verdict::Take => {}
        }
        budget.jobs -= 1;
        let units = units_of(sess, v);
        // The units partition the job's placed pods.
        let placed: usize = units.iter().map(|u| u.pods.len()).sum();
        for u in units {
            if u.pods.len() <= budget.pods && unit_allowed(sess, min_runtime, q, &u, placed) {
                budget.pods -= u.pods.len();
                if u.elastic {
                    elastic.push(u);
                } else {
                    cores.push(u);
                }
            }
        }
    }
    elastic.extend(cores);
    elastic
}
