//! What a write stores: the server-set metadata of a new object, the merge of an update into
//! the stored object (immutable fields, status subresource, generation), the checks.

use super::super::deletion::finish;
use super::super::meta::{now, same_content_except};
use super::super::patch::apply as ssa;
use super::super::patch::track::track_update;
use super::super::schema::Checks;
use super::super::server::ApiServer;
use super::super::status::ApiError;
use super::super::target::Target;
use super::super::{defaults, validate};
use super::{generate_suffix, meta_str, rv_of, spec_changed};
use crate::store::Mutation;
use serde_json::{Value, json};

/// A body may leave the namespace out (the request's is used) but not name another one:
/// upstream's `EnsureObjectNamespaceMatchesRequestNamespace`, on create, update and patch.
pub(super) fn namespace_matches(t: &Target, body_ns: &str) -> Result<(), ApiError> {
    if body_ns.is_empty() || body_ns == t.namespace {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "the namespace of the provided object does not match the namespace sent on the request",
    ))
}

impl ApiServer {
    pub(super) fn ensure_namespace(&self, t: &Target) -> Result<(), ApiError> {
        if !t.info.namespaced {
            return Ok(());
        }
        let Some(ns) = self.store.get_stub("/namespaces", "", &t.namespace) else {
            return Err(ApiError::not_found("namespaces", "", &t.namespace));
        };
        if ns.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} is forbidden: unable to create new content in namespace {} because it is being terminated",
                    t.info.plural, t.namespace
                ),
            ));
        }
        Ok(())
    }

    /// Fills in server-set metadata of a new object and checks it.
    pub(super) fn prepare_create(
        &self,
        t: &Target,
        mut obj: Value,
        manager: &str,
        checks: &mut Checks,
    ) -> Result<Value, ApiError> {
        let info = &t.info;
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} must be a JSON object",
                info.kind
            )));
        }
        if let Some(kind) = obj.get("kind").and_then(Value::as_str)
            && kind != info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} of the object does not match the resource {} (kind {})",
                info.plural, info.kind
            )));
        }
        validate::api_version(info, &t.version, &obj)?;
        validate::metadata(info, &t.version, &obj)?;
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(info.kind);
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if name.is_empty() {
            match meta_str(&obj, "generateName") {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", generate_suffix())
                }
                _ => {
                    return Err(ApiError::invalid(
                        &info.kind,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            }
        }
        validate::name(info, &name)?;
        let body_ns = meta_str(&obj, "namespace").unwrap_or_default().to_string();
        let now = now();
        let meta = obj["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::internal("metadata vanished"))?;
        if info.namespaced {
            namespace_matches(t, &body_ns)?;
            meta.insert("namespace".into(), json!(t.namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("name".into(), json!(name));
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now));
        meta.insert("generation".into(), json!(1));
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ] {
            meta.remove(k);
        }
        defaults::on_create(info, &mut obj)?;
        self.check_object(t, &mut obj, None, checks)?;
        let lk = t.list_kinds();
        let writer = ssa::Writer {
            manager,
            subresource: "",
            api_version: &t.api_version(),
            time: &now,
        };
        track_update(None, &mut obj, &writer, &lk);
        Ok(obj)
    }

    /// Builds the stored object of an update of `cur` to `new` (main resource or status).
    /// `touched`, where known: the only top-level fields in which `new` may differ from `cur`
    /// (a patch's), so the others are not compared.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prepare_update(
        &self,
        t: &Target,
        cur: &Value,
        mut new: Value,
        sub: &str,
        manager: Option<&str>,
        touched: Option<&[String]>,
        checks: &mut Checks,
    ) -> Result<Mutation, ApiError> {
        // The type fields are set by the server on every write (a custom resource's version
        // may change with the request's): never taken as untouched.
        let untouched = |k: &str| {
            k != "apiVersion" && k != "kind" && touched.is_some_and(|t| !t.iter().any(|x| x == k))
        };
        let info = &t.info;
        let name = meta_str(cur, "name").unwrap_or_default().to_string();
        if !new.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} must be a JSON object",
                info.kind
            )));
        }
        validate::api_version(info, &t.version, &new)?;
        if info.namespaced {
            namespace_matches(t, meta_str(&new, "namespace").unwrap_or_default())?;
        }
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && !rv.is_empty()
            && rv != rv_of(cur)
        {
            return Err(ApiError::conflict(
                &info.plural,
                &info.group,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if let Some(n) = meta_str(&new, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let mut out = if sub == "status" {
            // A status write changes the status only: every other field stays as stored
            // (compared before it is copied: they are mostly equal already).
            if let (Some(m), Some(c)) = (new.as_object_mut(), cur.as_object()) {
                m.retain(|k, _| k == "status" || c.contains_key(k));
                for (k, v) in c {
                    if k != "status" && !untouched(k) && m.get(k) != Some(v) {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            new
        } else {
            if info.has_status()
                && let Some(m) = new.as_object_mut()
            {
                match cur.get("status") {
                    Some(s) => {
                        m.insert("status".into(), s.clone());
                    }
                    None => {
                        m.remove("status");
                    }
                }
            }
            if !new.get("metadata").is_some_and(Value::is_object) {
                new["metadata"] = json!({});
            }
            new["apiVersion"] = json!(t.api_version());
            new["kind"] = json!(info.kind);
            let (Some(nm), Some(cm)) =
                (new["metadata"].as_object_mut(), cur["metadata"].as_object())
            else {
                return Err(ApiError::internal(format!(
                    "stored {} {name} has no metadata",
                    info.kind
                )));
            };
            for k in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "managedFields",
            ] {
                match cm.get(k) {
                    Some(v) => nm.insert(k.into(), v.clone()),
                    None => nm.remove(k),
                };
            }
            if cur.pointer("/metadata/deletionTimestamp").is_some() {
                let added = nm
                    .get("finalizers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|f| {
                        !cm.get("finalizers")
                            .and_then(Value::as_array)
                            .is_some_and(|c| c.contains(f))
                    });
                if added {
                    return Err(ApiError::invalid(
                        &info.kind,
                        &name,
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    ));
                }
            }
            defaults::on_update(info, &mut new)?;
            if info.builtin && info.plural == "pods" {
                let old_node = cur
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let new_node = new
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !old_node.is_empty() && old_node != new_node {
                    return Err(ApiError::invalid(
                        "Pod",
                        &name,
                        "spec.nodeName",
                        "field is immutable once set",
                    ));
                }
            }
            new
        };
        // After a status write every other top-level field is the stored one; after a patch,
        // every field it did not name.
        let settled = |k: &str| (sub == "status" && k != "status") || untouched(k);
        self.check_object(t, &mut out, Some((cur, &settled)), checks)?;
        if sub != "status" && spec_changed(info, cur, &out) {
            let g = cur
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            out["metadata"]["generation"] = json!(g + 1);
        }
        if let Some(manager) = manager {
            let time = now();
            let lk = t.list_kinds();
            let writer = ssa::Writer {
                manager,
                subresource: sub,
                api_version: &t.api_version(),
                time: &time,
            };
            track_update(Some(cur), &mut out, &writer, &lk);
        }
        // The metadata is compared: the ownership just recorded is part of the change.
        if same_content_except(cur, &out, &|k| k != "metadata" && settled(k)) {
            return Ok(Mutation::Unchanged);
        }
        Ok(finish(out))
    }
}
