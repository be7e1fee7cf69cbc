//! Upstream's schema defaults (the GPU Operator's kubebuilder `default` markers), written into
//! Gantry's CRD schemas so the API server fills them in as it does for upstream's CRDs: an
//! object read back carries the same values, and a manifest may leave out a required key
//! that has a default (upstream's NVIDIADriver sample omits `default`).
//!
//! As upstream, a default applies only where its parent object is present: `cdi: {}` reads
//! back with `enabled: true`, a policy without `cdi` stays without it. The accessors
//! (`ClusterPolicySpec::cdi_enabled` …) apply the same values to absent sections.

use serde_json::{Value, json};

use crate::cluster_policy::defaults as cp;
use crate::nvidia_driver::DEFAULT_DRIVER_IMAGE;

/// `driver.upgradePolicy` (k8s-operator-libs' DriverUpgradePolicySpec): the same eleven
/// defaults in both CRDs but `autoUpgrade`, which is false in ClusterPolicy, true in
/// NVIDIADriver.
fn upgrade_policy(prefix: &str, auto_upgrade: bool) -> Vec<(String, Value)> {
    [
        ("autoUpgrade", json!(auto_upgrade)),
        ("maxParallelUpgrades", json!(1)),
        ("maxUnavailable", json!("25%")),
        ("waitForCompletion.timeoutSeconds", json!(0)),
        ("podDeletion.force", json!(false)),
        ("podDeletion.timeoutSeconds", json!(300)),
        ("podDeletion.deleteEmptyDir", json!(false)),
        ("drain.enable", json!(false)),
        ("drain.force", json!(false)),
        ("drain.timeoutSeconds", json!(300)),
        ("drain.deleteEmptyDir", json!(false)),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{prefix}.{k}"), v))
    .collect()
}

/// ClusterPolicy (nvidia.com/v1): `(path under spec, default)`.
pub fn cluster_policy() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = [
        ("operator.defaultRuntime", json!("docker")),
        ("operator.runtimeClass", json!(cp::RUNTIME_CLASS)),
        ("daemonsets.updateStrategy", json!("RollingUpdate")),
        ("driver.kernelModuleType", json!("auto")),
        ("toolkit.installDir", json!(cp::TOOLKIT_INSTALL_DIR)),
        ("devicePlugin.mps.root", json!(cp::MPS_ROOT)),
        (
            "migManager.config.name",
            json!(cp::DEFAULT_MIG_PARTED_CONFIG_MAP),
        ),
        ("migManager.config.default", json!("all-disabled")),
        ("vgpuDeviceManager.config.default", json!("default")),
        ("cdi.enabled", json!(true)),
        ("cdi.default", json!(false)),
        ("cdi.nriPluginEnabled", json!(false)),
        ("sandboxWorkloads.defaultWorkload", json!("container")),
        ("sandboxWorkloads.mode", json!("kubevirt")),
        ("hostPaths.kubeletRootDir", json!(cp::KUBELET_ROOT_DIR)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    out.extend(upgrade_policy("driver.upgradePolicy", false));
    out
}

/// NVIDIADriver (nvidia.com/v1alpha1): `(path under spec, default)`.
pub fn nvidia_driver() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = [
        ("default", json!(false)),
        ("driverType", json!("gpu")),
        ("image", json!(DEFAULT_DRIVER_IMAGE)),
        ("kernelModuleType", json!("auto")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    out.extend(upgrade_policy("upgradePolicy", true));
    out
}

/// Writes each default into the `spec` schema of `schema` (a version's openAPIV3Schema).
/// Returns the paths the schema does not have: a renamed field must not lose its default
/// silently.
pub fn apply(schema: &mut Value, defaults: &[(String, Value)]) -> Vec<String> {
    let mut missing = Vec::new();
    for (path, value) in defaults {
        let mut at = schema.pointer_mut("/properties/spec");
        for seg in path.split('.') {
            at = at.and_then(|s| s.pointer_mut(&format!("/properties/{seg}")));
        }
        match at.and_then(Value::as_object_mut) {
            Some(field) => {
                field.insert("default".into(), value.clone());
            }
            None => missing.push(path.clone()),
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_one_difference_between_the_two_upgrade_policies() {
        assert_eq!(cluster_policy().len(), 26);
        assert_eq!(nvidia_driver().len(), 15);
        let auto =
            |d: Vec<(String, Value)>, p: &str| d.into_iter().find(|(k, _)| k == p).map(|(_, v)| v);
        assert_eq!(
            auto(cluster_policy(), "driver.upgradePolicy.autoUpgrade"),
            Some(json!(false))
        );
        assert_eq!(
            auto(nvidia_driver(), "upgradePolicy.autoUpgrade"),
            Some(json!(true))
        );
    }

    #[test]
    fn a_path_the_schema_lacks_is_reported() {
        let mut s = json!({"properties": {"spec": {"properties": {"a": {"type": "object",
            "properties": {"b": {"type": "string"}}}}}}});
        let missing = apply(
            &mut s,
            &[("a.b".into(), json!("x")), ("a.c".into(), json!(1))],
        );
        assert_eq!(missing, ["a.c"]);
        assert_eq!(
            s.pointer("/properties/spec/properties/a/properties/b/default"),
            Some(&json!("x"))
        );
    }
}
