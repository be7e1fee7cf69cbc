//! `gantry node exporter`: a dcgm-exporter drop-in reading NVML directly. A sampler thread
//! reads the backend every collect interval into an immutable snapshot and renders the
//! exposition once; `/metrics` hands out the last rendered body, so a scrape never waits on
//! NVML or the kubelet. Pod attribution is refreshed from the PodResources API on its own timer.

pub mod args;
pub mod fields;
pub mod render;
pub mod sample;
mod task;
mod upstream_flags;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use gantry_gpu::{Backend, GpuError};
use thiserror::Error;

use crate::host::pod_resources as pods;
pub use crate::host::pod_resources::{Assignment, PodRef, ResourceFilter};
pub use fields::{MetricSet, default_set, parse_csv};
pub use render::{CONTENT_TYPE, RenderOptions};
pub use sample::{Entity, Snapshot, Value};

/// dcgm-exporter's defaults.
pub const DEFAULT_ADDRESS: &str = "0.0.0.0:9400";
pub const DEFAULT_COLLECT_INTERVAL: Duration = Duration::from_secs(30);
/// How often pod attribution is refreshed (dcgm-exporter asks the kubelet on every scrape).
pub const DEFAULT_POD_RESOURCES_INTERVAL: Duration = Duration::from_secs(5);
const POD_RESOURCES_TIMEOUT: Duration = Duration::from_secs(10);

/// Failures that stop the exporter; each names what is wrong.
#[derive(Debug, Error)]
pub enum ExporterError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("metrics CSV {path}: {message}")]
    Csv { path: String, message: String },
    #[error("listening on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serving metrics: {0}")]
    Serve(#[source] std::io::Error),
    #[error("starting the sampler thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Everything the exporter is configured with.
#[derive(Debug, Clone)]
pub struct ExporterOptions {
    pub address: SocketAddr,
    pub collect_interval: Duration,
    pub metrics: MetricSet,
    /// Kubelet PodResources socket; `None` turns attribution off.
    pub pod_resources_socket: Option<PathBuf>,
    pub pod_resources_interval: Duration,
    /// A scrape finding the attribution older than this refreshes it first, as dcgm-exporter
    /// asks the kubelet on every scrape (`None`: only every `pod_resources_interval`).
    pub pod_resources_max_age: Option<Duration>,
    pub resource_filter: ResourceFilter,
    pub render: RenderOptions,
}

impl Default for ExporterOptions {
    fn default() -> Self {
        ExporterOptions {
            address: SocketAddr::from(([0, 0, 0, 0], 9400)),
            collect_interval: DEFAULT_COLLECT_INTERVAL,
            metrics: default_set(),
            pod_resources_socket: None,
            pod_resources_interval: DEFAULT_POD_RESOURCES_INTERVAL,
            pod_resources_max_age: None,
            resource_filter: ResourceFilter::default(),
            render: RenderOptions::default(),
        }
    }
}

/// Read a dcgm-exporter metrics CSV; `None` = the built-in default set. Unknown fields are
/// logged and skipped (they have no NVML source here).
pub fn load_metric_set(path: Option<&Path>) -> Result<MetricSet, ExporterError> {
    let Some(path) = path else {
        return Ok(default_set());
    };
    let err = |message: String| ExporterError::Csv {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let set = parse_csv(&text).map_err(err)?;
    if !set.unsupported.is_empty() {
        tracing::warn!(file = %path.display(), fields = ?set.unsupported, "metrics CSV names fields this exporter cannot read; skipping them");
    }
    if set.metrics.is_empty() {
        // dcgm-exporter would serve it (NvSwitch/CPU-only sets, say): serve an empty set and
        // say so instead of stopping the pod.
        tracing::warn!(file = %path.display(), "metrics CSV selects no metric this exporter can read; /metrics will carry no GPU series");
    }
    Ok(set)
}

struct Shared {
    set: MetricSet,
    render: RenderOptions,
    sampler: Mutex<sample::Sampler>,
    snapshot: RwLock<Arc<Snapshot>>,
    pods: RwLock<Arc<Vec<Assignment>>>,
    /// When pod attribution was last read (held while it is read: one refresh at a time).
    attribution: tokio::sync::Mutex<Option<Instant>>,
    /// The last body's length: the next render's buffer starts that large.
    last_len: std::sync::atomic::AtomicUsize,
    body: RwLock<Bytes>,
}

impl Shared {
    fn sample(&self) -> Result<(), GpuError> {
        let snap = match self.sampler.lock() {
            Ok(mut s) => s.sample()?,
            Err(_) => return Ok(()),
        };
        if let Ok(mut w) = self.snapshot.write() {
            *w = Arc::new(snap);
        }
        self.rerender();
        Ok(())
    }

    fn rerender(&self) {
        let snap = self.snapshot.read().map(|s| s.clone()).unwrap_or_default();
        let pods = self.pods.read().map(|p| p.clone()).unwrap_or_default();
        // A fresh buffer handed over to the body (no second copy kept per exporter: at
        // thousands of simulated nodes with 8 GPUs that copy was ~47 KB a node).
        let mut buf = String::with_capacity(self.last_len.load(Ordering::Relaxed));
        render::render(&mut buf, &self.set, &snap, &pods, &self.render);
        self.last_len.store(buf.len(), Ordering::Relaxed);
        let body = Bytes::from(buf);
        if let Ok(mut w) = self.body.write() {
            *w = body;
        }
    }
}

/// A running exporter: the sampler and the XID watch plus the rendered body. Stops them on drop.
pub struct Exporter {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    opts: ExporterOptions,
    _running: Running,
}

/// Where the sampler and the XID watch run; dropping it stops them.
enum Running {
    /// One task, where the XID stream wakes its reader (see [`task`]).
    Task { _stop: task::Stop },
    /// Two threads, where it blocks (NVML): the sampler ends when this sender goes, the XID
    /// watch on the exporter's `stop`.
    Threads {
        _sampler: std::sync::mpsc::Sender<()>,
    },
}

/// The sampler on a thread of its own, and the XID watch on another when there is a stream.
fn spawn_threads(
    sample: task::Sample,
    interval: Duration,
    xid_events: Option<Box<dyn gantry_gpu::EventStream>>,
    xids: Arc<sample::XidLog>,
    stop: Arc<AtomicBool>,
) -> Result<Running, ExporterError> {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("exporter-sampler".into())
        .spawn(move || {
            // Wakes on the interval; a dropped sender (exporter gone) ends the loop.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stop_rx.recv_timeout(interval)
            {
                if let Err(e) = sample() {
                    crate::warn_limited!(
                        "exporter sampling",
                        error = %e,
                        "sampling GPUs failed; serving the previous sample"
                    );
                }
            }
        })
        .map_err(ExporterError::Thread)?;
    if let Some(mut stream) = xid_events {
        std::thread::Builder::new()
            .name("exporter-xid".into())
            .spawn(move || sample::follow_xids(stream.as_mut(), &xids, &stop))
            .map_err(ExporterError::Thread)?;
    }
    Ok(Running::Threads { _sampler: stop_tx })
}

impl Exporter {
    /// Take the first sample (so the first scrape has data), then start the background threads.
    pub fn start(opts: ExporterOptions, backend: Arc<dyn Backend>) -> Result<Self, ExporterError> {
        let xids = Arc::new(sample::XidLog::default());
        let sampler = sample::Sampler::new(backend.clone(), &opts.metrics, xids.clone());
        let shared = Arc::new(Shared {
            set: opts.metrics.clone(),
            render: opts.render.clone(),
            sampler: Mutex::new(sampler),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            pods: RwLock::new(Arc::new(Vec::new())),
            attribution: tokio::sync::Mutex::new(None),
            last_len: Default::default(),
            body: RwLock::new(Bytes::new()),
        });
        shared.sample()?;
        let stop = Arc::new(AtomicBool::new(false));
        let interval = opts.collect_interval;
        let sample: task::Sample = {
            let s = shared.clone();
            Arc::new(move || s.sample())
        };
        let mut xid_events = backend
            .subscribe(gantry_gpu::event_kind::XID_CRITICAL)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "cannot subscribe to XID events; DCGM_FI_DEV_XID_ERRORS stays 0")
            })
            .ok();
        let running = match task::spawn(sample.clone(), interval, &mut xid_events, &xids) {
            Some(t) => Running::Task { _stop: t },
            None => spawn_threads(sample, interval, xid_events, xids, stop.clone())?,
        };
        Ok(Exporter {
            shared,
            stop,
            opts,
            _running: running,
        })
    }

    /// Sample now (tests, and the sim after it changes a GPU).
    pub fn sample_now(&self) -> Result<(), GpuError> {
        self.shared.sample()
    }

    /// Refresh pod attribution from the kubelet now. No socket = attribution off.
    pub async fn refresh_pods(&self) -> Result<(), pods::PodResourcesError> {
        refresh_pods(&self.shared, &self.opts).await
    }

    /// The current exposition body.
    pub fn body(&self) -> Bytes {
        self.shared
            .body
            .read()
            .map(|b| b.clone())
            .unwrap_or_default()
    }

    /// The last snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared
            .snapshot
            .read()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// `/metrics`, `/health` and an index page.
    pub fn router(&self) -> axum::Router {
        let shared = self.shared.clone();
        let opts = Arc::new(self.opts.clone());
        axum::Router::new()
            .route(
                "/metrics",
                get(move || {
                    let (shared, opts) = (shared.clone(), opts.clone());
                    async move {
                        if let Some(age) = opts.pod_resources_max_age {
                            refresh_attribution(&shared, &opts, Some(age)).await;
                        }
                        let body = shared.body.read().map(|b| b.clone()).unwrap_or_default();
                        (
                            [
                                (header::CONTENT_TYPE, CONTENT_TYPE),
                                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                            ],
                            body,
                        )
                    }
                }),
            )
            .route("/health", get(|| async { "OK" }))
            .route(
                "/",
                get(|| async {
                    Html("<html><head><title>Gantry GPU exporter</title></head><body><h1>Gantry GPU exporter</h1><p><a href=\"/metrics\">Metrics</a></p><p><a href=\"/health\">Health</a></p></body></html>")
                        .into_response()
                }),
            )
    }

    /// Serve on `listener` until `shutdown`, refreshing pod attribution in the background.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ExporterError> {
        let pods_task = self.opts.pod_resources_socket.is_some().then(|| {
            let this = self.pod_refresher();
            tokio::spawn(this)
        });
        let result = axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ExporterError::Serve);
        if let Some(t) = pods_task {
            t.abort();
        }
        result
    }

    fn pod_refresher(&self) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        let opts = self.opts.clone();
        async move {
            let mut tick = tokio::time::interval(opts.pod_resources_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                refresh_attribution(&shared, &opts, None).await;
            }
        }
    }
}

/// Refreshes pod attribution, unless it is younger than `max_age`.
async fn refresh_attribution(shared: &Shared, opts: &ExporterOptions, max_age: Option<Duration>) {
    let mut last = shared.attribution.lock().await;
    if let (Some(age), Some(at)) = (max_age, *last)
        && at.elapsed() < age
    {
        return;
    }
    let result = refresh_pods(shared, opts).await;
    *last = Some(Instant::now());
    if let Err(e) = result {
        crate::warn_limited!(
            "exporter pod attribution",
            error = %e,
            "pod attribution skipped this round"
        );
    }
}

/// List the kubelet's assignments and re-render when they changed. Each refresh connects
/// anew, as dcgm-exporter does on each scrape: a kept HTTP/2 connection holds ~40 KB of
/// codec buffers at each end, which across thousands of simulated nodes was more memory than
/// the handshakes cost in CPU.
async fn refresh_pods(
    shared: &Shared,
    opts: &ExporterOptions,
) -> Result<(), pods::PodResourcesError> {
    let Some(socket) = &opts.pod_resources_socket else {
        return Ok(());
    };
    let list = pods::list(socket, POD_RESOURCES_TIMEOUT).await?;
    let assignments = list
        .map(|l| pods::assignments(&l, &opts.resource_filter))
        .unwrap_or_default();
    let changed = shared
        .pods
        .read()
        .map(|p| **p != assignments)
        .unwrap_or(true);
    if changed {
        if let Ok(mut w) = shared.pods.write() {
            *w = Arc::new(assignments);
        }
        shared.rerender();
    }
    Ok(())
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
