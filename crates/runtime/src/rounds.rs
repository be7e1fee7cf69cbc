//! The round loop: the one controller style of Gantry's loops (the operator's controllers,
//! the sim's DaemonSet, Job, Deployment and ReplicaSet controllers). A round lists what it
//! needs, decides with a pure function and writes; it runs again when a trigger watch says
//! something changed, when the round's own requeue (or resync) is due, and never sooner than
//! `min_interval` after the previous one (a burst of events costs one round, not one each).
//! Controllers that create objects pair it with [`crate::expectations`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A round loop named `name` (in logs), its wake-up signal and the trigger tasks that feed
/// it; dropping it stops the triggers.
pub struct Rounds {
    name: &'static str,
    wake: Arc<Notify>,
    min_interval: Duration,
    /// The gap after a round is at least this many times the round's own duration.
    pace: u32,
    triggers: Vec<JoinHandle<()>>,
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

    /// The signal that starts the next round (give it to triggers of your own).
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Run `trigger` beside the loop (it notifies [`Rounds::wake`]); stopped with the loop.
    pub fn trigger(&mut self, trigger: impl Future<Output = ()> + Send + 'static) {
        self.triggers.push(tokio::spawn(trigger));
    }

    /// Wake on every change of `K` (use `PartialObjectMeta<…>` where the content does not
    /// matter: the round lists what it needs).
    pub fn on_changes<K>(&mut self, api: Api<K>)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        self.trigger(on_changes(api, self.wake.clone(), self.name));
    }

    /// Run `round` until `shutdown` resolves. Each round returns how long until the next one
    /// is due without a wake-up (its requeue). A round in flight at shutdown gets
    /// [`SHUTDOWN_GRACE`] to finish, then is dropped (the next leader re-reads everything).
    pub async fn run<R, Fut>(self, shutdown: impl Future<Output = ()>, mut round: R)
    where
        R: FnMut() -> Fut,
        Fut: Future<Output = Duration>,
    {
        tokio::pin!(shutdown);
        loop {
            let started = tokio::time::Instant::now();
            let this = round();
            tokio::pin!(this);
            let next = tokio::select! {
                next = &mut this => next,
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
                () = self.until_next_paced(next, not_before) => {}
            }
        }
    }

    /// Wait until the next round is due: a wake-up, or `requeue` elapsed; then
    /// `min_interval` (so a burst of wake-ups costs one round). For loops that keep mutable
    /// state across rounds: `loop { let next = state.round().await; rounds.until_next(next).await }`.
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

    /// A loop whose rounds report on a channel, with `requeue`; stopped by the returned sender.
    fn start(
        requeue: Duration,
    ) -> (
        Arc<Notify>,
        mpsc::UnboundedReceiver<()>,
        tokio::sync::oneshot::Sender<()>,
        JoinHandle<()>,
    ) {
        let rounds = Rounds::new("test", Duration::ZERO);
        let wake = rounds.wake();
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(rounds.run(
            async {
                let _ = stop_rx.await;
            },
            move || {
                let _ = tx.send(());
                async move { requeue }
            },
        ));
        (wake, rx, stop_tx, task)
    }

    #[tokio::test]
    async fn a_wake_up_starts_the_next_round() {
        let (wake, mut rx, stop, task) = start(Duration::from_secs(3600));
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
        let (_wake, mut rx, stop, task) = start(Duration::from_millis(1));
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
                    Duration::from_secs(3600)
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
}
