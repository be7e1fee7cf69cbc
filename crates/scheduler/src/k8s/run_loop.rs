//! `run`: leader election, reflectors, and the loop that owns the cache and runs cycles.
//!
//! - this module: leader election, then the reflectors and the loop;
//! - [`boot`]: what is created at start-up;
//! - [`state`]: the loop's state, and how it takes in watch events and API results;
//! - [`cycle`]: one cycle and the housekeeping after it;
//! - [`writer`]: API writes in spawned tasks;
//! - [`status_task`]: Events and status, written in order.

mod boot;
mod cycle;
mod state;
mod status_task;
mod writer;

use super::cache::Cache;
use super::error::Error;
use super::metrics::Metrics;
use super::options::Options;
use boot::{create_default_queues, create_priority_classes, install_crds};
use futures::StreamExt;
use gantry_api::kai::{PodGroup, Queue, Topology};
use gantry_api::lenient::Lenient;
use gantry_api::names;
use gantry_runtime::lease::{Lease, LeaseConfig};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::Api;
use kube::runtime::watcher;
use state::{Loop, Msg};
use status_task::status_task;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};

/// Run the scheduler until `shutdown` becomes true. With leader election, waits for the
/// Lease first and returns [`Error::LostLease`] if another replica takes it.
// A plain fn returning a boxed future: the body compiles once, here, not again in
// every crate that awaits it (docs/benchmarks.md, "Build time").
pub fn run(
    client: kube::Client,
    opts: Options,
    shutdown: watch::Receiver<bool>,
) -> futures::future::BoxFuture<'static, Result<(), Error>> {
    Box::pin(run_inner(client, opts, shutdown))
}

async fn run_inner(
    client: kube::Client,
    opts: Options,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let metrics = Metrics::new();
    run_with(client, opts, shutdown, metrics).await
}

/// [`run`] with a caller-provided metrics registry.
pub fn run_with(
    client: kube::Client,
    opts: Options,
    shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> futures::future::BoxFuture<'static, Result<(), Error>> {
    Box::pin(run_with_inner(client, opts, shutdown, metrics))
}

async fn run_with_inner(
    client: kube::Client,
    opts: Options,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    if let Some(addr) = opts.metrics_address {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Metrics { addr, source })?;
        tokio::spawn(crate::k8s::metrics::serve(
            l,
            metrics.clone(),
            shutdown.clone(),
        ));
    }
    let lease = Lease::new(
        client.clone(),
        LeaseConfig {
            namespace: opts.namespace.clone(),
            name: names::SCHEDULER_LEASE.to_string(),
            identity: opts.identity.clone(),
            duration: opts.lease_duration,
        },
    );
    if opts.leader_elect {
        if opts.create_namespaces
            && let Err(e) = gantry_runtime::ensure_namespace(&client, &opts.namespace).await
        {
            tracing::warn!(namespace = %opts.namespace, error = %e, "could not create namespace");
        }
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            if lease.try_acquire_or_renew().await? {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(opts.lease_duration / 5) => {}
                _ = shutdown.changed() => {}
            }
        }
        tracing::info!(identity = %opts.identity, "acquired the scheduler lease");
    }
    metrics.leader.set(1);
    // Renew in the background; a failed renewal ends leadership.
    let (lost_tx, mut lost_rx) = watch::channel(false);
    let renew = if opts.leader_elect {
        let (l, sd) = (
            Lease::new(client.clone(), lease.config().clone()),
            shutdown.clone(),
        );
        let every = opts.lease_duration;
        Some(tokio::spawn(async move {
            let mut last_ok = Instant::now();
            loop {
                tokio::time::sleep(every / 3).await;
                if *sd.borrow() {
                    return;
                }
                match l.try_acquire_or_renew().await {
                    Ok(true) => last_ok = Instant::now(),
                    Ok(false) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "renewing the scheduler lease failed");
                        if last_ok.elapsed() > every {
                            break;
                        }
                    }
                }
            }
            let _ = lost_tx.send(true);
        }))
    } else {
        None
    };
    let mut stop = shutdown.clone();
    let res = tokio::select! {
        r = lead(client.clone(), opts.clone(), stop.clone(), metrics.clone()) => r,
        _ = lost_rx.wait_for(|v| *v) => Err(Error::LostLease { namespace: lease.config().namespace.clone(), name: lease.config().name.clone() }),
        _ = stop.wait_for(|v| *v) => Ok(()),
    };
    metrics.leader.set(0);
    metrics.set_ready(false);
    if let Some(r) = renew {
        r.abort();
    }
    if opts.leader_elect
        && !matches!(res, Err(Error::LostLease { .. }))
        && let Err(e) = lease.release().await
    {
        tracing::debug!(error = %e, "releasing the scheduler lease");
    }
    res
}

async fn reflect<K>(api: Api<K>, tx: mpsc::Sender<Msg>, wrap: fn(watcher::Event<K>) -> Msg)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut s = watcher(api, watcher::Config::default()).boxed();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(ev) => {
                if tx.send(wrap(ev)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "watch error (retrying)");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

async fn lead(
    client: kube::Client,
    opts: Options,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    if opts.install_crds {
        install_crds(&client).await;
    }
    if opts.create_namespaces
        && let Err(e) = gantry_runtime::ensure_namespace(&client, &opts.reservation_namespace).await
    {
        tracing::warn!(namespace = %opts.reservation_namespace, error = %e, "could not create namespace");
    }
    if opts.create_default_priority_classes {
        create_priority_classes(&client).await;
    }
    if opts.create_default_queues {
        create_default_queues(&client).await;
    }
    let (tx, mut rx) = mpsc::channel::<Msg>(4096);
    let (status_tx, status_rx) = mpsc::unbounded_channel();
    // A JoinSet aborts its tasks when dropped, so they end when `lead` returns or is dropped
    // (`run` drops it on shutdown): a detached reflector would outlive the scheduler and
    // complain when the API server goes away.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(reflect(Api::<Node>::all(client.clone()), tx.clone(), |e| {
        Msg::Node(Box::new(e))
    }));
    // Lenient: one stored pod a typed client cannot decode must not fail every relist.
    tasks.spawn(reflect(
        Api::<Lenient<Pod>>::all(client.clone()),
        tx.clone(),
        |e| Msg::Pod(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<Queue>::all(client.clone()),
        tx.clone(),
        |e| Msg::Queue(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<PodGroup>::all(client.clone()),
        tx.clone(),
        |e| Msg::Group(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<PriorityClass>::all(client.clone()),
        tx.clone(),
        |e| Msg::Class(Box::new(e)),
    ));
    tasks.spawn(reflect(
        Api::<Topology>::all(client.clone()),
        tx.clone(),
        |e| Msg::Topology(Box::new(e)),
    ));
    tasks.spawn(status_task(
        client.clone(),
        opts.scheduler_name.clone(),
        opts.identity.clone(),
        status_rx,
    ));
    let usage = super::usage::UsageState::start(
        &client,
        opts.config.usage_db_config.clone(),
        &opts.namespace,
        &mut tasks,
    )
    .await;
    let mut lp = Loop {
        usage,
        cache: Cache::new(&opts.scheduler_name, &opts.reservation_namespace),
        bind_slots: Arc::new(Semaphore::new(opts.bind_concurrency.max(1))),
        api_slots: Arc::new(Semaphore::new(opts.bind_concurrency.max(1))),
        client,
        opts,
        metrics,
        tx,
        status_tx,
        grouping: HashSet::new(),
        deleting: HashSet::new(),
        relist: Default::default(),
        said_problem: HashSet::new(),
    };
    // Topologies are optional: a cluster without KAI's Topology CRD still schedules (jobs
    // naming a topology wait until it is listed).
    lp.relist[5].synced = true;
    let mut last_cycle = Instant::now();
    let mut seen_version = u64::MAX;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let res = loop {
        tokio::select! {
            m = rx.recv() => {
                let Some(m) = m else { break Ok(()) };
                lp.handle(m);
                // Drain what is queued so one cycle sees a burst of events.
                while let Ok(m) = rx.try_recv() {
                    lp.handle(m);
                }
            }
            _ = tick.tick() => {}
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break Ok(()); }
            }
        }
        if !lp.relist.iter().all(|r| r.synced) {
            continue; // never decide on a partial view (restart safety)
        }
        let since = last_cycle.elapsed();
        let dirty = lp.cache.version != seen_version;
        if (dirty && since >= Duration::from_millis(100)) || since >= lp.opts.cycle_period {
            seen_version = lp.cache.version;
            last_cycle = Instant::now();
            lp.cycle();
            lp.metrics.set_ready(true);
        }
    };
    drop(tasks);
    res
}
