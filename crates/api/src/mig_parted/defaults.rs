//! The named MIG configs Gantry ships (the equivalent of mig-parted's `config-default.yaml`,
//! which the operator puts in the `default-mig-parted-config` ConfigMap): `all-disabled`,
//! `all-enabled`, one `all-<profile>` per profile at its maximum count, and `all-balanced`.
//! Every config upstream's default names is here, with the same counts (but the three for GB200
//! boards with 189 GB, `all-3g.95gb`, `all-4g.95gb`, `all-7g.189gb`: the catalog has one table
//! per PCI id, the MIG user guide's 186 GB one), plus HGX B300's and GB300's; unlike upstream, each
//! `all-<profile>` entry carries the `device-filter` of the GPUs that have the profile, so a
//! config selected on a GPU without it leaves that GPU alone instead of failing.

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
    /// H100 NVL, H800 NVL.
    pub const H100_NVL: &[&str] = &["0x232110DE", "0x233A10DE"];
    /// GH200 (96 GB), H100-96GB, PG506-96GB, H20.
    pub const CLASS_96GB: &[&str] = &["0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"];
    /// H200 141 GB and H200 NVL.
    pub const H200: &[&str] = &["0x233510DE", "0x233B10DE"];
    pub const GH200_144GB: &[&str] = &["0x234810DE"];
    pub const B200: &[&str] = &["0x290110DE"];
    pub const GB200: &[&str] = &["0x294110DE"];
    /// HGX B300.
    pub const B300: &[&str] = &["0x318210DE"];
    /// Gantry's catalog id for GB300 (no NVIDIA file we hold names one).
    pub const GB300: &[&str] = &["0x31C210DE"];
    pub const RTX_PRO_6000: &[&str] = &["0x2BB510DE"];
}

/// (profile, instances per GPU).
type Layout = &'static [(&'static str, i64)];

/// One GPU group: its PCI IDs, every GPU-instance profile with its max count, and its
/// `all-balanced` layout (empty: the group has no balanced entry).
struct Group {
    ids: &'static [&'static str],
    profiles: Layout,
    balanced: Layout,
}

/// The seven-slice profile set: 1g, 1g+me, double-memory 1g, 2g, 3g, 4g, 7g.
macro_rules! seven {
    ($g1:literal, $g1x2:literal, $g2:literal, $g3:literal, $g4:literal, $g7:literal) => {
        &[
            ($g1, 7),
            (concat!($g1, "+me"), 1),
            ($g1x2, 4),
            ($g2, 3),
            ($g3, 2),
            ($g4, 1),
            ($g7, 1),
        ]
    };
}

/// In upstream's order of `all-balanced` entries (the last matching entry wins, and no two
/// groups share an ID, so order only matters for reading).
const GROUPS: &[Group] = &[
    Group {
        ids: pci::GB200,
        profiles: seven!(
            "1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"
        ),
        balanced: &[("1g.23gb", 2), ("2g.47gb", 1), ("3g.93gb", 1)],
    },
    Group {
        ids: pci::RTX_PRO_6000,
        profiles: &[
            ("1g.24gb", 4),
            ("1g.24gb+me", 1),
            ("1g.24gb+gfx", 4),
            ("1g.24gb-me", 4),
            ("1g.24gb+me.all", 1),
            ("2g.48gb", 2),
            ("2g.48gb+gfx", 2),
            ("2g.48gb-me", 2),
            ("2g.48gb+me.all", 1),
            ("4g.96gb", 1),
            ("4g.96gb+gfx", 1),
        ],
        balanced: &[("1g.24gb", 2), ("2g.48gb", 1)],
    },
    Group {
        ids: pci::B300,
        profiles: seven!(
            "1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"
        ),
        balanced: &[("1g.34gb", 2), ("2g.67gb", 1), ("3g.135gb", 1)],
    },
    Group {
        ids: pci::GB300,
        profiles: seven!(
            "1g.35gb", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"
        ),
        balanced: &[("1g.35gb", 2), ("2g.70gb", 1), ("3g.139gb", 1)],
    },
    Group {
        ids: pci::B200,
        profiles: seven!(
            "1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"
        ),
        balanced: &[("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)],
    },
    Group {
        ids: pci::GH200_144GB,
        profiles: seven!(
            "1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"
        ),
        balanced: &[("1g.18gb", 2), ("2g.36gb", 1), ("3g.72gb", 1)],
    },
    Group {
        ids: pci::H200,
        profiles: seven!(
            "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"
        ),
        balanced: &[("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)],
    },
    Group {
        ids: pci::H100_NVL,
        profiles: seven!(
            "1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"
        ),
        balanced: &[("1g.12gb", 2), ("2g.24gb", 1), ("3g.47gb", 1)],
    },
    Group {
        ids: pci::CLASS_80GB,
        profiles: seven!(
            "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"
        ),
        balanced: &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],
    },
    Group {
        ids: pci::A100_40GB,
        profiles: seven!(
            "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"
        ),
        balanced: &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)],
    },
    Group {
        ids: pci::A30,
        profiles: &[
            ("1g.6gb", 4),
            ("1g.6gb+me", 1),
            ("2g.12gb", 2),
            ("2g.12gb+me", 1),
            ("4g.24gb", 1),
        ],
        balanced: &[("1g.6gb", 2), ("2g.12gb", 1)],
    },
    Group {
        ids: pci::CLASS_96GB,
        profiles: seven!(
            "1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"
        ),
        balanced: &[("1g.12gb", 2), ("2g.24gb", 1), ("3g.48gb", 1)],
    },
];

/// The config name mig-parted uses for a single-profile layout: `+` becomes `.`.
pub fn config_name(profile: &str) -> String {
    format!("all-{}", profile.replace('+', "."))
}

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
    // One entry per group that has the profile, so each GPU gets its own max count.
    let mut single: IndexMap<String, Vec<MigConfigEntry>> = IndexMap::new();
    for g in GROUPS {
        for (profile, max) in g.profiles {
            single
                .entry(config_name(profile))
                .or_default()
                .push(enabled(g.ids, &[(profile, *max)]));
        }
    }
    single.sort_keys();
    c.extend(single);
    c.insert(
        "all-balanced".into(),
        GROUPS
            .iter()
            .filter(|g| !g.balanced.is_empty())
            .map(|g| enabled(g.ids, g.balanced))
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
