//! The device plugin's config ConfigMap (`devicePlugin.config.name`) must exist and read
//! cleanly before the operator rolls out what reads it: a device-plugin DaemonSet pointing at
//! a missing or broken ConfigMap would restart every plugin without its sharing config and
//! shrink allocatable under running pods. Until it is fixed, the states in [`HELD`] are held
//! back (their objects left exactly as they are, none created, none deleted), the other
//! operands roll out as usual, the ClusterPolicy is `notReady` with a condition naming the
//! ConfigMap, and the operator's watch on its namespace's ConfigMaps re-decides as soon as
//! the ConfigMap is created, fixed, broken or deleted.
//!
//! GPU feature discovery is not held back, though it reads the same ConfigMap: it labels from
//! the last config it read cleanly (the defaults until then), so a missing or broken one
//! never changes its labels, and it relabels as soon as a good one appears (it watches it).

use gantry_api::cluster_policy::ClusterPolicySpec;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use super::{Ctx, Error};
use crate::render::State;

/// Condition reason for a missing or invalid device-plugin ConfigMap.
pub const REASON: &str = "DevicePluginConfigInvalid";

/// The states that wait for a usable ConfigMap: the device plugin, and the MPS control
/// daemon (its config-manager mounts the ConfigMap).
pub const HELD: &[State] = &[State::DevicePlugin, State::MpsControlDaemon];

/// Why the named ConfigMap blocks a rollout (`None`: it is fine). `cm` is the ConfigMap as
/// read (`None`: it does not exist).
pub fn problem(namespace: &str, name: &str, cm: Option<&ConfigMap>) -> Option<String> {
    let field = "spec.devicePlugin.config.name";
    let Some(cm) = cm else {
        return Some(format!(
            "{field}: ConfigMap {namespace}/{name} does not exist; the device plugins keep \
             their current config until it is created"
        ));
    };
    if cm.data.as_ref().is_none_or(|d| d.is_empty()) {
        return Some(format!(
            "{field}: ConfigMap {namespace}/{name} has no data keys (one device plugin config \
             per key)"
        ));
    }
    let value = serde_json::to_value(cm).ok()?;
    let problems = gantry_api::validate::validate_value(&value);
    (!problems.is_empty()).then(|| {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        format!(
            "{field}: ConfigMap {namespace}/{name} is not a valid device plugin config: {}; \
             the device plugins keep their current config",
            list.join("; ")
        )
    })
}

/// Reads the ConfigMap the spec names, if any, and checks it.
pub async fn check(ctx: &Ctx, spec: &ClusterPolicySpec) -> Result<Option<String>, Error> {
    let Some(name) = spec
        .device_plugin_config_name()
        .filter(|_| spec.device_plugin_enabled())
    else {
        return Ok(None);
    };
    let ns = ctx.opts.namespace.as_str();
    let cm = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api("read", format!("ConfigMap {ns}/{name}"), e))?;
    Ok(problem(ns, name, cm.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": "ts", "namespace": "gpu-operator"},
            "data": data}),
        )
        .unwrap()
    }

    #[test]
    fn a_missing_config_map_is_named() {
        let m = problem("gpu-operator", "ts", None).unwrap();
        assert!(
            m.starts_with(
                "spec.devicePlugin.config.name: ConfigMap gpu-operator/ts does not exist"
            ),
            "{m}"
        );
    }

    #[test]
    fn huge_replicas_block_the_rollout_and_good_configs_pass() {
        let ts = |n: u64| {
            format!(
                "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
            )
        };
        let m = problem(
            "gpu-operator",
            "ts",
            Some(&cm(json!({"a": ts(100_000_000)}))),
        )
        .unwrap();
        assert!(
            m.contains("data.a.sharing.timeSlicing.resources[0].replicas: must be <= 1024"),
            "{m}"
        );
        assert_eq!(
            problem("gpu-operator", "ts", Some(&cm(json!({"a": ts(4)})))),
            None
        );
        assert!(problem("gpu-operator", "ts", Some(&cm(json!({})))).is_some());
    }
}
