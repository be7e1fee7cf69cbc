//! A simulated node's GPUs behind the [`Backend`] trait, with controls for load and faults.

mod clock;
mod gpu;
pub mod ids;
mod topology;

use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use gpu::SimProcess;

use crate::backend::{Backend, EventStream, Wake};
use crate::catalog::{self, GpuModel};
use crate::error::{GpuError, Result};
use crate::types::{
    Clocks, ComputeInstance, DeviceInfo, EccCounts, Event, GpuInstance, MemoryInfo, MigDevice,
    MigMode, MigProfile, NvLinkInfo, PcieInfo, PcieThroughput, Placement, Power, ProcessInfo,
    Profiling, RowRemap, Temperature, TopologyLevel, Utilization, Violations, event_kind,
};
use clock::SimClock;
use gpu::SimGpu;

/// XID the driver logs when a GPU falls off the bus.
pub const XID_FALLEN_OFF_BUS: u64 = 79;
/// XID for a double-bit ECC error.
pub const XID_DOUBLE_BIT_ECC: u64 = 48;

/// How to build a simulated node's GPUs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub model: &'static GpuModel,
    pub count: u32,
    /// Seeds UUIDs, serials and metric jitter. Same seed, same GPUs.
    pub seed: u64,
    pub driver_version: String,
    /// CUDA driver API version as NVML encodes it (13000 = 13.0).
    pub cuda_version: u32,
    /// Use a manual clock moved by [`SimBackend::advance`] instead of wall time (tests).
    pub manual_clock: bool,
}

impl SimConfig {
    /// `count` GPUs of `model`, seeded, with the driver our H200 machine runs.
    pub fn new(model: &'static GpuModel, count: u32, seed: u64) -> Self {
        SimConfig {
            model,
            count,
            seed,
            driver_version: "580.159.04".to_string(),
            cuda_version: 13000,
            manual_clock: false,
        }
    }

    /// Look the model up by key/alias/NVML name (`H100-80GB`, `NVIDIA H200`, `l4`, ...).
    pub fn for_model(model: &str, count: u32, seed: u64) -> Result<Self> {
        let m = catalog::find(model).ok_or_else(|| {
            GpuError::NotFound(format!(
                "GPU model {model:?} (known: {})",
                catalog::keys().join(", ")
            ))
        })?;
        Ok(Self::new(m, count, seed))
    }

    pub fn manual_clock(mut self) -> Self {
        self.manual_clock = true;
        self
    }
}

struct Subscriber {
    mask: u64,
    tx: mpsc::Sender<Event>,
    /// The stream's [`EventStream::on_event`] callback, once it has one.
    wake: Arc<Mutex<Option<Wake>>>,
}

/// The simulated GPUs of one node. Cheap to share as `Arc<SimBackend>` (or `Arc<dyn Backend>`).
pub struct SimBackend {
    config: SimConfig,
    clock: SimClock,
    gpus: Mutex<Vec<SimGpu>>,
    subscribers: Mutex<Vec<Subscriber>>,
    /// Starts as `config.driver_version`; a simulated driver install changes it.
    driver_version: Mutex<String>,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend")
            .field("model", &self.config.model.key)
            .field("count", &self.config.count)
            .field("seed", &self.config.seed)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take the simulated node down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimBackend {
    pub fn new(config: SimConfig) -> Self {
        let gpus = (0..config.count)
            .map(|i| SimGpu::new(config.model, i, config.count, config.seed))
            .collect();
        let clock = if config.manual_clock {
            SimClock::manual()
        } else {
            SimClock::real()
        };
        SimBackend {
            driver_version: Mutex::new(config.driver_version.clone()),
            config,
            clock,
            gpus: Mutex::new(gpus),
            subscribers: Mutex::new(Vec::new()),
        }
    }

    pub fn model(&self) -> &'static GpuModel {
        self.config.model
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Replace the driver version NVML reports (a simulated driver container installed
    /// another driver).
    pub fn set_driver_version(&self, version: &str) {
        *lock(&self.driver_version) = version.to_string();
    }

    /// Move a manual clock forward (metrics integrate over it). Returns false on wall time.
    pub fn advance(&self, by: Duration) -> bool {
        self.clock.advance(by)
    }

    /// Run `f` on GPU `gpu` after bringing its integrated metrics up to now.
    fn with_gpu<T>(
        &self,
        gpu: u32,
        f: impl FnOnce(&mut SimGpu, Duration) -> Result<T>,
    ) -> Result<T> {
        let now = self.clock.now();
        let mut gpus = lock(&self.gpus);
        let count = gpus.len();
        let g = gpus.get_mut(gpu as usize).ok_or_else(|| {
            GpuError::NotFound(format!("GPU {gpu} (this node has {count} GPU(s))"))
        })?;
        g.advance(now);
        f(g, now)
    }

    /// How many event streams are registered (a closed one is dropped at the next event).
    /// Like NVML, an event reaches only the streams registered when it happens: tests wait
    /// for a watcher before injecting a fault.
    pub fn event_subscribers(&self) -> usize {
        lock(&self.subscribers).len()
    }

    fn emit(&self, event: Event) {
        lock(&self.subscribers).retain(|s| {
            if s.mask & event.kind == 0 {
                return true;
            }
            let sent = s.tx.send(event.clone()).is_ok();
            if let Some(wake) = lock(&s.wake).as_ref() {
                wake();
            }
            sent
        });
    }

    fn event(g: &SimGpu, kind: u64, xid: u64, gi: Option<u32>, ci: Option<u32>) -> Event {
        Event {
            gpu: g.index(),
            gpu_uuid: g.info.uuid.clone(),
            kind,
            xid,
            gpu_instance_id: gi,
            compute_instance_id: ci,
        }
    }

    // ---------------- load controls ----------------

    /// Set the background load of a whole GPU: `utilization` 0.0–1.0 and memory in MiB.
    /// Adds to whatever registered processes use.
    pub fn set_load(&self, gpu: u32, utilization: f64, memory_used_mib: u64) -> Result<()> {
        if !(0.0..=1.0).contains(&utilization) {
            return Err(GpuError::InvalidArgument(format!(
                "GPU {gpu}: utilization {utilization} is outside 0.0–1.0"
            )));
        }
        self.with_gpu(gpu, |g, _| {
            g.alive()?;
            g.base_util = utilization;
            g.base_memory_mib = memory_used_mib;
            Ok(())
        })
    }

    /// Register a process on a GPU or on a MIG device of it (`gpu_instance`/`compute_instance`).
    /// Replaces a process with the same pid.
    pub fn start_process(&self, process: SimProcess) -> Result<()> {
        self.with_gpu(process.gpu, |g, _| g.check_process(&process))?;
        self.stop_process(process.pid);
        self.with_gpu(process.gpu, |g, _| {
            g.processes.push(process);
            Ok(())
        })
    }

    /// Remove a process wherever it runs; returns whether it existed.
    pub fn stop_process(&self, pid: u32) -> bool {
        let now = self.clock.now();
        let mut gpus = lock(&self.gpus);
        let mut found = false;
        for g in gpus.iter_mut() {
            if g.processes.iter().any(|p| p.pid == pid) {
                g.advance(now);
                g.processes.retain(|p| p.pid != pid);
                found = true;
            }
        }
        found
    }

    /// All registered processes.
    pub fn sim_processes(&self) -> Vec<SimProcess> {
        lock(&self.gpus)
            .iter()
            .flat_map(|g| g.processes.iter().cloned())
            .collect()
    }

    // ---------------- faults ----------------

    /// Report XID `xid` on a GPU (optionally attributed to a MIG GPU/compute instance).
    pub fn inject_xid(
        &self,
        gpu: u32,
        xid: u64,
        gpu_instance: Option<u32>,
        compute_instance: Option<u32>,
    ) -> Result<()> {
        let ev = self.with_gpu(gpu, |g, _| {
            g.last_xid = xid;
            Ok(Self::event(
                g,
                event_kind::XID_CRITICAL,
                xid,
                gpu_instance,
                compute_instance,
            ))
        })?;
        self.emit(ev);
        Ok(())
    }

    /// The GPU falls off the bus: XID 79 is reported and every call on it fails with
    /// `GpuLost` until [`SimBackend::reset_gpu`].
    pub fn inject_fallen_off_bus(&self, gpu: u32) -> Result<()> {
        let ev = self.with_gpu(gpu, |g, _| {
            g.last_xid = XID_FALLEN_OFF_BUS;
            g.lost = true;
            Ok(Self::event(
                g,
                event_kind::XID_CRITICAL,
                XID_FALLEN_OFF_BUS,
                None,
                None,
            ))
        })?;
        self.emit(ev);
        Ok(())
    }

    /// A double-bit (uncorrectable) ECC error: counters go up, a DBE event and XID 48 are
    /// reported, and on Ampere+ a row remap becomes pending (cleared by a reset).
    pub fn inject_ecc_dbe(&self, gpu: u32) -> Result<()> {
        let evs = self.with_gpu(gpu, |g, _| {
            g.alive()?;
            g.ecc.dbe_volatile += 1;
            g.ecc.dbe_aggregate += 1;
            if g.model.compute_capability.0 >= 8 {
                g.remap.uncorrectable_rows += 1;
                g.remap.pending = true;
            } else {
                g.remap.retired_dbe_pages += 1;
                g.remap.retired_pending = true;
            }
            g.last_xid = XID_DOUBLE_BIT_ECC;
            Ok([
                Self::event(g, event_kind::DOUBLE_BIT_ECC, 0, None, None),
                Self::event(g, event_kind::XID_CRITICAL, XID_DOUBLE_BIT_ECC, None, None),
            ])
        })?;
        for ev in evs {
            self.emit(ev);
        }
        Ok(())
    }

    /// `count` single-bit (corrected) ECC errors, with one SBE event.
    pub fn inject_ecc_sbe(&self, gpu: u32, count: u64) -> Result<()> {
        let ev = self.with_gpu(gpu, |g, _| {
            g.alive()?;
            g.ecc.sbe_volatile += count;
            g.ecc.sbe_aggregate += count;
            Ok(Self::event(g, event_kind::SINGLE_BIT_ECC, 0, None, None))
        })?;
        self.emit(ev);
        Ok(())
    }

    /// `count` CRC flit errors on one NVLink (a marginal link): the link retransmits each one
    /// (replay counter), and about one in four also corrupts data.
    pub fn inject_nvlink_crc_errors(&self, gpu: u32, link: u32, count: u64) -> Result<()> {
        self.with_gpu(gpu, |g, _| {
            g.alive()?;
            let links = g.nvlink_errors.len();
            let e = g.nvlink_errors.get_mut(link as usize).ok_or_else(|| {
                GpuError::NotFound(format!("NVLink {link} on GPU {gpu} ({links} links)"))
            })?;
            e[0] += count;
            e[1] += count / 4;
            e[2] += count;
            Ok(())
        })
    }

    /// Add PCIe replays (a flaky link).
    pub fn inject_pcie_replays(&self, gpu: u32, count: u64) -> Result<()> {
        self.with_gpu(gpu, |g, _| {
            g.alive()?;
            g.pcie_replays += count;
            Ok(())
        })
    }

    /// Reset a GPU (`nvidia-smi -r`): clears a lost GPU, the last XID, volatile ECC counts
    /// and pending remaps, kills its processes and applies a pending MIG mode.
    pub fn reset_gpu(&self, gpu: u32) -> Result<()> {
        self.with_gpu(gpu, |g, _| {
            g.reset();
            Ok(())
        })
    }

    /// Last XID seen on a GPU (0 = none since reset), as dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`.
    pub fn last_xid(&self, gpu: u32) -> Result<u64> {
        self.with_gpu(gpu, |g, _| Ok(g.last_xid))
    }

    /// Whether a GPU is currently lost.
    pub fn is_lost(&self, gpu: u32) -> Result<bool> {
        self.with_gpu(gpu, |g, _| Ok(g.lost))
    }
}

struct SimEvents {
    rx: mpsc::Receiver<Event>,
    wake: Arc<Mutex<Option<Wake>>>,
}

impl EventStream for SimEvents {
    fn wait(&mut self, timeout: Duration) -> Result<Option<Event>> {
        match self.rx.recv_timeout(timeout) {
            Ok(ev) => Ok(Some(ev)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(GpuError::NotFound(
                "simulated GPU backend (event source dropped)".to_string(),
            )),
        }
    }

    fn on_event(&mut self, wake: Wake) -> bool {
        *lock(&self.wake) = Some(wake);
        true
    }
}

impl Backend for SimBackend {
    fn driver_version(&self) -> Result<String> {
        Ok(lock(&self.driver_version).clone())
    }

    fn cuda_driver_version(&self) -> Result<u32> {
        Ok(self.config.cuda_version)
    }

    fn nvml_version(&self) -> Result<String> {
        Ok(format!(
            "{}.{}",
            self.config.cuda_version / 1000,
            lock(&self.driver_version)
        ))
    }

    fn device_count(&self) -> Result<u32> {
        Ok(lock(&self.gpus).len() as u32)
    }

    fn device_info(&self, gpu: u32) -> Result<DeviceInfo> {
        self.with_gpu(gpu, |g, _| {
            g.alive()?;
            Ok(g.info.clone())
        })
    }

    fn memory(&self, gpu: u32) -> Result<MemoryInfo> {
        self.with_gpu(gpu, |g, _| g.memory())
    }

    fn utilization(&self, gpu: u32) -> Result<Utilization> {
        self.with_gpu(gpu, |g, now| g.utilization(now))
    }

    fn temperature(&self, gpu: u32) -> Result<Temperature> {
        self.with_gpu(gpu, |g, _| g.temperature())
    }

    fn power(&self, gpu: u32) -> Result<Power> {
        self.with_gpu(gpu, |g, now| g.power(now))
    }

    fn total_energy_mj(&self, gpu: u32) -> Result<u64> {
        self.with_gpu(gpu, |g, _| g.energy_mj())
    }

    fn clocks(&self, gpu: u32) -> Result<Clocks> {
        self.with_gpu(gpu, |g, _| g.clocks())
    }

    fn violations(&self, gpu: u32) -> Result<Violations> {
        self.with_gpu(gpu, |g, _| g.violations())
    }

    fn ecc(&self, gpu: u32) -> Result<EccCounts> {
        self.with_gpu(gpu, |g, _| g.ecc())
    }

    fn row_remap(&self, gpu: u32) -> Result<RowRemap> {
        self.with_gpu(gpu, |g, _| g.row_remap())
    }

    fn pcie(&self, gpu: u32) -> Result<PcieInfo> {
        self.with_gpu(gpu, |g, _| g.pcie())
    }

    fn pcie_throughput(&self, gpu: u32) -> Result<PcieThroughput> {
        self.with_gpu(gpu, |g, now| g.pcie_throughput(now))
    }

    fn nvlinks(&self, gpu: u32) -> Result<Vec<NvLinkInfo>> {
        let (tx, rx, errors) = self.with_gpu(gpu, |g, _| {
            g.alive()?;
            let (tx, rx) = g.nvlink_counters();
            Ok((tx, rx, g.nvlink_errors.clone()))
        })?;
        let gpus = lock(&self.gpus);
        let buses: Vec<String> = gpus.iter().map(|g| g.info.pci_bus_id.clone()).collect();
        let mut links = topology::nvlinks(self.config.model, gpu, &buses, tx, rx);
        for (l, e) in links.iter_mut().zip(errors) {
            [
                l.crc_flit_errors,
                l.crc_data_errors,
                l.replay_errors,
                l.recovery_errors,
            ] = e;
        }
        Ok(links)
    }

    fn topology(&self, a: u32, b: u32) -> Result<TopologyLevel> {
        let count = self.device_count()?;
        for g in [a, b] {
            self.with_gpu(g, |g, _| g.alive())?;
        }
        Ok(topology::level(self.config.model, count, a, b))
    }

    fn processes(&self, gpu: u32) -> Result<Vec<ProcessInfo>> {
        self.with_gpu(gpu, |g, _| g.processes())
    }

    fn vgpu_license_status(&self, gpu: u32) -> Result<u32> {
        // Simulated GPUs are bare-metal passthrough, never vGPU guests.
        self.with_gpu(gpu, |g, _| g.alive().map(|()| 0))
    }

    fn profiling(&self, gpu: u32, gpu_instance: Option<u32>) -> Result<Profiling> {
        self.with_gpu(gpu, |g, _| g.profiling(gpu_instance))
    }

    fn mig_mode(&self, gpu: u32) -> Result<MigMode> {
        self.with_gpu(gpu, |g, _| g.mig_mode())
    }

    fn mig_profiles(&self, gpu: u32) -> Result<Vec<MigProfile>> {
        self.with_gpu(gpu, |g, _| {
            g.alive()?;
            Ok(g.model.mig_profiles())
        })
    }

    fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>> {
        self.with_gpu(gpu, |g, _| g.gpu_instances())
    }

    fn compute_instances(&self, gpu: u32, gpu_instance: u32) -> Result<Vec<ComputeInstance>> {
        self.with_gpu(gpu, |g, _| g.compute_instances(gpu_instance))
    }

    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>> {
        self.with_gpu(gpu, |g, _| g.mig_devices())
    }

    fn mig_device_memory(&self, uuid: &str) -> Result<MemoryInfo> {
        let now = self.clock.now();
        let mut gpus = lock(&self.gpus);
        for g in gpus.iter_mut() {
            g.advance(now);
            if let Some(r) = g.mig_device_memory(uuid) {
                return r;
            }
        }
        Err(GpuError::NotFound(format!("MIG device {uuid}")))
    }

    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> Result<MigMode> {
        let (mode, ev) = self.with_gpu(gpu, |g, _| {
            let mode = g.set_mig_mode(enabled)?;
            Ok((
                mode,
                Self::event(g, event_kind::MIG_CONFIG_CHANGE, 0, None, None),
            ))
        })?;
        self.emit(ev);
        Ok(mode)
    }

    fn create_gpu_instance(
        &self,
        gpu: u32,
        profile: &str,
        placement: Option<Placement>,
    ) -> Result<GpuInstance> {
        let (gi, ev) = self.with_gpu(gpu, |g, _| {
            let gi = g.create_gi(profile, placement)?;
            Ok((
                gi,
                Self::event(g, event_kind::MIG_CONFIG_CHANGE, 0, None, None),
            ))
        })?;
        self.emit(ev);
        Ok(gi)
    }

    fn destroy_gpu_instance(&self, gpu: u32, gpu_instance: u32) -> Result<()> {
        let ev = self.with_gpu(gpu, |g, _| {
            g.destroy_gi(gpu_instance)?;
            Ok(Self::event(g, event_kind::MIG_CONFIG_CHANGE, 0, None, None))
        })?;
        self.emit(ev);
        Ok(())
    }

    fn create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        slices: u32,
    ) -> Result<ComputeInstance> {
        let (ci, ev) = self.with_gpu(gpu, |g, _| {
            let ci = g.create_ci(gpu_instance, slices)?;
            Ok((
                ci,
                Self::event(g, event_kind::MIG_CONFIG_CHANGE, 0, None, None),
            ))
        })?;
        self.emit(ev);
        Ok(ci)
    }

    fn destroy_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<()> {
        let ev = self.with_gpu(gpu, |g, _| {
            g.destroy_ci(gpu_instance, compute_instance)?;
            Ok(Self::event(g, event_kind::MIG_CONFIG_CHANGE, 0, None, None))
        })?;
        self.emit(ev);
        Ok(())
    }

    fn subscribe(&self, mask: u64) -> Result<Box<dyn EventStream>> {
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(Mutex::new(None));
        lock(&self.subscribers).push(Subscriber {
            mask,
            tx,
            wake: wake.clone(),
        });
        Ok(Box::new(SimEvents { rx, wake }))
    }
}
