//! Pure: which `nvidia.com/gpu.*` labels and annotations the operator wants on a node
//! (`reference/gpu-operator.md` §3.2). The reconciler turns a [`NodePlan`] into at most one
//! server-side apply (the keys the operator owns) and one merge patch (the keys to remove),
//! and writes nothing when [`NodePlan::is_noop`].
//!
//! Rules:
//! - GPU node: an NFD GPU key (`feature.node.kubernetes.io/pci-10de.present`, …) is `"true"`.
//!   Where NFD has not labelled the node at all, an existing `nvidia.com/gpu.present=true`
//!   (set by hand or by another tool) counts instead; where NFD runs, it is authoritative and
//!   a node that lost its GPU label gets `gpu.present=false` and loses its deploy labels.
//! - Deploy labels per workload config; an existing non-empty value is never overwritten
//!   (a user's `false`, a component's `paused-for-*`), and `false` is never removed.
//! - `nvidia.com/gpu.deploy.operands=false`: no deploy labels on the node.

use std::collections::{BTreeMap, BTreeSet};

use gantry_api::cluster_policy::{ClusterPolicySpec, SandboxMode, WorkloadConfig};
use gantry_api::names::{self, operand};

/// Labels of a node, as read from the API.
pub type Labels = BTreeMap<String, String>;

/// What the operator wants changed on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlan {
    /// Every label the operator owns on the node with its value: the body of the
    /// server-side apply (omitting a key the operator applied before would remove it).
    pub labels: BTreeMap<String, String>,
    /// Every annotation the operator owns on the node.
    pub annotations: BTreeMap<String, String>,
    /// Present labels that must go.
    pub remove_labels: BTreeSet<String>,
    /// Present annotations that must go.
    pub remove_annotations: BTreeSet<String>,
    /// Whether any owned label or annotation differs from the node's current value.
    pub apply_needed: bool,
}

impl NodePlan {
    /// Nothing to write.
    pub fn is_noop(&self) -> bool {
        !self.apply_needed && self.remove_labels.is_empty() && self.remove_annotations.is_empty()
    }

    /// One label of the node once the plan is written.
    pub fn label_after<'a>(&'a self, current: &'a Labels, key: &str) -> Option<&'a str> {
        match self.labels.get(key) {
            Some(v) => Some(v),
            None if self.remove_labels.iter().any(|k| k == key) => None,
            None => current.get(key).map(String::as_str),
        }
    }

    /// The node's labels once the plan is written (the tests' stand-in for the API write).
    #[cfg(test)]
    pub fn labels_after(&self, current: &Labels) -> Labels {
        let mut out = current.clone();
        for k in &self.remove_labels {
            out.remove(k);
        }
        out.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }
}

fn is_true(labels: &Labels, key: &str) -> bool {
    labels.get(key).is_some_and(|v| v == "true")
}

/// Whether NFD has labelled this node at all.
pub fn has_nfd_labels(labels: &Labels) -> bool {
    labels
        .keys()
        .any(|k| k.starts_with(names::NFD_LABEL_PREFIX))
}

/// Whether NFD reports an NVIDIA PCI device on the node.
pub fn has_nfd_gpu(labels: &Labels) -> bool {
    names::NFD_GPU_LABELS.iter().any(|k| is_true(labels, k))
}

/// Whether the node carries a GPU (see the module docs).
pub fn is_gpu_node(labels: &Labels) -> bool {
    has_nfd_gpu(labels) || (!has_nfd_labels(labels) && is_true(labels, names::LABEL_GPU_PRESENT))
}

/// MIG-capable: `nvidia.com/mig.capable=true`, or, when that label is absent, a product name
/// containing h100/a100/a30; never on a vGPU host.
pub fn is_mig_capable(labels: &Labels) -> bool {
    if labels
        .get(names::LABEL_VGPU_HOST_DRIVER_VERSION)
        .is_some_and(|v| !v.is_empty())
    {
        return false;
    }
    match labels.get(names::LABEL_MIG_CAPABLE) {
        Some(v) => v == "true",
        None => labels.get(names::LABEL_GPU_PRODUCT).is_some_and(|p| {
            let p = p.to_ascii_lowercase();
            ["h100", "a100", "a30"].iter().any(|m| p.contains(m))
        }),
    }
}

/// The operands (suffixes of `nvidia.com/gpu.deploy.`) a node of `workload` runs.
pub fn deploy_operands(
    spec: &ClusterPolicySpec,
    workload: WorkloadConfig,
    mig_capable: bool,
) -> Vec<&'static str> {
    match workload {
        WorkloadConfig::Container => {
            let mut v = vec![
                operand::DRIVER,
                operand::GPU_FEATURE_DISCOVERY,
                operand::CONTAINER_TOOLKIT,
                operand::DEVICE_PLUGIN,
                operand::DCGM,
                operand::DCGM_EXPORTER,
                operand::NODE_STATUS_EXPORTER,
                operand::OPERATOR_VALIDATOR,
                operand::CLIENT,
            ];
            if mig_capable {
                v.push(operand::MIG_MANAGER);
            }
            v
        }
        WorkloadConfig::VmPassthrough => vec![
            match spec.sandbox_mode() {
                SandboxMode::Kubevirt => operand::SANDBOX_DEVICE_PLUGIN,
                SandboxMode::Kata => operand::KATA_SANDBOX_DEVICE_PLUGIN,
            },
            operand::SANDBOX_VALIDATOR,
            operand::VFIO_MANAGER,
            operand::KATA_MANAGER,
            operand::CC_MANAGER,
            operand::CLIENT,
        ],
        WorkloadConfig::VmVgpu => vec![
            operand::SANDBOX_DEVICE_PLUGIN,
            operand::VGPU_MANAGER,
            operand::VGPU_DEVICE_MANAGER,
            operand::SANDBOX_VALIDATOR,
            operand::CC_MANAGER,
            operand::CLIENT,
        ],
    }
}

/// The plan for one node under `spec`, from its current labels and annotations.
pub fn plan(spec: &ClusterPolicySpec, labels: &Labels, annotations: &Labels) -> NodePlan {
    let mut want: BTreeMap<String, String> = BTreeMap::new();
    let mut remove: BTreeSet<String> = BTreeSet::new();
    let deploy_keys = labels
        .iter()
        .filter(|(k, _)| k.starts_with(names::LABEL_DEPLOY_PREFIX))
        .filter(|(k, _)| k.as_str() != names::LABEL_DEPLOY_OPERANDS);
    // A deploy label goes unless it is a user's `false`.
    let removable = |v: &String| v != "false";

    let gpu = is_gpu_node(labels);
    if !gpu {
        // NFD says the GPU is gone: flip gpu.present and strip the operands.
        if has_nfd_labels(labels) && labels.contains_key(names::LABEL_GPU_PRESENT) {
            want.insert(names::LABEL_GPU_PRESENT.into(), "false".into());
            for (k, v) in deploy_keys {
                if removable(v) {
                    remove.insert(k.clone());
                }
            }
        }
    } else {
        want.insert(names::LABEL_GPU_PRESENT.into(), "true".into());
        let opted_out = labels
            .get(names::LABEL_DEPLOY_OPERANDS)
            .is_some_and(|v| v == "false");
        let mig_capable = is_mig_capable(labels);
        let workload =
            spec.workload_config_for(labels.get(names::LABEL_WORKLOAD_CONFIG).map(String::as_str));
        let wanted: BTreeSet<String> = if opted_out {
            BTreeSet::new()
        } else {
            deploy_operands(spec, workload, mig_capable)
                .into_iter()
                .map(|o| format!("{}{o}", names::LABEL_DEPLOY_PREFIX))
                .collect()
        };
        for k in &wanted {
            match labels.get(k).map(String::as_str) {
                // Absent or empty: ours to set; already "true": keep owning it.
                None | Some("") | Some("true") => {
                    want.insert(k.clone(), "true".into());
                }
                // Someone else's value (user `false`, `paused-for-*`): leave it alone.
                Some(_) => {}
            }
        }
        for (k, v) in deploy_keys {
            if !wanted.contains(k) && removable(v) {
                remove.insert(k.clone());
            }
        }
        if spec.mig_manager_enabled()
            && mig_capable
            && let Some(default) = spec.mig_manager_default_config()
        {
            match labels.get(names::LABEL_MIG_CONFIG).map(String::as_str) {
                None | Some("") => {
                    want.insert(names::LABEL_MIG_CONFIG.into(), default.into());
                }
                Some(v) if v == default => {
                    want.insert(names::LABEL_MIG_CONFIG.into(), default.into());
                }
                Some(_) => {}
            }
        }
    }

    let mut want_ann = BTreeMap::new();
    let mut remove_ann = BTreeSet::new();
    if gpu && spec.driver_enabled() && spec.driver_auto_upgrade() {
        want_ann.insert(names::ANNOTATION_UPGRADE_ENABLED.to_string(), "true".into());
    } else if annotations.contains_key(names::ANNOTATION_UPGRADE_ENABLED) {
        remove_ann.insert(names::ANNOTATION_UPGRADE_ENABLED.to_string());
    }

    let differs = |want: &BTreeMap<String, String>, have: &Labels| {
        want.iter().any(|(k, v)| have.get(k) != Some(v))
    };
    let apply_needed = differs(&want, labels) || differs(&want_ann, annotations);
    NodePlan {
        labels: want,
        annotations: want_ann,
        remove_labels: remove,
        remove_annotations: remove_ann,
        apply_needed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::cluster_policy::ClusterPolicySpec;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn deploy(o: &str) -> String {
        format!("{}{o}", names::LABEL_DEPLOY_PREFIX)
    }
    /// A spec from YAML; the nine sections the CRD requires default to `{}`.
    fn spec(yaml: &str) -> ClusterPolicySpec {
        let mut v: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        for k in [
            "operator",
            "daemonsets",
            "driver",
            "toolkit",
            "devicePlugin",
            "dcgmExporter",
            "dcgm",
            "nodeStatusExporter",
            "gfd",
        ] {
            if v.get(k).is_none() {
                v[k] = serde_json::json!({});
            }
        }
        serde_json::from_value(v).unwrap()
    }
    const NFD: &str = "feature.node.kubernetes.io/pci-10de.present";

    #[test]
    fn gpu_node_detection() {
        assert!(is_gpu_node(&l(&[(NFD, "true")])));
        assert!(is_gpu_node(&l(&[(
            "feature.node.kubernetes.io/pci-0302_10de.present",
            "true"
        )])));
        assert!(is_gpu_node(&l(&[(names::LABEL_GPU_PRESENT, "true")])));
        assert!(!is_gpu_node(&l(&[(NFD, "false")])));
        assert!(!is_gpu_node(&l(&[])));
        // NFD runs on the node and sees no GPU: gpu.present=true alone does not count.
        assert!(!is_gpu_node(&l(&[
            ("feature.node.kubernetes.io/kernel-version.full", "6.8"),
            (names::LABEL_GPU_PRESENT, "true")
        ])));
    }

    #[test]
    fn container_node_gets_present_and_deploy_labels() {
        let p = plan(&ClusterPolicySpec::default(), &l(&[(NFD, "true")]), &l(&[]));
        assert!(p.apply_needed && p.remove_labels.is_empty());
        assert_eq!(p.labels[names::LABEL_GPU_PRESENT], "true");
        for o in [
            operand::DRIVER,
            operand::CONTAINER_TOOLKIT,
            operand::DEVICE_PLUGIN,
            operand::GPU_FEATURE_DISCOVERY,
            operand::DCGM_EXPORTER,
            operand::OPERATOR_VALIDATOR,
            operand::NODE_STATUS_EXPORTER,
            operand::DCGM,
            operand::CLIENT,
        ] {
            assert_eq!(p.labels[&deploy(o)], "true", "{o}");
        }
        assert!(!p.labels.contains_key(&deploy(operand::MIG_MANAGER)));
        assert!(!p.labels.contains_key(names::LABEL_MIG_CONFIG));
        // Applying the plan makes the next plan a no-op that still owns the same keys.
        let after = p.labels_after(&l(&[(NFD, "true")]));
        let again = plan(&ClusterPolicySpec::default(), &after, &l(&[]));
        assert!(again.is_noop());
        assert_eq!(again.labels, p.labels);
    }

    #[test]
    fn cpu_node_is_left_alone() {
        let p = plan(
            &ClusterPolicySpec::default(),
            &l(&[("kubernetes.io/os", "linux")]),
            &l(&[]),
        );
        assert!(p.is_noop() && p.labels.is_empty());
    }

    #[test]
    fn existing_values_are_never_overwritten() {
        let labels = l(&[
            (NFD, "true"),
            (&deploy(operand::DEVICE_PLUGIN), "false"),
            (
                &deploy(operand::DCGM_EXPORTER),
                names::DEPLOY_PAUSED_FOR_MIG_CHANGE,
            ),
            (&deploy(operand::DRIVER), ""),
        ]);
        let p = plan(&ClusterPolicySpec::default(), &labels, &l(&[]));
        assert!(!p.labels.contains_key(&deploy(operand::DEVICE_PLUGIN)));
        assert!(!p.labels.contains_key(&deploy(operand::DCGM_EXPORTER)));
        assert_eq!(p.labels[&deploy(operand::DRIVER)], "true");
        assert!(p.remove_labels.is_empty());
    }

    #[test]
    fn operands_opt_out_strips_deploy_labels_but_keeps_user_false() {
        let labels = l(&[
            (NFD, "true"),
            (names::LABEL_GPU_PRESENT, "true"),
            (names::LABEL_DEPLOY_OPERANDS, "false"),
            (&deploy(operand::DRIVER), "true"),
            (&deploy(operand::DEVICE_PLUGIN), "false"),
        ]);
        let p = plan(&ClusterPolicySpec::default(), &labels, &l(&[]));
        assert_eq!(p.remove_labels, BTreeSet::from([deploy(operand::DRIVER)]));
        assert_eq!(
            p.labels,
            BTreeMap::from([(names::LABEL_GPU_PRESENT.to_string(), "true".to_string())])
        );
        assert!(!p.apply_needed);
    }

    #[test]
    fn mig_capable_nodes_get_mig_manager_and_all_disabled() {
        let labels = l(&[
            (NFD, "true"),
            (names::LABEL_GPU_PRODUCT, "NVIDIA-H100-80GB-HBM3"),
        ]);
        let p = plan(&ClusterPolicySpec::default(), &labels, &l(&[]));
        assert_eq!(p.labels[&deploy(operand::MIG_MANAGER)], "true");
        assert_eq!(p.labels[names::LABEL_MIG_CONFIG], "all-disabled");
        // A chosen config is left alone; the default we set stays owned.
        let chosen = labels_with(&labels, names::LABEL_MIG_CONFIG, "all-1g.10gb");
        assert!(
            !plan(&ClusterPolicySpec::default(), &chosen, &l(&[]))
                .labels
                .contains_key(names::LABEL_MIG_CONFIG)
        );
        let ours = labels_with(&labels, names::LABEL_MIG_CONFIG, "all-disabled");
        assert!(
            plan(&ClusterPolicySpec::default(), &ours, &l(&[]))
                .labels
                .contains_key(names::LABEL_MIG_CONFIG)
        );
        // mig.capable=false wins over the product name; vGPU hosts are never MIG-capable.
        assert!(!is_mig_capable(&labels_with(
            &labels,
            names::LABEL_MIG_CAPABLE,
            "false"
        )));
        assert!(!is_mig_capable(&labels_with(
            &labels,
            names::LABEL_VGPU_HOST_DRIVER_VERSION,
            "550.1"
        )));
        assert!(is_mig_capable(&l(&[(names::LABEL_MIG_CAPABLE, "true")])));
        // migManager disabled or default "": no mig.config label.
        let off = spec("{migManager: {enabled: false}}");
        assert!(
            !plan(&off, &labels, &l(&[]))
                .labels
                .contains_key(names::LABEL_MIG_CONFIG)
        );
        let empty = spec("{migManager: {config: {default: \"\"}}}");
        assert!(
            !plan(&empty, &labels, &l(&[]))
                .labels
                .contains_key(names::LABEL_MIG_CONFIG)
        );
    }

    fn labels_with(base: &Labels, k: &str, v: &str) -> Labels {
        let mut out = base.clone();
        out.insert(k.into(), v.into());
        out
    }

    #[test]
    fn workload_configs_pick_their_operands_and_drop_the_others() {
        let s = spec("{sandboxWorkloads: {enabled: true}}");
        let labels = l(&[
            (NFD, "true"),
            (names::LABEL_WORKLOAD_CONFIG, "vm-passthrough"),
            (&deploy(operand::DEVICE_PLUGIN), "true"),
            (&deploy(operand::DRIVER), "false"),
        ]);
        let p = plan(&s, &labels, &l(&[]));
        for o in [
            operand::SANDBOX_DEVICE_PLUGIN,
            operand::SANDBOX_VALIDATOR,
            operand::VFIO_MANAGER,
            operand::KATA_MANAGER,
            operand::CC_MANAGER,
            operand::CLIENT,
        ] {
            assert_eq!(p.labels[&deploy(o)], "true", "{o}");
        }
        assert_eq!(
            p.remove_labels,
            BTreeSet::from([deploy(operand::DEVICE_PLUGIN)])
        );

        let kata = spec("{sandboxWorkloads: {enabled: true, mode: kata}}");
        let p = plan(&kata, &labels, &l(&[]));
        assert!(
            p.labels
                .contains_key(&deploy(operand::KATA_SANDBOX_DEVICE_PLUGIN))
        );
        assert!(
            !p.labels
                .contains_key(&deploy(operand::SANDBOX_DEVICE_PLUGIN))
        );

        let vgpu = labels_with(&labels, names::LABEL_WORKLOAD_CONFIG, "vm-vgpu");
        let p = plan(&s, &vgpu, &l(&[]));
        for o in [
            operand::VGPU_MANAGER,
            operand::VGPU_DEVICE_MANAGER,
            operand::SANDBOX_DEVICE_PLUGIN,
        ] {
            assert_eq!(p.labels[&deploy(o)], "true", "{o}");
        }
        assert!(!p.labels.contains_key(&deploy(operand::VFIO_MANAGER)));

        // Invalid label: the default workload; sandbox off: always container.
        let bad = labels_with(&labels, names::LABEL_WORKLOAD_CONFIG, "bogus");
        let dflt = spec("{sandboxWorkloads: {enabled: true, defaultWorkload: vm-vgpu}}");
        assert!(
            plan(&dflt, &bad, &l(&[]))
                .labels
                .contains_key(&deploy(operand::VGPU_MANAGER))
        );
        let p = plan(&ClusterPolicySpec::default(), &labels, &l(&[]));
        assert_eq!(p.labels[&deploy(operand::DEVICE_PLUGIN)], "true");
        assert!(!p.labels.contains_key(&deploy(operand::VFIO_MANAGER)));
    }

    #[test]
    fn gpu_gone_flips_present_and_strips_deploy_labels() {
        let labels = l(&[
            (NFD, "false"),
            (names::LABEL_GPU_PRESENT, "true"),
            (&deploy(operand::DRIVER), "true"),
            (&deploy(operand::DEVICE_PLUGIN), "false"),
        ]);
        let p = plan(&ClusterPolicySpec::default(), &labels, &l(&[]));
        assert_eq!(p.labels[names::LABEL_GPU_PRESENT], "false");
        assert_eq!(p.remove_labels, BTreeSet::from([deploy(operand::DRIVER)]));
    }

    #[test]
    fn upgrade_annotation_follows_auto_upgrade() {
        let on = spec("{driver: {upgradePolicy: {autoUpgrade: true}}}");
        let p = plan(&on, &l(&[(NFD, "true")]), &l(&[]));
        assert_eq!(p.annotations[names::ANNOTATION_UPGRADE_ENABLED], "true");
        let had = l(&[(names::ANNOTATION_UPGRADE_ENABLED, "true")]);
        let p = plan(&ClusterPolicySpec::default(), &l(&[(NFD, "true")]), &had);
        assert!(p.annotations.is_empty());
        assert_eq!(
            p.remove_annotations,
            BTreeSet::from([names::ANNOTATION_UPGRADE_ENABLED.to_string()])
        );
    }
}
