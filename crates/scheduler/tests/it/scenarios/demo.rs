//! The demo's cluster (deploy/examples/demo): team-a's gang reclaims from team-b.

use super::*;

/// Apply a cycle's binds to the input: bound pods now run where they were bound.
fn run_binds(input: &mut ClusterInput, d: &Decisions) {
    for b in &d.binds {
        let Some(p) = input.pods.iter_mut().find(|p| p.name == b.name) else {
            panic!("bound pod {} not in input", b.name)
        };
        let indices = match &b.gpu {
            GpuBinding::Whole { indices } | GpuBinding::Fraction { indices, .. } => indices.clone(),
            _ => vec![],
        };
        *p = running(p.clone(), &b.node, &indices);
    }
}

/// The demo (deploy/examples/demo): team-b's batch-b (6 × 4 H100 GPUs, gang minimum
/// `batch_min`) and mig-b run, team-a's fractions and L4 pods run, then team-a's gang
/// train-a (2 × 4 H100 GPUs) arrives. Returns the third cycle's decisions.
fn demo_cycle(batch_min: u32) -> Decisions {
    // The demo cluster: 4 H100 × 8, 2 MIG A100s, 2 time-sliced L4s (4 replicas each), 2 CPU nodes.
    let h100 = names::LABEL_GPU_PRODUCT;
    let mut nodes: Vec<NodeInput> = (0..4)
        .map(|i| {
            let mut n = gpu_node(&format!("h100-{i}"), 8);
            // What GFD reports for an H100 80GB HBM3: 20000 MiB is 0.246 of it.
            n.labels
                .insert(names::LABEL_GPU_MEMORY.into(), "81559".into());
            n
        })
        .collect();
    for i in 0..2 {
        let mut n = gpu_node(&format!("a100-{i}"), 0);
        n.labels.insert(h100.into(), "NVIDIA-A100-SXM4-80GB".into());
        n.mig.insert("nvidia.com/mig-1g.10gb".into(), 7);
        nodes.push(n);
    }
    for i in 0..2 {
        let mut n = gpu_node(&format!("l4-{i}"), 4);
        n.labels.insert(h100.into(), "NVIDIA-L4-SHARED".into());
        n.labels
            .insert(names::LABEL_GPU_MEMORY.into(), "23034".into());
        nodes.push(n);
    }
    for i in 0..2 {
        let mut n = gpu_node(&format!("cpu-{i}"), 0);
        n.labels.clear();
        nodes.push(n);
    }
    let mut input = ClusterInput {
        nodes,
        queues: vec![
            queue("demo", None, -1.0, -1.0, 1.0),
            queue("team-a", Some("demo"), 16.0, -1.0, 1.0),
            queue("team-b", Some("demo"), 12.0, -1.0, 1.0),
        ],
        ..Default::default()
    };
    // Pods without CPU/memory requests, as in the demo manifests.
    let bare = |name: &str, group: &str, gpus: i64, product: &str| {
        let mut p = pod(name, group, gpus);
        p.cpu_milli = 0;
        p.memory_bytes = 0;
        if !product.is_empty() {
            p.node_selector.insert(h100.into(), product.into());
        }
        p
    };
    let h100_product = "NVIDIA-H100-80GB-HBM3";
    input
        .pod_groups
        .push(group("batch-b", "team-b", 50, batch_min, 0));
    for i in 0..6 {
        input
            .pods
            .push(bare(&format!("batch-b-{i}"), "batch-b", 4, h100_product));
    }
    input.pod_groups.push(group("mig-b", "team-b", 50, 1, 1));
    for i in 0..4 {
        let mut p = bare(&format!("mig-b-{i}"), "mig-b", 0, "");
        p.extended.insert("nvidia.com/mig-1g.10gb".into(), 1);
        input.pods.push(p);
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 10, "{:?}", d.unschedulable);
    run_binds(&mut input, &d);
    for i in 0..2 {
        input
            .pod_groups
            .push(group(&format!("half-{i}"), "team-a", 50, 1, 10));
        let mut p = bare(&format!("half-{i}"), &format!("half-{i}"), 0, h100_product);
        p.annotations
            .insert(names::ANNOTATION_GPU_FRACTION.into(), "0.5".into());
        input.pods.push(p);
        input
            .pod_groups
            .push(group(&format!("mem-{i}"), "team-a", 50, 1, 11));
        let mut p = bare(&format!("mem-{i}"), &format!("mem-{i}"), 0, h100_product);
        p.annotations
            .insert(names::ANNOTATION_GPU_MEMORY.into(), "20000".into());
        input.pods.push(p);
    }
    for i in 0..3 {
        input
            .pod_groups
            .push(group(&format!("l4-{i}"), "team-a", 50, 1, 12));
        input.pods.push(bare(
            &format!("l4-{i}"),
            &format!("l4-{i}"),
            1,
            "NVIDIA-L4-SHARED",
        ));
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 7, "{:?}", d.unschedulable);
    run_binds(&mut input, &d);
    // The gang: 2 × 4 H100 GPUs; only one H100 node has room for a pod.
    input.pod_groups.push(group("train-a", "team-a", 50, 2, 20));
    for i in 0..2 {
        input
            .pods
            .push(bare(&format!("train-a-{i}"), "train-a", 4, h100_product));
    }
    run(&input)
}

#[test]
fn demo_gang_reclaims_an_elastic_pod_from_team_over_its_deserved_share() {
    // batch/v1 Job: KAI's pod-grouper gives minMember 1, so five batch-b pods are elastic.
    let d = demo_cycle(1);
    let qa = d.queues.iter().find(|q| q.name == "team-a").unwrap();
    let qb = d.queues.iter().find(|q| q.name == "team-b").unwrap();
    let report = format!(
        "{:#?}\n{:#?}\n{:#?}\n{:#?}",
        qa, qb, d.evictions, d.unschedulable
    );
    assert_eq!(d.evictions.len(), 1, "{report}");
    assert!(
        matches!(&d.evictions[0].reason, EvictReason::Reclaim { by_queue, victim_queue, .. } if by_queue == "team-a" && victim_queue == "team-b"),
        "{report}"
    );
    assert!(d.evictions[0].name.starts_with("batch-b"), "{report}");
    let train: Vec<_> = d
        .binds
        .iter()
        .filter(|b| b.name.starts_with("train-a"))
        .collect();
    assert_eq!(train.len(), 2, "{report}");
    assert!(train.iter().all(|b| b.pipelined), "{report}");
}

#[test]
fn demo_gang_takes_a_whole_victim_gang_from_a_team_over_its_quota() {
    // batch-b as one gang of 6: team-b holds 28 GPUs against a quota of 12, so KAI's reclaim
    // strategies let team-a take the gang, decided on team-b's share before the victim goes.
    // A gang is evicted whole (never split), even though team-b ends below its quota.
    let d = demo_cycle(6);
    let report = format!("{:#?}\n{:#?}", d.evictions, d.unschedulable);
    assert_eq!(d.evictions.len(), 6, "{report}");
    assert!(
        d.evictions.iter().all(|e| e.name.starts_with("batch-b")
            && matches!(&e.reason, EvictReason::Reclaim { by_queue, victim_queue, .. }
                if by_queue == "team-a" && victim_queue == "team-b")),
        "{report}"
    );
    let train: Vec<_> = d
        .binds
        .iter()
        .filter(|b| b.name.starts_with("train-a"))
        .collect();
    assert_eq!(train.len(), 2, "{report}");
    assert!(train.iter().all(|b| b.pipelined), "{report}");
}
