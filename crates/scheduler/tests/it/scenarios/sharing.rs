//! GPU sharing: fractions, GPU memory, multi-GPU fractions, invalid requests, whole and shared
//! apart, MIG.

use super::*;

#[test]
fn fractions_pack_onto_one_gpu() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 2)],
        queues: vec![queue("q", None, 2.0, -1.0, 1.0)],
        ..Default::default()
    };
    for (i, f) in ["0.5", "0.25", "0.25"].iter().enumerate() {
        let name = format!("f{i}");
        input.pod_groups.push(group(&name, "q", 50, 1, i as i64));
        input.pods.push(fraction_pod(
            &name,
            &name,
            names::ANNOTATION_GPU_FRACTION,
            f,
        ));
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 3);
    let gpus: BTreeSet<Vec<u32>> = d
        .binds
        .iter()
        .map(|b| match &b.gpu {
            GpuBinding::Fraction { indices, .. } => indices.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(gpus.len(), 1, "all three share one GPU: {:?}", d.binds);
    let q = d.queues.iter().find(|q| q.name == "q").unwrap();
    assert_eq!(q.allocated[0], 1.0);
}

#[test]
fn gpu_memory_takes_its_share_of_the_device() {
    // 20000 MiB of an 80000 MiB GPU is a quarter: three 0.25 fractions still fit beside it.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 1.0, -1.0, 1.0)],
        ..Default::default()
    };
    input.pod_groups.push(group("m", "q", 50, 1, 0));
    input.pods.push(fraction_pod(
        "m",
        "m",
        names::ANNOTATION_GPU_MEMORY,
        "20000",
    ));
    for i in 0..4 {
        let name = format!("f{i}");
        input.pod_groups.push(group(&name, "q", 50, 1, 1 + i));
        input.pods.push(fraction_pod(
            &name,
            &name,
            names::ANNOTATION_GPU_FRACTION,
            "0.25",
        ));
    }
    let d = run(&input);
    let m = d.binds.iter().find(|b| b.name == "m").unwrap();
    assert_eq!(
        m.gpu,
        GpuBinding::Fraction {
            indices: vec![0],
            milli: 250
        }
    );
    assert_eq!(d.binds.len(), 4, "the fourth 0.25 does not fit");
    assert_eq!(d.unschedulable.len(), 1);
    assert_eq!(
        d.unschedulable[0].message,
        "0/1 nodes: 1 insufficient free GPU share"
    );
}

#[test]
fn multi_gpu_fraction() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![queue("q", None, 4.0, -1.0, 1.0)],
        ..Default::default()
    };
    input.pod_groups.push(group("f", "q", 50, 1, 0));
    let mut p = fraction_pod("f", "f", names::ANNOTATION_GPU_FRACTION, "0.5");
    p.annotations.insert(
        names::ANNOTATION_GPU_FRACTION_NUM_DEVICES.into(),
        "3".into(),
    );
    input.pods.push(p);
    let d = run(&input);
    let GpuBinding::Fraction { indices, milli } = &d.binds[0].gpu else {
        panic!()
    };
    assert_eq!((indices.len(), *milli), (3, 500));
    assert_eq!(d.queues[0].allocated[0], 1.5);
}

#[test]
fn invalid_fractions_are_rejected_with_a_reason() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 1.0, -1.0, 1.0)],
        ..Default::default()
    };
    for v in ["0", "1.5", "abc"] {
        let name = format!("bad-{}", v.replace('.', "-"));
        input.pod_groups.push(group(&name, "q", 50, 1, 0));
        input.pods.push(fraction_pod(
            &name,
            &name,
            names::ANNOTATION_GPU_FRACTION,
            v,
        ));
    }
    let d = run(&input);
    assert!(d.binds.is_empty());
    assert_eq!(d.unschedulable.len(), 3);
    for u in &d.unschedulable {
        assert!(u.message.contains("gpu-fraction"), "{}", u.message);
        assert!(u.message.contains(&u.name), "names the pod: {}", u.message);
    }
}

#[test]
fn whole_and_shared_never_on_the_same_gpu() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 2.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "whole", "q", 50, 1, 0);
    input.pod_groups.push(group("frac", "q", 50, 1, 1));
    input.pods.push(fraction_pod(
        "frac",
        "frac",
        names::ANNOTATION_GPU_FRACTION,
        "0.1",
    ));
    let d = run(&input);
    assert_eq!(d.binds.len(), 1);
    assert_eq!(d.binds[0].name, "whole");
}

#[test]
fn mig_and_whole_gpus_side_by_side_and_no_fractions_on_mig() {
    let mut node = gpu_node("mixed", 2);
    node.mig.insert("nvidia.com/mig-1g.10gb".into(), 7);
    let mut input = ClusterInput {
        nodes: vec![node],
        queues: vec![queue("q", None, 20.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "whole", "q", 50, 2, 0);
    input.pod_groups.push(group("mig", "q", 50, 1, 1));
    let mut p = pod("mig", "mig", 0);
    p.extended.insert("nvidia.com/mig-1g.10gb".into(), 3);
    input.pods.push(p);
    input.pod_groups.push(group("frac", "q", 50, 1, 2));
    input.pods.push(fraction_pod(
        "frac",
        "frac",
        names::ANNOTATION_GPU_FRACTION,
        "0.5",
    ));
    let d = run(&input);
    let bound: BTreeSet<&str> = d.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bound, BTreeSet::from(["mig", "whole"]));
    let mig = d.binds.iter().find(|b| b.name == "mig").unwrap();
    assert_eq!(
        mig.gpu,
        GpuBinding::Mig {
            resource: "nvidia.com/mig-1g.10gb".into(),
            count: 3
        }
    );
    assert_eq!(
        d.unschedulable[0].message,
        "0/1 nodes: 1 MIG node does not host GPU fractions"
    );
}
