//! What every long-running Gantry process (the operator, the scheduler) needs around its pure
//! core, written once:
//!
//! - [`client`]: an API client from a kubeconfig, in-cluster config or `KUBECONFIG`;
//! - [`events`]: the one Events recorder (counted, spaced repeats, as client-go's);
//! - [`lease`]: leader election on a `coordination.k8s.io/v1` Lease;
//! - [`health`]: the `/metrics` `/healthz` `/readyz` server;
//! - [`shutdown`]: SIGTERM / Ctrl-C as a future, and as a `watch` flag;
//! - [`paged`]: lists in pages;
//! - [`rounds`]: the round loop every controller runs (list, decide, write; woken by
//!   watches, a requeue, never faster than a minimum interval; failed rounds retried with
//!   [`backoff`]);
//! - [`backoff`]: capped, jittered exponential backoff and rate-limited failure logs;
//! - [`expectations`]: created objects a controller waits to see in its watch;
//! - [`task`]: a task aborted with its owner (`AbortOnDrop`);
//! - [`touch`]: watched objects decoded only as far as a change trigger needs;
//! - [`ensure_namespace`].

pub mod backoff;
pub mod client;
pub mod events;
pub mod expectations;
pub mod health;
pub mod lease;
pub mod paged;
pub mod rounds;
pub mod shutdown;
pub mod task;
pub mod tls;
pub mod touch;

pub use client::{ClientError, client};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};

/// Create namespace `name` unless it exists (another writer creating it first is fine).
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// This replica's identity in a Lease: `$HOSTNAME` (else `/etc/hostname`, else `fallback`)
/// and the process id.
pub fn identity(fallback: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| fallback.to_string());
    format!("{host}-{}", std::process::id())
}
