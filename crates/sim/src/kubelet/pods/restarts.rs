//! Running a pod's containers: init containers in order, then the main containers, each
//! restarted per restartPolicy with back-off; a node power loss restarts the sandbox.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use super::containers::{ContainerRun, PlainRun, container_run, run_containers};
use super::ctx::{Ctx, now};
use super::deletion::{stopping, wait_stopping};
use super::status::{CState, InitStatus, crash_loop, pod_initializing};
use crate::kubelet::lock::lock;

/// How long an in-process agent gets to stop after its pod is deleted.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Restart back-off: doubles from here per restart, capped (the kubelet's 10 s / 5 min,
/// scaled down so simulations move).
pub(super) const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

enum Outcome {
    Exited(i32, String),
    Stopped,
    PowerLost,
}

/// Back-off before restart number `restarts + 1`.
pub(super) fn backoff(restarts: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(1 << restarts.min(6))
        .min(BACKOFF_MAX)
}

/// Drive one run future to its end, or until the pod stops or the node loses power (then ask
/// it to stop and give it the grace period).
async fn supervise(
    run: ContainerRun,
    stop_tx: watch::Sender<bool>,
    rx: &mut watch::Receiver<Option<Arc<Pod>>>,
    power: &mut watch::Receiver<bool>,
) -> Outcome {
    tokio::pin!(run);
    let outcome = loop {
        tokio::select! {
            (code, msg) = &mut run => return Outcome::Exited(code, msg),
            changed = rx.changed() => {
                if changed.is_err() || stopping(&rx.borrow_and_update()) {
                    break Outcome::Stopped;
                }
            }
            changed = power.changed() => {
                if changed.is_err() || !*power.borrow_and_update() {
                    break Outcome::PowerLost;
                }
            }
        }
    };
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(STOP_GRACE, &mut run).await;
    outcome
}

/// After a power loss: wait for power (false: the pod stopped meanwhile).
async fn wait_power(
    rx: &mut watch::Receiver<Option<Arc<Pod>>>,
    power: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        tokio::select! {
            c = power.changed() => {
                if c.is_err() { return false; }
                if *power.borrow_and_update() { return true; }
            }
            _ = wait_stopping(rx) => return false,
        }
    }
}

enum InitResult {
    Done,
    /// An init container failed and the pod does not restart: the pod has failed.
    Failed,
    Stopped,
    PowerLost,
}

/// Run the init containers in order, each to completion; a failed one restarts with back-off
/// (unless restartPolicy is Never) and the pod stays Pending meanwhile.
async fn run_inits(
    ctx: &Ctx,
    policy: &str,
    rx: &mut watch::Receiver<Option<Arc<Pod>>>,
    power: &mut watch::Receiver<bool>,
) -> InitResult {
    let count = ctx.containers.init.len();
    *lock(&ctx.inits) = (vec![InitStatus::waiting(); count], count == 0);
    if count == 0 {
        // Nothing to run: the pod is not decoded for it.
        return InitResult::Done;
    }
    let Some(pod) = ctx.admitted_pod() else {
        return InitResult::Stopped;
    };
    let inits = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let set = |i: usize, f: &dyn Fn(&mut InitStatus)| {
        if let Some(st) = lock(&ctx.inits).0.get_mut(i) {
            f(st);
        }
    };
    let main_waiting = pod_initializing();
    for (i, c) in inits.iter().enumerate() {
        loop {
            let started = now();
            set(i, &|st| {
                st.state = CState::Running {
                    started: started.clone(),
                }
            });
            ctx.patch_status("Pending", &main_waiting, None, 0, None);
            let (stop_tx, stop_rx) = watch::channel(false);
            let run = container_run(ctx, &pod, c, stop_rx, PlainRun::Immediate);
            let (code, msg) = match supervise(run, stop_tx, rx, power).await {
                Outcome::Exited(code, msg) => (code, msg),
                Outcome::Stopped => return InitResult::Stopped,
                Outcome::PowerLost => return InitResult::PowerLost,
            };
            let term = CState::Terminated {
                code,
                reason: if code == 0 { "Completed" } else { "Error" }.into(),
                message: msg.clone(),
                started,
                finished: now(),
            };
            if code == 0 {
                set(i, &|st| st.state = term.clone());
                break;
            }
            tracing::info!(node = %ctx.node.name, pod = %ctx.r.name, container = %c.name, code, %msg, "init container failed");
            if policy == "Never" {
                set(i, &|st| st.state = term.clone());
                ctx.patch_status("Failed", &main_waiting, None, 0, None);
                return InitResult::Failed;
            }
            let restarts = lock(&ctx.inits).0.get(i).map_or(0, |st| st.restarts);
            let wait = backoff(restarts);
            set(i, &|st| {
                st.restarts += 1;
                st.last = Some(term.clone());
                st.state = crash_loop(wait);
            });
            ctx.patch_status("Pending", &main_waiting, None, 0, None);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = wait_stopping(rx) => return InitResult::Stopped,
            }
        }
    }
    lock(&ctx.inits).1 = true;
    InitResult::Done
}

/// Runs the admitted pod ([`Ctx::admitted`]) until it is terminal or stopping. Its spec is
/// decoded for each start of its sandbox or containers and dropped while they run.
pub(super) async fn run_containers_with_restarts(ctx: &Ctx) {
    let policy = ctx.restart_policy.as_str();
    let mut restarts = 0u32;
    let mut last: Option<CState> = None;
    let mut power = ctx.node.power.subscribe();
    let mut rx = ctx.rx.clone();
    // A new sandbox (first start, or after the node lost power) runs the init containers again.
    'sandbox: loop {
        // Boxed: the init containers' run (with its decoded pod) is not kept in the future
        // of a pod that runs for hours.
        match Box::pin(run_inits(ctx, policy, &mut rx, &mut power)).await {
            InitResult::Done => {}
            InitResult::Failed | InitResult::Stopped => return,
            InitResult::PowerLost => {
                if !wait_power(&mut rx, &mut power).await {
                    return;
                }
                continue 'sandbox;
            }
        }
        loop {
            let started = now();
            let running = CState::Running {
                started: started.clone(),
            };
            ctx.patch_status("Running", &running, last.as_ref(), restarts, None);
            let (stop_tx, stop_rx) = watch::channel(false);
            // In a block of its own: a decoded Pod in scope across the await below would take
            // its size in this future for as long as the pod runs, moved out or not.
            let run = {
                let Some(pod) = ctx.admitted_pod() else {
                    return;
                };
                run_containers(ctx, &pod, stop_rx)
            };
            match supervise(run, stop_tx, &mut rx, &mut power).await {
                Outcome::Exited(code, msg) => {
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    let term = CState::Terminated {
                        code,
                        reason: reason.into(),
                        message: msg.clone(),
                        started,
                        finished: now(),
                    };
                    let restart = policy == "Always" || (policy == "OnFailure" && code != 0);
                    if !msg.is_empty() {
                        tracing::info!(node = %ctx.node.name, pod = %ctx.r.name, code, %msg, "container ended");
                    }
                    if !restart {
                        let phase = if code == 0 { "Succeeded" } else { "Failed" };
                        ctx.patch_status(phase, &term, last.as_ref(), restarts, None);
                        return;
                    }
                    let wait = backoff(restarts);
                    restarts += 1;
                    ctx.patch_status("Running", &crash_loop(wait), Some(&term), restarts, None);
                    last = Some(term);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = wait_stopping(&mut rx) => return,
                    }
                }
                Outcome::Stopped => return,
                Outcome::PowerLost => {
                    // Nothing runs (and nothing is reported) until power returns.
                    if !wait_power(&mut rx, &mut power).await {
                        return;
                    }
                    restarts += 1;
                    continue 'sandbox;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        assert_eq!(backoff(0), BACKOFF_START);
        assert_eq!(backoff(1), BACKOFF_START * 2);
        assert_eq!(backoff(100), BACKOFF_MAX);
    }
}
