//! Locking the node's shared state.

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking task must not wedge the whole node.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
