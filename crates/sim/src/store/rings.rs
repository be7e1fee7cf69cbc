//! Broadcast rings by key (an object's name, a node): the receivers of one key's events only,
//! so thousands of narrow watches are not each woken by every event in the cluster.

use super::event::Event;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Slots of one key's ring: one object's (or one node's pods') events are few, and a watcher
/// behind goes on from the history.
const RING: usize = 64;

#[derive(Default)]
pub(super) struct Rings(HashMap<String, broadcast::Sender<Arc<Event>>>);

impl Rings {
    /// Sends `ev` to the watchers of `key`, if any; a ring whose last watcher has gone goes.
    pub(super) fn send(&mut self, key: &str, ev: &Arc<Event>) {
        let gone = self
            .0
            .get(key)
            .is_some_and(|tx| tx.send(ev.clone()).is_err());
        if gone {
            self.0.remove(key);
        }
    }

    /// A receiver of the events sent for `key`.
    pub(super) fn subscribe(&mut self, key: &str) -> broadcast::Receiver<Arc<Event>> {
        self.0
            .entry(key.to_string())
            .or_insert_with(|| broadcast::channel(RING).0)
            .subscribe()
    }
}
