//! The inline layouts of MigClusterPolicies as a mig-parted file (pure): one named config
//! `gantry-mcp-<policy>` each, kept in Gantry's ConfigMap that the MIG manager merges in.

use std::collections::BTreeMap;

use gantry_api::mig_cluster_policy::MigClusterPolicy;
use gantry_api::mig_parted::{MigConfigEntry, MigPartedConfig};
use gantry_api::names;

/// The file to store. A config no policy defines any more is kept while a node's
/// `nvidia.com/mig.config` still names it (its MIG manager may re-read it after a restart).
pub fn custom_layouts<'a>(
    policies: &[MigClusterPolicy],
    node_configs: impl IntoIterator<Item = &'a str>,
    existing: Option<&MigPartedConfig>,
) -> MigPartedConfig {
    let mut configs: BTreeMap<String, Vec<MigConfigEntry>> = policies
        .iter()
        // An invalid inline layout would make the MIG manager refuse the whole merged file.
        .filter(|p| p.spec.validate().is_empty())
        .filter_map(|p| Some((p.wanted_config(), p.spec.layout.custom.clone()?)))
        .filter(|(_, entries)| !entries.is_empty())
        .collect();
    if let Some(old) = existing {
        for name in node_configs {
            if name.starts_with(names::MIG_CLUSTER_POLICY_CONFIG_PREFIX)
                && !configs.contains_key(name)
                && let Some(entries) = old.mig_configs.get(name)
            {
                configs.insert(name.to_string(), entries.clone());
            }
        }
    }
    MigPartedConfig {
        version: Some("v1".to_string()),
        mig_configs: configs.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::mig_cluster_policy::{MigClusterPolicySpec, MigLayout};

    fn custom(name: &str, yaml: &str) -> MigClusterPolicy {
        MigClusterPolicy::new(
            name,
            MigClusterPolicySpec {
                gpu_products: Some(vec!["NVIDIA-H100-80GB-HBM3".into()]),
                layout: MigLayout {
                    custom: Some(serde_yaml::from_str(yaml).unwrap()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
    }

    #[test]
    fn inline_layouts_become_named_configs_and_referenced_ones_stay() {
        let a = custom(
            "a",
            "- devices: all\n  mig-enabled: true\n  mig-devices: {\"1g.10gb\": 7}\n",
        );
        let named = MigClusterPolicy::new(
            "n",
            MigClusterPolicySpec {
                layout: MigLayout {
                    config: Some("all-balanced".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let first = custom_layouts(&[a.clone(), named.clone()], [], None);
        assert_eq!(
            first.mig_configs.keys().collect::<Vec<_>>(),
            ["gantry-mcp-a"]
        );
        assert!(first.validate().is_empty(), "{:?}", first.validate());
        // Policy a is gone; a node still names its config, another node an unknown one.
        let second = custom_layouts(
            &[named],
            ["gantry-mcp-a", "gantry-mcp-zzz", "all-balanced"],
            Some(&first),
        );
        assert_eq!(second, first);
        let third = custom_layouts(&[], [], Some(&first));
        assert!(third.mig_configs.is_empty());
    }
}
