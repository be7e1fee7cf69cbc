//! Where the config comes from (built-in, a file, or a named config picked by the node
//! label) and the keep-the-last-good-config rule: a config that fails to parse, validate
//! or apply is reported (log, status, Node event) and the plugin keeps serving the last
//! good one.

use std::path::{Path, PathBuf};

use super::error::DevicePluginError;
use super::imex;
use super::inventory::Inventory;
use super::manager::Options;
use super::named::{self, Fallback};
use super::node_api;
pub use super::overrides::Overrides;
use super::resources::{self, ResourceSet};
use super::settings::{
    AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, DeviceSelector, Imex,
    ReplicatedResource, ResourcePattern, Settings, Sharing, SharingKind, qualify_resource_name,
};
use gantry_api::device_plugin_config::{DeviceDiscoveryStrategy, DevicePluginConfig};

/// Where the config file comes from.
#[derive(Debug, Clone, Default)]
pub enum ConfigSource {
    /// Built-in defaults (plus flag overrides).
    #[default]
    Defaults,
    /// Settings handed over by an embedding program (plus flag overrides).
    Inline(Box<Settings>),
    /// One config file (`--config-file`); re-read when it changes.
    File(PathBuf),
    /// A directory of named configs (a mounted ConfigMap), picked by the node label
    /// `nvidia.com/device-plugin.config`, else `default`, else the fallbacks.
    Named {
        dir: PathBuf,
        default: Option<String>,
        fallbacks: Vec<Fallback>,
    },
    /// The same, read straight from a ConfigMap through the API (needs `Options::kube`).
    ConfigMap {
        namespace: String,
        name: String,
        default: Option<String>,
        fallbacks: Vec<Fallback>,
    },
}

/// The config currently served, the one waiting to be tried, and the last problem.
pub struct ConfigState {
    good: Settings,
    applied: Option<Vec<u8>>,
    candidate: Option<(Vec<u8>, Settings)>,
    rejected: Option<Vec<u8>>,
    /// A changed source seen once, waiting to be seen unchanged once more.
    settling: Option<Vec<u8>>,
    error: Option<String>,
    reported: Option<String>,
}

impl ConfigState {
    pub fn new(opts: &Options) -> Self {
        let mut good = Settings::default();
        opts.overrides.apply(&mut good);
        ConfigState {
            good,
            applied: None,
            candidate: None,
            rejected: None,
            settling: None,
            error: None,
            reported: None,
        }
    }

    /// The settings being served.
    pub fn settings(&self) -> &Settings {
        &self.good
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Re-reads the source. Returns true when a new config waits to be applied: it parses,
    /// validates and (when `inventory` is given) yields resources on it. Otherwise the
    /// problem is reported and the current config stays.
    pub async fn refresh(&mut self, opts: &Options, inventory: Option<&Inventory>) -> bool {
        let (fingerprint, content) = match read_source(opts).await {
            Ok(v) => v,
            Err(msg) => {
                self.report(opts, msg).await;
                return false;
            }
        };
        if self.applied.as_ref() == Some(&fingerprint) {
            self.error = None;
            return false;
        }
        if self.rejected.as_ref() == Some(&fingerprint)
            || self
                .candidate
                .as_ref()
                .is_some_and(|(fp, _)| *fp == fingerprint)
        {
            return false;
        }
        // While serving, a change must read the same on two checks in a row, so a file
        // caught half-written (truncated, say) is never applied.
        if inventory.is_some() && self.settling.as_ref() != Some(&fingerprint) {
            self.settling = Some(fingerprint);
            return false;
        }
        // A file that turns empty while serving is almost always one being rewritten in place
        // (truncated, not yet written): on a busy node that gap can outlast two checks. An
        // empty file means the defaults only at start; later it keeps the last good config.
        if inventory.is_some()
            && let Loaded::File(path, bytes) = &content
            && bytes.iter().all(u8::is_ascii_whitespace)
        {
            let msg = format!(
                "{} is empty (being written?); keeping the last good config",
                path.display()
            );
            self.rejected = Some(fingerprint);
            self.report(opts, msg).await;
            return false;
        }
        let parsed = match content {
            Loaded::Builtin => Ok(Settings::default()),
            Loaded::Inline(settings) => Ok(settings),
            Loaded::File(path, bytes) => parse_settings_with(&path, &bytes, &opts.overrides),
        };
        match parsed {
            Ok(mut settings) => {
                opts.overrides.apply(&mut settings);
                if let Some(inv) = inventory
                    && let Err(e) = build_sets(inv, &settings, opts)
                {
                    self.rejected = Some(fingerprint);
                    self.report(opts, format!("{e}; keeping the last good config"))
                        .await;
                    return false;
                }
                self.candidate = Some((fingerprint, settings));
                true
            }
            Err(e) => {
                self.rejected = Some(fingerprint);
                self.report(opts, e.to_string()).await;
                false
            }
        }
    }

    /// Resource sets for this inventory: from the waiting config if it applies cleanly,
    /// else from the last good one. `None` when even that fails on this inventory.
    pub async fn build(&mut self, inv: &Inventory, opts: &Options) -> Option<Vec<ResourceSet>> {
        if let Some((fingerprint, settings)) = self.candidate.take() {
            match build_sets(inv, &settings, opts) {
                Ok(sets) => {
                    if self.applied.is_some() {
                        applied_event(opts, &sets).await;
                    }
                    self.good = settings;
                    self.applied = Some(fingerprint);
                    self.error = None;
                    self.reported = None;
                    return Some(sets);
                }
                Err(e) => {
                    self.rejected = Some(fingerprint);
                    self.report(opts, format!("{e}; keeping the last good config"))
                        .await;
                }
            }
        }
        match build_sets(inv, &self.good, opts) {
            Ok(sets) => Some(sets),
            Err(e) => {
                self.report(
                    opts,
                    format!("{e}; serving no resources until this is fixed"),
                )
                .await;
                None
            }
        }
    }

    async fn report(&mut self, opts: &Options, message: String) {
        if self.reported.as_ref() == Some(&message) {
            return;
        }
        tracing::error!(error = %message, "device plugin config rejected; keeping the last good config");
        if let (Some(client), Some(node)) = (&opts.kube, &opts.node_name)
            && let Err(e) = node_api::config_error_event(client, node, &message).await
        {
            tracing::warn!(error = %e, node = %node, "could not emit the config-error Node event");
        }
        self.error = Some(message.clone());
        self.reported = Some(message);
    }
}

/// A deliberate config change took effect (not the first config): say so on the Node,
/// with what is advertised now, since allocatable changes under running pods.
async fn applied_event(opts: &Options, sets: &[ResourceSet]) {
    let now: Vec<String> = sets
        .iter()
        .map(|s| format!("{} {}", s.name, s.devices.len()))
        .collect();
    let message = format!(
        "new device plugin config applied; advertising {}",
        if now.is_empty() {
            "nothing".to_string()
        } else {
            now.join(", ")
        }
    );
    tracing::info!(%message, "device plugin config changed");
    if let (Some(client), Some(node)) = (&opts.kube, &opts.node_name) {
        let report = node_api::Report {
            warning: false,
            reason: node_api::REASON_CONFIG_APPLIED,
            action: "LoadConfig",
            message,
        };
        if let Err(e) = node_api::event(client, node, node_api::node_ref(node), &report).await {
            tracing::warn!(error = %e, node = %node, "could not emit the config-applied Node event");
        }
    }
}

fn build_sets(
    inv: &Inventory,
    settings: &Settings,
    opts: &Options,
) -> Result<Vec<ResourceSet>, DevicePluginError> {
    let channels = imex::present(&opts.imex_channel_dir, &settings.imex.channel_ids);
    imex::check(settings, &channels)?;
    let mut settings = settings.clone();
    resources::rewrite_legacy_mig_selectors(&mut settings, inv);
    resources::build(inv, &settings)
}

enum Loaded {
    Builtin,
    Inline(Settings),
    File(PathBuf, Vec<u8>),
}

/// A fingerprint of what the source selects now, and its content.
async fn read_source(opts: &Options) -> Result<(Vec<u8>, Loaded), String> {
    match &opts.config {
        ConfigSource::Defaults => Ok((b"built-in".to_vec(), Loaded::Builtin)),
        ConfigSource::Inline(settings) => {
            Ok((b"inline".to_vec(), Loaded::Inline((**settings).clone())))
        }
        ConfigSource::File(path) => {
            let bytes = read(path)?;
            Ok((bytes.clone(), Loaded::File(path.clone(), bytes)))
        }
        ConfigSource::Named {
            dir,
            default,
            fallbacks,
        } => {
            let label = node_label(opts).await?;
            let available = named::list(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let chosen = named::select(&available, label.as_deref(), default.as_deref(), fallbacks)
                .map_err(|e| format!("named configs in {}: {e}", dir.display()))?;
            let Some(name) = chosen else {
                return Ok((b"built-in".to_vec(), Loaded::Builtin));
            };
            let path = dir.join(&name);
            let bytes = read(&path)?;
            Ok((fingerprint(&name, &bytes), Loaded::File(path, bytes)))
        }
        ConfigSource::ConfigMap {
            namespace,
            name,
            default,
            fallbacks,
        } => {
            let client = opts.kube.as_ref().ok_or_else(|| {
                format!("ConfigMap {namespace}/{name}: no API client to read it with")
            })?;
            let label = node_label(opts).await?;
            let data = node_api::config_map_data(client, namespace, name)
                .await
                .map_err(|e| format!("reading ConfigMap {namespace}/{name}: {e}"))?;
            let available: Vec<String> = data
                .keys()
                .filter(|k| !k.starts_with('.'))
                .cloned()
                .collect();
            let chosen = named::select(&available, label.as_deref(), default.as_deref(), fallbacks)
                .map_err(|e| format!("ConfigMap {namespace}/{name}: {e}"))?;
            let Some(key) = chosen else {
                return Ok((b"built-in".to_vec(), Loaded::Builtin));
            };
            let bytes = data
                .get(&key)
                .map(|v| v.as_bytes().to_vec())
                .unwrap_or_default();
            let path = PathBuf::from(format!("ConfigMap {namespace}/{name} key {key}"));
            Ok((fingerprint(&key, &bytes), Loaded::File(path, bytes)))
        }
    }
}

fn fingerprint(name: &str, bytes: &[u8]) -> Vec<u8> {
    let mut fp = name.as_bytes().to_vec();
    fp.push(0);
    fp.extend_from_slice(bytes);
    fp
}

/// The node's config label, when the plugin knows its node and has API access.
async fn node_label(opts: &Options) -> Result<Option<String>, String> {
    match (&opts.kube, &opts.node_name) {
        (Some(client), Some(node)) => node_api::config_label(client, node).await.map_err(|e| {
            format!(
                "reading node {node} label {}: {e}",
                gantry_api::names::LABEL_DEVICE_PLUGIN_CONFIG
            )
        }),
        _ => Ok(None),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("device plugin config {}: {e}", path.display()))
}

/// Parses and validates a config file v1 (YAML or JSON; `gantry_api` types and
/// validation) into settings. An empty file means built-in defaults.
pub fn parse_settings(path: &Path, bytes: &[u8]) -> Result<Settings, DevicePluginError> {
    parse_settings_with(path, bytes, &Overrides::default())
}

/// As [`parse_settings`], with the flags and env folded in before the file is checked, as
/// upstream does (it validates after merging): `MPS_ROOT` / `--mps-root` satisfies an MPS
/// config without `flags.mpsRoot`, and `MIG_STRATEGY` counts for the MPS-with-mixed rule.
pub fn parse_settings_with(
    path: &Path,
    bytes: &[u8],
    overrides: &Overrides,
) -> Result<Settings, DevicePluginError> {
    let err = |message: String| DevicePluginError::Config {
        path: path.to_path_buf(),
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| err(format!("not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Ok(Settings::default());
    }
    let mut config: DevicePluginConfig =
        serde_yaml::from_str(text).map_err(|e| err(e.to_string()))?;
    if overrides.mps_root.is_some() || overrides.mig_strategy.is_some() {
        let flags = config.flags.get_or_insert_with(Default::default);
        if let Some(root) = &overrides.mps_root {
            flags.mps_root = Some(root.clone());
        }
        if let Some(m) = overrides.mig_strategy {
            flags.mig_strategy = Some(m);
        }
    }
    if let Some(d) = config
        .flags
        .as_ref()
        .and_then(|f| f.device_discovery_strategy)
        .filter(|d| {
            matches!(
                d,
                DeviceDiscoveryStrategy::Tegra | DeviceDiscoveryStrategy::Vfio
            )
        })
    {
        return Err(err(format!(
            "flags.deviceDiscoveryStrategy {d:?}: Gantry finds GPUs through NVML only (auto or nvml)"
        )));
    }
    let problems = config.validate();
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(err(list.join("; ")));
    }
    for key in config.extra.keys() {
        tracing::warn!(file = %path.display(), key = %key, "unknown top-level key ignored");
    }
    Ok(settings_from_config(&config))
}

/// Config file v1 → settings, with Gantry's fixes: `resources`, `rename` and `devices`
/// are honoured.
pub fn settings_from_config(c: &DevicePluginConfig) -> Settings {
    use gantry_api::device_plugin_config as api;
    let flags = c.flags.as_ref();
    let mut s = Settings {
        mig_strategy: c.mig_strategy(),
        device_list_strategies: c
            .device_list_strategies()
            .into_iter()
            .map(|d| match d {
                api::DeviceListStrategy::Envvar => DeviceListStrategy::Envvar,
                api::DeviceListStrategy::VolumeMounts => DeviceListStrategy::VolumeMounts,
                api::DeviceListStrategy::CdiAnnotations => DeviceListStrategy::CdiAnnotations,
                api::DeviceListStrategy::CdiCri => DeviceListStrategy::CdiCri,
            })
            .collect(),
        device_id_strategy: match c.device_id_strategy() {
            api::DeviceIdStrategy::Uuid => DeviceIdStrategy::Uuid,
            api::DeviceIdStrategy::Index => DeviceIdStrategy::Index,
        },
        pass_device_specs: c.pass_device_specs(),
        cdi_annotation_prefix: c.cdi_annotation_prefix().to_string(),
        driver_root: flags
            .and_then(|f| f.nvidia_driver_root.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "/".to_string()),
        dev_root: flags
            .and_then(|f| f.nvidia_dev_root.clone())
            .filter(|r| !r.is_empty()),
        gdrcopy_enabled: flags.and_then(|f| f.gdrcopy_enabled).unwrap_or(false),
        gds_enabled: flags.and_then(|f| f.gds_enabled).unwrap_or(false),
        mofed_enabled: flags.and_then(|f| f.mofed_enabled).unwrap_or(false),
        allocation_policy: match c.shared_devices_allocation_policy() {
            api::AllocationPolicy::Distributed => AllocationPolicy::Distributed,
            api::AllocationPolicy::Packed => AllocationPolicy::Packed,
        },
        mps_root: c.mps_root().map(str::to_string),
        // `check` has refused anything but `[]` and `[0]`.
        imex: Imex {
            channel_ids: c
                .imex
                .iter()
                .flat_map(|i| i.channel_ids.iter().flatten())
                .filter_map(|&id| u32::try_from(id).ok())
                .collect(),
            required: c.imex.as_ref().and_then(|i| i.required).unwrap_or(false),
        },
        ..Settings::default()
    };
    let patterns = |list: &Option<Vec<api::ResourcePattern>>| -> Vec<ResourcePattern> {
        list.iter()
            .flatten()
            .map(|p| ResourcePattern {
                pattern: p.pattern.clone(),
                name: qualify_resource_name(&p.name),
            })
            .collect()
    };
    if let Some(r) = &c.resources {
        s.gpu_patterns = patterns(&r.gpus);
        s.mig_patterns = patterns(&r.mig);
    }
    if c.sharing_strategy() != api::SharingStrategy::None
        && let Some((r, strategy)) = c.replicated()
    {
        let rename_by_default = r.rename_by_default.unwrap_or(false);
        s.sharing = Some(Sharing {
            kind: if strategy == api::SharingStrategy::Mps {
                SharingKind::Mps
            } else {
                SharingKind::TimeSlicing
            },
            fail_requests_greater_than_one: c.fail_requests_greater_than_one(),
            resources: r
                .resources
                .iter()
                .filter(|x| x.replicas > 1)
                .map(|x| {
                    let name = qualify_resource_name(&x.name);
                    let rename = match &x.rename {
                        Some(rn) if !rn.is_empty() => Some(qualify_resource_name(rn)),
                        _ if rename_by_default => Some(format!("{name}.shared")),
                        _ => None,
                    };
                    ReplicatedResource {
                        rename,
                        devices: match &x.devices {
                            None | Some(api::ReplicatedDevices::All(_)) => DeviceSelector::All,
                            Some(api::ReplicatedDevices::Count(n)) => {
                                DeviceSelector::Count(usize::try_from(*n).unwrap_or(0))
                            }
                            Some(api::ReplicatedDevices::List(ids)) => {
                                DeviceSelector::List(ids.clone())
                            }
                        },
                        replicas: u32::try_from(x.replicas).unwrap_or(u32::MAX),
                        name,
                    }
                })
                .collect(),
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::device_plugin::settings::MigStrategy;

    fn parse(text: &str) -> Result<Settings, DevicePluginError> {
        parse_settings(Path::new("/config/config.yaml"), text.as_bytes())
    }

    /// The device plugin README's MPS example has no `flags.mpsRoot`: the Helm chart passes
    /// `MPS_ROOT`. Refused alone, accepted once the env/flag is folded in, with its replicas.
    #[test]
    fn readme_mps_example_needs_mps_root_from_flag_or_env() {
        let text = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("mpsRoot"), "{e}");
        let o = Overrides {
            mps_root: Some("/run/nvidia/mps".into()),
            ..Overrides::default()
        };
        let s = parse_settings_with(Path::new("/c.yaml"), text.as_bytes(), &o).unwrap();
        assert_eq!(s.mps_root.as_deref(), Some("/run/nvidia/mps"));
        let sh = s.sharing.unwrap();
        assert_eq!(sh.kind, SharingKind::Mps);
        assert_eq!(sh.resources[0].replicas, 10);
        // MIG_STRATEGY=mixed from the env still makes MPS invalid, as upstream says.
        let o = Overrides {
            mig_strategy: Some(MigStrategy::Mixed),
            ..o
        };
        let e = parse_settings_with(Path::new("/c.yaml"), text.as_bytes(), &o).unwrap_err();
        assert!(e.to_string().contains("mixed"), "{e}");
    }

    #[test]
    fn upstream_time_slicing_example() {
        let s = parse(
            "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, cdi-cri]\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n",
        )
        .unwrap();
        let sh = s.sharing.unwrap();
        assert_eq!(sh.kind, SharingKind::TimeSlicing);
        assert!(sh.fail_requests_greater_than_one);
        assert_eq!(
            sh.resources[0].rename.as_deref(),
            Some("nvidia.com/gpu.shared")
        );
        assert_eq!(sh.resources[0].replicas, 4);
        assert_eq!(
            s.device_list_strategies,
            BTreeSet::from([DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri])
        );
    }

    #[test]
    fn rename_devices_and_resources_are_kept() {
        let s = parse(
            "{\"resources\": {\"gpus\": [{\"pattern\": \"*A100*\", \"name\": \"a100\"}]}, \"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"gpu\", \"rename\": \"gpu.ts\", \"devices\": [\"0\", \"1\"], \"replicas\": 2}]}}, \"flags\": {\"migStrategy\": \"mixed\", \"nvidiaDriverRoot\": \"/run/nvidia/driver\"}}",
        )
        .unwrap();
        assert_eq!(s.gpu_patterns[0].name, "nvidia.com/a100");
        let sharing = s.sharing.clone().unwrap();
        let r = &sharing.resources[0];
        assert_eq!(r.rename.as_deref(), Some("nvidia.com/gpu.ts"));
        assert_eq!(
            r.devices,
            DeviceSelector::List(vec!["0".into(), "1".into()])
        );
        assert_eq!(s.mig_strategy, MigStrategy::Mixed);
        assert_eq!(s.dev_root(), "/run/nvidia/driver");
    }

    #[test]
    fn bad_files_name_the_problem() {
        let e = parse("version: v2\n").unwrap_err().to_string();
        assert!(
            e.contains("/config/config.yaml") && e.contains("version"),
            "{e}"
        );
        let e = parse("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("sharing.timeSlicing.resources[0].replicas"),
            "{e}"
        );
        assert!(parse("flags: [").is_err());
        assert_eq!(parse("  \n").unwrap(), Settings::default());
        // MPS defaults to strict requests.
        let s = parse("flags: {mpsRoot: /run/nvidia/mps}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}").unwrap();
        assert!(s.sharing.unwrap().fail_requests_greater_than_one);
    }
}
