//! KAI conformance: cases ported from KAI Scheduler's own table-driven action tests
//! (`pkg/scheduler/actions/**/*_test.go`), one YAML file per KAI test file under
//! `tests/conformance/`, each case naming its KAI source file and test. A case runs the
//! same actions KAI's runner executes, once, through the pure core, and compares every
//! expected job's (or task's) status and node.
//!
//! KAI's test-framework defaults, reproduced here so the port is faithful:
//! - nodes: 20000m CPU and 20G memory allocatable, 500 pods, GPU memory label 100 MiB;
//! - queues: GPU quota `deserved_gpus`, GPU limit `max_allowed_gpus` (0 or absent: -1),
//!   GPU over-quota weight `gpu_weight` (absent: 0, Go's zero value), CPU and memory quota and
//!   limit -1 with weight 1, priority 100, created in list order;
//! - without departments every queue gets the implicit parent `default` (all quotas -1);
//!   a department's GPU over-quota weight is its GPU quota;
//! - jobs: stably sorted by priority (highest first), then created one minute apart in that
//!   order (earlier = older) unless `age_minutes` is given; gang minimum = task count unless
//!   `min_available` is given (KAI's `DefaultSubGroup(n)`: an elastic job of minimum n);
//!   tasks named `<job>-<index>`; no CPU or memory unless given; a non-integer `gpus` is a
//!   `gpu-fraction`.
//!
//! - session: the global staleness grace period is Go's zero value (0 s: a stale gang goes at
//!   once) where the file runs `stalegangeviction`; KAI's unit test sets 60 s itself;
//! - a task's `gpu_group` is the GPU index its share sits on; `mig` maps profile to count;
//!   `gpu_memory` is MiB per task against nodes of 100 MiB GPUs.
//!
//! Statuses: `Running` = still running (not evicted), `Releasing` = evicted, `Pipelined` =
//! bound after victims leave, `Binding` / `Allocated` = bound into free capacity, `Pending` =
//! not placed, `Failed` = a finished task (not in the cluster input: it holds nothing).
//! A case with `differs` is a documented deliberate difference (docs/compatibility.md): it
//! must fail as described, so it is counted apart.
//!
//! Files ported from KAI's `integration_tests` use its runner (`integration_tests_utils.go`):
//! `rounds_until_match` full cycles (default 2), each followed by KAI's bookkeeping (binding →
//! running, releasing and pipelined → pending), then the expectations are checked on the
//! resulting cluster, and again after each of `rounds_after_match` more cycles (default 5), so
//! a decision that undoes itself (an allocate/evict loop) fails.

use gantry_api::names;
use gantry_scheduler::input::*;
use gantry_scheduler::{Action, Config, Decisions, EvictReason, GpuBinding, Snapshot, schedule};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    source: String,
    test: String,
    actions: Vec<Action>,
    /// KAI's integration runner: cycles before the first check (absent: one cycle, checked on
    /// its decisions, as KAI's per-action tests do).
    #[serde(default)]
    rounds_until_match: Option<u32>,
    /// Further cycles, each checked (integration runner only).
    #[serde(default)]
    rounds_after_match: u32,
    /// The session's global staleness grace period (absent: never evict stale gangs).
    #[serde(default)]
    staleness_grace_secs: Option<i64>,
    /// Proportion's `kValue` (time-based fair share; absent: 1.0, KAI's default).
    #[serde(default)]
    k_value: Option<f64>,
    /// The `minruntime` plugin's arguments (`preemptMinRuntime`, `reclaimMinRuntime`,
    /// `reclaimResolveMethod`), as the scheduling shard sets them.
    #[serde(default)]
    min_runtime: Option<gantry_scheduler::min_runtime::MinRuntimeConfig>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    nodes: BTreeMap<String, NodeSpec>,
    #[serde(default)]
    departments: Vec<QueueSpec>,
    queues: Vec<QueueSpec>,
    jobs: Vec<JobSpec>,
    expected: BTreeMap<String, Expect>,
    /// KAI `Topology` objects: name → node label keys of its levels, outermost first.
    #[serde(default)]
    topologies: BTreeMap<String, Vec<String>>,
    /// Why Gantry differs on purpose; the case must then not match KAI's expectation.
    #[serde(default)]
    differs: Option<String>,
    /// This case's `kValue` (overrides the file's).
    #[serde(default)]
    k_value: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeSpec {
    gpus: u32,
    #[serde(default)]
    cpu_milli: Option<i64>,
    #[serde(default)]
    memory: Option<i64>,
    #[serde(default)]
    gpu_memory: Option<u64>,
    /// MIG devices by profile (`1g.10gb: 2`), mixed strategy.
    #[serde(default)]
    mig: BTreeMap<String, u32>,
    /// Node labels (topology levels, affinity keys).
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueSpec {
    name: String,
    #[serde(default)]
    parent: Option<String>,
    deserved_gpus: f64,
    #[serde(default)]
    max_allowed_gpus: f64,
    #[serde(default)]
    gpu_weight: Option<f64>,
    #[serde(default)]
    priority: Option<i32>,
    /// `spec.preemptMinRuntime` / `spec.reclaimMinRuntime` (Go durations).
    #[serde(default)]
    preempt_min_runtime: Option<String>,
    #[serde(default)]
    reclaim_min_runtime: Option<String>,
    /// Historical GPU usage normalised to cluster capacity (KAI's usage database).
    #[serde(default)]
    usage: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobSpec {
    name: String,
    queue: String,
    priority: i32,
    #[serde(default)]
    gpus: f64,
    #[serde(default)]
    cpu_milli: i64,
    #[serde(default)]
    memory: i64,
    #[serde(default)]
    min_available: Option<u32>,
    #[serde(default)]
    age_minutes: Option<i64>,
    /// KAI's `kai.scheduler/preemption-delay`; Gantry has no such input (docs/compatibility.md,
    /// "Not done"), so a case that depends on it must be marked `differs`.
    #[serde(default)]
    preemption_delay_minutes: Option<i64>,
    /// `gpu-memory` per task, MiB.
    #[serde(default)]
    gpu_memory: Option<u64>,
    /// MIG devices per task by profile (a task's own `mig` replaces it).
    #[serde(default)]
    mig: BTreeMap<String, u32>,
    /// KAI's `StaleDuration`: the gang has been stale this long.
    #[serde(default)]
    stale_seconds: Option<i64>,
    /// KAI's `DeleteJobInTest`: an evicted task stays Releasing between rounds.
    #[serde(default)]
    delete_in_test: bool,
    /// The job's `LastStartTimestamp` this long before the cycle (min-runtime).
    #[serde(default)]
    started_seconds_ago: Option<i64>,
    /// KAI's topology constraint (the root sub-group set's `TopologyConstraintInfo`).
    #[serde(default)]
    topology: Option<TopologyConstraintInput>,
    tasks: Vec<TaskSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSpec {
    state: State,
    #[serde(default)]
    node: Option<String>,
    /// `kai.scheduler/task-priority`.
    #[serde(default)]
    priority: i32,
    /// KAI's GPU group: the index of the GPU a running fraction shares.
    #[serde(default)]
    gpu_group: Option<u32>,
    #[serde(default)]
    mig: Option<BTreeMap<String, u32>>,
    /// KAI's `NodeAffinityNames`: required node labels.
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Running,
    Releasing,
    Pipelined,
    Binding,
    Allocated,
    Failed,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: State,
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    gpu_group: Option<u32>,
}

const NOW: i64 = 1_000_000;

fn input_of(c: &Case, grace: Option<i64>) -> Result<ClusterInput, String> {
    if c.differs.is_none()
        && let Some(j) = c.jobs.iter().find(|j| j.preemption_delay_minutes.is_some())
    {
        return Err(format!(
            "job {}: preemption delay has no Gantry input; mark the case `differs`",
            j.name
        ));
    }
    let mut input = ClusterInput {
        now: NOW,
        ..Default::default()
    };
    for (name, n) in &c.nodes {
        let mut labels = n.labels.clone();
        labels.insert(
            names::LABEL_GPU_MEMORY.to_string(),
            n.gpu_memory.unwrap_or(100).to_string(),
        );
        input.nodes.push(NodeInput {
            name: name.clone(),
            labels,
            schedulable: true,
            cpu_milli: n.cpu_milli.unwrap_or(20_000),
            memory_bytes: n.memory.unwrap_or(20_000_000_000),
            pods: 500,
            gpus: n.gpus,
            mig: n
                .mig
                .iter()
                .map(|(p, k)| (names::mig_resource_name(p), *k))
                .collect(),
            ..Default::default()
        });
    }
    let open = QueueResourceInput {
        quota: -1.0,
        limit: -1.0,
        over_quota_weight: 1.0,
    };
    let queue = |q: &QueueSpec, parent: Option<String>, weight: f64, i: usize| QueueInput {
        name: q.name.clone(),
        parent,
        priority: q.priority,
        gpu: QueueResourceInput {
            quota: q.deserved_gpus,
            limit: if q.max_allowed_gpus == 0.0 {
                -1.0
            } else {
                q.max_allowed_gpus
            },
            over_quota_weight: weight,
        },
        cpu: open,
        memory: open,
        creation: i as i64,
        usage: [q.usage.unwrap_or(0.0), 0.0, 0.0],
        preempt_min_runtime: q.preempt_min_runtime.as_deref().map(duration),
        reclaim_min_runtime: q.reclaim_min_runtime.as_deref().map(duration),
    };
    if c.departments.is_empty() {
        let d = QueueSpec {
            name: "default".into(),
            parent: None,
            deserved_gpus: -1.0,
            max_allowed_gpus: -1.0,
            gpu_weight: None,
            priority: None,
            preempt_min_runtime: None,
            reclaim_min_runtime: None,
            usage: None,
        };
        input.queues.push(queue(&d, None, -1.0, 0));
    }
    for (i, d) in c.departments.iter().enumerate() {
        input.queues.push(queue(d, None, d.deserved_gpus, i));
    }
    for (i, q) in c.queues.iter().enumerate() {
        let parent = if c.departments.is_empty() {
            Some("default".to_string())
        } else {
            q.parent.clone()
        };
        input
            .queues
            .push(queue(q, parent, q.gpu_weight.unwrap_or(0.0), i));
    }
    let mut jobs: Vec<&JobSpec> = c.jobs.iter().collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.priority));
    let n = jobs.len() as i64;
    for (i, j) in jobs.iter().enumerate() {
        let creation = NOW - 60 * j.age_minutes.unwrap_or(n - i as i64);
        input.pod_groups.push(PodGroupInput {
            namespace: "test".into(),
            name: j.name.clone(),
            queue: j.queue.clone(),
            priority: Some(j.priority),
            preemptible: None,
            min_member: Some(j.min_available.unwrap_or(j.tasks.len() as u32)),
            creation,
            staleness_grace_secs: Some(grace.unwrap_or(-1)),
            stale_since: j.stale_seconds.map(|s| NOW - s),
            last_start: j.started_seconds_ago.map(|s| NOW - s),
            topology: j.topology.clone(),
            ..Default::default()
        });
        for (k, t) in j.tasks.iter().enumerate() {
            let mut p = PodInput {
                namespace: "test".into(),
                name: format!("{}-{k}", j.name),
                pod_group: j.name.clone(),
                cpu_milli: j.cpu_milli,
                memory_bytes: j.memory,
                creation,
                task_priority: t.priority,
                node_selector: t.node_selector.clone(),
                ..Default::default()
            };
            if let Some(mib) = j.gpu_memory {
                p.annotations
                    .insert(names::ANNOTATION_GPU_MEMORY.to_string(), mib.to_string());
            }
            for (profile, count) in t.mig.as_ref().unwrap_or(&j.mig) {
                p.extended
                    .insert(names::mig_resource_name(profile), i64::from(*count));
            }
            p.gpu_indices = t.gpu_group.into_iter().collect();
            if j.gpus.fract() == 0.0 {
                if j.gpus > 0.0 {
                    p.extended
                        .insert(names::RESOURCE_GPU.to_string(), j.gpus as i64);
                }
            } else {
                p.annotations.insert(
                    names::ANNOTATION_GPU_FRACTION.to_string(),
                    j.gpus.to_string(),
                );
            }
            match t.state {
                State::Running | State::Releasing => {
                    p.phase = PodPhase::Running;
                    p.releasing = t.state == State::Releasing;
                    p.node = Some(
                        t.node
                            .clone()
                            .ok_or(format!("{}: running task without node", p.name))?,
                    );
                }
                State::Pending => {}
                // Finished: holds nothing and is not the scheduler's input.
                State::Failed => continue,
                other => return Err(format!("{}: input state {other:?} is not ported", p.name)),
            }
            input.pods.push(p);
        }
    }
    input.topologies = c
        .topologies
        .iter()
        .map(|(name, levels)| TopologyInput {
            name: name.clone(),
            levels: levels.clone(),
            problem: None,
        })
        .collect();
    place_whole_gpus(&mut input);
    Ok(input)
}

fn duration(s: &str) -> i64 {
    gantry_k8s_rules::parse_go_duration(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// KAI's fake nodes track whole GPUs by count and shares by GPU group; Gantry's input names
/// devices. A running share without a GPU group goes to the lowest device of its node with
/// room for it (as KAI's fake packs a group); then a running whole-GPU task gets the lowest
/// devices of its node that no share uses.
fn place_whole_gpus(input: &mut ClusterInput) {
    let mut shared: BTreeMap<(String, u32), f64> = BTreeMap::new();
    let fraction = |p: &PodInput| {
        p.annotations
            .get(names::ANNOTATION_GPU_FRACTION)
            .and_then(|f| f.parse::<f64>().ok())
    };
    for p in &input.pods {
        if let (Some(n), Some(f), [g]) = (&p.node, fraction(p), p.gpu_indices.as_slice()) {
            *shared.entry((n.clone(), *g)).or_default() += f;
        }
    }
    for p in &mut input.pods {
        let (Some(n), Some(f), true) = (p.node.clone(), fraction(p), p.gpu_indices.is_empty())
        else {
            continue;
        };
        let g = (0..)
            .find(|&g| shared.get(&(n.clone(), g)).copied().unwrap_or(0.0) + f <= 1.0 + 1e-9)
            .unwrap_or(0);
        *shared.entry((n, g)).or_default() += f;
        p.gpu_indices = vec![g];
    }
    let mut used: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for p in &input.pods {
        if let Some(n) = &p.node {
            used.entry(n.clone()).or_default().extend(&p.gpu_indices);
        }
    }
    for p in &mut input.pods {
        let want = p.extended.get(names::RESOURCE_GPU).copied().unwrap_or(0);
        let (Some(node), true) = (p.node.clone(), p.gpu_indices.is_empty() && want > 0) else {
            continue;
        };
        let taken = used.entry(node).or_default();
        let free: Vec<u32> = (0..)
            .filter(|i| !taken.contains(i))
            .take(want as usize)
            .collect();
        taken.extend(&free);
        p.gpu_indices = free;
    }
}

mod ported;
