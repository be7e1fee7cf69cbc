//! A summary of each object of one resource, kept up to date from the sim store's events by a
//! task of its own. A bench polls it instead of listing the store: the store keeps objects as
//! JSON, so a list of thousands of Nodes or pods four times a second would decode them all
//! each time and load the server the bench measures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use gantry_sim::store::feed::{Feed, Gap};
use gantry_sim::store::{EventType, Store};
use serde_json::Value;

type Summaries<S> = Arc<Mutex<HashMap<(String, String), S>>>;

pub struct Tally<S> {
    summaries: Summaries<S>,
    task: tokio::task::JoinHandle<()>,
}

impl<S> Drop for Tally<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every object of `gr` (in `namespace`, or all) summarized, read from the store.
fn list<S>(
    store: &Store,
    gr: &str,
    namespace: Option<&str>,
    summarize: fn(&Value) -> S,
) -> HashMap<(String, String), S> {
    let meta = |o: &Value, f: &str| {
        o.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    store
        .list(gr, namespace, None)
        .0
        .iter()
        .map(|o| ((meta(o, "namespace"), meta(o, "name")), summarize(o)))
        .collect()
}

impl<S: Send + 'static> Tally<S> {
    /// Follow `gr` (only `namespace`'s objects when given) from now on.
    pub fn new(
        store: &Store,
        gr: &str,
        namespace: Option<&str>,
        summarize: fn(&Value) -> S,
    ) -> Self {
        // Following before the list: nothing falls between them, and an event the list
        // already holds sets the same summary again.
        let mut feed = Feed::from_now(store);
        let summaries = Arc::new(Mutex::new(list(store, gr, namespace, summarize)));
        let (store, map) = (store.clone(), summaries.clone());
        let (gr, namespace) = (gr.to_string(), namespace.map(str::to_string));
        let task = tokio::spawn(async move {
            loop {
                match feed.next().await {
                    Ok(ev)
                        if ev.key.gr == gr
                            && namespace.as_ref().is_none_or(|n| *n == ev.key.namespace) =>
                    {
                        let key = (ev.key.namespace.clone(), ev.key.name.clone());
                        if ev.kind == EventType::Deleted {
                            lock(&map).remove(&key);
                        } else {
                            lock(&map).insert(key, summarize(&ev.object));
                        }
                    }
                    Ok(_) => {}
                    Err(Gap::Missed) => {
                        *lock(&map) = list(&store, &gr, namespace.as_deref(), summarize);
                    }
                    Err(Gap::Closed) => return,
                }
            }
        });
        Tally { summaries, task }
    }

    /// Reads the summaries as they are now.
    pub fn read<R>(&self, f: impl FnOnce(&HashMap<(String, String), S>) -> R) -> R {
        f(&lock(&self.summaries))
    }
}
