//! The GFD label set as a pure function of node facts, sharing config and MIG strategy.

use std::collections::BTreeMap;

use gantry_api::names;
use gantry_gpu::{DeviceInfo, MigDevice};

use super::error::DiscoveryError;
use super::sharing::{Sharing, SharingStrategy};

/// Which MIG strategy the device plugin runs with (`flags.migStrategy`).
pub use gantry_k8s_rules::MigStrategy;

/// What discovery knows about the node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeFacts {
    /// NVML driver version, e.g. `580.159.04`.
    pub driver_version: String,
    /// CUDA driver API version as NVML encodes it (`13000`).
    pub cuda_driver_version: u32,
    pub gpus: Vec<GpuFacts>,
    /// Sanitised DMI product name, or `unknown`.
    pub machine: String,
    /// Whether the GPUs are vGPU guests.
    pub vgpu_present: bool,
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    pub info: DeviceInfo,
    pub memory_total_mib: u64,
    pub mig_enabled: bool,
    /// MIG devices when MIG is enabled, in NVML order.
    pub mig_devices: Vec<MigDevice>,
    /// 24-bit PCI class code from sysfs (`0x030200`), when readable.
    pub pci_class: Option<u32>,
}

/// Everything besides facts and sharing that shapes the labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelOptions {
    pub mig_strategy: MigStrategy,
    /// Unix seconds for `gfd.timestamp`; `None` = `--no-timestamp`.
    pub timestamp: Option<u64>,
}

pub type Labels = BTreeMap<String, String>;

/// Compute the whole label set. Fails only where GFD fails: MPS with a MIG-enabled GPU.
pub fn compute_labels(
    facts: &NodeFacts,
    sharing: &Sharing,
    opts: &LabelOptions,
) -> Result<Labels, DiscoveryError> {
    let mut labels = Labels::new();
    if let Some(ts) = opts.timestamp {
        labels.insert(names::LABEL_GFD_TIMESTAMP.into(), ts.to_string());
    }
    labels.insert(
        names::LABEL_VGPU_PRESENT.into(),
        facts.vgpu_present.to_string(),
    );
    if facts.gpus.is_empty() {
        return Ok(labels);
    }
    driver_labels(facts, &mut labels);
    labels.insert(names::LABEL_GPU_MACHINE.into(), facts.machine.clone());
    let mig_capable = facts.gpus.iter().any(|g| g.info.mig_capable);
    labels.insert(names::LABEL_MIG_CAPABLE.into(), mig_capable.to_string());
    match opts.mig_strategy {
        MigStrategy::None => {}
        MigStrategy::Single => {
            labels.insert(names::LABEL_MIG_STRATEGY.into(), "single".into());
        }
        MigStrategy::Mixed => {
            labels.insert(names::LABEL_MIG_STRATEGY.into(), "mixed".into());
        }
    }
    let mps = sharing.strategy == SharingStrategy::Mps;
    if mps && let Some(g) = facts.gpus.iter().find(|g| g.mig_enabled) {
        return Err(DiscoveryError::MpsWithMig(g.info.index));
    }
    labels.insert(names::LABEL_MPS_CAPABLE.into(), mps.to_string());
    labels.insert(names::LABEL_GPU_MODE.into(), gpu_mode(&facts.gpus).into());

    match opts.mig_strategy {
        MigStrategy::None => full_gpu_labels(facts, sharing, &mut labels),
        MigStrategy::Mixed => {
            full_gpu_labels(facts, sharing, &mut labels);
            mixed_mig_labels(facts, sharing, &mut labels);
        }
        MigStrategy::Single => single_labels(facts, sharing, &mut labels),
    }
    Ok(labels)
}

fn driver_labels(facts: &NodeFacts, labels: &mut Labels) {
    let mut parts = facts.driver_version.split('.');
    let major = parts.next().unwrap_or_default();
    let minor = parts.next().unwrap_or_default();
    let rev = parts.next().unwrap_or_default();
    let p = names::GFD_PREFIX;
    for (k, v) in [
        ("cuda.driver-version.major", major),
        ("cuda.driver-version.minor", minor),
        ("cuda.driver-version.revision", rev),
        ("cuda.driver-version.full", facts.driver_version.as_str()),
        ("cuda.driver.major", major),
        ("cuda.driver.minor", minor),
        ("cuda.driver.rev", rev),
    ] {
        labels.insert(format!("{p}{k}"), v.to_string());
    }
    let v = facts.cuda_driver_version;
    let (rt_major, rt_minor) = ((v / 1000).to_string(), ((v % 1000) / 10).to_string());
    for (k, val) in [
        ("cuda.runtime-version.major", rt_major.clone()),
        ("cuda.runtime-version.minor", rt_minor.clone()),
        (
            "cuda.runtime-version.full",
            format!("{rt_major}.{rt_minor}"),
        ),
        ("cuda.runtime.major", rt_major),
        ("cuda.runtime.minor", rt_minor),
    ] {
        labels.insert(format!("{p}{k}"), val);
    }
}

/// `compute` when every GPU is a 3D controller, `graphics` when every one is a VGA
/// controller, else `unknown`.
fn gpu_mode(gpus: &[GpuFacts]) -> &'static str {
    let modes: Vec<&str> = gpus
        .iter()
        .map(|g| match g.pci_class.map(|c| c >> 8) {
            Some(0x0302) => "compute",
            Some(0x0300) => "graphics",
            _ => "unknown",
        })
        .collect();
    match modes.first().copied() {
        Some(first) if modes.iter().all(|m| *m == first) => first,
        _ => "unknown",
    }
}

/// Labels of one resource (`nvidia.com/gpu` or `nvidia.com/mig-<profile>`).
struct ResourceLabeler<'a> {
    resource: String,
    /// `None` = sharing disabled for this resource (a MIG-enabled full GPU).
    sharing: Option<&'a Sharing>,
}

impl ResourceLabeler<'_> {
    fn replicas(&self) -> u32 {
        match self.sharing {
            None => 0,
            Some(s) => s.replication(&self.resource).map_or(1, |r| r.replicas),
        }
    }

    fn shared(&self) -> bool {
        self.replicas() > 1
    }

    fn strategy(&self) -> &'static str {
        match self.sharing {
            Some(s) if self.shared() => s.strategy.as_str(),
            _ => "none",
        }
    }

    fn product(&self, parts: &[&str]) -> String {
        let mut product = parts.join("-");
        let renamed = self
            .sharing
            .and_then(|s| s.replication(&self.resource))
            .is_some_and(|r| r.renamed);
        if self.shared() && !renamed {
            product.push_str("-SHARED");
        }
        product
    }

    fn put(&self, labels: &mut Labels, suffix: &str, value: impl ToString) {
        labels.insert(format!("{}.{suffix}", self.resource), value.to_string());
    }

    fn base(&self, labels: &mut Labels, count: usize, product_parts: &[&str]) {
        self.put(labels, "count", count);
        self.put(labels, "product", self.product(product_parts));
        self.put(labels, "replicas", self.replicas());
        self.put(labels, "sharing-strategy", self.strategy());
    }

    fn details(&self, labels: &mut Labels, info: &DeviceInfo) {
        let (major, minor) = info.compute_capability;
        if major == 0 {
            return;
        }
        self.put(labels, "family", family(major, minor));
        self.put(labels, "compute.major", major);
        self.put(labels, "compute.minor", minor);
    }

    fn mig_details(&self, labels: &mut Labels, d: &MigDevice) {
        self.put(labels, "multiprocessors", d.sm_count);
        self.put(labels, "slices.gi", d.gi_slices);
        self.put(labels, "slices.ci", d.ci_slices);
        self.put(labels, "engines.copy", d.engines.copy);
        self.put(labels, "engines.decoder", d.engines.decoder);
        self.put(labels, "engines.encoder", d.engines.encoder);
        self.put(labels, "engines.jpeg", d.engines.jpeg);
        self.put(labels, "engines.ofa", d.engines.ofa);
    }
}

/// `nvidia.com/gpu.*` for whole GPUs: one set per product name, the last GPU (by index) of
/// several models wins, as in GFD. MIG-enabled GPUs carry replicas 0.
fn full_gpu_labels(facts: &NodeFacts, sharing: &Sharing, labels: &mut Labels) {
    for gpu in &facts.gpus {
        let count = facts
            .gpus
            .iter()
            .filter(|g| g.info.name == gpu.info.name)
            .count();
        let l = ResourceLabeler {
            resource: names::RESOURCE_GPU.into(),
            sharing: (!gpu.mig_enabled).then_some(sharing),
        };
        let model = sanitise(&gpu.info.name);
        l.base(labels, count, &[model.as_str()]);
        if gpu.memory_total_mib > 0 {
            l.put(labels, "memory", gpu.memory_total_mib);
        } else {
            labels.remove(names::LABEL_GPU_MEMORY);
        }
        l.details(labels, &gpu.info);
    }
}

/// The profile as it appears in resource names and products (`+` → `.`).
fn profile_key(d: &MigDevice) -> String {
    d.profile.replace('+', ".")
}

/// `nvidia.com/mig-<profile>.*` per MIG profile present.
fn mixed_mig_labels(facts: &NodeFacts, sharing: &Sharing, labels: &mut Labels) {
    let mut by_profile: BTreeMap<String, (usize, &MigDevice, &GpuFacts)> = BTreeMap::new();
    for gpu in facts.gpus.iter().filter(|g| g.mig_enabled) {
        for d in &gpu.mig_devices {
            let e = by_profile.entry(profile_key(d)).or_insert((0, d, gpu));
            e.0 += 1;
            e.1 = d;
            e.2 = gpu;
        }
    }
    for (profile, (count, d, gpu)) in by_profile {
        let l = ResourceLabeler {
            resource: format!("{}{profile}", names::RESOURCE_MIG_PREFIX),
            sharing: Some(sharing),
        };
        let model = sanitise(&gpu.info.name);
        l.base(labels, count, &[model.as_str(), "MIG", profile.as_str()]);
        l.put(labels, "memory", d.memory_mib);
        l.mig_details(labels, d);
    }
}

/// MIG devices in the same shape (what `single` requires of all of them).
fn same_shape(a: &MigDevice, b: &MigDevice) -> bool {
    a.profile == b.profile
        && a.memory_mib == b.memory_mib
        && a.sm_count == b.sm_count
        && a.gi_slices == b.gi_slices
        && a.ci_slices == b.ci_slices
        && a.engines == b.engines
}

/// `single`: MIG devices are `nvidia.com/gpu`; an inconsistent layout is labelled INVALID.
fn single_labels(facts: &NodeFacts, sharing: &Sharing, labels: &mut Labels) {
    let enabled: Vec<&GpuFacts> = facts.gpus.iter().filter(|g| g.mig_enabled).collect();
    let Some(first) = enabled.first() else {
        return full_gpu_labels(facts, sharing, labels);
    };
    let devices: Vec<(&GpuFacts, &MigDevice)> = enabled
        .iter()
        .flat_map(|g| g.mig_devices.iter().map(move |d| (*g, d)))
        .collect();
    let valid = enabled.len() == facts.gpus.len()
        && enabled.iter().all(|g| !g.mig_devices.is_empty())
        && devices.iter().all(|(_, d)| same_shape(d, devices[0].1));
    let model = sanitise(&first.info.name);
    let l = ResourceLabeler {
        resource: names::RESOURCE_GPU.into(),
        sharing: Some(sharing),
    };
    match devices.last() {
        Some((gpu, d)) if valid => {
            let profile = profile_key(d);
            let model = sanitise(&gpu.info.name);
            l.base(
                labels,
                devices.len(),
                &[model.as_str(), "MIG", profile.as_str()],
            );
            l.put(labels, "memory", d.memory_mib);
            l.details(labels, &gpu.info);
            l.mig_details(labels, d);
        }
        _ => {
            l.put(labels, "product", format!("{model}-MIG-INVALID"));
            l.put(labels, "count", 0);
            l.put(labels, "replicas", 0);
            l.put(labels, "memory", 0);
            l.put(labels, "sharing-strategy", "");
        }
    }
}

/// GFD's architecture family for a compute capability.
pub fn family(major: u32, minor: u32) -> &'static str {
    match (major, minor) {
        (1, _) => "tesla",
        (2, _) => "fermi",
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, m) if m < 5 => "volta",
        (7, _) => "turing",
        (8, m) if m < 9 => "ampere",
        (8, 9) => "ada-lovelace",
        (9, _) => "hopper",
        (10 | 12, _) => "blackwell",
        (13, _) => "rubin",
        _ => "undefined",
    }
}

/// Keep `[A-Za-z0-9-_. ]`, then join the whitespace-separated words with `-`.
pub fn sanitise(s: &str) -> String {
    let kept: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitise_product_names() {
        assert_eq!(sanitise("NVIDIA H200"), "NVIDIA-H200");
        assert_eq!(sanitise("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
        assert_eq!(sanitise("  Tesla  T4 (rev a1)\n"), "Tesla-T4-rev-a1");
        assert_eq!(sanitise(""), "");
    }

    #[test]
    fn families() {
        assert_eq!(family(7, 0), "volta");
        assert_eq!(family(7, 5), "turing");
        assert_eq!(family(8, 0), "ampere");
        assert_eq!(family(8, 6), "ampere");
        assert_eq!(family(8, 9), "ada-lovelace");
        assert_eq!(family(9, 0), "hopper");
        assert_eq!(family(10, 0), "blackwell");
        assert_eq!(family(12, 0), "blackwell");
        assert_eq!(family(13, 0), "rubin");
        assert_eq!(family(4, 0), "undefined");
    }

    #[test]
    fn no_gpus_gives_only_timestamp_and_vgpu() {
        let facts = NodeFacts::default();
        let opts = LabelOptions {
            mig_strategy: MigStrategy::Mixed,
            timestamp: Some(1_700_000_000),
        };
        let labels = compute_labels(&facts, &Sharing::none(), &opts).expect("labels");
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec![names::LABEL_GFD_TIMESTAMP, names::LABEL_VGPU_PRESENT]
        );
    }
}
