//! The real backend: NVML through nvml-wrapper, loaded at run time from a driver root.

mod events;
mod fabric;
mod gpm;
mod instances;
mod load;
mod raw;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus, PcieUtilCounter,
    PerformancePolicy, RetirementCause, TemperatureSensor, TopologyLevel as NvTopo,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, Nvml};

pub use load::{SONAME, candidate_paths};

use crate::backend::{Backend, EventStream};
use crate::catalog;
use crate::error::{GpuError, Result};
use crate::types::{
    Clocks, ComputeInstance, DeviceInfo, EccCounts, GpuInstance, MemoryInfo, MigDevice, MigMode,
    MigProfile, NvLinkInfo, PcieInfo, PcieThroughput, Placement, Power, ProcessInfo, Profiling,
    RowRemap, Temperature, TopologyLevel, Utilization, Violations,
};

const MIB: u64 = 1024 * 1024;
/// NVML_NVLINK_MAX_LINKS.
const MAX_NVLINKS: u32 = 18;
/// Field ids (nvml.h).
const FI_MEMORY_TEMP: u32 = 82;
const FI_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;

/// NVML on this machine. `Send + Sync`; share as `Arc<dyn Backend>`.
pub struct NvmlBackend {
    // NVML lives as long as the process: handles, event sets and GPM samples borrow it, and
    // the agents that use it run until exit.
    nvml: &'static Nvml,
    library: PathBuf,
    gpm: Mutex<HashMap<(u32, Option<u32>), GpmSample<'static>>>,
    /// PCI bus ids of the GPUs, to tell GPU peers from NVSwitches at the far end of a link.
    gpu_buses: Vec<String>,
}

impl std::fmt::Debug for NvmlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlBackend")
            .field("library", &self.library)
            .finish()
    }
}

fn err(gpu: u32, call: &str, e: NvmlError) -> GpuError {
    match e {
        NvmlError::GpuLost => GpuError::GpuLost { gpu },
        NvmlError::NotSupported => GpuError::NotSupported {
            gpu,
            what: call.to_string(),
        },
        NvmlError::NotFound => GpuError::NotFound(format!("{call} on GPU {gpu}")),
        NvmlError::NoPermission => GpuError::NoPermission(format!("{call} on GPU {gpu}")),
        NvmlError::InUse => GpuError::InUse {
            gpu,
            reason: call.to_string(),
        },
        NvmlError::InvalidArg => GpuError::InvalidArgument(format!("{call} on GPU {gpu}")),
        e => GpuError::Nvml {
            call: format!("{call} (GPU {gpu})"),
            message: e.to_string(),
        },
    }
}

/// `Ok(None)` for "this GPU does not have that", other errors passed on.
fn optional<T>(r: std::result::Result<T, NvmlError>) -> std::result::Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported | NvmlError::NotFound | NvmlError::InvalidArg) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `nvidia-smi`'s spelling of a brand from nvml-wrapper's variant name.
fn brand_name(variant: &str) -> String {
    match variant {
        "Nvidia" => "NVIDIA".to_string(),
        "NvidiaRTX" => "NVIDIA RTX".to_string(),
        "NvidiaVApps" => "NVIDIA Virtual Applications".to_string(),
        "NvidiaVPC" => "NVIDIA Virtual PC".to_string(),
        "NvidiaVCS" => "NVIDIA Virtual Compute Server".to_string(),
        "NvidiaVWS" => "NVIDIA RTX Virtual Workstation".to_string(),
        "NvidiaCloudGaming" => "NVIDIA Cloud Gaming".to_string(),
        other => other.to_string(),
    }
}

impl NvmlBackend {
    /// Load NVML from under `driver_root` (see [`candidate_paths`]) and initialise it.
    pub fn open(driver_root: Option<&Path>) -> Result<Self> {
        Self::open_from(&candidate_paths(driver_root))
    }

    /// Load NVML from the first of `candidates` that loads.
    pub fn open_from(candidates: &[PathBuf]) -> Result<Self> {
        let (nvml, library) = load::load(candidates)?;
        tracing::info!(library = %library.display(), "NVML loaded");
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let gpu_buses = (0..nvml.device_count().unwrap_or(0))
            .filter_map(|i| nvml.device_by_index(i).ok()?.pci_info().ok())
            .map(|p| p.bus_id)
            .collect();
        Ok(NvmlBackend {
            nvml,
            library,
            gpm: Mutex::new(HashMap::new()),
            gpu_buses,
        })
    }

    /// The library file that was loaded.
    pub fn library_path(&self) -> &Path {
        &self.library
    }

    fn dev(&self, gpu: u32) -> Result<Device<'static>> {
        self.nvml
            .device_by_index(gpu)
            .map_err(|e| err(gpu, "nvmlDeviceGetHandleByIndex", e))
    }

    fn gpm_sample(
        &self,
        gpu: u32,
        dev: &Device<'static>,
        gi: Option<u32>,
    ) -> Result<GpmSample<'static>> {
        match gi {
            Some(id) => dev.gpm_mig_sample(id),
            None => dev.gpm_sample(),
        }
        .map_err(|e| err(gpu, "nvmlGpmSampleGet", e))
    }
}

impl Backend for NvmlBackend {
    fn driver_version(&self) -> Result<String> {
        self.nvml
            .sys_driver_version()
            .map_err(|e| err(0, "nvmlSystemGetDriverVersion", e))
    }

    fn cuda_driver_version(&self) -> Result<u32> {
        let v = self
            .nvml
            .sys_cuda_driver_version()
            .map_err(|e| err(0, "nvmlSystemGetCudaDriverVersion", e))?;
        Ok(v.max(0) as u32)
    }

    fn nvml_version(&self) -> Result<String> {
        self.nvml
            .sys_nvml_version()
            .map_err(|e| err(0, "nvmlSystemGetNVMLVersion", e))
    }

    fn device_count(&self) -> Result<u32> {
        self.nvml
            .device_count()
            .map_err(|e| err(0, "nvmlDeviceGetCount", e))
    }

    fn device_info(&self, gpu: u32) -> Result<DeviceInfo> {
        let d = self.dev(gpu)?;
        let e = |call: &'static str| move |x| err(gpu, call, x);
        let pci = d.pci_info().map_err(e("nvmlDeviceGetPciInfo"))?;
        let name = d.name().map_err(e("nvmlDeviceGetName"))?;
        let cc = d
            .cuda_compute_capability()
            .map_err(e("nvmlDeviceGetCudaComputeCapability"))?;
        let mig_capable = optional(d.mig_mode())
            .map_err(e("nvmlDeviceGetMigMode"))?
            .is_some();
        let model = catalog::MODELS
            .iter()
            .find(|m| m.pci_device_id == pci.pci_device_id)
            .or_else(|| catalog::find(&name));
        Ok(DeviceInfo {
            index: gpu,
            uuid: d.uuid().map_err(e("nvmlDeviceGetUUID"))?,
            name,
            pci_bus_id: pci.bus_id.clone(),
            pci_device_id: pci.pci_device_id,
            pci_subsystem_id: pci.pci_sub_system_id.unwrap_or(0),
            minor_number: d.minor_number().map_err(e("nvmlDeviceGetMinorNumber"))?,
            serial: optional(d.serial())
                .map_err(e("nvmlDeviceGetSerial"))?
                .unwrap_or_default(),
            brand: optional(d.brand())
                .map_err(e("nvmlDeviceGetBrand"))?
                .map(|b| brand_name(&format!("{b:?}")))
                .unwrap_or_default(),
            board_part_number: optional(d.board_part_number())
                .map_err(e("nvmlDeviceGetBoardPartNumber"))?
                .unwrap_or_default(),
            vbios_version: optional(d.vbios_version())
                .map_err(e("nvmlDeviceGetVbiosVersion"))?
                .unwrap_or_default(),
            compute_capability: (cc.major.max(0) as u32, cc.minor.max(0) as u32),
            sm_count: model.map(|m| m.sm_count).unwrap_or(0),
            mig_capable,
        })
    }

    fn memory(&self, gpu: u32) -> Result<MemoryInfo> {
        let m = self
            .dev(gpu)?
            .memory_info()
            .map_err(|e| err(gpu, "nvmlDeviceGetMemoryInfo_v2", e))?;
        Ok(MemoryInfo {
            total_mib: m.total / MIB,
            used_mib: m.used / MIB,
            free_mib: m.free / MIB,
            reserved_mib: m.reserved / MIB,
        })
    }

    fn utilization(&self, gpu: u32) -> Result<Utilization> {
        let d = self.dev(gpu)?;
        let u = d
            .utilization_rates()
            .map_err(|e| err(gpu, "nvmlDeviceGetUtilizationRates", e))?;
        let enc = optional(d.encoder_utilization())
            .map_err(|e| err(gpu, "nvmlDeviceGetEncoderUtilization", e))?;
        let dec = optional(d.decoder_utilization())
            .map_err(|e| err(gpu, "nvmlDeviceGetDecoderUtilization", e))?;
        Ok(Utilization {
            gpu_pct: u.gpu,
            memory_pct: u.memory,
            encoder_pct: enc.map(|x| x.utilization).unwrap_or(0),
            decoder_pct: dec.map(|x| x.utilization).unwrap_or(0),
        })
    }

    fn temperature(&self, gpu: u32) -> Result<Temperature> {
        let d = self.dev(gpu)?;
        let gpu_c = d
            .temperature(TemperatureSensor::Gpu)
            .map_err(|e| err(gpu, "nvmlDeviceGetTemperature", e))?;
        let mem = raw::field_values(self.nvml, &d, &[(FI_MEMORY_TEMP, 0)])
            .ok()
            .and_then(|v| v.first().copied().flatten())
            // NVML reports 0 (or nonsense) where there is no HBM sensor.
            .filter(|&t| t > 0 && t <= 200)
            .map(|t| t as u32);
        Ok(Temperature {
            gpu_c,
            memory_c: mem,
        })
    }

    fn power(&self, gpu: u32) -> Result<Power> {
        let d = self.dev(gpu)?;
        Ok(Power {
            usage_mw: d
                .power_usage()
                .map_err(|e| err(gpu, "nvmlDeviceGetPowerUsage", e))?,
            limit_mw: d
                .enforced_power_limit()
                .map_err(|e| err(gpu, "nvmlDeviceGetEnforcedPowerLimit", e))?,
        })
    }

    fn total_energy_mj(&self, gpu: u32) -> Result<u64> {
        self.dev(gpu)?
            .total_energy_consumption()
            .map_err(|e| err(gpu, "nvmlDeviceGetTotalEnergyConsumption", e))
    }

    fn clocks(&self, gpu: u32) -> Result<Clocks> {
        let d = self.dev(gpu)?;
        let c =
            |clock: Clock, call: &'static str| d.clock_info(clock).map_err(|e| err(gpu, call, e));
        let m = |clock: Clock| {
            optional(d.max_clock_info(clock)).map_err(|e| err(gpu, "nvmlDeviceGetMaxClockInfo", e))
        };
        Ok(Clocks {
            sm_mhz: c(Clock::SM, "nvmlDeviceGetClockInfo(SM)")?,
            mem_mhz: c(Clock::Memory, "nvmlDeviceGetClockInfo(MEM)")?,
            max_sm_mhz: m(Clock::SM)?.unwrap_or(0),
            max_mem_mhz: m(Clock::Memory)?.unwrap_or(0),
            throttle_reasons: optional(d.current_throttle_reasons())
                .map_err(|e| err(gpu, "nvmlDeviceGetCurrentClocksEventReasons", e))?
                .map(|r| r.bits())
                .unwrap_or(0),
        })
    }

    fn violations(&self, gpu: u32) -> Result<Violations> {
        let d = self.dev(gpu)?;
        let v = |p: PerformancePolicy| {
            optional(d.violation_status(p))
                .map(|t| t.map(|t| t.violation_time).unwrap_or(0))
                .map_err(|e| err(gpu, "nvmlDeviceGetViolationStatus", e))
        };
        Ok(Violations {
            power_ns: v(PerformancePolicy::Power)?,
            thermal_ns: v(PerformancePolicy::Thermal)?,
            sync_boost_ns: v(PerformancePolicy::SyncBoost)?,
            board_limit_ns: v(PerformancePolicy::BoardLimit)?,
            low_utilization_ns: v(PerformancePolicy::LowUtilization)?,
            reliability_ns: v(PerformancePolicy::Reliability)?,
        })
    }

    fn ecc(&self, gpu: u32) -> Result<EccCounts> {
        let d = self.dev(gpu)?;
        let enabled = optional(d.is_ecc_enabled())
            .map_err(|e| err(gpu, "nvmlDeviceGetEccMode", e))?
            .map(|s| s.currently_enabled)
            .unwrap_or(false);
        if !enabled {
            return Ok(EccCounts::default());
        }
        let n = |t: MemoryError, c: EccCounter| {
            optional(d.total_ecc_errors(t, c))
                .map(|v| v.unwrap_or(0))
                .map_err(|e| err(gpu, "nvmlDeviceGetTotalEccErrors", e))
        };
        Ok(EccCounts {
            enabled,
            sbe_volatile: n(MemoryError::Corrected, EccCounter::Volatile)?,
            dbe_volatile: n(MemoryError::Uncorrected, EccCounter::Volatile)?,
            sbe_aggregate: n(MemoryError::Corrected, EccCounter::Aggregate)?,
            dbe_aggregate: n(MemoryError::Uncorrected, EccCounter::Aggregate)?,
        })
    }

    fn row_remap(&self, gpu: u32) -> Result<RowRemap> {
        let d = self.dev(gpu)?;
        let rows = optional(raw::remapped_rows(self.nvml, &d))
            .map_err(|e| err(gpu, "nvmlDeviceGetRemappedRows", e))?;
        let pages = |c: RetirementCause| {
            optional(d.retired_pages(c))
                .map(|v| v.map(|p| p.len() as u64).unwrap_or(0))
                .map_err(|e| err(gpu, "nvmlDeviceGetRetiredPages", e))
        };
        let (corr, unc, pending, failure) = rows.unwrap_or((0, 0, false, false));
        Ok(RowRemap {
            correctable_rows: u64::from(corr),
            uncorrectable_rows: u64::from(unc),
            pending,
            failure,
            retired_sbe_pages: pages(RetirementCause::MultipleSingleBitEccErrors)?,
            retired_dbe_pages: pages(RetirementCause::DoubleBitEccError)?,
            retired_pending: optional(d.are_pages_pending_retired())
                .map_err(|e| err(gpu, "nvmlDeviceGetRetiredPagesPendingStatus", e))?
                .unwrap_or(false),
        })
    }

    fn pcie(&self, gpu: u32) -> Result<PcieInfo> {
        let d = self.dev(gpu)?;
        let o = |r: std::result::Result<u32, NvmlError>, call: &'static str| {
            optional(r)
                .map(|v| v.unwrap_or(0))
                .map_err(|e| err(gpu, call, e))
        };
        Ok(PcieInfo {
            link_gen: o(
                d.current_pcie_link_gen(),
                "nvmlDeviceGetCurrPcieLinkGeneration",
            )?,
            max_link_gen: o(d.max_pcie_link_gen(), "nvmlDeviceGetMaxPcieLinkGeneration")?,
            link_width: o(
                d.current_pcie_link_width(),
                "nvmlDeviceGetCurrPcieLinkWidth",
            )?,
            max_link_width: o(d.max_pcie_link_width(), "nvmlDeviceGetMaxPcieLinkWidth")?,
            replay_counter: u64::from(o(
                d.pcie_replay_counter(),
                "nvmlDeviceGetPcieReplayCounter",
            )?),
        })
    }

    fn pcie_throughput(&self, gpu: u32) -> Result<PcieThroughput> {
        let d = self.dev(gpu)?;
        let t = |c: PcieUtilCounter| {
            d.pcie_throughput(c)
                .map_err(|e| err(gpu, "nvmlDeviceGetPcieThroughput", e))
        };
        Ok(PcieThroughput {
            tx_kbps: t(PcieUtilCounter::Send)?,
            rx_kbps: t(PcieUtilCounter::Receive)?,
        })
    }

    fn nvlinks(&self, gpu: u32) -> Result<Vec<NvLinkInfo>> {
        self.read_nvlinks(gpu)
    }

    fn topology(&self, a: u32, b: u32) -> Result<TopologyLevel> {
        self.read_topology(a, b)
    }

    fn processes(&self, gpu: u32) -> Result<Vec<ProcessInfo>> {
        let procs = self
            .dev(gpu)?
            .running_compute_processes()
            .map_err(|e| err(gpu, "nvmlDeviceGetComputeRunningProcesses", e))?;
        Ok(procs
            .into_iter()
            .map(|p| ProcessInfo {
                pid: p.pid,
                used_memory_mib: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => b / MIB,
                    UsedGpuMemory::Unavailable => 0,
                },
                gpu_instance_id: p.gpu_instance_id,
                compute_instance_id: p.compute_instance_id,
            })
            .collect())
    }

    fn vgpu_license_status(&self, gpu: u32) -> Result<u32> {
        let d = self.dev(gpu)?;
        Ok(optional(raw::vgpu_license_state(self.nvml, &d))
            .map_err(|e| err(gpu, "nvmlDeviceGetGridLicensableFeatures_v4", e))?
            .flatten()
            .unwrap_or(0))
    }

    fn profiling(&self, gpu: u32, gpu_instance: Option<u32>) -> Result<Profiling> {
        self.read_profiling(gpu, gpu_instance)
    }

    fn mig_mode(&self, gpu: u32) -> Result<MigMode> {
        let m = self
            .dev(gpu)?
            .mig_mode()
            .map_err(|e| err(gpu, "nvmlDeviceGetMigMode", e))?;
        Ok(MigMode {
            current: m.current != 0,
            pending: m.pending != 0,
        })
    }

    fn mig_profiles(&self, gpu: u32) -> Result<Vec<MigProfile>> {
        let d = self.dev(gpu)?;
        if optional(d.mig_mode())
            .map_err(|e| err(gpu, "nvmlDeviceGetMigMode", e))?
            .is_none()
        {
            return Ok(Vec::new());
        }
        self.gi_profiles(gpu, &d)
    }

    fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>> {
        self.mig_gpu_instances(gpu)
    }

    fn compute_instances(&self, gpu: u32, gpu_instance: u32) -> Result<Vec<ComputeInstance>> {
        self.mig_compute_instances(gpu, gpu_instance)
    }

    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>> {
        self.mig_devices_of(gpu)
    }

    fn mig_device_memory(&self, uuid: &str) -> Result<MemoryInfo> {
        let d = self.nvml.device_by_uuid(uuid).map_err(|e| match e {
            NvmlError::NotFound | NvmlError::InvalidArg => {
                GpuError::NotFound(format!("MIG device {uuid}"))
            }
            e => err(0, "nvmlDeviceGetHandleByUUID", e),
        })?;
        let m = d.memory_info().map_err(|e| GpuError::Nvml {
            call: format!("nvmlDeviceGetMemoryInfo ({uuid})"),
            message: e.to_string(),
        })?;
        Ok(MemoryInfo {
            total_mib: m.total / MIB,
            used_mib: m.used / MIB,
            free_mib: m.free / MIB,
            reserved_mib: m.reserved / MIB,
        })
    }

    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> Result<MigMode> {
        let d = self.dev(gpu)?;
        d.set_mig_mode(enabled)
            .map_err(|e| err(gpu, "nvmlDeviceSetMigMode", e))?;
        self.mig_mode(gpu)
    }

    fn create_gpu_instance(
        &self,
        gpu: u32,
        profile: &str,
        placement: Option<Placement>,
    ) -> Result<GpuInstance> {
        self.mig_create_gpu_instance(gpu, profile, placement)
    }

    fn destroy_gpu_instance(&self, gpu: u32, gpu_instance: u32) -> Result<()> {
        let d = self.dev(gpu)?;
        raw::destroy_gpu_instance(self.nvml, &d, gpu_instance)
            .map_err(|e| err(gpu, "nvmlGpuInstanceDestroy", e))
    }

    fn create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        slices: u32,
    ) -> Result<ComputeInstance> {
        self.mig_create_compute_instance(gpu, gpu_instance, slices)
    }

    fn destroy_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<()> {
        let d = self.dev(gpu)?;
        raw::destroy_compute_instance(self.nvml, &d, gpu_instance, compute_instance)
            .map_err(|e| err(gpu, "nvmlComputeInstanceDestroy", e))
    }

    fn subscribe(&self, mask: u64) -> Result<Box<dyn EventStream>> {
        self.subscribe_events(mask)
    }
}
