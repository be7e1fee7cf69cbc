//! The CustomResourceDefinitions Gantry serves, with structural OpenAPI v3 schemas. Derived
//! from the types (kube + schemars), then cleaned up so a real API server accepts them:
//! no `default: null`, no `$ref`, and the catch-all maps stay out of the schema so
//! `x-kubernetes-preserve-unknown-fields` appears only where a field is truly free-form.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::cluster_policy::ClusterPolicy;
use crate::crd_defaults;
use crate::kai::{PodGroup, Queue, Topology};
use crate::mig_cluster_policy::MigClusterPolicy;
use crate::nvidia_driver::NVIDIADriver;

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("cannot serialize CRD {name}: {source}")]
    Serialize {
        name: String,
        source: serde_yaml::Error,
    },
    #[error("CRD {name} does not round-trip through JSON: {source}")]
    Json {
        name: String,
        source: serde_json::Error,
    },
    #[error("CRD {name}: upstream's schema defaults name fields the schema lacks: {paths:?}")]
    DefaultsWithoutField { name: String, paths: Vec<String> },
}

/// Every CRD, in a stable order: ClusterPolicy, NVIDIADriver, MigClusterPolicy, Queue, PodGroup,
/// Topology.
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    [
        ClusterPolicy::crd(),
        NVIDIADriver::crd(),
        MigClusterPolicy::crd(),
        Queue::crd(),
        PodGroup::crd(),
        Topology::crd(),
    ]
    .into_iter()
    .map(fix_up)
    .collect()
}

fn fix_up(crd: CustomResourceDefinition) -> Result<CustomResourceDefinition, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut v = serde_json::to_value(&crd).map_err(|source| CrdError::Json {
        name: name.clone(),
        source,
    })?;
    if let Some(versions) = v
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for ver in versions {
            if let Some(schema) = ver.pointer_mut("/schema/openAPIV3Schema") {
                clean(schema);
                let defaults = match name.as_str() {
                    "clusterpolicies.nvidia.com" => crd_defaults::cluster_policy(),
                    "nvidiadrivers.nvidia.com" => {
                        add_driver_rules(schema);
                        crd_defaults::nvidia_driver()
                    }
                    "topologies.kai.scheduler" => {
                        add_topology_rules(schema);
                        Vec::new()
                    }
                    _ => Vec::new(),
                };
                let paths = crd_defaults::apply(schema, &defaults);
                if !paths.is_empty() {
                    return Err(CrdError::DefaultsWithoutField { name, paths });
                }
            }
        }
    }
    serde_json::from_value(v).map_err(|source| CrdError::Json { name, source })
}

/// Drop keywords a structural schema must not carry or that schemars adds without meaning
/// here, walking only schema positions (a property may itself be named `default`).
fn clean(v: &mut Value) {
    let Some(m) = v.as_object_mut() else { return };
    m.remove("default");
    m.remove("$schema");
    m.remove("title");
    // Upstream's CRDs have no nullable fields: the API server prunes nulls instead.
    m.remove("nullable");
    if let Some(c) = m.remove("const") {
        m.insert("enum".into(), json!([c]));
    }
    if let Some(Value::Array(e)) = m.get_mut("enum") {
        e.retain(|x| !x.is_null());
    }
    if let Some(Value::String(d)) = m.get_mut("description") {
        *d = shorten(d);
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(clean);
    }
    for k in ["items", "additionalProperties"] {
        if let Some(child) = m.get_mut(k) {
            clean(child);
        }
    }
    for k in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(alts)) = m.get_mut(k) {
            alts.iter_mut().for_each(clean);
        }
    }
}

/// First sentence of a description, without rustdoc link markup. The embedded Kubernetes
/// types carry long descriptions; keeping them whole pushes the ClusterPolicy CRD near the
/// 256 KiB limit of `kubectl apply`'s last-applied annotation.
fn shorten(d: &str) -> String {
    let para = d.split("\n\n").next().unwrap_or(d).replace('\n', " ");
    let first = match sentence_end(&para) {
        Some(i) => &para[..=i],
        None => para.as_str(),
    };
    first
        .replace("[`", "")
        .replace("`]", "")
        .replace('`', "")
        .trim()
        .to_string()
}

/// Where the first sentence ends: the first `. ` that does not close an abbreviation (`e.g.`,
/// `i.e.`) or a one-word lead-in (`Required.`, `Deprecated.`), which alone would say nothing.
fn sentence_end(para: &str) -> Option<usize> {
    para.match_indices(". ").map(|(i, _)| i).find(|&i| {
        let before = &para[..i];
        let word = before.rsplit(' ').next().unwrap_or(before);
        let word = word.trim_start_matches(|c: char| !c.is_alphanumeric());
        let abbreviation =
            ["e.g", "i.e", "etc", "vs"].contains(&word.to_ascii_lowercase().as_str());
        let lead_in = !before.contains(' ');
        !abbreviation && !lead_in
    })
}

/// NVIDIADriver rules upstream enforces with CEL.
fn add_driver_rules(schema: &mut Value) {
    let Some(spec) = schema
        .pointer_mut("/properties/spec")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    spec.insert(
        "x-kubernetes-validations".into(),
        json!([{"rule": "!(self.default && has(self.nodeSelector) && size(self.nodeSelector) > 0)",
                "message": "nodeSelector must not be set when default is true"}]),
    );
    // Required as upstream, each with a schema default (crd_defaults) the API server fills
    // in, so manifests (upstream's sample among them) may leave them out.
    spec.insert("required".into(), json!(["default", "driverType", "image"]));
    if let Some(props) = spec.get_mut("properties").and_then(Value::as_object_mut) {
        for field in ["driverType", "usePrecompiled"] {
            if let Some(f) = props.get_mut(field).and_then(Value::as_object_mut) {
                f.insert(
                    "x-kubernetes-validations".into(),
                    json!([{"rule": "self == oldSelf", "message": format!("{field} is immutable")}]),
                );
            }
        }
    }
}

/// Topology rules upstream enforces with CEL (`levels` immutable, unique, hostname last).
fn add_topology_rules(schema: &mut Value) {
    let Some(levels) = schema
        .pointer_mut("/properties/spec/properties/levels")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    levels.insert("x-kubernetes-list-type".into(), json!("atomic"));
    levels.insert(
        "x-kubernetes-validations".into(),
        json!([
            {"rule": "self == oldSelf", "message": "field is immutable"},
            {"rule": "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0",
             "message": "must be unique"},
            {"rule": "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
             "message": "the kubernetes.io/hostname label can only be used at the lowest level of topology"}
        ]),
    );
}

/// Every CRD as multi-document YAML (what `gantry crds` prints).
pub fn all_crds_yaml() -> Result<String, CrdError> {
    Ok(crd_files()?
        .into_iter()
        .map(|(_, y)| y)
        .collect::<Vec<_>>()
        .join(""))
}

/// One `(file name, YAML)` per CRD, as stored in `deploy/crds/` (`<plural>.<group>.yaml`).
pub fn crd_files() -> Result<Vec<(String, String)>, CrdError> {
    all_crds()?
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let body = serde_yaml::to_string(&crd).map_err(|source| CrdError::Serialize {
                name: name.clone(),
                source,
            })?;
            Ok((
                format!("{name}.yaml"),
                format!("---\n{}", quote_yaml11_booleans(&body)),
            ))
        })
        .collect()
}

/// Quotes plain scalars YAML 1.1 reads as booleans (`on`, `off`, `yes`, `no`, `y`, `n`):
/// the serializer writes YAML 1.2, but Helm and kubectl read YAML 1.1, where the enum
/// `[on, off]` would become `[true, false]` and the string `"off"` fail validation.
fn quote_yaml11_booleans(yaml: &str) -> String {
    const WORDS: [&str; 6] = ["on", "off", "yes", "no", "y", "n"];
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let (head, word) = match line.rsplit_once(' ') {
            Some((h, w)) if h.trim_end().ends_with(['-', ':']) => (h, w),
            _ => (line, ""),
        };
        if WORDS.contains(&word.to_ascii_lowercase().as_str()) {
            out.push_str(&format!("{head} \"{word}\""));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The OpenAPI v3 schema of a kind served at `apiVersion`, for offline validation.
pub fn schema_for(api_version: &str, kind: &str) -> Option<&'static Value> {
    static SCHEMAS: std::sync::OnceLock<Vec<(String, String, Value)>> = std::sync::OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        let mut out = Vec::new();
        for crd in all_crds().unwrap_or_default() {
            for v in crd.spec.versions {
                let schema = v
                    .schema
                    .and_then(|s| s.open_api_v3_schema)
                    .and_then(|s| serde_json::to_value(s).ok());
                if let Some(schema) = schema {
                    out.push((
                        format!("{}/{}", crd.spec.group, v.name),
                        crd.spec.names.kind.clone(),
                        schema,
                    ));
                }
            }
        }
        out
    });
    all.iter()
        .find(|(a, k, _)| a == api_version && k == kind)
        .map(|(_, _, s)| s)
}

/// Problems that would make an API server reject a schema as non-structural, with the
/// JSON-pointer-like location of each. Used by tests; public so the sim can reuse it.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    structural(schema, "", false, &mut out);
    out
}

fn structural(v: &Value, at: &str, in_junctor: bool, out: &mut Vec<String>) {
    let Some(m) = v.as_object() else {
        out.push(format!("{at}: schema is not an object"));
        return;
    };
    if m.contains_key("$ref") || m.contains_key("definitions") || m.contains_key("$defs") {
        out.push(format!("{at}: $ref/definitions are not allowed"));
    }
    let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    if in_junctor {
        for k in [
            "type",
            "nullable",
            "additionalProperties",
            "default",
            "description",
            "x-kubernetes-preserve-unknown-fields",
        ] {
            if m.contains_key(k) {
                out.push(format!("{at}: {k} is not allowed inside anyOf/oneOf/allOf"));
            }
        }
    } else if !m.contains_key("type")
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        out.push(format!("{at}: missing type"));
    }
    if m.contains_key("properties") && m.contains_key("additionalProperties") {
        out.push(format!(
            "{at}: properties and additionalProperties together"
        ));
    }
    if m.get("additionalProperties").is_some_and(Value::is_boolean) {
        out.push(format!("{at}: additionalProperties must be a schema"));
    }
    if m.get("type").and_then(Value::as_str) == Some("array") && !m.contains_key("items") {
        out.push(format!("{at}: array without items"));
    }
    if let Some(t) = m.get("type")
        && !t.is_string()
    {
        out.push(format!("{at}: type must be a single string, got {t}"));
    }
    for j in ["anyOf", "oneOf", "allOf"] {
        if let Some(alts) = m.get(j).and_then(Value::as_array) {
            if !flag("x-kubernetes-int-or-string")
                && j != "allOf"
                && !alts.iter().all(|a| {
                    a.as_object()
                        .is_some_and(|o| o.keys().all(|k| k == "required" || k == "properties"))
                })
            {
                out.push(format!(
                    "{at}: {j} is only allowed for int-or-string or required-field alternatives"
                ));
            }
            for (i, a) in alts.iter().enumerate() {
                structural(a, &format!("{at}/{j}/{i}"), true, out);
            }
        }
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            structural(p, &format!("{at}/properties/{k}"), in_junctor, out);
        }
    }
    if let Some(i) = m.get("items") {
        structural(i, &format!("{at}/items"), in_junctor, out);
    }
    if let Some(a) = m.get("additionalProperties").filter(|a| a.is_object()) {
        structural(a, &format!("{at}/additionalProperties"), in_junctor, out);
    }
}

#[cfg(test)]
mod yaml11_tests {
    #[test]
    fn yaml11_booleans_are_quoted() {
        let y = "enum:\n- on\n- off\n- devtools\nmode: yes\nname: nope\n";
        assert_eq!(
            super::quote_yaml11_booleans(y),
            "enum:\n- \"on\"\n- \"off\"\n- devtools\nmode: \"yes\"\nname: nope\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sentence_skips_abbreviations_and_lead_ins() {
        assert_eq!(
            shorten("Image name, e.g. `driver`. Alone it is used verbatim."),
            "Image name, e.g. driver."
        );
        assert_eq!(
            shorten("Condition type (e.g. Unschedulable). More."),
            "Condition type (e.g. Unschedulable)."
        );
        assert_eq!(
            shorten("Required. A list of node selector terms. The terms are ORed."),
            "Required. A list of node selector terms."
        );
        assert_eq!(shorten("One.\n\nTwo."), "One.");
    }

    #[test]
    fn five_crds_with_expected_names_and_scopes() {
        let crds = all_crds().unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(String, String)> = crds
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    c.spec.scope.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "clusterpolicies.nvidia.com".to_string(),
                    "Cluster".to_string()
                ),
                ("nvidiadrivers.nvidia.com".into(), "Cluster".into()),
                ("migclusterpolicies.nvidia.com".into(), "Cluster".into()),
                ("queues.scheduling.run.ai".into(), "Cluster".into()),
                ("podgroups.scheduling.run.ai".into(), "Namespaced".into()),
                ("topologies.kai.scheduler".into(), "Cluster".into()),
            ]
        );
        let pg = &crds[4];
        assert_eq!(
            pg.spec.names.short_names.as_deref(),
            Some(&["pg".to_string()][..])
        );
    }

    #[test]
    fn schemas_are_structural() {
        for crd in all_crds().unwrap_or_else(|e| panic!("{e}")) {
            for v in &crd.spec.versions {
                let s = serde_json::to_value(
                    v.schema
                        .as_ref()
                        .and_then(|s| s.open_api_v3_schema.as_ref()),
                )
                .unwrap_or_default();
                let problems = structural_problems(&s);
                assert!(
                    problems.is_empty(),
                    "{}: {problems:#?}",
                    crd.metadata.name.clone().unwrap_or_default()
                );
                // KAI's Topology has no status (and so no status subresource).
                let status = v.subresources.as_ref().is_some_and(|s| s.status.is_some());
                assert_eq!(
                    status,
                    crd.spec.names.kind != "Topology",
                    "{}",
                    crd.spec.names.kind
                );
            }
        }
    }
}
