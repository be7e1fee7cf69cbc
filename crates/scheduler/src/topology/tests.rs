use super::*;
use crate::input::{
    ClusterInput, NodeInput, PodGroupInput, PodInput, PodPhase, TopologyConstraintInput,
    TopologyInput,
};
use crate::snapshot::Snapshot;
use gantry_api::names;

const ZONE: &str = "topology.kubernetes.io/zone";
const RACK: &str = "example.com/rack";

/// Nodes `(name, zone, rack, gpus)`; one job `j` of `pods` one-GPU pods with `c`.
fn cluster(
    nodes: &[(&str, &str, &str, u32)],
    pods: usize,
    c: TopologyConstraintInput,
) -> ClusterInput {
    let mut input = ClusterInput {
        topologies: vec![TopologyInput {
            name: "t".into(),
            levels: vec![ZONE.into(), RACK.into()],
            problem: None,
        }],
        ..Default::default()
    };
    for &(name, zone, rack, gpus) in nodes {
        let mut n = NodeInput {
            name: name.into(),
            schedulable: true,
            cpu_milli: 64_000,
            memory_bytes: 1 << 40,
            pods: 110,
            gpus,
            ..Default::default()
        };
        if !zone.is_empty() {
            n.labels.insert(ZONE.into(), zone.into());
        }
        if !rack.is_empty() {
            n.labels.insert(RACK.into(), rack.into());
        }
        input.nodes.push(n);
    }
    input.pod_groups.push(PodGroupInput {
        namespace: "ns".into(),
        name: "j".into(),
        queue: "q".into(),
        min_member: Some(pods as u32),
        topology: Some(c),
        ..Default::default()
    });
    for i in 0..pods {
        let mut p = PodInput {
            namespace: "ns".into(),
            name: format!("j-{i}"),
            pod_group: "j".into(),
            phase: PodPhase::Pending,
            ..Default::default()
        };
        p.extended.insert(names::RESOURCE_GPU.into(), 1);
        input.pods.push(p);
    }
    input
}

fn required(level: &str) -> TopologyConstraintInput {
    TopologyConstraintInput {
        topology: "t".into(),
        required: Some(level.into()),
        preferred: None,
    }
}

fn plan_of(input: &ClusterInput) -> Plan {
    let s = Snapshot::build(input);
    let st = State::new(&s, &mut Vec::new());
    let tasks: Vec<PodId> = s.pods_of(0).to_vec();
    plan(&s, &st, 0, &tasks)
}

fn names_of(input: &ClusterInput, a: &Attempt) -> Vec<String> {
    a.nodes
        .iter()
        .map(|&n| input.nodes[n as usize].name.clone())
        .collect()
}

const RACKS: [(&str, &str, &str, u32); 5] = [
    ("a1", "za", "r1", 2),
    ("a2", "za", "r1", 2),
    ("a3", "za", "r2", 1),
    ("b1", "zb", "r1", 4),
    ("b2", "zb", "r2", 2),
];

#[test]
fn required_rack_tries_racks_that_hold_the_gang_fullest_first() {
    let input = cluster(&RACKS, 4, required(RACK));
    let Plan::Domains(a) = plan_of(&input) else {
        panic!("expected domains")
    };
    // za/r1 has 4, zb/r1 has 4: equal room, by name; zb/r2 (2) and za/r2 (1) cannot.
    let what: Vec<&str> = a.iter().map(|a| a.what.as_str()).collect();
    assert_eq!(what, ["rack za/r1", "rack zb/r1"]);
    assert_eq!(names_of(&input, &a[0]), ["a1", "a2"]);
}

#[test]
fn no_rack_big_enough_names_the_required_level() {
    let input = cluster(&RACKS, 5, required(RACK));
    let Plan::Unsatisfiable(why) = plan_of(&input) else {
        panic!("expected unsatisfiable")
    };
    assert!(why.contains("required level example.com/rack"), "{why}");
    assert!(why.contains("all 5 pods"), "{why}");
    assert!(why.contains("room for 4"), "{why}");
}

#[test]
fn preferred_rack_falls_back_to_the_zone_and_packs_into_few_racks() {
    let c = TopologyConstraintInput {
        topology: "t".into(),
        required: Some(ZONE.into()),
        preferred: Some(RACK.into()),
    };
    let input = cluster(&RACKS, 5, c);
    let Plan::Domains(a) = plan_of(&input) else {
        panic!("expected domains")
    };
    // No rack holds 5; zone za has 5, zb has 6: za first (fullest). Both zones need both
    // racks, so no smaller subset exists.
    let what: Vec<&str> = a.iter().map(|a| a.what.as_str()).collect();
    assert_eq!(what, ["zone za", "zone zb"]);
}

#[test]
fn preferred_level_uses_the_tightest_domain_first() {
    let c = TopologyConstraintInput {
        topology: "t".into(),
        required: None,
        preferred: Some(RACK.into()),
    };
    let Plan::Domains(a) = plan_of(&cluster(&RACKS, 2, c.clone())) else {
        panic!()
    };
    // Racks with room for 2, fullest first: zb/r2 (2), then za/r1 and zb/r1 (4).
    assert_eq!(a[0].what, "rack zb/r2");
    // 7 pods: no rack, no zone (za 5, zb 6): the whole topology, fewest zones first is both.
    let Plan::Domains(a) = plan_of(&cluster(&RACKS, 7, c)) else {
        panic!()
    };
    assert_eq!(
        a.last().map(|a| a.what.as_str()),
        Some("the whole topology")
    );
}

#[test]
fn nodes_missing_a_level_label_are_outside_the_topology() {
    let nodes = [("x", "za", "", 8), ("y", "za", "r1", 1)];
    let Plan::Unsatisfiable(why) = plan_of(&cluster(&nodes, 2, required(ZONE))) else {
        panic!()
    };
    assert!(why.contains("room for 1"), "{why}");
}

#[test]
fn unknown_topology_or_level_is_explained() {
    let mut c = required(RACK);
    c.topology = "nope".into();
    let Plan::Unsatisfiable(why) = plan_of(&cluster(&RACKS, 1, c)) else {
        panic!()
    };
    assert!(why.contains("topology nope does not exist"), "{why}");
    let Plan::Unsatisfiable(why) = plan_of(&cluster(&RACKS, 1, required("example.com/row"))) else {
        panic!()
    };
    assert!(why.contains("no level \"example.com/row\""), "{why}");
}

#[test]
fn a_job_with_running_pods_stays_in_their_rack() {
    let mut input = cluster(&RACKS, 2, required(RACK));
    input.pods[0].phase = PodPhase::Running;
    input.pods[0].node = Some("b2".into());
    input.pods[0].gpu_indices = vec![0];
    let s = Snapshot::build(&input);
    let st = State::new(&s, &mut Vec::new());
    let pending: Vec<PodId> = vec![s.pod_by_name("ns", "j-1").unwrap()];
    let Plan::Domains(a) = plan(&s, &st, 0, &pending) else {
        panic!()
    };
    let what: Vec<&str> = a.iter().map(|a| a.what.as_str()).collect();
    assert_eq!(what, ["rack zb/r2"]);
}

#[test]
fn unconstrained_jobs_may_use_any_node() {
    let mut input = cluster(&RACKS, 1, required(RACK));
    input.pod_groups[0].topology = None;
    assert_eq!(plan_of(&input), Plan::Any);
}
