//! What the kubelet checks before it creates a pod's containers: the node still fits the
//! pod's required node affinity and tolerates its `NoExecute` taints (the kubelet's
//! `NodeAffinity` / `TaintToleration` admission, which pods bound with `spec.nodeName`
//! never passed through a scheduler for), and every ConfigMap and Secret the pod's volumes
//! name exists (else the pod stays `ContainerCreating` with `FailedMount` events).

use gantry_k8s_rules::RequiredNodeAffinity;
use gantry_k8s_rules::taints::{
    TaintEffect, taints_from_k8s, tolerations_from_k8s, untolerated_taint,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, PodSpec, Secret};
use kube::api::Api;

/// Why the node refuses the pod: the kubelet's predicate reason and message.
pub fn node_refuses(spec: &PodSpec, node: &Node) -> Option<(String, String)> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let (required, _) = RequiredNodeAffinity::from_pod_spec(spec);
    if !required.matches(&name, &labels) {
        return Some((
            "NodeAffinity".into(),
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                .into(),
        ));
    }
    let taints: Vec<_> = taints_from_k8s(
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default(),
    )
    .into_iter()
    .filter(|t| t.effect == TaintEffect::NoExecute)
    .collect();
    let tolerations = tolerations_from_k8s(spec.tolerations.as_deref().unwrap_or_default());
    untolerated_taint(&taints, &tolerations).map(|t| {
        (
            "TaintToleration".into(),
            format!(
                "Predicate TaintToleration failed: node(s) had untolerated taint {{{}: {}}}",
                t.key, t.value
            ),
        )
    })
}

/// A volume source the pod needs: (volume name, "configmap"/"secret", object name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub volume: String,
    pub kind: &'static str,
    pub name: String,
}

/// The non-optional ConfigMaps and Secrets the pod's volumes (and projections) mount.
pub fn required_sources(spec: &PodSpec) -> Vec<Source> {
    let mut out = Vec::new();
    for v in spec.volumes.iter().flatten() {
        let mut add = |kind: &'static str, name: Option<&String>, optional: Option<bool>| {
            if optional != Some(true)
                && let Some(n) = name
            {
                out.push(Source {
                    volume: v.name.clone(),
                    kind,
                    name: n.clone(),
                });
            }
        };
        if let Some(cm) = &v.config_map {
            add("configmap", Some(&cm.name), cm.optional);
        }
        if let Some(s) = &v.secret {
            add("secret", s.secret_name.as_ref(), s.optional);
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &p.config_map {
                add("configmap", Some(&cm.name), cm.optional);
            }
            if let Some(s) = &p.secret {
                add("secret", Some(&s.name), s.optional);
            }
        }
    }
    out
}

/// The first required source that does not exist, as the kubelet's mount error.
pub async fn first_missing(
    client: &kube::Client,
    namespace: &str,
    spec: &PodSpec,
) -> Option<(Source, String)> {
    for s in required_sources(spec) {
        let found = match s.kind {
            "configmap" => Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(&s.name)
                .await
                .map(|o| o.is_some()),
            _ => Api::<Secret>::namespaced(client.clone(), namespace)
                .get_opt(&s.name)
                .await
                .map(|o| o.is_some()),
        };
        if !matches!(found, Ok(true)) {
            let msg = format!(
                "MountVolume.SetUp failed for volume {:?} : {} {:?} not found",
                s.volume, s.kind, s.name
            );
            return Some((s, msg));
        }
    }
    None
}

/// Records a `Warning` event on the pod from this node's kubelet (repeats, such as a
/// back-off every few seconds, counted on one Event as the kubelet's recorder does).
pub async fn warn_event(
    events: &gantry_runtime::events::Recorder,
    pod: &super::pod_ref::PodRef,
    node: &str,
    reason: &str,
    message: &str,
) {
    use gantry_runtime::events::{Said, object_ref};
    let regarding = object_ref("Pod", Some(&pod.namespace), &pod.name, Some(&pod.uid));
    let said = Said::warning(reason, message);
    events.for_node(node).publish(&regarding, &said, None).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).expect("pod spec")
    }

    #[test]
    fn sources_skip_optional_ones() {
        let s = spec(json!({"containers": [], "volumes": [
            {"name": "a", "configMap": {"name": "cm"}},
            {"name": "b", "secret": {"secretName": "s", "optional": true}},
            {"name": "c", "projected": {"sources": [{"secret": {"name": "p"}}]}},
            {"name": "d", "emptyDir": {}}]}));
        let got: Vec<(&str, String)> = required_sources(&s)
            .into_iter()
            .map(|s| (s.kind, s.name))
            .collect();
        assert_eq!(
            got,
            vec![("configmap", "cm".to_string()), ("secret", "p".to_string())]
        );
    }

    #[test]
    fn affinity_and_no_execute_taints() {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"gpu": "yes"}},
            "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoExecute"},
                                {"key": "soft", "effect": "NoSchedule"}]}}))
            .expect("node");
        let tolerating = json!([{"key": "dedicated", "operator": "Exists"}]);
        let ok = spec(
            json!({"containers": [], "nodeSelector": {"gpu": "yes"}, "tolerations": tolerating}),
        );
        assert_eq!(
            node_refuses(&ok, &node),
            None,
            "NoSchedule taints do not matter to the kubelet"
        );
        let wrong = spec(
            json!({"containers": [], "nodeSelector": {"gpu": "no"}, "tolerations": tolerating}),
        );
        assert_eq!(
            node_refuses(&wrong, &node).expect("affinity").0,
            "NodeAffinity"
        );
        let untolerated = spec(json!({"containers": []}));
        assert_eq!(
            node_refuses(&untolerated, &node).expect("taint").0,
            "TaintToleration"
        );
    }
}
