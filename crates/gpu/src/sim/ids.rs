//! Deterministic identities for simulated GPUs: UUIDs, serials, PCI bus ids.

/// SplitMix64: a tiny, well-mixed hash for deterministic ids and jitter.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hash several values into one.
pub fn mix_all(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5EED_u64, |acc, &p| mix(acc ^ mix(p)))
}

/// FNV-1a of a string, to turn node names into seeds.
pub fn seed_from_name(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A UUID-shaped string with the given prefix (`GPU` or `MIG`).
pub fn uuid(prefix: &str, a: u64, b: u64) -> String {
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        (a & 0x0fff) | 0x4000,
        (b >> 48) & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// PCI bus numbers of the GPUs of an 8-GPU HGX board (as on DGX H100/A100).
const HGX_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

/// PCI bus id of GPU `index` of `count`.
pub fn pci_bus_id(index: u32, count: u32) -> String {
    let bus = if count <= 8 {
        HGX_BUSES[index as usize % 8]
    } else {
        0x10 + index * 0x0c
    };
    format!("00000000:{bus:02X}:00.0")
}

/// PCI bus id of NVSwitch `n`.
pub fn nvswitch_bus_id(n: u32) -> String {
    format!("00000000:{:02X}:00.0", 0xc0 + n * 2)
}
