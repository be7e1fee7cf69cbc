//! CDI spec types (SPEC 1.1.0 field names) and validation.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

fn is_false(b: &bool) -> bool {
    !*b
}

/// A CDI spec file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    pub cdi_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub devices: Vec<Device>,
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub container_edits: ContainerEdits,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerEdits {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intel_rdt: Option<IntelRdt>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_devices: Vec<NetDevice>,
}

impl ContainerEdits {
    pub fn is_empty(&self) -> bool {
        self == &ContainerEdits::default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceNode {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hook {
    pub hook_name: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IntelRdt {
    #[serde(default, rename = "closID", skip_serializing_if = "Option::is_none")]
    pub clos_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_cache_schema: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bw_schema: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schemata: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable_monitoring: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetDevice {
    pub host_interface_name: String,
    pub name: String,
}

/// Spec versions a CDI parser knows, oldest first.
pub const KNOWN_VERSIONS: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The newest spec version we validate against.
pub const CURRENT_VERSION: &str = "1.1.0";

const HOOK_NAMES: &[&str] = &[
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

fn version_rank(v: &str) -> Option<usize> {
    KNOWN_VERSIONS.iter().position(|k| *k == v)
}

fn all_edits(spec: &Spec) -> impl Iterator<Item = &ContainerEdits> {
    std::iter::once(&spec.container_edits).chain(spec.devices.iter().map(|d| &d.container_edits))
}

/// The lowest `cdiVersion` able to express this spec's content (as CDI's own tooling computes
/// it, so older runtimes can still load what we write).
pub fn minimum_version(spec: &Spec) -> &'static str {
    let edits: Vec<&ContainerEdits> = all_edits(spec).collect();
    let class = spec.kind.split_once('/').map_or("", |(_, c)| c);
    if edits.iter().any(|e| {
        !e.net_devices.is_empty()
            || e.intel_rdt
                .as_ref()
                .is_some_and(|r| !r.schemata.is_empty() || r.enable_monitoring)
    }) {
        return "1.1.0";
    }
    if edits
        .iter()
        .any(|e| e.intel_rdt.is_some() || !e.additional_gids.is_empty())
    {
        return "0.7.0";
    }
    if !spec.annotations.is_empty()
        || spec.devices.iter().any(|d| !d.annotations.is_empty())
        || class.contains('.')
    {
        return "0.6.0";
    }
    if edits
        .iter()
        .any(|e| e.device_nodes.iter().any(|n| n.host_path.is_some()))
        || spec
            .devices
            .iter()
            .any(|d| d.name.starts_with(|c: char| c.is_ascii_digit()))
    {
        return "0.5.0";
    }
    if edits
        .iter()
        .any(|e| e.mounts.iter().any(|m| m.kind.is_some()))
    {
        return "0.4.0";
    }
    "0.3.0"
}

fn name_chars_ok(s: &str, inner: &[char]) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || inner.contains(&c))
}

/// Checks a `kind` (`vendor/class`).
pub fn validate_kind(kind: &str) -> Result<(), String> {
    let (vendor, class) = kind
        .split_once('/')
        .ok_or_else(|| format!("kind {kind:?} must be `<vendor>/<class>`"))?;
    if !vendor.starts_with(|c: char| c.is_ascii_alphabetic())
        || !name_chars_ok(vendor, &['-', '_', '.'])
    {
        return Err(format!(
            "vendor {vendor:?} of kind {kind:?} must start with a letter, end with a letter or digit, and hold only letters, digits, `-`, `_` and `.`"
        ));
    }
    if class.len() > 63 || !name_chars_ok(class, &['-', '_', '.']) {
        return Err(format!(
            "class {class:?} of kind {kind:?} must be at most 63 characters, start and end with a letter or digit, and hold only letters, digits, `-`, `_` and `.`"
        ));
    }
    Ok(())
}

/// Checks a device name.
pub fn validate_device_name(name: &str) -> Result<(), String> {
    if name_chars_ok(name, &['-', '_', '.', ':']) {
        Ok(())
    } else {
        Err(format!(
            "device name {name:?} must start and end with a letter or digit and hold only letters, digits, `-`, `_`, `.` and `:`"
        ))
    }
}

fn validate_edits(edits: &ContainerEdits, at: &str, problems: &mut Vec<String>) {
    for env in &edits.env {
        if !env.contains('=') || env.starts_with('=') {
            problems.push(format!("{at}: env {env:?} must be `NAME=value`"));
        }
    }
    for node in &edits.device_nodes {
        if !node.path.starts_with('/') {
            problems.push(format!(
                "{at}: device node path {:?} must be absolute",
                node.path
            ));
        }
        if let Some(h) = &node.host_path
            && !h.starts_with('/')
        {
            problems.push(format!("{at}: device node hostPath {h:?} must be absolute"));
        }
        if let Some(t) = &node.kind
            && !["b", "c", "u", "p"].contains(&t.as_str())
        {
            problems.push(format!(
                "{at}: device node {} type {t:?} must be one of b, c, u, p",
                node.path
            ));
        }
        if let Some(p) = &node.permissions
            && (p.is_empty() || !p.chars().all(|c| "rwm".contains(c)))
        {
            problems.push(format!(
                "{at}: device node {} permissions {p:?} must be made of r, w, m",
                node.path
            ));
        }
    }
    for m in &edits.mounts {
        if !m.host_path.starts_with('/') {
            problems.push(format!(
                "{at}: mount hostPath {:?} must be absolute",
                m.host_path
            ));
        }
        if !m.container_path.starts_with('/') {
            problems.push(format!(
                "{at}: mount containerPath {:?} must be absolute",
                m.container_path
            ));
        }
    }
    for h in &edits.hooks {
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            problems.push(format!(
                "{at}: hook name {:?} must be one of {}",
                h.hook_name,
                HOOK_NAMES.join(", ")
            ));
        }
        if !h.path.starts_with('/') {
            problems.push(format!("{at}: hook path {:?} must be absolute", h.path));
        }
        if h.timeout.is_some_and(|t| t <= 0) {
            problems.push(format!("{at}: hook {} timeout must be positive", h.path));
        }
        for env in &h.env {
            if !env.contains('=') {
                problems.push(format!("{at}: hook env {env:?} must be `NAME=value`"));
            }
        }
    }
    for n in &edits.net_devices {
        if n.host_interface_name.is_empty() || n.name.is_empty() {
            problems.push(format!("{at}: net device needs hostInterfaceName and name"));
        }
    }
}

/// Validates a spec against CDI 1.1.0: known `cdiVersion` not below what the content needs,
/// kind and device name syntax, unique device names, absolute paths, hook names. Returns
/// every problem found.
pub fn validate(spec: &Spec) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    match version_rank(&spec.cdi_version) {
        None => problems.push(format!(
            "cdiVersion {:?} is not a known CDI version ({})",
            spec.cdi_version,
            KNOWN_VERSIONS.join(", ")
        )),
        Some(rank) => {
            let needed = minimum_version(spec);
            if version_rank(needed).is_some_and(|n| rank < n) {
                problems.push(format!(
                    "cdiVersion {} is too old for this content, which needs {needed}",
                    spec.cdi_version
                ));
            }
        }
    }
    if let Err(e) = validate_kind(&spec.kind) {
        problems.push(e);
    }
    if spec.devices.is_empty() {
        problems.push("the spec has no devices".to_string());
    }
    let mut seen = BTreeSet::new();
    for d in &spec.devices {
        if let Err(e) = validate_device_name(&d.name) {
            problems.push(e);
        }
        if !seen.insert(d.name.as_str()) {
            problems.push(format!("device name {:?} appears more than once", d.name));
        }
        if d.container_edits.is_empty() {
            problems.push(format!("device {:?} has no containerEdits", d.name));
        }
        validate_edits(
            &d.container_edits,
            &format!("device {:?}", d.name),
            &mut problems,
        );
    }
    validate_edits(&spec.container_edits, "containerEdits", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds() {
        assert!(validate_kind("nvidia.com/gpu").is_ok());
        assert!(validate_kind("nvidia.com/gpu.coherent").is_ok());
        assert!(validate_kind("nvidia.com").is_err());
        assert!(validate_kind("1vendor.com/gpu").is_err());
        assert!(validate_device_name("0:1").is_ok());
        assert!(validate_device_name("GPU-4c0e7d8b-1a2f").is_ok());
        assert!(validate_device_name("all").is_ok());
        assert!(validate_device_name(":0").is_err());
        assert!(validate_device_name("a/b").is_err());
    }

    #[test]
    fn duplicate_names_and_relative_paths_are_reported() {
        let edits = ContainerEdits {
            device_nodes: vec![DeviceNode {
                path: "dev/nvidia0".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let dev = Device {
            name: "0".into(),
            container_edits: edits,
            ..Default::default()
        };
        let spec = Spec {
            cdi_version: "0.3.0".into(),
            kind: "nvidia.com/gpu".into(),
            devices: vec![dev.clone(), dev],
            ..Default::default()
        };
        let problems = validate(&spec).unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains("more than once")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("must be absolute")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("too old")),
            "{problems:?}"
        );
    }
}
