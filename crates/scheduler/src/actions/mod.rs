//! One scheduling cycle: open a session (state, fair shares, placer), run the configured
//! actions in KAI's order, and turn what was committed into decisions.

mod allocate;
mod consolidate;
mod lazy_sort;
mod ordering;
mod preempt;
mod reclaim;
mod releasing;
mod solver;
mod stale;

use crate::config::{Action, Config};
use crate::decisions::{
    Bind, Decisions, EvictReason, Eviction, GpuBinding, QueueReport, Unschedulable,
};
use crate::fairshare::FairShare;
use crate::placement::Placer;
use crate::snapshot::{GroupId, NodeId, PodId, QueueId, Res, Snapshot};
use crate::state::State;
use crate::statement::{Op, Statement};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

pub use ordering::JobOrder;

/// The working set of one cycle. The snapshot is never changed; every change goes through
/// a `Statement` on `st`.
pub struct Session<'a> {
    pub s: &'a Snapshot<'a>,
    pub cfg: Config,
    pub st: State,
    pub placer: Placer,
    pub fs: FairShare,
    /// Why a pod was evicted (first reason wins). Sparse: few pods are evicted.
    pub evicted: BTreeMap<PodId, EvictReason>,
    /// Placed in a statement that also evicted: bind after the victims are gone.
    pub pipelined: Vec<bool>,
    /// Why a pending pod is not placed (so far). Sparse: only pending pods have one.
    pub unschedulable: BTreeMap<PodId, String>,
    /// Jobs that could not be fully allocated this cycle (candidates for reclaim & co).
    pub failed: Vec<GroupId>,
    /// Jobs whose failure no eviction can fix (too few pods, non-preemptible over quota).
    /// Over-limit jobs are not hopeless: preempting inside their own queue frees quota.
    pub hopeless: Vec<bool>,
    pub stale_marks: Vec<crate::decisions::StaleMark>,
    pub issues: Vec<String>,
    /// Preemptible jobs with running pods (the only possible victims), by id.
    pub victim_jobs: Vec<GroupId>,
    /// Per job: whether its running pods hold GPU (bit 0) or only CPU/memory (bit 1).
    holds: Vec<u8>,
    /// Topology domains, indexed when a job first names a Topology (`crate::topology`).
    pub topology: crate::topology::Indexes<'a>,
}

impl<'a> Session<'a> {
    pub fn open(s: &'a Snapshot<'a>, cfg: &Config) -> Session<'a> {
        let mut issues = s.issues.clone();
        let st = State::new(s, &mut issues);
        // One pass over the pods: what each leaf queue requests, and what each job's
        // running pods hold (a job holds something iff it has running pods).
        let mut leaf_req = vec![Res::default(); s.queues.len()];
        let mut holds = vec![0u8; s.groups.len()];
        let mut unschedulable = BTreeMap::new();
        for (id, p) in s.pods.iter().enumerate() {
            let g = &s.groups[p.group as usize];
            if let (Some(q), None, false) = (g.queue, &p.invalid, p.releasing) {
                leaf_req[q as usize].add(&p.res);
            }
            if p.running {
                holds[p.group as usize] |= if p.res.0[0] > 0 { 1 } else { 2 };
            }
            if let Some(why) = &p.invalid {
                unschedulable.insert(id as PodId, why.clone());
            }
        }
        let fs = FairShare::compute(s, &leaf_req, cfg.k_value);
        let victim_jobs = (0..s.groups.len() as GroupId)
            .filter(|&g| {
                let grp = &s.groups[g as usize];
                grp.preemptible && !grp.foreign && grp.queue.is_some() && holds[g as usize] != 0
            })
            .collect();
        Session {
            holds,
            victim_jobs,
            s,
            cfg: cfg.clone(),
            placer: Placer::new(s, cfg),
            fs,
            evicted: BTreeMap::new(),
            pipelined: vec![false; s.pods.len()],
            unschedulable,
            failed: Vec::new(),
            hopeless: vec![false; s.groups.len()],
            stale_marks: Vec::new(),
            issues,
            st,
            topology: Default::default(),
        }
    }

    /// Keep a statement's changes and record what they mean for the decisions.
    pub fn commit(&mut self, stmt: Statement) {
        let evicts = stmt.has_evictions();
        for op in stmt.commit() {
            match op {
                Op::Place(pod) => {
                    self.pipelined[pod as usize] |= evicts;
                    self.unschedulable.remove(&pod);
                }
                Op::Evict { pod, reason, .. } => {
                    // A moved pod (consolidation) evicted again later: the later reason is the final one.
                    match self.evicted.entry(pod) {
                        Entry::Vacant(v) => {
                            v.insert(reason);
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
        self.s.pods_of(g).iter().copied().filter(|&p| {
            let pod = &self.s.pods[p as usize];
            self.st.placement[p as usize].is_none()
                && !pod.running
                && !pod.releasing
                && pod.invalid.is_none()
        })
    }

    /// KAI gang sizing: every sub-group below its minimum gets exactly what it misses; once
    /// all are met, one more pod per attempt (elastic growth).
    pub fn tasks_to_allocate(&self, g: GroupId) -> Vec<PodId> {
        let base = self.st.sub_base[g as usize] as usize;
        let mut missing: Vec<u32> = self
            .s
            .sub_groups_of(g)
            .iter()
            .enumerate()
            .map(|(i, sg)| sg.min_member.saturating_sub(self.st.sub_placed[base + i]))
            .collect();
        let satisfied = missing.iter().all(|&m| m == 0);
        let mut out = Vec::new();
        for p in self.pending_pods(g) {
            let sg = self.s.pods[p as usize].sub_group as usize;
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
            r.add(&self.s.pods[p as usize].res);
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
        let q = self.s.groups[g as usize].queue?;
        let need = req.to_f();
        for a in self.s.ancestry(q) {
            let qq = &self.s.queues[a as usize];
            let alloc = self.st.q_alloc[a as usize].to_f();
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
        let grp = &self.s.groups[g as usize];
        let q = grp.queue?;
        if grp.preemptible {
            return None;
        }
        let need = req.to_f();
        for a in self.s.ancestry(q) {
            let qq = &self.s.queues[a as usize];
            let np = self.st.q_alloc_np[a as usize].to_f();
            let deserved = self.fs.deserved_bound(self.s, a);
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
        let Some(q) = self.s.groups[g as usize].queue else {
            return true;
        };
        let need = req.to_f();
        self.s.ancestry(q).all(|a| {
            let qq = &self.s.queues[a as usize];
            let alloc = self.st.q_alloc[a as usize].to_f();
            (0..3).all(|r| need[r] <= 0.0 || qq.limit[r] < 0.0 || alloc[r] <= qq.limit[r] + 1e-9)
        })
    }

    /// Whether evicting the job could free something `req` needs.
    /// (A GPU job needs victims holding GPUs; evicted jobs yield empty units later.)
    pub fn helps(&self, victim: GroupId, req: &Res) -> bool {
        let h = self.holds[victim as usize];
        if req.0[0] > 0 { h & 1 != 0 } else { h != 0 }
    }

    /// Running pods (from the snapshot) of a job that are still placed.
    pub fn running_pods(&self, g: GroupId) -> Vec<PodId> {
        self.s
            .pods_of(g)
            .iter()
            .copied()
            .filter(|&p| self.s.pods[p as usize].running && self.st.placement[p as usize].is_some())
            .collect()
    }

    pub fn job_name(&self, g: GroupId) -> String {
        let grp = &self.s.groups[g as usize];
        format!("{}/{}", grp.namespace, grp.name)
    }

    fn finish(self) -> Decisions {
        let s = self.s;
        let mut d = Decisions {
            issues: self.issues,
            stale_marks: self.stale_marks,
            ..Default::default()
        };
        // Evictions and binds each in pod order; only running pods are ever evicted.
        for (&i, reason) in &self.evicted {
            let p = &s.pods[i as usize];
            if !p.running {
                continue;
            }
            let node = p
                .node
                .map(|n| s.nodes[n as usize].name.to_string())
                .unwrap_or_default();
            let reason = match (reason, &self.st.placement[i as usize]) {
                (EvictReason::Consolidation { by_job, .. }, Some(pl)) => {
                    EvictReason::Consolidation {
                        by_job: by_job.clone(),
                        relocate_to: s.nodes[pl.node as usize].name.to_string(),
                    }
                }
                (r, _) => r.clone(),
            };
            d.evictions.push(Eviction {
                pod: i,
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                node,
                reason,
            });
        }
        let waits = releasing::nodes_waiting(s, &self.st, &self.evicted);
        let mut groups: BTreeMap<NodeId, Vec<(u32, u32)>> = BTreeMap::new();
        for (i, p) in s.pods.iter().enumerate() {
            if p.running {
                continue;
            }
            if let Some(pl) = &self.st.placement[i] {
                let node_groups = groups
                    .entry(pl.node)
                    .or_insert_with(|| s.nodes[pl.node as usize].groups.clone());
                d.binds.push(Bind {
                    pod: i as PodId,
                    namespace: p.namespace.to_string(),
                    name: p.name.to_string(),
                    node: s.nodes[pl.node as usize].name.to_string(),
                    node_id: pl.node,
                    gpu: GpuBinding::from_placement(s, pl.node, &pl.gpu, node_groups),
                    pipelined: self.pipelined[i] || waits[pl.node as usize],
                });
            } else if let Some(msg) = self.unschedulable.get(&(i as PodId)) {
                d.unschedulable.push(Unschedulable {
                    pod: i as PodId,
                    namespace: p.namespace.to_string(),
                    name: p.name.to_string(),
                    message: msg.clone(),
                });
            }
        }
        for q in 0..s.queues.len() {
            let qid = q as QueueId;
            d.queues.push(QueueReport {
                name: s.queues[q].name.clone(),
                quota: s.queues[q].quota,
                deserved: self.fs.deserved(s, qid),
                fair_share: self.fs.fair[q],
                allocated: self.st.q_alloc[q].to_f(),
                allocated_non_preemptible: self.st.q_alloc_np[q].to_f(),
                requested: self.fs.requested[q],
            });
        }
        d
    }
}

fn fmt_amount(r: usize, v: f64) -> String {
    match r {
        crate::snapshot::GPU => format!("{v}"),
        crate::snapshot::CPU => format!("{v}m"),
        _ => format!("{}MB", v / 1e6),
    }
}

/// Run one cycle on a snapshot: the core entry point.
pub fn schedule(s: &Snapshot<'_>, cfg: &Config) -> Decisions {
    let mut sess = Session::open(s, cfg);
    for action in &cfg.actions {
        match action {
            Action::Allocate => allocate::run(&mut sess),
            Action::Consolidation if cfg.consolidation_enabled() => consolidate::run(&mut sess),
            Action::Consolidation => {}
            Action::Reclaim => reclaim::run(&mut sess),
            Action::Preempt => preempt::run(&mut sess),
            Action::StaleGangEviction => stale::run(&mut sess),
        }
    }
    sess.finish()
}
