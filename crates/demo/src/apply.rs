//! Applying manifests the way `kubectl apply --server-side` does: multi-document YAML,
//! any kind the server knows (CRDs included, once established), one field manager.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};

use crate::DemoError;

pub const FIELD_MANAGER: &str = "gantry-demo";

/// Split a multi-document YAML file into JSON objects (empty documents skipped).
pub fn documents(source: &str, text: &str) -> Result<Vec<serde_json::Value>, DemoError> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(doc).map_err(|e| DemoError::Manifest {
                file: source.to_string(),
                reason: e.to_string(),
            })?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Server-side apply one object; creates its namespace first when missing.
pub async fn apply(client: &kube::Client, obj: &serde_json::Value) -> Result<(), DemoError> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let what = format!("{kind} {name}");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| DemoError::kube(&what, e))?;
    let api: Api<DynamicObject> = match (caps.scope, obj["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => {
            ensure_namespace(client, ns).await?;
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &ar),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|e| DemoError::kube(&what, e))?;
    Ok(())
}

/// Apply every document of a manifest file.
pub async fn apply_all(
    client: &kube::Client,
    source: &str,
    text: &str,
) -> Result<usize, DemoError> {
    let docs = documents(source, text)?;
    for d in &docs {
        apply(client, d).await?;
    }
    Ok(docs.len())
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), DemoError> {
    gantry_runtime::ensure_namespace(client, name)
        .await
        .map_err(|e| DemoError::kube(&format!("Namespace {name}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_demo_manifest_parses() {
        for (file, text) in crate::manifests::ALL {
            let docs = documents(file, text).unwrap();
            assert!(!docs.is_empty(), "{file}");
            for d in docs {
                assert!(
                    d["apiVersion"].is_string() && d["kind"].is_string(),
                    "{file}: {d}"
                );
                assert!(d["metadata"]["name"].is_string(), "{file}");
            }
        }
        assert!(
            documents("x.yaml", "a: [")
                .unwrap_err()
                .to_string()
                .contains("x.yaml")
        );
    }
}
