//! What the store holds, by resource: for benchmarks and debugging memory, not for serving.

use super::history::History;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Objects and their size as compact JSON (the in-memory `Value` is a few times larger).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub count: usize,
    pub json_bytes: usize,
}

impl Tally {
    fn add(&mut self, v: &Value) {
        self.add_bytes(serde_json::to_vec(v).map_or(0, |b| b.len()));
    }

    fn add_bytes(&mut self, n: usize) {
        self.count += 1;
        self.json_bytes += n;
    }
}

/// A census of the store at one moment.
#[derive(Debug, Default)]
pub struct Stats {
    /// Current objects by `group/resource`.
    pub current: BTreeMap<String, Tally>,
    /// Events kept for watches, by resource (count only).
    pub events: BTreeMap<String, usize>,
    /// Decoded object versions the newest events (the live ring) hold, current or not, by
    /// resource: the store itself keeps objects as JSON.
    pub history_only: BTreeMap<String, Tally>,
    /// Bytes of the older events' objects, kept packed as JSON, by resource.
    pub packed: BTreeMap<String, usize>,
}

impl Stats {
    /// One row per resource: current objects, kept events, versions the live ring holds decoded.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| resource | objects | JSON MiB | kept events | decoded in the live ring | their JSON MiB | packed MiB |\n|---|---|---|---|---|---|---|\n",
        );
        let mib = |b: usize| format!("{:.1}", b as f64 / f64::from(1 << 20));
        let mut keys: Vec<&String> = self.current.keys().chain(self.events.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let c = self.current.get(k).copied().unwrap_or_default();
            let h = self.history_only.get(k).copied().unwrap_or_default();
            out.push_str(&format!(
                "| {k} | {} | {} | {} | {} | {} | {} |\n",
                c.count,
                mib(c.json_bytes),
                self.events.get(k).copied().unwrap_or(0),
                h.count,
                mib(h.json_bytes),
                mib(self.packed.get(k).copied().unwrap_or(0)),
            ));
        }
        out
    }
}

/// The census of `current` objects (by resource, as the store keeps them: JSON) and the
/// `history`.
pub(super) fn census<'a>(
    current: impl Iterator<Item = (&'a str, &'a Arc<[u8]>)>,
    history: &History,
) -> Stats {
    let mut s = Stats::default();
    for (gr, json) in current {
        s.current
            .entry(gr.to_string())
            .or_default()
            .add_bytes(json.len());
    }
    let mut seen = HashSet::new();
    for (gr, kept) in history.census() {
        *s.events.entry(gr.to_string()).or_default() += 1;
        match kept {
            Ok(values) => {
                for v in values.into_iter().flatten() {
                    let p = Arc::as_ptr(v);
                    if seen.insert(p) {
                        s.history_only.entry(gr.to_string()).or_default().add(v);
                    }
                }
            }
            Err(bytes) => *s.packed.entry(gr.to_string()).or_default() += bytes,
        }
    }
    s
}
