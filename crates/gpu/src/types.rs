//! Plain data returned by [`crate::Backend`]. Units are in field names (MiB, mW, mJ, MHz, °C).

use serde::{Deserialize, Serialize};

/// Static identity of one physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// NVML index (0-based, PCI order).
    pub index: u32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// NVML product name, e.g. `NVIDIA H200`.
    pub name: String,
    /// PCI bus id as NVML prints it, e.g. `00000000:19:00.0`.
    pub pci_bus_id: String,
    /// PCI device id in NVML's layout: device id high 16 bits, vendor `10DE` low (e.g. `0x233510DE`).
    pub pci_device_id: u32,
    /// PCI subsystem id, same layout (e.g. `0x18BF10DE`).
    pub pci_subsystem_id: u32,
    /// `/dev/nvidiaN` minor number.
    pub minor_number: u32,
    /// Board serial number.
    pub serial: String,
    /// NVML brand (e.g. `Tesla`, `NVIDIA`).
    pub brand: String,
    /// Board part number when known.
    pub board_part_number: String,
    /// VBIOS version string.
    pub vbios_version: String,
    /// CUDA compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Number of streaming multiprocessors of the whole GPU.
    pub sm_count: u32,
    /// Whether the GPU supports MIG at all.
    pub mig_capable: bool,
}

/// Framebuffer memory. On a MIG device it describes that device's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryInfo {
    pub total_mib: u64,
    pub used_mib: u64,
    pub free_mib: u64,
    pub reserved_mib: u64,
}

/// Utilisation in percent (0–100).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Utilization {
    pub gpu_pct: u32,
    pub memory_pct: u32,
    pub encoder_pct: u32,
    pub decoder_pct: u32,
}

/// Temperatures in °C. `memory_c` is `None` where the board has no HBM sensor (GDDR parts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Temperature {
    pub gpu_c: u32,
    pub memory_c: Option<u32>,
}

/// Board power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Power {
    /// Current draw in milliwatts.
    pub usage_mw: u32,
    /// Enforced power limit in milliwatts.
    pub limit_mw: u32,
}

/// Clock-event ("throttle") reason bits, as in `nvmlClocksEventReasons`.
pub mod throttle {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;
}

/// Current and maximum clocks plus the active clock-event reasons (bits of [`throttle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Clocks {
    pub sm_mhz: u32,
    pub mem_mhz: u32,
    pub max_sm_mhz: u32,
    pub max_mem_mhz: u32,
    pub throttle_reasons: u64,
}

/// Time, in nanoseconds since driver load, that clocks were held down by each policy
/// (`nvmlDeviceGetViolationStatus`; dcgm-exporter's `DCGM_FI_DEV_*_VIOLATION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Violations {
    pub power_ns: u64,
    pub thermal_ns: u64,
    pub sync_boost_ns: u64,
    pub board_limit_ns: u64,
    pub low_utilization_ns: u64,
    pub reliability_ns: u64,
}

/// ECC error totals (single-bit = corrected, double-bit = uncorrected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EccCounts {
    pub enabled: bool,
    pub sbe_volatile: u64,
    pub dbe_volatile: u64,
    pub sbe_aggregate: u64,
    pub dbe_aggregate: u64,
}

/// Memory-row health: row remapping (Ampere+) and page retirement (older parts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RowRemap {
    pub correctable_rows: u64,
    pub uncorrectable_rows: u64,
    /// A remap is pending and needs a GPU reset.
    pub pending: bool,
    /// A remap failed (the GPU should be replaced).
    pub failure: bool,
    /// Pages retired for multiple single-bit errors (pre-Ampere; 0 where unsupported).
    pub retired_sbe_pages: u64,
    /// Pages retired for a double-bit error (pre-Ampere; 0 where unsupported).
    pub retired_dbe_pages: u64,
    pub retired_pending: bool,
}

/// PCIe link state and replay counter (cheap: no sampling window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PcieInfo {
    pub link_gen: u32,
    pub max_link_gen: u32,
    pub link_width: u32,
    pub max_link_width: u32,
    pub replay_counter: u64,
}

/// PCIe throughput in KB/s over NVML's 20 ms sampling window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PcieThroughput {
    pub tx_kbps: u32,
    pub rx_kbps: u32,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLinkInfo {
    pub link: u32,
    pub active: bool,
    /// PCI bus id of the device at the other end (a GPU or an NVSwitch).
    pub remote_pci_bus_id: String,
    /// Whether the remote end is an NVSwitch rather than a GPU.
    pub remote_is_switch: bool,
    /// Data transmitted since driver load, in KiB.
    pub tx_kib: u64,
    /// Data received since driver load, in KiB.
    pub rx_kib: u64,
    /// Data-link error counters since driver load (`nvmlDeviceGetNvLinkErrorCounter`).
    pub crc_flit_errors: u64,
    pub crc_data_errors: u64,
    pub replay_errors: u64,
    pub recovery_errors: u64,
}

/// How two GPUs reach each other, best first; mirrors `nvmlGpuTopologyLevel_t` plus NVLink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TopologyLevel {
    /// Same GPU.
    Internal,
    /// Connected by NVLink (directly or through NVSwitch); `links` = number of links between them.
    NvLink { links: u32 },
    /// Single PCIe switch.
    Single,
    /// Multiple PCIe switches, no host bridge.
    Multiple,
    /// Through a host bridge.
    HostBridge,
    /// Same NUMA node / CPU socket.
    Node,
    /// Across CPU sockets (SMP interconnect).
    System,
}

impl TopologyLevel {
    /// Lower is closer; used to score GPU sets for topology-aware allocation.
    pub fn distance(self) -> u32 {
        match self {
            TopologyLevel::Internal => 0,
            TopologyLevel::NvLink { links } => 10u32.saturating_sub(links.min(9)),
            TopologyLevel::Single => 20,
            TopologyLevel::Multiple => 30,
            TopologyLevel::HostBridge => 40,
            TopologyLevel::Node => 50,
            TopologyLevel::System => 60,
        }
    }
}

/// A process using a GPU (or a MIG device of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub used_memory_mib: u64,
    /// GPU instance the process runs in, when MIG is on.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

/// MIG mode of a GPU. `pending` differs from `current` until the GPU is reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MigMode {
    pub current: bool,
    pub pending: bool,
}

/// Shared engines of a MIG profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Engines {
    pub copy: u32,
    pub decoder: u32,
    pub encoder: u32,
    pub jpeg: u32,
    pub ofa: u32,
}

/// A placement of a GPU instance: first memory slice and number of memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

impl Placement {
    /// Memory-slice range `start..start+size`.
    pub fn range(self) -> std::ops::Range<u32> {
        self.start..self.start.saturating_add(self.size)
    }

    /// Whether two placements share a memory slice.
    pub fn overlaps(self, other: Placement) -> bool {
        self.start < other.start.saturating_add(other.size)
            && other.start < self.start.saturating_add(self.size)
    }
}

/// One GPU-instance profile of a MIG-capable model (a row of `nvidia-smi mig -lgip` / `-lgipp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// Profile string as mig-parted spells it, e.g. `1g.18gb`, `1g.18gb+me`.
    pub name: String,
    /// Driver profile id (the `ID` column of `nvidia-smi mig -lgip`).
    pub id: u32,
    /// NVML GI profile enum (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub nvml_profile: u32,
    /// Compute (GI) slices, the `G` of `<G>g`.
    pub slices: u32,
    /// Memory slices occupied (the placement size).
    pub memory_slices: u32,
    /// Maximum number of instances of this profile on one GPU.
    pub max_count: u32,
    pub memory_mib: u64,
    pub sm_count: u32,
    pub engines: Engines,
    /// Valid start memory slices.
    pub placement_starts: Vec<u32>,
}

impl MigProfile {
    /// All placements this profile may take.
    pub fn placements(&self) -> impl Iterator<Item = Placement> + '_ {
        self.placement_starts.iter().map(|&start| Placement {
            start,
            size: self.memory_slices,
        })
    }

    /// Name as used in config names, resource names and labels (`+` → `.`).
    pub fn resource_name(&self) -> String {
        self.name.replace('+', ".")
    }
}

/// A GPU instance that exists on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstance {
    pub id: u32,
    /// GI profile name, e.g. `3g.71gb`.
    pub profile: String,
    pub profile_id: u32,
    pub placement: Placement,
    pub slices: u32,
    pub memory_mib: u64,
}

/// A compute instance inside a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeInstance {
    pub gpu_instance_id: u32,
    pub id: u32,
    /// Compute slices of this CI (≤ the GI's slices).
    pub slices: u32,
    /// Start compute slice inside the GI.
    pub start: u32,
    pub sm_count: u32,
}

/// A MIG device (GI + CI pair) as CUDA and the device plugin see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    /// Parent GPU index.
    pub parent: u32,
    /// MIG device index on the parent (NVML `nvmlDeviceGetMigDeviceHandleByIndex` order).
    pub index: u32,
    /// `MIG-xxxxxxxx-...`.
    pub uuid: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    /// Full profile string: `1g.18gb`, or `1c.2g.35gb` when the CI is smaller than its GI.
    pub profile: String,
    /// GI profile name (the GPU_I_PROFILE label of dcgm-exporter).
    pub gi_profile: String,
    pub placement: Placement,
    pub gi_slices: u32,
    pub ci_slices: u32,
    pub memory_mib: u64,
    pub sm_count: u32,
    pub engines: Engines,
}

/// Kinds of events, as NVML event-type bits.
pub mod event_kind {
    pub const SINGLE_BIT_ECC: u64 = 0x1;
    pub const DOUBLE_BIT_ECC: u64 = 0x2;
    pub const PSTATE: u64 = 0x4;
    pub const XID_CRITICAL: u64 = 0x8;
    pub const CLOCK: u64 = 0x10;
    pub const POWER_SOURCE_CHANGE: u64 = 0x80;
    pub const MIG_CONFIG_CHANGE: u64 = 0x100;
    /// What health checkers subscribe to (the device plugin's mask).
    pub const HEALTH: u64 = XID_CRITICAL | DOUBLE_BIT_ECC | SINGLE_BIT_ECC;
    /// Everything this crate knows.
    pub const ALL: u64 = SINGLE_BIT_ECC
        | DOUBLE_BIT_ECC
        | PSTATE
        | XID_CRITICAL
        | CLOCK
        | POWER_SOURCE_CHANGE
        | MIG_CONFIG_CHANGE;
}

/// One NVML event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// GPU index.
    pub gpu: u32,
    pub gpu_uuid: String,
    /// One bit of [`event_kind`].
    pub kind: u64,
    /// XID number for XID events, 0 otherwise.
    pub xid: u64,
    /// GPU / compute instance the event is attributed to; `None` = whole GPU.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

/// Profiling ratios (0.0–1.0) and PCIe rates, as NVML GPM gives them on Hopper and newer
/// (dcgm-exporter's `DCGM_FI_PROF_*`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Profiling {
    pub graphics_active: f64,
    pub sm_active: f64,
    pub sm_occupancy: f64,
    pub tensor_active: f64,
    pub dram_active: f64,
    pub fp64_active: f64,
    pub fp32_active: f64,
    pub fp16_active: f64,
    pub pcie_tx_bytes_per_sec: f64,
    pub pcie_rx_bytes_per_sec: f64,
}
