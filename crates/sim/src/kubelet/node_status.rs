//! The Node object and its status, pure: labels a real node of this kind carries, nodeInfo,
//! conditions, capacity/allocatable (native resources plus the plugins' extended resources).

use std::collections::BTreeMap;

use gantry_api::names;
use gantry_gpu::GpuModel;
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::admission::{self, Requests};

pub const KUBELET_VERSION: &str = "v1.33.0";
pub const KERNEL_VERSION: &str = "6.8.0-60-generic";
pub const OS_IMAGE: &str = "Ubuntu 24.04.2 LTS";
pub const OS_RELEASE_ID: &str = "ubuntu";
pub const OS_RELEASE_VERSION_ID: &str = "24.04";
pub const CONTAINER_RUNTIME: &str = "containerd://2.0.5";

/// Native resources of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    pub max_pods: u64,
    pub gpu_model: Option<&'static GpuModel>,
    pub gpus: u32,
    /// Position in the cluster (addresses, machine IDs).
    pub index: u32,
    /// Extra labels set at registration (the kubelet's `--node-labels`).
    pub labels: BTreeMap<String, String>,
}

const GIB: u64 = 1 << 30;

impl NodeResources {
    /// A plausible server for `gpus` GPUs: 16 cores and 128 GiB per GPU (a DGX H100 has 224
    /// cores, 2 TiB), a 32-core / 128 GiB box without GPUs.
    pub fn for_gpus(gpu_model: Option<&'static GpuModel>, gpus: u32, index: u32) -> Self {
        let (cpu, mem) = if gpu_model.is_some() && gpus > 0 {
            (16 * u64::from(gpus), 128 * GIB * u64::from(gpus))
        } else {
            (32, 128 * GIB)
        };
        NodeResources {
            cpu_millis: cpu * 1000,
            memory_bytes: mem,
            ephemeral_storage_bytes: 1024 * GIB,
            max_pods: 110,
            gpu_model: gpu_model.filter(|_| gpus > 0),
            gpus,
            index,
            labels: BTreeMap::new(),
        }
    }

    pub fn is_gpu_node(&self) -> bool {
        self.gpu_model.is_some()
    }

    /// Native allocatable in admission units.
    pub fn native(&self) -> Requests {
        [
            (admission::CPU, self.cpu_millis as i128),
            (admission::MEMORY, self.memory_bytes as i128),
            ("ephemeral-storage", self.ephemeral_storage_bytes as i128),
            (admission::PODS, self.max_pods as i128),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    pub fn internal_ip(&self) -> String {
        format!(
            "10.{}.{}.{}",
            64 + (self.index >> 16) % 64,
            (self.index >> 8) & 255,
            self.index & 255
        )
    }
}

/// Labels a real node of this kind carries (NFD's only on GPU nodes: our sim has no NFD, and
/// the operator keys on `pci-10de.present`).
pub fn labels(name: &str, res: &NodeResources) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if res.is_gpu_node() {
        for (k, v) in [
            (names::NFD_GPU_LABELS[0], "true"),
            (names::NFD_KERNEL_VERSION_FULL, KERNEL_VERSION),
            (names::NFD_OS_RELEASE_ID, OS_RELEASE_ID),
            (names::NFD_OS_RELEASE_VERSION_ID, OS_RELEASE_VERSION_ID),
        ] {
            l.insert(k.to_string(), v.to_string());
        }
    }
    l.extend(res.labels.clone());
    l
}

/// The Node to create at registration (status follows as a status patch).
pub fn node_object(name: &str, res: &NodeResources) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels(name, res)),
            annotations: Some(
                [("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string())]
                    .into_iter()
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("10.244.{}.0/24", res.index % 256)),
            ..Default::default()
        }),
        status: None,
    }
}

fn quantity(resource: &str, v: u64) -> String {
    match resource {
        admission::CPU if v.is_multiple_of(1000) => (v / 1000).to_string(),
        admission::CPU => format!("{v}m"),
        admission::MEMORY | "ephemeral-storage" if v.is_multiple_of(1024) => {
            format!("{}Ki", v / 1024)
        }
        _ => v.to_string(),
    }
}

/// What the status says, in one value so "changed?" is a plain comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusInputs {
    pub ready: bool,
    pub capacity: BTreeMap<String, u64>,
    pub allocatable: BTreeMap<String, u64>,
}

/// Inputs from the node's native resources and its plugins' extended resources.
pub fn inputs(
    res: &NodeResources,
    powered: bool,
    ext_capacity: &BTreeMap<String, u64>,
    ext_allocatable: &BTreeMap<String, u64>,
) -> StatusInputs {
    let native: BTreeMap<String, u64> = res
        .native()
        .into_iter()
        .map(|(k, v)| (k, v as u64))
        .collect();
    let mut capacity = native.clone();
    capacity.extend(ext_capacity.iter().map(|(k, v)| (k.clone(), *v)));
    let mut allocatable = native;
    allocatable.extend(ext_allocatable.iter().map(|(k, v)| (k.clone(), *v)));
    StatusInputs {
        ready: powered,
        capacity,
        allocatable,
    }
}

/// A merge patch for `nodes/<name>/status`. `now` is RFC 3339.
pub fn status_patch(
    name: &str,
    res: &NodeResources,
    s: &StatusInputs,
    boot_id: &str,
    now: &str,
) -> Value {
    let q = |m: &BTreeMap<String, u64>| -> serde_json::Map<String, Value> {
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(quantity(k, *v))))
            .collect()
    };
    let pressure = |t: &str, reason: &str, msg: &str| {
        let (status, reason, msg) = if s.ready {
            ("False", reason, msg)
        } else {
            (
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
        };
        json!({"type": t, "status": status, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let ready = if s.ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
               "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now})
    } else {
        json!({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "status": {
            "capacity": q(&s.capacity),
            "allocatable": q(&s.allocatable),
            "conditions": [
                pressure("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                pressure("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                pressure("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ready,
            ],
            "addresses": [
                {"type": "InternalIP", "address": res.internal_ip()},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("{:032x}", u128::from(res.index) + 0x5a17_0000),
                "systemUUID": format!("5a170000-0000-4000-8000-{:012x}", res.index),
                "bootID": boot_id,
                "kernelVersion": KERNEL_VERSION,
                "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINER_RUNTIME,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    })
}

/// Whether a node's Ready condition is True (for the benchmark and tests).
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfd_labels_only_on_gpu_nodes() {
        let h100 = gantry_gpu::catalog::find("H100-80GB");
        let gpu = NodeResources::for_gpus(h100, 8, 0);
        let cpu = NodeResources::for_gpus(None, 0, 1);
        let lg = labels("h100-80gb-0", &gpu);
        assert_eq!(lg[names::NFD_GPU_LABELS[0]], "true");
        assert_eq!(lg[names::NFD_KERNEL_VERSION_FULL], KERNEL_VERSION);
        assert_eq!(lg["kubernetes.io/hostname"], "h100-80gb-0");
        let lc = labels("cpu-0", &cpu);
        assert!(!lc.keys().any(|k| k.starts_with(names::NFD_LABEL_PREFIX)));
        assert_eq!(lc["kubernetes.io/os"], "linux");
    }

    #[test]
    fn status_carries_extended_resources_and_readiness() {
        let res = NodeResources::for_gpus(gantry_gpu::catalog::find("H100-80GB"), 8, 3);
        let cap: BTreeMap<String, u64> = [("nvidia.com/gpu".to_string(), 8)].into_iter().collect();
        let alloc: BTreeMap<String, u64> =
            [("nvidia.com/gpu".to_string(), 7)].into_iter().collect();
        let s = inputs(&res, true, &cap, &alloc);
        let p = status_patch("n", &res, &s, "b", "2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["capacity"]["nvidia.com/gpu"], "8");
        assert_eq!(p["status"]["allocatable"]["nvidia.com/gpu"], "7");
        assert_eq!(p["status"]["capacity"]["cpu"], "128");
        assert_eq!(
            p["status"]["capacity"]["memory"],
            format!("{}Ki", 1024u64 * 1024 * 1024)
        );
        assert_eq!(p["status"]["conditions"][3]["status"], "True");
        assert_eq!(p["status"]["addresses"][0]["address"], "10.64.0.3");
        let off = inputs(&res, false, &cap, &alloc);
        assert_ne!(off, s);
        let p = status_patch("n", &res, &off, "b", "2026-01-01T00:00:00Z");
        assert_eq!(p["status"]["conditions"][3]["status"], "Unknown");
    }
}
