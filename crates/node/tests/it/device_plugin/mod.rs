//! The device plugin against SimBackend, driven by a small in-test kubelet: a tonic
//! `Registration` server on a temp dir that dials the plugin back and follows ListAndWatch,
//! as the real kubelet does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_gpu::layout::{self, MigLayout};
use gantry_gpu::{Backend, SimBackend, SimConfig};
use gantry_node::device_plugin::settings::{
    DeviceListStrategy, DeviceSelector, MigStrategy, ReplicatedResource, Settings, Sharing,
    SharingKind,
};
use gantry_node::device_plugin::{self, ConfigSource, Options, PluginStatus, uds};
use gantry_node::proto::deviceplugin as pb;
use pb::device_plugin_client::DevicePluginClient;
use pb::registration_server::{Registration, RegistrationServer};
use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

const WAIT: Duration = Duration::from_secs(60);

/// What the test kubelet has seen.
#[derive(Debug, Clone, Default)]
struct Seen {
    registrations: Vec<String>,
    /// Latest ListAndWatch list per resource.
    devices: BTreeMap<String, Vec<pb::Device>>,
}

impl Seen {
    fn healthy(&self, resource: &str) -> usize {
        self.devices
            .get(resource)
            .map_or(0, |d| d.iter().filter(|d| d.health == pb::HEALTHY).count())
    }
    fn ids(&self, resource: &str) -> Vec<String> {
        self.devices
            .get(resource)
            .map(|d| d.iter().map(|d| d.id.clone()).collect())
            .unwrap_or_default()
    }
}

#[derive(Clone)]
struct KubeletService {
    dir: PathBuf,
    seen: Arc<Mutex<Seen>>,
    notify: Arc<watch::Sender<u64>>,
}

impl KubeletService {
    fn update(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.seen.lock().unwrap());
        self.notify.send_modify(|n| *n += 1);
    }
}

#[tonic::async_trait]
impl Registration for KubeletService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let req = request.into_inner();
        if req.version != pb::VERSION {
            return Err(Status::invalid_argument("unsupported version"));
        }
        // Like the kubelet: dial the endpoint now; Register fails if the plugin isn't serving.
        let channel = uds::connect(&self.dir.join(&req.endpoint), Duration::from_secs(5))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut client = DevicePluginClient::new(channel);
        let opts = client
            .get_device_plugin_options(pb::Empty {})
            .await?
            .into_inner();
        assert!(opts.get_preferred_allocation_available);
        let mut stream = client.list_and_watch(pb::Empty {}).await?.into_inner();
        let resource = req.resource_name.clone();
        self.update(|s| s.registrations.push(resource.clone()));
        let this = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(msg)) = stream.message().await {
                this.update(|s| {
                    s.devices.insert(resource.clone(), msg.devices);
                });
            }
            // Stream ended: the kubelet marks the resource's devices unhealthy.
            this.update(|s| {
                if let Some(devs) = s.devices.get_mut(&resource) {
                    devs.iter_mut()
                        .for_each(|d| d.health = pb::UNHEALTHY.to_string());
                }
            });
        });
        Ok(Response::new(pb::Empty {}))
    }
}

struct TestKubelet {
    dir: PathBuf,
    seen: Arc<Mutex<Seen>>,
    notify: watch::Receiver<u64>,
    stop: Option<oneshot::Sender<()>>,
}

impl TestKubelet {
    fn start(dir: &Path) -> Self {
        let socket = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let (tx, notify) = watch::channel(0);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let service = KubeletService {
            dir: dir.to_path_buf(),
            seen: seen.clone(),
            notify: Arc::new(tx),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        TestKubelet {
            dir: dir.to_path_buf(),
            seen,
            notify,
            stop: Some(stop),
        }
    }

    /// Waits until `pred` holds on what the kubelet has seen.
    async fn wait(&mut self, what: &str, pred: impl Fn(&Seen) -> bool) -> Seen {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            {
                let seen = self.seen.lock().unwrap().clone();
                if pred(&seen) {
                    return seen;
                }
            }
            if tokio::time::timeout_at(deadline, self.notify.changed())
                .await
                .is_err()
            {
                panic!(
                    "timed out waiting for {what}; kubelet saw {:#?}",
                    self.seen.lock().unwrap()
                );
            }
        }
    }

    /// A kubelet restart: stop serving, wipe the plugin sockets and kubelet.sock.
    fn crash(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        for entry in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "sock") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    async fn client(&self, resource: &str) -> DevicePluginClient<tonic::transport::Channel> {
        let short = resource.trim_start_matches("nvidia.com/");
        let channel = uds::connect(
            &self.dir.join(format!("nvidia-{short}.sock")),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        DevicePluginClient::new(channel)
    }
}

struct Plugin {
    stop: Option<oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<Result<(), device_plugin::DevicePluginError>>,
    status: watch::Receiver<PluginStatus>,
}

impl Plugin {
    fn start(dir: &Path, config: ConfigSource, backend: Arc<dyn Backend>) -> Self {
        Self::start_with(dir, config, backend, |_| {})
    }

    fn start_with(
        dir: &Path,
        config: ConfigSource,
        backend: Arc<dyn Backend>,
        tweak: impl FnOnce(&mut Options),
    ) -> Self {
        let mut opts = Options::new(dir);
        opts.config = config;
        opts.poll_interval = Duration::from_millis(50);
        opts.mig_minors_file = None;
        let (tx, status) = watch::channel(PluginStatus::default());
        opts.status = Some(tx);
        tweak(&mut opts);
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(device_plugin::run(opts, backend, async {
            let _ = stopped.await;
        }));
        Plugin {
            stop: Some(stop),
            handle,
            status,
        }
    }

    async fn wait_status(
        &mut self,
        what: &str,
        pred: impl Fn(&PluginStatus) -> bool,
    ) -> PluginStatus {
        let found = match tokio::time::timeout(WAIT, self.status.wait_for(|s| pred(s))).await {
            Ok(Ok(s)) => Some(s.clone()),
            _ => None,
        };
        found.unwrap_or_else(|| {
            panic!(
                "timed out waiting for {what}; status {:#?}",
                *self.status.borrow()
            )
        })
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.handle.await.unwrap().unwrap();
    }
}

fn sim(model: &str, gpus: u32) -> Arc<SimBackend> {
    Arc::new(SimBackend::new(
        SimConfig::for_model(model, gpus, 7).unwrap(),
    ))
}

/// The plugin's health watcher has registered for events: a fault injected before that would
/// never reach it (as with NVML, events are delivered to the streams open when they happen).
async fn health_watching(backend: &SimBackend) {
    gantry_testkit::eventually_secs(
        "the health watcher registered for GPU events",
        60,
        || async {
            let n = backend.event_subscribers();
            if n > 0 {
                gantry_testkit::Look::Done(())
            } else {
                gantry_testkit::Look::Seen(format!("{n} event streams open"))
            }
        },
    )
    .await
    .unwrap();
}

fn inline(settings: Settings) -> ConfigSource {
    ConfigSource::Inline(Box::new(settings))
}

fn time_sliced(replicas: u32, rename: Option<&str>) -> Settings {
    Settings {
        sharing: Some(Sharing {
            kind: SharingKind::TimeSlicing,
            fail_requests_greater_than_one: false,
            resources: vec![ReplicatedResource {
                name: "nvidia.com/gpu".into(),
                rename: rename.map(str::to_string),
                devices: DeviceSelector::All,
                replicas,
            }],
        }),
        ..Settings::default()
    }
}

fn uuids(backend: &dyn Backend) -> Vec<String> {
    (0..backend.device_count().unwrap())
        .map(|i| backend.device_info(i).unwrap().uuid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_gpus_are_advertised_and_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 8);
    let mut kubelet = TestKubelet::start(dir.path());
    let plugin = Plugin::start(dir.path(), ConfigSource::Defaults, backend.clone());
    let seen = kubelet
        .wait("8 GPUs", |s| s.healthy("nvidia.com/gpu") == 8)
        .await;
    assert_eq!(seen.registrations, ["nvidia.com/gpu"]);
    assert_eq!(seen.ids("nvidia.com/gpu"), uuids(backend.as_ref()));
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    let uuids = uuids(backend.as_ref());
    let mut client = kubelet.client("nvidia.com/gpu").await;
    let resp = client
        .allocate(pb::AllocateRequest {
            container_requests: vec![
                pb::ContainerAllocateRequest {
                    devices_ids: vec![uuids[1].clone()],
                },
                pb::ContainerAllocateRequest {
                    devices_ids: vec![uuids[2].clone(), uuids[3].clone()],
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.container_responses.len(), 2);
    assert_eq!(
        resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        uuids[1]
    );
    assert_eq!(
        resp.container_responses[1].envs["NVIDIA_VISIBLE_DEVICES"],
        format!("{},{}", uuids[2], uuids[3])
    );
    let err = client
        .allocate(pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest {
                devices_ids: vec!["GPU-bogus".into()],
            }],
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("GPU-bogus"), "{err}");

    // Preferred allocation: with the sim's topology, an NVLink-connected set.
    let pref = client
        .get_preferred_allocation(pb::PreferredAllocationRequest {
            container_requests: vec![pb::ContainerPreferredAllocationRequest {
                available_device_i_ds: uuids.clone(),
                must_include_device_i_ds: vec![uuids[5].clone()],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let got = &pref.container_responses[0].device_i_ds;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], uuids[5]);

    plugin.stop().await;
    assert!(
        !dir.path().join("nvidia-gpu.sock").exists(),
        "clean shutdown removes the socket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_slicing_with_and_without_rename() {
    for (rename, resource) in [
        (None, "nvidia.com/gpu"),
        (Some("nvidia.com/gpu.shared"), "nvidia.com/gpu.shared"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let backend = sim("A100-40GB", 2);
        let mut kubelet = TestKubelet::start(dir.path());
        let plugin = Plugin::start(dir.path(), inline(time_sliced(4, rename)), backend.clone());
        let seen = kubelet
            .wait("8 replicas", |s| s.healthy(resource) == 8)
            .await;
        assert_eq!(seen.registrations, [resource]);
        let u = uuids(backend.as_ref());
        let ids = seen.ids(resource);
        assert_eq!(&ids[..4], [0, 1, 2, 3].map(|n| format!("{}::{n}", u[0])));
        assert_eq!(&ids[4..], [0, 1, 2, 3].map(|n| format!("{}::{n}", u[1])));

        let mut client = kubelet.client(resource).await;
        let resp = client
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: vec![ids[0].clone(), ids[1].clone()],
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"], u[0],
            "replicas collapse"
        );
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_single_and_mixed_on_h100_all_balanced() {
    let backend = sim("H100-80GB", 2);
    let balanced = MigLayout::enabled([("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]);
    for gpu in 0..2 {
        layout::apply(backend.as_ref(), gpu, &balanced).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = TestKubelet::start(dir.path());
    let mixed = Settings {
        mig_strategy: MigStrategy::Mixed,
        ..Settings::default()
    };
    let plugin = Plugin::start(dir.path(), inline(mixed), backend.clone());
    let seen = kubelet
        .wait("mixed resources", |s| {
            s.healthy("nvidia.com/mig-1g.10gb") == 4
                && s.healthy("nvidia.com/mig-2g.20gb") == 2
                && s.healthy("nvidia.com/mig-3g.40gb") == 2
        })
        .await;
    assert_eq!(seen.registrations.len(), 3);
    assert!(
        seen.ids("nvidia.com/mig-3g.40gb")
            .iter()
            .all(|id| id.starts_with("MIG-"))
    );
    let mig_uuid = seen.ids("nvidia.com/mig-2g.20gb")[0].clone();
    let mut client = kubelet.client("nvidia.com/mig-2g.20gb").await;
    let resp = client
        .allocate(pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest {
                devices_ids: vec![mig_uuid.clone()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        mig_uuid
    );

    // An XID attributed to one MIG device hits only that device...
    health_watching(&backend).await;
    let target = backend
        .mig_devices(0)
        .unwrap()
        .into_iter()
        .find(|m| m.profile == "3g.40gb")
        .unwrap();
    backend
        .inject_xid(
            0,
            62,
            Some(target.gpu_instance_id),
            Some(target.compute_instance_id),
        )
        .unwrap();
    let seen = kubelet
        .wait("one MIG device unhealthy", |s| {
            s.healthy("nvidia.com/mig-3g.40gb") == 1
        })
        .await;
    let bad: Vec<&pb::Device> = seen.devices["nvidia.com/mig-3g.40gb"]
        .iter()
        .filter(|d| d.health == pb::UNHEALTHY)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].id, target.uuid);
    assert_eq!(seen.healthy("nvidia.com/mig-1g.10gb"), 4);
    // ...one for the whole GPU hits every MIG device on it.
    backend.inject_xid(1, 62, None, None).unwrap();
    kubelet
        .wait("GPU 1's MIG devices unhealthy", |s| {
            s.healthy("nvidia.com/mig-1g.10gb") == 2
                && s.healthy("nvidia.com/mig-2g.20gb") == 1
                && s.healthy("nvidia.com/mig-3g.40gb") == 0
        })
        .await;
    plugin.stop().await;

    // single on unlike MIG devices is refused (the last good config keeps serving)...
    let dir = tempfile::tempdir().unwrap();
    let _kubelet = TestKubelet::start(dir.path());
    let single = Settings {
        mig_strategy: MigStrategy::Single,
        ..Settings::default()
    };
    let mut plugin = Plugin::start(dir.path(), inline(single.clone()), backend.clone());
    // The last good config is the built-in one: whole GPUs (the error may be published
    // before the built-in config's servers are).
    let status = plugin
        .wait_status("single refused, whole GPUs served", |s| {
            s.config_error.is_some() && s.resources.get("nvidia.com/gpu") == Some(&2)
        })
        .await;
    assert!(status.config_error.unwrap().contains("migStrategy single"));
    plugin.stop().await;

    // ...and on all-1g.10gb it advertises the MIG devices as nvidia.com/gpu.
    let all_1g = MigLayout::enabled([("1g.10gb", 7)]);
    for gpu in 0..2 {
        layout::apply(backend.as_ref(), gpu, &all_1g).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = TestKubelet::start(dir.path());
    let plugin = Plugin::start(dir.path(), inline(single), backend.clone());
    let seen = kubelet
        .wait("single", |s| s.healthy("nvidia.com/gpu") == 14)
        .await;
    assert!(
        seen.ids("nvidia.com/gpu")
            .iter()
            .all(|id| id.starts_with("MIG-"))
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_per_device_list_strategy() {
    let backend = sim("L4", 2);
    let u = uuids(backend.as_ref());
    let cases = [
        (DeviceListStrategy::Envvar, "envvar"),
        (DeviceListStrategy::VolumeMounts, "volume-mounts"),
        (DeviceListStrategy::CdiAnnotations, "cdi-annotations"),
        (DeviceListStrategy::CdiCri, "cdi-cri"),
    ];
    for (strategy, name) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut kubelet = TestKubelet::start(dir.path());
        let settings = Settings {
            device_list_strategies: [strategy].into(),
            ..Settings::default()
        };
        let plugin = Plugin::start(dir.path(), inline(settings), backend.clone());
        kubelet
            .wait("2 GPUs", |s| s.healthy("nvidia.com/gpu") == 2)
            .await;
        let mut client = kubelet.client("nvidia.com/gpu").await;
        let r = client
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: vec![u[1].clone()],
                }],
            })
            .await
            .unwrap()
            .into_inner()
            .container_responses
            .remove(0);
        match strategy {
            DeviceListStrategy::Envvar => {
                assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], u[1], "{name}")
            }
            DeviceListStrategy::VolumeMounts => {
                assert_eq!(
                    r.envs["NVIDIA_VISIBLE_DEVICES"],
                    "/var/run/nvidia-container-devices"
                );
                assert_eq!(
                    r.mounts[0].container_path,
                    format!("/var/run/nvidia-container-devices/{}", u[1])
                );
            }
            DeviceListStrategy::CdiAnnotations => {
                assert!(r.envs.is_empty(), "{name}");
                let (key, value) = r.annotations.iter().next().unwrap();
                assert!(key.starts_with("cdi.k8s.io/nvidia-device-plugin_"), "{key}");
                assert_eq!(*value, format!("nvidia.com/gpu={}", u[1]));
            }
            DeviceListStrategy::CdiCri => {
                assert!(r.envs.is_empty(), "{name}");
                assert_eq!(r.cdi_devices[0].name, format!("nvidia.com/gpu={}", u[1]));
            }
        }
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_79_turns_every_replica_unhealthy_and_recovers_after_reset() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 2);
    let u = uuids(backend.as_ref());
    let mut kubelet = TestKubelet::start(dir.path());
    let plugin = Plugin::start(
        dir.path(),
        inline(time_sliced(4, Some("nvidia.com/gpu.shared"))),
        backend.clone(),
    );
    kubelet
        .wait("8 replicas", |s| s.healthy("nvidia.com/gpu.shared") == 8)
        .await;

    // XID 13 is an application error: nothing changes.
    health_watching(&backend).await;
    backend.inject_xid(1, 13, None, None).unwrap();
    // XID 79: every replica of GPU 1 goes Unhealthy in one message.
    backend.inject_fallen_off_bus(1).unwrap();
    let seen = kubelet
        .wait("GPU 1 unhealthy", |s| {
            s.healthy("nvidia.com/gpu.shared") == 4
        })
        .await;
    for d in &seen.devices["nvidia.com/gpu.shared"] {
        let expect = if d.id.starts_with(&u[1]) {
            pb::UNHEALTHY
        } else {
            pb::HEALTHY
        };
        assert_eq!(d.health, expect, "{}", d.id);
    }
    assert_eq!(
        seen.devices["nvidia.com/gpu.shared"].len(),
        8,
        "IDs stay advertised"
    );

    // The GPU is reset: its replicas come back.
    backend.reset_gpu(1).unwrap();
    kubelet
        .wait("GPU 1 healthy again", |s| {
            s.healthy("nvidia.com/gpu.shared") == 8
        })
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_13_is_ignored_and_dbe_recovers_on_reset() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 2);
    let mut kubelet = TestKubelet::start(dir.path());
    let mut plugin = Plugin::start(dir.path(), ConfigSource::Defaults, backend.clone());
    kubelet
        .wait("2 GPUs", |s| s.healthy("nvidia.com/gpu") == 2)
        .await;
    health_watching(&backend).await;
    backend.inject_xid(0, 13, None, None).unwrap();
    backend.inject_xid(0, 31, None, None).unwrap();
    // A double-bit ECC error is fatal; it is the marker that the XIDs above were processed.
    backend.inject_ecc_dbe(1).unwrap();
    let seen = kubelet
        .wait("GPU 1 unhealthy", |s| s.healthy("nvidia.com/gpu") == 1)
        .await;
    assert_eq!(
        seen.devices["nvidia.com/gpu"][0].health,
        pb::HEALTHY,
        "XID 13/31 ignored"
    );
    assert_eq!(
        plugin
            .wait_status("1 unhealthy", |s| s.unhealthy == 1)
            .await
            .unhealthy,
        1
    );
    backend.reset_gpu(1).unwrap();
    kubelet
        .wait("GPU 1 healthy", |s| s.healthy("nvidia.com/gpu") == 2)
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restart_is_survived() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("L4", 4);
    let mut kubelet = TestKubelet::start(dir.path());
    let mut plugin = Plugin::start(dir.path(), ConfigSource::Defaults, backend.clone());
    kubelet
        .wait("4 GPUs", |s| s.healthy("nvidia.com/gpu") == 4)
        .await;
    let generation = plugin
        .wait_status("registered", |s| s.registered.len() == 1)
        .await
        .generation;

    kubelet.crash();
    // The plugin notices its socket is gone and restarts while the kubelet is away.
    plugin
        .wait_status("restart", |s| s.generation > generation)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut kubelet = TestKubelet::start(dir.path());
    let seen = kubelet
        .wait("re-registration", |s| s.healthy("nvidia.com/gpu") == 4)
        .await;
    assert_eq!(seen.registrations, ["nvidia.com/gpu"]);
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    // kubelet.sock re-created without our socket being touched: re-register as well.
    let before = plugin.status.borrow().generation;
    let _ = std::fs::remove_file(dir.path().join("kubelet.sock"));
    let mut kubelet2 = TestKubelet::start(dir.path());
    kubelet2
        .wait("re-registration after new kubelet.sock", |s| {
            s.healthy("nvidia.com/gpu") == 4
        })
        .await;
    plugin
        .wait_status("a new generation", |s| s.generation > before)
        .await;
    drop(kubelet);
    plugin.stop().await;
}

const TS4_RENAMED: &str = "version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_keeps_the_last_good_one_and_good_changes_reload() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, TS4_RENAMED).unwrap();
    let backend = sim("A100-80GB", 2);
    let mut kubelet = TestKubelet::start(&plugin_dir);
    let mut plugin = Plugin::start(
        &plugin_dir,
        ConfigSource::File(config.clone()),
        backend.clone(),
    );
    kubelet
        .wait("time-sliced", |s| s.healthy("nvidia.com/gpu.shared") == 8)
        .await;
    let generation = plugin
        .wait_status("registered", |s| s.registered.len() == 1)
        .await
        .generation;

    // Invalid (replicas < 2), then unparseable: reported, still serving the time-sliced config.
    std::fs::write(&config, TS4_RENAMED.replace("replicas: 4", "replicas: 1")).unwrap();
    let status = plugin
        .wait_status("config error", |s| s.config_error.is_some())
        .await;
    let error = status.config_error.unwrap();
    assert!(
        error.contains("config.yaml") && error.contains("replicas"),
        "{error}"
    );
    std::fs::write(&config, "sharing: [").unwrap();
    plugin
        .wait_status("syntax error", |s| {
            s.config_error.as_deref().is_some_and(|e| e != error)
        })
        .await;
    // A file caught truncated (being rewritten in place) is not "the defaults".
    std::fs::write(&config, "").unwrap();
    plugin
        .wait_status("empty file reported", |s| {
            s.config_error
                .as_deref()
                .is_some_and(|e| e.contains("is empty"))
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        plugin.status.borrow().generation,
        generation,
        "no restart on a bad config"
    );
    assert_eq!(
        plugin
            .status
            .borrow()
            .resources
            .get("nvidia.com/gpu.shared"),
        Some(&8)
    );
    assert!(
        dir.path()
            .join("device-plugins/nvidia-gpu.shared.sock")
            .exists()
    );

    // A valid config that cannot apply on this node (there is no GPU 5)...
    std::fs::write(
        &config,
        TS4_RENAMED.replace("replicas: 4", "replicas: 2\n        devices: [\"5\"]"),
    )
    .unwrap();
    plugin
        .wait_status("apply error", |s| {
            s.config_error
                .as_deref()
                .is_some_and(|e| e.contains("\"5\""))
        })
        .await;
    assert_eq!(plugin.status.borrow().generation, generation);
    // ...then a plain config reloads without a kubelet restart.
    std::fs::write(&config, "version: v1\nflags:\n  migStrategy: none\n").unwrap();
    let seen = kubelet
        .wait("whole GPUs again", |s| s.healthy("nvidia.com/gpu") == 2)
        .await;
    assert!(seen.registrations.contains(&"nvidia.com/gpu".to_string()));
    plugin
        .wait_status("error cleared, only whole GPUs served", |s| {
            s.config_error.is_none() && s.resources.keys().eq(["nvidia.com/gpu"])
        })
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_configs_from_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    let configs = dir.path().join("available-configs");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    std::fs::create_dir_all(&configs).unwrap();
    std::fs::write(configs.join("ts4"), TS4_RENAMED).unwrap();
    std::fs::write(configs.join("plain"), "version: v1\n").unwrap();
    // ConfigMap volumes carry `..data` links; they are not configs.
    std::fs::write(configs.join("..data"), "garbage: [").unwrap();
    let backend = sim("H100-80GB", 1);
    let mut kubelet = TestKubelet::start(&plugin_dir);
    let source = ConfigSource::Named {
        dir: configs.clone(),
        default: Some("ts4".into()),
        fallbacks: device_plugin::named::DEFAULT_FALLBACKS.to_vec(),
    };
    let plugin = Plugin::start(&plugin_dir, source, backend.clone());
    kubelet
        .wait("default named config", |s| {
            s.healthy("nvidia.com/gpu.shared") == 4
        })
        .await;
    // Editing the selected config reloads.
    std::fs::write(
        configs.join("ts4"),
        TS4_RENAMED.replace("replicas: 4", "replicas: 3"),
    )
    .unwrap();
    kubelet
        .wait("edited config", |s| {
            s.devices
                .get("nvidia.com/gpu.shared")
                .is_some_and(|d| d.len() == 3)
        })
        .await;
    plugin.stop().await;
}

/// `GET path` on a plain HTTP/1.0 server; the body.
async fn http_get(address: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(address).await.unwrap();
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(out)
}

/// Issue #24: withdrawn and recovered devices on the plugin's `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawn_and_recovered_devices_are_counted_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 2);
    let mut kubelet = TestKubelet::start(dir.path());
    let mut plugin = Plugin::start_with(
        dir.path(),
        inline(time_sliced(4, None)),
        backend.clone(),
        |o| o.metrics_address = Some("127.0.0.1:0".parse().unwrap()),
    );
    kubelet
        .wait("8 replicas", |s| s.healthy("nvidia.com/gpu") == 8)
        .await;
    let address = plugin
        .wait_status("metrics bound", |s| s.metrics_address.is_some())
        .await
        .metrics_address
        .unwrap();
    let before = http_get(address, "/metrics").await;
    assert!(
        before.contains("gpu_operator_node_device_plugin_devices_unhealthy 0"),
        "{before}"
    );
    assert_eq!(http_get(address, "/healthz").await, "ok");

    health_watching(&backend).await;
    backend.inject_fallen_off_bus(1).unwrap();
    kubelet
        .wait("GPU 1 unhealthy", |s| s.healthy("nvidia.com/gpu") == 4)
        .await;
    gantry_testkit::eventually_secs("withdrawn devices on /metrics", 60, || async {
        let t = http_get(address, "/metrics").await;
        if t.contains(
            r#"gpu_operator_node_device_plugin_devices_withdrawn_total{reason="lost",xid="79"} 4"#,
        ) && t.contains("gpu_operator_node_device_plugin_devices_unhealthy 4")
        {
            gantry_testkit::Look::Done(())
        } else {
            gantry_testkit::Look::Seen(t)
        }
    })
    .await
    .unwrap();

    backend.reset_gpu(1).unwrap();
    kubelet
        .wait("GPU 1 healthy again", |s| s.healthy("nvidia.com/gpu") == 8)
        .await;
    gantry_testkit::eventually_secs("recovered devices on /metrics", 60, || async {
        let t = http_get(address, "/metrics").await;
        if t.contains(
            r#"gpu_operator_node_device_plugin_devices_recovered_total{reason="lost",xid="79"} 4"#,
        ) && t.contains("gpu_operator_node_device_plugin_devices_unhealthy 0")
        {
            gantry_testkit::Look::Done(())
        } else {
            gantry_testkit::Look::Seen(t)
        }
    })
    .await
    .unwrap();
    plugin.stop().await;
}
