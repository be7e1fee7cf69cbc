//! The cache of Gantry's waste tables ([`super::fill`]): one table per set of task types that
//! can run on a node, built on demand and kept for as long as the mix is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Expected waste of one device, indexed by its free milli.
pub(super) type Table = Arc<[f64]>;

/// Waste tables by the set of task types that can run on a node (a bit per type of the
/// mix). A clone starts empty: tables depend on the mix alone and are rebuilt on demand.
#[derive(Default)]
pub(super) struct FillTables(Mutex<HashMap<Box<[u64]>, Table>>);

impl Clone for FillTables {
    fn clone(&self) -> FillTables {
        FillTables::default()
    }
}

impl PartialEq for FillTables {
    /// A cache: equal mixes have equal tables, whatever each has built so far.
    fn eq(&self, _: &FillTables) -> bool {
        true
    }
}

impl std::fmt::Debug for FillTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        write!(f, "FillTables({n} built)")
    }
}

impl FillTables {
    /// The table for `key` (a bit per type of the mix), built by `build` the first time.
    pub(super) fn get_or_build(
        &self,
        key: Box<[u64]>,
        build: impl FnOnce(&[u64]) -> Table,
    ) -> Table {
        let mut tables = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match tables.get(&key) {
            Some(t) => t.clone(),
            None => {
                let t = build(&key);
                tables.insert(key, t.clone());
                t
            }
        }
    }
}
