use super::*;
use serde_json::json;

fn pod(name: &str, node: Option<&str>, group: &str) -> Pod {
    let mut spec = json!({"schedulerName": "kai-scheduler", "containers": [{"name": "c",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name,
                     "annotations": {"pod-group-name": group}},
        "spec": spec
    }))
    .unwrap()
}

fn group(name: &str) -> PodGroup {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns"}, "spec": {"queue": "q"}
    }))
    .unwrap()
}

#[test]
fn pending_pod_waits_for_its_group_then_enters_the_input() {
    let mut c = Cache::new("kai-scheduler", "gantry-reservation");
    c.apply_pod(&pod("a", None, "g"));
    assert_eq!(c.pod_count(), 0);
    c.apply_pod_group(&group("g"));
    assert_eq!(c.pod_count(), 1);
    c.delete_pod("ns", "a");
    assert_eq!(c.pod_count(), 0);
}

#[test]
fn a_pod_waits_only_for_the_group_it_names_now() {
    let mut c = Cache::new("kai-scheduler", "gantry-reservation");
    c.apply_pod(&pod("a", None, "g1"));
    c.apply_pod(&pod("a", None, "g2")); // re-annotated before g1 arrived
    let waiting: Vec<&String> = c.awaiting_group.keys().collect();
    assert_eq!(waiting, ["ns/g2"]);
    c.apply_pod_group(&group("g1"));
    assert_eq!(c.pod_count(), 0);
    c.apply_pod_group(&group("g2"));
    assert_eq!(c.pod_count(), 1);
    assert!(c.awaiting_group.is_empty());
}

#[test]
fn a_deleted_pod_stops_waiting_for_its_group() {
    let mut c = Cache::new("kai-scheduler", "gantry-reservation");
    c.apply_pod(&pod("a", None, "g"));
    c.apply_pod(&pod("b", None, "g"));
    c.delete_pod("ns", "a");
    c.delete_pod("ns", "b");
    assert!(c.awaiting_group.is_empty());
    c.apply_pod_group(&group("g"));
    assert_eq!(c.pod_count(), 0);
}

#[test]
fn assumed_bind_survives_unrelated_updates_until_confirmed() {
    let mut c = Cache::new("kai-scheduler", "gantry-reservation");
    c.apply_pod_group(&group("g"));
    c.apply_pod(&pod("a", None, "g"));
    c.assume(
        "ns/a",
        Assumed {
            node: "n1".into(),
            gpu_indices: vec![3],
            groups: vec![],
        },
    );
    c.apply_pod(&pod("a", None, "g")); // e.g. a label patch arriving
    assert_eq!(c.input.pods[0].node.as_deref(), Some("n1"));
    c.apply_pod(&pod("a", Some("n1"), "g"));
    assert!(c.assumed.is_empty());
    assert_eq!(c.input.pods[0].gpu_indices, vec![3]);
    c.forget("ns/a");
    assert_eq!(c.input.pods[0].node.as_deref(), Some("n1"));
}

#[test]
fn failed_bind_returns_the_pod_to_pending() {
    let mut c = Cache::new("kai-scheduler", "gantry-reservation");
    c.apply_pod_group(&group("g"));
    c.apply_pod(&pod("a", None, "g"));
    c.assume(
        "ns/a",
        Assumed {
            node: "n1".into(),
            gpu_indices: vec![0],
            groups: vec![],
        },
    );
    c.forget("ns/a");
    assert_eq!(c.input.pods[0].node, None);
    assert_eq!(c.input.pods[0].phase, PodPhase::Pending);
}

#[test]
fn swap_remove_keeps_the_index_right() {
    let mut c = Cache::new("kai-scheduler", "gantry-reservation");
    c.apply_pod_group(&group("g"));
    for n in ["a", "b", "c"] {
        c.apply_pod(&pod(n, None, "g"));
    }
    c.delete_pod("ns", "a");
    c.apply_pod(&pod("c", Some("n9"), "g"));
    let names: Vec<(&str, Option<&str>)> = c
        .input
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.node.as_deref()))
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&("c", Some("n9"))) && names.contains(&("b", None)));
}
