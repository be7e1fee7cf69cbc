//! Device identity for the scheduler: the node's physical GPUs behind `nvidia.com/gpu`, by
//! index and UUID, with the health the plugin advertises, published as the Node annotation
//! `node.gantry.dev/gpu-devices` ([`gantry_api::gpu_devices`]). With it the scheduler knows
//! which GPU was withdrawn and places onto the healthy ones, not onto `0..allocatable-1`.

use std::collections::BTreeMap;
use std::time::Duration;

use gantry_api::gpu_devices::{self, GpuDevice};
use gantry_api::names;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use super::health::Faults;
use super::resources::{Physical, ResourceSet};

/// The whole GPUs advertised under `nvidia.com/gpu` (one entry per GPU, replicas folded),
/// Healthy unless a fault covers them. Pure.
pub fn devices<'a>(
    sets: impl IntoIterator<Item = &'a ResourceSet>,
    faults: &Faults,
) -> Vec<GpuDevice> {
    let mut out: BTreeMap<u32, GpuDevice> = BTreeMap::new();
    for set in sets.into_iter().filter(|s| s.name == names::RESOURCE_GPU) {
        for d in &set.devices {
            if let Physical::Gpu { index, uuid, .. } = &d.physical {
                out.entry(*index).or_insert_with(|| GpuDevice {
                    index: *index,
                    uuid: uuid.clone(),
                    healthy: !faults.unhealthy(&d.physical),
                });
            }
        }
    }
    out.into_values().collect()
}

/// Writes the latest value to the Node, in order, retrying every second until it lands
/// (a newer value replaces one not yet written). Ends when the sender is dropped.
pub fn spawn_publisher(client: kube::Client, node: String) -> watch::Sender<Option<String>> {
    let (tx, mut rx) = watch::channel::<Option<String>>(None);
    tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let mut written: Option<String> = None;
        loop {
            let want = rx.borrow_and_update().clone();
            if let Some(v) = want.filter(|v| written.as_ref() != Some(v)) {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    names::ANNOTATION_GPU_DEVICES: v}}});
                match api
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => written = Some(v),
                    Err(e) => {
                        crate::warn_limited!("device plugin node publish", error = %e, %node, "cannot publish the GPU devices on the Node; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    tx
}

/// The annotation value for `devices` (`None` when there are none to publish).
pub fn value(devices: &[GpuDevice]) -> Option<String> {
    (!devices.is_empty()).then(|| gpu_devices::format(devices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_plugin::health::{FaultKind, Target};
    use crate::device_plugin::resources::PluginDevice;
    use std::time::Instant;

    fn gpu(index: u32, replica: Option<u32>) -> PluginDevice {
        let uuid = format!("GPU-{index}");
        PluginDevice {
            id: match replica {
                Some(r) => format!("{uuid}::{r}"),
                None => uuid.clone(),
            },
            physical: Physical::Gpu {
                index,
                uuid,
                minor: index,
            },
            replica,
        }
    }

    #[test]
    fn one_entry_per_gpu_with_its_health() {
        let set = ResourceSet::new(
            names::RESOURCE_GPU.into(),
            vec![
                gpu(1, Some(0)),
                gpu(1, Some(1)),
                gpu(0, Some(0)),
                gpu(0, Some(1)),
            ],
            None,
        );
        let other = ResourceSet::new("nvidia.com/gpu.shared".into(), vec![gpu(7, None)], None);
        let mut faults = Faults::default();
        faults.record(Target::Gpu(1), FaultKind::Lost, None, Instant::now());
        let d = devices([&set, &other], &faults);
        assert_eq!(value(&d).unwrap(), "0:GPU-0:Healthy,1:GPU-1:Unhealthy");
        assert_eq!(value(&devices([&other], &faults)), None);
    }
}
