//! `gantry bench device-plugin`: Allocate and GetPreferredAllocation latency over real gRPC
//! on a unix socket, against the plugin running in-process on simulated GPUs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_gpu::{Backend, SimBackend, SimConfig};
use tokio::sync::{oneshot, watch};

use gantry_node::device_plugin::DevicePluginError;
use gantry_node::device_plugin::load::ConfigSource;
use gantry_node::device_plugin::settings::{
    DeviceSelector, ReplicatedResource, Settings, Sharing, SharingKind,
};
use gantry_node::device_plugin::uds;
use gantry_node::device_plugin::{Options, PluginStatus, run};
use gantry_node::proto::deviceplugin as pb;
use gantry_node::proto::deviceplugin::device_plugin_client::DevicePluginClient;

/// One measured configuration.
#[derive(Debug, Clone)]
pub struct BenchCase {
    pub name: &'static str,
    pub model: &'static str,
    pub gpus: u32,
    /// Time-slicing replicas per GPU (`None` = whole GPUs).
    pub replicas: Option<u32>,
    /// Devices per request (Allocate) and allocation size (GetPreferredAllocation).
    pub request_size: usize,
}

/// The two configurations: 8 whole GPUs, and 1,000 replicas (8 GPUs × 125).
pub fn default_cases() -> Vec<BenchCase> {
    vec![
        BenchCase {
            name: "8 GPUs",
            model: "H100-80GB",
            gpus: 8,
            replicas: None,
            request_size: 2,
        },
        BenchCase {
            name: "1,000 replicas",
            model: "H100-80GB",
            gpus: 8,
            replicas: Some(125),
            request_size: 4,
        },
    ]
}

/// Latency of one RPC in one configuration, in microseconds.
#[derive(Debug, Clone)]
pub struct BenchRow {
    pub case: &'static str,
    pub rpc: &'static str,
    pub calls: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

pub fn run_bench<'a>(
    cases: &'a [BenchCase],
    calls: usize,
) -> futures::future::BoxFuture<'a, Result<Vec<BenchRow>, DevicePluginError>> {
    Box::pin(run_bench_inner(cases, calls))
}

async fn run_bench_inner(
    cases: &[BenchCase],
    calls: usize,
) -> Result<Vec<BenchRow>, DevicePluginError> {
    let mut rows = Vec::new();
    for case in cases {
        rows.extend(bench_case(case, calls).await?);
    }
    Ok(rows)
}

async fn bench_case(case: &BenchCase, calls: usize) -> Result<Vec<BenchRow>, DevicePluginError> {
    let config = SimConfig::for_model(case.model, case.gpus, 1)?;
    let backend: Arc<dyn Backend> = Arc::new(SimBackend::new(config));
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).map_err(|e| DevicePluginError::io(&dir, e))?;
    let settings = match case.replicas {
        None => Settings::default(),
        Some(replicas) => Settings {
            sharing: Some(Sharing {
                kind: SharingKind::TimeSlicing,
                fail_requests_greater_than_one: false,
                resources: vec![ReplicatedResource {
                    name: gantry_api::names::RESOURCE_GPU.into(),
                    rename: None,
                    devices: DeviceSelector::All,
                    replicas,
                }],
            }),
            ..Settings::default()
        },
    };
    let mut opts = Options::new(&dir);
    opts.kubelet_socket = None;
    opts.config = ConfigSource::Inline(Box::new(settings));
    opts.mig_minors_file = None;
    let (status_tx, mut status) = watch::channel(PluginStatus::default());
    opts.status = Some(status_tx);
    let (stop, stopped) = oneshot::channel::<()>();
    let plugin = tokio::spawn(run(opts, backend, async {
        let _ = stopped.await;
    }));
    let result = async {
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            status.wait_for(|s| !s.resources.is_empty()),
        )
        .await;
        let socket = dir.join("nvidia-gpu.sock");
        let channel = uds::connect(&socket, Duration::from_secs(5))
            .await
            .map_err(|e| DevicePluginError::Serve {
                resource: "nvidia.com/gpu".into(),
                socket: socket.clone(),
                message: e.to_string(),
            })?;
        let mut client = DevicePluginClient::new(channel);
        let ids = first_list(&mut client, &socket).await?;
        measure(case, &mut client, &ids, calls).await
    }
    .await;
    let _ = stop.send(());
    let _ = plugin.await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn first_list(
    client: &mut DevicePluginClient<tonic::transport::Channel>,
    socket: &std::path::Path,
) -> Result<Vec<String>, DevicePluginError> {
    let err = |message: String| DevicePluginError::Serve {
        resource: "nvidia.com/gpu".into(),
        socket: socket.to_path_buf(),
        message,
    };
    let mut stream = client
        .list_and_watch(pb::Empty {})
        .await
        .map_err(|e| err(e.to_string()))?
        .into_inner();
    let first = stream.message().await.map_err(|e| err(e.to_string()))?;
    Ok(first
        .map(|m| m.devices.into_iter().map(|d| d.id).collect())
        .unwrap_or_default())
}

async fn measure(
    case: &BenchCase,
    client: &mut DevicePluginClient<tonic::transport::Channel>,
    ids: &[String],
    calls: usize,
) -> Result<Vec<BenchRow>, DevicePluginError> {
    let rpc_err = |e: tonic::Status| DevicePluginError::Serve {
        resource: "nvidia.com/gpu".into(),
        socket: PathBuf::from("nvidia-gpu.sock"),
        message: e.to_string(),
    };
    let n = ids.len().max(1);
    let warmup = calls / 10 + 1;
    let mut alloc = Vec::with_capacity(calls);
    let mut pref = Vec::with_capacity(calls);
    for i in 0..warmup + calls {
        // Rotate through the devices so every call asks for a different set.
        let request: Vec<String> = (0..case.request_size)
            .map(|k| ids[(i * case.request_size + k) % n].clone())
            .collect();
        let t = Instant::now();
        client
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: request,
                }],
            })
            .await
            .map_err(rpc_err)?;
        let a = t.elapsed();
        // The kubelet sends the free devices; here a rotating window of three quarters.
        let available: Vec<String> = (0..n * 3 / 4).map(|k| ids[(i + k) % n].clone()).collect();
        let t = Instant::now();
        client
            .get_preferred_allocation(pb::PreferredAllocationRequest {
                container_requests: vec![pb::ContainerPreferredAllocationRequest {
                    available_device_i_ds: available,
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: case.request_size as i32,
                }],
            })
            .await
            .map_err(rpc_err)?;
        let p = t.elapsed();
        if i >= warmup {
            alloc.push(a);
            pref.push(p);
        }
    }
    Ok(vec![
        row(case.name, "Allocate", alloc),
        row(case.name, "GetPreferredAllocation", pref),
    ])
}

fn row(case: &'static str, rpc: &'static str, mut samples: Vec<Duration>) -> BenchRow {
    samples.sort_unstable();
    let pct = |p: f64| {
        let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len().max(1)) - 1;
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    BenchRow {
        case,
        rpc,
        calls: samples.len(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        max_us: samples.last().map_or(0.0, |d| d.as_secs_f64() * 1e6),
    }
}

fn scratch_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("gantry-dp-bench-{}-{nanos}", std::process::id()))
}
