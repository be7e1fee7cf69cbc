//! The victim solver shared by consolidation, reclaim and preempt (KAI's `JobSolver` /
//! `byPodSolver`): grow a set of victim units in order until the pending job fits (all in a
//! statement, rolled back on every failed try), drop the units the job turned out not to
//! need, and only then commit. After the job is placed, victims are placed again where
//! there is room (KAI's consolidating reclaim): a victim that finds room is moved, not
//! evicted, and a pod placed earlier this cycle can be a victim too (its placement undone).

use super::try_place;
use super::victims::Unit;
use crate::decisions::EvictReason;
use crate::framework::Session;
use crate::framework::statement::Statement;
use crate::request::GpuRequest;
use crate::snapshot::{GPU, GroupId, PodId, Res};

/// What happens to victims once the job is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relocate {
    /// Every victim must be placed again (consolidation moves, never evicts).
    All,
    /// Each victim job is placed again where there is room (its gang minimum, or one pod of
    /// an elastic job), else it is evicted (KAI `allowConsolidatingReclaim`).
    WhereRoom,
    /// Victims are evicted.
    Never,
}

impl Relocate {
    /// Reclaim and preempt: victims move where there is room, unless moving pods is off
    /// (spread strategies turn consolidation off, as KAI's operator renders it).
    pub fn victims(config: &crate::config::Config) -> Relocate {
        if config.consolidation_enabled() {
            Relocate::WhereRoom
        } else {
            Relocate::Never
        }
    }
}

/// Why a victim of the given job goes.
pub type ReasonFn<'p> = Box<dyn Fn(&Session<'_>, GroupId) -> EvictReason + 'p>;
/// Whether a unit may be taken now.
pub type AcceptFn<'p> = Box<dyn Fn(&Session<'_>, &Unit) -> bool + 'p>;
/// Whether the scenario as a whole holds.
pub type ValidateFn<'p> = Box<dyn Fn(&Session<'_>) -> bool + 'p>;

pub struct Problem<'p> {
    pub job: GroupId,
    pub tasks: Vec<PodId>,
    pub req: Res,
    pub units: Vec<Unit>,
    pub max_units: usize,
    pub relocate: Relocate,
    pub reason: ReasonFn<'p>,
    /// Whether a unit may be taken given the victims already taken (state reflects them).
    pub accept: AcceptFn<'p>,
    /// Whole-scenario check after the job is placed.
    pub validate: ValidateFn<'p>,
}

/// Evict one unit in the statement; false (nothing done) when it is no longer whole or the
/// action refuses it now.
fn take(sess: &mut Session<'_>, stmt: &mut Statement, pb: &Problem<'_>, unit: &Unit) -> bool {
    if !unit
        .pods
        .iter()
        .all(|&p| sess.state.placement[p as usize].is_some())
        || !(pb.accept)(sess, unit)
    {
        return false;
    }
    let reason = (pb.reason)(sess, unit.group);
    for &p in &unit.pods {
        stmt.evict(sess.snapshot, &mut sess.state, p, reason.clone());
    }
    true
}

/// KAI's idle-GPU scenario filter: the cluster's free GPU (with the victims out) must cover
/// what the job's GPU tasks (not MIG slices, counted apart) ask before a placement is
/// simulated.
fn enough_free_gpu(sess: &Session<'_>, tasks: &[PodId]) -> bool {
    let need: i64 = tasks
        .iter()
        .map(|&t| &sess.snapshot.pods[t as usize])
        .filter(|p| !matches!(p.gpu, GpuRequest::Mig { .. }))
        .map(|p| p.res.0[GPU])
        .sum();
    need <= 0 || sess.state.free_gpu.iter().sum::<i64>() >= need
}

/// With the chosen victims out: place the job, then the victims as the problem says, then
/// validate. On failure the statement is back at `cp`.
fn simulate(
    sess: &mut Session<'_>,
    stmt: &mut Statement,
    pb: &Problem<'_>,
    chosen: &[usize],
) -> bool {
    let cp = stmt.checkpoint();
    if !enough_free_gpu(sess, &pb.tasks) || try_place(sess, stmt, &pb.tasks).is_err() {
        return false;
    }
    let evicted: Vec<PodId> = chosen
        .iter()
        .flat_map(|&u| pb.units[u].pods.iter().copied())
        .collect();
    let placed = match pb.relocate {
        Relocate::All => try_place(sess, stmt, &evicted).is_ok(),
        Relocate::WhereRoom => {
            relocate_where_room(sess, stmt, pb, &evicted);
            true
        }
        Relocate::Never => true,
    };
    if placed && (pb.validate)(sess) {
        return true;
    }
    stmt.rollback(sess.snapshot, &mut sess.state, cp);
    false
}

/// Place each victim job again where there is room and its queue's limits allow, in the
/// order its units were taken: the pods its gang misses, or one elastic pod (as KAI's
/// `AllocateJob` sizes a job). Moved pods are recorded as consolidated by the job.
fn relocate_where_room(
    sess: &mut Session<'_>,
    stmt: &mut Statement,
    pb: &Problem<'_>,
    evicted: &[PodId],
) {
    let mut jobs: Vec<GroupId> = Vec::new();
    for &p in evicted {
        let g = sess.snapshot.pods[p as usize].group;
        if !jobs.contains(&g) {
            jobs.push(g);
        }
    }
    let by_job = sess.job_name(pb.job);
    for g in jobs {
        let pods: Vec<PodId> = evicted
            .iter()
            .copied()
            .filter(|&p| sess.snapshot.pods[p as usize].group == g)
            .collect();
        let again = sess.tasks_to_allocate_from(g, &pods);
        // As KAI's `AllocateJob`: the victim's queue must have room for it again.
        if again.is_empty()
            || sess.capacity_error(g, &sess.request_of(&again)).is_some()
            || try_place(sess, stmt, &again).is_err()
        {
            continue;
        }
        for p in again {
            stmt.set_reason(
                p,
                EvictReason::Consolidation {
                    by_job: by_job.clone(),
                    relocate_to: String::new(),
                },
            );
        }
    }
}

/// Evict `chosen` units (all must still be takeable) and simulate; the statement holds the
/// scenario on success, else nothing.
fn scenario(sess: &mut Session<'_>, pb: &Problem<'_>, chosen: &[usize]) -> Option<Statement> {
    let mut stmt = Statement::new();
    for &u in chosen {
        if !take(sess, &mut stmt, pb, &pb.units[u]) {
            stmt.discard(sess.snapshot, &mut sess.state);
            return None;
        }
    }
    if simulate(sess, &mut stmt, pb, chosen) {
        return Some(stmt);
    }
    stmt.discard(sess.snapshot, &mut sess.state);
    None
}

/// Find and commit a victim set for the job. Returns whether the job was placed.
pub fn solve(sess: &mut Session<'_>, pb: &Problem<'_>) -> bool {
    if pb.tasks.is_empty() {
        return false;
    }
    let mut chosen: Vec<usize> = Vec::new();
    let mut stmt = Statement::new();
    let mut found = false;
    for (i, unit) in pb.units.iter().enumerate() {
        if chosen.len() >= pb.max_units {
            break;
        }
        if !take(sess, &mut stmt, pb, unit) {
            continue;
        }
        chosen.push(i);
        if simulate(sess, &mut stmt, pb, &chosen) {
            found = true;
            break;
        }
    }
    stmt.discard(sess.snapshot, &mut sess.state);
    if !found {
        return false;
    }
    // Drop victims that were not needed, newest choice first.
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        if chosen.len() == 1 {
            break;
        }
        let mut without = chosen.clone();
        without.remove(i);
        if let Some(st) = scenario(sess, pb, &without) {
            st.discard(sess.snapshot, &mut sess.state);
            chosen = without;
        }
    }
    match scenario(sess, pb, &chosen) {
        Some(st) => {
            sess.commit(st);
            true
        }
        None => false,
    }
}
