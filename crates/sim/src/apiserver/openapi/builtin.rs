//! OpenAPI v3 schemas of the built-in kinds, from k8s-openapi's generated `JsonSchema`
//! impls (the same descriptions the real server publishes, since both come from the
//! upstream OpenAPI document). Generated once per process.

use k8s_openapi::api::{admissionregistration, apps, batch, coordination, core, events};
use k8s_openapi::api::{networking, node, policy, rbac, scheduling, storage};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use std::sync::OnceLock;

/// A served kind and the id of its schema in `definitions`.
pub struct Root {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub id: String,
}

/// Every built-in kind's schema and everything they reference, keyed by schema id
/// (`io.k8s.api.core.v1.Pod`); `$ref`s point at `#/components/schemas/<id>`.
pub struct Builtins {
    pub roots: Vec<Root>,
    pub definitions: Map<String, Value>,
}

/// The schema id of `ObjectMeta` (custom resources' `metadata` refers to it).
pub fn object_meta_id() -> String {
    <ObjectMeta as schemars::JsonSchema>::schema_name().into_owned()
}

fn add<K: k8s_openapi::Resource + schemars::JsonSchema>(
    g: &mut SchemaGenerator,
    roots: &mut Vec<Root>,
) {
    let _ = g.subschema_for::<K>();
    roots.push(Root {
        group: K::GROUP,
        version: K::VERSION,
        kind: K::KIND,
        id: K::schema_name().into_owned(),
    });
}

pub fn builtins() -> &'static Builtins {
    static B: OnceLock<Builtins> = OnceLock::new();
    B.get_or_init(generate)
}

fn generate() -> Builtins {
    let mut g = SchemaGenerator::new(SchemaSettings::openapi3());
    let mut r = Vec::new();
    let _ = g.subschema_for::<ObjectMeta>();
    add::<core::v1::Namespace>(&mut g, &mut r);
    add::<core::v1::Node>(&mut g, &mut r);
    add::<core::v1::Pod>(&mut g, &mut r);
    add::<core::v1::Binding>(&mut g, &mut r);
    add::<core::v1::ConfigMap>(&mut g, &mut r);
    add::<core::v1::Secret>(&mut g, &mut r);
    add::<core::v1::Service>(&mut g, &mut r);
    add::<core::v1::Endpoints>(&mut g, &mut r);
    add::<core::v1::ServiceAccount>(&mut g, &mut r);
    add::<core::v1::Event>(&mut g, &mut r);
    add::<core::v1::PersistentVolumeClaim>(&mut g, &mut r);
    add::<core::v1::PersistentVolume>(&mut g, &mut r);
    add::<core::v1::ResourceQuota>(&mut g, &mut r);
    add::<core::v1::LimitRange>(&mut g, &mut r);
    add::<apps::v1::DaemonSet>(&mut g, &mut r);
    add::<apps::v1::Deployment>(&mut g, &mut r);
    add::<apps::v1::ReplicaSet>(&mut g, &mut r);
    add::<apps::v1::StatefulSet>(&mut g, &mut r);
    add::<apps::v1::ControllerRevision>(&mut g, &mut r);
    add::<batch::v1::Job>(&mut g, &mut r);
    add::<batch::v1::CronJob>(&mut g, &mut r);
    add::<coordination::v1::Lease>(&mut g, &mut r);
    add::<events::v1::Event>(&mut g, &mut r);
    add::<policy::v1::PodDisruptionBudget>(&mut g, &mut r);
    add::<rbac::v1::Role>(&mut g, &mut r);
    add::<rbac::v1::RoleBinding>(&mut g, &mut r);
    add::<rbac::v1::ClusterRole>(&mut g, &mut r);
    add::<rbac::v1::ClusterRoleBinding>(&mut g, &mut r);
    add::<scheduling::v1::PriorityClass>(&mut g, &mut r);
    add::<node::v1::RuntimeClass>(&mut g, &mut r);
    add::<storage::v1::StorageClass>(&mut g, &mut r);
    add::<networking::v1::NetworkPolicy>(&mut g, &mut r);
    add::<admissionregistration::v1::ValidatingWebhookConfiguration>(&mut g, &mut r);
    add::<admissionregistration::v1::MutatingWebhookConfiguration>(&mut g, &mut r);
    add::<apiext::CustomResourceDefinition>(&mut g, &mut r);
    let mut definitions = g.take_definitions(true);
    for root in &r {
        if let Some(Value::Object(s)) = definitions.get_mut(&root.id) {
            s.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": root.group, "version": root.version, "kind": root.kind}]),
            );
            // k8s-openapi marks `metadata` required (it is in Rust); the server's schema does not.
            if let Some(Value::Array(req)) = s.get_mut("required") {
                req.retain(|f| f != "metadata");
                if req.is_empty() {
                    s.remove("required");
                }
            }
        }
    }
    Builtins {
        roots: r,
        definitions,
    }
}

/// Adds to `out` the schemas `value` refers to, and theirs, from `defs`.
pub fn add_referenced(value: &Value, defs: &Map<String, Value>, out: &mut Map<String, Value>) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(id) = m
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    && !out.contains_key(id)
                    && let Some(d) = defs.get(id)
                {
                    out.insert(id.to_string(), d.clone());
                    stack.push(d);
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_schema_reaches_container_fields_with_descriptions() {
        let b = builtins();
        let pod = &b.definitions["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"][0]["kind"],
            json!("Pod")
        );
        assert!(pod.get("required").is_none(), "{pod}");
        // `spec` refers to PodSpec the way the real server writes it: allOf + description.
        let spec = &pod["properties"]["spec"];
        assert_eq!(
            spec["allOf"][0]["$ref"],
            json!("#/components/schemas/io.k8s.api.core.v1.PodSpec"),
            "{spec}"
        );
        assert!(spec["description"].as_str().is_some());
        let mut closure = Map::new();
        add_referenced(pod, &b.definitions, &mut closure);
        let container = &closure["io.k8s.api.core.v1.Container"];
        assert!(
            container["properties"]["image"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("image")),
            "{container}"
        );
        assert!(closure.contains_key(&object_meta_id()));
    }
}
