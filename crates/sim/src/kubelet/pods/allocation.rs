//! Device allocation through the node's plugins, the record of it on the pod, and simulated
//! GPU load for what a pod got.

use std::sync::atomic::Ordering;

use gantry_gpu::{Backend, SimProcess};
use serde_json::{Value, json};

use super::ctx::NEXT_PID;
use crate::kubelet::lock::lock;
use crate::kubelet::node::NodeShared;
use crate::kubelet::pod_ref::PodRef;
use crate::kubelet::{admission, plugins};

pub(super) async fn allocate_all(
    node: &NodeShared,
    r: &PodRef,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    record: &mut serde_json::Map<String, Value>,
    gpu_ids: &mut Vec<String>,
) -> Result<(), String> {
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c, true))
        .chain(spec.containers.iter().map(|c| (c, false)));
    for (c, init) in all {
        let mut per_container = serde_json::Map::new();
        let requests = admission::pod_requests(&k8s_openapi::api::core::v1::PodSpec {
            containers: vec![c.clone()],
            ..Default::default()
        })?;
        for (resource, n) in requests {
            if n <= 0 || !lock(&node.devices).is_plugin_resource(&resource) {
                continue;
            }
            let a = plugins::allocate(node, r, &c.name, init, &resource, n as usize)
                .await
                .map_err(|e| e.to_string())?;
            if !init {
                gpu_ids.extend(a.device_ids.iter().cloned());
            }
            let resp = &a.response;
            per_container.insert(
                resource,
                json!({
                    "deviceIDs": a.device_ids,
                    "envs": resp.envs,
                    "annotations": resp.annotations,
                    "cdiDevices": resp.cdi_devices.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
                    "mounts": resp.mounts.iter().map(|m| json!({"containerPath": m.container_path, "hostPath": m.host_path, "readOnly": m.read_only})).collect::<Vec<_>>(),
                    "devices": resp.devices.iter().map(|d| json!({"containerPath": d.container_path, "hostPath": d.host_path, "permissions": d.permissions})).collect::<Vec<_>>(),
                }),
            );
        }
        if !per_container.is_empty() {
            record.insert(c.name.clone(), Value::Object(per_container));
        }
    }
    Ok(())
}

/// Register a busy process on each simulated GPU (or MIG device) the pod got, so NVML
/// utilisation, memory, power and the process list move. Returns the pids.
pub(super) fn start_gpu_load(node: &NodeShared, ids: &[String]) -> Vec<u32> {
    let Some(backend) = &node.backend else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    let count = backend.device_count().unwrap_or(0);
    for id in ids {
        // Time-sliced replicas advertise `<uuid>::<n>`.
        let uuid = id.split("::").next().unwrap_or(id);
        for gpu in 0..count {
            let (gi, ci, mem) = match backend.device_info(gpu) {
                Ok(info) if info.uuid == uuid => (
                    None,
                    None,
                    backend.memory(gpu).map(|m| m.total_mib).unwrap_or(0),
                ),
                Ok(_) => match backend
                    .mig_devices(gpu)
                    .ok()
                    .and_then(|ds| ds.into_iter().find(|d| d.uuid == uuid))
                {
                    Some(d) => {
                        let mem = backend
                            .mig_device_memory(&d.uuid)
                            .map(|m| m.total_mib)
                            .unwrap_or(0);
                        (Some(d.gpu_instance_id), Some(d.compute_instance_id), mem)
                    }
                    None => continue,
                },
                Err(_) => continue,
            };
            let pid = NEXT_PID.fetch_add(1, Ordering::Relaxed);
            let p = SimProcess {
                pid,
                gpu,
                gpu_instance: gi,
                compute_instance: ci,
                memory_mib: mem * 7 / 10,
                utilization: 0.85,
            };
            if backend.start_process(p).is_ok() {
                pids.push(pid);
            }
            break;
        }
    }
    pids
}

pub(super) fn release(node: &NodeShared, uid: &str, pids: &[u32]) {
    if let Some(b) = &node.backend {
        for pid in pids {
            b.stop_process(*pid);
        }
    }
    lock(&node.devices).release(uid);
    lock(&node.admitted).remove(uid);
}
