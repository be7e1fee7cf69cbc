use super::super::apply::{Manager, fields_of, read_managers, write_managers};
use super::super::strategic::{ListKind, list_kind};
use super::*;

fn lk(_: &[String], f: &str, s: Option<&Value>) -> ListKind<'static> {
    list_kind(f, s)
}

fn who<'a>(m: &'a str, sub: &'a str, time: &'a str) -> Writer<'a> {
    Writer {
        manager: m,
        subresource: sub,
        api_version: "v1",
        time,
    }
}

/// The definition, spelled out: every leaf of both objects compared, every manager read and
/// written again.
fn by_definition(old: Option<&Value>, new: &mut Value, who: &Writer<'_>) {
    let with_status = who.subresource == "status";
    let mut managers = old.map(read_managers).unwrap_or_default();
    let new_fields = fields_of(new, &lk, with_status);
    let old_fields = old
        .map(|o| fields_of(o, &lk, with_status))
        .unwrap_or_default();
    let changed: FieldSet = new_fields
        .iter()
        .filter(|p| {
            !old_fields.contains(*p) || old.and_then(|o| value_at(o, p)) != value_at(new, p)
        })
        .cloned()
        .collect();
    let gone: FieldSet = old_fields.difference(&new_fields).cloned().collect();
    if changed.is_empty() && gone.is_empty() {
        write_managers(new, &managers);
        return;
    }
    for m in managers.iter_mut() {
        m.fields
            .retain(|p| !changed.contains(p) && !gone.iter().any(|g| p.starts_with(g)));
    }
    let idx = managers
        .iter()
        .position(|m| m.manager == who.manager && !m.apply && m.subresource == who.subresource);
    let entry = match idx {
        Some(i) => &mut managers[i],
        None => {
            managers.push(Manager {
                manager: who.manager.to_string(),
                apply: false,
                subresource: who.subresource.to_string(),
                api_version: who.api_version.to_string(),
                time: String::new(),
                fields: FieldSet::new(),
            });
            let last = managers.len() - 1;
            &mut managers[last]
        }
    };
    entry.fields.extend(changed);
    entry.time = who.time.to_string();
    entry.api_version = who.api_version.to_string();
    write_managers(new, &managers);
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                     "labels": {"app": "a", "tier": "x"}, "annotations": {"note": "1"},
                     "finalizers": ["f/one"]},
        "spec": {"nodeName": "n1", "containers": [
                    {"name": "c", "image": "i:1", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "d", "image": "i:2"}],
                 "tolerations": [{"key": "k", "operator": "Exists"}]},
        "status": {"phase": "Pending", "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "Initialized", "status": "True"}],
                   "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0}]}
    })
}

/// One write after another by several managers, on the main resource and on status: both
/// ways of tracking give the same object, `managedFields` and their order included.
#[test]
fn matches_the_definition_over_a_run_of_writes() {
    type Edit = fn(&mut Value);
    let edits: Vec<(&str, &str, Edit)> = vec![
        ("kubectl", "", |_| {}),
        ("kubelet", "status", |p| {
            p["status"]["phase"] = json!("Running")
        }),
        ("kubelet", "status", |p| {
            p["status"]["conditions"][0]["status"] = json!("True")
        }),
        ("kubelet", "status", |p| {
            p["status"]["containerStatuses"][0]["ready"] = json!(true)
        }),
        // Keyed lists item by item: one added, reordered, one field gone, one removed, a
        // duplicate key and an item without its key (both compared whole).
        ("kubelet", "status", |p| {
            p["status"]["containerStatuses"]
                .as_array_mut()
                .expect("statuses")
                .push(json!({"name": "d", "ready": true, "state": {"running": {"startedAt": "t"}}}))
        }),
        ("kubelet", "status", |p| {
            p["status"]["conditions"]
                .as_array_mut()
                .expect("conditions")
                .reverse();
            p["status"]["containerStatuses"][1]["state"] = json!({"waiting": {"reason": "X"}});
        }),
        ("kubelet", "status", |p| {
            p["status"]["containerStatuses"][0]
                .as_object_mut()
                .expect("status")
                .remove("restartCount");
        }),
        ("other", "status", |p| {
            p["status"]["containerStatuses"]
                .as_array_mut()
                .expect("statuses")
                .remove(0);
        }),
        ("kubelet", "status", |p| {
            p["status"]["conditions"] = json!([
                {"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}])
        }),
        (
            "kubelet",
            "status",
            |p| {
                p["status"]["conditions"] =
                    json!([{"type": "Ready", "status": "True"}, {"status": "x"}])
            },
        ),
        ("kubelet", "status", |p| {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}])
        }),
        ("ctl", "", |p| p["metadata"]["labels"]["tier"] = json!("y")),
        ("ctl", "", |p| {
            p["metadata"]["labels"]
                .as_object_mut()
                .expect("labels")
                .remove("app");
        }),
        ("other", "", |p| {
            p["spec"]["containers"][0]["image"] = json!("i:3")
        }),
        ("other", "", |p| {
            p["spec"]["containers"]
                .as_array_mut()
                .expect("containers")
                .remove(1);
        }),
        ("ctl", "", |p| {
            p["spec"]["containers"][0]["env"] = json!([{"name": "B", "value": "2"}])
        }),
        ("ctl", "", |p| {
            p["metadata"]["finalizers"] = json!(["f/one", "f/two"])
        }),
        ("kubectl", "", |p| p["metadata"]["annotations"] = json!({})),
        ("kubectl", "", |p| {
            p["spec"]
                .as_object_mut()
                .expect("spec")
                .remove("tolerations");
        }),
        ("kubelet", "status", |p| {
            p["status"]["conditions"] = json!([])
        }),
        ("ctl", "", |p| {
            p["spec"]["containers"][0]["ports"] = json!({})
        }),
        ("ctl", "", |p| p["metadata"]["labels"]["app"] = json!("a")),
    ];
    let mut ours = pod();
    track_update(None, &mut ours, &who("kubectl", "", "t0"), &lk);
    let mut theirs = pod();
    by_definition(None, &mut theirs, &who("kubectl", "", "t0"));
    assert_eq!(ours, theirs, "create");
    for (i, (manager, sub, edit)) in edits.into_iter().enumerate() {
        let time = format!("t{}", i + 1);
        let mut a = ours.clone();
        edit(&mut a);
        let mut b = a.clone();
        track_update(Some(&ours), &mut a, &who(manager, sub, &time), &lk);
        by_definition(Some(&theirs), &mut b, &who(manager, sub, &time));
        assert_eq!(a, b, "write {i} by {manager}");
        assert_eq!(
            a.pointer("/metadata/managedFields"),
            b.pointer("/metadata/managedFields"),
            "write {i} by {manager}: managedFields in the same order"
        );
        (ours, theirs) = (a, b);
    }
    let managers: Vec<&str> = ours["metadata"]["managedFields"]
        .as_array()
        .expect("managers")
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"kubelet"), "{managers:?}");
}

/// A write that changes nothing keeps the managers and their times; one that changes only
/// a field its writer already owns moves only the writer's time.
#[test]
fn an_unchanged_write_keeps_times_and_a_repeat_write_moves_only_the_writers() {
    let mut lease =
        json!({"metadata": {"name": "n"}, "spec": {"holderIdentity": "n", "renewTime": "a"}});
    track_update(None, &mut lease, &who("kubelet", "", "t0"), &lk);
    let mut same = lease.clone();
    track_update(Some(&lease), &mut same, &who("kubelet", "", "t1"), &lk);
    assert_eq!(same, lease);
    let mut renewed = lease.clone();
    renewed["spec"]["renewTime"] = json!("b");
    track_update(Some(&lease), &mut renewed, &who("kubelet", "", "t2"), &lk);
    let mf = &renewed["metadata"]["managedFields"];
    assert_eq!(mf.as_array().map(Vec::len), Some(1));
    assert_eq!(mf[0]["time"], "t2");
    assert_eq!(
        mf[0]["fieldsV1"],
        lease["metadata"]["managedFields"][0]["fieldsV1"]
    );
}
