//! `gantry operator`: creates its namespace, serves `/metrics` `/healthz` `/readyz`, and —
//! while it holds the Lease `gantry-operator` (or always, without leader election) — runs
//! every operator controller.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use gantry_runtime::lease::{Lease, LeaseConfig};
use gantry_runtime::shutdown;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::reconcile::{self, ReconcileOptions};

/// Default operator namespace (env `OPERATOR_NAMESPACE`).
pub const DEFAULT_NAMESPACE: &str = "gpu-operator";
/// The Lease the operator replicas compete for.
pub const LEASE_NAME: &str = "gantry-operator";
/// The image operand DaemonSets run when none is given (env `GANTRY_IMAGE`): the tag
/// `scripts/image.sh` gives the image (one constant, in `render::image`).
pub use crate::render::DEFAULT_IMAGE;

#[derive(Clone)]
pub struct RunOptions {
    pub namespace: String,
    /// The image operand DaemonSets run (`gantry node …`).
    pub image: String,
    /// Where to serve metrics and health; `None`: not served.
    pub metrics_address: Option<SocketAddr>,
    pub leader_elect: bool,
    /// This replica's identity in the Lease (default: hostname and pid).
    pub identity: String,
    /// Metrics handle (create one to read counts in-process).
    pub metrics: Metrics,
    /// Labels of the operator's pods (the metrics Service selects them); empty: upstream's.
    pub operator_labels: std::collections::BTreeMap<String, String>,
}

impl RunOptions {
    pub fn new(namespace: impl Into<String>, image: impl Into<String>) -> Self {
        RunOptions {
            namespace: namespace.into(),
            image: image.into(),
            metrics_address: None,
            leader_elect: true,
            identity: gantry_runtime::identity("gantry"),
            metrics: Metrics::default(),
            operator_labels: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("creating the operator namespace {namespace}: {source}")]
    Namespace {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Client(#[from] gantry_runtime::ClientError),
    #[error("serving metrics on {address}: {source}")]
    Metrics {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A client from `kubeconfig`, else in-cluster config, else `KUBECONFIG` / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, RunError> {
    Ok(gantry_runtime::client(kubeconfig).await?)
}

/// Start every operator controller; they stop when `stop` turns true.
fn spawn_controllers(
    client: &kube::Client,
    opts: &RunOptions,
    stop: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let stopped = shutdown::wait;
    let mut tasks = Vec::new();
    let ropts = ReconcileOptions {
        namespace: opts.namespace.clone(),
        image: opts.image.clone(),
        image_env: reconcile::image_env_from_process(),
        operator_labels: opts.operator_labels.clone(),
    };
    // One node watch for all the controllers; it stops when they have all stopped.
    let nodes = crate::node_watch::NodeWatch::start(client.clone());
    tasks.push(tokio::spawn(reconcile::run(
        client.clone(),
        ropts,
        opts.metrics.clone(),
        nodes.clone(),
        stopped(stop.clone()),
    )));
    // Further controllers (driver upgrade, MigClusterPolicy) are spawned here, one line
    // each, with `stopped(stop.clone())` as their shutdown future.
    tasks.push(tokio::spawn(crate::upgrade::run(
        client.clone(),
        crate::upgrade::UpgradeOptions::new(&opts.namespace),
        nodes.clone(),
        stopped(stop.clone()),
    )));
    tasks.push(tokio::spawn(crate::migpolicy::run(
        client.clone(),
        crate::migpolicy::MigPolicyOptions::new(&opts.namespace),
        nodes.clone(),
        stopped(stop.clone()),
    )));
    let mut nv = crate::nvdriver::NvDriverOptions::new(&opts.namespace);
    nv.image = opts.image.clone();
    nv.image_env = reconcile::image_env_from_process();
    tasks.push(tokio::spawn(crate::nvdriver::run(
        client.clone(),
        nv,
        nodes,
        stopped(stop.clone()),
    )));
    tasks
}

/// Run the operator until `shutdown` resolves.
pub fn run(
    client: kube::Client,
    opts: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> futures::future::BoxFuture<'static, Result<(), RunError>> {
    run_boxed(client, opts, Box::pin(shutdown))
}

// Not generic and never inlined, so the body's state machine is compiled here once, not in
// every crate that calls [`run`] (docs/benchmarks.md, "Build time").
#[inline(never)]
fn run_boxed(
    client: kube::Client,
    opts: RunOptions,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> futures::future::BoxFuture<'static, Result<(), RunError>> {
    Box::pin(run_inner(client, opts, shutdown))
}

async fn run_inner(
    client: kube::Client,
    opts: RunOptions,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> Result<(), RunError> {
    let shut_rx = shutdown::flag(shutdown);
    gantry_runtime::ensure_namespace(&client, &opts.namespace)
        .await
        .map_err(|source| RunError::Namespace {
            namespace: opts.namespace.clone(),
            source,
        })?;
    if let Some(address) = opts.metrics_address {
        crate::metrics::serve(
            address,
            opts.metrics.clone(),
            shutdown::wait(shut_rx.clone()),
        )
        .await
        .map_err(|source| RunError::Metrics { address, source })?;
    }

    if !opts.leader_elect {
        opts.metrics.set_leader(true);
        let tasks = spawn_controllers(&client, &opts, shut_rx.clone());
        for t in tasks {
            let _ = t.await;
        }
        return Ok(());
    }

    let lease = Lease::new(
        client.clone(),
        LeaseConfig {
            namespace: opts.namespace.clone(),
            name: LEASE_NAME.into(),
            identity: opts.identity.clone(),
            duration: Duration::from_secs(15),
        },
    );
    let renew_every = Duration::from_secs(5);
    let retry_every = Duration::from_secs(2);
    let mut term: Option<(watch::Sender<bool>, Vec<JoinHandle<()>>)> = None;
    let mut shut = shut_rx.clone();
    loop {
        let held = match lease.try_acquire_or_renew().await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "leader election");
                false
            }
        };
        opts.metrics.set_leader(held);
        match (&term, held) {
            (None, true) => {
                tracing::info!(identity = %opts.identity, "became leader");
                let (tx, rx) = watch::channel(false);
                let tasks = spawn_controllers(&client, &opts, rx);
                term = Some((tx, tasks));
            }
            (Some(_), false) => {
                tracing::warn!("lost leadership; stopping controllers");
                if let Some((tx, tasks)) = term.take() {
                    let _ = tx.send(true);
                    for t in tasks {
                        let _ = t.await;
                    }
                }
            }
            _ => {}
        }
        let wait = if held { renew_every } else { retry_every };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shut.wait_for(|s| *s) => break,
        }
    }
    if let Some((tx, tasks)) = term.take() {
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        if let Err(e) = lease.release().await {
            tracing::debug!(error = %e, "releasing the lease");
        }
    }
    Ok(())
}
