//! Running a ported case and comparing every expected status and node with Gantry's.

use super::*;

/// What one pod's status, node and GPU indices are.
type Outcome = (State, Option<String>, Vec<u32>);

fn binding_indices(g: &GpuBinding) -> Vec<u32> {
    match g {
        GpuBinding::Whole { indices } | GpuBinding::Fraction { indices, .. } => indices.clone(),
        GpuBinding::None | GpuBinding::Mig { .. } => Vec::new(),
    }
}

/// What one cycle's decisions did to a pod (KAI's per-action tests).
fn decided(d: &Decisions, pod: &PodInput) -> Outcome {
    if let Some(e) = d
        .evictions
        .iter()
        .find(|e| e.name == pod.name && e.namespace == pod.namespace)
    {
        // A consolidated pod is re-placed: KAI reports it pipelined on its new node.
        return match &e.reason {
            EvictReason::Consolidation { relocate_to, .. } if !relocate_to.is_empty() => {
                (State::Pipelined, Some(relocate_to.clone()), Vec::new())
            }
            _ => (
                State::Releasing,
                Some(e.node.clone()),
                pod.gpu_indices.clone(),
            ),
        };
    }
    if let Some(b) = d.binds.iter().find(|b| b.name == pod.name) {
        let s = if b.pipelined {
            State::Pipelined
        } else {
            State::Binding
        };
        return (s, Some(b.node.clone()), binding_indices(&b.gpu));
    }
    current(pod)
}

/// Where a pod stands in the cluster input.
fn current(pod: &PodInput) -> Outcome {
    match (pod.phase, pod.releasing) {
        (PodPhase::Running, true) => (State::Releasing, pod.node.clone(), pod.gpu_indices.clone()),
        (PodPhase::Running, false) => (State::Running, pod.node.clone(), pod.gpu_indices.clone()),
        (PodPhase::Pending, _) => (State::Pending, None, Vec::new()),
    }
}

/// KAI's integration runner between rounds: binding → running where bound, releasing and
/// pipelined → pending (a releasing task of a `delete_in_test` job stays releasing), stale
/// timestamps kept.
fn advance(c: &Case, input: &mut ClusterInput, d: &Decisions) {
    let keep_releasing = |pod: &PodInput| {
        c.jobs
            .iter()
            .any(|j| j.name == pod.pod_group && j.delete_in_test)
    };
    for pod in &mut input.pods {
        let evicted = d
            .evictions
            .iter()
            .any(|e| e.name == pod.name && e.namespace == pod.namespace);
        let bind = d.binds.iter().find(|b| b.name == pod.name);
        if (evicted || pod.releasing) && keep_releasing(pod) {
            pod.releasing = true;
        } else if evicted || pod.releasing || bind.is_some_and(|b| b.pipelined) {
            pod.phase = PodPhase::Pending;
            pod.releasing = false;
            pod.node = None;
            pod.gpu_indices.clear();
        } else if let Some(b) = bind {
            pod.phase = PodPhase::Running;
            pod.node = Some(b.node.clone());
            pod.gpu_indices = binding_indices(&b.gpu);
        }
    }
    for m in &d.stale_marks {
        if let Some(g) = input
            .pod_groups
            .iter_mut()
            .find(|g| g.name == m.pod_group && g.namespace == m.namespace)
        {
            g.stale_since = m.since;
        }
    }
}

fn same(want: State, got: State) -> bool {
    want == got || matches!((want, got), (State::Allocated, State::Binding))
}

/// Every expectation against `look` (a pod's outcome); failed tasks are not in the input.
fn compare(c: &Case, input: &ClusterInput, look: &dyn Fn(&PodInput) -> Outcome) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, want) in &c.expected {
        let tasks: Vec<(String, State)> = c
            .jobs
            .iter()
            .flat_map(|j| {
                j.tasks
                    .iter()
                    .enumerate()
                    .map(move |(k, t)| (j, format!("{}-{k}", j.name), t.state))
            })
            .filter(|(j, name, _)| j.name == *key || name == key)
            .map(|(_, name, state)| (name, state))
            .collect();
        if tasks.is_empty() {
            problems.push(format!("expectation {key} names no job or task"));
        }
        for (name, given) in tasks {
            let (got, node, gpus) = match input.pods.iter().find(|p| p.name == name) {
                Some(p) => look(p),
                None if given == State::Failed => (State::Failed, None, Vec::new()),
                None => (State::Pending, None, Vec::new()),
            };
            if !same(want.status, got) {
                problems.push(format!("{name}: {got:?}, KAI expects {:?}", want.status));
                continue;
            }
            if let Some(n) = &want.node
                && got != State::Releasing
                && got != State::Failed
                && node.as_deref() != Some(n.as_str())
            {
                problems.push(format!("{name}: on {node:?}, KAI expects {n}"));
            }
            if let Some(g) = want.gpu_group
                && gpus != [g]
            {
                problems.push(format!(
                    "{name}: on GPUs {gpus:?}, KAI expects GPU group {g}"
                ));
            }
        }
    }
    problems
}

/// Ok(()) when every expectation holds, else what differs.
fn check(c: &Case, f: &File) -> Result<(), String> {
    let mut input = input_of(c, f.staleness_grace_secs)?;
    let cfg = Config {
        actions: f.actions.clone(),
        k_value: c.k_value.or(f.k_value).unwrap_or(1.0),
        min_runtime: f.min_runtime.clone().unwrap_or_default(),
        ..Config::default()
    };
    let run = |input: &ClusterInput| schedule(&Snapshot::build(input), &cfg);
    let Some(until) = f.rounds_until_match else {
        let d = run(&input);
        let problems = compare(c, &input, &|p| decided(&d, p));
        if !problems.is_empty() {
            eprintln!(
                "DEBUG {}: binds {:?} evictions {:?}",
                c.name, d.binds, d.evictions
            );
        }
        return if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        };
    };
    for _ in 0..until {
        let d = run(&input);
        advance(c, &mut input, &d);
    }
    for round in 0..=f.rounds_after_match {
        if round > 0 {
            let d = run(&input);
            advance(c, &mut input, &d);
        }
        let problems = compare(c, &input, &current);
        if !problems.is_empty() {
            return Err(format!(
                "after {} rounds: {}",
                until + round,
                problems.join("; ")
            ));
        }
    }
    Ok(())
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
            match (check(c, &f), &c.differs) {
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
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(passed >= 114, "too few ported cases pass: {passed}");
}
