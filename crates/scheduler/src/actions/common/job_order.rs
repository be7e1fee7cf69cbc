//! KAI `JobsOrderByQueues`: a tree of job queues mirroring the queue hierarchy. Each pop
//! walks from the top, choosing at every level the child queue whose best job should go
//! next (proportion queue order), so shares are re-evaluated after every allocation.

use crate::fairshare::compare_queues;
use crate::framework::Session;
use crate::snapshot::{FastMap, GroupId, QueueId, Res};
use std::cmp::Ordering;
use std::collections::VecDeque;

pub struct JobOrder {
    leaf_jobs: Vec<VecDeque<GroupId>>,
    /// Request of each job's next attempt, once asked (sparse: few jobs of all are here).
    req: FastMap<GroupId, Res>,
    roots: Vec<QueueId>,
}

impl JobOrder {
    /// Jobs with pending work that `keep` accepts, ordered inside each leaf queue by
    /// priority, then elastic state (below minimum first), creation and name.
    pub fn new(sess: &Session<'_>, jobs: impl IntoIterator<Item = GroupId>) -> JobOrder {
        let s = sess.snapshot;
        let mut leaf_jobs: Vec<Vec<GroupId>> = vec![Vec::new(); s.queues.len()];
        for g in jobs {
            if let Some(q) = s.groups[g as usize].queue {
                leaf_jobs[q as usize].push(g);
            }
        }
        for jobs in &mut leaf_jobs {
            jobs.sort_by(|&a, &b| job_cmp(sess, a, b));
        }
        JobOrder {
            leaf_jobs: leaf_jobs.into_iter().map(VecDeque::from).collect(),
            req: FastMap::default(),
            roots: (0..s.queues.len() as QueueId)
                .filter(|&q| s.queues[q as usize].parent.is_none())
                .collect(),
        }
    }

    fn job_req(&mut self, sess: &Session<'_>, g: GroupId) -> Res {
        *self
            .req
            .entry(g)
            .or_insert_with(|| sess.request_of(&sess.tasks_to_allocate(g)))
    }

    fn best_among(&mut self, sess: &Session<'_>, queues: &[QueueId]) -> Option<(QueueId, GroupId)> {
        let mut best: Option<(QueueId, GroupId, Res)> = None;
        for &q in queues {
            let Some(job) = self.best_in(sess, q) else {
                continue;
            };
            let r = self.job_req(sess, job);
            let better = match &best {
                None => true,
                Some((bq, _, br)) => {
                    compare_queues(
                        sess.snapshot,
                        &sess.fair_share,
                        &sess.state.q_alloc,
                        (q, &r),
                        (*bq, br),
                    ) == Ordering::Less
                }
            };
            if better {
                best = Some((q, job, r));
            }
        }
        best.map(|(q, j, _)| (q, j))
    }

    fn best_in(&mut self, sess: &Session<'_>, q: QueueId) -> Option<GroupId> {
        let queue = &sess.snapshot.queues[q as usize];
        if queue.is_leaf() {
            return self.leaf_jobs[q as usize].front().copied();
        }
        self.best_among(sess, &queue.children).map(|(_, j)| j)
    }

    pub fn pop(&mut self, sess: &Session<'_>) -> Option<GroupId> {
        let roots = std::mem::take(&mut self.roots);
        let best = self.best_among(sess, &roots);
        self.roots = roots;
        let (_, job) = best?;
        let q = sess.snapshot.groups[job as usize].queue?;
        self.leaf_jobs[q as usize].pop_front();
        Some(job)
    }

    /// Put a job back after one allocation (KAI re-pushes it): it takes its place in the
    /// job order again with its new elastic state, so a job at its minimum waits behind the
    /// jobs still below theirs, and it competes with a fresh request.
    pub fn requeue(&mut self, sess: &Session<'_>, g: GroupId) {
        self.req.remove(&g);
        if let Some(q) = sess.snapshot.groups[g as usize].queue {
            let jobs = &mut self.leaf_jobs[q as usize];
            let at = jobs.partition_point(|&j| job_cmp(sess, j, g) != Ordering::Greater);
            jobs.insert(at, g);
        }
    }
}

/// KAI's job order inside a queue: priority, then elastic state (below its minimum first,
/// then at it, then above), creation and name.
fn job_cmp(sess: &Session<'_>, a: GroupId, b: GroupId) -> Ordering {
    let s = sess.snapshot;
    let elastic = |g: GroupId| -> Ordering {
        let min: u32 = s.sub_groups_of(g).iter().map(|sg| sg.min_member).sum();
        sess.state.group_placed[g as usize].cmp(&min)
    };
    let (ga, gb) = (&s.groups[a as usize], &s.groups[b as usize]);
    gb.priority
        .cmp(&ga.priority)
        .then(elastic(a).cmp(&elastic(b)))
        .then(ga.creation.cmp(&gb.creation))
        .then(ga.namespace.cmp(gb.namespace))
        .then(ga.name.cmp(&gb.name))
}
