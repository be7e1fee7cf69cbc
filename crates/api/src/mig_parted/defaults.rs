//! The named MIG configs Gantry ships (the equivalent of mig-parted's default config that
//! the operator puts in the `default-mig-parted-config` ConfigMap): `all-disabled`,
//! `all-enabled`, one `all-<profile>` per profile at its maximum count, and `all-balanced`,
//! with `device-filter`s where a profile exists only on some GPU models.

use std::collections::BTreeMap;

use indexmap::IndexMap;

use super::{DeviceFilter, Devices, MigConfigEntry, MigPartedConfig};

/// PCI device IDs (`0xDDDDVVVV`) of the GPU groups the default configs target.
pub mod pci {
    pub const A100_40GB: &[&str] = &["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"];
    /// H100-80GB, H800-80GB, A100-80GB, A800-80GB.
    pub const CLASS_80GB: &[&str] = &[
        "0x233010DE",
        "0x233110DE",
        "0x232210DE",
        "0x20B210DE",
        "0x20B510DE",
        "0x20F310DE",
        "0x20F510DE",
        "0x232410DE",
    ];
    pub const A30: &[&str] = &["0x20B710DE"];
    pub const H100_NVL: &[&str] = &["0x232110DE", "0x233A10DE"];
    /// H200 141 GB and H200 NVL.
    pub const H200: &[&str] = &["0x233510DE", "0x233B10DE"];
    pub const B200: &[&str] = &["0x290110DE"];
}

/// (config name suffix = profile, GPU group, max count) for the `all-<profile>` configs.
const SINGLE_PROFILE: &[(&str, &[&str], i64)] = &[
    ("1g.5gb", pci::A100_40GB, 7),
    ("1g.5gb+me", pci::A100_40GB, 1),
    ("2g.10gb", pci::A100_40GB, 3),
    ("3g.20gb", pci::A100_40GB, 2),
    ("4g.20gb", pci::A100_40GB, 1),
    ("7g.40gb", pci::A100_40GB, 1),
    ("1g.10gb+me", pci::CLASS_80GB, 1),
    ("1g.20gb", pci::CLASS_80GB, 4),
    ("2g.20gb", pci::CLASS_80GB, 3),
    ("3g.40gb", pci::CLASS_80GB, 2),
    ("4g.40gb", pci::CLASS_80GB, 1),
    ("7g.80gb", pci::CLASS_80GB, 1),
    ("1g.6gb", pci::A30, 4),
    ("1g.6gb+me", pci::A30, 1),
    ("2g.12gb", pci::A30, 2),
    ("2g.12gb+me", pci::A30, 1),
    ("4g.24gb", pci::A30, 1),
    ("1g.12gb", pci::H100_NVL, 7),
    ("1g.12gb+me", pci::H100_NVL, 1),
    ("1g.24gb", pci::H100_NVL, 4),
    ("2g.24gb", pci::H100_NVL, 3),
    ("3g.47gb", pci::H100_NVL, 2),
    ("4g.47gb", pci::H100_NVL, 1),
    ("7g.94gb", pci::H100_NVL, 1),
    ("1g.18gb", pci::H200, 7),
    ("1g.18gb+me", pci::H200, 1),
    ("1g.35gb", pci::H200, 4),
    ("2g.35gb", pci::H200, 3),
    ("3g.71gb", pci::H200, 2),
    ("4g.71gb", pci::H200, 1),
    ("7g.141gb", pci::H200, 1),
    ("1g.23gb", pci::B200, 7),
    ("1g.23gb+me", pci::B200, 1),
    ("1g.45gb", pci::B200, 4),
    ("2g.45gb", pci::B200, 3),
    ("3g.90gb", pci::B200, 2),
    ("4g.90gb", pci::B200, 1),
    ("7g.180gb", pci::B200, 1),
];

/// (profile, instances per GPU).
type Layout = &'static [(&'static str, i64)];

/// `all-balanced` per GPU group.
const BALANCED: &[(&[&str], Layout)] = &[
    (
        pci::A100_40GB,
        &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)],
    ),
    (
        pci::CLASS_80GB,
        &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],
    ),
    (pci::H200, &[("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)]),
    (
        pci::H100_NVL,
        &[("1g.12gb", 2), ("2g.24gb", 1), ("3g.47gb", 1)],
    ),
    (pci::A30, &[("1g.6gb", 2), ("2g.12gb", 1)]),
    (pci::B200, &[("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)]),
];

fn filter(ids: &[&str]) -> Option<DeviceFilter> {
    Some(DeviceFilter::Many(
        ids.iter().map(|s| s.to_string()).collect(),
    ))
}

fn enabled(ids: &[&str], devices: &[(&str, i64)]) -> MigConfigEntry {
    MigConfigEntry {
        device_filter: filter(ids),
        devices: Devices::All,
        mig_enabled: true,
        mig_devices: Some(
            devices
                .iter()
                .map(|(p, n)| (p.to_string(), *n))
                .collect::<BTreeMap<_, _>>(),
        ),
    }
}

/// The full default config file.
pub fn default_config() -> MigPartedConfig {
    let mut c: IndexMap<String, Vec<MigConfigEntry>> = IndexMap::new();
    c.insert(
        "all-disabled".into(),
        vec![MigConfigEntry {
            device_filter: None,
            devices: Devices::All,
            mig_enabled: false,
            mig_devices: None,
        }],
    );
    c.insert(
        "all-enabled".into(),
        vec![MigConfigEntry {
            device_filter: None,
            devices: Devices::All,
            mig_enabled: true,
            mig_devices: Some(BTreeMap::new()),
        }],
    );
    // all-1g.10gb exists on both the 40 GB (4 instances) and the 80 GB class (7).
    c.insert(
        "all-1g.10gb".into(),
        vec![
            enabled(pci::A100_40GB, &[("1g.10gb", 4)]),
            enabled(pci::CLASS_80GB, &[("1g.10gb", 7)]),
        ],
    );
    for (profile, ids, max) in SINGLE_PROFILE {
        let name = format!("all-{}", profile.replace('+', "."));
        c.entry(name)
            .or_default()
            .push(enabled(ids, &[(profile, *max)]));
    }
    c.insert(
        "all-balanced".into(),
        BALANCED
            .iter()
            .map(|(ids, devs)| enabled(ids, devs))
            .collect(),
    );
    MigPartedConfig {
        version: Some("v1".into()),
        mig_configs: c,
    }
}

/// The default config as YAML (the `config.yaml` key of the default ConfigMap).
pub fn default_config_yaml() -> String {
    serde_yaml::to_string(&default_config()).unwrap_or_default()
}

/// The default configs that do something on a GPU with this PCI device ID: each config
/// keeps only the entries that apply to it; configs with no such entry are left out.
pub fn default_configs_for(device_id: u32) -> IndexMap<String, Vec<MigConfigEntry>> {
    default_config()
        .mig_configs
        .into_iter()
        .filter_map(|(name, entries)| {
            let keep: Vec<MigConfigEntry> = entries
                .into_iter()
                .filter(|e| e.applies_to(0, device_id, None))
                .collect();
            (!keep.is_empty()).then_some((name, keep))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = default_config();
        assert_eq!(c.validate(), vec![]);
        for name in [
            "all-disabled",
            "all-enabled",
            "all-1g.10gb",
            "all-balanced",
            "all-1g.18gb",
            "all-7g.141gb",
            "all-1g.5gb.me",
        ] {
            assert!(c.mig_configs.contains_key(name), "{name}");
        }
        let back: MigPartedConfig =
            serde_yaml::from_str(&default_config_yaml()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, c);
    }

    #[test]
    fn per_gpu_view() {
        let h200 = default_configs_for(0x2335_10DE);
        assert!(h200.contains_key("all-1g.18gb") && h200.contains_key("all-disabled"));
        assert!(!h200.contains_key("all-1g.10gb"));
        let bal = &h200["all-balanced"];
        assert_eq!(bal.len(), 1);
        assert_eq!(
            bal[0].mig_devices.as_ref().and_then(|m| m.get("1g.18gb")),
            Some(&2)
        );
        let a100_40 = default_configs_for(0x20B0_10DE);
        assert_eq!(
            a100_40["all-1g.10gb"][0]
                .mig_devices
                .as_ref()
                .and_then(|m| m.get("1g.10gb")),
            Some(&4)
        );
        let a100_80 = default_configs_for(0x20B2_10DE);
        assert_eq!(
            a100_80["all-1g.10gb"][0]
                .mig_devices
                .as_ref()
                .and_then(|m| m.get("1g.10gb")),
            Some(&7)
        );
    }
}
