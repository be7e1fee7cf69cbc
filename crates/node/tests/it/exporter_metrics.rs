//! The exporter on the simulated backend: the default metric set with dcgm-exporter's labels
//! for whole GPUs, MIG devices and time-sliced replicas; pod attribution through a
//! PodResources server on a temp socket; HTTP; and Python's Prometheus parser.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::catalog::{self, GpuModel};
use gantry_gpu::{Backend, SimBackend, SimConfig};
use gantry_node::exporter::{self, Exporter, ExporterOptions, RenderOptions};
use gantry_node::proto::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use gantry_node::proto::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use gantry_testkit::{Look, eventually_secs};

const BASE_LABELS: [&str; 7] = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
];

/// One parsed series line.
#[derive(Debug)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: String,
}

/// A small parser for our own lines (the Python test checks the format for real).
fn parse(body: &str) -> Vec<Series> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, rest) = l.split_once('{').expect("labels");
            let (labels, value) = rest.rsplit_once("} ").expect("value");
            let mut map = BTreeMap::new();
            let mut s = labels;
            while !s.is_empty() {
                let (k, v) = s.split_once("=\"").expect("label");
                let mut end = 0;
                let bytes = v.as_bytes();
                while bytes[end] != b'"' {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                map.insert(k.to_string(), v[..end].to_string());
                s = v[end + 1..].trim_start_matches(',');
            }
            Series {
                name: name.to_string(),
                labels: map,
                value: value.to_string(),
            }
        })
        .collect()
}

fn options() -> ExporterOptions {
    ExporterOptions {
        collect_interval: Duration::from_secs(3600),
        render: RenderOptions {
            hostname: Some("node-a".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn sim(model: &'static GpuModel, count: u32) -> Arc<SimBackend> {
    Arc::new(SimBackend::new(SimConfig::new(model, count, 11)))
}

fn body(e: &Exporter) -> String {
    String::from_utf8(e.body().to_vec()).expect("utf-8")
}

fn mig(b: &SimBackend, gpu: u32, profiles: &[&str]) {
    b.set_mig_mode(gpu, true).expect("enable MIG");
    for p in profiles {
        let gi = b.create_gpu_instance(gpu, p, None).expect("create GI");
        b.create_compute_instance(gpu, gi.id, gi.slices)
            .expect("create CI");
    }
}

#[test]
fn every_default_metric_for_whole_gpus() {
    let b = sim(&catalog::H100_SXM5_80GB, 2);
    b.set_load(1, 0.5, 20_000).expect("load");
    let e = Exporter::start(options(), b.clone()).expect("start");
    let text = body(&e);
    let series = parse(&text);
    let set = exporter::default_set();
    assert_eq!(set.metrics.len(), 25);
    for m in &set.metrics {
        let of: Vec<&Series> = series.iter().filter(|s| s.name == m.name).collect();
        assert_eq!(
            of.len(),
            2,
            "{} should have one series per GPU:\n{text}",
            m.name
        );
        assert!(text.contains(&format!("# TYPE {} {}\n", m.name, m.kind)));
        for (gpu, s) in of.iter().enumerate() {
            let info = b.device_info(gpu as u32).expect("info");
            for l in BASE_LABELS {
                assert!(s.labels.contains_key(l), "{} lacks {l}", m.name);
            }
            assert_eq!(s.labels["gpu"], gpu.to_string());
            assert_eq!(s.labels["UUID"], info.uuid);
            assert_eq!(s.labels["pci_bus_id"], info.pci_bus_id);
            assert_eq!(s.labels["device"], format!("nvidia{gpu}"));
            assert_eq!(s.labels["modelName"], info.name);
            assert_eq!(s.labels["Hostname"], "node-a");
            assert_eq!(s.labels["DCGM_FI_DRIVER_VERSION"], "580.159.04");
            assert!(!s.labels.contains_key("GPU_I_ID"));
            assert!(!s.labels.contains_key("pod"));
        }
    }
    // Counters keep dcgm-exporter's names: no `_total` anywhere.
    assert!(!text.contains("_total{"), "{text}");
    // Values agree with the backend.
    let used = series
        .iter()
        .find(|s| s.name == "DCGM_FI_DEV_FB_USED" && s.labels["gpu"] == "1")
        .expect("fb used");
    assert_eq!(used.value, b.memory(1).expect("mem").used_mib.to_string());
    let power = series
        .iter()
        .find(|s| s.name == "DCGM_FI_DEV_POWER_USAGE")
        .expect("power");
    assert!(power.value.contains('.') && power.value.split('.').nth(1).map(str::len) == Some(6));
}

#[test]
fn pre_hopper_gddr_gpu_has_no_dcp_or_memory_temperature() {
    let b = sim(&catalog::L4, 1);
    let e = Exporter::start(options(), b).expect("start");
    let text = body(&e);
    assert!(!text.contains("DCGM_FI_PROF_"), "{text}");
    assert!(!text.contains("DCGM_FI_DEV_MEMORY_TEMP"), "{text}");
    assert!(text.contains("DCGM_FI_DEV_GPU_UTIL{"));
    assert!(
        text.contains("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{"),
        "PCIe-only boards report 0"
    );
}

#[test]
fn mig_devices_are_series_of_their_own() {
    let model = &catalog::H100_SXM5_80GB;
    let small = model.mig[0].name;
    let b = sim(model, 2);
    mig(&b, 0, &[small, small]);
    let e = Exporter::start(options(), b.clone()).expect("start");
    let text = body(&e);
    let series = parse(&text);
    let devices = b.mig_devices(0).expect("mig devices");
    let gi_ids: Vec<String> = devices
        .iter()
        .map(|d| d.gpu_instance_id.to_string())
        .collect();
    for name in [
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ] {
        let on_gpu0: Vec<&Series> = series
            .iter()
            .filter(|s| s.name == name && s.labels["gpu"] == "0")
            .collect();
        assert_eq!(
            on_gpu0.len(),
            2,
            "{name}: one series per GPU instance\n{text}"
        );
        for s in &on_gpu0 {
            assert_eq!(s.labels["GPU_I_PROFILE"], small);
            assert!(gi_ids.contains(&s.labels["GPU_I_ID"]));
            assert_eq!(s.labels["UUID"], b.device_info(0).expect("info").uuid);
        }
    }
    let fb_total = series
        .iter()
        .find(|s| s.name == "DCGM_FI_DEV_FB_FREE" && s.labels.get("GPU_I_ID") == Some(&gi_ids[0]))
        .expect("fb free of GI");
    let mem = b.mig_device_memory(&devices[0].uuid).expect("mig memory");
    assert_eq!(fb_total.value, mem.free_mib.to_string());
    // Utilisation is not available with MIG on; the MIG-off GPU still has it.
    let util: Vec<&Series> = series
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_GPU_UTIL")
        .collect();
    assert_eq!(util.len(), 1);
    assert_eq!(util[0].labels["gpu"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_events_show_up_after_the_next_sample() {
    let b = sim(&catalog::A100_SXM4_80GB, 2);
    let e = Exporter::start(options(), b.clone()).expect("start");
    // The XID thread subscribes right after start: inject again on every look until it has
    // seen the event.
    let text = eventually_secs("XID 48 on GPU 1 after a sample", 60, || async {
        b.inject_xid(1, 48, None, None)?;
        e.sample_now()?;
        let text = body(&e);
        let xid: Vec<String> = parse(&text)
            .into_iter()
            .filter(|s| s.name == "DCGM_FI_DEV_XID_ERRORS")
            .map(|s| format!("gpu {}: {}", s.labels["gpu"], s.value))
            .collect();
        let found = xid.iter().any(|s| s == "gpu 1: 48");
        Ok::<_, gantry_gpu::GpuError>(if found {
            Look::Done(text)
        } else {
            Look::Seen(format!("DCGM_FI_DEV_XID_ERRORS: {xid:?}"))
        })
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("err_code=\"48\""), "{text}");
}

/// A kubelet PodResources server with a fixed answer.
struct FakeKubelet(ListPodResourcesResponse);

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: tonic::Request<ListPodResourcesRequest>,
    ) -> Result<tonic::Response<ListPodResourcesResponse>, tonic::Status> {
        Ok(tonic::Response::new(self.0.clone()))
    }
    async fn get_allocatable_resources(
        &self,
        _: tonic::Request<AllocatableResourcesRequest>,
    ) -> Result<tonic::Response<AllocatableResourcesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not needed"))
    }
    async fn get(
        &self,
        _: tonic::Request<GetPodResourcesRequest>,
    ) -> Result<tonic::Response<GetPodResourcesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not needed"))
    }
}

fn pod(name: &str, resource: &str, ids: &[String]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: "team-a".into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.to_vec(),
                topology: None,
            }],
            ..Default::default()
        }],
    }
}

async fn serve_kubelet(socket: std::path::PathBuf, resp: ListPodResourcesResponse) {
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind socket");
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(FakeKubelet(resp)))
            .serve_with_incoming(incoming)
            .await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_attributed_for_replicas_and_mig_devices() {
    let model = &catalog::A100_SXM4_40GB;
    let b = sim(model, 3);
    mig(&b, 2, &[model.mig[0].name]);
    let uuid0 = b.device_info(0).expect("info").uuid;
    let uuid1 = b.device_info(1).expect("info").uuid;
    let mig_dev = b.mig_devices(2).expect("mig")[0].clone();
    let resp = ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "shared-a",
                "nvidia.com/gpu.shared",
                &[format!("{uuid0}::0")],
            ),
            pod(
                "shared-b",
                "nvidia.com/gpu.shared",
                &[format!("{uuid0}::1")],
            ),
            pod("whole", "nvidia.com/gpu", std::slice::from_ref(&uuid1)),
            pod(
                "sliced",
                &format!("nvidia.com/mig-{}", model.mig[0].name),
                std::slice::from_ref(&mig_dev.uuid),
            ),
            pod("nic", "example.com/nic", std::slice::from_ref(&uuid1)),
        ],
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    serve_kubelet(socket.clone(), resp).await;

    let mut opts = options();
    opts.pod_resources_socket = Some(socket.clone());
    let b2 = b.clone();
    let o2 = opts.clone();
    let e = tokio::task::spawn_blocking(move || Exporter::start(o2, b2))
        .await
        .expect("join")
        .expect("start");
    e.refresh_pods().await.expect("list pods");
    let series = parse(&body(&e));
    let temp: Vec<&Series> = series
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_GPU_TEMP")
        .collect();
    let on =
        |gpu: &str| -> Vec<&&Series> { temp.iter().filter(|s| s.labels["gpu"] == gpu).collect() };
    // Time-sliced GPU 0: one series per pod sharing it, each with its pod's labels.
    let mut sharing: Vec<&str> = on("0").iter().map(|s| s.labels["pod"].as_str()).collect();
    sharing.sort_unstable();
    assert_eq!(sharing, ["shared-a", "shared-b"]);
    for s in on("0") {
        assert_eq!(s.labels["namespace"], "team-a");
        assert_eq!(s.labels["container"], "main");
    }
    assert_eq!(on("1")[0].labels["pod"], "whole");
    assert_eq!(on("2").len(), 1);
    assert_eq!(on("2")[0].labels["pod"], "sliced");
    assert_eq!(
        on("2")[0].labels["GPU_I_ID"],
        mig_dev.gpu_instance_id.to_string()
    );

    // With virtual GPUs every pod sharing GPU 0 gets its own copy, with its replica number.
    opts.render.virtual_gpus = true;
    let b3 = b.clone();
    let e = tokio::task::spawn_blocking(move || Exporter::start(opts, b3))
        .await
        .expect("join")
        .expect("start");
    e.refresh_pods().await.expect("list pods");
    let series = parse(&body(&e));
    let gpu0: Vec<&Series> = series
        .iter()
        .filter(|s| s.name == "DCGM_FI_DEV_GPU_TEMP" && s.labels["gpu"] == "0")
        .collect();
    assert_eq!(gpu0.len(), 2);
    assert_eq!(gpu0[0].labels["pod"], "shared-a");
    assert_eq!(gpu0[0].labels["vgpu"], "0");
    assert_eq!(gpu0[1].labels["vgpu"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_kubelet_socket_means_no_pod_labels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = options();
    opts.pod_resources_socket = Some(dir.path().join("absent.sock"));
    let b = sim(&catalog::T4, 1);
    let e = tokio::task::spawn_blocking(move || Exporter::start(opts, b))
        .await
        .expect("join")
        .expect("start");
    e.refresh_pods()
        .await
        .expect("absent socket is not an error");
    assert!(!body(&e).contains("pod=\""));
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_metrics_and_health_over_http() {
    let b = sim(&catalog::H200, 1);
    let e = tokio::task::spawn_blocking(move || Exporter::start(options(), b))
        .await
        .expect("join")
        .expect("start");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        e.serve(listener, async {
            let _ = rx.await;
        })
        .await
    });
    let metrics = http_get(addr, "/metrics").await;
    assert!(
        metrics.starts_with("HTTP/1.0 200") || metrics.starts_with("HTTP/1.1 200"),
        "{metrics}"
    );
    assert!(
        metrics
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{metrics}"
    );
    assert!(metrics.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""));
    let health = http_get(addr, "/health").await;
    assert!(health.ends_with("OK"), "{health}");
    let _ = tx.send(());
    server.await.expect("join").expect("clean shutdown");
}

#[test]
fn a_custom_csv_selects_the_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.csv");
    std::fs::write(
        &path,
        "# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, temp\nDCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, dbe\nDCGM_FI_PROF_SM_ACTIVE, gauge, sm\nDCGM_FI_DEV_SERIAL, label, serial\nDCGM_FI_DEV_NOT_A_THING, gauge, x\n",
    )
    .expect("write");
    let set = exporter::load_metric_set(Some(&path)).expect("load");
    assert_eq!(set.unsupported, ["DCGM_FI_DEV_NOT_A_THING"]);
    let mut opts = options();
    opts.metrics = set;
    let b = sim(&catalog::H100_SXM5_80GB, 1);
    let e = Exporter::start(opts, b.clone()).expect("start");
    let text = body(&e);
    let names: std::collections::BTreeSet<String> =
        parse(&text).into_iter().map(|s| s.name).collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_PROF_SM_ACTIVE"
        ]
    );
    let serial = b.device_info(0).expect("info").serial;
    assert!(
        text.contains(&format!("DCGM_FI_DEV_SERIAL=\"{serial}\"")),
        "{text}"
    );
    assert!(!text.contains("DCGM_FI_DRIVER_VERSION"));
    let err =
        exporter::load_metric_set(Some(&dir.path().join("missing.csv"))).expect_err("missing");
    assert!(err.to_string().contains("missing.csv"), "{err}");
}

#[test]
fn exposition_parses_with_python_prometheus_client() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import prometheus_client.parser"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => {
            eprintln!(
                "skipping: python3 with prometheus_client is not installed (pip install prometheus_client)"
            );
            return;
        }
    }
    let model = &catalog::H100_SXM5_80GB;
    let b = sim(model, 2);
    mig(&b, 1, &[model.mig[0].name]);
    let e = Exporter::start(options(), b).expect("start");
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(sys.stdin.read())}
for name, f in sorted(fams.items()):
    # (the parser itself reports counter samples as `<name>_total`; the text has no suffix)
    print(name, f.type, len(f.samples))
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&e.body()).expect("write body");
    }
    let out = child.wait_with_output().expect("python output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "parser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // GPU 0 whole, GPU 1 one GPU instance: two series per metric.
    assert!(
        stdout.contains("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter 2\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("DCGM_FI_DEV_SM_CLOCK gauge 2\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("DCGM_FI_DEV_GPU_UTIL gauge 1\n"),
        "{stdout}"
    );
    assert!(!String::from_utf8_lossy(&e.body()).contains("_total"));
    assert_eq!(stdout.lines().count(), 25, "{stdout}");
}
