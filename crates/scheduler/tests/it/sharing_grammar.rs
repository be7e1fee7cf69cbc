//! Issue #43: one grammar for KAI's sharing annotations. For a table of annotation values,
//! every consumer agrees on accept/reject: `gantry validate`'s pod check (admission's rules),
//! the scheduler's pod conversion (the problem it reports as an Event), its request model
//! (what it places) and the admission webhook (which prepares only valid shares).

use gantry_scheduler::k8s::admission::{AdmissionConfig, mutate};
use gantry_scheduler::k8s::convert;
use gantry_scheduler::request::{GpuRequest, parse_gpu_request};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// (annotations, the container's nvidia.com/gpu limit, accepted?).
fn table() -> Vec<(Value, Option<&'static str>, bool)> {
    let mut rows = Vec::new();
    for (v, ok) in [
        ("0.5", true),
        (".5", true),
        ("5e-1", true),
        ("5E-1", true),
        ("+0.25", true),
        ("0.001", true),
        ("0.999", true),
        ("0", false),
        ("1", false),
        ("1.0", false),
        ("1.5", false),
        ("-0.5", false),
        ("", false),
        (" 0.5", false),
        ("0.5 ", false),
        ("500m", false),
        ("0x1p-1", false),
        ("NaN", false),
        ("Inf", false),
        ("1e-400", false),
        ("half", false),
    ] {
        rows.push((json!({"gpu-fraction": v}), None, ok));
    }
    for (v, ok) in [
        ("20000", true),
        ("007", true),
        ("0", false),
        ("+5", false),
        ("5Gi", false),
        ("1.5", false),
        ("", false),
        ("99999999999999999999", false),
    ] {
        rows.push((json!({"gpu-memory": v}), None, ok));
    }
    for (v, ok) in [
        ("2", true),
        ("0", false),
        ("+2", false),
        ("4294967296", false),
    ] {
        rows.push((
            json!({"gpu-fraction": "0.5", "gpu-fraction-num-devices": v}),
            None,
            ok,
        ));
    }
    rows.extend([
        (json!({"gpu-fraction-num-devices": "2"}), None, false),
        (json!({"mps": "true"}), None, false),
        (json!({"mps": "false"}), None, true),
        (json!({"gpu-memory": "100", "mps": "true"}), None, true),
        (
            json!({"gpu-fraction": "0.5", "gpu-memory": "100"}),
            None,
            false,
        ),
        (json!({"gpu-fraction": "0.5"}), Some("1"), false),
        (json!({"gpu-memory": "100"}), Some("1"), false),
        (json!({"gpu-fraction": "0.5"}), Some("0"), false),
        (json!({}), Some("1"), true),
        (json!({}), None, true),
    ]);
    rows
}

fn pod(annotations: &Value, whole: Option<&str>) -> Value {
    let resources = match whole {
        Some(n) => json!({"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}}),
        None => json!({}),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": annotations},
        "spec": {"schedulerName": "kai-scheduler",
                 "containers": [{"name": "main", "image": "x", "resources": resources}]},
    })
}

#[test]
fn admission_and_scheduler_accept_and_reject_the_same_sharing_annotations() {
    let cfg = AdmissionConfig {
        scheduler_name: "kai-scheduler".into(),
        runtime_class: None,
    };
    for (annotations, whole, accepted) in table() {
        let case = format!("{annotations} gpu limit {whole:?}");
        let value = pod(&annotations, whole);
        let typed: Pod = serde_json::from_value(value.clone()).expect(&case);

        let validate = gantry_api::pod_check::pod(&value);
        let validate_ok = !validate
            .iter()
            .any(|p| p.path.starts_with("metadata.annotations"));
        let cached = convert::pod(&typed, "kai-scheduler", "kai-resource-reservation");
        let convert_ok = cached.problem.is_none();
        let request = parse_gpu_request(&cached.input.extended, &cached.input.annotations, |_| 0);

        assert_eq!(
            validate_ok, accepted,
            "gantry validate, {case}: {validate:?}"
        );
        assert_eq!(
            convert_ok, accepted,
            "scheduler pod problem, {case}: {:?}",
            cached.problem
        );
        assert_eq!(
            request.is_ok(),
            accepted,
            "scheduler request, {case}: {request:?}"
        );

        let shared = matches!(
            request,
            Ok(GpuRequest::Fraction { .. } | GpuRequest::Memory { .. })
        );
        let prepared = mutate(&typed, &cfg, "abcde").is_some();
        assert_eq!(prepared, shared, "admission webhook prepares, {case}");
    }
}
