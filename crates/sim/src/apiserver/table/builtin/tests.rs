use super::*;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T01:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

#[test]
fn pod_status_ready_and_restarts_follow_print_pod() {
    let pod = json!({
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:55:00Z"},
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
            {"name": "b", "ready": false, "restartCount": 3,
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 2, "finishedAt": "2026-01-01T00:59:00Z"}}}
        ]}
    });
    let c = pod_cells(&pod, now());
    assert_eq!(c[1], "1/2");
    assert_eq!(c[2], "CrashLoopBackOff");
    assert_eq!(c[3], "3 (60s ago)");
    assert_eq!(c[4], "5m");
    assert_eq!(c[5], "10.0.0.5");
    assert_eq!(c[6], "n1");
    let mut gone = pod.clone();
    gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:59:59Z");
    assert_eq!(pod_cells(&gone, now())[2], "Terminating");
    let pending = json!({"metadata": {"name": "q"}, "spec": {"containers": [{}]},
                         "status": {"phase": "Pending"}});
    let c = pod_cells(&pending, now());
    assert_eq!(
        (c[1].as_str(), c[2].as_str(), c[3].as_str()),
        (Some("0/1"), Some("Pending"), Some("0"))
    );
}

#[test]
fn node_status_and_roles() {
    let node = json!({
        "metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": "",
                                              "node-role.kubernetes.io/gpu": ""}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "nodeInfo": {"kubeletVersion": "v1.32.0"}}
    });
    let c = node_cells(&node, now());
    assert_eq!(c[1], "Ready,SchedulingDisabled");
    assert_eq!(c[2], "control-plane,gpu");
    assert_eq!(c[4], "v1.32.0");
    let bare = json!({"metadata": {"name": "m"}, "status": {}});
    assert_eq!(node_cells(&bare, now())[1], "Unknown");
    assert_eq!(node_cells(&bare, now())[2], "<none>");
}

#[test]
fn event_object_is_lowercase_kind_slash_name() {
    let ev = json!({"metadata": {"name": "e"}, "type": "Warning", "reason": "XID",
                    "involvedObject": {"kind": "Node", "name": "gpu-1"},
                    "lastTimestamp": "2026-01-01T00:58:00Z", "message": "GPU 0 fell off\n"});
    let c = event_cells(&ev, now());
    assert_eq!(c[0], "2m");
    assert_eq!(c[3], "node/gpu-1");
    assert_eq!(c[6], "GPU 0 fell off");
    assert_eq!(c.len(), columns("", "events").unwrap().len());
}

#[test]
fn every_builtin_row_matches_its_columns() {
    let o = json!({"metadata": {"name": "x"}});
    for (g, p) in [
        ("", "pods"),
        ("", "nodes"),
        ("", "events"),
        ("", "namespaces"),
        ("", "configmaps"),
        ("", "secrets"),
        ("", "serviceaccounts"),
        ("", "services"),
        ("apps", "deployments"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("coordination.k8s.io", "leases"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ] {
        assert_eq!(
            cells(g, p, &o, now()).unwrap().len(),
            columns(g, p).unwrap().len(),
            "{g}/{p}"
        );
    }
    assert!(columns("", "widgets").is_none());
}
