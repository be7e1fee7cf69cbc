//! The writes: create, update, patch (server-side apply is in `apply`), delete, and the pod
//! binding subresource.

use super::super::deletion::delete_decision;
use super::super::meta::now;
use super::super::patch::{self, PatchType};
use super::super::schema::Checks;
use super::super::server::ApiServer;
use super::super::status::ApiError;
use super::super::target::{DeleteOpts, ListOpts, Served, Target};
use super::{meta_str, rv_of};
use crate::store::{Mutation, ObjKey, Stored};
use serde_json::{Value, json};
use std::sync::Arc;

impl ApiServer {
    pub fn create(&self, t: &Target, body: Value, manager: &str) -> Result<Value, ApiError> {
        Ok(self
            .create_checked(t, body, manager, &mut Checks::default())?
            .value())
    }

    /// Create with the request's `fieldValidation`, collecting its warnings.
    pub fn create_checked(
        &self,
        t: &Target,
        body: Value,
        manager: &str,
        checks: &mut Checks,
    ) -> Result<Served, ApiError> {
        self.ensure_namespace(t)?;
        super::super::deletion::refuse_create(self, &t.info)?;
        checks.schema = self.crd_schema(t);
        let obj = self.prepare_create(t, body, manager, checks)?;
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let key = t.key(&name);
        let out = self.store.create(&key, obj, || {
            ApiError::already_exists(&t.info.plural, &t.info.group, &name)
        })?;
        self.after_write(t);
        match out {
            Some(o) => Ok(t.served(Some(o))),
            None => Err(ApiError::internal("create stored nothing")),
        }
    }

    /// PUT of the object or its status. Returns the stored object.
    pub fn update(
        &self,
        t: &Target,
        name: &str,
        sub: &str,
        body: Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        Ok(self
            .update_checked(t, name, sub, body, manager, &mut Checks::default())?
            .value())
    }

    /// Update with the request's `fieldValidation`, collecting its warnings.
    pub fn update_checked(
        &self,
        t: &Target,
        name: &str,
        sub: &str,
        body: Value,
        manager: &str,
        checks: &mut Checks,
    ) -> Result<Served, ApiError> {
        checks.schema = self.crd_schema(t);
        if t.info.namespaced {
            let ns = super::meta_str(&body, "namespace").unwrap_or_default();
            super::prepare::namespace_matches(t, ns)?;
        }
        let out = self.guaranteed_write(&t.key(name), checks, |cur, checks| match cur {
            None => Err(t.not_found(name)),
            Some(cur) => {
                self.prepare_update(t, cur, body.clone(), sub, Some(manager), None, checks)
            }
        })?;
        self.after_write(t);
        Ok(t.served(out))
    }

    /// PATCH of the object or its status; server-side apply creates missing objects.
    /// Returns the object and whether it was created.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        t: &Target,
        name: &str,
        sub: &str,
        kind: PatchType,
        body: &[u8],
        manager: Option<&str>,
        force: bool,
    ) -> Result<(Value, bool), ApiError> {
        let mut checks = Checks::default();
        let (out, created) =
            self.patch_checked(t, name, sub, kind, body, manager, force, &mut checks)?;
        Ok((out.value(), created))
    }

    /// Patch with the request's `fieldValidation`, collecting its warnings.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_checked(
        &self,
        t: &Target,
        name: &str,
        sub: &str,
        kind: PatchType,
        body: &[u8],
        manager: Option<&str>,
        force: bool,
        checks: &mut Checks,
    ) -> Result<(Served, bool), ApiError> {
        let what = format!("{} {name}", t.info.kind);
        checks.schema = self.crd_schema(t);
        if kind == PatchType::Strategic && !t.info.builtin {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json (custom resources take merge, JSON or apply patches)",
            ));
        }
        if kind == PatchType::Apply {
            return self.server_side_apply(t, name, sub, body, manager, force, &what, checks);
        }
        let touched = patch::top_level_fields(kind, body);
        let out = self.guaranteed_write(&t.key(name), checks, |cur, checks| {
            let Some(cur) = cur else {
                return Err(t.not_found(name));
            };
            let patched = patch::apply_simple(kind, cur, body, &what)?;
            // The patched object must still be this one (upstream's `checkName`): a
            // strategic `{"$patch": "delete"}` or a patch removing the name leaves none.
            let patched_name = super::meta_str(&patched, "name").unwrap_or_default();
            if patched_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({patched_name}) does not match the name on the URL ({name})"
                )));
            }
            let manager = manager.unwrap_or("unknown");
            let touched = touched.as_deref();
            self.prepare_update(t, cur, patched, sub, Some(manager), touched, checks)
        })?;
        self.after_write(t);
        Ok((t.served(out), false))
    }

    /// DELETE. Returns the object as it was removed, or as it now waits for finalizers.
    pub fn delete(&self, t: &Target, name: &str, opts: &DeleteOpts) -> Result<Value, ApiError> {
        let info = t.info.clone();
        let out = self.store.mutate(&t.key(name), |cur, _| {
            let Some(cur) = cur else { return Err(t.not_found(name)) };
            if let Some(uid) = &opts.uid
                && Some(uid.as_str()) != meta_str(cur, "uid")
            {
                return Err(ApiError::conflict(&info.plural, &info.group, name, &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", meta_str(cur, "uid").unwrap_or_default())));
            }
            if let Some(rv) = &opts.resource_version
                && rv != rv_of(cur)
            {
                return Err(ApiError::conflict(&info.plural, &info.group, name, &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", rv_of(cur))));
            }
            Ok(delete_decision(&info, cur, opts))
        })?;
        if info.builtin && info.plural == "customresourcedefinitions" {
            self.after_write(t);
        }
        Ok(t.served(out).value())
    }

    /// Deletes every object a list with `opts` would return.
    pub fn delete_collection(
        &self,
        t: &Target,
        list: &ListOpts,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let items = self.list(
            t,
            &ListOpts {
                limit: None,
                continue_token: None,
                ..list.clone()
            },
        )?;
        let mut deleted = Vec::new();
        for item in items["items"].as_array().into_iter().flatten() {
            let name = meta_str(item, "name").unwrap_or_default();
            let mut tt = t.clone();
            tt.namespace = meta_str(item, "namespace").unwrap_or_default().to_string();
            match self.delete(&tt, name, opts) {
                Ok(o) => deleted.push(o),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let mut out = items;
        out["items"] = Value::Array(deleted);
        Ok(out)
    }

    /// pods/binding: sets spec.nodeName once (and merges the Binding's annotations).
    pub fn bind(&self, t: &Target, pod: &str, binding: &Value) -> Result<(), ApiError> {
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "Binding",
                pod,
                "target.name",
                "Required value",
            ));
        }
        self.store.guaranteed_update(&t.key(pod), |cur| {
            let Some(cur) = cur else { return Err(t.not_found(pod)) };
            if cur.pointer("/metadata/deletionTimestamp").is_some() {
                return Err(ApiError::conflict("pods", "", pod, "the pod is being deleted"));
            }
            if let Some(bound) = cur.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                return Err(ApiError::conflict("pods", "", pod, &format!("pod {pod} is already assigned to node {bound:?}")));
            }
            let mut obj = (**cur).clone();
            obj["spec"]["nodeName"] = json!(node);
            // As the API server does: the Binding's annotations are merged into the pod's.
            if let Some(ann) = binding.pointer("/metadata/annotations").and_then(Value::as_object) {
                if !obj["metadata"]["annotations"].is_object() {
                    obj["metadata"]["annotations"] = json!({});
                }
                for (k, v) in ann {
                    obj["metadata"]["annotations"][k] = v.clone();
                }
            }
            let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()});
            let conds = obj["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
            conds.push(cond);
            obj["status"]["conditions"] = Value::Array(conds);
            Ok(Mutation::Put(obj))
        })?;
        Ok(())
    }

    /// `Store::guaranteed_update` for a request's write: every try starts from the warnings
    /// the request had before it, so a decision taken again does not report them twice.
    pub(super) fn guaranteed_write(
        &self,
        key: &ObjKey,
        checks: &mut Checks,
        mut f: impl FnMut(Option<&Arc<Value>>, &mut Checks) -> Result<Mutation, ApiError>,
    ) -> Result<Option<Stored>, ApiError> {
        let before = checks.warnings.len();
        self.store.guaranteed_update(key, |cur| {
            checks.warnings.truncate(before);
            f(cur, checks)
        })
    }

    /// Re-reads CRDs after a write to them, so new custom resources are served at once.
    pub(super) fn after_write(&self, t: &Target) {
        if t.info.builtin && t.info.plural == "customresourcedefinitions" {
            self.refresh_crds();
        }
    }
}
