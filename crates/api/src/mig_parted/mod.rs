//! mig-parted config file v1: named MIG layouts (`mig-configs`), each a list of entries that
//! say which GPUs (`devices`, `device-filter`) get which MIG mode and instances.
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   all-1g.10gb:
//!     - devices: all
//!       mig-enabled: true
//!       mig-devices: {"1g.10gb": 7}
//! ```

pub mod defaults;
pub mod profile;

use std::collections::BTreeMap;
use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

pub use defaults::{default_config, default_config_yaml, default_configs_for};
pub use profile::{KNOWN_PROFILES, MigProfile, parse_known_profile};

use crate::problem::{Problem, index, join};

/// A whole mig-parted config file.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MigPartedConfig {
    /// Must be `v1` (required as soon as the file has other keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Named layouts, in file order.
    #[serde(rename = "mig-configs")]
    pub mig_configs: IndexMap<String, Vec<MigConfigEntry>>,
}

/// Which GPUs an entry applies to: `all` or a list of GPU indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Devices {
    All,
    Indices(Vec<u32>),
}

/// `device-filter`: one PCI ID or a list (`0xDDDDVVVV`, optionally `:0xSSSSssss`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum DeviceFilter {
    One(String),
    Many(Vec<String>),
}

impl DeviceFilter {
    pub fn ids(&self) -> Vec<&str> {
        match self {
            DeviceFilter::One(s) => vec![s.as_str()],
            DeviceFilter::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// One entry of a named layout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MigConfigEntry {
    #[serde(
        rename = "device-filter",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub device_filter: Option<DeviceFilter>,
    pub devices: Devices,
    #[serde(rename = "mig-enabled")]
    pub mig_enabled: bool,
    /// Profile → instance count per GPU. `{}` with `mig-enabled: true` = MIG on, no instances.
    #[serde(
        rename = "mig-devices",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub mig_devices: Option<BTreeMap<String, i64>>,
}

impl Serialize for Devices {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Devices::All => s.serialize_str("all"),
            Devices::Indices(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Devices;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("devices: \"all\" or a list of GPU indices")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Devices, E> {
                if v == "all" {
                    Ok(Devices::All)
                } else {
                    Err(E::custom(format!(
                        "devices must be \"all\" or a list of GPU indices, got {v:?}"
                    )))
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Devices, A::Error> {
                let mut out = Vec::new();
                while let Some(i) = seq.next_element::<u32>()? {
                    out.push(i);
                }
                Ok(Devices::Indices(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parse `0xDDDDVVVV` (optionally `:0xSSSSssss`) into (device id, subsystem id).
pub fn parse_pci_filter(s: &str) -> Option<(u32, Option<u32>)> {
    let hex = |t: &str| {
        let h = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
        (h.len() == 8)
            .then(|| u32::from_str_radix(h, 16).ok())
            .flatten()
    };
    match s.split_once(':') {
        Some((d, sub)) => Some((hex(d)?, Some(hex(sub)?))),
        None => Some((hex(s)?, None)),
    }
}

impl MigConfigEntry {
    /// Whether this entry applies to GPU `index` with PCI `device_id` (`0xDDDDVVVV` as u32)
    /// and optional subsystem id.
    pub fn applies_to(&self, gpu_index: u32, device_id: u32, subsystem_id: Option<u32>) -> bool {
        let by_index = match &self.devices {
            Devices::All => true,
            Devices::Indices(v) => v.contains(&gpu_index),
        };
        let by_filter = self.device_filter.as_ref().is_none_or(|f| {
            f.ids()
                .iter()
                .filter_map(|id| parse_pci_filter(id))
                .any(|(d, sub)| d == device_id && sub.is_none_or(|s| Some(s) == subsystem_id))
        });
        by_index && by_filter
    }

    /// Parsed `(profile, count)` pairs with count > 0; invalid profiles are skipped (they are
    /// reported by `validate`).
    pub fn profiles(&self) -> Vec<(MigProfile, u32)> {
        self.mig_devices
            .iter()
            .flatten()
            .filter_map(|(p, &n)| {
                Some((p.parse().ok()?, u32::try_from(n).ok().filter(|&n| n > 0)?))
            })
            .collect()
    }

    /// Problems with paths relative to the entry (`mig-devices["1g.7gb"]`), including profiles
    /// no known GPU has (the offline check of `gantry validate`).
    pub fn validate(&self) -> Vec<Problem> {
        self.check(true)
    }

    /// Shape and profile grammar only: what mig-parted checks when it reads a file. Whether a
    /// profile exists is decided against the GPUs the entry applies to, when it is planned.
    pub fn validate_shape(&self) -> Vec<Problem> {
        self.check(false)
    }

    /// Warnings that do not make the file invalid: profiles no known GPU has in an entry with
    /// a `device-filter`. mig-parted applies such an entry only on the devices it names, so
    /// a newer GPU's entry (upstream's default config names each new part) is no error.
    pub fn notes(&self) -> Vec<Problem> {
        let Some(f) = &self.device_filter else {
            return Vec::new();
        };
        self.mig_devices
            .iter()
            .flatten()
            .filter(|(p, _)| p.parse::<MigProfile>().is_ok() && parse_known_profile(p).is_err())
            .map(|(p, _)| {
                Problem::new(
                    join("mig-devices", p),
                    format!(
                        "warning: no GPU Gantry knows has profile {p:?}; the entry applies only to device-filter {}, skipped on other GPUs",
                        f.ids().join(", ")
                    ),
                )
            })
            .collect()
    }

    fn check(&self, known: bool) -> Vec<Problem> {
        // Device-filtered entries name their GPUs: unknown profiles there are notes.
        let known = known && self.device_filter.is_none();
        let mut out = Vec::new();
        if let Devices::Indices(v) = &self.devices {
            if v.is_empty() {
                out.push(Problem::new(
                    "devices",
                    "must be \"all\" or a non-empty list of GPU indices",
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            for (i, d) in v.iter().enumerate() {
                if !seen.insert(d) {
                    out.push(Problem::new(
                        index("devices", i),
                        format!("duplicate GPU index {d}"),
                    ));
                }
            }
        }
        if let Some(f) = &self.device_filter {
            for (i, id) in f.ids().iter().enumerate() {
                if parse_pci_filter(id).is_none() {
                    let p = match f {
                        DeviceFilter::One(_) => "device-filter".to_string(),
                        DeviceFilter::Many(_) => index("device-filter", i),
                    };
                    out.push(Problem::new(
                        p,
                        format!(
                            "must be a PCI ID like 0x20B010DE (optionally :0xSSSSssss), got {id:?}"
                        ),
                    ));
                }
            }
        }
        match (&self.mig_devices, self.mig_enabled) {
            (Some(m), false) if !m.is_empty() => {
                out.push(Problem::new(
                    "mig-devices",
                    "must be empty or absent when mig-enabled is false",
                ));
            }
            (None, true) => out.push(Problem::new(
                "mig-devices",
                "is required when mig-enabled is true (use {} for MIG on without instances)",
            )),
            _ => {}
        }
        if let Some(m) = &self.mig_devices {
            for (p, &n) in m {
                let path = join("mig-devices", p);
                let parsed = if known {
                    parse_known_profile(p).map(drop)
                } else {
                    p.parse::<MigProfile>().map(drop)
                };
                if let Err(e) = parsed {
                    out.push(Problem::new(path.clone(), e));
                }
                if n < 0 {
                    out.push(Problem::new(
                        path,
                        format!("instance count must be >= 0, got {n}"),
                    ));
                }
            }
            if !m.is_empty() && m.values().all(|&n| n <= 0) {
                out.push(Problem::new(
                    "mig-devices",
                    "at least one count must be > 0 (use {} for MIG on without instances)",
                ));
            }
        }
        out
    }
}

impl MigPartedConfig {
    /// The entry that applies to a GPU under `config` (entries apply in order, so the last
    /// matching one wins), or `None` when the config is unknown or no entry matches (the GPU
    /// is then left as it is).
    pub fn entry_for(
        &self,
        config: &str,
        gpu_index: u32,
        device_id: u32,
        subsystem_id: Option<u32>,
    ) -> Option<&MigConfigEntry> {
        self.mig_configs
            .get(config)?
            .iter()
            .rev()
            .find(|e| e.applies_to(gpu_index, device_id, subsystem_id))
    }

    /// Every problem with its full path, unknown profiles included.
    pub fn validate(&self) -> Vec<Problem> {
        self.check(true)
    }

    /// Warnings with their full paths (see [`MigConfigEntry::notes`]).
    pub fn notes(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        for (name, entries) in &self.mig_configs {
            for (i, e) in entries.iter().enumerate() {
                let ep = index(&join("mig-configs", name), i);
                for p in e.notes() {
                    out.push(Problem::new(format!("{ep}.{}", p.path), p.message));
                }
            }
        }
        out
    }

    /// Every shape or grammar problem with its full path; profiles are not looked up (see
    /// [`MigConfigEntry::validate_shape`]).
    pub fn validate_shape(&self) -> Vec<Problem> {
        self.check(false)
    }

    fn check(&self, known: bool) -> Vec<Problem> {
        let mut out = Vec::new();
        match self.version.as_deref() {
            Some("v1") => {}
            Some(v) => out.push(Problem::new(
                "version",
                format!("must be \"v1\", got {v:?}"),
            )),
            None => out.push(Problem::new("version", "is required (set version: v1)")),
        }
        if self.mig_configs.is_empty() {
            out.push(Problem::new("mig-configs", "must name at least one config"));
        }
        for (name, entries) in &self.mig_configs {
            let base = join("mig-configs", name);
            if !gantry_k8s_rules::names::is_label_value(name) || name.is_empty() {
                out.push(Problem::new(base.clone(), format!("config name {name:?} cannot be used as the nvidia.com/mig.config label value")));
            }
            if entries.is_empty() {
                out.push(Problem::new(base.clone(), "must have at least one entry"));
            }
            for (i, e) in entries.iter().enumerate() {
                let ep = index(&base, i);
                for p in e.check(known) {
                    out.push(Problem::new(format!("{ep}.{}", p.path), p.message));
                }
            }
        }
        out
    }
}

/// Schema of one entry for offline checks: precise shapes for `devices` and `device-filter`.
pub fn entry_check_schema() -> Value {
    json!({
        "type": "object",
        "required": ["devices", "mig-enabled"],
        "additionalProperties": false,
        "properties": {
            "device-filter": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "devices": {"anyOf": [{"type": "string", "enum": ["all"]}, {"type": "array", "items": {"type": "integer", "minimum": 0}}]},
            "mig-enabled": {"type": "boolean"},
            "mig-devices": {"type": "object", "nullable": true, "additionalProperties": {"type": "integer"}}
        }
    })
}

/// Schema of a whole file for offline checks (mig-parted is strict: unknown keys are errors).
pub fn file_check_schema() -> Value {
    json!({
        "type": "object",
        "required": ["version", "mig-configs"],
        "additionalProperties": false,
        "properties": {
            "version": {"type": "string", "enum": ["v1"]},
            "mig-configs": {"type": "object", "additionalProperties": {"type": "array", "items": entry_check_schema()}}
        }
    })
}

impl schemars::JsonSchema for MigConfigEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MigConfigEntry".into()
    }
    fn inline_schema() -> bool {
        true
    }
    /// Structural form for CRDs: `devices` and `device-filter` accept a string or a list, which
    /// a structural schema can only say with `x-kubernetes-preserve-unknown-fields`.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "One mig-parted entry: which GPUs (devices, device-filter) get which MIG mode and instances.",
            "required": ["devices", "mig-enabled"],
            "properties": {
                "device-filter": {"description": "PCI ID or list of PCI IDs (0xDDDDVVVV).", "x-kubernetes-preserve-unknown-fields": true},
                "devices": {"description": "\"all\" or a list of GPU indices.", "x-kubernetes-preserve-unknown-fields": true},
                "mig-enabled": {"type": "boolean", "description": "Whether MIG mode is on for these GPUs."},
                "mig-devices": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "MIG profile -> instances per GPU."}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(yaml: &str) -> MigConfigEntry {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn devices_all_or_list() {
        assert_eq!(
            entry("{devices: all, mig-enabled: false}").devices,
            Devices::All
        );
        assert_eq!(
            entry("{devices: [0, 2], mig-enabled: false}").devices,
            Devices::Indices(vec![0, 2])
        );
        assert!(
            serde_yaml::from_str::<MigConfigEntry>("{devices: some, mig-enabled: false}").is_err()
        );
        assert!(
            serde_yaml::from_str::<MigConfigEntry>("{devices: all, mig-enabled: false, extra: 1}")
                .is_err()
        );
    }

    #[test]
    fn applies_and_last_wins() {
        let e = entry(
            "{device-filter: '0x20B010DE', devices: [1], mig-enabled: true, mig-devices: {}}",
        );
        assert!(e.applies_to(1, 0x20B0_10DE, None));
        assert!(!e.applies_to(0, 0x20B0_10DE, None));
        assert!(!e.applies_to(1, 0x2330_10DE, None));
        let cfg: MigPartedConfig = serde_yaml::from_str(
            "version: v1\nmig-configs:\n  c:\n    - {devices: all, mig-enabled: false}\n    - {devices: [1], mig-enabled: true, mig-devices: {1g.10gb: 7}}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
        assert!(
            cfg.entry_for("c", 1, 0, None)
                .is_some_and(|e| e.mig_enabled)
        );
        assert!(
            cfg.entry_for("c", 0, 0, None)
                .is_some_and(|e| !e.mig_enabled)
        );
        assert!(cfg.entry_for("nope", 0, 0, None).is_none());
    }

    #[test]
    fn entry_rules() {
        let e = entry("{devices: [0, 0], mig-enabled: false, mig-devices: {1g.10gb: 1}}");
        let p: Vec<String> = e.validate().iter().map(ToString::to_string).collect();
        assert!(
            p.contains(&"devices[1]: duplicate GPU index 0".to_string()),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.starts_with("mig-devices: must be empty"))
        );
        let e = entry("{devices: all, mig-enabled: true, mig-devices: {1g.7gb: 1, 2g.20gb: -1}}");
        let p: Vec<String> = e.validate().iter().map(ToString::to_string).collect();
        assert!(
            p.iter()
                .any(|m| m.starts_with("mig-devices[\"1g.7gb\"]: unknown MIG profile")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.contains("instance count must be >= 0, got -1"))
        );
        assert!(entry("{devices: all, mig-enabled: true}").validate().len() == 1);
    }

    #[test]
    fn unknown_profiles_in_filtered_entries_are_notes() {
        let e = entry(
            "{device-filter: ['0x999910DE'], devices: all, mig-enabled: true, mig-devices: {1g.99gb: 7}}",
        );
        assert_eq!(e.validate(), vec![]);
        let notes: Vec<String> = e.notes().iter().map(ToString::to_string).collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("mig-devices[\"1g.99gb\"]: warning: no GPU Gantry knows"));
        assert!(notes[0].contains("0x999910DE"));
        // Grammar is still checked; without a filter an unknown profile is an error.
        let bad = entry(
            "{device-filter: '0x999910DE', devices: all, mig-enabled: true, mig-devices: {1x.99: 1}}",
        );
        assert_eq!(bad.validate().len(), 1);
        let plain = entry("{devices: all, mig-enabled: true, mig-devices: {1g.99gb: 7}}");
        assert_eq!((plain.validate().len(), plain.notes().len()), (1, 0));
    }

    #[test]
    fn pci_filter() {
        assert_eq!(parse_pci_filter("0x20B010DE"), Some((0x20B0_10DE, None)));
        assert_eq!(
            parse_pci_filter("0x20B010DE:0x134F10DE"),
            Some((0x20B0_10DE, Some(0x134F_10DE)))
        );
        assert_eq!(parse_pci_filter("20B010DE"), None);
        assert_eq!(parse_pci_filter("0x20B0"), None);
    }
}
