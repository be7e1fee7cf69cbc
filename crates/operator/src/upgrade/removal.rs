//! Removing a node's pods during a driver upgrade (GPU pod deletion, drain): which pods may go,
//! evicting them, and giving up when they cannot go or the step's time-out passes.

use super::plan::{Action, Ctx, annotate, set, timed_out};
use super::state::UpgradeState;
use super::view::{NodeView, PodView};

/// One pod-removal step of the walk (GPU pod deletion, drain): its timer annotation, the
/// policy's options for it, and its time-out.
pub(super) struct Removal {
    pub key: &'static str,
    pub force: bool,
    pub delete_empty_dir: bool,
    pub option: &'static str,
    pub timeout_s: i32,
}

/// Evict `targets` until none is left (then on to pod restart); `fail` when they cannot be
/// removed or the step's time-out passes first.
pub(super) fn remove_pods<'a>(
    ctx: &Ctx<'_>,
    node: &NodeView,
    step: &Removal,
    targets: impl Iterator<Item = &'a PodView>,
    out: &mut Vec<Action>,
    fail: impl Fn(&mut Vec<Action>, String),
) {
    match removable(targets, step.force, step.delete_empty_dir, step.option) {
        Err(why) => fail(out, why),
        Ok(left) if left.is_empty() => {
            annotate(out, node, step.key, None);
            set(out, node, UpgradeState::PodRestartRequired);
        }
        Ok(left) => {
            let timeout = i64::from(step.timeout_s);
            if timed_out(ctx, node, step.key, timeout, out) {
                let why = format!(
                    "timed out after {timeout}s; still there: {}",
                    names_of(&left)
                );
                fail(out, why);
            } else {
                evict_all(node, &left, out);
            }
        }
    }
}

/// Pods that must go for `purpose`, or the reason they cannot.
fn removable<'a>(
    pods: impl Iterator<Item = &'a PodView>,
    force: bool,
    delete_empty_dir: bool,
    option: &str,
) -> Result<Vec<&'a PodView>, String> {
    let mut out = Vec::new();
    for p in pods {
        if !p.terminating {
            if !p.controlled && !force {
                return Err(format!(
                    "pod {} has no controller and would not come back (set {option}.force to delete it anyway)",
                    p.key
                ));
            }
            if p.empty_dir && !delete_empty_dir {
                return Err(format!(
                    "pod {} uses emptyDir storage that would be lost (set {option}.deleteEmptyDir to allow it)",
                    p.key
                ));
            }
        }
        out.push(p);
    }
    Ok(out)
}

fn evict_all(node: &NodeView, pods: &[&PodView], out: &mut Vec<Action>) {
    for p in pods.iter().filter(|p| !p.terminating) {
        out.push(Action::Evict {
            node: node.name.clone(),
            pod: p.key.clone(),
        });
    }
}

pub(super) fn names_of(pods: &[&PodView]) -> String {
    let mut v: Vec<String> = pods.iter().map(|p| p.key.to_string()).collect();
    v.truncate(5);
    v.join(", ")
}
