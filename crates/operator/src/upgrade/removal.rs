//! Removing a node's pods during a driver upgrade (GPU pod deletion, drain): which pods may go,
//! evicting them, and giving up when they cannot go or the step's time-out passes.
//!
//! GPU reservation pods (the scheduler's placeholders that hold a shared GPU for fractional
//! pods) have no controller, yet are not work that would be lost: they go with the pods they
//! reserve for. Once no pod on the node shares a reservation's GPU any more, the reservation
//! is released (deleted); while one does, it waits for that pod to leave.

use super::plan::{Action, Ctx, annotate, set, timed_out};
use super::state::UpgradeState;
use super::view::{NodeView, PodView};

/// One pod-removal step of the walk (GPU pod deletion, drain): its timer annotation, the
/// policy's options for it, and its time-out.
pub(super) struct Removal {
    pub key: &'static str,
    pub force: bool,
    pub delete_empty_dir: bool,
    /// The policy's field of this step (`… spec.driver.upgradePolicy.podDeletion`).
    pub option: String,
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
    let (reservations, pods): (Vec<&PodView>, Vec<&PodView>) =
        targets.partition(|p| p.reservation.is_some());
    let mut left = match removable(
        pods.into_iter(),
        step.force,
        step.delete_empty_dir,
        &step.option,
    ) {
        Ok(left) => left,
        Err(why) => return fail(out, why),
    };
    left.extend(reservations);
    if left.is_empty() {
        annotate(out, node, step.key, None);
        set(out, node, UpgradeState::PodRestartRequired);
        return;
    }
    let timeout = i64::from(step.timeout_s);
    if timed_out(ctx, node, step.key, timeout, out) {
        let why = format!(
            "timed out after {timeout}s; still there: {}",
            names_of(&left)
        );
        fail(out, why);
    } else {
        evict_all(node, &left, ctx.pods_on(&node.name), out);
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
                    "pod {} has no controller and would not come back (set {option}.force: true to delete it anyway)",
                    p.key
                ));
            }
            if p.empty_dir && !delete_empty_dir {
                return Err(format!(
                    "pod {} uses emptyDir storage that would be lost (set {option}.deleteEmptyDir: true to allow it)",
                    p.key
                ));
            }
        }
        out.push(p);
    }
    Ok(out)
}

/// Evict the pods; release each reservation no pod on the node shares any more (one a pod
/// still shares, terminating or not, waits for it).
fn evict_all(node: &NodeView, pods: &[&PodView], on_node: &[&PodView], out: &mut Vec<Action>) {
    for p in pods.iter().filter(|p| !p.terminating) {
        let pod = p.key.clone();
        let node = node.name.clone();
        match &p.reservation {
            None => out.push(Action::Evict { node, pod }),
            Some(group) => {
                let shared = on_node
                    .iter()
                    .any(|q| !q.finished() && q.gpu_groups.contains(group));
                if !shared {
                    out.push(Action::DeletePod { node, pod });
                }
            }
        }
    }
}

pub(super) fn names_of(pods: &[&PodView]) -> String {
    let mut v: Vec<String> = pods.iter().map(|p| p.key.to_string()).collect();
    v.truncate(5);
    v.join(", ")
}
