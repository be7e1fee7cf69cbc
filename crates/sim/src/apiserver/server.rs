//! The API server's state ([`ApiServer`]), shared by every request and the controllers. The
//! verbs are its methods, written beside their logic (`objects`, `deletion`, `watch`...);
//! the request path that serves them over HTTP is the parent module's.

use super::rbac::state::Rbac;
use super::requests::RequestCounts;
use super::resources::Registry;
use super::target::Target;
use super::watch::state::WatchCounts;
use crate::store::Store;
use std::sync::OnceLock;

/// The API server state, shared by every request and the controllers.
pub struct ApiServer {
    pub store: Store,
    pub registry: Registry,
    pub(super) token: Option<String>,
    pub(super) address: OnceLock<String>,
    /// ServiceAccount tokens and RBAC's decision counts.
    pub rbac: Rbac,
    /// Recent events' JSON, shared by every watcher that sends them.
    /// Open watches and slow ones closed (`/metrics`).
    pub watches: WatchCounts,
    /// Requests served by verb and resource (`/metrics`).
    pub requests: RequestCounts,
    /// Writes' turns, by client (see [`super::fair`]).
    pub(super) writers: super::fair::FairGate,
    /// The threads writes run on (see [`super::writers`]).
    pub(super) write_threads: super::writers::WriteThreads,
}

/// How many writes are admitted at once (see [`super::fair`]); they run in that order on
/// the [`super::writers`] threads. Each client's writes queue in order, so a kubelet
/// process's node status waits behind its own pod status patches: on 2 cores at 5,000 nodes,
/// 8 admitted at once starved the node status writes (no node allocatable for 100 s); 64
/// converged as fast as admitting every write.
pub(super) const WRITERS: usize = 64;

impl ApiServer {
    /// Records the `host:port` clients reach us at (for discovery).
    pub fn set_address(&self, addr: String) {
        let _ = self.address.set(addr);
    }

    pub fn address(&self) -> String {
        self.address
            .get()
            .cloned()
            .unwrap_or_else(|| "127.0.0.1".into())
    }

    /// A verb target for `group/version/plural` in `namespace`, if served.
    pub fn target(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: &str,
    ) -> Option<Target> {
        let info = self.registry.lookup(group, version, plural)?;
        Some(Target {
            info,
            version: version.to_string(),
            namespace: namespace.to_string(),
        })
    }

    /// Re-reads the stored CRDs into the registry.
    pub fn refresh_crds(&self) {
        let (crds, _) =
            self.store
                .list("apiextensions.k8s.io/customresourcedefinitions", None, None);
        self.registry.set_crds(crds.iter().map(|c| c.as_ref()));
    }
}
