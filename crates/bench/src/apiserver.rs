//! `gantry bench apiserver`: creates/s, updates/s and watch events/s delivered to many
//! watchers, through real HTTPS clients, on the memory and the SQLite store.

use futures::{StreamExt, TryStreamExt};
use gantry_sim::{ControlPlane, ControlPlaneOptions, SimError};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub objects: usize,
    pub concurrency: usize,
    pub watchers: usize,
    /// Writes observed by every watcher in the watch phase.
    pub watch_writes: usize,
}

/// One measured configuration.
#[derive(Debug, Clone)]
pub struct BenchRow {
    pub store: String,
    pub creates_per_s: f64,
    pub updates_per_s: f64,
    pub watch_events_per_s: f64,
    /// Merge patches of pod status (a simulated kubelet's write) per second, and the
    /// process's CPU per patch (server and client: both run here).
    pub pod_status_per_s: f64,
    pub pod_status_cpu_us: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("API call during the benchmark: {0}")]
    Kube(#[from] kube::Error),
    #[error("a watcher stopped after {got} of {want} events")]
    WatchEnded { got: usize, want: usize },
    #[error("building the benchmark's pod: {0}")]
    Pod(#[from] serde_json::Error),
}

fn cm(name: &str, v: usize) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), v.to_string())])),
        ..Default::default()
    }
}

/// A pod shaped like an operand's (the operator validator's: init containers with commands,
/// env, mounts and a security context; host-path volumes), about 5 KB of JSON as stored.
fn operand_pod(name: &str) -> Result<Pod, serde_json::Error> {
    let container = |n: &str| {
        json!({"name": n, "image": "ghcr.io/gantry-dev/gantry:0.1.0",
            "command": ["gantry", "node", "validator", "--component", n, "--wait"],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "OPERATOR_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "MIG_STRATEGY", "value": "single"}],
            "securityContext": {"privileged": true, "runAsUser": 0},
            "volumeMounts": [{"name": "run-nvidia-validations", "mountPath": "/run/nvidia/validations", "mountPropagation": "Bidirectional"},
                {"name": "host-root", "mountPath": "/host", "readOnly": true},
                {"name": "driver-install-dir", "mountPath": "/run/nvidia/driver", "readOnly": true}]})
    };
    let volume = |n: &str, path: &str| json!({"name": n, "hostPath": {"path": path}});
    let inits = ["driver", "toolkit", "cuda", "plugin"].map(container);
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "nvidia-operator-validator"}},
        "spec": {
            "initContainers": inits,
            "containers": [container("validator")],
            "volumes": [volume("run-nvidia-validations", "/run/nvidia/validations"),
                volume("host-root", "/"), volume("driver-install-dir", "/run/nvidia/driver")],
            "serviceAccountName": "nvidia-operator-validator",
            "priorityClassName": "system-node-critical"}
    }))
}

/// A kubelet-like status: conditions and a container status; `n` changes a timestamp.
fn status_patch(n: usize) -> Value {
    let at = format!("2026-12-07T00:{:02}:{:02}Z", (n / 60) % 60, n % 60);
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": at});
    let conditions = [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ]
    .map(cond);
    json!({"status": {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": [{"name": "validator", "ready": true, "restartCount": 0, "started": true,
            "image": "ghcr.io/gantry-dev/gantry:0.1.0", "imageID": "sim://ghcr.io/gantry-dev/gantry:0.1.0",
            "containerID": "sim://validator", "state": {"running": {"startedAt": at}}}],
        "hostIP": "10.64.0.0", "podIP": "10.64.0.1", "startTime": "2026-12-07T00:00:00Z"}})
}

/// Runs `f(i)` for i in 0..n with `conc` in flight; returns the elapsed time.
async fn run_many<F, Fut>(n: usize, conc: usize, f: F) -> Result<Duration, BenchError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), BenchError>>,
{
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(conc.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(start.elapsed())
}

/// Measures one control plane (memory when `data_dir` is None).
pub async fn bench_one(
    label: &str,
    data_dir: Option<PathBuf>,
    o: &BenchOpts,
) -> Result<BenchRow, BenchError> {
    let cp = ControlPlane::start(ControlPlaneOptions {
        data_dir,
        ..Default::default()
    })
    .await?;
    let client = cp.client()?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let created = run_many(o.objects, o.concurrency, |i| {
        let (api, pp) = (api.clone(), pp.clone());
        async move {
            api.create(&pp, &cm(&format!("bench-{i}"), 0)).await?;
            Ok(())
        }
    })
    .await?;
    let updated = run_many(o.objects, o.concurrency, |i| {
        let (api, pp) = (api.clone(), pp.clone());
        async move {
            api.replace(&format!("bench-{i}"), &pp, &cm(&format!("bench-{i}"), 1))
                .await?;
            Ok(())
        }
    })
    .await?;
    // Watch phase: every watcher must see every write.
    let rv = api
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut watchers = Vec::new();
    for _ in 0..o.watchers {
        let stream = api.watch(&WatchParams::default(), &rv).await?;
        let want = o.watch_writes;
        watchers.push(tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            let mut got = 0;
            while got < want {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Modified(_))) => got += 1,
                    Ok(Some(_)) => {}
                    _ => return Err(BenchError::WatchEnded { got, want }),
                }
            }
            Ok(())
        }));
    }
    let start = Instant::now();
    run_many(o.watch_writes, o.concurrency, |i| {
        let (api, pp) = (api.clone(), pp.clone());
        async move {
            let name = format!("bench-{}", i % o.objects.max(1));
            api.replace(&name, &pp, &cm(&name, i + 2)).await?;
            Ok(())
        }
    })
    .await?;
    for w in watchers {
        match w.await {
            Ok(r) => r?,
            Err(_) => {
                return Err(BenchError::WatchEnded {
                    got: 0,
                    want: o.watch_writes,
                });
            }
        }
    }
    let watched = start.elapsed();
    // Pod status phase: a quarter as many pods, each patched four times.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Answers read as the simulated kubelets read theirs: skipped, not decoded.
    let written: Api<gantry_sim::written::Written<Pod>> =
        Api::namespaced(client.clone(), "default");
    let n_pods = (o.objects / 4).max(1);
    for i in 0..n_pods {
        pods.create(&pp, &operand_pod(&format!("pod-{i}"))?).await?;
    }
    let patches = n_pods * 4;
    let cpu_before = crate::cpu_seconds(std::process::id()).unwrap_or_default();
    let patched = run_many(patches, o.concurrency, |i| {
        let written = written.clone();
        async move {
            let name = format!("pod-{}", i % n_pods);
            let patch = Patch::Merge(status_patch(i));
            written
                .patch_status(&name, &PatchParams::default(), &patch)
                .await?;
            Ok(())
        }
    })
    .await?;
    let cpu = crate::cpu_seconds(std::process::id()).unwrap_or_default() - cpu_before;
    cp.shutdown().await;
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    Ok(BenchRow {
        store: label.to_string(),
        creates_per_s: rate(o.objects, created),
        updates_per_s: rate(o.objects, updated),
        watch_events_per_s: rate(o.watch_writes * o.watchers, watched),
        pod_status_per_s: rate(patches, patched),
        pod_status_cpu_us: cpu * 1e6 / patches as f64,
    })
}

/// Memory, then SQLite in a temporary directory.
// A plain fn returning a boxed future: the body compiles once, here, not again in
// every crate that awaits it (docs/benchmarks.md, "Build time").
pub fn run<'a>(
    o: &'a BenchOpts,
) -> futures::future::BoxFuture<'a, Result<Vec<BenchRow>, BenchError>> {
    Box::pin(run_inner(o))
}

async fn run_inner(o: &BenchOpts) -> Result<Vec<BenchRow>, BenchError> {
    let mem = bench_one("memory", None, o).await?;
    let dir = tempfile::tempdir().map_err(|source| SimError::Io {
        what: "creating temporary directory",
        path: "$TMPDIR".into(),
        error: source,
    })?;
    let sql = bench_one("sqlite", Some(dir.path().to_path_buf()), o).await?;
    Ok(vec![mem, sql])
}
