//! The GPU operator's side of the picture: the ClusterPolicy's state, each node's operand
//! pods (driver, toolkit, device plugin, …) and its driver-upgrade and MIG state. Pure:
//! built from API objects.

use std::collections::BTreeMap;

use gantry_api::names;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::DynamicObject;
use serde::{Deserialize, Serialize};

/// The ClusterPolicy in charge, as its status reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    pub name: String,
    /// `status.state`: `ready`, `notReady`, `ignored`, or empty before the first report.
    pub state: String,
    /// The message of the first condition that is not satisfied (why it is not ready).
    pub message: String,
}

/// The ClusterPolicy the operator acts on ([`gantry_api::cluster_policy::active`]).
pub fn policy_view(policies: &[DynamicObject]) -> Option<PolicyView> {
    let p = gantry_api::cluster_policy::active(policies, |p| &p.metadata)?;
    let status = &p.data["status"];
    let conditions = status["conditions"].as_array();
    let message = conditions
        .into_iter()
        .flatten()
        .find(|c| {
            // Upstream reports `Ready=True` and `Error=False` when all is well.
            let bad_ready = c["type"] == "Ready" && c["status"] != "True";
            let error = c["type"] == "Error" && c["status"] == "True";
            bad_ready || error
        })
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_string();
    Some(PolicyView {
        name: p.metadata.name.clone().unwrap_or_default(),
        state: status["state"].as_str().unwrap_or("").to_string(),
        message,
    })
}

/// The operand a pod runs, from the DaemonSet that owns it (`nvidia-device-plugin-daemonset`
/// → `device-plugin`); `None` for pods no operand DaemonSet owns.
fn operand_of(p: &Pod) -> Option<String> {
    let owner = p
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "DaemonSet")?;
    let name = owner.name.strip_suffix("-daemonset").unwrap_or(&owner.name);
    let name = name
        .strip_prefix("nvidia-")
        .or_else(|| name.strip_prefix("gpu-operator-"))
        .unwrap_or(name);
    let known = [
        names::operand::DRIVER,
        names::operand::CONTAINER_TOOLKIT,
        names::operand::OPERATOR_VALIDATOR,
        names::operand::DEVICE_PLUGIN,
        names::operand::GPU_FEATURE_DISCOVERY,
        names::operand::DCGM,
        names::operand::DCGM_EXPORTER,
        names::operand::MIG_MANAGER,
        names::operand::NODE_STATUS_EXPORTER,
    ];
    known.iter().find(|k| name == **k).map(|k| k.to_string())
}

/// Operand → status (`kubectl get pods`' STATUS) of the operand pods on `node`.
pub fn operands(pods: &[Pod], node: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for p in pods {
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) {
            continue;
        }
        let Some(operand) = operand_of(p) else {
            continue;
        };
        let status = serde_json::to_value(p)
            .map(|v| crate::apiserver::table::pod_status(&v))
            .unwrap_or_default();
        let status = if p.metadata.deletion_timestamp.is_some() {
            "Terminating".to_string()
        } else {
            status
        };
        out.insert(operand, status);
    }
    out
}

/// A node's label, if set and not empty.
pub fn node_label(n: &Node, key: &str) -> Option<String> {
    n.metadata
        .labels
        .as_ref()?
        .get(key)
        .filter(|v| !v.is_empty())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_oldest_policy_and_why_it_is_not_ready() {
        let p = |name: &str, ts: &str, state: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                "metadata": {"name": name, "creationTimestamp": ts},
                "status": {"state": state, "conditions": [
                    {"type": "Ready", "status": "False", "message": format!("{name} waits")},
                    {"type": "Error", "status": "False"}]}}))
            .unwrap()
        };
        let v = policy_view(&[
            p("b", "2026-01-02T00:00:00Z", "ignored"),
            p("a", "2026-01-01T00:00:00Z", "notReady"),
        ])
        .unwrap();
        assert_eq!(
            (v.name.as_str(), v.state.as_str(), v.message.as_str()),
            ("a", "notReady", "a waits")
        );
        assert!(policy_view(&[]).is_none());
    }

    #[test]
    fn operand_pods_by_owner() {
        let pod = |owner: &str, node: &str, waiting: Option<&str>| -> Pod {
            let state = match waiting {
                Some(r) => json!({"waiting": {"reason": r}}),
                None => json!({"running": {}}),
            };
            serde_json::from_value(json!({
                "metadata": {"name": format!("{owner}-x"), "namespace": "gpu-operator",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                  "name": owner, "uid": "u"}]},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": if waiting.is_some() { "Pending" } else { "Running" },
                           "containerStatuses": [{"name": "c", "ready": waiting.is_none(),
                                                  "restartCount": 0, "image": "i", "imageID": "",
                                                  "state": state}]}
            }))
            .unwrap()
        };
        let pods = vec![
            pod("nvidia-device-plugin-daemonset", "n0", None),
            pod("nvidia-dcgm-exporter", "n0", Some("CrashLoopBackOff")),
            pod("nvidia-driver-daemonset", "n1", None),
            pod("some-other-app", "n0", None),
        ];
        let o = operands(&pods, "n0");
        assert_eq!(
            o,
            BTreeMap::from([
                ("dcgm-exporter".to_string(), "CrashLoopBackOff".to_string()),
                ("device-plugin".to_string(), "Running".to_string()),
            ])
        );
    }
}
