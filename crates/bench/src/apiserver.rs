//! `gantry bench apiserver`: creates/s, updates/s and watch events/s delivered to many
//! watchers, through real HTTPS clients, on the memory and the SQLite store.

use futures::{StreamExt, TryStreamExt};
use gantry_sim::{ControlPlane, ControlPlaneOptions, SimError};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
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
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("API call during the benchmark: {0}")]
    Kube(#[from] kube::Error),
    #[error("a watcher stopped after {got} of {want} events")]
    WatchEnded { got: usize, want: usize },
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
    cp.shutdown().await;
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    Ok(BenchRow {
        store: label.to_string(),
        creates_per_s: rate(o.objects, created),
        updates_per_s: rate(o.objects, updated),
        watch_events_per_s: rate(o.watch_writes * o.watchers, watched),
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
