//! KAI `JobsOrderByQueues`: a tree of job queues mirroring the queue hierarchy. Each pop
//! walks from the top, choosing at every level the child queue whose best job should go
//! next (proportion queue order), so shares are re-evaluated after every allocation.

use super::Session;
use crate::fairshare::compare_queues;
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
        let s = sess.s;
        let mut leaf_jobs: Vec<Vec<GroupId>> = vec![Vec::new(); s.queues.len()];
        for g in jobs {
            if let Some(q) = s.groups[g as usize].queue {
                leaf_jobs[q as usize].push(g);
            }
        }
        let elastic = |g: GroupId| -> u8 {
            let placed = sess.st.group_placed[g as usize];
            let min: u32 = s.sub_groups_of(g).iter().map(|sg| sg.min_member).sum();
            match placed.cmp(&min) {
                Ordering::Less => 0,
                Ordering::Equal => 1,
                Ordering::Greater => 2,
            }
        };
        for jobs in &mut leaf_jobs {
            jobs.sort_by(|&a, &b| {
                let (ga, gb) = (&s.groups[a as usize], &s.groups[b as usize]);
                gb.priority
                    .cmp(&ga.priority)
                    .then(elastic(a).cmp(&elastic(b)))
                    .then(ga.creation.cmp(&gb.creation))
                    .then(ga.namespace.cmp(gb.namespace))
                    .then(ga.name.cmp(&gb.name))
            });
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
                    compare_queues(sess.s, &sess.fs, &sess.st.q_alloc, (q, &r), (*bq, br))
                        == Ordering::Less
                }
            };
            if better {
                best = Some((q, job, r));
            }
        }
        best.map(|(q, j, _)| (q, j))
    }

    fn best_in(&mut self, sess: &Session<'_>, q: QueueId) -> Option<GroupId> {
        let queue = &sess.s.queues[q as usize];
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
        let q = sess.s.groups[job as usize].queue?;
        self.leaf_jobs[q as usize].pop_front();
        Some(job)
    }

    /// Put a job back (elastic growth): it competes again with a fresh request.
    pub fn push_front(&mut self, sess: &Session<'_>, g: GroupId) {
        self.req.remove(&g);
        if let Some(q) = sess.s.groups[g as usize].queue {
            self.leaf_jobs[q as usize].push_front(g);
        }
    }
}
