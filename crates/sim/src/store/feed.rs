//! Every event of the store, in order, for an in-process follower (the garbage collector, a
//! bench's tally). The live ring is short; a follower that falls behind it goes on from the
//! kept history, as a watch does, instead of losing events and rereading everything.

use super::Store;
use super::event::Event;
use super::history::Kept;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::broadcast::{self, error::RecvError};

/// Why [`Feed::next`] has no event.
#[derive(Debug, PartialEq, Eq)]
pub enum Gap {
    /// Events were compacted before this follower read them: it starts again from the
    /// store as it is now (the feed goes on from there).
    Missed,
    /// The store is gone.
    Closed,
}

pub struct Feed {
    store: Store,
    rx: broadcast::Receiver<Arc<Event>>,
    backlog: VecDeque<Kept>,
    /// The last resourceVersion handed out (or the start).
    last: u64,
}

impl Feed {
    /// Every event from now on.
    pub fn from_now(store: &Store) -> Self {
        let (rx, last) = store.subscribe();
        Feed {
            store: store.clone(),
            rx,
            backlog: VecDeque::new(),
            last,
        }
    }

    /// The resourceVersion the feed has reached.
    pub fn rv(&self) -> u64 {
        self.last
    }

    /// The next event after the last one handed out.
    pub async fn next(&mut self) -> Result<Arc<Event>, Gap> {
        loop {
            if let Some(k) = self.backlog.pop_front() {
                self.last = k.rv();
                // A kept event whose JSON does not decode is none a follower could act on.
                match k.event() {
                    Some(ev) => return Ok(ev),
                    None => continue,
                }
            }
            match self.rx.recv().await {
                // Already handed out from the backlog.
                Ok(ev) if ev.rv <= self.last => {}
                Ok(ev) => {
                    self.last = ev.rv;
                    return Ok(ev);
                }
                Err(RecvError::Lagged(_)) => match self.store.watch_from(self.last) {
                    Ok((backlog, rx)) => {
                        self.backlog = backlog.into();
                        self.rx = rx;
                    }
                    Err(_) => {
                        let (rx, now) = self.store.subscribe();
                        (self.rx, self.last) = (rx, now);
                        return Err(Gap::Missed);
                    }
                },
                Err(RecvError::Closed) => return Err(Gap::Closed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::history::LIVE_EVENTS;
    use super::super::{Mutation, ObjKey, StoreError};
    use super::*;
    use serde_json::json;

    fn put(store: &Store, name: &str) {
        let _ = store.mutate::<StoreError>(&ObjKey::configmap(name), |_, _| {
            Ok(Mutation::Put(json!({"metadata": {"name": name}})))
        });
    }

    #[tokio::test]
    async fn a_follower_behind_the_live_ring_gets_every_event_in_order() {
        let store = Store::memory(100_000);
        let mut feed = Feed::from_now(&store);
        let n = LIVE_EVENTS * 3;
        for i in 0..n {
            put(&store, &format!("c{i}"));
        }
        for i in 0..n {
            let ev = feed.next().await.expect("kept in the history");
            assert_eq!(ev.key.name, format!("c{i}"));
        }
        put(&store, "last");
        assert_eq!(
            feed.next().await.map(|e| e.key.name.clone()),
            Ok("last".into())
        );
        assert_eq!(feed.rv(), store.current_rv());
    }

    #[tokio::test]
    async fn a_follower_whose_events_were_compacted_is_told_and_goes_on_from_now() {
        let store = Store::memory(LIVE_EVENTS);
        let mut feed = Feed::from_now(&store);
        for i in 0..LIVE_EVENTS * 3 {
            put(&store, &format!("c{i}"));
        }
        assert_eq!(feed.next().await.err(), Some(Gap::Missed));
        put(&store, "after");
        assert_eq!(
            feed.next().await.map(|e| e.key.name.clone()),
            Ok("after".into())
        );
    }
}
