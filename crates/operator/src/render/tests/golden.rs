//! Golden manifests, as upstream checks its operands: every state's objects rendered from
//! upstream's sample ClusterPolicy (the Helm chart's defaults), compared byte for byte with
//! `crates/operator/tests/golden/<state>.yaml`. A state the sample leaves off is rendered
//! from the sample with only its switch turned on. Regenerate after a deliberate change:
//!
//! `GANTRY_BLESS=1 cargo nextest run -p gantry-operator -E 'test(golden)'`

use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;

const BLESS_HINT: &str = "GANTRY_BLESS=1 cargo nextest run -p gantry-operator -E 'test(golden)'";

/// The sample, then variants that each turn on states the sample leaves off.
fn variants() -> Vec<(&'static str, Value)> {
    vec![
        ("the sample", json!({})),
        (
            "the sample with dcgm.enabled",
            json!({"dcgm": {"enabled": true}}),
        ),
        (
            "the sample with nodeStatusExporter.enabled",
            json!({"nodeStatusExporter": {"enabled": true}}),
        ),
        (
            "the sample with sandboxWorkloads (kubevirt) and its operands enabled",
            json!({
                "sandboxWorkloads": {"enabled": true, "mode": "kubevirt"},
                "vgpuManager": {"enabled": true},
                "vgpuDeviceManager": {"enabled": true},
                "vfioManager": {"enabled": true},
                "sandboxDevicePlugin": {"enabled": true},
            }),
        ),
        (
            "the sample with sandboxWorkloads (kata) and its operands enabled",
            json!({
                "sandboxWorkloads": {"enabled": true, "mode": "kata"},
                "kataSandboxDevicePlugin": {"enabled": true},
                "ccManager": {"enabled": true},
            }),
        ),
    ]
}

/// JSON merge patch (RFC 7386) of `patch` into `into`.
fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

fn facts_for_golden() -> ClusterFacts {
    let mut f = facts(ubuntu_nodes());
    f.has_service_monitor_crd = true;
    f.has_prometheus_rule_crd = true;
    f.owner = Some(OwnerReference {
        api_version: "nvidia.com/v1".into(),
        kind: "ClusterPolicy".into(),
        name: "cluster-policy".into(),
        uid: "00000000-0000-0000-0000-000000000001".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    });
    f
}

/// Each state's golden text: the first variant that enables it, its objects as YAML documents.
fn rendered() -> Vec<(State, String)> {
    let sample: Value = serde_yaml::from_str(HELM).expect("sample parses");
    let facts = facts_for_golden();
    let renders: Vec<(&str, Vec<StateObjects>)> = variants()
        .into_iter()
        .map(|(what, patch)| {
            let mut v = sample.clone();
            merge(&mut v["spec"], &patch);
            let p: ClusterPolicy = serde_json::from_value(v).expect("variant parses");
            let out = render(&p, &facts).unwrap_or_else(|e| panic!("{what}: {e}"));
            (what, out)
        })
        .collect();
    State::ALL
        .into_iter()
        .map(|s| {
            let (what, objects) = renders
                .iter()
                .find_map(|(what, out)| {
                    let st = state(out, s);
                    (st.enabled && !st.objects.is_empty()).then_some((*what, &st.objects))
                })
                .unwrap_or_else(|| panic!("no variant renders {}", s.name()));
            let mut text = format!(
                "# {} rendered from {what} (crates/api/tests/fixtures/clusterpolicy-helm-defaults.yaml).\n# Regenerate: {BLESS_HINT}\n",
                s.name()
            );
            for o in objects {
                text.push_str("---\n");
                text.push_str(&serde_yaml::to_string(o).expect("objects serialise"));
            }
            (s, text)
        })
        .collect()
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The first line where two texts differ, for a short failure message.
fn first_difference(want: &str, got: &str) -> String {
    let (mut w, mut g) = (want.lines(), got.lines());
    for n in 1.. {
        match (w.next(), g.next()) {
            (None, None) => break,
            (a, b) if a == b => continue,
            (a, b) => return format!("line {n}: golden {a:?}, rendered {b:?}"),
        }
    }
    "identical".into()
}

#[test]
fn golden_manifests_match_every_rendered_operand() {
    let dir = golden_dir();
    let bless = std::env::var_os("GANTRY_BLESS").is_some_and(|v| v == "1");
    let rendered = rendered();
    if bless {
        std::fs::create_dir_all(&dir).expect("create tests/golden");
        for entry in std::fs::read_dir(&dir)
            .expect("read tests/golden")
            .flatten()
        {
            std::fs::remove_file(entry.path()).expect("remove an old golden file");
        }
    }
    let mut failures = Vec::new();
    for (s, text) in &rendered {
        let path = dir.join(format!("{}.yaml", s.name()));
        if bless {
            std::fs::write(&path, text).expect("write a golden file");
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if &want == text => {}
            Ok(want) => failures.push(format!(
                "{}: differs, {}",
                path.display(),
                first_difference(&want, text)
            )),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    // No golden file for a state that no longer exists.
    let expected: Vec<String> = rendered
        .iter()
        .map(|(s, _)| format!("{}.yaml", s.name()))
        .collect();
    for entry in std::fs::read_dir(&dir)
        .expect("read tests/golden")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !expected.contains(&name) {
            failures.push(format!("{name}: no operand state renders it"));
        }
    }
    assert!(
        failures.is_empty(),
        "golden manifests out of date (if the change is meant, run {BLESS_HINT} and review the diff):\n{}",
        failures.join("\n")
    );
}

#[test]
fn golden_merge_patch_replaces_and_adds() {
    let mut v = json!({"a": {"enabled": false, "x": 1}});
    merge(&mut v, &json!({"a": {"enabled": true}, "b": {"c": 2}}));
    assert_eq!(v, json!({"a": {"enabled": true, "x": 1}, "b": {"c": 2}}));
}
