//! Small builders for cluster inputs used by the integration tests.
#![allow(dead_code)]

use gantry_api::names;
use gantry_scheduler::input::*;
use std::collections::BTreeMap;

pub const GIB: i64 = 1 << 30;

pub fn gpu_node(name: &str, gpus: u32) -> NodeInput {
    let mut labels = BTreeMap::new();
    labels.insert(
        names::LABEL_GPU_PRODUCT.to_string(),
        "NVIDIA-H100-80GB-HBM3".to_string(),
    );
    labels.insert(names::LABEL_GPU_MEMORY.to_string(), "80000".to_string());
    NodeInput {
        name: name.into(),
        labels,
        taints: vec![],
        schedulable: true,
        cpu_milli: 64_000,
        memory_bytes: 512 * GIB,
        pods: 110,
        gpus,
        mig: BTreeMap::new(),
        gpu_devices: Vec::new(),
    }
}

pub fn queue(
    name: &str,
    parent: Option<&str>,
    gpu_quota: f64,
    gpu_limit: f64,
    weight: f64,
) -> QueueInput {
    QueueInput {
        name: name.into(),
        parent: parent.map(str::to_string),
        priority: None,
        gpu: QueueResourceInput {
            quota: gpu_quota,
            limit: gpu_limit,
            over_quota_weight: weight,
        },
        cpu: QueueResourceInput {
            quota: -1.0,
            limit: -1.0,
            over_quota_weight: 1.0,
        },
        memory: QueueResourceInput {
            quota: -1.0,
            limit: -1.0,
            over_quota_weight: 1.0,
        },
        creation: 0,
        usage: [0.0; 3],
        preempt_min_runtime: None,
        reclaim_min_runtime: None,
    }
}

pub fn group(name: &str, queue: &str, priority: i32, min: u32, creation: i64) -> PodGroupInput {
    PodGroupInput {
        namespace: "ns".into(),
        name: name.into(),
        queue: queue.into(),
        priority: Some(priority),
        preemptible: None,
        min_member: Some(min),
        sub_groups: vec![],
        creation,
        staleness_grace_secs: None,
        stale_since: None,
        last_start: None,
        topology: None,
    }
}

pub fn pod(name: &str, group: &str, gpus: i64) -> PodInput {
    let mut extended = BTreeMap::new();
    if gpus > 0 {
        extended.insert(names::RESOURCE_GPU.to_string(), gpus);
    }
    PodInput {
        namespace: "ns".into(),
        name: name.into(),
        pod_group: group.into(),
        cpu_milli: 1000,
        memory_bytes: GIB,
        extended,
        ..Default::default()
    }
}

pub fn fraction_pod(name: &str, group: &str, key: &str, value: &str) -> PodInput {
    let mut p = pod(name, group, 0);
    p.annotations.insert(key.to_string(), value.to_string());
    p
}

pub fn running(mut p: PodInput, node: &str, gpus: &[u32]) -> PodInput {
    p.phase = PodPhase::Running;
    p.node = Some(node.into());
    p.gpu_indices = gpus.to_vec();
    p
}

/// A one-pod job per pod: group named like the pod.
pub fn job(
    input: &mut ClusterInput,
    name: &str,
    queue: &str,
    priority: i32,
    gpus: i64,
    creation: i64,
) {
    input
        .pod_groups
        .push(group(name, queue, priority, 1, creation));
    let mut p = pod(name, name, gpus);
    p.creation = creation;
    input.pods.push(p);
}
