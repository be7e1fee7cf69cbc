//! The verbs on objects: create, get, list, update, patch, delete, plus the pod
//! subresources binding and eviction. HTTP-free so controllers can call them too.

pub use super::deletion::delete_decision;
use super::deletion::finish;
use super::paging::{decode_continue, encode_continue};
use super::patch::{self, PatchType, apply as ssa, strategic::ListKind};
use super::resources::ResourceInfo;
use super::schema::Checks;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::{ApiServer, defaults, now, validate};
use crate::store::{Mutation, ObjKey};
use serde_json::{Value, json};
use std::sync::Arc;

/// Which resource, in which version and namespace ("" for cluster scope) a verb acts on.
#[derive(Clone)]
pub struct Target {
    pub info: Arc<ResourceInfo>,
    pub version: String,
    pub namespace: String,
}

impl Target {
    pub fn key(&self, name: &str) -> ObjKey {
        ObjKey {
            gr: self.info.gr(),
            namespace: self.namespace.clone(),
            name: name.to_string(),
        }
    }
    fn api_version(&self) -> String {
        self.info.api_version(&self.version)
    }
    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.info.plural, &self.info.group, name)
    }
    /// The object as served in the requested version.
    pub fn present(&self, obj: &Value) -> Value {
        let mut out = obj.clone();
        if !self.info.builtin {
            out["apiVersion"] = json!(self.api_version());
        }
        out
    }
    fn list_kinds(&self) -> impl Fn(&[String], &str, Option<&Value>) -> ListKind<'static> + '_ {
        let builtin = self.info.builtin;
        move |path: &[String], field: &str, sample: Option<&Value>| {
            if builtin || path.first().map(String::as_str) == Some("f:metadata") {
                patch::strategic::list_kind(field, sample)
            } else {
                ListKind::Atomic
            }
        }
    }
}

/// Options of a delete (query parameters or a DeleteOptions body).
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub propagation: Option<String>,
    pub grace_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOpts {
    pub fn from_body(body: &Value) -> Self {
        Self {
            propagation: body
                .get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string),
            grace_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
            uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

/// Options of a list.
#[derive(Debug, Default, Clone)]
pub struct ListOpts {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

fn meta_str<'v>(obj: &'v Value, field: &str) -> Option<&'v str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn rv_of(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or_default()
}

fn generate_suffix() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Compares two objects ignoring resourceVersion and managedFields timestamps.
pub(crate) fn same_content(a: &Value, b: &Value) -> bool {
    fn scrub(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            if let Some(Value::Array(mf)) = meta.get_mut("managedFields") {
                for e in mf.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
        }
        v
    }
    scrub(a) == scrub(b)
}

/// The parts of an object whose change bumps `metadata.generation`.
fn spec_part(info: &ResourceInfo, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if info.has_status() {
            m.remove("status");
        }
    }
    v
}

impl ApiServer {
    fn ensure_namespace(&self, t: &Target) -> Result<(), ApiError> {
        if !t.info.namespaced {
            return Ok(());
        }
        let Some(ns) = self.store.get("/namespaces", "", &t.namespace) else {
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
    fn prepare_create(
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
            if !body_ns.is_empty() && body_ns != t.namespace {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({})",
                    t.namespace
                )));
            }
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
        self.check_object(t, &mut obj, checks)?;
        let lk = t.list_kinds();
        let writer = ssa::Writer {
            manager,
            subresource: "",
            api_version: &t.api_version(),
            time: &now,
        };
        ssa::track_update(None, &mut obj, &writer, &lk);
        Ok(obj)
    }

    /// Builds the stored object of an update of `cur` to `new` (main resource or status).
    fn prepare_update(
        &self,
        t: &Target,
        cur: &Value,
        mut new: Value,
        sub: &str,
        manager: Option<&str>,
        checks: &mut Checks,
    ) -> Result<Mutation, ApiError> {
        let info = &t.info;
        let name = meta_str(cur, "name").unwrap_or_default().to_string();
        if !new.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} must be a JSON object",
                info.kind
            )));
        }
        validate::api_version(info, &t.version, &new)?;
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
            let mut o = cur.clone();
            match new.get("status") {
                Some(s) => o["status"] = s.clone(),
                None => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            o
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
        self.check_object(t, &mut out, checks)?;
        if spec_part(info, cur) != spec_part(info, &out) {
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
            ssa::track_update(Some(cur), &mut out, &writer, &lk);
        }
        if same_content(cur, &out) {
            return Ok(Mutation::Unchanged);
        }
        Ok(finish(out))
    }

    pub fn create(&self, t: &Target, body: Value, manager: &str) -> Result<Value, ApiError> {
        self.create_checked(t, body, manager, &mut Checks::default())
    }

    /// Create with the request's `fieldValidation`, collecting its warnings.
    pub fn create_checked(
        &self,
        t: &Target,
        body: Value,
        manager: &str,
        checks: &mut Checks,
    ) -> Result<Value, ApiError> {
        self.ensure_namespace(t)?;
        checks.schema = self.crd_schema(t);
        let obj = self.prepare_create(t, body, manager, checks)?;
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let key = t.key(&name);
        let out = self.store.mutate(&key, |cur, _| match cur {
            Some(_) => Err(ApiError::already_exists(
                &t.info.plural,
                &t.info.group,
                &name,
            )),
            None => Ok(Mutation::Put(obj)),
        })?;
        self.after_write(t);
        out.map(|o| t.present(&o))
            .ok_or_else(|| ApiError::internal("create stored nothing"))
    }

    pub fn get(&self, t: &Target, name: &str) -> Result<Value, ApiError> {
        self.store
            .get(&t.info.gr(), &t.namespace, name)
            .map(|o| t.present(&o))
            .ok_or_else(|| t.not_found(name))
    }

    pub fn list(&self, t: &Target, opts: &ListOpts) -> Result<Value, ApiError> {
        let ns = t
            .info
            .namespaced
            .then_some(t.namespace.as_str())
            .filter(|n| !n.is_empty());
        let (after, at) = match &opts.continue_token {
            Some(tok) => {
                let (key, rv) = decode_continue(tok)?;
                (Some(key), rv)
            }
            None => (None, None),
        };
        // Every page at the first page's resourceVersion (the token carries it).
        let (objs, rv) = self
            .store
            .list_at(&t.info.gr(), ns, after.as_ref(), at)
            .map_err(|e| {
                ApiError::gone(format!(
                    "The provided continue parameter is too old to display a consistent list \
                     result ({e}). You can start a new list without the continue parameter."
                ))
            })?;
        let mut items = Vec::new();
        let mut next = None;
        let filtered = !opts.labels.is_empty() || !opts.fields.is_empty();
        let mut matching = objs
            .iter()
            .filter(|o| opts.labels.matches(o) && opts.fields.matches(o));
        let mut remaining = 0usize;
        for o in matching.by_ref() {
            if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                remaining = 1;
                break;
            }
            items.push(t.present(o));
        }
        if remaining > 0 {
            remaining += matching.count();
            if let Some(last) = items.last() {
                let key = (
                    meta_str(last, "namespace").unwrap_or_default().to_string(),
                    meta_str(last, "name").unwrap_or_default().to_string(),
                );
                next = Some(encode_continue(&key, rv));
            }
        }
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if let Some(tok) = next {
            meta["continue"] = json!(tok);
            if !filtered {
                meta["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "kind": format!("{}List", t.info.kind),
            "apiVersion": t.api_version(),
            "metadata": meta,
            "items": items,
        }))
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
        self.update_checked(t, name, sub, body, manager, &mut Checks::default())
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
    ) -> Result<Value, ApiError> {
        checks.schema = self.crd_schema(t);
        let out = self.store.mutate(&t.key(name), |cur, _| match cur {
            None => Err(t.not_found(name)),
            Some(cur) => self.prepare_update(t, cur, body, sub, Some(manager), checks),
        })?;
        self.after_write(t);
        Ok(t.present(&out.unwrap_or_default()))
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
        self.patch_checked(t, name, sub, kind, body, manager, force, &mut checks)
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
    ) -> Result<(Value, bool), ApiError> {
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
        let out = self.store.mutate(&t.key(name), |cur, _| {
            let Some(cur) = cur else {
                return Err(t.not_found(name));
            };
            let patched = patch::apply_simple(kind, cur, body, &what)?;
            let manager = manager.unwrap_or("unknown");
            self.prepare_update(t, cur, patched, sub, Some(manager), checks)
        })?;
        self.after_write(t);
        Ok((t.present(&out.unwrap_or_default()), false))
    }

    #[allow(clippy::too_many_arguments)]
    fn server_side_apply(
        &self,
        t: &Target,
        name: &str,
        sub: &str,
        body: &[u8],
        manager: Option<&str>,
        force: bool,
        what: &str,
        checks: &mut Checks,
    ) -> Result<(Value, bool), ApiError> {
        let Some(manager) = manager.filter(|m| !m.is_empty()) else {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        };
        let applied = super::decode::yaml(body, "apply").map_err(|e| {
            ApiError::bad_request(format!(
                "invalid apply configuration for {what}: {}",
                e.message
            ))
        })?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(format!(
                "the apply configuration for {what} must be an object"
            )));
        }
        if let Some(n) = applied.pointer("/metadata/name").and_then(Value::as_str)
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let lk = t.list_kinds();
        let time = now();
        let av = t.api_version();
        let writer = ssa::Writer {
            manager,
            subresource: sub,
            api_version: &av,
            time: &time,
        };
        let mut created = false;
        if self.store.get(&t.info.gr(), &t.namespace, name).is_none() {
            if sub == "status" {
                return Err(t.not_found(name));
            }
            self.ensure_namespace(t)?;
        }
        let out = self.store.mutate(&t.key(name), |cur, _| match cur {
            None => {
                created = true;
                let mut obj = ssa::apply(None, &applied, &writer, force, &lk)?;
                obj["metadata"]["name"] = json!(name);
                let mf = obj.pointer("/metadata/managedFields").cloned();
                let mut obj = self.prepare_create(t, obj, manager, checks)?;
                if let Some(mf) = mf {
                    obj["metadata"]["managedFields"] = mf;
                }
                Ok(Mutation::Put(obj))
            }
            Some(cur) => {
                if let Some(rv) = applied.pointer("/metadata/resourceVersion").and_then(Value::as_str)
                    && rv != rv_of(cur)
                {
                    return Err(ApiError::conflict(&t.info.plural, &t.info.group, name, "the object has been modified; please apply your changes to the latest version and try again"));
                }
                let merged = ssa::apply(Some(cur), &applied, &writer, force, &lk)?;
                let mf = merged.pointer("/metadata/managedFields").cloned();
                let mut m = self.prepare_update(t, cur, merged, sub, None, checks)?;
                if let Mutation::Put(obj) | Mutation::Delete(obj) = &mut m {
                    match mf {
                        Some(mf) => obj["metadata"]["managedFields"] = mf,
                        None => {
                            if let Some(meta) = obj["metadata"].as_object_mut() {
                                meta.remove("managedFields");
                            }
                        }
                    }
                }
                Ok(m)
            }
        })?;
        self.after_write(t);
        Ok((t.present(&out.unwrap_or_default()), created))
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
        Ok(t.present(&out.unwrap_or_default()))
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
        self.store.mutate(&t.key(pod), |cur, _| {
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

    /// Re-reads CRDs after a write to them, so new custom resources are served at once.
    fn after_write(&self, t: &Target) {
        if t.info.builtin && t.info.plural == "customresourcedefinitions" {
            self.refresh_crds();
        }
    }
}
