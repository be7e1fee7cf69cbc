//! A container's environment as the kubelet builds it: `envFrom` sources in order, then
//! `env` entries (which win), with `valueFrom` resolved from the downward API, ConfigMaps and
//! Secrets. A non-optional ConfigMap or Secret (or key) that does not exist is the kubelet's
//! `CreateContainerConfigError`: the container is not created until it exists. This is how a
//! fractional pod waits for the ConfigMaps its binder writes (see the scheduler's admission).
//!
//! Pure: the sources are fetched once per attempt ([`fetch`]) and passed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;

/// ConfigMaps and Secrets by (kind, name): their data as strings. Absent: not found.
pub type Sources = BTreeMap<(&'static str, String), BTreeMap<String, String>>;

pub const CONFIGMAP: &str = "configmap";
pub const SECRET: &str = "secret";

/// Every ConfigMap and Secret the pod's containers' env names.
pub fn referenced(pod: &Pod) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let spec = pod.spec.iter();
    let containers = spec.flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
    for c in containers {
        for f in c.env_from.iter().flatten() {
            if let Some(r) = &f.config_map_ref {
                out.push((CONFIGMAP, r.name.clone()));
            }
            if let Some(r) = &f.secret_ref {
                out.push((SECRET, r.name.clone()));
            }
        }
        for e in c.env.iter().flatten() {
            let from = e.value_from.as_ref();
            if let Some(r) = from.and_then(|f| f.config_map_key_ref.as_ref()) {
                out.push((CONFIGMAP, r.name.clone()));
            }
            if let Some(r) = from.and_then(|f| f.secret_key_ref.as_ref()) {
                out.push((SECRET, r.name.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Reads the referenced sources (those that exist) from the API.
pub async fn fetch(client: &kube::Client, namespace: &str, pod: &Pod) -> Result<Sources, String> {
    let mut out = Sources::new();
    for (kind, name) in referenced(pod) {
        let data = if kind == CONFIGMAP {
            Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(&name)
                .await
                .map_err(|e| format!("reading configmap {name:?}: {e}"))?
                .map(|cm| cm.data.unwrap_or_default().into_iter().collect())
        } else {
            Api::<Secret>::namespaced(client.clone(), namespace)
                .get_opt(&name)
                .await
                .map_err(|e| format!("reading secret {name:?}: {e}"))?
                .map(|s| {
                    s.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                        .collect()
                })
        };
        if let Some(d) = data {
            out.insert((kind, name), d);
        }
    }
    Ok(out)
}

fn field(pod: &Pod, node: &str, path: &str) -> Option<String> {
    let m = &pod.metadata;
    match path {
        "spec.nodeName" => Some(node.to_string()),
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.hostIP" => pod.status.as_ref().and_then(|s| {
            if path == "status.podIP" {
                s.pod_ip.clone()
            } else {
                s.host_ip.clone()
            }
        }),
        _ => {
            let key = |p: &str| {
                path.strip_prefix(p)
                    .and_then(|k| k.strip_prefix('\'').and_then(|k| k.strip_suffix("']")))
                    .map(str::to_string)
            };
            if let Some(k) = key("metadata.labels[") {
                return m.labels.as_ref().and_then(|l| l.get(&k).cloned());
            }
            key("metadata.annotations[")
                .and_then(|k| m.annotations.as_ref().and_then(|a| a.get(&k).cloned()))
        }
    }
}

/// The container's environment, or the kubelet's `CreateContainerConfigError` message.
pub fn resolve(
    c: &Container,
    pod: &Pod,
    node: &str,
    sources: &Sources,
) -> Result<BTreeMap<String, String>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = BTreeMap::new();
    for f in c.env_from.iter().flatten() {
        let prefix = f.prefix.as_deref().unwrap_or_default();
        let (kind, name, optional) = match (&f.config_map_ref, &f.secret_ref) {
            (Some(r), _) => (CONFIGMAP, &r.name, r.optional),
            (None, Some(r)) => (SECRET, &r.name, r.optional),
            (None, None) => continue,
        };
        match sources.get(&(kind, name.clone())) {
            Some(data) => {
                for (k, v) in data {
                    out.insert(format!("{prefix}{k}"), v.clone());
                }
            }
            None if optional == Some(true) => {}
            None => return Err(format!("{kind} {name:?} not found")),
        }
    }
    for e in c.env.iter().flatten() {
        let v = match (&e.value, &e.value_from) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(from)) => {
                let keyed = match (&from.config_map_key_ref, &from.secret_key_ref) {
                    (Some(r), _) => Some((CONFIGMAP, &r.name, &r.key, r.optional)),
                    (None, Some(r)) => Some((SECRET, &r.name, &r.key, r.optional)),
                    (None, None) => None,
                };
                match keyed {
                    Some((kind, name, key, optional)) => {
                        let found = sources.get(&(kind, name.clone()));
                        match found.and_then(|d| d.get(key)) {
                            Some(v) => Some(v.clone()),
                            None if optional == Some(true) => None,
                            None if found.is_none() => {
                                return Err(format!("{kind} {name:?} not found"));
                            }
                            None => {
                                return Err(format!(
                                    "couldn't find key {key} in {} {ns}/{name}",
                                    if kind == CONFIGMAP {
                                        "ConfigMap"
                                    } else {
                                        "Secret"
                                    }
                                ));
                            }
                        }
                    }
                    None => from
                        .field_ref
                        .as_ref()
                        .and_then(|f| field(pod, node, &f.field_path)),
                }
            }
            _ => Some(String::new()),
        };
        if let Some(v) = v {
            out.insert(e.name.clone(), v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
            "spec": {"containers": containers},
        }))
        .expect("pod")
    }

    fn src(kind: &'static str, name: &str, kv: &[(&str, &str)]) -> Sources {
        let data = kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BTreeMap::from([((kind, name.to_string()), data)])
    }

    #[test]
    fn env_wins_over_env_from_and_refs_resolve() {
        let p = pod(json!([{"name": "c",
            "envFrom": [{"configMapRef": {"name": "share-evar"}, "prefix": "X_"}],
            "env": [{"name": "X_A", "value": "mine"},
                    {"name": "DEV", "valueFrom": {"configMapKeyRef": {"name": "share", "key": "NVIDIA_VISIBLE_DEVICES"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}]}]));
        let mut s = src(CONFIGMAP, "share-evar", &[("A", "cm"), ("B", "2")]);
        s.extend(src(
            CONFIGMAP,
            "share",
            &[("NVIDIA_VISIBLE_DEVICES", "GPU-1")],
        ));
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let env = resolve(c, &p, "n1", &s).expect("resolves");
        assert_eq!(env["X_A"], "mine");
        assert_eq!(env["X_B"], "2");
        assert_eq!(env["DEV"], "GPU-1");
        assert_eq!(env["NODE"], "n1");
        assert_eq!(env["APP"], "a");
        assert_eq!(
            referenced(&p),
            vec![
                (CONFIGMAP, "share".into()),
                (CONFIGMAP, "share-evar".into())
            ]
        );
    }

    #[test]
    fn missing_sources_are_config_errors_unless_optional() {
        let p = pod(json!([{"name": "c",
            "envFrom": [{"configMapRef": {"name": "gone", "optional": true}}],
            "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}]));
        let c = &p.spec.as_ref().expect("spec").containers[0];
        assert_eq!(
            resolve(c, &p, "n", &Sources::new()).unwrap_err(),
            "configmap \"cm\" not found"
        );
        let wrong_key = src(CONFIGMAP, "cm", &[("other", "1")]);
        assert_eq!(
            resolve(c, &p, "n", &wrong_key).unwrap_err(),
            "couldn't find key k in ConfigMap ns/cm"
        );
    }
}
