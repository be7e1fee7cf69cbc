use super::*;
use serde_json::json;

fn info(group: &str, plural: &str, kind: &str) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        versions: vec!["v1".into()],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced: true,
        short_names: vec![],
        categories: vec![],
        subresources: vec![],
        builtin: true,
        crd: None,
    }
}

/// Every check, unknown fields ignored.
fn b(info: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    builtin(info, version, &mut obj.clone(), None, |_, _| Ok(()))
}

#[test]
fn unknown_fields_of_builtin_kinds_are_found_and_pruned() {
    let mut obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labelz": {}},
        "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "Always"}], "bogus": 1}});
    let mut seen = Vec::new();
    builtin(
        &info("", "pods", "Pod"),
        "v1",
        &mut obj,
        None,
        |unknown, obj| {
            seen = unknown.iter().map(ToString::to_string).collect();
            unknown.iter().for_each(|f| f.prune(obj));
            Ok(())
        },
    )
    .expect("valid apart from unknown fields");
    seen.sort();
    assert_eq!(
        seen,
        [
            "metadata.labelz",
            "spec.bogus",
            "spec.containers[0].imagePullPolicyy"
        ]
    );
    assert_eq!(
        obj,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
    );
}

/// On an update, the stored object's unchanged spec is not decoded again; what changed is,
/// and so is the metadata (but not the server's own managedFields).
#[test]
fn an_update_decodes_what_changed_and_the_metadata() {
    let pods = info("", "pods", "Pod");
    let before = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "managedFields": [{"manager": "m"}]},
        "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}});
    let mut new = before.clone();
    new["status"] = json!({"phase": "Running"});
    assert_eq!(
        changed_part(&pods, &new, &before, &|_| false),
        Some(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "status": {"phase": "Running"}})
        )
    );
    // A bad status is found; a bad label too, though the rest is unchanged.
    let refused = |field: &str, value: Value| {
        let mut bad = before.clone();
        bad[field] = value;
        let settled: Settled<'_> = &|_| false;
        builtin(&pods, "v1", &mut bad, Some((&before, settled)), |_, _| {
            Ok(())
        })
        .is_err()
    };
    assert!(refused("status", json!({"phase": 3})));
    let mut meta = before["metadata"].clone();
    meta["labels"] = json!({"tier": 1});
    assert!(refused("metadata", meta));
    // An unknown field in the changed part is still reported.
    let mut extra = new.clone();
    extra["status"]["bogus"] = json!(1);
    let mut seen = Vec::new();
    builtin(
        &pods,
        "v1",
        &mut extra,
        Some((&before, &|_: &str| false)),
        |u, _| {
            seen = u.iter().map(ToString::to_string).collect();
            Ok(())
        },
    )
    .expect("valid apart from the unknown field");
    assert_eq!(seen, ["status.bogus"]);
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
}

fn check(spec: Value) -> Result<(), ApiError> {
    b(&info("", "pods", "Pod"), "v1", &pod(spec))
}

fn res(req: Value, lim: Value) -> Value {
    json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": req, "limits": lim}}]})
}

#[test]
fn pod_specs() {
    assert!(
        check(res(
            json!({"cpu": "1", "nvidia.com/gpu": 2}),
            json!({"nvidia.com/gpu": "2"})
        ))
        .is_ok()
    );
    let e = check(json!({"containers": []})).expect_err("no containers");
    assert_eq!((e.code, e.reason), (422, "Invalid"));
    assert!(
        e.message.contains("spec.containers: Required value"),
        "{}",
        e.message
    );
    let e = check(res(json!({"cpu": "-32"}), json!({}))).expect_err("negative");
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("spec.containers[0].resources.requests[cpu]: Invalid value: \"-32\""),
        "{}",
        e.message
    );
    let e = check(res(json!({"memory": "lots"}), json!({}))).expect_err("malformed");
    assert_eq!((e.code, e.reason), (400, "BadRequest"));
    assert!(
        e.message.contains("cannot be handled as a Pod"),
        "{}",
        e.message
    );
    for gpu in ["1.5", "-1"] {
        let e = check(res(
            json!({"nvidia.com/gpu": gpu}),
            json!({"nvidia.com/gpu": gpu}),
        ))
        .expect_err(gpu);
        assert_eq!(e.code, 422, "{gpu}: {}", e.message);
    }
    let e = check(res(json!({"nvidia.com/gpu": "1"}), json!({}))).expect_err("no limit");
    assert!(e.message.contains("non overcommitable"), "{}", e.message);
    let e = check(res(json!({"cpu": "2"}), json!({"cpu": "1"}))).expect_err("over limit");
    assert!(
        e.message.contains("less than or equal to cpu limit"),
        "{}",
        e.message
    );
    let e = b(
        &info("", "pods", "Pod"),
        "v1",
        &json!({"metadata": {"name": "p"}, "spec": "x"}),
    )
    .expect_err("spec string");
    assert_eq!(e.code, 400, "{}", e.message);
}

#[test]
fn metadata_and_names() {
    let cm = info("", "configmaps", "ConfigMap");
    assert_eq!(name(&cm, "dots..dots").expect_err("dots").code, 422);
    assert!(name(&cm, "a.b-c").is_ok());
    assert!(name(&info("", "namespaces", "Namespace"), "a.b").is_err());
    assert!(
        name(
            &info("rbac.authorization.k8s.io", "roles", "Role"),
            "system:x"
        )
        .is_ok()
    );
    let e = b(
        &cm,
        "v1",
        &json!({"metadata": {"name": "c", "labels": {"a": 1}}}),
    )
    .expect_err("number label");
    assert_eq!(e.code, 400);
    let e = b(
        &cm,
        "v1",
        &json!({"metadata": {"name": "c", "labels": {"bad key": "x"}}}),
    )
    .expect_err("bad key");
    assert_eq!(e.code, 422);
    let big = json!({"metadata": {"name": "c"}, "data": {"a": "x".repeat(MAX_CONFIG_BYTES)}});
    assert_eq!(b(&cm, "v1", &big).expect_err("big").code, 422);
    let ev = info("", "events", "Event");
    let e = b(
        &ev,
        "v1",
        &json!({"metadata": {"name": "e"}, "count": "many"}),
    )
    .expect_err("count");
    assert!(e.message.contains("count"), "{}", e.message);
}
