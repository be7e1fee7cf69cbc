//! Synthetic clusters and workloads for `gantry bench schedule`.

use gantry_api::names;
use gantry_scheduler::input::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

pub const GIB: i64 = 1 << 30;

/// Shares (percent) of whole-GPU, fractional and gang jobs in the pending workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixSpec {
    pub whole: u32,
    pub fraction: u32,
    pub gang: u32,
}

impl Default for MixSpec {
    fn default() -> Self {
        MixSpec {
            whole: 40,
            fraction: 40,
            gang: 20,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--mix {0:?}: expected kind:percent pairs like whole:40,fraction:40,gang:20 (kinds: whole, fraction, gang)"
)]
pub struct MixError(pub String);

impl std::str::FromStr for MixSpec {
    type Err = MixError;
    fn from_str(s: &str) -> Result<MixSpec, MixError> {
        let err = || MixError(s.to_string());
        let mut m = MixSpec {
            whole: 0,
            fraction: 0,
            gang: 0,
        };
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part.split_once(':').ok_or_else(err)?;
            let v: u32 = v.trim().parse().map_err(|_| err())?;
            match k.trim() {
                "whole" => m.whole = v,
                "fraction" => m.fraction = v,
                "gang" => m.gang = v,
                _ => return Err(err()),
            }
        }
        if m.whole + m.fraction + m.gang == 0 {
            return Err(err());
        }
        Ok(m)
    }
}

#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub nodes: usize,
    pub gpus_per_node: u32,
    pub pending: usize,
    pub running: usize,
    pub mix: MixSpec,
    pub queues: usize,
    pub seed: u64,
}

pub fn node(i: usize, gpus: u32) -> NodeInput {
    let mut labels = BTreeMap::new();
    labels.insert(
        names::LABEL_GPU_PRODUCT.to_string(),
        "NVIDIA-H100-80GB-HBM3".to_string(),
    );
    labels.insert(names::LABEL_GPU_MEMORY.to_string(), "80000".to_string());
    labels.insert("kubernetes.io/hostname".to_string(), format!("node-{i:05}"));
    NodeInput {
        name: format!("node-{i:05}"),
        labels,
        taints: vec![],
        schedulable: true,
        // 12 cores and 96 GiB per GPU: CPU-hungry pods can strand GPUs, as in real fleets.
        cpu_milli: 12_000 * i64::from(gpus.max(4)),
        memory_bytes: 96 * GIB * i64::from(gpus.max(4)),
        pods: 110,
        gpus,
        mig: BTreeMap::new(),
        gpu_devices: Vec::new(),
    }
}

fn queues(n: usize, total_gpus: f64) -> Vec<QueueInput> {
    let n = n.max(1);
    let parents = n.div_ceil(2);
    let mut out = Vec::new();
    let per = (total_gpus / n as f64).floor();
    for p in 0..parents {
        out.push(QueueInput {
            name: format!("dept-{p}"),
            gpu: QueueResourceInput {
                quota: -1.0,
                limit: -1.0,
                over_quota_weight: 1.0,
            },
            ..Default::default()
        });
    }
    for q in 0..n {
        out.push(QueueInput {
            name: format!("team-{q}"),
            parent: Some(format!("dept-{}", q / 2)),
            gpu: QueueResourceInput {
                quota: per,
                limit: -1.0,
                over_quota_weight: 1.0,
            },
            creation: q as i64,
            ..Default::default()
        });
    }
    out
}

/// One pod shape drawn from the mix: (GPU request, cpu, memory).
pub enum Shape {
    Whole(i64),
    Fraction(&'static str),
    Memory(&'static str),
}

pub fn draw_whole(rng: &mut ChaCha8Rng) -> i64 {
    match rng.random_range(0..100) {
        0..50 => 1,
        50..75 => 2,
        75..90 => 4,
        _ => 8,
    }
}

pub fn draw_fraction(rng: &mut ChaCha8Rng) -> Shape {
    match rng.random_range(0..100) {
        0..10 => Shape::Fraction("0.1"),
        10..25 => Shape::Fraction("0.2"),
        25..45 => Shape::Fraction("0.25"),
        45..55 => Shape::Fraction("0.3"),
        55..80 => Shape::Fraction("0.5"),
        80..90 => Shape::Fraction("0.75"),
        _ => Shape::Memory("20000"),
    }
}

/// A pod of `shape`; `cores` is its CPU request in cores (per GPU for whole-GPU pods).
pub fn make_pod(name: String, group: String, shape: &Shape, creation: i64, cores: i64) -> PodInput {
    let mut p = PodInput {
        namespace: "bench".into(),
        name,
        pod_group: group,
        creation,
        ..Default::default()
    };
    match shape {
        Shape::Whole(n) => {
            p.extended.insert(names::RESOURCE_GPU.to_string(), *n);
            p.cpu_milli = 1000 * cores * n;
            p.memory_bytes = 8 * GIB * cores * n;
        }
        Shape::Fraction(f) => {
            p.annotations
                .insert(names::ANNOTATION_GPU_FRACTION.to_string(), f.to_string());
            p.cpu_milli = 1000 * cores;
            p.memory_bytes = 8 * GIB * cores;
        }
        Shape::Memory(m) => {
            p.annotations
                .insert(names::ANNOTATION_GPU_MEMORY.to_string(), m.to_string());
            p.cpu_milli = 1000 * cores;
            p.memory_bytes = 8 * GIB * cores;
        }
    }
    p
}

/// CPU cores of a pod: whole-GPU pods per GPU, fractional pods in total (notebooks and
/// inference servers are often CPU-heavy for their GPU share).
pub fn draw_cores(rng: &mut ChaCha8Rng, fractional: bool) -> i64 {
    if fractional {
        [2, 4, 8, 12, 16][rng.random_range(0..5)]
    } else {
        [4, 8, 12][rng.random_range(0..3)]
    }
}

fn group(
    name: String,
    queue: String,
    min: u32,
    creation: i64,
    rng: &mut ChaCha8Rng,
) -> PodGroupInput {
    PodGroupInput {
        namespace: "bench".into(),
        name,
        queue,
        priority: Some(if rng.random_range(0..10) == 0 { 75 } else { 50 }),
        min_member: Some(min),
        creation,
        ..Default::default()
    }
}

/// Append `count` pending pods drawn from the mix, as jobs spread over the leaf queues.
pub fn add_pending(
    input: &mut ClusterInput,
    count: usize,
    mix: MixSpec,
    leaf_queues: usize,
    rng: &mut ChaCha8Rng,
    prefix: &str,
) {
    let total = mix.whole + mix.fraction + mix.gang;
    let mut made = 0;
    let mut j = 0usize;
    while made < count {
        let queue = format!("team-{}", rng.random_range(0..leaf_queues.max(1)));
        let roll = rng.random_range(0..total);
        let creation = (j / 10) as i64;
        let gname = format!("{prefix}job-{j:06}");
        if roll < mix.whole {
            input
                .pod_groups
                .push(group(gname.clone(), queue, 1, creation, rng));
            let cores = draw_cores(rng, false);
            input.pods.push(make_pod(
                format!("{gname}-0"),
                gname,
                &Shape::Whole(draw_whole(rng)),
                creation,
                cores,
            ));
            made += 1;
        } else if roll < mix.whole + mix.fraction {
            input
                .pod_groups
                .push(group(gname.clone(), queue, 1, creation, rng));
            let shape = draw_fraction(rng);
            let cores = draw_cores(rng, true);
            input.pods.push(make_pod(
                format!("{gname}-0"),
                gname,
                &shape,
                creation,
                cores,
            ));
            made += 1;
        } else {
            let size = [2usize, 4, 8][rng.random_range(0..3)]
                .min(count - made)
                .max(1);
            let gpus = [1i64, 4, 8][rng.random_range(0..3)];
            input
                .pod_groups
                .push(group(gname.clone(), queue, size as u32, creation, rng));
            let cores = draw_cores(rng, false);
            for k in 0..size {
                input.pods.push(make_pod(
                    format!("{gname}-{k}"),
                    gname.clone(),
                    &Shape::Whole(gpus),
                    creation,
                    cores,
                ));
            }
            made += size;
        }
        j += 1;
    }
}

/// A cluster of identical GPU nodes with `running` pods already bound (one-GPU, fractional
/// and CPU pods, filled node by node) and `pending` pods drawn from the mix.
pub fn synth(spec: &SynthSpec) -> ClusterInput {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let mut input = ClusterInput {
        now: 1_000_000,
        ..Default::default()
    };
    input.nodes = (0..spec.nodes)
        .map(|i| node(i, spec.gpus_per_node))
        .collect();
    let total_gpus = (spec.nodes as f64) * f64::from(spec.gpus_per_node);
    input.queues = queues(spec.queues, total_gpus);
    // Running pods: per node, a few GPU pods then CPU pods, within capacity.
    let per_node = spec.running.div_ceil(spec.nodes.max(1));
    let mut made = 0usize;
    'nodes: for (n, node) in input.nodes.clone().iter().enumerate() {
        let mut gpu = 0u32;
        for k in 0..per_node {
            if made >= spec.running {
                break 'nodes;
            }
            let name = format!("run-{n:05}-{k:03}");
            let queue = format!("team-{}", rng.random_range(0..spec.queues.max(1)));
            input
                .pod_groups
                .push(group(name.clone(), queue, 1, 0, &mut rng));
            let mut p = if k % 4 == 0 && gpu + 1 < node.gpus {
                gpu += 1;
                let mut p = make_pod(name.clone(), name, &Shape::Whole(1), 0, 4);
                p.gpu_indices = vec![gpu - 1];
                p
            } else if k % 4 == 1 && gpu + 1 < node.gpus {
                gpu += 1;
                let mut p = make_pod(name.clone(), name, &Shape::Fraction("0.5"), 0, 2);
                p.gpu_indices = vec![gpu - 1];
                p
            } else {
                let mut p = make_pod(name.clone(), name, &Shape::Whole(0), 0, 1);
                p.extended.clear();
                p.cpu_milli = 500;
                p.memory_bytes = GIB;
                p
            };
            p.phase = PodPhase::Running;
            p.node = Some(node.name.clone());
            input.pods.push(p);
            made += 1;
        }
    }
    add_pending(
        &mut input,
        spec.pending,
        spec.mix,
        spec.queues,
        &mut rng,
        "",
    );
    input
}
