//! What a delete does to a stored object: finalizers, graceful pod deletion, namespaces, and
//! CRDs (which wait, Terminating, until the garbage collector has deleted their objects).

use super::meta::{CRD_CLEANUP, FOREGROUND, ORPHAN, same_content};
use super::resources::ResourceInfo;
use super::target::DeleteOpts;
use crate::store::Mutation;
use serde_json::{Value, json};

/// What a delete does to `cur`: mark it deleting (finalizers, graceful pods,
/// namespaces) or remove it.
pub fn delete_decision(info: &ResourceInfo, cur: &Value, opts: &DeleteOpts) -> Mutation {
    let mut obj = cur.clone();
    let mut finalizers: Vec<Value> = cur
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match opts.propagation.as_deref() {
        Some("Foreground") if !finalizers.contains(&json!(FOREGROUND)) => {
            finalizers.push(json!(FOREGROUND))
        }
        Some("Orphan") if !finalizers.contains(&json!(ORPHAN)) => finalizers.push(json!(ORPHAN)),
        _ => {}
    }
    let deleting = cur.pointer("/metadata/deletionTimestamp").is_some();
    let is_crd = info.builtin && info.plural == "customresourcedefinitions";
    if is_crd && !deleting {
        // As apiextensions-apiserver: the cleanup finalizer holds the CRD until the garbage
        // collector has deleted every custom object, so none comes back with a new CRD.
        if !finalizers.contains(&json!(CRD_CLEANUP)) {
            finalizers.push(json!(CRD_CLEANUP));
        }
        set_terminating(&mut obj);
    }
    let is_pod = info.builtin && info.plural == "pods";
    let phase = cur
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let bound = cur
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let grace = opts
        .grace_seconds
        .or_else(|| {
            cur.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    let graceful = is_pod && bound && grace > 0 && phase != "Succeeded" && phase != "Failed";
    let is_ns = info.builtin && info.plural == "namespaces";
    if finalizers.is_empty() && !graceful && !is_ns {
        return Mutation::Delete(obj);
    }
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Mutation::Delete(obj);
    };
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    if !deleting {
        let when = chrono::Utc::now() + chrono::Duration::seconds(if graceful { grace } else { 0 });
        meta.insert(
            "deletionTimestamp".into(),
            json!(when.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
        meta.insert(
            "deletionGracePeriodSeconds".into(),
            json!(if graceful { grace } else { 0 }),
        );
    } else if graceful {
        // A second delete may only shorten the grace period.
        let cur_grace = meta
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(grace);
        if grace < cur_grace {
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
    }
    if is_ns {
        obj["status"]["phase"] = json!("Terminating");
    }
    if same_content(cur, &obj) {
        Mutation::Unchanged
    } else {
        Mutation::Put(obj)
    }
}

/// The CRD's `Terminating` condition, as its first delete sets it.
fn set_terminating(crd: &mut Value) {
    let cond = json!({"type": "Terminating", "status": "True", "reason": "InstanceDeletionPending",
        "message": "CustomResourceDefinition marked for deletion; instance deletion pending",
        "lastTransitionTime": super::meta::now()});
    let Some(status) = crd
        .as_object_mut()
        .map(|o| o.entry("status").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if let Some(list) = list.as_array_mut() {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
        list.push(cond);
    }
}

/// A create of a custom object whose CRD is being deleted, refused as the real server does.
pub fn refuse_create(
    srv: &super::server::ApiServer,
    info: &ResourceInfo,
) -> Result<(), super::status::ApiError> {
    let Some(crd) = info.crd.as_deref() else {
        return Ok(());
    };
    let terminating = srv
        .store
        .get("apiextensions.k8s.io/customresourcedefinitions", "", crd)
        .is_some_and(|c| c.pointer("/metadata/deletionTimestamp").is_some());
    if terminating {
        return Err(super::status::ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    Ok(())
}

/// An update of an object being deleted whose last finalizer went away removes it.
pub(crate) fn finish(obj: Value) -> Mutation {
    let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
    let finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let is_ns = obj.get("kind").and_then(Value::as_str) == Some("Namespace")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1");
    let graceful_pod = obj.get("kind").and_then(Value::as_str) == Some("Pod")
        && obj
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            > 0;
    if deleting && !finalizers && !is_ns && !graceful_pod {
        Mutation::Delete(obj)
    } else {
        Mutation::Put(obj)
    }
}
