//! NVIDIADriver render: the DaemonSets compared field by field with the values upstream's rules
//! give for the same CRs (`nvdriver_upstream.yaml`), and the errors a bad CR gets.

use std::collections::BTreeMap;

use gantry_api::nvidia_driver::NVIDIADriver;
use serde::Deserialize;

use super::*;

const CASES: &str = include_str!("nvdriver_upstream.yaml");

#[derive(Deserialize)]
struct Node {
    name: String,
    os: String,
    version: String,
    kernel: String,
}

#[derive(Deserialize)]
struct Case {
    case: String,
    cr: NVIDIADriver,
    nodes: Vec<Node>,
    service_accounts: Vec<String>,
    daemonsets: BTreeMap<String, BTreeMap<String, Value>>,
    #[serde(default)]
    env: BTreeMap<String, BTreeMap<String, String>>,
}

fn cr_facts(cr: &NVIDIADriver, nodes: Vec<NodeFacts>) -> ClusterFacts {
    let mut f = facts(nodes);
    f.owner = Some(OwnerReference {
        api_version: "nvidia.com/v1alpha1".into(),
        kind: "NVIDIADriver".into(),
        name: cr.metadata.name.clone().unwrap_or_default(),
        uid: cr.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    });
    f
}

fn base() -> ClusterPolicySpec {
    let mut p = policy(MINIMAL);
    p.spec.driver.use_nvidia_driver_crd = Some(true);
    p.spec
}

fn render_cr(cr: &NVIDIADriver, nodes: Vec<NodeFacts>) -> Result<Vec<Value>, NvDriverError> {
    render_nvidia_driver(&base(), cr, &cr_facts(cr, nodes))
}

fn cr(yaml: &str) -> NVIDIADriver {
    serde_yaml::from_str(yaml).expect("CR parses")
}

#[test]
fn daemonsets_match_upstream_field_by_field() {
    let cases: Vec<Case> = serde_yaml::from_str(CASES).expect("cases parse");
    assert_eq!(cases.len(), 3);
    for c in cases {
        let nodes = c
            .nodes
            .iter()
            .map(|n| node(&n.name, &n.os, &n.version, &n.kernel))
            .collect();
        let out = render_cr(&c.cr, nodes).unwrap_or_else(|e| panic!("{}: {e}", c.case));
        let of_kind = |k: &str| -> Vec<&Value> { out.iter().filter(|o| o["kind"] == k).collect() };
        let names = |k: &str| -> Vec<String> {
            of_kind(k)
                .iter()
                .map(|o| {
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(names("ServiceAccount"), c.service_accounts, "{}", c.case);
        assert_eq!(
            names("ClusterRoleBinding"),
            c.service_accounts,
            "{}",
            c.case
        );
        let mut got = names("DaemonSet");
        got.sort();
        let want: Vec<String> = c.daemonsets.keys().cloned().collect();
        assert_eq!(got, want, "{}: DaemonSet names", c.case);
        for (name, fields) in &c.daemonsets {
            let d = of_kind("DaemonSet")
                .into_iter()
                .find(|d| d["metadata"]["name"] == name.as_str())
                .expect("listed above");
            for (ptr, want) in fields {
                assert_eq!(
                    d.pointer(ptr),
                    Some(want),
                    "{}: DaemonSet {name} field {ptr}",
                    c.case
                );
            }
            // Neither the ClusterPolicy's state label nor its driver names.
            assert!(d["metadata"]["labels"].get(LABEL_STATE).is_none());
            assert_eq!(
                d["metadata"]["labels"][LABEL_NVIDIA_DRIVER],
                c.cr.metadata.name.clone().unwrap_or_default().as_str()
            );
            for (var, value) in c.env.get(name).into_iter().flatten() {
                let ctr = container(d, "containers", "nvidia-driver-ctr");
                assert_eq!(
                    env_of(ctr, var).as_deref(),
                    Some(value.as_str()),
                    "{name} {var}"
                );
            }
        }
    }
}

#[test]
fn no_nodes_no_objects_and_same_input_same_output() {
    let c = cr(
        "metadata: {name: x}\nspec: {default: false, image: driver, repository: r, version: '1.2'}",
    );
    assert!(render_cr(&c, Vec::new()).unwrap().is_empty());
    let a = render_cr(&c, ubuntu_nodes()).unwrap();
    assert_eq!(a, render_cr(&c, ubuntu_nodes()).unwrap());
}

#[test]
fn unresolvable_image_names_the_cr_and_the_field() {
    let c = cr("metadata: {name: pool-a}\nspec: {default: false, image: driver}");
    let e = render_cr(&c, ubuntu_nodes()).unwrap_err();
    assert_eq!(e.name, "pool-a");
    assert_eq!(e.path, "spec.image");
    assert!(
        e.to_string()
            .starts_with("NVIDIADriver pool-a spec.image: cannot resolve"),
        "{e}"
    );
    // The operator's DRIVER_IMAGE is not a fallback for an NVIDIADriver.
    let mut f = cr_facts(&c, ubuntu_nodes());
    f.image_env.insert(
        "DRIVER_IMAGE".into(),
        "nvcr.io/nvidia/driver:1.0-ubuntu24.04".into(),
    );
    assert!(render_nvidia_driver(&base(), &c, &f).is_err());
}

#[test]
fn bad_specs_are_errors_not_objects() {
    for (yaml, path) in [
        (
            "metadata: {name: d}\nspec: {default: true, image: driver, repository: r, version: '1', nodeSelector: {a: b}}",
            "spec.nodeSelector",
        ),
        (
            "metadata: {name: d}\nspec: {default: false, image: driver, repository: r, usePrecompiled: true, version: 'sha256:0123'}",
            "spec.version",
        ),
        (
            "metadata: {name: d}\nspec: {default: false, image: driver, repository: r, version: '1', env: [{name: A, valueFrom: {fieldRef: {fieldPath: x}}}], manager: {repository: r}}",
            "spec.manager",
        ),
    ] {
        let e = render_cr(&cr(yaml), ubuntu_nodes()).unwrap_err();
        assert_eq!(e.path, path, "{e}");
    }
}

#[test]
fn digest_version_is_used_as_is() {
    let c = cr(
        "metadata: {name: d}\nspec: {default: false, image: driver, repository: nvcr.io/nvidia, version: 'sha256:abcd'}",
    );
    let out = render_cr(&c, ubuntu_nodes()).unwrap();
    let d = out.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
    assert_eq!(
        container(d, "containers", "nvidia-driver-ctr")["image"],
        "nvcr.io/nvidia/driver@sha256:abcd"
    );
}

#[test]
fn upstream_hash_and_kernel_rules() {
    // Kubernetes' SafeEncodeString alphabet maps the digits 0-9 to 4 5 6 7 8 9 b c d f.
    assert!(
        string_hash("anything")
            .chars()
            .all(|c| "456789bcdf".contains(c))
    );
    assert_eq!(
        sanitized_kernel("5.14.0-427.13.1.el9_4.x86_64"),
        "5.14.0-427.13.1.el9.4"
    );
    assert_eq!(sanitized_kernel("6.8.0-1015-AWS"), "6.8.0-1015-aws");
    assert_eq!(
        driver_name(
            gantry_api::nvidia_driver::DriverType::VgpuHostManager,
            "v",
            "ubuntu24.04"
        ),
        "nvidia-vgpu-manager-v-ubuntu24.04"
    );
}
