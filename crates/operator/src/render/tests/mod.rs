//! Render tests: shared fixtures and helpers; `helm` renders the Helm-default ClusterPolicy
//! end to end, `golden` compares every operand with its checked-in manifest, `rules` checks
//! one rule at a time, `invalid` the spec errors and invariants.

mod golden;
mod helm;
mod invalid;
mod nvdriver;
mod rules;

use std::collections::BTreeMap;

use gantry_api::cluster_policy::{
    ClusterPolicy, ClusterPolicySpec, SandboxWorkloadsSpec, UpdateStrategy,
};
use gantry_api::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use super::*;

const HELM: &str = include_str!("../../../../api/tests/fixtures/clusterpolicy-helm-defaults.yaml");
const MINIMAL: &str = include_str!("../../../../api/tests/fixtures/clusterpolicy-minimal.yaml");
const IMAGE: &str = "registry.example/gantry:9.9.9";

fn policy(yaml: &str) -> ClusterPolicy {
    serde_yaml::from_str(yaml).expect("fixture parses")
}

fn node(name: &str, os: &str, version: &str, kernel: &str) -> NodeFacts {
    let labels: BTreeMap<String, String> = [
        (names::LABEL_GPU_PRESENT, "true"),
        (names::NFD_OS_RELEASE_ID, os),
        (names::NFD_OS_RELEASE_VERSION_ID, version),
        (names::NFD_KERNEL_VERSION_FULL, kernel),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    NodeFacts {
        name: name.into(),
        labels,
    }
}

fn facts(nodes: Vec<NodeFacts>) -> ClusterFacts {
    ClusterFacts {
        namespace: "gpu-operator".into(),
        operator_image: IMAGE.into(),
        gpu_nodes: nodes,
        ..Default::default()
    }
}

fn ubuntu_nodes() -> Vec<NodeFacts> {
    vec![
        node("gpu-a", "ubuntu", "24.04", "6.8.0-60-generic"),
        node("gpu-b", "ubuntu", "24.04", "6.8.0-60-generic"),
    ]
}

fn all(out: &[StateObjects]) -> Vec<&Value> {
    out.iter().flat_map(|s| s.objects.iter()).collect()
}

fn daemonsets(out: &[StateObjects]) -> Vec<&Value> {
    all(out)
        .into_iter()
        .filter(|o| o["kind"] == "DaemonSet")
        .collect()
}

fn ds<'a>(out: &'a [StateObjects], name: &str) -> &'a Value {
    daemonsets(out)
        .into_iter()
        .find(|d| d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no DaemonSet {name}"))
}

fn state(out: &[StateObjects], s: State) -> &StateObjects {
    out.iter()
        .find(|o| o.state == s)
        .expect("every state is returned")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn pod(d: &Value) -> &Value {
    &d["spec"]["template"]["spec"]
}

fn container<'a>(d: &'a Value, list: &str, name: &str) -> &'a Value {
    pod(d)[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {list} {name} in {}", d["metadata"]["name"]))
}

fn env_of(c: &Value, name: &str) -> Option<String> {
    c["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(String::from))
}

fn render_helm() -> Vec<StateObjects> {
    render(&policy(HELM), &facts(ubuntu_nodes())).expect("helm defaults render")
}
