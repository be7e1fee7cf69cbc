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
//! Statuses: `Running` = still running (not evicted), `Releasing` = evicted, `Pipelined` =
//! bound after victims leave, `Binding` / `Allocated` = bound into free capacity, `Pending` =
//! not placed. A case with `differs` is a documented deliberate difference
//! (docs/compatibility.md): it must fail as described, so it is counted apart.

use gantry_api::names;
use gantry_scheduler::input::*;
use gantry_scheduler::{Action, Config, Decisions, EvictReason, Snapshot, schedule};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    source: String,
    test: String,
    actions: Vec<Action>,
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
    /// Why Gantry differs on purpose; the case must then not match KAI's expectation.
    #[serde(default)]
    differs: Option<String>,
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
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Running,
    Releasing,
    Pipelined,
    Binding,
    Allocated,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: State,
    #[serde(default)]
    node: Option<String>,
}

const NOW: i64 = 1_000_000;

fn input_of(c: &Case) -> Result<ClusterInput, String> {
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
        let mut labels = BTreeMap::new();
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
        usage: [0.0; 3],
    };
    if c.departments.is_empty() {
        let d = QueueSpec {
            name: "default".into(),
            parent: None,
            deserved_gpus: -1.0,
            max_allowed_gpus: -1.0,
            gpu_weight: None,
            priority: None,
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
            staleness_grace_secs: Some(-1),
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
                ..Default::default()
            };
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
                State::Running => {
                    p.phase = PodPhase::Running;
                    p.node = Some(
                        t.node
                            .clone()
                            .ok_or(format!("{}: running task without node", p.name))?,
                    );
                }
                State::Pending => {}
                other => return Err(format!("{}: input state {other:?} is not ported", p.name)),
            }
            input.pods.push(p);
        }
    }
    Ok(input)
}

/// What happened to one pod: its status and node.
fn outcome(input: &ClusterInput, d: &Decisions, pod: &PodInput) -> (State, Option<String>) {
    let _ = input;
    if let Some(e) = d
        .evictions
        .iter()
        .find(|e| e.name == pod.name && e.namespace == pod.namespace)
    {
        // A consolidated pod is re-placed: KAI reports it pipelined on its new node.
        return match &e.reason {
            EvictReason::Consolidation { relocate_to, .. } if !relocate_to.is_empty() => {
                (State::Pipelined, Some(relocate_to.clone()))
            }
            _ => (State::Releasing, Some(e.node.clone())),
        };
    }
    if let Some(b) = d.binds.iter().find(|b| b.name == pod.name) {
        let s = if b.pipelined {
            State::Pipelined
        } else {
            State::Binding
        };
        return (s, Some(b.node.clone()));
    }
    if pod.phase == PodPhase::Running {
        return (State::Running, pod.node.clone());
    }
    (State::Pending, None)
}

fn same(want: State, got: State) -> bool {
    want == got || matches!((want, got), (State::Allocated, State::Binding))
}

/// Ok(()) when every expectation holds, else what differs.
fn check(c: &Case, actions: &[Action]) -> Result<(), String> {
    let input = input_of(c)?;
    let cfg = Config {
        actions: actions.to_vec(),
        ..Config::default()
    };
    let d = schedule(&Snapshot::build(&input), &cfg);
    let mut problems = Vec::new();
    for (key, want) in &c.expected {
        let pods: Vec<&PodInput> = input
            .pods
            .iter()
            .filter(|p| p.pod_group == *key || p.name == *key)
            .collect();
        if pods.is_empty() {
            return Err(format!("expectation {key} names no job or task"));
        }
        for p in pods {
            let (got, node) = outcome(&input, &d, p);
            if !same(want.status, got) {
                problems.push(format!(
                    "{}: {got:?}, KAI expects {:?}",
                    p.name, want.status
                ));
            } else if let Some(n) = &want.node
                && got != State::Releasing
                && node.as_deref() != Some(n.as_str())
            {
                problems.push(format!("{}: on {node:?}, KAI expects {n}", p.name));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[test]
fn kai_action_tests_ported_as_data() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/conformance")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let (mut passed, mut differs, mut failed) = (0, 0, Vec::new());
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable case file");
        let f: File =
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for c in &f.cases {
            let id = format!("{} {} / {:?}", f.source, f.test, c.name);
            match (check(c, &f.actions), &c.differs) {
                (Ok(()), None) => {
                    passed += 1;
                    println!("pass    {id}");
                }
                (Err(e), Some(why)) => {
                    differs += 1;
                    println!("differs {id}: {e} (on purpose: {why})");
                }
                (Ok(()), Some(why)) => failed.push(format!(
                    "{id}: marked as a deliberate difference ({why}) but matches KAI now"
                )),
                (Err(e), None) => failed.push(format!("{id}: {e}")),
            }
        }
    }
    println!(
        "KAI conformance: {passed} passed, {differs} documented differences, {} failed, of {} cases in {} files",
        failed.len(),
        passed + differs + failed.len(),
        files.len()
    );
    assert!(passed >= 40, "too few ported cases pass: {passed}");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
