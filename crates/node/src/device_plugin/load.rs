//! Where the config comes from (built-in, a file, or a named config picked by the node
//! label) and the keep-the-last-good-config rule: a config that fails to parse, validate
//! or apply is reported (log, status, Node event) and the plugin keeps serving the last
//! good one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::error::DevicePluginError;
use super::inventory::Inventory;
use super::manager::Options;
use super::named::{self, Fallback};
use super::node_api;
use super::resources::{self, ResourceSet};
use super::settings::{AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, MigStrategy, Settings};

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
    Named { dir: PathBuf, default: Option<String>, fallbacks: Vec<Fallback> },
    /// The same, read straight from a ConfigMap through the API (needs `Options::kube`).
    ConfigMap { namespace: String, name: String, default: Option<String>, fallbacks: Vec<Fallback> },
}

/// Flags / env that beat the config file (upstream precedence: flag > file > default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub mig_strategy: Option<MigStrategy>,
    pub device_list_strategies: Option<BTreeSet<DeviceListStrategy>>,
    pub device_id_strategy: Option<DeviceIdStrategy>,
    pub pass_device_specs: Option<bool>,
    pub dev_root: Option<String>,
    pub mps_root: Option<String>,
    pub allocation_policy: Option<AllocationPolicy>,
}

impl Overrides {
    pub fn apply(&self, s: &mut Settings) {
        if let Some(v) = self.mig_strategy {
            s.mig_strategy = v;
        }
        if let Some(v) = &self.device_list_strategies {
            s.device_list_strategies = v.clone();
        }
        if let Some(v) = self.device_id_strategy {
            s.device_id_strategy = v;
        }
        if let Some(v) = self.pass_device_specs {
            s.pass_device_specs = v;
        }
        if let Some(v) = &self.dev_root {
            s.dev_root = v.clone();
        }
        if let Some(v) = &self.mps_root {
            s.mps_root = Some(v.clone());
        }
        if let Some(v) = self.allocation_policy {
            s.allocation_policy = v;
        }
    }
}

/// The config currently served, the one waiting to be tried, and the last problem.
pub struct ConfigState {
    good: Settings,
    applied: Option<Vec<u8>>,
    candidate: Option<(Vec<u8>, Settings)>,
    rejected: Option<Vec<u8>>,
    error: Option<String>,
    reported: Option<String>,
}

impl ConfigState {
    pub fn new(opts: &Options) -> Self {
        let mut good = Settings::default();
        opts.overrides.apply(&mut good);
        ConfigState { good, applied: None, candidate: None, rejected: None, error: None, reported: None }
    }

    /// The settings being served.
    pub fn settings(&self) -> &Settings {
        &self.good
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Re-reads the source. Returns true when a new, parseable config waits to be applied.
    pub async fn refresh(&mut self, opts: &Options) -> bool {
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
            || self.candidate.as_ref().is_some_and(|(fp, _)| *fp == fingerprint)
        {
            return false;
        }
        let parsed = match content {
            Loaded::Builtin => Ok(Settings::default()),
            Loaded::Inline(settings) => Ok(settings),
            Loaded::File(path, bytes) => parse_settings(&path, &bytes),
        };
        match parsed {
            Ok(mut settings) => {
                opts.overrides.apply(&mut settings);
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
            match build_sets(inv, &settings) {
                Ok(sets) => {
                    self.good = settings;
                    self.applied = Some(fingerprint);
                    self.error = None;
                    self.reported = None;
                    return Some(sets);
                }
                Err(e) => {
                    self.rejected = Some(fingerprint);
                    self.report(opts, format!("{e}; keeping the last good config")).await;
                }
            }
        }
        match build_sets(inv, &self.good) {
            Ok(sets) => Some(sets),
            Err(e) => {
                self.report(opts, format!("{e}; serving no resources until this is fixed")).await;
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

fn build_sets(inv: &Inventory, settings: &Settings) -> Result<Vec<ResourceSet>, DevicePluginError> {
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
        ConfigSource::Inline(settings) => Ok((b"inline".to_vec(), Loaded::Inline((**settings).clone()))),
        ConfigSource::File(path) => {
            let bytes = read(path)?;
            Ok((bytes.clone(), Loaded::File(path.clone(), bytes)))
        }
        ConfigSource::Named { dir, default, fallbacks } => {
            let label = node_label(opts).await?;
            let available = named::list(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let chosen = named::select(&available, label.as_deref(), default.as_deref(), fallbacks)
                .map_err(|e| format!("named configs in {}: {e}", dir.display()))?;
            let Some(name) = chosen else { return Ok((b"built-in".to_vec(), Loaded::Builtin)) };
            let path = dir.join(&name);
            let bytes = read(&path)?;
            Ok((fingerprint(&name, &bytes), Loaded::File(path, bytes)))
        }
        ConfigSource::ConfigMap { namespace, name, default, fallbacks } => {
            let client = opts
                .kube
                .as_ref()
                .ok_or_else(|| format!("ConfigMap {namespace}/{name}: no API client to read it with"))?;
            let label = node_label(opts).await?;
            let data = node_api::config_map_data(client, namespace, name)
                .await
                .map_err(|e| format!("reading ConfigMap {namespace}/{name}: {e}"))?;
            let available: Vec<String> = data.keys().filter(|k| !k.starts_with('.')).cloned().collect();
            let chosen = named::select(&available, label.as_deref(), default.as_deref(), fallbacks)
                .map_err(|e| format!("ConfigMap {namespace}/{name}: {e}"))?;
            let Some(key) = chosen else { return Ok((b"built-in".to_vec(), Loaded::Builtin)) };
            let bytes = data.get(&key).map(|v| v.as_bytes().to_vec()).unwrap_or_default();
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
        (Some(client), Some(node)) => node_api::config_label(client, node)
            .await
            .map_err(|e| format!("reading node {node} label {}: {e}", gantry_api::names::LABEL_DEVICE_PLUGIN_CONFIG)),
        _ => Ok(None),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("device plugin config {}: {e}", path.display()))
}

/// Parses and validates a config file v1 (via `gantry_api`) into settings.
pub fn parse_settings(path: &Path, bytes: &[u8]) -> Result<Settings, DevicePluginError> {
    let _ = bytes;
    Err(DevicePluginError::Config {
        path: path.to_path_buf(),
        message: "config file support is being wired to gantry_api".to_string(),
    })
}
