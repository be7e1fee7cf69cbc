//! Columns and cells of the built-in kinds, after Kubernetes' own printers
//! (`pkg/printers/internalversion/printers.go`): the same column names, wide-only columns at
//! priority 1, and the same derived values (a pod's STATUS and READY, a node's STATUS and
//! ROLES, an event's OBJECT …).

use super::cells::{Column, age_of, human_duration, name_of, since};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

fn cols(spec: &[(&str, &'static str, i64)]) -> Vec<Column> {
    spec.iter().map(|(n, k, p)| Column::new(n, k, *p)).collect()
}

const S: &str = "string";
const I: &str = "integer";

pub fn columns(group: &str, plural: &str) -> Option<Vec<Column>> {
    Some(cols(match (group, plural) {
        ("", "pods") => &[
            ("Name", S, 0),
            ("Ready", S, 0),
            ("Status", S, 0),
            ("Restarts", S, 0),
            ("Age", S, 0),
            ("IP", S, 1),
            ("Node", S, 1),
            ("Nominated Node", S, 1),
            ("Readiness Gates", S, 1),
        ],
        ("", "nodes") => &[
            ("Name", S, 0),
            ("Status", S, 0),
            ("Roles", S, 0),
            ("Age", S, 0),
            ("Version", S, 0),
            ("Internal-IP", S, 1),
            ("External-IP", S, 1),
            ("OS-Image", S, 1),
            ("Kernel-Version", S, 1),
            ("Container-Runtime", S, 1),
        ],
        ("", "events") => &[
            ("Last Seen", S, 0),
            ("Type", S, 0),
            ("Reason", S, 0),
            ("Object", S, 0),
            ("Subobject", S, 1),
            ("Source", S, 1),
            ("Message", S, 0),
            ("First Seen", S, 1),
            ("Count", S, 1),
            ("Name", S, 1),
        ],
        ("", "namespaces") => &[("Name", S, 0), ("Status", S, 0), ("Age", S, 0)],
        ("", "configmaps") => &[("Name", S, 0), ("Data", I, 0), ("Age", S, 0)],
        ("", "secrets") => &[
            ("Name", S, 0),
            ("Type", S, 0),
            ("Data", I, 0),
            ("Age", S, 0),
        ],
        ("", "serviceaccounts") => &[("Name", S, 0), ("Secrets", I, 0), ("Age", S, 0)],
        ("", "services") => &[
            ("Name", S, 0),
            ("Type", S, 0),
            ("Cluster-IP", S, 0),
            ("External-IP", S, 0),
            ("Port(s)", S, 0),
            ("Age", S, 0),
            ("Selector", S, 1),
        ],
        ("apps", "deployments") => &[
            ("Name", S, 0),
            ("Ready", S, 0),
            ("Up-to-date", I, 0),
            ("Available", I, 0),
            ("Age", S, 0),
            ("Containers", S, 1),
            ("Images", S, 1),
            ("Selector", S, 1),
        ],
        ("apps", "daemonsets") => &[
            ("Name", S, 0),
            ("Desired", I, 0),
            ("Current", I, 0),
            ("Ready", I, 0),
            ("Up-to-date", I, 0),
            ("Available", I, 0),
            ("Node Selector", S, 0),
            ("Age", S, 0),
            ("Containers", S, 1),
            ("Images", S, 1),
            ("Selector", S, 1),
        ],
        ("apps", "replicasets") => &[
            ("Name", S, 0),
            ("Desired", I, 0),
            ("Current", I, 0),
            ("Ready", I, 0),
            ("Age", S, 0),
            ("Containers", S, 1),
            ("Images", S, 1),
            ("Selector", S, 1),
        ],
        ("batch", "jobs") => &[
            ("Name", S, 0),
            ("Status", S, 0),
            ("Completions", S, 0),
            ("Duration", S, 0),
            ("Age", S, 0),
            ("Containers", S, 1),
            ("Images", S, 1),
            ("Selector", S, 1),
        ],
        ("coordination.k8s.io", "leases") => &[("Name", S, 0), ("Holder", S, 0), ("Age", S, 0)],
        ("scheduling.k8s.io", "priorityclasses") => &[
            ("Name", S, 0),
            ("Value", I, 0),
            ("Global-Default", "boolean", 0),
            ("Age", S, 0),
            ("PreemptionPolicy", S, 0),
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            &[("Name", S, 0), ("Created At", "date", 0)]
        }
        _ => return None,
    }))
}

fn str_at<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn int_at(o: &Value, p: &str) -> i64 {
    o.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn arr<'a>(o: &'a Value, p: &str) -> &'a [Value] {
    o.pointer(p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn none_if_empty(s: String) -> Value {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.into()
    }
}

fn labels_text(m: Option<&Value>) -> String {
    m.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `Containers`, `Images` and `Selector` of a workload's pod template.
fn workload_wide(o: &Value) -> [Value; 3] {
    let cs = arr(o, "/spec/template/spec/containers");
    let join = |k: &str| {
        cs.iter()
            .map(|c| str_at(c, &format!("/{k}")).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    [
        none_if_empty(join("name")),
        none_if_empty(join("image")),
        none_if_empty(labels_text(o.pointer("/spec/selector/matchLabels"))),
    ]
}

pub fn cells(group: &str, plural: &str, o: &Value, now: DateTime<Utc>) -> Option<Vec<Value>> {
    let name = name_of(o);
    let age = age_of(o, now);
    Some(match (group, plural) {
        ("", "pods") => pod_cells(o, now),
        ("", "nodes") => node_cells(o, now),
        ("", "events") => event_cells(o, now),
        ("", "namespaces") => vec![name, str_at(o, "/status/phase").into(), age],
        ("", "configmaps") => {
            let n = ["data", "binaryData"]
                .iter()
                .filter_map(|k| o.get(*k).and_then(Value::as_object))
                .map(|m| m.len())
                .sum::<usize>();
            vec![name, json!(n), age]
        }
        ("", "secrets") => {
            let n = ["data", "stringData"]
                .iter()
                .filter_map(|k| o.get(*k).and_then(Value::as_object))
                .map(|m| m.len())
                .sum::<usize>();
            vec![name, str_at(o, "/type").into(), json!(n), age]
        }
        ("", "serviceaccounts") => vec![name, json!(arr(o, "/secrets").len()), age],
        ("", "services") => {
            let ports = arr(o, "/spec/ports")
                .iter()
                .map(|p| {
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) => format!("{}:{np}/{proto}", int_at(p, "/port")),
                        None => format!("{}/{proto}", int_at(p, "/port")),
                    }
                })
                .collect::<Vec<_>>()
                .join(",");
            let ty = o
                .pointer("/spec/type")
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP");
            vec![
                name,
                ty.into(),
                none_if_empty(str_at(o, "/spec/clusterIP").to_string()),
                "<none>".into(),
                none_if_empty(ports),
                age,
                none_if_empty(labels_text(o.pointer("/spec/selector"))),
            ]
        }
        ("apps", "deployments") => {
            let [c, i, s] = workload_wide(o);
            vec![
                name,
                format!(
                    "{}/{}",
                    int_at(o, "/status/readyReplicas"),
                    o.pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                )
                .into(),
                json!(int_at(o, "/status/updatedReplicas")),
                json!(int_at(o, "/status/availableReplicas")),
                age,
                c,
                i,
                s,
            ]
        }
        ("apps", "daemonsets") => {
            let [c, i, s] = workload_wide(o);
            vec![
                name,
                json!(int_at(o, "/status/desiredNumberScheduled")),
                json!(int_at(o, "/status/currentNumberScheduled")),
                json!(int_at(o, "/status/numberReady")),
                json!(int_at(o, "/status/updatedNumberScheduled")),
                json!(int_at(o, "/status/numberAvailable")),
                none_if_empty(labels_text(o.pointer("/spec/template/spec/nodeSelector"))),
                age,
                c,
                i,
                s,
            ]
        }
        ("apps", "replicasets") => {
            let [c, i, s] = workload_wide(o);
            vec![
                name,
                json!(
                    o.pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                ),
                json!(int_at(o, "/status/replicas")),
                json!(int_at(o, "/status/readyReplicas")),
                age,
                c,
                i,
                s,
            ]
        }
        ("batch", "jobs") => job_cells(o, now),
        ("coordination.k8s.io", "leases") => vec![
            name,
            none_if_empty(str_at(o, "/spec/holderIdentity").to_string()),
            age,
        ],
        ("scheduling.k8s.io", "priorityclasses") => vec![
            name,
            json!(int_at(o, "/value")),
            json!(
                o.get("globalDefault")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            age,
            o.get("preemptionPolicy")
                .and_then(Value::as_str)
                .unwrap_or("PreemptLowerPriority")
                .into(),
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => vec![
            name,
            o.pointer("/metadata/creationTimestamp")
                .cloned()
                .unwrap_or(Value::Null),
        ],
        _ => return None,
    })
}

/// READY, STATUS and RESTARTS as `printPod` derives them.
fn pod_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut reason = match str_at(o, "/status/reason") {
        "" => str_at(o, "/status/phase").to_string(),
        r => r.to_string(),
    };
    let total = arr(o, "/spec/containers").len();
    let mut restarts = 0;
    let mut last_restart: Option<String> = None;
    let mut ready = 0;
    let mut initializing = false;
    let inits = arr(o, "/status/initContainerStatuses");
    for (i, c) in inits.iter().enumerate() {
        restarts += int_at(c, "/restartCount");
        let term = c.pointer("/state/terminated");
        let waiting = str_at(c, "/state/waiting/reason");
        if term.is_some_and(|t| int_at(t, "/exitCode") == 0) {
            continue;
        }
        reason = match term {
            Some(t) if !str_at(t, "/reason").is_empty() => format!("Init:{}", str_at(t, "/reason")),
            Some(t) => format!("Init:ExitCode:{}", int_at(t, "/exitCode")),
            None if !waiting.is_empty() && waiting != "PodInitializing" => {
                format!("Init:{waiting}")
            }
            None => format!("Init:{i}/{}", arr(o, "/spec/initContainers").len()),
        };
        initializing = true;
        break;
    }
    if !initializing {
        restarts = 0;
        let mut running = false;
        for c in arr(o, "/status/containerStatuses").iter().rev() {
            restarts += int_at(c, "/restartCount");
            if let Some(f) = c
                .pointer("/lastState/terminated/finishedAt")
                .and_then(Value::as_str)
                && last_restart.as_deref().is_none_or(|l| f > l)
            {
                last_restart = Some(f.to_string());
            }
            let waiting = str_at(c, "/state/waiting/reason");
            let term = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = term {
                reason = match (str_at(t, "/reason"), int_at(t, "/signal")) {
                    ("", 0) => format!("ExitCode:{}", int_at(t, "/exitCode")),
                    ("", s) => format!("Signal:{s}"),
                    (r, _) => r.to_string(),
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = arr(o, "/status/conditions")
                .iter()
                .any(|c| str_at(c, "/type") == "Ready" && str_at(c, "/status") == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if str_at(o, "/status/reason") == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    let restarts = match last_restart {
        Some(t) if restarts > 0 => format!(
            "{restarts} ({} ago)",
            since(Some(&Value::String(t)), now).as_str().unwrap_or("?")
        ),
        _ => restarts.to_string(),
    };
    let gates = arr(o, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let met = gates
            .iter()
            .filter(|g| {
                arr(o, "/status/conditions").iter().any(|c| {
                    str_at(c, "/type") == str_at(g, "/conditionType")
                        && str_at(c, "/status") == "True"
                })
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        name_of(o),
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts.into(),
        age_of(o, now),
        none_if_empty(str_at(o, "/status/podIP").to_string()),
        none_if_empty(str_at(o, "/spec/nodeName").to_string()),
        none_if_empty(str_at(o, "/status/nominatedNodeName").to_string()),
        gates.into(),
    ]
}

fn node_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut status: Vec<String> = arr(o, "/status/conditions")
        .iter()
        .filter(|c| str_at(c, "/type") == "Ready")
        .map(|c| match str_at(c, "/status") {
            "True" => "Ready".to_string(),
            _ => "NotReady".to_string(),
        })
        .take(1)
        .collect();
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                    Some(r) if !r.is_empty() => Some(r.to_string()),
                    _ if k == "kubernetes.io/role" => v.as_str().map(str::to_string),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    let addr = |ty: &str| {
        arr(o, "/status/addresses")
            .iter()
            .find(|a| str_at(a, "/type") == ty)
            .map(|a| str_at(a, "/address").to_string())
            .unwrap_or_default()
    };
    vec![
        name_of(o),
        status.join(",").into(),
        none_if_empty(roles.join(",")),
        age_of(o, now),
        str_at(o, "/status/nodeInfo/kubeletVersion").into(),
        none_if_empty(addr("InternalIP")),
        none_if_empty(addr("ExternalIP")),
        none_if_empty(str_at(o, "/status/nodeInfo/osImage").to_string()),
        none_if_empty(str_at(o, "/status/nodeInfo/kernelVersion").to_string()),
        none_if_empty(str_at(o, "/status/nodeInfo/containerRuntimeVersion").to_string()),
    ]
}

fn event_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let first = [
        "/firstTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
    let last = ["/lastTimestamp", "/series/lastObservedTime", "/eventTime"]
        .iter()
        .find_map(|p| o.pointer(p).filter(|v| v.is_string()))
        .or(first);
    let source = [
        str_at(o, "/source/component"),
        str_at(o, "/reportingComponent"),
    ]
    .into_iter()
    .find(|s| !s.is_empty())
    .unwrap_or_default();
    let source = match str_at(o, "/source/host") {
        "" => source.to_string(),
        host => format!("{source}, {host}"),
    };
    vec![
        since(last, now),
        str_at(o, "/type").into(),
        str_at(o, "/reason").into(),
        format!(
            "{}/{}",
            str_at(o, "/involvedObject/kind").to_lowercase(),
            str_at(o, "/involvedObject/name")
        )
        .into(),
        str_at(o, "/involvedObject/fieldPath").into(),
        source.into(),
        str_at(o, "/message").trim().into(),
        since(first, now),
        int_at(o, "/count").max(1).to_string().into(),
        name_of(o),
    ]
}

fn job_cells(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let cond = |t: &str| {
        arr(o, "/status/conditions")
            .iter()
            .any(|c| str_at(c, "/type") == t && str_at(c, "/status") == "True")
    };
    let status = [
        "Complete",
        "Failed",
        "SuccessCriteriaMet",
        "FailureTarget",
        "Suspended",
    ]
    .into_iter()
    .find(|t| cond(t))
    .unwrap_or("Running");
    let succeeded = int_at(o, "/status/succeeded");
    let completions = match o.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match o.pointer("/spec/parallelism").and_then(Value::as_i64) {
            Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let ts = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let duration = match (ts("/status/startTime"), ts("/status/completionTime")) {
        (Some(s), Some(c)) => human_duration(c - s),
        (Some(s), None) => human_duration(now - s),
        _ => String::new(),
    };
    let [c, i, s] = workload_wide(o);
    vec![
        name_of(o),
        status.into(),
        completions.into(),
        duration.into(),
        age_of(o, now),
        c,
        i,
        s,
    ]
}

#[cfg(test)]
mod tests;
