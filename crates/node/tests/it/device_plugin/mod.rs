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

mod advertise;
mod config;
mod health;
