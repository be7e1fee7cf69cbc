//! The cluster picture the live views draw: nodes × GPUs with who holds what, and queues
//! with their fair share vs allocation. Pure: built from API objects plus per-GPU readings.

use std::collections::BTreeMap;

use gantry_api::kai::Queue;
use gantry_api::names;
use gantry_k8s_rules::quantity::parse_f64;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};

/// One physical GPU as the node's NVML (here: the simulated backend) reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub index: u32,
    pub uuid: String,
    pub memory_mib: u64,
    pub mem_used_mib: u64,
    pub util_pct: u32,
    /// False when NVML cannot read the GPU (fallen off the bus).
    pub healthy: bool,
    /// MIG devices on it: (uuid, profile).
    pub mig: Vec<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The ClusterPolicy in charge, once there is one.
    pub cluster_policy: Option<super::cluster_state::PolicyView>,
    pub nodes: Vec<NodeView>,
    pub queues: Vec<QueueView>,
    /// Physical GPUs on Ready nodes.
    pub gpus_total: u32,
    /// Whole-GPU equivalents held by pods, every pod on a GPU node (a fraction counts its
    /// share, a MIG slice its compute share, a time-sliced or MPS replica 1/replicas). The
    /// queues' `allocated` is the scheduler's count instead (what pods requested: a replica
    /// is the 1 GPU it asks for), and leaves out pods outside its queues.
    pub gpus_allocated: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub product: String,
    pub ready: bool,
    pub unschedulable: bool,
    /// `nvidia.com/*` allocatable, as the node reports it.
    pub allocatable: BTreeMap<String, String>,
    pub gpus: Vec<GpuView>,
    /// Operand (`driver`, `device-plugin`, …) → its pod's status on this node.
    pub operands: BTreeMap<String, String>,
    /// `nvidia.com/gpu-driver-upgrade-state`, while the operator manages upgrades.
    pub upgrade_state: Option<String>,
    /// `nvidia.com/mig.config` and `nvidia.com/mig.config.state`.
    pub mig_config: Option<String>,
    pub mig_config_state: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub util_pct: u32,
    pub mem_used_mib: u64,
    pub memory_mib: u64,
    pub healthy: bool,
    /// MIG profiles of the GPU's MIG devices (empty: MIG off or no instances).
    pub mig: Vec<String>,
    pub holders: Vec<Holder>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    /// `namespace/name`.
    pub pod: String,
    pub queue: Option<String>,
    /// Share of the GPU this pod holds (1.0 for a whole GPU).
    pub share: f64,
    /// `whole`, `replica` (time-sliced), `mps` (an MPS client's replica), `mig:<profile>`
    /// or `fraction`.
    pub kind: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    pub name: String,
    pub parent: Option<String>,
    /// GPUs the queue is guaranteed (`spec.resources.gpu.quota`; -1 = none set).
    pub quota: f64,
    /// From `status.allocated` (the scheduler's figure) or, failing that, counted from pods.
    pub allocated: f64,
    pub requested: f64,
    /// The scheduler's fair share in GPUs, once it has published one (`status.fairShare`).
    pub fair_share: Option<f64>,
    pub pending_pods: u32,
}

/// True while a pod holds its devices (bound and not finished).
fn holds_devices(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    bound && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

fn pod_key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

fn label<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Device IDs per resource a pod got, from the sim kubelet's allocation record.
fn allocated_ids(p: &Pod) -> Vec<(String, String)> {
    let Some(raw) = annotation(p, names::ANNOTATION_SIM_ALLOCATED) else {
        return Vec::new();
    };
    let Ok(serde_json::Value::Object(containers)) = serde_json::from_str(raw) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for per_resource in containers.values() {
        let Some(m) = per_resource.as_object() else {
            continue;
        };
        for (resource, rec) in m {
            for id in rec["deviceIDs"].as_array().into_iter().flatten() {
                if let Some(id) = id.as_str() {
                    out.push((resource.clone(), id.to_string()));
                }
            }
        }
    }
    out
}

fn replicas_of(node: &Node, resource: &str, physical: usize) -> f64 {
    let n = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get(resource))
        .and_then(|q| q.0.parse::<f64>().ok())
        .unwrap_or(physical as f64);
    if physical == 0 {
        1.0
    } else {
        (n / physical as f64).max(1.0)
    }
}

fn mig_share(profile: &str) -> f64 {
    // `3g.40gb` → 3 of the GPU's 7 compute slices.
    profile
        .split('.')
        .next()
        .and_then(|g| {
            g.trim_end_matches('g')
                .trim_end_matches('c')
                .parse::<f64>()
                .ok()
        })
        .map(|g| g / 7.0)
        .unwrap_or(1.0 / 7.0)
}

/// The fraction a sharing pod asked for, given the GPU's memory.
fn fraction_share(p: &Pod, memory_mib: u64) -> f64 {
    use gantry_api::kai::SharePortion;
    match gantry_api::kai::pod_gpu_sharing(p)
        .ok()
        .flatten()
        .map(|s| s.portion)
    {
        Some(SharePortion::Fraction(f)) => f,
        Some(SharePortion::MemoryMib(m)) if memory_mib > 0 => {
            (m as f64 / memory_mib as f64).clamp(0.0, 1.0)
        }
        _ => 0.0,
    }
}

fn quantity_gpus(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<f64> {
    let m = map?;
    let q = m.get("nvidia.com/gpu").or_else(|| m.get("gpu"))?;
    parse_f64(&q.0).ok()
}

/// Build the picture. `gpus` maps node name → its GPUs' readings.
pub fn build(
    nodes: &[Node],
    pods: &[Pod],
    queues: &[Queue],
    gpus: &BTreeMap<String, Vec<GpuReading>>,
) -> Snapshot {
    // Reservation pods hold a whole GPU on behalf of a GPU group's fractional tenants.
    let mut group_gpu: BTreeMap<(String, String), String> = BTreeMap::new();
    for p in pods.iter().filter(|p| holds_devices(p)) {
        let (Some(group), Some(node)) = (
            label(p, names::LABEL_GPU_GROUP),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
        ) else {
            continue;
        };
        if p.metadata.namespace.as_deref() == Some(names::DEFAULT_RESERVATION_NAMESPACE)
            && let Some((_, id)) = allocated_ids(p)
                .into_iter()
                .find(|(r, _)| r == names::RESOURCE_GPU)
        {
            group_gpu.insert((node, group.to_string()), id);
        }
    }

    let mut per_queue_alloc: BTreeMap<String, f64> = BTreeMap::new();
    let mut per_queue_pending: BTreeMap<String, u32> = BTreeMap::new();
    let mut views = Vec::new();
    let mut total = 0u32;
    let mut allocated = 0.0;
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let readings = gpus.get(&name).cloned().unwrap_or_default();
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let allocatable = status
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| {
                a.iter()
                    .filter(|(k, _)| k.starts_with("nvidia.com/"))
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mps = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_GPU_SHARING_STRATEGY))
            .is_some_and(|v| v == "mps");
        let mut gpu_views: Vec<GpuView> = readings
            .iter()
            .map(|g| GpuView {
                index: g.index,
                uuid: g.uuid.clone(),
                util_pct: g.util_pct,
                mem_used_mib: g.mem_used_mib,
                memory_mib: g.memory_mib,
                healthy: g.healthy,
                mig: g.mig.iter().map(|(_, p)| p.clone()).collect(),
                holders: Vec::new(),
            })
            .collect();
        let by_uuid = |id: &str| -> Option<(usize, Option<String>)> {
            let base = id.split("::").next().unwrap_or(id);
            readings.iter().enumerate().find_map(|(i, g)| {
                if g.uuid == base || g.index.to_string() == base {
                    return Some((i, None));
                }
                g.mig
                    .iter()
                    .find(|(u, _)| u == base)
                    .map(|(_, prof)| (i, Some(prof.clone())))
            })
        };
        for p in pods.iter().filter(|p| holds_devices(p)) {
            if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(name.as_str()) {
                continue;
            }
            if p.metadata.namespace.as_deref() == Some(names::DEFAULT_RESERVATION_NAMESPACE) {
                continue;
            }
            let queue = label(p, names::LABEL_QUEUE).map(str::to_string);
            let mut held = 0.0;
            for (resource, id) in allocated_ids(p) {
                let Some((i, mig)) = by_uuid(&id) else {
                    continue;
                };
                let (share, kind) = match mig {
                    Some(prof) => (mig_share(&prof), format!("mig:{prof}")),
                    // A replica of a shared GPU: MPS or time-slicing, as GFD labels the node.
                    None if id.contains("::") => (
                        1.0 / replicas_of(node, &resource, readings.len()),
                        if mps { "mps" } else { "replica" }.to_string(),
                    ),
                    None => (1.0, "whole".to_string()),
                };
                held += share;
                gpu_views[i].holders.push(Holder {
                    pod: pod_key(p),
                    queue: queue.clone(),
                    share,
                    kind,
                });
            }
            if let Some(group) = label(p, names::LABEL_GPU_GROUP)
                && let Some(id) = group_gpu.get(&(name.clone(), group.to_string()))
                && let Some((i, _)) = by_uuid(id)
            {
                let share = fraction_share(p, readings[i].memory_mib);
                held += share;
                gpu_views[i].holders.push(Holder {
                    pod: pod_key(p),
                    queue: queue.clone(),
                    share,
                    kind: "fraction".to_string(),
                });
            }
            allocated += held;
            if let Some(q) = queue {
                *per_queue_alloc.entry(q).or_default() += held;
            }
        }
        if ready {
            total += readings.len() as u32;
        }
        let node_name = name.clone();
        views.push(NodeView {
            name,
            product: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::LABEL_GPU_PRODUCT))
                .cloned()
                .unwrap_or_default(),
            ready,
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            allocatable,
            gpus: gpu_views,
            operands: super::cluster_state::operands(pods, &node_name),
            upgrade_state: super::cluster_state::node_label(node, names::LABEL_UPGRADE_STATE),
            mig_config: super::cluster_state::node_label(node, names::LABEL_MIG_CONFIG),
            mig_config_state: super::cluster_state::node_label(node, names::LABEL_MIG_CONFIG_STATE),
        });
    }
    for p in pods {
        let pending = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
            && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none();
        if pending && let Some(q) = label(p, names::LABEL_QUEUE) {
            *per_queue_pending.entry(q.to_string()).or_default() += 1;
        }
    }
    let queues = queues
        .iter()
        .map(|q| {
            let name = q.metadata.name.clone().unwrap_or_default();
            let status = q.status.as_ref();
            let fair_share = quantity_gpus(status.and_then(|s| s.fair_share.as_ref()));
            QueueView {
                parent: q.spec.parent_queue.clone(),
                quota: q
                    .spec
                    .resources
                    .as_ref()
                    .and_then(|r| r.gpu.as_ref())
                    .and_then(|g| g.quota)
                    .unwrap_or(-1.0),
                allocated: quantity_gpus(status.and_then(|s| s.allocated.as_ref()))
                    .unwrap_or_else(|| per_queue_alloc.get(&name).copied().unwrap_or(0.0)),
                requested: quantity_gpus(status.and_then(|s| s.requested.as_ref())).unwrap_or(0.0),
                fair_share,
                pending_pods: per_queue_pending.get(&name).copied().unwrap_or(0),
                name,
            }
        })
        .collect();
    Snapshot {
        cluster_policy: None,
        nodes: views,
        queues,
        gpus_total: total,
        gpus_allocated: allocated,
    }
}

/// The node × GPU grid as text lines (terminal view and plain output): one line per node,
/// one cell per GPU showing its holders.
pub fn grid_lines(s: &Snapshot, max_nodes: usize) -> Vec<String> {
    let mut out = Vec::new();
    for n in s
        .nodes
        .iter()
        .filter(|n| !n.gpus.is_empty())
        .take(max_nodes)
    {
        let cells: Vec<String> = n
            .gpus
            .iter()
            .map(|g| {
                if !g.healthy {
                    return "XX".to_string();
                }
                match g.holders.len() {
                    0 => "··".to_string(),
                    1 if g.holders[0].kind == "whole" => "██".to_string(),
                    k => {
                        let used: f64 = g.holders.iter().map(|h| h.share).sum();
                        let glyph = if used >= 0.99 { '▓' } else { '▒' };
                        format!("{glyph}{}", k.min(9))
                    }
                }
            })
            .collect();
        let flag = match (n.ready, n.unschedulable) {
            (false, _) => " (NotReady)",
            (true, true) => " (cordoned)",
            _ => "",
        };
        out.push(format!("{:<16} {}{}", n.name, cells.join(" "), flag));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, cap: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"capacity": cap.clone(), "allocatable": cap,
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    fn pod(
        ns: &str,
        name: &str,
        node: &str,
        labels: serde_json::Value,
        ann: serde_json::Value,
    ) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": ann},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn alloc(resource: &str, ids: &[&str]) -> String {
        json!({"c": {resource: {"deviceIDs": ids}}}).to_string()
    }

    fn gpu(i: u32, uuid: &str) -> GpuReading {
        GpuReading {
            index: i,
            uuid: uuid.into(),
            memory_mib: 80000,
            healthy: true,
            ..Default::default()
        }
    }

    #[test]
    fn whole_replica_mig_and_fraction_holders() {
        let nodes = vec![node("n0", json!({"nvidia.com/gpu": "8"}))];
        let mut g2 = gpu(2, "GPU-c");
        g2.mig.push(("MIG-x".into(), "3g.40gb".into()));
        let readings = BTreeMap::from([(
            "n0".to_string(),
            vec![gpu(0, "GPU-a"), gpu(1, "GPU-b"), g2, gpu(3, "GPU-d")],
        )]);
        let pods = vec![
            pod(
                "t",
                "whole",
                "n0",
                json!({"kai.scheduler/queue": "team-a"}),
                json!({names::ANNOTATION_SIM_ALLOCATED: alloc("nvidia.com/gpu", &["GPU-a"])}),
            ),
            pod(
                "t",
                "rep",
                "n0",
                json!({}),
                json!({names::ANNOTATION_SIM_ALLOCATED: alloc("nvidia.com/gpu", &["GPU-b::1"])}),
            ),
            pod(
                "t",
                "mig",
                "n0",
                json!({}),
                json!({names::ANNOTATION_SIM_ALLOCATED: alloc("nvidia.com/mig-3g.40gb", &["MIG-x"])}),
            ),
            pod(
                names::DEFAULT_RESERVATION_NAMESPACE,
                "res",
                "n0",
                json!({names::LABEL_GPU_GROUP: "g1"}),
                json!({names::ANNOTATION_SIM_ALLOCATED: alloc("nvidia.com/gpu", &["GPU-d"])}),
            ),
            pod(
                "t",
                "frac",
                "n0",
                json!({names::LABEL_GPU_GROUP: "g1", "kai.scheduler/queue": "team-b"}),
                json!({names::ANNOTATION_GPU_FRACTION: "0.5"}),
            ),
        ];
        let s = build(&nodes, &pods, &[], &readings);
        let g = &s.nodes[0].gpus;
        assert_eq!(g[0].holders[0].kind, "whole");
        assert_eq!(g[1].holders[0].kind, "replica");
        assert!(
            (g[1].holders[0].share - 0.5).abs() < 1e-9,
            "8 replicas over 4 GPUs"
        );
        assert_eq!(g[2].holders[0].kind, "mig:3g.40gb");
        assert_eq!(
            g[3].holders.len(),
            1,
            "the reservation pod itself is not a holder"
        );
        assert_eq!(g[3].holders[0].pod, "t/frac");
        assert!((s.gpus_allocated - (1.0 + 0.5 + 3.0 / 7.0 + 0.5)).abs() < 1e-9);
        assert_eq!(s.gpus_total, 4);
        let lines = grid_lines(&s, 10);
        assert!(lines[0].starts_with("n0"));
        assert!(lines[0].contains("██"));
    }

    #[test]
    fn finished_pods_hold_nothing() {
        let nodes = vec![node("n0", json!({"nvidia.com/gpu": "1"}))];
        let readings = BTreeMap::from([("n0".to_string(), vec![gpu(0, "GPU-a")])]);
        let mut p = pod(
            "t",
            "done",
            "n0",
            json!({}),
            json!({names::ANNOTATION_SIM_ALLOCATED: alloc("nvidia.com/gpu", &["GPU-a"])}),
        );
        p.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let s = build(&nodes, &[p], &[], &readings);
        assert!(s.nodes[0].gpus[0].holders.is_empty());
        assert_eq!(s.gpus_allocated, 0.0);
    }

    #[test]
    fn mps_replicas_and_the_published_fair_share() {
        let mut n = node("n0", json!({"nvidia.com/gpu": "4"}));
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(names::LABEL_GPU_SHARING_STRATEGY.into(), "mps".into());
        let readings = BTreeMap::from([("n0".to_string(), vec![gpu(0, "GPU-a")])]);
        let p = pod(
            "t",
            "client",
            "n0",
            json!({"kai.scheduler/queue": "team-a"}),
            json!({names::ANNOTATION_SIM_ALLOCATED: alloc("nvidia.com/gpu", &["GPU-a::2"])}),
        );
        let q: Queue = serde_json::from_value(json!({
            "metadata": {"name": "team-a"},
            "spec": {"parentQueue": "root"},
            "status": {"allocated": {"nvidia.com/gpu": "1"},
                       "fairShare": {"nvidia.com/gpu": "2.500", "cpu": "0m"}}
        }))
        .unwrap();
        let s = build(&[n], &[p], &[q], &readings);
        let h = &s.nodes[0].gpus[0].holders[0];
        assert_eq!(h.kind, "mps", "drawn as MPS, not time-sliced");
        assert!((h.share - 0.25).abs() < 1e-9);
        assert_eq!(s.queues[0].fair_share, Some(2.5));
        assert_eq!(s.queues[0].allocated, 1.0, "the scheduler's count");
    }

    #[test]
    fn quantities() {
        assert!((mig_share("1g.10gb") - 1.0 / 7.0).abs() < 1e-9);
    }
}
