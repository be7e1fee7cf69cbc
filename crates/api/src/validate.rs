//! Offline validation of manifests and config files (`gantry validate -f`). Each YAML
//! document's kind is detected — by `apiVersion`/`kind` for manifests, by shape for config
//! files — and every problem is returned with its field path.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cluster_policy::ClusterPolicy;
use crate::device_plugin_config::DevicePluginConfig;
use crate::kai::{PodGroup, Queue, Topology};
use crate::mig_cluster_policy::MigClusterPolicy;
use crate::mig_parted::{self, MigPartedConfig};
use crate::nvidia_driver::NVIDIADriver;
use crate::problem::{Problem, index, join};
use crate::schema_check::{UnknownFields, check};

pub use crate::problem::Problem as ValidationProblem;

/// What a document is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocKind {
    ClusterPolicy,
    NVIDIADriver,
    MigClusterPolicy,
    Queue,
    PodGroup,
    Topology,
    ConfigMap,
    /// A Pod: its KAI GPU-sharing annotations are checked.
    Pod,
    DevicePluginConfig,
    MigPartedConfig,
    /// A workload with a pod template (Deployment, DaemonSet, StatefulSet, ReplicaSet, Job,
    /// CronJob): the template is checked as a Pod.
    Workload,
    /// Any other kind (ServiceAccount, Role, Service …): skipped with a note, as kubeconform's
    /// `-ignore-missing-schemas` does.
    Unchecked,
}

/// Manifest kinds Gantry validates: (kind, apiVersion).
const MANIFESTS: &[(&str, &str, DocKind)] = &[
    ("ClusterPolicy", "nvidia.com/v1", DocKind::ClusterPolicy),
    ("NVIDIADriver", "nvidia.com/v1alpha1", DocKind::NVIDIADriver),
    (
        "MigClusterPolicy",
        "nvidia.com/v1alpha1",
        DocKind::MigClusterPolicy,
    ),
    ("Queue", "scheduling.run.ai/v2", DocKind::Queue),
    ("PodGroup", "scheduling.run.ai/v2alpha2", DocKind::PodGroup),
    ("Topology", "kai.scheduler/v1alpha1", DocKind::Topology),
    ("ConfigMap", "v1", DocKind::ConfigMap),
    ("Pod", "v1", DocKind::Pod),
];

/// Split YAML text into documents (as JSON values). Null documents (`---` with nothing) are
/// skipped. A syntax error ends the list with a problem naming line and column.
pub fn parse_documents(text: &str) -> (Vec<Value>, Option<Problem>) {
    let mut docs = Vec::new();
    // Checked before parsing: the YAML parser spends minutes on 100,000 nested brackets.
    if gantry_k8s_rules::depth::too_deep(text.as_bytes(), true) {
        let max = gantry_k8s_rules::depth::MAX_DEPTH;
        return (
            docs,
            Some(Problem::new(
                "<document>",
                format!("nested more than {max} levels deep (the API server's limit): not parsed"),
            )),
        );
    }
    for de in serde_yaml::Deserializer::from_str(text) {
        match Value::deserialize(de) {
            Ok(Value::Null) => {}
            Ok(v) => docs.push(v),
            Err(e) => {
                let at = e
                    .location()
                    .map(|l| format!("line {}, column {}", l.line(), l.column()))
                    .unwrap_or_else(|| "<yaml>".to_string());
                let msg = e.to_string();
                // serde_norway appends " at line X column Y"; the path already says where.
                let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
                return (
                    docs,
                    Some(Problem::new(at, format!("YAML syntax error: {msg}"))),
                );
            }
        }
    }
    (docs, None)
}

/// Validate every document of a file; an empty list means the file is fine.
pub fn validate_text(text: &str) -> Vec<Problem> {
    let (docs, syntax) = parse_documents(text);
    let mut out = Vec::new();
    if docs.is_empty() && syntax.is_none() {
        return vec![Problem::new(
            "<document>",
            "file is empty: expected a manifest (apiVersion/kind) or a device plugin or mig-parted config",
        )];
    }
    let many = docs.len() + usize::from(syntax.is_some()) > 1;
    for (i, d) in docs.iter().enumerate() {
        for mut p in validate_value(d) {
            if many {
                p.document = Some(i + 1);
            }
            out.push(p);
        }
    }
    if let Some(mut p) = syntax {
        if many {
            p.document = Some(docs.len() + 1);
        }
        out.push(p);
    }
    out
}

/// Notes on every document of a file: what was not checked, and what the file leaves to
/// flags or the environment. Notes never make a file invalid.
pub fn notes_text(text: &str) -> Vec<Problem> {
    let (docs, _) = parse_documents(text);
    let many = docs.len() > 1;
    let mut out = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        for mut p in notes_value(d) {
            if many {
                p.document = Some(i + 1);
            }
            out.push(p);
        }
    }
    out
}

/// Notes on one document (see [`notes_text`]).
pub fn notes_value(v: &Value) -> Vec<Problem> {
    match detect(v) {
        Ok(DocKind::Unchecked) => {
            let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
            let api = v
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            vec![Problem::new(
                "kind",
                format!(
                    "{kind} {api} skipped: gantry validates GPU and KAI kinds, ConfigMaps and pod templates"
                ),
            )]
        }
        Ok(DocKind::DevicePluginConfig) if mps_without_root(v) => vec![Problem::new(
            "flags.mpsRoot",
            "unset: the device plugin takes it from MPS_ROOT / --mps-root (the chart sets it)",
        )],
        Ok(DocKind::MigPartedConfig) => mig_parted_notes(v),
        Ok(DocKind::ConfigMap) => config_map_notes(v),
        _ => Vec::new(),
    }
}

fn mig_parted_notes(v: &Value) -> Vec<Problem> {
    serde_json::from_value::<MigPartedConfig>(v.clone())
        .map(|c| c.notes())
        .unwrap_or_default()
}

/// Notes on the mig-parted configs a ConfigMap holds, under `data["<key>"]`.
fn config_map_notes(v: &Value) -> Vec<Problem> {
    let Some(data) = v.get("data").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, text) in data.iter().filter_map(|(k, t)| Some((k, t.as_str()?))) {
        for d in parse_documents(text).0 {
            if let Ok(DocKind::MigPartedConfig) = detect(&d) {
                let path = join("data", k);
                out.extend(mig_parted_notes(&d).into_iter().map(|p| prefixed(&path, p)));
            }
        }
    }
    out
}

/// An MPS config that leaves `flags.mpsRoot` to the flag or env, as upstream's README does.
fn mps_without_root(v: &Value) -> bool {
    v.pointer("/sharing/mps").is_some_and(|m| !m.is_null())
        && v.pointer("/flags/mpsRoot")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
}

/// Decide what a document is.
pub fn detect(v: &Value) -> Result<DocKind, Problem> {
    let Some(m) = v.as_object() else {
        return Err(Problem::new(
            "<document>",
            format!(
                "must be a mapping (a manifest or config file), got {}",
                crate::problem::type_name(v)
            ),
        ));
    };
    let api = m.get("apiVersion").and_then(Value::as_str);
    let kind = m.get("kind").and_then(Value::as_str);
    if api.is_some() || kind.is_some() {
        let (Some(api), Some(kind)) = (api, kind) else {
            let missing = if api.is_none() { "apiVersion" } else { "kind" };
            return Err(Problem::new(missing, "is required in a manifest"));
        };
        if let Some((_, want, k)) = MANIFESTS.iter().find(|(k, _, _)| *k == kind) {
            return if api == *want {
                Ok(*k)
            } else {
                Err(Problem::new(
                    "apiVersion",
                    format!("{kind} is served as {want}, got {api:?}"),
                ))
            };
        }
        if crate::pod_check::template_path(kind).is_some() {
            return Ok(DocKind::Workload);
        }
        return Ok(DocKind::Unchecked);
    }
    if m.contains_key("mig-configs") {
        return Ok(DocKind::MigPartedConfig);
    }
    if ["flags", "sharing", "resources", "imex"]
        .iter()
        .any(|k| m.contains_key(*k))
    {
        return Ok(DocKind::DevicePluginConfig);
    }
    Err(Problem::new(
        "<document>",
        "cannot tell what this is: expected a manifest (apiVersion and kind), a device plugin config (version: v1 with flags/sharing/resources) or a mig-parted config (mig-configs)",
    ))
}

/// Validate one document.
pub fn validate_value(v: &Value) -> Vec<Problem> {
    match detect(v) {
        Err(p) => vec![p],
        Ok(DocKind::ClusterPolicy) => {
            manifest::<ClusterPolicy>(v, "nvidia.com/v1", "ClusterPolicy", |o| o.spec.validate())
        }
        Ok(DocKind::NVIDIADriver) => {
            manifest::<NVIDIADriver>(v, "nvidia.com/v1alpha1", "NVIDIADriver", |o| {
                o.spec.validate()
            })
        }
        Ok(DocKind::MigClusterPolicy) => {
            let mut out = Vec::new();
            if let Some(custom) = v.pointer("/spec/layout/custom").and_then(Value::as_array) {
                for (i, e) in custom.iter().enumerate() {
                    for p in check(
                        e,
                        &mig_parted::entry_check_schema(),
                        UnknownFields::Report("mig-parted rejects unknown keys"),
                    ) {
                        out.push(prefixed(&index("spec.layout.custom", i), p));
                    }
                }
            }
            if out.is_empty() {
                out = manifest::<MigClusterPolicy>(
                    v,
                    "nvidia.com/v1alpha1",
                    "MigClusterPolicy",
                    |o| o.spec.validate(),
                );
            }
            out
        }
        Ok(DocKind::Queue) => {
            manifest::<Queue>(v, "scheduling.run.ai/v2", "Queue", |o| o.spec.validate())
        }
        Ok(DocKind::PodGroup) => {
            manifest::<PodGroup>(v, "scheduling.run.ai/v2alpha2", "PodGroup", |o| {
                o.spec.validate()
            })
        }
        Ok(DocKind::Topology) => {
            manifest::<Topology>(v, "kai.scheduler/v1alpha1", "Topology", |o| {
                o.spec.validate()
            })
        }
        Ok(DocKind::ConfigMap) => config_map(v),
        Ok(DocKind::Pod) => pod(v),
        Ok(DocKind::DevicePluginConfig) => device_plugin(v),
        Ok(DocKind::MigPartedConfig) => mig_parted_file(v),
        Ok(DocKind::Workload) => {
            let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
            crate::pod_check::workload(kind, v)
        }
        Ok(DocKind::Unchecked) => Vec::new(),
    }
}

fn prefixed(prefix: &str, p: Problem) -> Problem {
    let path = if p.path == "<document>" {
        prefix.to_string()
    } else if p.path.starts_with('[') {
        format!("{prefix}{}", p.path)
    } else {
        format!("{prefix}.{}", p.path)
    };
    Problem { path, ..p }
}

fn typed<T: DeserializeOwned>(v: &Value, what: &str) -> Result<T, Problem> {
    serde_json::from_value(v.clone())
        .map_err(|e| Problem::new("<document>", format!("not a valid {what}: {e}")))
}

fn manifest<T: DeserializeOwned>(
    v: &Value,
    api: &str,
    kind: &str,
    semantic: impl Fn(&T) -> Vec<(String, String)>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    match v.pointer("/metadata/name") {
        Some(Value::String(s)) if !s.is_empty() => {}
        _ => out.push(Problem::new("metadata.name", "is required")),
    }
    match crate::crds::schema_for(api, kind) {
        Some(schema) => out.extend(check(
            &without_type_meta(v),
            schema,
            UnknownFields::Report("not in the CRD schema, so the API server would drop it"),
        )),
        None => out.push(Problem::new(
            "<document>",
            format!("no schema for {kind} {api}"),
        )),
    }
    if !out.is_empty() {
        return out;
    }
    match typed::<T>(v, kind) {
        Ok(obj) => semantic(&obj)
            .into_iter()
            .map(|(p, m)| Problem::new(p, m))
            .collect(),
        Err(p) => vec![p],
    }
}

/// The CRD schema covers `spec` and `status`; the API server handles the type meta itself.
fn without_type_meta(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        for k in ["apiVersion", "kind", "metadata"] {
            m.remove(k);
        }
    }
    v
}

fn device_plugin(v: &Value) -> Vec<Problem> {
    static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let schema = SCHEMA.get_or_init(|| {
        schemars::generate::SchemaSettings::openapi3()
            .with(|s| s.inline_subschemas = true)
            .into_generator()
            .into_root_schema_for::<DevicePluginConfig>()
            .to_value()
    });
    let out = check(
        v,
        schema,
        UnknownFields::Report("the device plugin ignores unknown keys"),
    );
    if !out.is_empty() {
        return out;
    }
    // Offline, `mpsRoot` may come from MPS_ROOT / --mps-root at run time: a note, not an error
    // (the device plugin checks it after merging, as upstream does).
    match typed::<DevicePluginConfig>(v, "device plugin config") {
        Ok(c) => c
            .validate()
            .into_iter()
            .filter(|p| p.path != "flags.mpsRoot")
            .collect(),
        Err(p) => vec![p],
    }
}

fn mig_parted_file(v: &Value) -> Vec<Problem> {
    let out = check(
        v,
        &mig_parted::file_check_schema(),
        UnknownFields::Report("mig-parted rejects unknown keys"),
    );
    if !out.is_empty() {
        return out;
    }
    match typed::<MigPartedConfig>(v, "mig-parted config") {
        Ok(c) => c.validate(),
        Err(p) => vec![p],
    }
}

/// A Pod: see [`crate::pod_check`].
fn pod(v: &Value) -> Vec<Problem> {
    crate::pod_check::pod(v)
}

/// A ConfigMap whose values are device plugin or mig-parted configs (the form the operator
/// reads them in): each such value is validated under `data["<key>"]`.
fn config_map(v: &Value) -> Vec<Problem> {
    let mut out = Vec::new();
    let Some(data) = v.get("data") else {
        return out;
    };
    let Some(data) = data.as_object() else {
        return vec![Problem::new("data", "must be a mapping of keys to strings")];
    };
    for (k, val) in data {
        let path = join("data", k);
        let Some(text) = val.as_str() else {
            out.push(Problem::new(
                path,
                format!("must be a string, got {}", crate::problem::type_name(val)),
            ));
            continue;
        };
        let (docs, syntax) = parse_documents(text);
        if let Some(p) = syntax {
            // Only report syntax errors in values that look like YAML configs.
            // (dcgm-exporter's metrics CSV sits in ConfigMaps too: not YAML, not ours to check.)
            let yaml_like = text.contains("mig-configs")
                || text.contains("sharing:")
                || text.contains("version: v1");
            if yaml_like && !k.ends_with(".csv") {
                out.push(Problem::new(path, format!("{}: {}", p.path, p.message)));
            }
            continue;
        }
        for d in docs {
            if let Ok(kind @ (DocKind::DevicePluginConfig | DocKind::MigPartedConfig)) = detect(&d)
            {
                let ps = if kind == DocKind::DevicePluginConfig {
                    device_plugin(&d)
                } else {
                    mig_parted_file(&d)
                };
                out.extend(ps.into_iter().map(|p| prefixed(&path, p)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(text: &str) -> Vec<String> {
        validate_text(text)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let n = 100_000;
        let deep = format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let m = msgs(&deep);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("<document>: nested more than 128 levels deep"),
            "{m:?}"
        );
        assert!(notes_text(&deep).is_empty());
        assert!(msgs("a: [[[1]]]\n").iter().all(|p| !p.contains("nested")));
    }

    #[test]
    fn empty_and_syntax() {
        assert!(msgs("")[0].contains("file is empty"));
        assert!(msgs("# only a comment\n")[0].contains("file is empty"));
        let m = msgs("a: [1, 2\nb: 3\n");
        assert!(m[0].starts_with("line "), "{m:?}");
        assert!(m[0].contains("YAML syntax error"));
    }

    #[test]
    fn detects_kinds() {
        let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n";
        assert!(msgs(svc).is_empty());
        assert!(
            notes_text(svc)[0]
                .to_string()
                .starts_with("kind: Service v1 skipped")
        );
        assert!(
            msgs("apiVersion: scheduling.run.ai/v1\nkind: Queue\n")[0]
                .starts_with("apiVersion: Queue is served as scheduling.run.ai/v2")
        );
        assert!(msgs("foo: bar\n")[0].contains("cannot tell what this is"));
        assert_eq!(
            msgs(
                "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n"
            ),
            vec!["sharing.timeSlicing.resources[0].replicas: must be >= 2, got 1".to_string()]
        );
    }

    /// Issue #24: a huge replica count is refused, naming the field and the bound.
    #[test]
    fn huge_replicas_are_refused() {
        let m = msgs(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 100000000}\n",
        );
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with(
                "sharing.timeSlicing.resources[0].replicas: must be <= 1024, got 100000000"
            ),
            "{}",
            m[0]
        );
        let ok = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1024}\n";
        assert_eq!(msgs(ok), Vec::<String>::new());
    }

    #[test]
    fn queue_manifest() {
        let ok = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec:\n  resources:\n    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}\n";
        assert_eq!(msgs(ok), Vec::<String>::new());
        let bad = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: q}\nspec:\n  priority: high\n  resources:\n    gpu: {quota: -3}\n";
        let m = msgs(bad);
        assert!(
            m.iter()
                .any(|x| x.starts_with("spec.priority: must be an integer")),
            "{m:?}"
        );
    }

    #[test]
    fn multi_document_numbers() {
        let m = msgs("version: v1\nflags: {migStrategy: half}\n---\nfoo: 1\n");
        assert!(
            m[0].starts_with("document 1: flags.migStrategy: must be one of"),
            "{m:?}"
        );
        assert!(
            m[1].starts_with("document 2: <document>: cannot tell"),
            "{m:?}"
        );
    }

    #[test]
    fn config_map_values() {
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: |\n    version: v1\n    sharing:\n      timeSlicing:\n        resources:\n        - {name: nvidia.com/gpu, replicas: 0}\n";
        let m = msgs(cm);
        assert_eq!(
            m,
            vec![
                "data.a.sharing.timeSlicing.resources[0].replicas: must be >= 2, got 0".to_string()
            ]
        );
    }
}
