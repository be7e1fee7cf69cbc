//! One simulated GPU: identity, MIG state, load, faults, and metrics integrated over time.

mod instances;

use std::time::Duration;

use crate::catalog::{Family, GpuModel};
use crate::error::{GpuError, Result};
use crate::mig::{self, Occupant};
use crate::sim::ids;
use crate::types::{
    Clocks, ComputeInstance, DeviceInfo, EccCounts, GpuInstance, MemoryInfo, MigDevice, MigMode,
    MigProfile, PcieInfo, PcieThroughput, Placement, Power, ProcessInfo, Profiling, RowRemap,
    Temperature, Utilization, Violations, throttle,
};

/// Idle GPU temperature (our H200 idles at 39 °C, HBM 41 °C) and the rise at full load, °C.
const IDLE_TEMP_C: f64 = 38.0;
const FULL_LOAD_RISE_C: f64 = 38.0;
/// Thermal time constant, seconds.
const THERMAL_TAU_S: f64 = 30.0;
/// HBM runs a few degrees hotter than the die.
const HBM_OFFSET_C: f64 = 3.0;

/// A process on a simulated GPU (whole GPU, or a MIG device of it).
#[derive(Debug, Clone, PartialEq)]
pub struct SimProcess {
    pub pid: u32,
    pub gpu: u32,
    /// GPU instance (and compute instance) when the process runs on a MIG device.
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub memory_mib: u64,
    /// Share of its device's compute the process keeps busy, 0.0–1.0.
    pub utilization: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct SimCi {
    pub id: u32,
    pub start: u32,
    pub slices: u32,
    pub uuid: String,
}

#[derive(Debug, Clone)]
pub(crate) struct SimGi {
    pub id: u32,
    pub profile: MigProfile,
    pub placement: Placement,
    pub cis: Vec<SimCi>,
}

#[derive(Debug)]
pub(crate) struct SimGpu {
    pub model: &'static GpuModel,
    pub info: DeviceInfo,
    seed: u64,
    pub mig: MigMode,
    pub gis: Vec<SimGi>,
    /// Bumped on every MIG change so MIG UUIDs of re-created devices differ.
    mig_generation: u64,
    pub base_util: f64,
    pub base_memory_mib: u64,
    pub processes: Vec<SimProcess>,
    pub lost: bool,
    pub last_xid: u64,
    pub ecc: EccCounts,
    pub remap: RowRemap,
    pub pcie_replays: u64,
    // integrated state
    last: Duration,
    energy_mj: f64,
    temp_c: f64,
    nvlink_tx_kib: f64,
    nvlink_rx_kib: f64,
    /// Per link: CRC flit, CRC data, replay, recovery errors.
    pub nvlink_errors: Vec<[u64; 4]>,
    power_violation_ns: f64,
    low_util_ns: f64,
}

impl SimGpu {
    pub fn new(model: &'static GpuModel, index: u32, count: u32, seed: u64) -> Self {
        let h = ids::mix_all(&[seed, u64::from(index)]);
        let info = DeviceInfo {
            index,
            uuid: ids::uuid("GPU", h, ids::mix(h)),
            name: model.name.to_string(),
            pci_bus_id: ids::pci_bus_id(index, count),
            pci_device_id: model.pci_device_id,
            pci_subsystem_id: model.pci_subsystem_id,
            minor_number: index,
            serial: format!("{:013}", ids::mix(h ^ 0x5e) % 10_000_000_000_000),
            brand: model.brand.to_string(),
            board_part_number: format!("699-2G{:03}-0200-{:03}", model.pci_device_id >> 20, index),
            vbios_version: format!(
                "{:02X}.00.{:02X}.00.01",
                model.pci_device_id >> 24,
                (model.pci_device_id >> 16) & 0xff
            ),
            compute_capability: model.compute_capability,
            sm_count: model.sm_count,
            mig_capable: model.mig_capable(),
        };
        SimGpu {
            model,
            info,
            seed: h,
            mig: MigMode::default(),
            gis: Vec::new(),
            mig_generation: 0,
            base_util: 0.0,
            base_memory_mib: 0,
            processes: Vec::new(),
            lost: false,
            last_xid: 0,
            ecc: EccCounts {
                enabled: true,
                ..EccCounts::default()
            },
            remap: RowRemap::default(),
            pcie_replays: 0,
            last: Duration::ZERO,
            energy_mj: 0.0,
            temp_c: IDLE_TEMP_C,
            nvlink_tx_kib: 0.0,
            nvlink_rx_kib: 0.0,
            nvlink_errors: vec![[0; 4]; model.nvlinks as usize],
            power_violation_ns: 0.0,
            low_util_ns: 0.0,
        }
    }

    pub fn index(&self) -> u32 {
        self.info.index
    }

    /// Fail with `GpuLost` when the GPU has fallen off the bus.
    pub fn alive(&self) -> Result<()> {
        if self.lost {
            Err(GpuError::GpuLost { gpu: self.index() })
        } else {
            Ok(())
        }
    }

    fn not_supported(&self, what: &str) -> GpuError {
        GpuError::NotSupported {
            gpu: self.index(),
            what: what.to_string(),
        }
    }

    // ---------- load ----------

    /// Busy share of one GPU instance, 0–1.
    fn gi_util(&self, gi: u32) -> f64 {
        self.processes
            .iter()
            .filter(|p| p.gpu_instance == Some(gi))
            .map(|p| p.utilization)
            .sum::<f64>()
            .clamp(0.0, 1.0)
    }

    /// Busy share of the whole GPU, 0–1.
    pub fn util(&self) -> f64 {
        if self.mig.current {
            let busy: f64 = self
                .gis
                .iter()
                .map(|g| self.gi_util(g.id) * f64::from(g.profile.slices))
                .sum();
            (busy / f64::from(mig::COMPUTE_SLICES) + self.base_util).clamp(0.0, 1.0)
        } else {
            let procs: f64 = self.processes.iter().map(|p| p.utilization).sum();
            (self.base_util + procs).clamp(0.0, 1.0)
        }
    }

    fn used_mib(&self) -> u64 {
        let procs: u64 = self.processes.iter().map(|p| p.memory_mib).sum();
        (self.base_memory_mib + procs).min(self.usable_mib())
    }

    fn reserved_mib(&self) -> u64 {
        self.model.reserved_mib
    }

    fn usable_mib(&self) -> u64 {
        self.model.memory_mib - self.reserved_mib()
    }

    /// Deterministic jitter in [-1, 1] that changes once per simulated second.
    fn jitter(&self, salt: u64, now: Duration) -> f64 {
        let h = ids::mix_all(&[self.seed, salt, now.as_secs()]);
        (h % 2001) as f64 / 1000.0 - 1.0
    }

    fn power_w_at(&self, util: f64) -> f64 {
        let idle = f64::from(self.model.idle_power_w);
        let limit = f64::from(self.model.power_limit_w);
        (idle + (limit - idle) * util.powf(0.9) * 0.92).min(limit)
    }

    /// Integrate energy, temperature and link counters up to `now`. Load is constant between
    /// calls (every load change calls this first), so the integration is exact.
    pub fn advance(&mut self, now: Duration) {
        if now <= self.last {
            return;
        }
        let dt = (now - self.last).as_secs_f64();
        self.last = now;
        if self.lost {
            return;
        }
        let util = self.util();
        self.energy_mj += self.power_w_at(util) * 1000.0 * dt;
        // Same thresholds as `clocks()`: idle clocks down, full load runs into the power cap.
        if util <= 0.0 {
            self.low_util_ns += dt * 1e9;
        } else if util >= 0.95 {
            self.power_violation_ns += dt * 1e9;
        }
        let target = IDLE_TEMP_C + FULL_LOAD_RISE_C * util;
        self.temp_c = target + (self.temp_c - target) * (-dt / THERMAL_TAU_S).exp();
        if self.model.nvlinks > 0 && !self.mig.current {
            // A quarter of the link bandwidth while busy, as a data-parallel job would use.
            let kib_per_s = f64::from(self.model.nvlinks * self.model.nvlink_gbps) * 1e6 / 1024.0;
            self.nvlink_tx_kib += kib_per_s * 0.25 * util * dt;
            self.nvlink_rx_kib += kib_per_s * 0.25 * util * dt;
        }
    }

    // ---------- metric reads (call `advance` first) ----------

    pub fn memory(&self) -> Result<MemoryInfo> {
        self.alive()?;
        let used = self.used_mib();
        Ok(MemoryInfo {
            total_mib: self.model.memory_mib,
            used_mib: used,
            free_mib: self.usable_mib() - used,
            reserved_mib: self.reserved_mib(),
        })
    }

    pub fn utilization(&self, now: Duration) -> Result<Utilization> {
        self.alive()?;
        if self.mig.current {
            return Err(self.not_supported("utilization with MIG enabled"));
        }
        let u = self.util();
        let pct = |v: f64| (v * 100.0).round().clamp(0.0, 100.0) as u32;
        let busy = if u > 0.0 {
            u + 0.02 * self.jitter(1, now)
        } else {
            0.0
        };
        Ok(Utilization {
            gpu_pct: pct(busy),
            memory_pct: pct(busy * 0.55),
            encoder_pct: 0,
            decoder_pct: 0,
        })
    }

    pub fn temperature(&self) -> Result<Temperature> {
        self.alive()?;
        let gpu = self.temp_c.round() as u32;
        Ok(Temperature {
            gpu_c: gpu,
            memory_c: self
                .model
                .hbm
                .then(|| (self.temp_c + HBM_OFFSET_C).round() as u32),
        })
    }

    pub fn power(&self, now: Duration) -> Result<Power> {
        self.alive()?;
        let w = self.power_w_at(self.util()) * (1.0 + 0.015 * self.jitter(2, now));
        let limit = self.model.power_limit_w * 1000;
        Ok(Power {
            usage_mw: ((w * 1000.0) as u32).min(limit),
            limit_mw: limit,
        })
    }

    pub fn energy_mj(&self) -> Result<u64> {
        self.alive()?;
        Ok(self.energy_mj as u64)
    }

    pub fn clocks(&self) -> Result<Clocks> {
        self.alive()?;
        let u = self.util();
        let m = self.model;
        let (sm, mut reasons) = if u <= 0.0 {
            (m.idle_sm_mhz, throttle::GPU_IDLE)
        } else if u >= 0.95 {
            // Full load runs into the power cap and loses a few bins.
            (m.max_sm_mhz - m.max_sm_mhz / 12, throttle::SW_POWER_CAP)
        } else {
            (m.max_sm_mhz, 0)
        };
        if self.temp_c > 85.0 {
            reasons |= throttle::SW_THERMAL_SLOWDOWN;
        }
        let mem = if m.hbm || u > 0.0 { m.max_mem_mhz } else { 405 };
        Ok(Clocks {
            sm_mhz: sm,
            mem_mhz: mem,
            max_sm_mhz: m.max_sm_mhz,
            max_mem_mhz: m.max_mem_mhz,
            throttle_reasons: reasons,
        })
    }

    pub fn violations(&self) -> Result<Violations> {
        self.alive()?;
        Ok(Violations {
            power_ns: self.power_violation_ns as u64,
            low_utilization_ns: self.low_util_ns as u64,
            ..Violations::default()
        })
    }

    pub fn ecc(&self) -> Result<EccCounts> {
        self.alive()?;
        Ok(self.ecc)
    }

    pub fn row_remap(&self) -> Result<RowRemap> {
        self.alive()?;
        Ok(self.remap)
    }

    pub fn pcie(&self) -> Result<PcieInfo> {
        self.alive()?;
        // GDDR boards drop the link to gen 1 when idle; the HBM parts stay at full speed.
        let busy = self.util() > 0.0;
        let gen_ = if busy || self.model.hbm {
            self.model.pcie_gen
        } else {
            1
        };
        Ok(PcieInfo {
            link_gen: gen_,
            max_link_gen: self.model.pcie_gen,
            link_width: self.model.pcie_width,
            max_link_width: self.model.pcie_width,
            replay_counter: self.pcie_replays,
        })
    }

    pub fn pcie_throughput(&self, now: Duration) -> Result<PcieThroughput> {
        self.alive()?;
        // Host traffic: a few hundred MB/s while busy (input pipelines, checkpoints), and the
        // driver's own trickle (our idle H200 shows 0.5–1.5 MB/s).
        let tx = 1_000.0 + 400_000.0 * self.util() * (1.0 + 0.1 * self.jitter(3, now));
        Ok(PcieThroughput {
            tx_kbps: tx.max(0.0) as u32,
            rx_kbps: (tx * 1.6).max(0.0) as u32,
        })
    }

    pub fn nvlink_counters(&self) -> (u64, u64) {
        (self.nvlink_tx_kib as u64, self.nvlink_rx_kib as u64)
    }

    pub fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.alive()?;
        Ok(self
            .processes
            .iter()
            .map(|p| ProcessInfo {
                pid: p.pid,
                used_memory_mib: p.memory_mib,
                gpu_instance_id: p.gpu_instance,
                compute_instance_id: p.compute_instance,
            })
            .collect())
    }

    pub fn profiling(&self, gpu_instance: Option<u32>) -> Result<Profiling> {
        self.alive()?;
        if !matches!(self.model.family, Family::Hopper | Family::Blackwell) {
            return Err(self.not_supported("GPM profiling metrics"));
        }
        let u = match gpu_instance {
            Some(gi) => {
                self.gi(gi)?;
                self.gi_util(gi)
            }
            None => self.util(),
        };
        let pcie = 400_000.0 * 1024.0 * u;
        Ok(Profiling {
            graphics_active: u,
            sm_active: u * 0.92,
            sm_occupancy: u * 0.61,
            tensor_active: u * 0.48,
            dram_active: u * 0.37,
            fp64_active: u * 0.02,
            fp32_active: u * 0.21,
            fp16_active: u * 0.33,
            pcie_tx_bytes_per_sec: pcie,
            pcie_rx_bytes_per_sec: pcie * 1.6,
        })
    }
}
