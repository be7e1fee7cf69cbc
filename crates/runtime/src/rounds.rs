//! The round loop: the one controller style of Gantry's loops (the operator's controllers,
//! the sim's DaemonSet, Job, Deployment and ReplicaSet controllers). A round lists what it
//! needs, decides with a pure function and writes; it runs again when a trigger watch says
//! something changed, when the round's own requeue (or resync) is due, and never sooner than
//! `min_interval` after the previous one (a burst of events costs one round, not one each).
//! A round that fails is retried after a capped, jittered, doubling delay ([`crate::backoff`]:
//! 1 s to 60 s, reset by a success); a wake-up during that delay does not cut it short, and
//! the failures are logged rate-limited by the loop, not by each controller.
//! Controllers that create objects pair it with [`crate::expectations`].

use crate::touch::Touch;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::backoff::{Backoff, Failures, Report};

/// A round loop named `name` (in logs), its wake-up signal and the trigger tasks that feed
/// it; dropping it stops the triggers.
pub struct Rounds {
    name: &'static str,
    wake: Arc<Notify>,
    min_interval: Duration,
    /// The gap after a round is at least this many times the round's own duration.
    pace: u32,
    triggers: Vec<JoinHandle<()>>,
    backoff: Backoff,
    failures: Failures,
}

/// How long a round in flight may finish after shutdown is asked for.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

impl Rounds {
    pub fn new(name: &'static str, min_interval: Duration) -> Self {
        Rounds {
            name,
            wake: Arc::new(Notify::new()),
            min_interval,
            pace: 0,
            triggers: Vec::new(),
            backoff: Backoff::default(),
            failures: Failures::default(),
        }
    }

    /// Space rounds by their cost too: after a round that took `d`, the next starts no sooner
    /// than `factor × d` later (and never sooner than `min_interval`). A loop with a short
    /// `min_interval` then reacts at once on a small cluster, while on a large one, where a
    /// round lists thousands of objects, it spends at most `1 / (1 + factor)` of its time in
    /// rounds however often its triggers fire.
    pub fn pace(mut self, factor: u32) -> Self {
        self.pace = factor;
        self
    }

    /// Retry failed rounds after `backoff` instead of the default (1 s doubling to 60 s).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The signal that starts the next round (give it to triggers of your own).
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Run `trigger` beside the loop (it notifies [`Rounds::wake`]); stopped with the loop.
    pub fn trigger(&mut self, trigger: impl Future<Output = ()> + Send + 'static) {
        self.triggers.push(tokio::spawn(trigger));
    }

    /// Wake on every change of `K`. Only that something changed is decoded ([`Touch`]): the
    /// round lists what it needs.
    pub fn on_changes<K>(&mut self, api: Api<Touch<K>>)
    where
        K: kube::Resource<DynamicType = ()> + std::fmt::Debug + Send + 'static,
    {
        self.trigger(on_changes(api, self.wake.clone(), self.name));
    }

    /// Run `round` until `shutdown` resolves. Each round returns how long until the next one
    /// is due without a wake-up (its requeue), or an error: logged and retried with backoff.
    /// A round in flight at shutdown gets [`SHUTDOWN_GRACE`] to finish, then is dropped (the
    /// next leader re-reads everything).
    pub async fn run<R, Fut, E>(mut self, shutdown: impl Future<Output = ()>, mut round: R)
    where
        R: FnMut() -> Fut,
        Fut: Future<Output = Result<Duration, E>>,
        E: Display,
    {
        tokio::pin!(shutdown);
        loop {
            let started = tokio::time::Instant::now();
            let this = round();
            tokio::pin!(this);
            let outcome = tokio::select! {
                outcome = &mut this => outcome,
                () = &mut shutdown => {
                    if tokio::time::timeout(SHUTDOWN_GRACE, this).await.is_err() {
                        tracing::debug!("{} round stopped after its shutdown grace", self.name);
                    }
                    break;
                }
            };
            let not_before = tokio::time::Instant::now() + started.elapsed() * self.pace;
            tokio::select! {
                () = &mut shutdown => break,
                () = self.next_paced(outcome, not_before) => {}
            }
        }
    }

    /// Wait until the next round is due after one that ended with `outcome`: after a
    /// success, [`Rounds::until_next`] its requeue; after a failure, the backoff delay (no
    /// wake-up cuts it short). For loops that keep mutable state across rounds:
    /// `loop { let outcome = state.round().await; rounds.next(outcome).await }`.
    pub async fn next<E: Display>(&mut self, outcome: Result<Duration, E>) {
        self.next_paced(outcome, tokio::time::Instant::now()).await;
    }

    /// [`Rounds::next`], and after a success not before `not_before` (the pace).
    async fn next_paced<E: Display>(
        &mut self,
        outcome: Result<Duration, E>,
        not_before: tokio::time::Instant,
    ) {
        match outcome {
            Ok(requeue) => {
                let streak = self.failures.succeeded();
                if streak > 0 {
                    tracing::info!(failures = streak, "{} round succeeded again", self.name);
                }
                self.until_next_paced(requeue, not_before).await;
            }
            Err(e) => {
                let report = self.failures.failed(std::time::Instant::now());
                let delay = self
                    .backoff
                    .delay(self.failures.streak(), rand::random::<f64>());
                match report {
                    Report::Warn { streak, left_out } => tracing::warn!(
                        error = %e,
                        failures = streak,
                        similar_left_out = left_out,
                        retry_in = ?delay,
                        "{} round failed",
                        self.name
                    ),
                    Report::Quiet { streak } => tracing::debug!(
                        error = %e,
                        failures = streak,
                        retry_in = ?delay,
                        "{} round failed",
                        self.name
                    ),
                }
                tokio::time::sleep(delay).await;
                // The next round reads everything anyway: a wake-up that came during the
                // backoff is spent, not a reason for one more round right after it.
                let _ = futures::FutureExt::now_or_never(self.wake.notified());
            }
        }
    }

    /// Consecutive failed rounds so far (0 after a success).
    pub fn failures(&self) -> u32 {
        self.failures.streak()
    }

    /// Wait until the next round is due: a wake-up, or `requeue` elapsed; then
    /// `min_interval` (so a burst of wake-ups costs one round).
    pub async fn until_next(&self, requeue: Duration) {
        self.until_next_paced(requeue, tokio::time::Instant::now())
            .await;
    }

    /// [`Rounds::until_next`], and not before `not_before` (the pace).
    async fn until_next_paced(&self, requeue: Duration, not_before: tokio::time::Instant) {
        tokio::select! {
            () = self.wake.notified() => {}
            () = tokio::time::sleep(requeue) => {}
        }
        let due = (tokio::time::Instant::now() + self.min_interval).max(not_before);
        tokio::time::sleep_until(due).await;
    }
}

impl Drop for Rounds {
    fn drop(&mut self) {
        for t in &self.triggers {
            t.abort();
        }
    }
}

/// Notify `wake` on every change of `K`; `loop_name` names the loop in logs.
pub async fn on_changes<K>(api: Api<K>, wake: Arc<Notify>, loop_name: &'static str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let mut s = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                wake.notify_one();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "{loop_name} trigger watch (retrying)");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    /// A loop whose rounds report on a channel and return `outcome(n)` for the n-th round
    /// (from 0); stopped by the returned sender.
    fn start(
        outcome: impl Fn(usize) -> Result<Duration, String> + Send + 'static,
    ) -> (
        Arc<Notify>,
        mpsc::UnboundedReceiver<Instant>,
        tokio::sync::oneshot::Sender<()>,
        JoinHandle<()>,
    ) {
        let rounds = Rounds::new("test", Duration::ZERO);
        let wake = rounds.wake();
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut n = 0;
        let task = tokio::spawn(rounds.run(
            async {
                let _ = stop_rx.await;
            },
            move || {
                let _ = tx.send(Instant::now());
                let out = outcome(n);
                n += 1;
                async move { out }
            },
        ));
        (wake, rx, stop_tx, task)
    }

    #[tokio::test]
    async fn a_wake_up_starts_the_next_round() {
        let (wake, mut rx, stop, task) = start(|_| Ok(Duration::from_secs(3600)));
        rx.recv().await.unwrap();
        wake.notify_one();
        rx.recv().await.unwrap();
        stop.send(()).unwrap();
        task.await.unwrap();
        // The loop is gone with its closure: no round after shutdown.
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn the_requeue_starts_rounds_without_wake_ups() {
        let (_wake, mut rx, stop, task) = start(|_| Ok(Duration::from_millis(1)));
        for _ in 0..3 {
            rx.recv().await.unwrap();
        }
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    /// A round that takes 100 ms with pace 3: a wake-up right after it still waits until
    /// 300 ms after its end, not just `min_interval` (10 ms). Real time, lower bound only:
    /// `sleep_until` never ends early, so a slow machine cannot fail it.
    #[tokio::test]
    async fn pace_spaces_rounds_by_their_cost() {
        let rounds = Rounds::new("paced", Duration::from_millis(10)).pace(3);
        let wake = rounds.wake();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(rounds.run(
            async {
                let _ = stop_rx.await;
            },
            move || {
                let tx = tx.clone();
                async move {
                    let started = tokio::time::Instant::now();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let _ = tx.send((started, tokio::time::Instant::now()));
                    Ok::<_, String>(Duration::from_secs(3600))
                }
            },
        ));
        let (_, first_end) = rx.recv().await.unwrap();
        wake.notify_one();
        let (second_start, _) = rx.recv().await.unwrap();
        stop_tx.send(()).unwrap();
        task.await.unwrap();
        let gap = second_start - first_end;
        assert!(gap >= Duration::from_millis(300), "gap {gap:?}");
    }

    /// Seconds between consecutive rounds.
    async fn gaps(rx: &mut mpsc::UnboundedReceiver<Instant>, rounds: usize) -> Vec<f64> {
        let mut last = rx.recv().await.unwrap();
        let mut out = Vec::new();
        for _ in 1..rounds {
            let at = rx.recv().await.unwrap();
            out.push((at - last).as_secs_f64());
            last = at;
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn failed_rounds_back_off_doubling_to_a_minute_with_jitter() {
        let (_wake, mut rx, stop, task) = start(|_| Err("API server unreachable".to_string()));
        let gaps = gaps(&mut rx, 10).await;
        let full = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0];
        for (gap, full) in gaps.iter().zip(full) {
            assert!(
                *gap <= full && *gap >= full * (1.0 - crate::backoff::JITTER) - 1e-6,
                "gaps {gaps:?}"
            );
        }
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_backoff() {
        // Three failures, a success (requeue 10 s), then failures again.
        let (_wake, mut rx, stop, task) = start(|n| {
            if n == 3 {
                Ok(Duration::from_secs(10))
            } else {
                Err(format!("round {n}"))
            }
        });
        let gaps = gaps(&mut rx, 6).await;
        assert!(
            gaps[2] >= 3.2 && gaps[2] <= 4.0,
            "third backoff ~4 s: {gaps:?}"
        );
        assert_eq!(gaps[3].round(), 10.0, "the success's requeue: {gaps:?}");
        assert!(gaps[4] >= 0.8 && gaps[4] <= 1.0, "back to 1 s: {gaps:?}");
        stop.send(()).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_during_the_backoff_does_not_cut_it_short_or_add_a_round() {
        // Fail twice (backoffs ~1 s and ~2 s), then succeed with a long requeue.
        let (wake, mut rx, stop, task) = start(|n| {
            if n < 2 {
                Err("conflict".to_string())
            } else {
                Ok(Duration::from_secs(3600))
            }
        });
        let first = rx.recv().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        wake.notify_one(); // during the first backoff
        let second = rx.recv().await.unwrap();
        assert!((second - first).as_secs_f64() >= 0.8, "cut short");
        tokio::time::sleep(Duration::from_millis(100)).await;
        wake.notify_one(); // during the second backoff
        let third = rx.recv().await.unwrap();
        assert!((third - second).as_secs_f64() >= 1.6, "cut short");
        // The wake-ups were spent by the rounds after the backoffs: nothing runs until the
        // requeue (an hour) or a new wake-up.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(rx.try_recv().is_err(), "a round for a spent wake-up");
        wake.notify_one();
        rx.recv().await.unwrap();
        stop.send(()).unwrap();
        task.await.unwrap();
    }
}
