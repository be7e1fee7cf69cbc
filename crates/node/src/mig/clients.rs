//! Which pods on the node are GPU clients the MIG manager must see gone before it touches the
//! GPUs, and which validator pods it deletes (as upstream's reconfigure script does). Pure.

use gantry_api::names::{self, LABEL_DEPLOY_PREFIX, MIG_PAUSED_OPERANDS, app};
use k8s_openapi::api::core::v1::Pod;

/// `app=` values of the operand pods upstream waits for.
const CLIENT_APPS: [&str; 4] = [
    app::DEVICE_PLUGIN,
    app::GPU_FEATURE_DISCOVERY,
    app::DCGM_EXPORTER,
    app::DCGM,
];

/// Validator pods that are deleted (not waited for) before a change.
const VALIDATOR_APPS: [&str; 2] = [app::CUDA_VALIDATOR, app::DEVICE_PLUGIN_VALIDATOR];

fn app_label(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(names::LABEL_APP)
        .map(String::as_str)
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A pod that uses the GPUs through the paused operands: an operand `app=` upstream knows, or
/// any pod scheduled by a node selector on one of the pausable `nvidia.com/gpu.deploy.*` labels.
pub fn is_gpu_client(pod: &Pod) -> bool {
    if finished(pod) {
        return false;
    }
    if app_label(pod).is_some_and(|a| CLIENT_APPS.contains(&a)) {
        return true;
    }
    let Some(sel) = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()) else {
        return false;
    };
    MIG_PAUSED_OPERANDS
        .iter()
        .any(|op| sel.contains_key(&format!("{LABEL_DEPLOY_PREFIX}{op}")))
}

/// A validator pod to delete before a change (it is re-run afterwards by its owner).
pub fn is_validator(pod: &Pod) -> bool {
    app_label(pod).is_some_and(|a| VALIDATOR_APPS.contains(&a))
}

/// `namespace/name`, for messages.
pub fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn operand_pods_are_clients_workloads_are_not() {
        let dp = pod(
            json!({"metadata": {"name": "dp", "namespace": "gpu-operator", "labels": {"app": "nvidia-device-plugin-daemonset"}}}),
        );
        assert!(is_gpu_client(&dp));
        let by_selector = pod(json!({"metadata": {"name": "x"}, "spec": {"containers": [],
            "nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"}}}));
        assert!(is_gpu_client(&by_selector));
        let mig_manager = pod(
            json!({"metadata": {"name": "mm", "labels": {"app": "nvidia-mig-manager"}},
            "spec": {"containers": [], "nodeSelector": {"nvidia.com/gpu.deploy.mig-manager": "true"}}}),
        );
        assert!(!is_gpu_client(&mig_manager));
        let done = pod(
            json!({"metadata": {"name": "dp", "labels": {"app": "nvidia-dcgm"}}, "status": {"phase": "Succeeded"}}),
        );
        assert!(!is_gpu_client(&done));
        let cuda =
            pod(json!({"metadata": {"name": "c", "labels": {"app": "nvidia-cuda-validator"}}}));
        assert!(is_validator(&cuda) && !is_gpu_client(&cuda));
        assert_eq!(pod_ref(&dp), "gpu-operator/dp");
    }
}
