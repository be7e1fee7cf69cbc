//! One watch of node metadata shared by every operator loop: a cache (managed fields
//! stripped) and a change signal that fires only when a node's labels or annotations change,
//! or a node comes or goes. Status heartbeats do not fire it.
//!
//! At 1,000 nodes a list of node metadata is tens of megabytes (every manager's
//! `managedFields`); the loops used to list it once per round, each round woken by any node
//! write. They now read this cache and wake on what they act on.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use gantry_runtime::task::AbortOnDrop;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};

/// The shared node cache. Clones share one watch, which stops when the last clone is dropped.
#[derive(Clone)]
pub struct NodeWatch {
    store: Store<PartialObjectMeta<Node>>,
    changes: watch::Receiver<u64>,
    // Not `Store::wait_until_ready`: kube-runtime 5 parks only the last of several
    // concurrent waiters there (one oneshot waker), and three loops wait on this cache.
    ready: watch::Receiver<bool>,
    _task: Arc<AbortOnDrop>,
}

impl NodeWatch {
    /// Start watching the cluster's nodes (metadata only).
    pub fn start(client: kube::Client) -> NodeWatch {
        let events = watcher(
            Api::<PartialObjectMeta<Node>>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(crate::reconcile::strip_managed_fields);
        NodeWatch::from_events(events)
    }

    /// The cache and signals over any stream of watch events (tests feed their own).
    fn from_events<S>(events: S) -> NodeWatch
    where
        S: Stream<Item = Result<watcher::Event<PartialObjectMeta<Node>>, watcher::Error>>
            + Send
            + 'static,
    {
        let (store, writer) = reflector::store();
        let (tx, changes) = watch::channel(0u64);
        let (ready_tx, ready) = watch::channel(false);
        let stream = reflector::reflector(writer, events);
        let task = tokio::spawn(signal_changes(stream, tx, ready_tx));
        NodeWatch {
            store,
            changes,
            ready,
            _task: Arc::new(AbortOnDrop(task)),
        }
    }

    /// The cache: complete once [`NodeWatch::ready`] returned true.
    pub fn store(&self) -> &Store<PartialObjectMeta<Node>> {
        &self.store
    }

    /// Wait for the first complete list; false when the watch stopped before it.
    pub async fn ready(&self) -> bool {
        self.ready.clone().wait_for(|r| *r).await.is_ok()
    }

    /// One item per change (changes that arrive while the consumer is busy are merged).
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.changes.clone(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
    }

    /// Notify `wake` on every change until the watch stops (a round-based loop's trigger).
    pub async fn notify(self, wake: Arc<Notify>) {
        let mut rx = self.changes.clone();
        while rx.changed().await.is_ok() {
            wake.notify_one();
        }
    }
}

/// Labels and annotations: what every loop reads from a node.
fn fingerprint(n: &PartialObjectMeta<Node>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    n.metadata.labels.hash(&mut h);
    n.metadata.annotations.hash(&mut h);
    h.finish()
}

async fn signal_changes<S>(stream: S, tx: watch::Sender<u64>, ready: watch::Sender<bool>)
where
    S: Stream<Item = Result<watcher::Event<PartialObjectMeta<Node>>, watcher::Error>>,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        // The reflector has applied the event by now: after a list, the store is complete.
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            ready.send_if_modified(|r| !std::mem::replace(r, true));
        }
        if apply(&mut seen, ev) {
            tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// Fold one watch event into `seen` (node -> fingerprint); true: signal a change.
fn apply(
    seen: &mut HashMap<String, u64>,
    ev: Result<watcher::Event<PartialObjectMeta<Node>>, watcher::Error>,
) -> bool {
    let name = |n: &PartialObjectMeta<Node>| n.metadata.name.clone().unwrap_or_default();
    match ev {
        Ok(watcher::Event::Apply(n)) => {
            let f = fingerprint(&n);
            seen.insert(name(&n), f) != Some(f)
        }
        Ok(watcher::Event::Delete(n)) => {
            seen.remove(&name(&n));
            true
        }
        // A (re)list: collect the new set, signal once it is complete.
        Ok(watcher::Event::Init) => {
            seen.clear();
            false
        }
        Ok(watcher::Event::InitApply(n)) => {
            seen.insert(name(&n), fingerprint(&n));
            false
        }
        Ok(watcher::Event::InitDone) => true,
        Err(e) => {
            tracing::debug!(error = %e, "node watch (retrying)");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn node(name: &str, label: &str, rv: &str) -> PartialObjectMeta<Node> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some([("l".to_string(), label.to_string())].into()),
                ..Default::default()
            },
            _phantom: Default::default(),
        }
    }

    #[test]
    fn only_label_and_membership_changes_signal() {
        let mut seen = HashMap::new();
        assert!(!apply(&mut seen, Ok(watcher::Event::Init)));
        assert!(!apply(
            &mut seen,
            Ok(watcher::Event::InitApply(node("a", "x", "1")))
        ));
        assert!(apply(&mut seen, Ok(watcher::Event::InitDone)));
        // A heartbeat: new resourceVersion, same labels.
        assert!(!apply(
            &mut seen,
            Ok(watcher::Event::Apply(node("a", "x", "2")))
        ));
        assert!(apply(
            &mut seen,
            Ok(watcher::Event::Apply(node("a", "y", "3")))
        ));
        assert!(apply(
            &mut seen,
            Ok(watcher::Event::Apply(node("b", "y", "4")))
        ));
        assert!(apply(
            &mut seen,
            Ok(watcher::Event::Delete(node("b", "y", "5")))
        ));
        assert_eq!(seen.len(), 1);
    }

    /// Three loops wait for the first list at once; every one of them must wake.
    #[tokio::test]
    async fn every_concurrent_waiter_sees_the_first_list() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let w = NodeWatch::from_events(rx);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let w = w.clone();
                tokio::spawn(async move { w.ready().await })
            })
            .collect();
        // Let each waiter park before the list completes.
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(node("a", "x", "1")),
            watcher::Event::InitDone,
        ] {
            tx.unbounded_send(Ok(ev)).unwrap();
        }
        for waiter in waiters {
            let ready = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was never woken")
                .unwrap();
            assert!(ready);
        }
        assert_eq!(w.store().state().len(), 1);
    }

    #[tokio::test]
    async fn a_watch_that_ends_before_its_list_is_not_ready() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let w = NodeWatch::from_events(rx);
        tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        drop(tx);
        assert!(!w.ready().await);
    }
}
