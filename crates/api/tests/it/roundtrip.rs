//! Parse → serialize → parse on upstream-shaped fixtures: the serialized JSON equals the
//! input (no field lost or invented) and the second parse equals the first.

use std::path::PathBuf;

use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::device_plugin_config::DevicePluginConfig;
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::mig_cluster_policy::MigClusterPolicy;
use gantry_api::mig_parted::MigPartedConfig;
use gantry_api::nvidia_driver::NVIDIADriver;
use gantry_api::validate::{DocKind, detect, parse_documents, validate_text};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    input: &Value,
    what: &str,
) -> T {
    let first: T =
        serde_json::from_value(input.clone()).unwrap_or_else(|e| panic!("{what}: parse: {e}"));
    let out = serde_json::to_value(&first).unwrap_or_else(|e| panic!("{what}: serialize: {e}"));
    assert_eq!(
        &out, input,
        "{what}: serialized form differs from the input"
    );
    let second: T = serde_json::from_value(out).unwrap_or_else(|e| panic!("{what}: reparse: {e}"));
    assert_eq!(first, second, "{what}: second parse differs");
    // And through YAML text, as a file would go.
    let yaml = serde_yaml::to_string(&first).unwrap_or_else(|e| panic!("{what}: to yaml: {e}"));
    let third: T = serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{what}: from yaml: {e}"));
    assert_eq!(first, third, "{what}: YAML round trip differs");
    first
}

/// Round-trips every document of a fixture and checks it validates clean; returns the kinds.
fn check_file(name: &str) -> Vec<DocKind> {
    let text = fixture(name);
    assert_eq!(validate_text(&text), vec![], "{name} should validate clean");
    let (docs, err) = parse_documents(&text);
    assert!(err.is_none());
    docs.iter()
        .enumerate()
        .map(|(i, d)| {
            let what = format!("{name} document {}", i + 1);
            let kind = detect(d).unwrap_or_else(|p| panic!("{what}: {p}"));
            match kind {
                DocKind::ClusterPolicy => drop(round_trip::<ClusterPolicy>(d, &what)),
                DocKind::NVIDIADriver => drop(round_trip::<NVIDIADriver>(d, &what)),
                DocKind::MigClusterPolicy => drop(round_trip::<MigClusterPolicy>(d, &what)),
                DocKind::Queue => drop(round_trip::<Queue>(d, &what)),
                DocKind::PodGroup => drop(round_trip::<PodGroup>(d, &what)),
                DocKind::Topology => drop(round_trip::<gantry_api::kai::Topology>(d, &what)),
                DocKind::DevicePluginConfig => drop(round_trip::<DevicePluginConfig>(d, &what)),
                DocKind::MigPartedConfig => drop(round_trip::<MigPartedConfig>(d, &what)),
                DocKind::ConfigMap | DocKind::Pod | DocKind::Workload | DocKind::Unchecked => {}
            }
            kind
        })
        .collect()
}

#[test]
fn cluster_policy_helm_defaults() {
    assert_eq!(
        check_file("clusterpolicy-helm-defaults.yaml"),
        vec![DocKind::ClusterPolicy]
    );
    let (docs, _) = parse_documents(&fixture("clusterpolicy-helm-defaults.yaml"));
    let cp: ClusterPolicy =
        serde_json::from_value(docs[0].clone()).unwrap_or_else(|e| panic!("{e}"));
    let s = &cp.spec;
    assert!(s.driver_enabled() && s.toolkit_enabled() && s.device_plugin_enabled());
    assert!(!s.dcgm_enabled(), "the chart sets dcgm.enabled=false");
    assert_eq!(
        s.mig_strategy(),
        gantry_api::cluster_policy::MigStrategy::Single
    );
    assert!(s.driver_auto_upgrade());
    assert_eq!(s.device_plugin_config_name(), Some("time-slicing-config"));
    assert_eq!(
        s.driver.image.reference().as_deref(),
        Some("nvcr.io/nvidia/driver:595.91.07")
    );
    assert!(s.dcgm_exporter_service_monitor_enabled());
}

#[test]
fn cluster_policy_minimal_uses_defaults() {
    check_file("clusterpolicy-minimal.yaml");
    let (docs, _) = parse_documents(&fixture("clusterpolicy-minimal.yaml"));
    let cp: ClusterPolicy =
        serde_json::from_value(docs[0].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        cp.spec.dcgm_enabled(),
        "nil enabled is the API default (true), not false"
    );
    assert!(cp.spec.cdi_enabled());
    assert!(!cp.spec.node_status_exporter_enabled());
}

#[test]
fn unknown_fields_survive_round_trip() {
    // Keys Gantry has no typed field for, at several levels, are kept verbatim.
    let text = fixture("clusterpolicy-minimal.yaml")
        .replace(
            "  driver: {}",
            "  driver: {futureKnob: {a: [1, 2]}, enabled: false}",
        )
        .replace("spec:\n", "spec:\n  futureSection: {x: 1}\n");
    let (docs, _) = parse_documents(&text);
    let cp = round_trip::<ClusterPolicy>(&docs[0], "extended");
    assert!(!cp.spec.driver_enabled());
    assert!(cp.spec.extra.contains_key("futureSection"));
    assert!(cp.spec.driver.extra.contains_key("futureKnob"));
}

#[test]
fn nvidia_drivers() {
    assert_eq!(
        check_file("nvidiadriver-default.yaml"),
        vec![DocKind::NVIDIADriver; 2]
    );
}

#[test]
fn kai_default_queues() {
    assert_eq!(check_file("queues-default.yaml"), vec![DocKind::Queue; 2]);
}

#[test]
fn kai_two_level_hierarchy_effective_values() {
    use gantry_api::kai::{Limit, QueueResourceKind, Quota};
    assert_eq!(check_file("queues-two-level.yaml"), vec![DocKind::Queue; 5]);
    let (docs, _) = parse_documents(&fixture("queues-two-level.yaml"));
    let qs: Vec<Queue> = docs
        .iter()
        .map(|d| serde_json::from_value(d.clone()).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let nlp = &qs[2];
    assert_eq!(nlp.spec.parent(), Some("research"));
    let gpu = nlp.spec.resource(QueueResourceKind::Gpu);
    assert_eq!(
        gpu.limit,
        Limit::Max(0.0),
        "omitted limit is 0: no GPUs at all"
    );
    assert_eq!(gpu.quota, Quota::Amount(7.5));
    assert_eq!(gpu.over_quota_weight, 3.0);
    assert_eq!(
        qs[1].spec.resource(QueueResourceKind::Memory).quota,
        Quota::AllAvailable
    );
    assert_eq!(
        qs[1].spec.reclaim_min_runtime_nanos(),
        Some(5_400_000_000_000)
    );
    assert_eq!(qs[0].spec.priority(), 200);
    assert_eq!(qs[1].spec.priority(), 100);
}

#[test]
fn pod_groups_with_min_member_and_sub_groups() {
    assert_eq!(check_file("podgroups.yaml"), vec![DocKind::PodGroup; 3]);
    let (docs, _) = parse_documents(&fixture("podgroups.yaml"));
    let pg: PodGroup = serde_json::from_value(docs[1].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pg.spec.children_of(None).len(), 3);
    assert_eq!(pg.spec.children_of(Some("prefill")).len(), 2);
    let elastic: PodGroup =
        serde_json::from_value(docs[2].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert!(!elastic.spec.is_gang());
}

#[test]
fn device_plugin_configs() {
    use gantry_api::device_plugin_config::SharingStrategy;
    check_file("device-plugin-time-slicing.yaml");
    check_file("device-plugin-time-slicing-mig.yaml");
    check_file("device-plugin-mps.yaml");
    let c: DevicePluginConfig =
        serde_yaml::from_str(&fixture("device-plugin-time-slicing-mig.yaml"))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.sharing_strategy(), SharingStrategy::TimeSlicing);
    assert_eq!(c.replicas_for("nvidia.com/mig-1g.10gb"), 3);
    assert_eq!(c.advertised_name("nvidia.com/gpu"), "nvidia.com/gpu");
    let m: DevicePluginConfig =
        serde_yaml::from_str(&fixture("device-plugin-mps.yaml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.sharing_strategy(), SharingStrategy::Mps);
    assert_eq!(m.advertised_name("nvidia.com/gpu"), "nvidia.com/gpu.shared");
}

#[test]
fn mig_parted_examples() {
    assert_eq!(
        check_file("mig-parted-examples.yaml"),
        vec![DocKind::MigPartedConfig]
    );
    let c: MigPartedConfig = serde_yaml::from_str(&fixture("mig-parted-examples.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = c.mig_configs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "all-disabled",
            "all-enabled",
            "all-1g.10gb",
            "all-balanced",
            "custom-config"
        ]
    );
    let e = c
        .entry_for("custom-config", 5, 0x20B0_10DE, None)
        .unwrap_or_else(|| panic!("entry"));
    assert_eq!(e.profiles().len(), 1);
    assert!(
        c.entry_for("all-1g.10gb", 0, 0x2335_10DE, None).is_none(),
        "H200 is not in all-1g.10gb"
    );
}

#[test]
fn shipped_default_config_round_trips_and_validates() {
    let yaml = gantry_api::mig_parted::default_config_yaml();
    assert_eq!(validate_text(&yaml), vec![]);
    let (docs, _) = parse_documents(&yaml);
    round_trip::<MigPartedConfig>(&docs[0], "default config");
}

#[test]
fn mig_cluster_policies() {
    assert_eq!(
        check_file("migclusterpolicies.yaml"),
        vec![DocKind::MigClusterPolicy; 2]
    );
}
