//! What the simulated NVML backends of the nodes report, per GPU, for the live view.

use std::collections::BTreeMap;
use std::sync::Arc;

use gantry_gpu::Backend;

use crate::kubelet::NodeShared;

use super::snapshot::GpuReading;

/// Current readings of every simulated GPU, per node (the NVML side of the picture).
pub fn readings(nodes: &[Arc<NodeShared>]) -> BTreeMap<String, Vec<GpuReading>> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let Some(b) = &n.backend else { continue };
        let count = b.device_count().unwrap_or(0);
        let gpus = (0..count)
            .map(|i| {
                let info = b.device_info(i);
                let mem = b.memory(i).ok();
                GpuReading {
                    index: i,
                    uuid: info.as_ref().map(|d| d.uuid.clone()).unwrap_or_default(),
                    memory_mib: mem.map(|m| m.total_mib).unwrap_or(0),
                    mem_used_mib: mem.map(|m| m.used_mib).unwrap_or(0),
                    util_pct: b.utilization(i).map(|u| u.gpu_pct).unwrap_or(0),
                    healthy: info.is_ok() && mem.is_some(),
                    mig: b
                        .mig_devices(i)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|m| (m.uuid, m.profile))
                        .collect(),
                }
            })
            .collect();
        out.insert(n.name.clone(), gpus);
    }
    out
}
