//! What the node has, read once from the [`Backend`]: GPUs and their MIG devices. The
//! resource cores work on this plain snapshot, never on the backend itself.

use gantry_gpu::{Backend, GpuError};

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    /// NVML product name (what `resources.gpus[].pattern` matches).
    pub product: String,
    /// `/dev/nvidia<minor>`.
    pub minor: u32,
    pub mig_enabled: bool,
    pub mig_devices: Vec<Mig>,
}

/// One MIG device (GI + CI) of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mig {
    pub parent: u32,
    /// MIG index on the parent (the `j` of `i:j`).
    pub index: u32,
    pub uuid: String,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// Full profile string (`1g.10gb`, `1g.18gb+me`, `1c.2g.20gb`).
    pub profile: String,
    /// Whether the compute instance is the whole GPU instance (`C == G`).
    pub whole_instance: bool,
}

/// GPUs in index order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inventory {
    pub gpus: Vec<Gpu>,
}

impl Inventory {
    /// Reads every GPU and MIG device. A GPU that is lost (or otherwise unreadable) is
    /// skipped with `lost` reporting its index, so the plugin can still serve the rest.
    pub fn read(backend: &dyn Backend) -> Result<(Inventory, Vec<u32>), GpuError> {
        let count = backend.device_count()?;
        let mut gpus = Vec::new();
        let mut lost = Vec::new();
        for index in 0..count {
            match read_gpu(backend, index) {
                Ok(gpu) => gpus.push(gpu),
                Err(err) => {
                    tracing::warn!(gpu = index, error = %err, "GPU unreadable; not advertised");
                    lost.push(index);
                }
            }
        }
        Ok((Inventory { gpus }, lost))
    }

    pub fn gpu(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

fn read_gpu(backend: &dyn Backend, index: u32) -> Result<Gpu, GpuError> {
    let info = backend.device_info(index)?;
    let mig_enabled = info.mig_capable && backend.mig_mode(index)?.current;
    let mig_devices = if mig_enabled {
        backend
            .mig_devices(index)?
            .into_iter()
            .map(|m| Mig {
                parent: index,
                index: m.index,
                whole_instance: m.ci_slices == m.gi_slices,
                uuid: m.uuid,
                gpu_instance: m.gpu_instance_id,
                compute_instance: m.compute_instance_id,
                profile: m.profile,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Gpu {
        index,
        uuid: info.uuid,
        product: info.name,
        minor: info.minor_number,
        mig_enabled,
        mig_devices,
    })
}
