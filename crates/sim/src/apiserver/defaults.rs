//! Per-type behaviour on create and update: defaults and CRD status.

use super::resources::ResourceInfo;
use super::status::ApiError;
use serde_json::{Value, json};

/// Type-specific state on create (after generic metadata is set).
pub fn on_create(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    if info.has_status()
        && !matches!(info.plural.as_str(), "nodes" | "customresourcedefinitions")
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    if !info.builtin {
        return Ok(());
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        ("", "pods") => {
            let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
            if let Some(spec) = spec {
                for (k, v) in [
                    ("schedulerName", json!("default-scheduler")),
                    ("restartPolicy", json!("Always")),
                    ("terminationGracePeriodSeconds", json!(30)),
                    ("dnsPolicy", json!("ClusterFirst")),
                    ("serviceAccountName", json!("default")),
                    ("priority", json!(0)),
                ] {
                    spec.entry(k).or_insert(v);
                }
            }
            // The DefaultTolerationSeconds admission plugin.
            if let Some(spec) = obj.get_mut("spec") {
                crate::controllers::node_lifecycle::add_default_tolerations(spec);
            }
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        ("", "services") => service_ip(obj),
        ("apps", "deployments" | "replicasets" | "statefulsets") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.entry("replicas").or_insert(json!(1));
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_status(obj)?,
        _ => {}
    }
    Ok(())
}

/// A Service gets its type (`ClusterIP`) and a cluster IP from 10.96.0.0/16, as the real
/// allocator gives one (helm's `--wait` waits for it). The address is derived from the uid, so
/// two Services share one only by a hash collision (one in 65,000 pairs); headless (`None`)
/// and `ExternalName` Services get none.
fn service_ip(obj: &mut Value) {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let ty = spec
        .entry("type")
        .or_insert(json!("ClusterIP"))
        .as_str()
        .unwrap_or_default()
        .to_string();
    let given = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .is_some_and(|ip| !ip.is_empty());
    if ty == "ExternalName" || given {
        return;
    }
    let h = uid.bytes().fold(0xcbf2_9ce4_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    // .0.0 and .0.1 (the `kubernetes` Service) are never handed out.
    let n = 2 + h % (65_536 - 2);
    let ip = format!("10.96.{}.{}", n / 256, n % 256);
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
}

/// Type-specific state on update of the main resource.
pub fn on_update(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    if info.builtin && info.plural == "customresourcedefinitions" {
        crd_status(obj)?;
    }
    Ok(())
}

/// A CRD is served as soon as it is stored: its names are accepted and it is Established.
fn crd_status(crd: &mut Value) -> Result<(), ApiError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(info) = super::resources::from_crd(crd) else {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            &name,
            "spec",
            "spec.group, spec.names.kind, spec.names.plural and at least one served version are required",
        ));
    };
    let want = format!("{}.{}", info.plural, info.group);
    if name != want {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            &name,
            "metadata.name",
            &format!("must be spec.names.plural+\".\"+spec.group ({want})"),
        ));
    }
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    // Keep the transition time of conditions that are already True (no-op updates stay no-ops).
    let now = crd
        .pointer("/status/conditions/0/lastTransitionTime")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(super::meta::now);
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(info.singular);
    }
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{}List", info.kind));
    }
    crd["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": storage,
    });
    Ok(())
}
