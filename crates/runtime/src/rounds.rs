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
            triggers: Vec::new(),
        }
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
            tokio::select! {
                () = &mut shutdown => break,
                () = self.until_next(next) => {}
            }
        }
    }

    /// Wait until the next round is due: a wake-up, or `requeue` elapsed; then
    /// `min_interval` (so a burst of wake-ups costs one round). For loops that keep mutable
    /// state across rounds: `loop { let next = state.round().await; rounds.until_next(next).await }`.
    pub async fn until_next(&self, requeue: Duration) {
        tokio::select! {
            () = self.wake.notified() => {}
            () = tokio::time::sleep(requeue) => {}
        }
        tokio::time::sleep(self.min_interval).await;
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
}
