//! The shell: serve one gRPC server per resource, register with the kubelet, push health
//! changes, and start over when the kubelet restarts, a socket vanishes, the MIG layout
//! changes or the config changes. Change detection is a periodic check (every
//! `poll_interval`): the inode of `kubelet.sock`, our socket files, the inventory and the
//! config source — simple and portable, and well within the kubelet's patience.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gantry_gpu::{Backend, Event, event_kind};
use tokio::sync::{mpsc, watch};

use super::allocate::MigMinors;
use super::error::DevicePluginError;
use super::health::{Cleared, FaultKind, Faults, HealthPolicy, Probe, Target};
use super::health_report::{self, Change};
use super::identity;
use super::inventory::Inventory;
use super::load::ConfigState;
use super::metrics::{self, Metrics};
use super::options::{Options, PluginStatus};
use super::preferred::Topology;
use super::server::{PluginService, ResourceContext, device_list};
use super::uds;
use crate::proto::deviceplugin as pb;

/// Where the plugin's state goes besides the kubelet: metrics, and the Node annotation with
/// the GPUs' identities and health (for the scheduler).
struct Outputs {
    metrics: Metrics,
    devices: Option<watch::Sender<Option<String>>>,
}

impl Outputs {
    fn update(&self, generation: &Generation, faults: &Faults) {
        let sets = generation.servers.iter().map(|s| &s.ctx.set);
        let unhealthy = sets
            .clone()
            .flat_map(|s| &s.devices)
            .filter(|d| faults.unhealthy(&d.physical))
            .count();
        self.metrics.set_unhealthy(unhealthy);
        if let Some(tx) = &self.devices {
            let v = identity::value(&identity::devices(sets, faults));
            tx.send_if_modified(|cur| {
                let changed = v.is_some() && *cur != v;
                if changed {
                    cur.clone_from(&v);
                }
                changed
            });
        }
    }
}

struct Running {
    ctx: Arc<ResourceContext>,
    socket: PathBuf,
    devices: watch::Sender<Vec<pb::Device>>,
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
    registered: bool,
}

/// One start of all servers against one inventory and config.
struct Generation {
    inventory: Inventory,
    servers: Vec<Running>,
    kubelet_identity: Option<Identity>,
}

/// Runs the device plugin until `shutdown` resolves; sockets are removed on the way out.
pub fn run<'a>(
    opts: Options,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send + 'a,
) -> futures::future::BoxFuture<'a, Result<(), DevicePluginError>> {
    run_boxed(opts, backend, Box::pin(shutdown))
}

// Not generic and never inlined, so the body's state machine is compiled here once, not in
// every crate that calls [`run`] (docs/benchmarks.md, "Build time").
#[inline(never)]
fn run_boxed<'a>(
    opts: Options,
    backend: Arc<dyn Backend>,
    shutdown: futures::future::BoxFuture<'a, ()>,
) -> futures::future::BoxFuture<'a, Result<(), DevicePluginError>> {
    Box::pin(run_inner(opts, backend, shutdown))
}

async fn run_inner(
    opts: Options,
    backend: Arc<dyn Backend>,
    shutdown: futures::future::BoxFuture<'_, ()>,
) -> Result<(), DevicePluginError> {
    tokio::pin!(shutdown);
    std::fs::create_dir_all(&opts.plugin_dir)
        .map_err(|e| DevicePluginError::io(&opts.plugin_dir, e))?;
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
    let stop_events = Arc::new(AtomicBool::new(false));
    if opts.health.disabled {
        tracing::info!("health checks disabled by {}", super::health::ENV_DISABLE);
    } else {
        spawn_event_reader(backend.clone(), ev_tx, stop_events.clone());
    }
    let mut status = PluginStatus::default();
    let (metrics_stop, metrics_stopped) = watch::channel(false);
    let outputs = Outputs {
        metrics: Metrics::default(),
        devices: match (&opts.kube, &opts.node_name) {
            (Some(c), Some(n)) => Some(identity::spawn_publisher(c.clone(), n.clone())),
            _ => None,
        },
    };
    if let Some(address) = opts.metrics_address {
        let listener = metrics::bind(address)
            .await
            .map_err(DevicePluginError::Metrics)?;
        status.metrics_address = listener.local_addr().ok();
        let m = outputs.metrics.clone();
        let stop = async move {
            let mut rx = metrics_stopped;
            let _ = rx.wait_for(|s| *s).await;
        };
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(listener, m, stop).await {
                tracing::error!(error = %e, "device plugin metrics server stopped");
            }
        });
    }
    let mut config = ConfigState::new(opts.config_inputs());
    config.refresh(None).await;
    let mut faults = Faults::default();
    let mut ticker = tokio::time::interval(opts.poll_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let result = 'outer: loop {
        status.generation += 1;
        let mut generation = start(&opts, backend.as_ref(), &mut config, &faults).await;
        generation.register_pending(&opts).await;
        publish(&opts, &mut status, &generation, &config, &faults);
        outputs.update(&generation, &faults);
        let reason = loop {
            tokio::select! {
                _ = &mut shutdown => {
                    generation.stop().await;
                    break 'outer Ok(());
                }
                Some(event) = ev_rx.recv() => {
                    if let Some((target, kind)) =
                        on_event(&opts.health, backend.as_ref(), &mut faults, &event)
                    {
                        generation.push(&faults);
                        let change = generation.change(target, kind, None);
                        status.withdrawn_total += change.devices.len() as u64;
                        outputs.metrics.withdrawn(kind, change.devices.len());
                        report(&opts, change);
                        publish(&opts, &mut status, &generation, &config, &faults);
                        outputs.update(&generation, &faults);
                    }
                }
                _ = ticker.tick() => {
                    let cleared = probe_faults(&opts.health, backend.as_ref(), &mut faults);
                    if !cleared.is_empty() {
                        generation.push(&faults);
                    }
                    for c in cleared {
                        let change = generation.change(c.target, c.kind, Some(c.withdrawn_for));
                        status.recovered_total += change.devices.len() as u64;
                        outputs.metrics.recovered(c.kind, change.devices.len());
                        report(&opts, change);
                    }
                    if let Some(reason) = generation.needs_restart(&opts, backend.as_ref()) {
                        break reason;
                    }
                    if config.refresh(Some(&generation.inventory)).await {
                        break "config changed".to_string();
                    }
                    generation.register_pending(&opts).await;
                    publish(&opts, &mut status, &generation, &config, &faults);
                    outputs.update(&generation, &faults);
                }
            }
        };
        tracing::info!(%reason, "restarting device plugin servers");
        generation.stop().await;
    };
    stop_events.store(true, Ordering::Relaxed);
    let _ = metrics_stop.send(true);
    result
}

async fn start(
    opts: &Options,
    backend: &dyn Backend,
    config: &mut ConfigState,
    faults: &Faults,
) -> Generation {
    let inventory = match Inventory::read(backend) {
        Ok((inv, _lost)) => inv,
        Err(e) => {
            tracing::error!(error = %e, "cannot enumerate GPUs; serving nothing until they appear");
            Inventory::default()
        }
    };
    let sets = config.build(&inventory).await.unwrap_or_default();
    let settings = Arc::new(config.settings().clone());
    let topology = Arc::new(read_topology(backend, &inventory));
    let mig_minors = Arc::new(
        opts.mig_minors_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|t| MigMinors::parse(&t))
            .unwrap_or_default(),
    );
    let imex_channels = Arc::new(super::imex::present(
        &opts.imex_channel_dir,
        &settings.imex.channel_ids,
    ));
    let mut servers = Vec::new();
    for set in sets {
        let socket = opts.plugin_dir.join(set.socket_name());
        let ctx = Arc::new(ResourceContext {
            set,
            settings: settings.clone(),
            topology: topology.clone(),
            mig_minors: mig_minors.clone(),
            imex_channels: imex_channels.clone(),
        });
        let (devices_tx, devices_rx) = watch::channel(device_list(&ctx.set, faults));
        let (stop_tx, stop_rx) = watch::channel(false);
        let service = PluginService::new(ctx.clone(), devices_rx, stop_rx.clone());
        match uds::serve(&ctx.set.name, &socket, service, stop_rx) {
            Ok(handle) => servers.push(Running {
                ctx,
                socket,
                devices: devices_tx,
                stop: stop_tx,
                handle,
                registered: false,
            }),
            Err(e) => {
                tracing::error!(error = %e, "cannot serve resource; retrying on the next restart")
            }
        }
    }
    for s in &servers {
        tracing::info!(resource = %s.ctx.set.name, devices = s.ctx.set.devices.len(),
            socket = %s.socket.display(), "serving");
    }
    Generation {
        inventory,
        servers,
        kubelet_identity: None,
    }
}

fn read_topology(backend: &dyn Backend, inv: &Inventory) -> Topology {
    let mut levels = Vec::new();
    for (i, a) in inv.gpus.iter().enumerate() {
        for b in &inv.gpus[i + 1..] {
            if let Ok(level) = backend.topology(a.index, b.index) {
                levels.push(((a.index, b.index), level));
            }
        }
    }
    Topology::from_levels(levels)
}

/// Device, inode and change time: a re-created socket differs even if the inode is reused.
type Identity = (u64, u64, i64, i64);

fn socket_identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

impl Generation {
    async fn register_pending(&mut self, opts: &Options) {
        let Some(kubelet) = &opts.kubelet_socket else {
            return;
        };
        for s in self.servers.iter_mut().filter(|s| !s.registered) {
            let Some(identity) = socket_identity(kubelet) else {
                return;
            };
            let endpoint = s
                .socket
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match uds::register(kubelet, &endpoint, &s.ctx.set.name).await {
                Ok(()) => {
                    tracing::info!(resource = %s.ctx.set.name, "registered with the kubelet");
                    s.registered = true;
                    self.kubelet_identity = Some(identity);
                }
                Err(e) => {
                    crate::warn_limited!("device plugin registration", error = %e, "registration failed; retrying")
                }
            }
        }
    }

    /// The devices of every served resource that `target` covers.
    fn change(&self, target: Target, kind: FaultKind, recovered_after: Option<Duration>) -> Change {
        let devices = self
            .servers
            .iter()
            .flat_map(|s| &s.ctx.set.devices)
            .filter(|d| target.covers(&d.physical))
            .map(|d| d.id.clone())
            .collect();
        Change {
            target,
            kind,
            recovered_after,
            devices,
        }
    }

    fn push(&self, faults: &Faults) {
        for s in &self.servers {
            let list = device_list(&s.ctx.set, faults);
            s.devices.send_if_modified(|cur| {
                if *cur == list {
                    false
                } else {
                    *cur = list;
                    true
                }
            });
        }
    }

    /// Why the servers must start over, if they must.
    fn needs_restart(&self, opts: &Options, backend: &dyn Backend) -> Option<String> {
        if let (Some(kubelet), Some(known)) = (&opts.kubelet_socket, self.kubelet_identity)
            && let Some(now) = socket_identity(kubelet)
            && now != known
        {
            return Some(format!(
                "{} was re-created (kubelet restart)",
                kubelet.display()
            ));
        }
        if let Some(s) = self.servers.iter().find(|s| !s.socket.exists()) {
            return Some(format!("{} was removed", s.socket.display()));
        }
        if let Ok((inv, lost)) = Inventory::read(backend)
            && layout_changed(&self.inventory, &inv, &lost)
        {
            return Some("GPU inventory or MIG layout changed".to_string());
        }
        None
    }

    async fn stop(self) {
        for s in &self.servers {
            let _ = s.stop.send(true);
        }
        for s in self.servers {
            if tokio::time::timeout(Duration::from_secs(5), s.handle)
                .await
                .is_err()
            {
                tracing::warn!(socket = %s.socket.display(), "server did not stop in 5 s");
            }
            let _ = std::fs::remove_file(&s.socket);
        }
    }
}

/// Whether the advertised devices would differ. GPUs that are unreadable now (lost) keep
/// their old entry: they stay advertised (as Unhealthy) rather than vanishing.
pub fn layout_changed(old: &Inventory, new: &Inventory, lost_now: &[u32]) -> bool {
    new.gpus.iter().any(|g| old.gpu(g.index) != Some(g))
        || old
            .gpus
            .iter()
            .any(|g| new.gpu(g.index).is_none() && !lost_now.contains(&g.index))
}

fn publish(
    opts: &Options,
    status: &mut PluginStatus,
    generation: &Generation,
    config: &ConfigState,
    faults: &Faults,
) {
    let Some(tx) = &opts.status else { return };
    status.resources = generation
        .servers
        .iter()
        .map(|s| (s.ctx.set.name.clone(), s.ctx.set.devices.len()))
        .collect();
    status.registered = generation
        .servers
        .iter()
        .filter(|s| s.registered)
        .map(|s| s.ctx.set.name.clone())
        .collect();
    status.config_error = config.error().map(str::to_string);
    status.unhealthy = generation
        .servers
        .iter()
        .flat_map(|s| &s.ctx.set.devices)
        .filter(|d| faults.unhealthy(&d.physical))
        .count();
    let snapshot = status.clone();
    tx.send_if_modified(|cur| {
        if *cur == snapshot {
            false
        } else {
            *cur = snapshot;
            true
        }
    });
}

/// A GPU's health-relevant state now.
pub fn probe(backend: &dyn Backend, gpu: u32) -> Probe {
    if backend.device_info(gpu).is_err() {
        return Probe {
            lost: true,
            ..Probe::default()
        };
    }
    let ecc = backend
        .ecc(gpu)
        .ok()
        .filter(|e| e.enabled)
        .map(|e| (e.sbe_volatile, e.dbe_volatile));
    let remap = backend.row_remap(gpu).unwrap_or_default();
    Probe {
        lost: false,
        ecc_volatile: ecc,
        remap_pending: remap.pending,
        remap_failure: remap.failure,
    }
}

/// Events for a health change, when running against an API server.
fn report(opts: &Options, change: Change) {
    if let (Some(client), Some(node)) = (&opts.kube, &opts.node_name) {
        health_report::spawn(
            client.clone(),
            node.clone(),
            opts.pod_resources_socket.clone(),
            change,
        );
    }
}

/// Records the fault an event means; returns it when it is new (devices now withdrawn).
fn on_event(
    policy: &HealthPolicy,
    backend: &dyn Backend,
    faults: &mut Faults,
    event: &Event,
) -> Option<(Target, FaultKind)> {
    let Some((target, kind)) = policy.classify(event) else {
        tracing::debug!(
            gpu = event.gpu,
            xid = event.xid,
            kind = event.kind,
            "health event ignored"
        );
        return None;
    };
    tracing::warn!(gpu = event.gpu, uuid = %event.gpu_uuid, xid = event.xid, ?target, ?kind,
        "GPU fault: marking its devices Unhealthy");
    faults
        .record(
            target,
            kind,
            Some(probe(backend, event.gpu)),
            Instant::now(),
        )
        .then_some((target, kind))
}

fn probe_faults(policy: &HealthPolicy, backend: &dyn Backend, faults: &mut Faults) -> Vec<Cleared> {
    let mut out = Vec::new();
    for gpu in faults.gpus() {
        for c in faults.observe(gpu, probe(backend, gpu), policy, Instant::now()) {
            tracing::info!(gpu, target = ?c.target, kind = ?c.kind,
                withdrawn_s = c.withdrawn_for.as_secs(), "GPU fault cleared: devices Healthy again");
            out.push(c);
        }
    }
    out
}

/// Reads the backend's health events: as a task that sleeps until one arrives where the
/// stream can wake its reader (the simulated backend), else on a plain thread blocking in the
/// stream's wait (NVML).
fn spawn_event_reader(
    backend: Arc<dyn Backend>,
    tx: mpsc::UnboundedSender<Event>,
    stop: Arc<AtomicBool>,
) {
    // Subscribed now, before the first ListAndWatch: a fault right after start is seen.
    let mut first = backend.subscribe(event_kind::HEALTH).ok();
    if let (Ok(rt), Some(stream)) = (tokio::runtime::Handle::try_current(), first.as_mut()) {
        let wake = Arc::new(tokio::sync::Notify::new());
        let w = wake.clone();
        if stream.on_event(Arc::new(move || w.notify_one())) {
            if let Some(stream) = first.take() {
                rt.spawn(read_events(stream, wake, tx));
            }
            return;
        }
    }
    let spawned = std::thread::Builder::new().name("dp-health".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let subscribed = match first.take() {
                Some(s) => Ok(s),
                None => backend.subscribe(event_kind::HEALTH),
            };
            let mut stream = match subscribed {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot subscribe to GPU events; retrying in 5 s");
                    std::thread::sleep(Duration::from_secs(5));
                    continue;
                }
            };
            while !stop.load(Ordering::Relaxed) {
                match stream.wait(Duration::from_millis(200)) {
                    Ok(Some(ev)) => {
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "GPU event stream failed; re-subscribing");
                        std::thread::sleep(Duration::from_secs(1));
                        break;
                    }
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the health thread; health checks are off");
    }
}

/// [`spawn_event_reader`]'s task: takes the events the stream holds, then sleeps until the
/// stream says another arrived or the plugin stops (its receiver is dropped).
async fn read_events(
    mut stream: Box<dyn gantry_gpu::EventStream>,
    wake: Arc<tokio::sync::Notify>,
    tx: mpsc::UnboundedSender<Event>,
) {
    loop {
        loop {
            match stream.wait(Duration::ZERO) {
                Ok(Some(ev)) => {
                    if tx.send(ev).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %e, "GPU event stream ended; health events stop");
                    return;
                }
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tx.closed() => return,
        }
    }
}
