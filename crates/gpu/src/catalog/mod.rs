//! Real GPU models and their MIG profile tables.
//!
//! Figures are the ones NVML / `nvidia-smi` report on the real parts. Sources: the H200 table
//! was read on our own machine (`nvidia-smi mig -lgip`/`-lgipp`); A100 MIG memory/SM figures
//! agree with NVIDIA's MIG user guide and published `nvidia-smi` output; H100 MIG memory is
//! `nvidia-smi mig -lgip`'s GiB column × 1024. Placements are in memory slices (8 per GPU).

mod more;

pub use more::{
    A30, B200, B300, GB200, GB300, GH200_96GB, GH200_144GB, H20, H100_NVL, RTX_PRO_6000,
};

use crate::types::{Engines, MigProfile};

/// Static description of one MIG GPU-instance profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProfileSpec {
    pub name: &'static str,
    /// Driver profile id (`nvidia-smi mig -lgip` ID column).
    pub id: u32,
    /// `NVML_GPU_INSTANCE_PROFILE_*` enum value.
    pub nvml_profile: u32,
    pub slices: u32,
    pub memory_slices: u32,
    pub max_count: u32,
    pub memory_mib: u64,
    pub sm_count: u32,
    /// copy, decoder, encoder, jpeg, ofa
    pub engines: (u32, u32, u32, u32, u32),
    pub starts: &'static [u32],
}

impl MigProfileSpec {
    pub fn to_profile(&self) -> MigProfile {
        let (copy, decoder, encoder, jpeg, ofa) = self.engines;
        MigProfile {
            name: self.name.to_string(),
            id: self.id,
            nvml_profile: self.nvml_profile,
            slices: self.slices,
            memory_slices: self.memory_slices,
            max_count: self.max_count,
            memory_mib: self.memory_mib,
            sm_count: self.sm_count,
            engines: Engines {
                copy,
                decoder,
                encoder,
                jpeg,
                ofa,
            },
            placement_starts: self.starts.to_vec(),
        }
    }
}

/// Architecture family, as GFD names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Turing,
    Ampere,
    AdaLovelace,
    Hopper,
    Blackwell,
}

/// One GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModel {
    /// Short key used in node specs (`4xH100-80GB:8`).
    pub key: &'static str,
    /// Other accepted spellings of the key (case-insensitive).
    pub aliases: &'static [&'static str],
    /// NVML `nvmlDeviceGetName`.
    pub name: &'static str,
    pub family: Family,
    pub brand: &'static str,
    pub memory_mib: u64,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub power_limit_w: u32,
    /// Typical idle draw.
    pub idle_power_w: u32,
    /// Framebuffer the driver reserves (NVML `memory_info_v2().reserved`). Measured on our H200
    /// (615 MiB of 143771); other models are estimated at the same share.
    pub reserved_mib: u64,
    pub max_sm_mhz: u32,
    pub idle_sm_mhz: u32,
    pub max_mem_mhz: u32,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    /// NVLinks per GPU on the SXM board (0 = PCIe card).
    pub nvlinks: u32,
    /// Per-link, per-direction NVLink bandwidth in GB/s.
    pub nvlink_gbps: u32,
    /// HBM parts report a memory temperature; GDDR parts do not.
    pub hbm: bool,
    pub mig: &'static [MigProfileSpec],
}

impl GpuModel {
    pub fn mig_capable(&self) -> bool {
        !self.mig.is_empty()
    }

    pub fn mig_profiles(&self) -> Vec<MigProfile> {
        self.mig.iter().map(MigProfileSpec::to_profile).collect()
    }

    pub fn mig_profile(&self, name: &str) -> Option<&'static MigProfileSpec> {
        self.mig.iter().find(|p| p.name == name)
    }

    /// PCI id as a mig-parted `device-filter` spells it (`0x233510DE`).
    pub fn device_filter(&self) -> String {
        format!("0x{:08X}", self.pci_device_id)
    }
}

/// The `<GB>gb` part of a MIG profile name, computed the way go-nvlib does:
/// `round(ceil(mig / total · 8) / 8 · ceil(total GiB))`.
pub fn mig_memory_gb(mig_mib: u64, total_mib: u64) -> u64 {
    if total_mib == 0 {
        return 0;
    }
    let eighths = (mig_mib * 8).div_ceil(total_mib);
    let total_gib = total_mib.div_ceil(1024);
    // round(eighths * total_gib / 8), half up
    (eighths * total_gib * 2 + 8) / 16
}

const ALL_1G: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const EVEN_4: &[u32] = &[0, 2, 4, 6];
const EVEN_3: &[u32] = &[0, 2, 4];
const HALVES: &[u32] = &[0, 4];
const FIRST: &[u32] = &[0];

/// Table-row constructor; positional to keep the tables readable.
#[allow(clippy::too_many_arguments)]
const fn p(
    name: &'static str,
    id: u32,
    nvml_profile: u32,
    slices: u32,
    memory_slices: u32,
    max_count: u32,
    memory_mib: u64,
    sm_count: u32,
    engines: (u32, u32, u32, u32, u32),
    starts: &'static [u32],
) -> MigProfileSpec {
    MigProfileSpec {
        name,
        id,
        nvml_profile,
        slices,
        memory_slices,
        max_count,
        memory_mib,
        sm_count,
        engines,
        starts,
    }
}

// NVML GI profile enum values (go-nvml const.go).
const GI_1: u32 = 0;
const GI_2: u32 = 1;
const GI_3: u32 = 2;
const GI_4: u32 = 3;
const GI_7: u32 = 4;
const GI_1_REV1: u32 = 7;
const GI_1_REV2: u32 = 9;

#[rustfmt::skip]
const A100_40GB_MIG: &[MigProfileSpec] = &[
    //  name          id  enum       G  mem max  MiB     SMs  (CE, DEC, ENC, JPG, OFA)  starts
    p("1g.5gb",      19, GI_1,      1, 1, 7,   4864,  14, (1, 0, 0, 0, 0), ALL_1G),
    p("1g.5gb+me",   20, GI_1_REV1, 1, 1, 1,   4864,  14, (1, 1, 0, 1, 1), ALL_1G),
    p("1g.10gb",     15, GI_1_REV2, 1, 2, 4,   9984,  14, (1, 1, 0, 0, 0), EVEN_4),
    p("2g.10gb",     14, GI_2,      2, 2, 3,   9984,  28, (2, 1, 0, 0, 0), EVEN_3),
    p("3g.20gb",      9, GI_3,      3, 4, 2,  20096,  42, (3, 2, 0, 0, 0), HALVES),
    p("4g.20gb",      5, GI_4,      4, 4, 1,  20096,  56, (4, 2, 0, 0, 0), FIRST),
    p("7g.40gb",      0, GI_7,      7, 8, 1,  40320,  98, (7, 5, 0, 1, 1), FIRST),
];

#[rustfmt::skip]
const A100_80GB_MIG: &[MigProfileSpec] = &[
    p("1g.10gb",     19, GI_1,      1, 1, 7,   9728,  14, (1, 0, 0, 0, 0), ALL_1G),
    p("1g.10gb+me",  20, GI_1_REV1, 1, 1, 1,   9728,  14, (1, 1, 0, 1, 1), ALL_1G),
    p("1g.20gb",     15, GI_1_REV2, 1, 2, 4,  19968,  14, (1, 1, 0, 0, 0), EVEN_4),
    p("2g.20gb",     14, GI_2,      2, 2, 3,  19968,  28, (2, 1, 0, 0, 0), EVEN_3),
    p("3g.40gb",      9, GI_3,      3, 4, 2,  40192,  42, (3, 2, 0, 0, 0), HALVES),
    p("4g.40gb",      5, GI_4,      4, 4, 1,  40192,  56, (4, 2, 0, 0, 0), FIRST),
    p("7g.80gb",      0, GI_7,      7, 8, 1,  80896,  98, (7, 5, 0, 1, 1), FIRST),
];

#[rustfmt::skip]
const H100_80GB_MIG: &[MigProfileSpec] = &[
    p("1g.10gb",     19, GI_1,      1, 1, 7,   9984,  16, (1, 1, 0, 1, 0), ALL_1G),
    p("1g.10gb+me",  20, GI_1_REV1, 1, 1, 1,   9984,  16, (1, 1, 0, 1, 1), ALL_1G),
    p("1g.20gb",     15, GI_1_REV2, 1, 2, 4,  20096,  26, (1, 1, 0, 1, 0), EVEN_4),
    p("2g.20gb",     14, GI_2,      2, 2, 3,  20096,  32, (2, 2, 0, 2, 0), EVEN_3),
    p("3g.40gb",      9, GI_3,      3, 4, 2,  40448,  60, (3, 3, 0, 3, 0), HALVES),
    p("4g.40gb",      5, GI_4,      4, 4, 1,  40448,  64, (4, 4, 0, 4, 0), FIRST),
    p("7g.80gb",      0, GI_7,      7, 8, 1,  81152, 132, (8, 7, 0, 7, 1), FIRST),
];

/// Read on our H200 with NVML through this crate (`examples/nvml_probe.rs`) and with
/// `nvidia-smi mig -lgip`/`-lgipp`, driver 580.159.04.
#[rustfmt::skip]
const H200_MIG: &[MigProfileSpec] = &[
    p("1g.18gb",     19, GI_1,      1, 1, 7,  16384,  16, (1, 1, 0, 1, 0), ALL_1G),
    p("1g.18gb+me",  20, GI_1_REV1, 1, 1, 1,  16384,  16, (1, 1, 0, 1, 1), ALL_1G),
    p("1g.35gb",     15, GI_1_REV2, 1, 2, 4,  33280,  26, (1, 1, 0, 1, 0), EVEN_4),
    p("2g.35gb",     14, GI_2,      2, 2, 3,  33280,  32, (2, 2, 0, 2, 0), EVEN_3),
    p("3g.71gb",      9, GI_3,      3, 4, 2,  71424,  60, (3, 3, 0, 3, 0), HALVES),
    p("4g.71gb",      5, GI_4,      4, 4, 1,  71424,  64, (4, 4, 0, 4, 0), FIRST),
    p("7g.141gb",     0, GI_7,      7, 8, 1, 143360, 132, (8, 7, 0, 7, 1), FIRST),
];

pub const A100_SXM4_40GB: GpuModel = GpuModel {
    key: "A100-40GB",
    aliases: &["A100-SXM4-40GB", "A100"],
    name: "NVIDIA A100-SXM4-40GB",
    family: Family::Ampere,
    brand: "NVIDIA",
    memory_mib: 40960,
    compute_capability: (8, 0),
    sm_count: 108,
    power_limit_w: 400,
    idle_power_w: 55,
    reserved_mib: 175,
    max_sm_mhz: 1410,
    idle_sm_mhz: 210,
    max_mem_mhz: 1215,
    pci_device_id: 0x20B0_10DE,
    pci_subsystem_id: 0x134F_10DE,
    pcie_gen: 4,
    pcie_width: 16,
    nvlinks: 12,
    nvlink_gbps: 25,
    hbm: true,
    mig: A100_40GB_MIG,
};

pub const A100_SXM4_80GB: GpuModel = GpuModel {
    key: "A100-80GB",
    aliases: &["A100-SXM4-80GB"],
    name: "NVIDIA A100-SXM4-80GB",
    family: Family::Ampere,
    brand: "NVIDIA",
    memory_mib: 81920,
    compute_capability: (8, 0),
    sm_count: 108,
    power_limit_w: 400,
    idle_power_w: 60,
    reserved_mib: 350,
    max_sm_mhz: 1410,
    idle_sm_mhz: 210,
    max_mem_mhz: 1593,
    pci_device_id: 0x20B2_10DE,
    pci_subsystem_id: 0x147F_10DE,
    pcie_gen: 4,
    pcie_width: 16,
    nvlinks: 12,
    nvlink_gbps: 25,
    hbm: true,
    mig: A100_80GB_MIG,
};

pub const H100_SXM5_80GB: GpuModel = GpuModel {
    key: "H100-80GB",
    aliases: &["H100-SXM5-80GB", "H100", "H100-80GB-HBM3"],
    name: "NVIDIA H100 80GB HBM3",
    family: Family::Hopper,
    brand: "NVIDIA",
    memory_mib: 81559,
    compute_capability: (9, 0),
    sm_count: 132,
    power_limit_w: 700,
    idle_power_w: 70,
    reserved_mib: 349,
    max_sm_mhz: 1980,
    idle_sm_mhz: 345,
    max_mem_mhz: 2619,
    pci_device_id: 0x2330_10DE,
    pci_subsystem_id: 0x16C1_10DE,
    pcie_gen: 5,
    pcie_width: 16,
    nvlinks: 18,
    nvlink_gbps: 25,
    hbm: true,
    mig: H100_80GB_MIG,
};

pub const H200: GpuModel = GpuModel {
    key: "H200",
    aliases: &["H200-141GB", "H200-SXM-141GB"],
    name: "NVIDIA H200",
    family: Family::Hopper,
    brand: "NVIDIA",
    memory_mib: 143771,
    compute_capability: (9, 0),
    sm_count: 132,
    power_limit_w: 700,
    idle_power_w: 80,
    reserved_mib: 615,
    max_sm_mhz: 1980,
    idle_sm_mhz: 345,
    max_mem_mhz: 3201,
    pci_device_id: 0x2335_10DE,
    pci_subsystem_id: 0x18BF_10DE,
    pcie_gen: 5,
    pcie_width: 16,
    nvlinks: 18,
    nvlink_gbps: 25,
    hbm: true,
    mig: H200_MIG,
};

pub const L4: GpuModel = GpuModel {
    key: "L4",
    aliases: &["L4-24GB"],
    name: "NVIDIA L4",
    family: Family::AdaLovelace,
    brand: "NVIDIA",
    memory_mib: 23034,
    compute_capability: (8, 9),
    sm_count: 58,
    power_limit_w: 72,
    idle_power_w: 16,
    reserved_mib: 98,
    max_sm_mhz: 2040,
    idle_sm_mhz: 210,
    max_mem_mhz: 6251,
    pci_device_id: 0x27B8_10DE,
    pci_subsystem_id: 0x16CA_10DE,
    pcie_gen: 4,
    pcie_width: 16,
    nvlinks: 0,
    nvlink_gbps: 0,
    hbm: false,
    mig: &[],
};

pub const T4: GpuModel = GpuModel {
    key: "T4",
    aliases: &["T4-16GB", "Tesla-T4"],
    name: "Tesla T4",
    family: Family::Turing,
    brand: "Tesla",
    memory_mib: 15360,
    compute_capability: (7, 5),
    sm_count: 40,
    power_limit_w: 70,
    idle_power_w: 10,
    reserved_mib: 66,
    max_sm_mhz: 1590,
    idle_sm_mhz: 300,
    max_mem_mhz: 5001,
    pci_device_id: 0x1EB8_10DE,
    pci_subsystem_id: 0x12A2_10DE,
    pcie_gen: 3,
    pcie_width: 16,
    nvlinks: 0,
    nvlink_gbps: 0,
    hbm: false,
    mig: &[],
};

/// Every model the simulator knows.
pub const MODELS: &[GpuModel] = &[
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    H100_SXM5_80GB,
    H200,
    L4,
    T4,
    A30,
    H100_NVL,
    GH200_96GB,
    GH200_144GB,
    H20,
    B200,
    GB200,
    B300,
    GB300,
    RTX_PRO_6000,
];

/// Find a model by key, alias or NVML name (case-insensitive; spaces and dashes equivalent).
pub fn find(name: &str) -> Option<&'static GpuModel> {
    let norm = |s: &str| s.trim().to_ascii_lowercase().replace([' ', '_'], "-");
    let want = norm(name);
    let want_short = want.strip_prefix("nvidia-").unwrap_or(&want).to_string();
    MODELS.iter().find(|m| {
        norm(m.key) == want_short
            || norm(m.name) == want
            || norm(m.name).strip_prefix("nvidia-") == Some(want_short.as_str())
            || m.aliases.iter().any(|a| norm(a) == want_short)
    })
}

/// The keys of all models, for error messages.
pub fn keys() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::{COMPUTE_SLICES, MEMORY_SLICES};

    #[test]
    fn profile_names_follow_the_memory_formula() {
        for m in MODELS {
            for p in m.mig {
                let gb = p
                    .name
                    .split('.')
                    .nth(1)
                    .and_then(|s| s.split(['g', '+', '-']).next())
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("{}: bad profile name {}", m.key, p.name));
                assert_eq!(
                    gb,
                    mig_memory_gb(p.memory_mib, m.memory_mib),
                    "{} {}: {} MiB of {} MiB",
                    m.key,
                    p.name,
                    p.memory_mib,
                    m.memory_mib
                );
                assert!(p.name.starts_with(&format!("{}g.", p.slices)));
            }
        }
    }

    #[test]
    fn profile_tables_are_consistent() {
        for m in MODELS {
            let mut ids: Vec<u32> = m.mig.iter().map(|p| p.id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), m.mig.len(), "{}: duplicate profile ids", m.key);
            for p in m.mig {
                assert!(p.memory_mib < m.memory_mib, "{} {}", m.key, p.name);
                assert!(p.sm_count <= m.sm_count, "{} {}", m.key, p.name);
                assert!(
                    p.slices * p.max_count <= COMPUTE_SLICES,
                    "{} {}",
                    m.key,
                    p.name
                );
                assert!(
                    p.max_count as usize <= p.starts.len(),
                    "{} {}",
                    m.key,
                    p.name
                );
                for s in p.starts {
                    assert!(s + p.memory_slices <= MEMORY_SLICES, "{} {}", m.key, p.name);
                    assert_eq!(s % p.memory_slices, 0, "{} {} aligned", m.key, p.name);
                }
            }
            // The whole-GPU profile (7g, or 4g on four-slice parts) owns all memory slices.
            if m.mig_capable() {
                let full = m
                    .mig
                    .iter()
                    .find(|p| p.memory_slices == 8)
                    .expect("whole-GPU profile");
                assert_eq!(
                    (full.id, full.memory_slices, full.starts),
                    (0, 8, &[0u32][..])
                );
            }
        }
    }

    #[test]
    fn h200_matches_our_readout() {
        let h = find("NVIDIA H200").expect("H200");
        assert_eq!((h.memory_mib, h.compute_capability), (143771, (9, 0)));
        assert_eq!(h.device_filter(), "0x233510DE");
        let rows: Vec<_> = h
            .mig
            .iter()
            .map(|p| {
                (
                    p.name,
                    p.id,
                    p.slices,
                    p.max_count,
                    p.memory_mib,
                    p.sm_count,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("1g.18gb", 19, 1, 7, 16384, 16),
                ("1g.18gb+me", 20, 1, 1, 16384, 16),
                ("1g.35gb", 15, 1, 4, 33280, 26),
                ("2g.35gb", 14, 2, 3, 33280, 32),
                ("3g.71gb", 9, 3, 2, 71424, 60),
                ("4g.71gb", 5, 4, 1, 71424, 64),
                ("7g.141gb", 0, 7, 1, 143360, 132),
            ]
        );
        let full = h.mig_profile("7g.141gb").expect("7g").to_profile();
        assert_eq!(
            (
                full.engines.copy,
                full.engines.decoder,
                full.engines.jpeg,
                full.engines.ofa
            ),
            (8, 7, 7, 1)
        );
    }

    #[test]
    fn lookup_by_key_alias_and_nvml_name() {
        assert_eq!(find("H100-80GB").map(|m| m.key), Some("H100-80GB"));
        assert_eq!(find("h100-sxm5-80gb").map(|m| m.key), Some("H100-80GB"));
        assert_eq!(
            find("NVIDIA H100 80GB HBM3").map(|m| m.key),
            Some("H100-80GB")
        );
        assert_eq!(
            find("NVIDIA A100-SXM4-40GB").map(|m| m.key),
            Some("A100-40GB")
        );
        assert_eq!(find("a100-80gb").map(|m| m.key), Some("A100-80GB"));
        assert_eq!(find("H200-141GB").map(|m| m.key), Some("H200"));
        assert_eq!(find("Tesla T4").map(|m| m.key), Some("T4"));
        assert_eq!(find("l4").map(|m| m.key), Some("L4"));
        assert_eq!(find("V100"), None);
        assert!(!L4.mig_capable() && !T4.mig_capable());
        assert_eq!(keys().len(), MODELS.len());
    }

    #[test]
    fn mig_memory_gb_examples() {
        // From go-nvlib's formula, checked on the H200 readout.
        assert_eq!(mig_memory_gb(16384, 143771), 18);
        assert_eq!(mig_memory_gb(33280, 143771), 35);
        assert_eq!(mig_memory_gb(71424, 143771), 71);
        assert_eq!(mig_memory_gb(143360, 143771), 141);
        assert_eq!(mig_memory_gb(4864, 40960), 5);
        assert_eq!(mig_memory_gb(1, 0), 0);
    }
}
