//! Where the config comes from (built-in, a file, or a named config picked by the node
//! label) and the keep-the-last-good-config rule: a config that fails to parse, validate
//! or apply is reported (log, status, Node event) and the plugin keeps serving the last
//! good one.

use std::path::{Path, PathBuf};

pub use super::config_file::{parse_settings, parse_settings_with, settings_from_config};
use super::error::DevicePluginError;
use super::imex;
use super::inventory::Inventory;
use super::named::{self, Fallback};
use super::node_api;
pub use super::overrides::Overrides;
use super::resources::{self, ResourceSet};
use super::settings::Settings;

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
    /// The same, read straight from a ConfigMap through the API (needs an API client).
    ConfigMap {
        namespace: String,
        name: String,
        default: Option<String>,
        fallbacks: Vec<Fallback>,
    },
}

/// What loading the config needs from the plugin's options: where it comes from, the flags
/// that beat it, where the IMEX channels are, and the API (node label, ConfigMap, events).
#[derive(Clone)]
pub struct ConfigInputs {
    pub source: ConfigSource,
    pub overrides: Overrides,
    pub imex_channel_dir: PathBuf,
    pub kube: Option<kube::Client>,
    pub node_name: Option<String>,
}

/// The config currently served, the one waiting to be tried, and the last problem.
pub struct ConfigState {
    inputs: ConfigInputs,
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
    pub fn new(inputs: ConfigInputs) -> Self {
        let mut good = Settings::default();
        inputs.overrides.apply(&mut good);
        ConfigState {
            inputs,
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
    pub async fn refresh(&mut self, inventory: Option<&Inventory>) -> bool {
        let (fingerprint, content) = match read_source(&self.inputs).await {
            Ok(v) => v,
            Err(msg) => {
                self.report(msg).await;
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
            self.report(msg).await;
            return false;
        }
        let parsed = match content {
            Loaded::Builtin => Ok(Settings::default()),
            Loaded::Inline(settings) => Ok(settings),
            Loaded::File(path, bytes) => parse_settings_with(&path, &bytes, &self.inputs.overrides),
        };
        match parsed {
            Ok(mut settings) => {
                self.inputs.overrides.apply(&mut settings);
                if let Some(inv) = inventory
                    && let Err(e) = build_sets(inv, &settings, &self.inputs)
                {
                    self.rejected = Some(fingerprint);
                    self.report(format!("{e}; keeping the last good config"))
                        .await;
                    return false;
                }
                self.candidate = Some((fingerprint, settings));
                true
            }
            Err(e) => {
                self.rejected = Some(fingerprint);
                self.report(e.to_string()).await;
                false
            }
        }
    }

    /// Resource sets for this inventory: from the waiting config if it applies cleanly,
    /// else from the last good one. `None` when even that fails on this inventory.
    pub async fn build(&mut self, inv: &Inventory) -> Option<Vec<ResourceSet>> {
        if let Some((fingerprint, settings)) = self.candidate.take() {
            match build_sets(inv, &settings, &self.inputs) {
                Ok(sets) => {
                    if self.applied.is_some() {
                        applied_event(&self.inputs, &sets).await;
                    }
                    self.good = settings;
                    self.applied = Some(fingerprint);
                    self.error = None;
                    self.reported = None;
                    return Some(sets);
                }
                Err(e) => {
                    self.rejected = Some(fingerprint);
                    self.report(format!("{e}; keeping the last good config"))
                        .await;
                }
            }
        }
        match build_sets(inv, &self.good, &self.inputs) {
            Ok(sets) => Some(sets),
            Err(e) => {
                self.report(format!("{e}; serving no resources until this is fixed"))
                    .await;
                None
            }
        }
    }

    async fn report(&mut self, message: String) {
        if self.reported.as_ref() == Some(&message) {
            return;
        }
        tracing::error!(error = %message, "device plugin config rejected; keeping the last good config");
        if let (Some(client), Some(node)) = (&self.inputs.kube, &self.inputs.node_name)
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
async fn applied_event(inputs: &ConfigInputs, sets: &[ResourceSet]) {
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
    if let (Some(client), Some(node)) = (&inputs.kube, &inputs.node_name) {
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
    inputs: &ConfigInputs,
) -> Result<Vec<ResourceSet>, DevicePluginError> {
    let channels = imex::present(&inputs.imex_channel_dir, &settings.imex.channel_ids);
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
async fn read_source(inputs: &ConfigInputs) -> Result<(Vec<u8>, Loaded), String> {
    match &inputs.source {
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
            let label = node_label(inputs).await?;
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
            let client = inputs.kube.as_ref().ok_or_else(|| {
                format!("ConfigMap {namespace}/{name}: no API client to read it with")
            })?;
            let label = node_label(inputs).await?;
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
async fn node_label(inputs: &ConfigInputs) -> Result<Option<String>, String> {
    match (&inputs.kube, &inputs.node_name) {
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
