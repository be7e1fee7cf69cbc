//! The victim solver shared by consolidation, reclaim and preempt: grow a set of victims
//! until the pending job fits (all in a statement, rolled back on every failed try), then
//! drop victims the job turned out not to need, and only then commit.

use super::Session;
use super::allocate::try_place;
use crate::decisions::EvictReason;
use crate::snapshot::{GroupId, PodId};
use crate::statement::Statement;

/// Pods that are evicted together: a whole gang, or one elastic pod above the minimum.
#[derive(Clone, Debug)]
pub struct Unit {
    pub group: GroupId,
    pub pods: Vec<PodId>,
}

/// Victim units of a running job: its elastic extras one by one (last in task order first),
/// then the gang core as one unit.
pub fn units_of(sess: &Session<'_>, g: GroupId) -> Vec<Unit> {
    let running = sess.running_pods(g);
    if running.is_empty() {
        return Vec::new();
    }
    let base = sess.st.sub_base[g as usize] as usize;
    let mut extra: Vec<u32> = sess
        .s
        .sub_groups_of(g)
        .iter()
        .enumerate()
        .map(|(i, sg)| sess.st.sub_placed[base + i].saturating_sub(sg.min_member))
        .collect();
    let mut units = Vec::new();
    let mut core = Vec::new();
    for &p in running.iter().rev() {
        let sg = sess.s.pods[p as usize].sub_group as usize;
        if extra[sg] > 0 {
            extra[sg] -= 1;
            units.push(Unit {
                group: g,
                pods: vec![p],
            });
        } else {
            core.push(p);
        }
    }
    if !core.is_empty() {
        units.push(Unit {
            group: g,
            pods: core,
        });
    }
    units
}

pub struct Problem<'p> {
    pub tasks: Vec<PodId>,
    pub units: Vec<Unit>,
    pub max_units: usize,
    /// Victims must be placed again elsewhere (consolidation).
    pub relocate: bool,
    pub reason: &'p dyn Fn(&Session<'_>, GroupId) -> EvictReason,
    /// Whether a unit may be taken given the victims already taken (state reflects them).
    pub accept: &'p dyn Fn(&Session<'_>, &Unit) -> bool,
    /// Whole-scenario check after the job is placed.
    pub validate: &'p dyn Fn(&Session<'_>) -> bool,
}

/// Evict `chosen` units (skipping ones `accept` refuses at that point), place the job and,
/// if asked, the victims. Returns the statement on success (state changed), else rolls back.
fn scenario(sess: &mut Session<'_>, pb: &Problem<'_>, chosen: &[usize]) -> Option<Statement> {
    let mut stmt = Statement::new();
    let mut evicted: Vec<PodId> = Vec::new();
    for &u in chosen {
        let unit = &pb.units[u];
        if !unit
            .pods
            .iter()
            .all(|&p| sess.st.placement[p as usize].is_some())
            || !(pb.accept)(sess, unit)
        {
            stmt.discard(sess.s, &mut sess.st);
            return None;
        }
        let reason = (pb.reason)(sess, unit.group);
        for &p in &unit.pods {
            stmt.evict(sess.s, &mut sess.st, p, reason.clone());
            evicted.push(p);
        }
    }
    if try_place(sess, &mut stmt, &pb.tasks).is_ok()
        && (!pb.relocate || try_place(sess, &mut stmt, &evicted).is_ok())
        && (pb.validate)(sess)
    {
        return Some(stmt);
    }
    stmt.discard(sess.s, &mut sess.st);
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
        if !unit
            .pods
            .iter()
            .all(|&p| sess.st.placement[p as usize].is_some())
            || !(pb.accept)(sess, unit)
        {
            continue;
        }
        let reason = (pb.reason)(sess, unit.group);
        for &p in &unit.pods {
            stmt.evict(sess.s, &mut sess.st, p, reason.clone());
        }
        chosen.push(i);
        let cp = stmt.checkpoint();
        let evicted: Vec<PodId> = chosen
            .iter()
            .flat_map(|&u| pb.units[u].pods.iter().copied())
            .collect();
        if try_place(sess, &mut stmt, &pb.tasks).is_ok()
            && (!pb.relocate || try_place(sess, &mut stmt, &evicted).is_ok())
            && (pb.validate)(sess)
        {
            found = true;
            break;
        }
        stmt.rollback(sess.s, &mut sess.st, cp);
    }
    stmt.discard(sess.s, &mut sess.st);
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
            st.discard(sess.s, &mut sess.st);
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
