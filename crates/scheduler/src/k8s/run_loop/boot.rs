//! Start-up: leader election (the Lease, renewed in the background), the namespace, KAI's
//! CRDs, default queues and PriorityClasses; then the loop.

use super::*;

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

pub(super) async fn install_crds(client: &kube::Client) {
    let Ok(all) = gantry_api::crds::all_crds() else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    // KAI's own: Queue and PodGroup (scheduling.run.ai) and Topology (kai.scheduler).
    let topology_group = <gantry_api::kai::Topology as kube::Resource>::group(&());
    let kai = |g: &str| g == names::KAI_GROUP || g == topology_group;
    for crd in all.into_iter().filter(|c| kai(&c.spec.group)) {
        if let Err(e) = api.create(&PostParams::default(), &crd).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(crd = ?crd.metadata.name, error = %e, "could not install CRD");
        }
    }
}

pub(super) async fn create_default_queues(client: &kube::Client) {
    let api: Api<Queue> = Api::all(client.clone());
    let open = json!({"quota": 0, "limit": -1, "overQuotaWeight": 1});
    for (name, parent) in [
        (names::DEFAULT_PARENT_QUEUE, None),
        (names::DEFAULT_QUEUE, Some(names::DEFAULT_PARENT_QUEUE)),
    ] {
        let mut spec = json!({"resources": {"gpu": open, "cpu": open, "memory": open}});
        if let Some(p) = parent {
            spec["parentQueue"] = json!(p);
        }
        let q: Result<Queue, _> = serde_json::from_value(json!({
            "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name}, "spec": spec,
        }));
        if let Ok(q) = q
            && let Err(e) = api.create(&PostParams::default(), &q).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(queue = name, error = %e, "could not create default queue");
        }
    }
}

/// KAI's PriorityClasses (`train` 50, `build-preemptible` 75, `build` 100, `inference` 125),
/// created when missing so KAI's examples and docs work as written. Existing classes of those
/// names are left as they are.
pub(super) async fn create_priority_classes(client: &kube::Client) {
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in names::KAI_PRIORITY_CLASSES {
        let preemptible = value < names::NON_PREEMPTIBLE_PRIORITY_THRESHOLD;
        let pc: Result<PriorityClass, _> = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": false,
            "description": format!(
                "KAI workload priority {name} ({})",
                if preemptible { "preemptible" } else { "non-preemptible, runs only within its queue's quota" }
            ),
        }));
        if let Ok(pc) = pc
            && let Err(e) = api.create(&PostParams::default(), &pc).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(priority_class = name, error = %e, "could not create KAI priority class");
        }
    }
}
