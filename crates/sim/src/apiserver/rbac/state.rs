//! RBAC's state kept in the server: the ServiceAccount tokens it issued and its decision
//! counts.

use super::tokens::Tokens;
use std::sync::atomic::{AtomicU64, Ordering};

/// RBAC's state: issued ServiceAccount tokens and decision counts.
#[derive(Default)]
pub struct Rbac {
    pub(super) tokens: Tokens,
    pub(super) allowed: AtomicU64,
    pub(super) denied: AtomicU64,
}

impl Rbac {
    /// Requests of ServiceAccounts RBAC refused since start.
    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    /// Requests of ServiceAccounts RBAC allowed since start.
    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }
}
