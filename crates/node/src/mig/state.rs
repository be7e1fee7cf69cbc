//! What the planner needs to know about each GPU, read through a view that cannot mutate.

use std::collections::BTreeMap;

use gantry_gpu::layout::MigLayout;
use gantry_gpu::{Backend, ComputeInstance, GpuInstance, MigDevice, MigMode, MigProfile, Result};

/// A read-only view of a [`Backend`]: it exposes only the queries the planner needs, so code
/// that holds one (the dry run) cannot change a GPU.
#[derive(Clone, Copy)]
pub struct ReadOnly<'a>(&'a dyn Backend);

impl<'a> ReadOnly<'a> {
    pub fn new(backend: &'a dyn Backend) -> Self {
        ReadOnly(backend)
    }
    pub fn device_count(&self) -> Result<u32> {
        self.0.device_count()
    }
    pub fn device_info(&self, gpu: u32) -> Result<gantry_gpu::DeviceInfo> {
        self.0.device_info(gpu)
    }
    pub fn mig_profiles(&self, gpu: u32) -> Result<Vec<MigProfile>> {
        self.0.mig_profiles(gpu)
    }
    pub fn mig_mode(&self, gpu: u32) -> Result<MigMode> {
        self.0.mig_mode(gpu)
    }
    pub fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>> {
        self.0.gpu_instances(gpu)
    }
    pub fn compute_instances(&self, gpu: u32, gi: u32) -> Result<Vec<ComputeInstance>> {
        self.0.compute_instances(gpu, gi)
    }
    pub fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>> {
        self.0.mig_devices(gpu)
    }
}

/// One GPU instance that exists now, with the ids of its compute instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingInstance {
    pub instance: GpuInstance,
    pub compute_instances: Vec<u32>,
}

/// Everything the planner knows about one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    pub index: u32,
    /// NVML product name (`NVIDIA H200`).
    pub name: String,
    /// `0xDDDDVVVV`, matched against `device-filter`.
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    /// GPU-instance profiles of the model; empty when the GPU cannot do MIG.
    pub profiles: Vec<MigProfile>,
    /// `None` when the GPU cannot do MIG.
    pub mode: Option<MigMode>,
    pub instances: Vec<ExistingInstance>,
    /// MIG devices (GI+CI pairs) counted by profile.
    pub layout: MigLayout,
}

/// Read the facts of every GPU of the node.
pub fn observe(view: ReadOnly<'_>) -> Result<Vec<GpuFacts>> {
    (0..view.device_count()?)
        .map(|gpu| observe_gpu(view, gpu))
        .collect()
}

fn observe_gpu(view: ReadOnly<'_>, gpu: u32) -> Result<GpuFacts> {
    let info = view.device_info(gpu)?;
    let profiles = view.mig_profiles(gpu)?;
    let mut facts = GpuFacts {
        index: gpu,
        name: info.name,
        pci_device_id: info.pci_device_id,
        pci_subsystem_id: info.pci_subsystem_id,
        profiles,
        mode: None,
        instances: Vec::new(),
        layout: MigLayout::disabled(),
    };
    if facts.profiles.is_empty() {
        return Ok(facts);
    }
    let mode = view.mig_mode(gpu)?;
    facts.mode = Some(mode);
    if !mode.current {
        return Ok(facts);
    }
    for gi in view.gpu_instances(gpu)? {
        let cis = view.compute_instances(gpu, gi.id)?;
        facts.instances.push(ExistingInstance {
            compute_instances: cis.iter().map(|c| c.id).collect(),
            instance: gi,
        });
    }
    let mut devices = BTreeMap::new();
    for d in view.mig_devices(gpu)? {
        *devices.entry(d.profile).or_insert(0) += 1;
    }
    facts.layout = MigLayout {
        enabled: true,
        devices,
    };
    Ok(facts)
}
