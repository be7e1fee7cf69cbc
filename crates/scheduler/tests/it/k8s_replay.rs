//! A slice of the openb GPU-sharing trace replayed through the embedded control plane and
//! the scheduler running in-process with the fragmentation-aware policy (what `auto` resolves
//! to on clusters with shares), one pod at a time: every placement must be one the core
//! policy (`gpushare::SharePolicy::Gantry` on plain values) makes from the same state and the
//! same task mix. The scheduler breaks equal scores by its seeded node order, which depends
//! on the order its watch saw the nodes, so a tie may go to any node of the best-scored set;
//! the test checks the set, the device choice, and that most steps had a single best node.

use crate::cluster::{Cluster, Look, Result, eventually_secs, node_of};
use gantry_api::names;
use gantry_scheduler::gpushare::fgd::{ALL_TYPES, TaskMix};
use gantry_scheduler::gpushare::policy::{Score, SharePolicy, score_node};
use gantry_scheduler::gpushare::{Cluster as Core, Decision, ModelSet, NodeSpec, PodShape};
use gantry_scheduler::{Config, Policy};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// Rows of `openb_pod_list_default.csv`'s layout (name, cpu_milli, memory_mib, num_gpu,
/// gpu_milli), in arrival order: shares of several sizes, whole and two-GPU pods, CPU-only
/// pods; sized for four nodes of two GPUs so that the choice of node and device matters.
const SLICE: &[(&str, i64, i64, u8, u16)] = &[
    ("openb-pod-0001", 6000, 12288, 1, 460),
    ("openb-pod-0002", 4000, 8192, 1, 1000),
    ("openb-pod-0003", 2000, 4096, 0, 0),
    ("openb-pod-0004", 8000, 16384, 1, 250),
    ("openb-pod-0005", 6000, 12288, 1, 500),
    ("openb-pod-0006", 12000, 24576, 2, 1000),
    ("openb-pod-0007", 4000, 8192, 1, 300),
    ("openb-pod-0008", 2000, 4096, 1, 460),
    ("openb-pod-0009", 16000, 32768, 0, 0),
    ("openb-pod-0010", 6000, 12288, 1, 250),
    ("openb-pod-0011", 4000, 8192, 1, 1000),
    ("openb-pod-0012", 2000, 4096, 1, 500),
];

const MIB: i64 = 1 << 20;

fn pod_manifest(name: &str, cpu: i64, mem_mib: i64, num_gpu: u8, milli: u16) -> Pod {
    let mut annotations = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    if num_gpu == 1 && milli < 1000 {
        let fraction = f64::from(milli) / 1000.0;
        annotations.insert(
            names::ANNOTATION_GPU_FRACTION.into(),
            json!(fraction.to_string()),
        );
    } else if num_gpu > 0 {
        limits.insert(names::RESOURCE_GPU.into(), json!(num_gpu.to_string()));
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": "default-queue"},
                     "annotations": annotations},
        "spec": {
            "schedulerName": names::DEFAULT_SCHEDULER_NAME,
            "containers": [{"name": "main", "image": "ubuntu", "args": ["sleep", "infinity"],
                "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem_mib}Mi")},
                              "limits": limits}}]
        }
    }))
    .expect("static pod")
}

fn quantity_milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<i64>().map(|c| c * 1000).unwrap_or(0),
    }
}

fn quantity_bytes(q: &str) -> i64 {
    for (suffix, mult) in [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1i64 << 40),
    ] {
        if let Some(v) = q.strip_suffix(suffix) {
            return v.parse::<i64>().map(|v| v * mult).unwrap_or(0);
        }
    }
    q.parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trace_slice_places_as_the_core_policy() -> Result {
    let c = Cluster::start("4xH100-80GB:2").await?;
    let mut opts = c.options();
    opts.cycle_period = Duration::from_millis(100);
    opts.config = Config {
        policy: Policy::FragmentationAware,
        ..Config::default()
    };
    let (stop, handle) = c.scheduler(opts);

    // The core's view of the same nodes: allocatable CPU and memory, their GPUs.
    let nodes = Api::<Node>::all(c.client.clone())
        .list(&ListParams::default())
        .await?;
    let mut specs = Vec::new();
    for n in &nodes.items {
        let alloc = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        let get = |k: &str| alloc.get(k).map(|q| q.0.clone()).unwrap_or_default();
        specs.push(NodeSpec {
            name: n.metadata.name.clone().unwrap_or_default(),
            cpu: quantity_milli(&get("cpu")),
            mem: quantity_bytes(&get("memory")),
            gpus: get(names::RESOURCE_GPU).parse().unwrap_or(0),
            model: 0,
        });
    }
    assert!(
        specs.iter().all(|s| s.gpus == 2 && s.cpu >= 32_000),
        "{specs:?}"
    );
    let mut core = Core::new(specs.clone());
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let mut shapes: Vec<PodShape> = Vec::new();
    // (node, GPU group) of the product <-> device mask of the core, both ways.
    let mut groups: BTreeMap<(String, String), u16> = BTreeMap::new();
    let mut devices: BTreeMap<(String, u16), String> = BTreeMap::new();
    let mut unique = 0;
    for &(name, cpu, mem_mib, num_gpu, milli) in SLICE {
        let shape = PodShape {
            cpu,
            mem: mem_mib * MIB,
            num_gpu,
            milli: if num_gpu == 0 { 0 } else { milli },
            models: ModelSet::Any,
            spec: 0,
        };
        shapes.push(shape);
        pods.create(
            &PostParams::default(),
            &pod_manifest(name, cpu, mem_mib, num_gpu, milli),
        )
        .await?;
        let placed = eventually_secs(&format!("{name} bound"), 90, || async {
            match pods.get_opt(name).await {
                Ok(Some(p)) => match node_of(&p) {
                    Some(n) => {
                        let labels = p.metadata.labels.unwrap_or_default();
                        Look::Done((n, labels.get(names::LABEL_GPU_GROUP).cloned()))
                    }
                    None => Look::Seen("not bound".to_string()),
                },
                other => Look::Seen(format!("{other:?}")),
            }
        })
        .await?;
        // The core's best nodes for this pod, with the mix the scheduler's snapshot holds:
        // every pod so far, this one included.
        let mut mix = TaskMix::from_workload(&shapes, ALL_TYPES, false);
        mix.set_reach(specs.iter().map(|s| (s.model, s.gpus)));
        let mut best: Option<Score> = None;
        let mut set: Vec<(usize, u16)> = Vec::new();
        for (i, free) in core.free.iter().enumerate() {
            let Some((s, choice)) = score_node(SharePolicy::Gantry, free, &shape, &mix, &[]) else {
                continue;
            };
            let mask = choice.resolve(free, &shape, |_| 0);
            match &best {
                Some(b) if b.beats(&s) => {}
                Some(b) if !s.beats(b) => set.push((i, mask)),
                _ => {
                    best = Some(s);
                    set = vec![(i, mask)];
                }
            }
        }
        let names_of: Vec<&str> = set.iter().map(|&(i, _)| specs[i].name.as_str()).collect();
        let Some(&(node, mask)) = set.iter().find(|&&(i, _)| specs[i].name == placed.0) else {
            return Err(format!(
                "{name}: the scheduler chose {}, the core's best nodes are {names_of:?}",
                placed.0
            )
            .into());
        };
        if set.len() == 1 {
            unique += 1;
        }
        if let Some(g) = placed.1.filter(|_| shape.is_share()) {
            let device = *groups.entry((placed.0.clone(), g.clone())).or_insert(mask);
            let group = devices
                .entry((placed.0.clone(), mask))
                .or_insert_with(|| g.clone());
            assert!(
                device == mask && *group == g,
                "{name}: GPU group {g} on {} is not the device the core chose",
                placed.0
            );
        }
        core.apply(
            &shape,
            Decision {
                node: node as u32,
                mask,
            },
        );
    }
    // Most steps had one best node: the test compares decisions, not only ties.
    assert!(
        unique * 2 >= SLICE.len(),
        "{unique} of {} steps had one best node",
        SLICE.len()
    );
    let _ = stop.send(true);
    let _ = handle.await;
    Ok(())
}
