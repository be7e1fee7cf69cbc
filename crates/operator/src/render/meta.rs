//! Object scaffolding shared by every state: metadata (state label, managed-by, owner,
//! namespace), ServiceAccounts and RBAC, ConfigMaps, Services.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{ClusterFacts, LABEL_MANAGED_BY, LABEL_STATE, MANAGED_BY, RenderError, State};
use gantry_api::cluster_policy::ClusterPolicySpec;

/// What every operand builder gets: the spec, the cluster facts and the state it renders for.
pub(crate) struct Ctx<'a> {
    pub spec: &'a ClusterPolicySpec,
    pub facts: &'a ClusterFacts,
    pub state: State,
}

/// Serialize a typed value taken from the spec; the error names the field.
pub(crate) fn to_json<T: Serialize>(path: &str, v: &T) -> Result<Value, RenderError> {
    serde_json::to_value(v).map_err(|e| RenderError {
        path: path.to_string(),
        message: format!("cannot be rendered: {e}"),
    })
}

impl Ctx<'_> {
    pub fn namespace(&self) -> &str {
        &self.facts.namespace
    }

    /// The two labels every rendered object carries.
    pub fn base_labels(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(LABEL_STATE.into(), self.state.name().into());
        m.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
        m
    }

    /// `metadata` with name, namespace (when namespaced), the base labels plus `extra`
    /// labels, and the owner reference when one is given.
    pub fn meta(
        &self,
        name: &str,
        namespaced: bool,
        extra: &Map<String, Value>,
    ) -> Result<Value, RenderError> {
        let mut labels = extra.clone();
        labels.extend(self.base_labels());
        let mut m = Map::new();
        m.insert("name".into(), name.into());
        if namespaced {
            m.insert("namespace".into(), self.namespace().into());
        }
        m.insert("labels".into(), Value::Object(labels));
        if let Some(owner) = &self.facts.owner {
            m.insert(
                "ownerReferences".into(),
                json!([to_json("metadata.ownerReferences", owner)?]),
            );
        }
        Ok(Value::Object(m))
    }

    /// A whole object: `apiVersion`, `kind`, `metadata` and the given top-level fields.
    pub fn object(
        &self,
        api_version: &str,
        kind: &str,
        name: &str,
        namespaced: bool,
        body: Value,
    ) -> Result<Value, RenderError> {
        let mut m = Map::new();
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
        m.insert("metadata".into(), self.meta(name, namespaced, &Map::new())?);
        if let Value::Object(b) = body {
            m.extend(b);
        }
        Ok(Value::Object(m))
    }

    /// A Service selecting pods by `selector`; it carries those labels itself so a
    /// ServiceMonitor can select it by the same ones.
    pub fn service(
        &self,
        name: &str,
        selector: &Map<String, Value>,
        mut spec: Map<String, Value>,
        annotations: Option<Value>,
    ) -> Result<Value, RenderError> {
        let mut meta = self.meta(name, true, selector)?;
        if let (Some(a), Some(m)) = (annotations, meta.as_object_mut()) {
            m.insert("annotations".into(), a);
        }
        spec.insert("selector".into(), Value::Object(selector.clone()));
        Ok(json!({ "apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec }))
    }

    pub fn config_map(&self, name: &str, data: Value) -> Result<Value, RenderError> {
        self.object("v1", "ConfigMap", name, true, json!({ "data": data }))
    }
}

/// One RBAC rule: API groups, resources, verbs.
pub(crate) struct Rule(
    pub &'static [&'static str],
    pub &'static [&'static str],
    pub &'static [&'static str],
);

fn rules_json(rules: &[Rule]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|Rule(groups, resources, verbs)| {
                json!({ "apiGroups": groups, "resources": resources, "verbs": verbs })
            })
            .collect(),
    )
}

/// The ServiceAccount `name`, and — only when it needs any — a Role (rules in the operator
/// namespace) and a ClusterRole (cluster-wide rules), each bound to that account. Least
/// privilege: an agent that talks to no API gets the bare account.
pub(crate) fn service_account(
    ctx: &Ctx<'_>,
    name: &str,
    namespaced: &[Rule],
    cluster: &[Rule],
) -> Result<Vec<Value>, RenderError> {
    let mut out = vec![ctx.object("v1", "ServiceAccount", name, true, json!({}))?];
    let subject = json!([{ "kind": "ServiceAccount", "name": name, "namespace": ctx.namespace() }]);
    let rbac = "rbac.authorization.k8s.io/v1";
    if !namespaced.is_empty() {
        out.push(ctx.object(
            rbac,
            "Role",
            name,
            true,
            json!({ "rules": rules_json(namespaced) }),
        )?);
        out.push(ctx.object(
            rbac,
            "RoleBinding",
            name,
            true,
            json!({
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
                "subjects": subject,
            }),
        )?);
    }
    if !cluster.is_empty() {
        out.push(ctx.object(
            rbac,
            "ClusterRole",
            name,
            false,
            json!({ "rules": rules_json(cluster) }),
        )?);
        out.push(ctx.object(
            rbac,
            "ClusterRoleBinding",
            name,
            false,
            json!({
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
                "subjects": subject,
            }),
        )?);
    }
    Ok(out)
}

/// Apply order of kinds inside one state (upstream's asset file order).
pub(crate) fn kind_rank(obj: &Value) -> u8 {
    match obj.get("kind").and_then(Value::as_str).unwrap_or("") {
        "RuntimeClass" => 0,
        "ServiceAccount" => 1,
        "Role" => 2,
        "ClusterRole" => 3,
        "RoleBinding" => 4,
        "ClusterRoleBinding" => 5,
        "ConfigMap" => 6,
        "Service" => 7,
        "ServiceMonitor" => 8,
        "DaemonSet" => 9,
        "PrometheusRule" => 10,
        _ => 11,
    }
}

pub(crate) fn is_daemonset(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("DaemonSet")
}
