//! The validator against fake seams: a simulated backend, a temp host root, a fake cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use gantry_gpu::{Backend, SimBackend, SimConfig, catalog};

use super::*;

#[derive(Default)]
struct FakeCluster {
    managed: bool,
    allocatable: Mutex<BTreeMap<String, String>>,
}

impl ClusterView for FakeCluster {
    fn driver_managed(&self) -> BoxFuture<'_, Result<bool, ValidatorError>> {
        Box::pin(async move { Ok(self.managed) })
    }
    fn allocatable<'a>(
        &'a self,
        _node: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, ValidatorError>> {
        Box::pin(async move {
            Ok(self
                .allocatable
                .lock()
                .map(|a| a.clone())
                .unwrap_or_default())
        })
    }
}

fn sim() -> Arc<SimBackend> {
    let model = catalog::find("H100-80GB").expect("catalog has the H100");
    Arc::new(SimBackend::new(SimConfig::new(model, 2, 7)))
}

fn seams(backend: Option<Arc<SimBackend>>, cluster: Option<Arc<FakeCluster>>) -> Seams {
    Seams {
        backend: Arc::new(move || match &backend {
            Some(b) => Ok(b.clone() as Arc<dyn Backend>),
            None => Err("libnvidia-ml.so.1 not found".to_string()),
        }),
        cluster: cluster.map(|c| c as Arc<dyn ClusterView>),
    }
}

fn opts(host: &Path, mode: Mode) -> ValidatorOptions {
    let mut o = ValidatorOptions::new(mode);
    o.host_root = host.to_path_buf();
    o.output_dir = host.join("run/nvidia/validations");
    o.retry_interval = Duration::from_millis(20);
    o.node_name = Some("n1".into());
    o
}

fn never() -> impl Future<Output = ()> + Send + 'static {
    std::future::pending()
}

#[test]
fn modes_from_flags() {
    assert_eq!(Mode::from_flags(None, false, None).unwrap(), Mode::Idle);
    assert_eq!(
        Mode::from_flags(Some("driver"), true, None).unwrap(),
        Mode::Check {
            component: Component::Driver,
            wait: true
        }
    );
    assert_eq!(
        Mode::from_flags(Some("metrics"), false, None).unwrap(),
        Mode::Metrics
    );
    assert_eq!(
        Mode::from_flags(None, false, Some("toolkit")).unwrap(),
        Mode::WaitFor(Component::Toolkit)
    );
    let e = Mode::from_flags(Some("mofed"), false, None).unwrap_err();
    assert!(e.to_string().contains("\"mofed\""), "{e}");
}

#[tokio::test]
async fn host_driver_writes_driver_ready() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(tmp.path(), Mode::Idle);
    let s = seams(Some(sim()), Some(Arc::new(FakeCluster::default())));
    validate(&o, &s, Component::Driver, false, never())
        .await
        .unwrap();
    let text = std::fs::read_to_string(o.output_dir.join("driver-ready")).unwrap();
    let kv = checks::parse_ready_file(&text);
    assert_eq!(kv["IS_HOST_DRIVER"], "true");
    assert_eq!(kv["NVIDIA_DRIVER_ROOT"], "/");
}

#[tokio::test]
async fn managed_driver_waits_for_the_driver_container() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(tmp.path(), Mode::Idle);
    let cluster = Arc::new(FakeCluster {
        managed: true,
        ..Default::default()
    });
    let s = seams(Some(sim()), Some(cluster));
    // Without --wait: fails at once, naming the missing file.
    let e = validate(&o, &s, Component::Driver, false, never())
        .await
        .unwrap_err();
    assert!(e.to_string().contains(".driver-ctr-ready"), "{e}");
    assert!(!o.output_dir.join("driver-ready").exists());
    // With --wait: passes once the driver container's file appears.
    let dir = o.output_dir.clone();
    std::fs::create_dir_all(tmp.path().join("run/nvidia/driver/dev")).unwrap();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".driver-ctr-ready"), "").unwrap();
    });
    validate(&o, &s, Component::Driver, true, never())
        .await
        .unwrap();
    writer.await.unwrap();
    let kv = checks::parse_ready_file(
        &std::fs::read_to_string(o.output_dir.join("driver-ready")).unwrap(),
    );
    assert_eq!(kv["IS_HOST_DRIVER"], "false");
    assert_eq!(kv["NVIDIA_DRIVER_ROOT"], "/run/nvidia/driver");
    assert_eq!(kv["NVIDIA_DEV_ROOT"], "/run/nvidia/driver");
}

#[tokio::test]
async fn no_nvml_is_not_ready_and_wait_stops_on_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(tmp.path(), Mode::Idle);
    let s = seams(None, None);
    let e = validate(&o, &s, Component::Driver, false, never())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("libnvidia-ml.so.1"), "{e}");
    let e = validate(
        &o,
        &s,
        Component::Cuda,
        true,
        tokio::time::sleep(Duration::from_millis(50)),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ValidatorError::Interrupted(_)), "{e}");
}

#[tokio::test]
async fn toolkit_needs_a_runtime_config_or_cdi_spec() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(tmp.path(), Mode::Idle);
    let s = seams(Some(sim()), None);
    let e = check(&o, &s, Component::Toolkit).await.unwrap_err();
    assert!(e.to_string().contains("\"nvidia\" runtime"), "{e}");
    assert!(e.is_retryable());

    // A malformed config is named; a runc-only config does not count.
    let etc = tmp.path().join("etc/containerd");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("config.toml"), "[plugins").unwrap();
    let e = check(&o, &s, Component::Toolkit).await.unwrap_err();
    assert!(e.to_string().contains("config.toml"), "{e}");
    std::fs::write(
        etc.join("config.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n",
    )
    .unwrap();
    check(&o, &s, Component::Toolkit).await.unwrap();

    // A CDI spec alone is enough.
    std::fs::remove_file(etc.join("config.toml")).unwrap();
    let cdi = tmp.path().join("var/run/cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    std::fs::write(
        cdi.join("nvidia.yaml"),
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\ncontainerEdits: {}\n",
    )
    .unwrap();
    check(&o, &s, Component::Toolkit).await.unwrap();
}

#[tokio::test]
async fn cuda_and_plugin_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts(tmp.path(), Mode::Idle);
    let backend = sim();
    let cluster = Arc::new(FakeCluster::default());
    let s = seams(Some(backend.clone()), Some(cluster.clone()));
    check(&o, &s, Component::Cuda).await.unwrap();
    backend.inject_fallen_off_bus(1).unwrap();
    let e = check(&o, &s, Component::Cuda).await.unwrap_err();
    assert!(e.to_string().contains("GPU 1"), "{e}");

    let e = check(&o, &s, Component::Plugin).await.unwrap_err();
    assert!(e.to_string().contains("Node n1"), "{e}");
    cluster
        .allocatable
        .lock()
        .unwrap()
        .insert("nvidia.com/mig-1g.10gb".into(), "7".into());
    validate(&o, &s, Component::Plugin, false, never())
        .await
        .unwrap();
    assert!(o.output_dir.join("plugin-ready").exists());
    let status = metrics::collect(&o, &s).await;
    assert_eq!(status.plugin_devices, Some(7));
    assert!(status.ready.contains(&(Component::Plugin, true)));
    assert!(status.ready.contains(&(Component::Driver, false)));

    o.node_name = None;
    let e = check(&o, &s, Component::Plugin).await.unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("NODE_NAME"), "{e}");
}

#[tokio::test]
async fn wait_for_and_idle_cleanup() {
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(tmp.path(), Mode::WaitFor(Component::Toolkit));
    let s = seams(Some(sim()), None);
    let dir = o.output_dir.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["toolkit-ready", "driver-ready", ".driver-ctr-ready"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
    });
    run(o.clone(), s.clone(), never()).await.unwrap();
    writer.await.unwrap();
    let e = wait_for(
        &o,
        Component::Plugin,
        tokio::time::sleep(Duration::from_millis(50)),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("plugin-ready"), "{e}");

    // Idle: on stop, remove the validator's files, keep the driver container's.
    let idle = ValidatorOptions {
        mode: Mode::Idle,
        ..o.clone()
    };
    run(idle, s, async {}).await.unwrap();
    assert!(!o.output_dir.join("toolkit-ready").exists());
    assert!(!o.output_dir.join("driver-ready").exists());
    assert!(o.output_dir.join(".driver-ctr-ready").exists());
}
