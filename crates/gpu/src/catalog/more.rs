//! The rest of the MIG-capable GPUs that upstream's default mig-parted config names: A30,
//! H100 NVL, GH200 (96 GB and 144 GB HBM3e), H20, B200, GB200, HGX B300, GB300 and RTX PRO
//! 6000 Blackwell. One table per PCI id: GB200 is the MIG user guide's 186 GB part (newer
//! drivers' 189 GB profiles, `1g.24gb` … `7g.189gb`, are known by name only).
//!
//! Not read on hardware: profile names, max counts and fractions are the MIG user guide's and
//! mig-parted's; MiB figures are chosen inside the fraction so go-nvlib's naming formula gives
//! the published name (checked by `profile_names_follow_the_memory_formula`). GPUs with four
//! MIG slices (A30, RTX PRO 6000) are modelled on the same eight memory slices: one of their
//! slices is two of ours, so placements read `{0,2,4,6}:2` where nvidia-smi says `{0..3}:1`.

use super::{ALL_1G, EVEN_3, EVEN_4, FIRST, Family, GpuModel, HALVES, MigProfileSpec, p};
use super::{GI_1, GI_1_REV1, GI_1_REV2, GI_2, GI_3, GI_4, GI_7};

// More NVML GI profile enum values (go-nvml const.go).
const GI_2_REV1: u32 = 8;
const GI_1_GFX: u32 = 10;
const GI_2_GFX: u32 = 11;
const GI_4_GFX: u32 = 12;
const GI_1_NO_ME: u32 = 13;
const GI_2_NO_ME: u32 = 14;
const GI_1_ALL_ME: u32 = 15;
const GI_2_ALL_ME: u32 = 16;

/// The seven-slice shape shared by Hopper and Blackwell parts: (1g, 1g double memory, 2g,
/// 3g/4g, 7g) MiB and SMs.
macro_rules! seven_slice {
    ($g1:literal, $g1x2:literal, $g2:literal, $g2mib:literal, $g3:literal, $g4:literal, $g7:literal, $g3mib:literal, $g7mib:literal,
     $sm1:literal, $sm1x2:literal, $sm2:literal, $sm3:literal, $sm4:literal, $sm7:literal, $mib1:literal) => {
        &[
            p($g1, 19, GI_1, 1, 1, 7, $mib1, $sm1, (1, 1, 0, 1, 0), ALL_1G),
            p(
                concat!($g1, "+me"),
                20,
                GI_1_REV1,
                1,
                1,
                1,
                $mib1,
                $sm1,
                (1, 1, 0, 1, 1),
                ALL_1G,
            ),
            p(
                $g1x2,
                15,
                GI_1_REV2,
                1,
                2,
                4,
                $g2mib,
                $sm1x2,
                (1, 1, 0, 1, 0),
                EVEN_4,
            ),
            p(
                $g2,
                14,
                GI_2,
                2,
                2,
                3,
                $g2mib,
                $sm2,
                (2, 2, 0, 2, 0),
                EVEN_3,
            ),
            p($g3, 9, GI_3, 3, 4, 2, $g3mib, $sm3, (3, 3, 0, 3, 0), HALVES),
            p($g4, 5, GI_4, 4, 4, 1, $g3mib, $sm4, (4, 4, 0, 4, 0), FIRST),
            p($g7, 0, GI_7, 7, 8, 1, $g7mib, $sm7, (8, 7, 0, 7, 1), FIRST),
        ]
    };
}

#[rustfmt::skip]
const A30_MIG: &[MigProfileSpec] = &[
    p("1g.6gb",      14, GI_1,      1, 2, 4,  5952, 14, (1, 0, 0, 0, 0), EVEN_4),
    p("1g.6gb+me",   21, GI_1_REV1, 1, 2, 1,  5952, 14, (1, 1, 0, 1, 1), EVEN_4),
    p("2g.12gb",      5, GI_2,      2, 4, 2, 11904, 28, (2, 2, 0, 0, 0), HALVES),
    p("2g.12gb+me",   6, GI_2_REV1, 2, 4, 1, 11904, 28, (2, 2, 0, 1, 1), HALVES),
    p("4g.24gb",      0, GI_4,      4, 8, 1, 24000, 56, (4, 4, 0, 1, 1), FIRST),
];

#[rustfmt::skip]
const H100_NVL_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.12gb", "1g.24gb", "2g.24gb", 22784, "3g.47gb", "4g.47gb", "7g.94gb", 46592, 93952,
    16, 26, 32, 60, 64, 132, 11264);

#[rustfmt::skip]
const GH200_96GB_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.12gb", "1g.24gb", "2g.24gb", 23808, "3g.48gb", "4g.48gb", "7g.96gb", 47872, 96512,
    16, 26, 32, 60, 64, 132, 11776);

#[rustfmt::skip]
const H20_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.12gb", "1g.24gb", "2g.24gb", 23808, "3g.48gb", "4g.48gb", "7g.96gb", 47872, 96512,
    10, 10, 20, 30, 40, 78, 11776);

#[rustfmt::skip]
const GH200_144GB_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.18gb", "1g.36gb", "2g.36gb", 33792, "3g.72gb", "4g.72gb", "7g.144gb", 72960, 146432,
    16, 26, 32, 60, 64, 132, 16896);

#[rustfmt::skip]
const B200_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.23gb", "1g.45gb", "2g.45gb", 45312, "3g.90gb", "4g.90gb", "7g.180gb", 90880, 182528,
    18, 18, 36, 54, 72, 148, 22528);

#[rustfmt::skip]
const GB200_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.23gb", "1g.47gb", "2g.47gb", 46592, "3g.93gb", "4g.93gb", "7g.186gb", 93440, 188416,
    18, 18, 36, 54, 72, 148, 23040);

/// HGX B300 (288 GB HBM3e, 269 GB as MIG names it): the GPU Operator 25.10 release notes'
/// `1g.34gb`(+me), `1g.67gb`, `2g.67gb`, `3g.135gb`, `4g.135gb`, `7g.269gb`.
#[rustfmt::skip]
const B300_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.34gb", "1g.67gb", "2g.67gb", 67840, "3g.135gb", "4g.135gb", "7g.269gb", 136448, 273408,
    18, 18, 36, 54, 72, 148, 33792);

/// GB300 (Grace Blackwell Ultra): NVIDIA's k8s-test-infra MIG golden table (`1g.35gb` …
/// `7g.278gb`).
#[rustfmt::skip]
const GB300_MIG: &[MigProfileSpec] = seven_slice!(
    "1g.35gb", "1g.70gb", "2g.70gb", 70656, "3g.139gb", "4g.139gb", "7g.278gb", 141312, 283136,
    18, 18, 36, 54, 72, 148, 35328);

/// Four MIG slices, with graphics (`+gfx`), no-media (`-me`) and all-media (`+me.all`) variants.
#[rustfmt::skip]
const RTX_PRO_6000_MIG: &[MigProfileSpec] = &[
    p("4g.96gb",         0, GI_4,        4, 8, 1, 96768, 188, (4, 4, 4, 4, 1), FIRST),
    p("4g.96gb+gfx",     1, GI_4_GFX,    4, 8, 1, 96768, 188, (4, 4, 4, 4, 1), FIRST),
    p("1g.24gb",        14, GI_1,        1, 2, 4, 24064,  46, (1, 1, 1, 1, 0), EVEN_4),
    p("1g.24gb+me",     21, GI_1_REV1,   1, 2, 1, 24064,  46, (1, 1, 1, 1, 1), EVEN_4),
    p("1g.24gb+gfx",    47, GI_1_GFX,    1, 2, 4, 24064,  46, (1, 1, 1, 1, 0), EVEN_4),
    p("1g.24gb-me",     48, GI_1_NO_ME,  1, 2, 4, 24064,  46, (1, 0, 0, 0, 0), EVEN_4),
    p("1g.24gb+me.all", 49, GI_1_ALL_ME, 1, 2, 1, 24064,  46, (1, 4, 4, 4, 1), EVEN_4),
    p("2g.48gb",         5, GI_2,        2, 4, 2, 48384,  94, (2, 2, 2, 2, 0), HALVES),
    p("2g.48gb+gfx",    35, GI_2_GFX,    2, 4, 2, 48384,  94, (2, 2, 2, 2, 0), HALVES),
    p("2g.48gb-me",     36, GI_2_NO_ME,  2, 4, 2, 48384,  94, (2, 0, 0, 0, 0), HALVES),
    p("2g.48gb+me.all", 37, GI_2_ALL_ME, 2, 4, 1, 48384,  94, (2, 4, 4, 4, 1), HALVES),
];

/// Fields every data-centre part here shares; each model overrides what differs.
const BASE: GpuModel = GpuModel {
    key: "",
    aliases: &[],
    name: "",
    family: Family::Hopper,
    brand: "NVIDIA",
    memory_mib: 0,
    compute_capability: (9, 0),
    sm_count: 132,
    power_limit_w: 700,
    idle_power_w: 70,
    reserved_mib: 0,
    max_sm_mhz: 1980,
    idle_sm_mhz: 345,
    max_mem_mhz: 2619,
    pci_device_id: 0,
    pci_subsystem_id: 0,
    pcie_gen: 5,
    pcie_width: 16,
    nvlinks: 18,
    nvlink_gbps: 25,
    hbm: true,
    mig: &[],
};

pub const A30: GpuModel = GpuModel {
    key: "A30",
    aliases: &["A30-24GB"],
    name: "NVIDIA A30",
    family: Family::Ampere,
    memory_mib: 24576,
    compute_capability: (8, 0),
    sm_count: 56,
    power_limit_w: 165,
    idle_power_w: 30,
    reserved_mib: 105,
    max_sm_mhz: 1440,
    idle_sm_mhz: 210,
    max_mem_mhz: 1215,
    pci_device_id: 0x20B7_10DE,
    pci_subsystem_id: 0x1532_10DE,
    pcie_gen: 4,
    nvlinks: 0,
    nvlink_gbps: 0,
    mig: A30_MIG,
    ..BASE
};

pub const H100_NVL: GpuModel = GpuModel {
    key: "H100-NVL",
    aliases: &["H100-NVL-94GB"],
    name: "NVIDIA H100 NVL",
    memory_mib: 95830,
    power_limit_w: 400,
    idle_power_w: 60,
    reserved_mib: 410,
    max_sm_mhz: 1785,
    pci_device_id: 0x2321_10DE,
    pci_subsystem_id: 0x1839_10DE,
    nvlinks: 0,
    nvlink_gbps: 0,
    mig: H100_NVL_MIG,
    ..BASE
};

pub const GH200_96GB: GpuModel = GpuModel {
    key: "GH200",
    aliases: &["GH200-96GB", "GH200-480GB"],
    name: "NVIDIA GH200 480GB",
    memory_mib: 97871,
    power_limit_w: 900,
    reserved_mib: 420,
    pci_device_id: 0x2342_10DE,
    pci_subsystem_id: 0x16EB_10DE,
    mig: GH200_96GB_MIG,
    ..BASE
};

pub const GH200_144GB: GpuModel = GpuModel {
    key: "GH200-144GB",
    aliases: &["GH200-144G-HBM3e"],
    name: "NVIDIA GH200 144G HBM3e",
    memory_mib: 146831,
    power_limit_w: 900,
    reserved_mib: 630,
    max_mem_mhz: 3201,
    pci_device_id: 0x2348_10DE,
    pci_subsystem_id: 0x18FE_10DE,
    mig: GH200_144GB_MIG,
    ..BASE
};

pub const H20: GpuModel = GpuModel {
    key: "H20",
    aliases: &["H20-96GB"],
    name: "NVIDIA H20",
    memory_mib: 97871,
    sm_count: 78,
    power_limit_w: 500,
    reserved_mib: 420,
    pci_device_id: 0x2329_10DE,
    pci_subsystem_id: 0x198B_10DE,
    mig: H20_MIG,
    ..BASE
};

pub const B200: GpuModel = GpuModel {
    key: "B200",
    aliases: &["B200-180GB"],
    name: "NVIDIA B200",
    family: Family::Blackwell,
    memory_mib: 183359,
    compute_capability: (10, 0),
    sm_count: 148,
    power_limit_w: 1000,
    idle_power_w: 140,
    reserved_mib: 785,
    max_sm_mhz: 1965,
    max_mem_mhz: 3996,
    pci_device_id: 0x2901_10DE,
    pci_subsystem_id: 0x1999_10DE,
    nvlink_gbps: 50,
    mig: B200_MIG,
    ..BASE
};

pub const GB200: GpuModel = GpuModel {
    key: "GB200",
    aliases: &["GB200-186GB"],
    name: "NVIDIA GB200",
    memory_mib: 189471,
    reserved_mib: 810,
    power_limit_w: 1200,
    pci_device_id: 0x2941_10DE,
    pci_subsystem_id: 0x2046_10DE,
    mig: GB200_MIG,
    ..B200
};

/// HGX B300: mig-parted matches it as `0x318210DE`.
pub const B300: GpuModel = GpuModel {
    key: "B300",
    aliases: &["B300-SXM6", "B300-SXM6-AC", "HGX-B300", "B300-288GB"],
    name: "NVIDIA B300 SXM6 AC",
    memory_mib: 275040,
    compute_capability: (10, 3),
    reserved_mib: 1175,
    power_limit_w: 1100,
    pci_device_id: 0x3182_10DE,
    pci_subsystem_id: 0x20E6_10DE,
    mig: B300_MIG,
    ..B200
};

/// GB300: no NVIDIA config file we hold names its PCI id; this one is ours, so no upstream
/// device-filter entry matches it (its `devices: all` configs do).
pub const GB300: GpuModel = GpuModel {
    key: "GB300",
    aliases: &["GB300-NVL", "GB300-278GB"],
    name: "NVIDIA GB300",
    memory_mib: 284208,
    reserved_mib: 1215,
    power_limit_w: 1400,
    pci_device_id: 0x31C2_10DE,
    pci_subsystem_id: 0x21A5_10DE,
    mig: GB300_MIG,
    ..B300
};

pub const RTX_PRO_6000: GpuModel = GpuModel {
    key: "RTX-PRO-6000",
    aliases: &["RTX-PRO-6000-96GB", "RTX-PRO-6000-Blackwell"],
    name: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    family: Family::Blackwell,
    memory_mib: 97887,
    compute_capability: (12, 0),
    sm_count: 188,
    power_limit_w: 600,
    idle_power_w: 30,
    reserved_mib: 420,
    max_sm_mhz: 2617,
    idle_sm_mhz: 180,
    max_mem_mhz: 14001,
    pci_device_id: 0x2BB5_10DE,
    pci_subsystem_id: 0x204E_10DE,
    nvlinks: 0,
    nvlink_gbps: 0,
    hbm: false,
    mig: RTX_PRO_6000_MIG,
    ..BASE
};
