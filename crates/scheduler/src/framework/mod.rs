//! The framework of one cycle (KAI's `pkg/scheduler/framework`): the [`Session`] (what the
//! cycle knows and has decided so far), the [`statement::Statement`] every change goes
//! through, and the [`state::State`] it changes. Actions (`crate::actions`) run on a session.

pub mod state;
pub mod statement;

use crate::config::Config;
use crate::decisions::{EvictReason, StaleMark};
use crate::fairshare::FairShare;
use crate::placement::Placer;
use crate::snapshot::{GroupId, PodId, Res, Snapshot};
use state::{Placement, State};
use statement::{Op, Statement};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

/// The working set of one cycle (KAI's `framework.Session`). The snapshot is never changed;
/// every change goes through a `Statement` on `state`.
pub struct Session<'a> {
    pub snapshot: &'a Snapshot<'a>,
    pub config: Config,
    /// Free capacity and placements as this cycle has changed them so far.
    pub state: State,
    pub placer: Placer,
    pub fair_share: FairShare,
    /// Why a pod was evicted (first reason wins). Sparse: few pods are evicted.
    pub evicted: BTreeMap<PodId, EvictReason>,
    /// Placed in a statement that also evicted: bind after the victims are gone.
    pub pipelined: Vec<bool>,
    /// Why a pending pod is not placed (so far). Sparse: only pending pods have one.
    pub unschedulable: BTreeMap<PodId, String>,
    /// Jobs that could not be fully allocated this cycle (candidates for reclaim & co).
    pub failed_jobs: Vec<GroupId>,
    /// Jobs whose failure no eviction can fix (too few pods, non-preemptible over quota).
    /// Over-limit jobs are not hopeless: preempting inside their own queue frees quota.
    pub hopeless: Vec<bool>,
    pub stale_marks: Vec<StaleMark>,
    pub issues: Vec<String>,
    /// Per job: whether its placed pods hold GPU (bit 0) or only CPU/memory (bit 1); set
    /// from the running pods and on every placement, never cleared (it only prunes).
    held_kinds: Vec<u8>,
    /// Topology domains, indexed when a job first names a Topology (`crate::topology`).
    pub topology: crate::topology::Indexes<'a>,
}

impl<'a> Session<'a> {
    pub fn open(s: &'a Snapshot<'a>, cfg: &Config) -> Session<'a> {
        let mut issues = s.issues.clone();
        let state = State::new(s, &mut issues);
        // One pass over the pods: what each leaf queue requests, and what each job's
        // running pods hold (a job holds something iff it has running pods).
        let mut leaf_req = vec![Res::default(); s.queues.len()];
        let mut held_kinds = vec![0u8; s.groups.len()];
        let mut unschedulable = BTreeMap::new();
        for (id, p) in s.pods.iter().enumerate() {
            let g = &s.groups[p.group as usize];
            if let (Some(q), None, false) = (g.queue, &p.invalid, p.releasing) {
                leaf_req[q as usize].add(&p.res);
            }
            if p.running {
                held_kinds[p.group as usize] |= held_kind(&p.res);
            }
            if let Some(why) = &p.invalid {
                unschedulable.insert(id as PodId, why.clone());
            }
        }
        Session {
            held_kinds,
            snapshot: s,
            config: cfg.clone(),
            placer: Placer::new(s, cfg),
            fair_share: FairShare::compute(s, &leaf_req, cfg.k_value),
            evicted: BTreeMap::new(),
            pipelined: vec![false; s.pods.len()],
            unschedulable,
            failed_jobs: Vec::new(),
            hopeless: vec![false; s.groups.len()],
            stale_marks: Vec::new(),
            issues,
            state,
            topology: Default::default(),
        }
    }

    /// Keep a statement's changes and record what they mean for the decisions.
    pub fn commit(&mut self, stmt: Statement) {
        let evicts = stmt.has_evictions();
        // Running pods this statement evicted first (with where they were): one placed back
        // exactly there was never moved.
        let mut first_evicted: Vec<(PodId, Placement)> = Vec::new();
        for op in stmt.commit() {
            match op {
                Op::Place(pod) => {
                    self.pipelined[pod as usize] |= evicts;
                    self.unschedulable.remove(&pod);
                    let p = &self.snapshot.pods[pod as usize];
                    self.held_kinds[p.group as usize] |= held_kind(&p.res);
                    let back = first_evicted.iter().any(|(q, from)| {
                        *q == pod && self.state.placement[pod as usize].as_ref() == Some(from)
                    });
                    if back {
                        self.evicted.remove(&pod);
                    }
                }
                Op::Evict { pod, reason, .. } if !self.snapshot.pods[pod as usize].running => {
                    // A placement of this cycle undone: the pod is pending again (unless a
                    // later operation places it elsewhere).
                    self.pipelined[pod as usize] = false;
                    self.unschedulable
                        .insert(pod, format!("placement undone: {reason}"));
                }
                Op::Evict { pod, from, reason } => {
                    // A moved pod (consolidation) evicted again later: the later reason is the final one.
                    match self.evicted.entry(pod) {
                        Entry::Vacant(v) => {
                            v.insert(reason);
                            first_evicted.push((pod, from));
                        }
                        Entry::Occupied(mut o) => {
                            if matches!(o.get(), EvictReason::Consolidation { .. }) {
                                o.insert(reason);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Pending pods of a job that still need a node.
    pub fn pending_pods(&self, g: GroupId) -> impl Iterator<Item = PodId> + '_ {
        self.snapshot.pods_of(g).iter().copied().filter(|&p| {
            let pod = &self.snapshot.pods[p as usize];
            self.state.placement[p as usize].is_none()
                && !pod.running
                && !pod.releasing
                && pod.invalid.is_none()
        })
    }

    /// KAI gang sizing (`GetTasksToAllocate`): every sub-group below its minimum gets exactly
    /// what it misses; once all are met, one more pod per attempt (elastic growth).
    pub fn tasks_to_allocate(&self, g: GroupId) -> Vec<PodId> {
        self.size_tasks(g, self.pending_pods(g))
    }

    /// The same sizing over given unplaced pods of the job (victims placed again).
    pub fn tasks_to_allocate_from(&self, g: GroupId, pods: &[PodId]) -> Vec<PodId> {
        self.size_tasks(g, pods.iter().copied())
    }

    fn size_tasks(&self, g: GroupId, candidates: impl Iterator<Item = PodId>) -> Vec<PodId> {
        let base = self.state.sub_base[g as usize] as usize;
        let mut missing: Vec<u32> = self
            .snapshot
            .sub_groups_of(g)
            .iter()
            .enumerate()
            .map(|(i, sg)| {
                sg.min_member
                    .saturating_sub(self.state.sub_placed[base + i])
            })
            .collect();
        let satisfied = missing.iter().all(|&m| m == 0);
        let mut out = Vec::new();
        for p in candidates {
            let sg = self.snapshot.pods[p as usize].sub_group as usize;
            if satisfied {
                out.push(p);
                break;
            }
            if missing[sg] > 0 {
                missing[sg] -= 1;
                out.push(p);
            }
        }
        if !satisfied && missing.iter().any(|&m| m > 0) {
            // Not enough pods exist to meet the gang: nothing can be placed.
            return Vec::new();
        }
        out
    }

    pub fn request_of(&self, pods: &[PodId]) -> Res {
        let mut r = Res::default();
        for &p in pods {
            r.add(&self.snapshot.pods[p as usize].res);
        }
        r
    }

    /// KAI `IsJobOverQueueCapacity`: the queue and every ancestor stay within `limit`, and a
    /// non-preemptible job within `deserved`.
    pub fn capacity_error(&self, g: GroupId, req: &Res) -> Option<String> {
        self.limit_error(g, req)
            .or_else(|| self.non_preemptible_quota_error(g, req))
    }

    /// `OverLimit`: adding `req` to what the queue and its ancestors hold now would pass a
    /// `limit`. Preempt checks this only after its victims are out (they free quota too).
    pub fn limit_error(&self, g: GroupId, req: &Res) -> Option<String> {
        let q = self.snapshot.groups[g as usize].queue?;
        let need = req.to_f();
        for a in self.snapshot.ancestry(q) {
            let qq = &self.snapshot.queues[a as usize];
            let alloc = self.state.q_alloc[a as usize].to_f();
            for r in 0..3 {
                if need[r] > 0.0 && qq.limit[r] >= 0.0 && alloc[r] + need[r] > qq.limit[r] + 1e-9 {
                    return Some(format!(
                        "OverLimit: queue {} would use {} of {} with limit {}",
                        qq.name,
                        fmt_amount(r, alloc[r] + need[r]),
                        crate::snapshot::RESOURCE_NAMES[r],
                        fmt_amount(r, qq.limit[r])
                    ));
                }
            }
        }
        None
    }

    /// `NonPreemptibleOverQuota`: a non-preemptible job may not take its queue (or an
    /// ancestor) past `deserved`; a quota of `-1` never limits.
    pub fn non_preemptible_quota_error(&self, g: GroupId, req: &Res) -> Option<String> {
        let grp = &self.snapshot.groups[g as usize];
        let q = grp.queue?;
        if grp.preemptible {
            return None;
        }
        let need = req.to_f();
        for a in self.snapshot.ancestry(q) {
            let qq = &self.snapshot.queues[a as usize];
            let np = self.state.q_alloc_np[a as usize].to_f();
            let deserved = self.fair_share.deserved_bound(self.snapshot, a);
            for r in 0..3 {
                if need[r] > 0.0 && np[r] + need[r] > deserved[r] + 1e-9 {
                    return Some(format!(
                        "NonPreemptibleOverQuota: non-preemptible jobs of queue {} would use {} of {} with deserved {}",
                        qq.name,
                        fmt_amount(r, np[r] + need[r]),
                        crate::snapshot::RESOURCE_NAMES[r],
                        fmt_amount(r, deserved[r])
                    ));
                }
            }
        }
        None
    }

    /// After a what-if placed a job: the queue and its ancestors are within their limits in
    /// every resource the job asked for (KAI checks each task against the limit during the
    /// simulation, with the victims already out).
    pub fn within_limits(&self, g: GroupId, req: &Res) -> bool {
        let Some(q) = self.snapshot.groups[g as usize].queue else {
            return true;
        };
        let need = req.to_f();
        self.snapshot.ancestry(q).all(|a| {
            let qq = &self.snapshot.queues[a as usize];
            let alloc = self.state.q_alloc[a as usize].to_f();
            (0..3).all(|r| need[r] <= 0.0 || qq.limit[r] < 0.0 || alloc[r] <= qq.limit[r] + 1e-9)
        })
    }

    /// Whether evicting the job could free something `req` needs.
    /// (A GPU job needs victims holding GPUs; evicted jobs yield empty units later.)
    pub fn helps(&self, victim: GroupId, req: &Res) -> bool {
        let h = self.held_kinds[victim as usize];
        if req.0[0] > 0 { h & 1 != 0 } else { h != 0 }
    }

    /// Preemptible jobs holding something now (running pods, or pods placed this cycle):
    /// the only possible victims, by id.
    pub fn victim_jobs(&self) -> Vec<GroupId> {
        (0..self.snapshot.groups.len() as GroupId)
            .filter(|&g| {
                let grp = &self.snapshot.groups[g as usize];
                grp.preemptible
                    && !grp.foreign
                    && grp.queue.is_some()
                    && self.state.group_placed[g as usize] > 0
            })
            .collect()
    }

    /// Pods of a job that hold a place now: running ones not evicted, and those placed this
    /// cycle (a later action may undo those), in task order.
    pub fn placed_pods(&self, g: GroupId) -> Vec<PodId> {
        self.snapshot
            .pods_of(g)
            .iter()
            .copied()
            .filter(|&p| self.state.placement[p as usize].is_some())
            .collect()
    }

    /// Running pods (from the snapshot) of a job that are still placed.
    pub fn running_pods(&self, g: GroupId) -> Vec<PodId> {
        self.snapshot
            .pods_of(g)
            .iter()
            .copied()
            .filter(|&p| {
                self.snapshot.pods[p as usize].running && self.state.placement[p as usize].is_some()
            })
            .collect()
    }

    pub fn job_name(&self, g: GroupId) -> String {
        let grp = &self.snapshot.groups[g as usize];
        format!("{}/{}", grp.namespace, grp.name)
    }
}

/// Bit 0: holds GPU; bit 1: holds only CPU / memory.
fn held_kind(res: &Res) -> u8 {
    if res.0[0] > 0 { 1 } else { 2 }
}

fn fmt_amount(r: usize, v: f64) -> String {
    match r {
        crate::snapshot::GPU => format!("{v}"),
        crate::snapshot::CPU => format!("{v}m"),
        _ => format!("{}MB", v / 1e6),
    }
}
