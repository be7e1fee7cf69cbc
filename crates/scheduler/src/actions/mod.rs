//! The actions of one cycle (KAI's `pkg/scheduler/actions`), run in the configured order on
//! one [`Session`]: allocate, consolidation, reclaim, preempt, stale-gang eviction. The
//! victim-seeking ones (consolidation, reclaim, preempt) share one scenario loop and solver
//! in [`common`]; each brings only its own rules.

mod allocate;
pub mod common;
mod consolidate;
mod preempt;
mod reclaim;
mod record;
mod releasing;
mod stale;

use crate::config::{Action, Config};
use crate::decisions::Decisions;
use crate::framework::Session;
use crate::snapshot::Snapshot;

pub use record::gpu_binding;

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
    record::decisions(sess)
}
