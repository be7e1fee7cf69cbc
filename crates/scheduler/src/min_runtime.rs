//! KAI's `minruntime` plugin: a job that started less than its minimum runtime ago is no
//! victim. The minimum comes from the victim's queue tree (`preemptMinRuntime` /
//! `reclaimMinRuntime` on a queue, inherited by its descendants) with the scheduling shard's
//! `minRuntime` as the default below every queue.
//!
//! - preempt (same queue): from the victim's leaf queue upward, the first queue that sets
//!   `preemptMinRuntime`, else the default;
//! - reclaim, method `lca` (KAI's default): below the lowest common ancestor of the two
//!   queues, the child on the victim's side, then upward from there, the first queue that sets
//!   `reclaimMinRuntime`, else the default (different top-level queues: the victim's
//!   top-level queue, else the default) — so a setting inside a subtree only protects against
//!   siblings within it; method `queue`: as preempt, with `reclaimMinRuntime`.
//!
//! An elastic job is never wholly protected: while protected it may lose the pods above its
//! minimum, never the minimum itself (KAI's scenario validator).

use crate::duration::GoDuration;
use crate::snapshot::{GroupId, QueueId, Snapshot};
use serde::{Deserialize, Serialize};

/// Which action asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Preempt,
    Reclaim,
}

/// How a reclaim resolves the victim's minimum runtime (plugin argument
/// `reclaimResolveMethod`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolveMethod {
    #[default]
    Lca,
    Queue,
}

/// KAI `SchedulingShard.spec.minRuntime` (rendered as the plugin's `defaultPreemptMinRuntime`
/// / `defaultReclaimMinRuntime`), plus the plugin's `reclaimResolveMethod`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MinRuntimeConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempt_min_runtime: Option<GoDuration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_min_runtime: Option<GoDuration>,
    pub reclaim_resolve_method: ResolveMethod,
}

/// Root first, `q` last.
fn path(s: &Snapshot<'_>, q: QueueId) -> Vec<QueueId> {
    let mut p: Vec<QueueId> = s.ancestry(q).collect();
    p.reverse();
    p
}

fn own(s: &Snapshot<'_>, kind: Kind, q: QueueId) -> Option<i64> {
    let qq = &s.queues[q as usize];
    match kind {
        Kind::Preempt => qq.preempt_min_runtime,
        Kind::Reclaim => qq.reclaim_min_runtime,
    }
}

/// The first value set on `path[..=from]`, walking up from `from`.
fn up_from(s: &Snapshot<'_>, kind: Kind, path: &[QueueId], from: usize) -> Option<i64> {
    path[..=from].iter().rev().find_map(|&q| own(s, kind, q))
}

/// The minimum runtime (nanoseconds) protecting a job of queue `victim` from a job of queue
/// `preemptor`.
pub fn resolve(
    s: &Snapshot<'_>,
    cfg: &MinRuntimeConfig,
    kind: Kind,
    preemptor: QueueId,
    victim: QueueId,
) -> i64 {
    let default = match kind {
        Kind::Preempt => cfg.preempt_min_runtime,
        Kind::Reclaim => cfg.reclaim_min_runtime,
    }
    .map_or(0, |d| d.0.max(0));
    let pv = path(s, victim);
    let found = match (kind, cfg.reclaim_resolve_method) {
        (Kind::Preempt, _) | (Kind::Reclaim, ResolveMethod::Queue) => {
            up_from(s, kind, &pv, pv.len() - 1)
        }
        (Kind::Reclaim, ResolveMethod::Lca) => {
            let pp = path(s, preemptor);
            if pp[0] != pv[0] {
                own(s, kind, pv[0])
            } else {
                let common = pp.iter().zip(&pv).take_while(|(a, b)| a == b).count();
                // The LCA is at `common - 1`; one step down on the victim's side if there is one.
                let at = if common < pv.len() {
                    common
                } else {
                    common - 1
                };
                up_from(s, kind, &pv, at)
            }
        }
    };
    found.unwrap_or(default)
}

/// Whether the victim job still runs inside its minimum runtime against this preemptor.
pub fn protected(
    s: &Snapshot<'_>,
    cfg: &MinRuntimeConfig,
    kind: Kind,
    preemptor: QueueId,
    victim: GroupId,
) -> bool {
    let g = &s.groups[victim as usize];
    let (Some(start), Some(vq)) = (g.last_start, g.queue) else {
        return false;
    };
    let min = resolve(s, cfg, kind, preemptor, vq);
    (i128::from(s.now) * 1_000_000_000) < i128::from(start) * 1_000_000_000 + i128::from(min)
}

/// Whether taking victims from job `victim` so that `running_after` of its pods keep running
/// is allowed: always once its minimum runtime is over, else only while the job keeps its
/// minimum member count (an elastic job's extra pods stay takeable).
pub fn allows(
    s: &Snapshot<'_>,
    cfg: &MinRuntimeConfig,
    kind: Kind,
    preemptor: QueueId,
    victim: GroupId,
    running_after: usize,
) -> bool {
    if !protected(s, cfg, kind, preemptor, victim) {
        return true;
    }
    let min: u32 = s.sub_groups_of(victim).iter().map(|sg| sg.min_member).sum();
    running_after >= min as usize
}

#[cfg(test)]
mod tests;
