//! Validation of built-in objects before they are stored, as kube-apiserver does it:
//! decoding into the typed object first (a wrong type, such as `spec: "x"` or a label that
//! is not a string, is `400 BadRequest ... cannot be handled as a Pod`), then the field
//! rules (`422 Invalid` naming every field path): metadata, names, pod spec basics,
//! resource quantities, ConfigMap/Secret sizes. Quantities and names are `gantry_k8s_rules`.

use super::resources::ResourceInfo;
use super::status::{ApiError, FieldError};
use gantry_k8s_rules::Quantity;
use gantry_k8s_rules::names::{
    dns_label_problem, dns_subdomain_problem, label_key_problem, label_value_problem,
};
use serde_json::Value;

/// Upstream's total size limit of a ConfigMap's or Secret's data (1 MiB).
const MAX_CONFIG_BYTES: usize = 1 << 20;
/// Upstream's limit on the total size of an object's annotations, keys and values (256 KiB).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 << 10;

/// The kind as upstream names it in errors: `Pod`, `ClusterPolicy.nvidia.com`.
pub fn qualified_kind(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        info.kind.clone()
    } else {
        format!("{}.{}", info.kind, info.group)
    }
}

fn decode_error(info: &ResourceInfo, version: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: {why}",
        kind = info.kind
    ))
}

/// Checks a name the way the real server does for the type (422 on `metadata.name`).
pub fn name(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    let problem = if info.group == "rbac.authorization.k8s.io" {
        (name == "." || name == ".." || name.contains('/') || name.contains('%'))
            .then(|| "may not be '.', '..' or contain '/' or '%'".to_string())
    } else if info.plural == "namespaces" {
        dns_label_problem(name)
    } else {
        dns_subdomain_problem(name)
    };
    match problem {
        Some(why) => Err(ApiError::invalid_fields(
            &qualified_kind(info),
            name,
            &[FieldError::invalid(
                "metadata.name",
                &Value::String(name.into()),
                &why,
            )],
        )),
        None => Ok(()),
    }
}

/// `metadata` of any object: labels and annotations are maps of strings (else the object
/// cannot be decoded: 400), label keys and values are valid (else 422).
pub fn metadata(info: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    let Some(meta) = obj.get("metadata") else {
        return Ok(());
    };
    if !meta.is_object() {
        return Err(decode_error(info, version, "metadata must be an object"));
    }
    let obj_name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
    let mut errs = Vec::new();
    for field in ["labels", "annotations"] {
        let Some(map) = meta.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(map) = map.as_object() else {
            return Err(decode_error(
                info,
                version,
                format!("metadata.{field} must be a map of strings"),
            ));
        };
        for (k, v) in map {
            let Some(v) = v.as_str() else {
                return Err(decode_error(
                    info,
                    version,
                    format!("metadata.{field}: the value of {k:?} is {v}, expected a string"),
                ));
            };
            if field == "labels" {
                let path = "metadata.labels";
                if let Some(p) = label_key_problem(k) {
                    errs.push(FieldError::invalid(path, &Value::String(k.clone()), &p));
                }
                if let Some(p) = label_value_problem(v) {
                    errs.push(FieldError::invalid(path, &Value::String(v.into()), &p));
                }
            } else if let Some(p) = label_key_problem(&k.to_lowercase()) {
                // Annotation keys are qualified names, whatever their case.
                let path = "metadata.annotations";
                errs.push(FieldError::invalid(path, &Value::String(k.clone()), &p));
            }
        }
        if field == "annotations" {
            let size: usize = map
                .iter()
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum();
            if size > MAX_ANNOTATIONS_BYTES {
                errs.push(FieldError::too_long(
                    "metadata.annotations",
                    MAX_ANNOTATIONS_BYTES,
                ));
            }
        }
    }
    if let Some(f) = meta.get("finalizers").filter(|v| !v.is_null())
        && !f.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err(decode_error(
            info,
            version,
            "metadata.finalizers must be a list of strings",
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(
            &qualified_kind(info),
            obj_name,
            &errs,
        ))
    }
}

/// One step of a field path: a key of an object or an index into a list.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A field the typed decode did not know (upstream's strict decoder reports these).
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownField(pub Vec<Step>);

impl std::fmt::Display for UnknownField {
    /// Upstream's form: `spec.containers[0].foo`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Step::Key(k) if i == 0 => write!(f, "{k}")?,
                Step::Key(k) => write!(f, ".{k}")?,
                Step::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl UnknownField {
    fn of(p: &serde_ignored::Path<'_>) -> Self {
        use serde_ignored::Path as P;
        let mut steps = Vec::new();
        let mut at = p;
        loop {
            at = match at {
                P::Root => break,
                P::Seq { parent, index } => {
                    steps.push(Step::Index(*index));
                    parent
                }
                P::Map { parent, key } => {
                    steps.push(Step::Key(key.clone()));
                    parent
                }
                P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
                    parent
                }
            };
        }
        steps.reverse();
        UnknownField(steps)
    }

    /// Removes the field from `obj` (what upstream's typed decode drops).
    pub fn prune(&self, obj: &mut Value) {
        let Some((last, parents)) = self.0.split_last() else {
            return;
        };
        let mut at = Some(obj);
        for s in parents {
            at = at.and_then(|v| match s {
                Step::Key(k) => v.get_mut(k.as_str()),
                Step::Index(n) => v.get_mut(*n),
            });
        }
        if let (Some(Value::Object(m)), Step::Key(k)) = (at, last) {
            m.remove(k);
        }
    }
}

/// Decodes `obj` as the typed built-in `T`; a type mismatch is upstream's decode error
/// (400), a missing required field its `Required value` (422). Returns the fields `T` does
/// not have.
fn typed<T: serde::de::DeserializeOwned>(
    info: &ResourceInfo,
    version: &str,
    obj: &Value,
) -> Result<Vec<UnknownField>, ApiError> {
    let mut track = serde_path_to_error::Track::new();
    let mut unknown = Vec::new();
    let de = serde_path_to_error::Deserializer::new(obj, &mut track);
    // One callback type for every `T`: a closure here would be a new type per kind, and
    // serde_ignored's wrappers would instantiate the whole decode tree (ObjectMeta, PodSpec
    // ...) once per kind, not once per type (issue #39: minutes of release build time).
    let mut on_unknown = |p: serde_ignored::Path<'_>| unknown.push(UnknownField::of(&p));
    let on_unknown: &mut dyn FnMut(serde_ignored::Path<'_>) = &mut on_unknown;
    match serde_ignored::deserialize::<_, _, T>(de, on_unknown) {
        Ok(_) => Ok(unknown),
        Err(e) => {
            let path = track.path().to_string();
            let inner = e.to_string();
            if let Some(field) = inner.strip_prefix("missing field `") {
                let field = field.trim_end_matches('`');
                let full = if path == "." {
                    field.to_string()
                } else {
                    format!("{path}.{field}")
                };
                let name = obj
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return Err(ApiError::invalid_fields(
                    &qualified_kind(info),
                    name,
                    &[FieldError::required(full)],
                ));
            }
            Err(decode_error(info, version, format!("{path}: {inner}")))
        }
    }
}

/// The typed decode of built-in kinds the sim serves.
fn decode_builtin(
    info: &ResourceInfo,
    version: &str,
    obj: &Value,
) -> Result<Vec<UnknownField>, ApiError> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    use k8s_openapi::api::{coordination::v1 as coord, policy::v1 as policy, rbac::v1 as rbac};
    use k8s_openapi::api::{scheduling::v1 as sched, storage::v1 as storage};
    macro_rules! kinds {
        ($($group:literal $kind:literal => $ty:ty),* $(,)?) => {
            match (info.group.as_str(), info.kind.as_str()) {
                $(($group, $kind) => typed::<$ty>(info, version, obj),)*
                _ => Ok(Vec::new()),
            }
        };
    }
    kinds! {
        "" "Pod" => core::Pod, "" "Node" => core::Node, "" "Namespace" => core::Namespace,
        "" "ConfigMap" => core::ConfigMap, "" "Secret" => core::Secret,
        "" "Service" => core::Service, "" "Endpoints" => core::Endpoints,
        "" "ServiceAccount" => core::ServiceAccount, "" "Event" => core::Event,
        "" "PersistentVolumeClaim" => core::PersistentVolumeClaim,
        "" "PersistentVolume" => core::PersistentVolume, "" "LimitRange" => core::LimitRange,
        "" "ResourceQuota" => core::ResourceQuota,
        "apps" "DaemonSet" => apps::DaemonSet, "apps" "Deployment" => apps::Deployment,
        "apps" "ReplicaSet" => apps::ReplicaSet, "apps" "StatefulSet" => apps::StatefulSet,
        "apps" "ControllerRevision" => apps::ControllerRevision,
        "batch" "Job" => batch::Job, "batch" "CronJob" => batch::CronJob,
        "coordination.k8s.io" "Lease" => coord::Lease,
        "policy" "PodDisruptionBudget" => policy::PodDisruptionBudget,
        "rbac.authorization.k8s.io" "Role" => rbac::Role,
        "rbac.authorization.k8s.io" "RoleBinding" => rbac::RoleBinding,
        "rbac.authorization.k8s.io" "ClusterRole" => rbac::ClusterRole,
        "rbac.authorization.k8s.io" "ClusterRoleBinding" => rbac::ClusterRoleBinding,
        "scheduling.k8s.io" "PriorityClass" => sched::PriorityClass,
        "storage.k8s.io" "StorageClass" => storage::StorageClass,
    }
}

/// A quantity field: malformed is a decode error (400), negative a field error (422), an
/// extended resource (`vendor/name`) must be a whole number.
fn quantity(
    info: &ResourceInfo,
    version: &str,
    path: &str,
    resource: &str,
    v: &Value,
    errs: &mut Vec<FieldError>,
) -> Result<(), ApiError> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            return Err(decode_error(
                info,
                version,
                format!("{path}: quantity {other} must be a string or number"),
            ));
        }
    };
    let q = Quantity::parse(&s).map_err(|e| {
        decode_error(
            info,
            version,
            format!("{path}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' ({e})"),
        )
    })?;
    if q.is_negative() {
        errs.push(FieldError::invalid(
            path,
            &Value::String(s),
            "must be greater than or equal to 0",
        ));
        return Ok(());
    }
    let extended = resource.contains('/') && !resource.contains("kubernetes.io/");
    if extended && q.milli_value().is_none_or(|m| m % 1000 != 0) {
        errs.push(FieldError::invalid(
            path,
            &Value::String(s),
            "must be an integer",
        ));
    }
    Ok(())
}

/// A pod spec at `at` (`spec`, `spec.template.spec`): containers required and named,
/// resources well-formed and non-negative, extended resources whole and not overcommitted.
fn pod_spec(
    info: &ResourceInfo,
    version: &str,
    at: &str,
    spec: &Value,
    errs: &mut Vec<FieldError>,
) -> Result<(), ApiError> {
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(format!("{at}.containers")));
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let cp = format!("{at}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => errs.push(FieldError::required(format!("{cp}.name"))),
                Some(n) => {
                    if let Some(p) = dns_label_problem(n) {
                        errs.push(FieldError::invalid(
                            format!("{cp}.name"),
                            &Value::String(n.into()),
                            &p,
                        ));
                    }
                }
            }
            let res = c.get("resources");
            let map = |k: &str| res.and_then(|r| r.get(k)).and_then(Value::as_object);
            for kind in ["requests", "limits"] {
                for (r, q) in map(kind).into_iter().flatten() {
                    quantity(
                        info,
                        version,
                        &format!("{cp}.resources.{kind}[{r}]"),
                        r,
                        q,
                        errs,
                    )?;
                }
            }
            for (r, req) in map("requests").into_iter().flatten() {
                let extended = r.contains('/') && !r.contains("kubernetes.io/");
                let lim = map("limits").and_then(|l| l.get(r));
                let parse = |v: &Value| match v {
                    Value::String(s) => Quantity::parse(s).ok(),
                    Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
                    _ => None,
                };
                let path = format!("{cp}.resources.requests[{r}]");
                match (parse(req), lim.and_then(parse)) {
                    (Some(_), None) if extended => errs.push(FieldError::forbidden(
                        path,
                        "Limit must be set for non overcommitable resources",
                    )),
                    (Some(q), Some(l)) if extended && q.milli_value() != l.milli_value() => errs
                        .push(FieldError::invalid(
                            path,
                            req,
                            &format!("must be equal to {r} limit of {}", l),
                        )),
                    (Some(q), Some(l)) if q.to_f64() > l.to_f64() => {
                        errs.push(FieldError::invalid(
                            path,
                            req,
                            &format!("must be less than or equal to {r} limit of {l}"),
                        ))
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// Where a kind carries a pod spec.
fn pod_spec_path(info: &ResourceInfo) -> Option<&'static [&'static str]> {
    Some(match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => &["spec"],
        ("apps", "Deployment" | "DaemonSet" | "ReplicaSet" | "StatefulSet") | ("batch", "Job") => {
            &["spec", "template", "spec"]
        }
        ("batch", "CronJob") => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => return None,
    })
}

/// The body's `apiVersion` must be the URL's (or another served version of its group);
/// upstream refuses the mismatch instead of rewriting it.
pub fn api_version(info: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    let Some(av) = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Ok(());
    };
    let (group, ver) = av.rsplit_once('/').unwrap_or(("", av));
    if group == info.group && info.serves(ver) {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "the API version in the data ({av}) does not match the expected API version ({})",
        info.api_version(version)
    )))
}

/// Kinds whose every top-level field is optional in the typed decode (k8s-openapi has no
/// required one), so a part of the object decodes on its own.
fn decodes_in_parts(info: &ResourceInfo) -> bool {
    matches!(
        (info.group.as_str(), info.kind.as_str()),
        ("", "Pod" | "Node" | "ConfigMap" | "Namespace" | "Service")
            | ("apps", "DaemonSet" | "Deployment")
            | ("coordination.k8s.io", "Lease")
    )
}

/// What of an update `obj` the typed decode must see, when the stored object `before` passed
/// it already: the top-level fields that changed (a status write re-decoded the whole pod),
/// always the metadata, without the `managedFields` the server kept from `before`. `None`:
/// decode all of `obj`. Top-level fields that `settled` names are known to equal `before`'s
/// and are not compared.
fn changed_part(
    info: &ResourceInfo,
    obj: &Value,
    before: &Value,
    settled: Settled<'_>,
) -> Option<Value> {
    if !decodes_in_parts(info) {
        return None;
    }
    let (o, b) = (obj.as_object()?, before.as_object()?);
    let mut out = serde_json::Map::new();
    for (k, v) in o {
        if k == "metadata" {
            let (m, bm) = (v.as_object()?, b.get(k).and_then(Value::as_object)?);
            let kept = |f: &str| m.get(f).is_some_and(|x| bm.get(f) == Some(x));
            let part = m
                .iter()
                .filter(|(f, _)| !(*f == "managedFields" && kept(f)))
                .map(|(f, x)| (f.clone(), x.clone()));
            out.insert(k.clone(), Value::Object(part.collect()));
        } else if k == "apiVersion" || k == "kind" || (!settled(k) && b.get(k) != Some(v)) {
            out.insert(k.clone(), v.clone());
        }
    }
    Some(Value::Object(out))
}

/// Top-level fields of an update known to equal the stored object's (not compared again).
pub type Settled<'a> = &'a dyn Fn(&str) -> bool;

/// Every check of a built-in object about to be stored (create, update, patch); on an
/// update, `before` is the stored object, and `settled` names top-level fields known to be
/// equal to its.
pub fn builtin(
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
    before: Option<(&Value, Settled<'_>)>,
    on_unknown: impl FnOnce(&[UnknownField], &mut Value) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    metadata(info, version, obj)?;
    if !info.builtin {
        return Ok(());
    }
    let part = before.and_then(|(b, settled)| changed_part(info, obj, b, settled));
    let unknown = decode_builtin(info, version, part.as_ref().unwrap_or(obj))?;
    if !unknown.is_empty() {
        on_unknown(&unknown, obj)?;
    }
    let obj = &*obj;
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut errs = Vec::new();
    if let Some(path) = pod_spec_path(info) {
        let spec = path.iter().try_fold(obj, |v, k| v.get(*k));
        // The part leaves out the unchanged top-level fields: one holding the pod spec was
        // checked when it was stored (no second deep comparison here).
        let unchanged = part.as_ref().is_some_and(|p| p.get(path[0]).is_none());
        match spec {
            Some(_) if unchanged => {}
            Some(spec) => pod_spec(info, version, &path.join("."), spec, &mut errs)?,
            None => errs.push(FieldError::required(format!(
                "{}.containers",
                path.join(".")
            ))),
        }
    }
    if matches!(info.kind.as_str(), "ConfigMap" | "Secret") && info.group.is_empty() {
        config_keys(obj, &mut errs);
        let size: usize = ["data", "binaryData", "stringData"]
            .iter()
            .filter_map(|k| obj.get(*k).and_then(Value::as_object))
            .flatten()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > MAX_CONFIG_BYTES {
            errs.push(FieldError::too_long("[]", MAX_CONFIG_BYTES));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(&qualified_kind(info), name, &errs))
    }
}

/// The keys of a ConfigMap's or Secret's data (`IsConfigMapKey`), and a ConfigMap key present
/// in both `data` and `binaryData`. A Secret's `stringData` is merged into `data` upstream
/// before this check, so its keys are reported under `data` too.
fn config_keys(obj: &Value, errs: &mut Vec<FieldError>) {
    let keys = |field: &str| -> Vec<String> {
        obj.get(field)
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let binary = keys("binaryData");
    for (field, path) in [
        ("data", "data"),
        ("stringData", "data"),
        ("binaryData", "binaryData"),
    ] {
        for k in keys(field) {
            let at = format!("{path}[{k}]");
            for p in gantry_k8s_rules::names::config_key_problems(&k) {
                errs.push(FieldError::invalid(&at, &Value::String(k.clone()), &p));
            }
            if field == "data" && binary.contains(&k) {
                let why = "duplicate of key present in binaryData";
                errs.push(FieldError::invalid(&at, &Value::String(k.clone()), why));
            }
        }
    }
}

#[cfg(test)]
mod tests;
