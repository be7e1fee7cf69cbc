//! The device plugin config file (v1) keys GFD reads: `flags.migStrategy`, `flags.gfd.*` and
//! `sharing`, taken from the one config v1 parser (`gantry_api::device_plugin_config`).
//! Parsed leniently like upstream (unknown keys ignored); YAML or JSON.

use std::path::Path;
use std::time::Duration;

use gantry_api::device_plugin_config::{DevicePluginConfig, full_resource_name};
use gantry_k8s_rules::MigStrategy;
use serde_json::Value;

use super::error::DiscoveryError;
use super::sharing::{Replication, Sharing};

/// The parts of the config file that matter to discovery.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryConfig {
    pub mig_strategy: Option<MigStrategy>,
    pub oneshot: Option<bool>,
    pub no_timestamp: Option<bool>,
    /// `None` inside = `infinite`.
    pub sleep_interval: Option<Option<Duration>>,
    pub machine_type_file: Option<String>,
    pub sharing: Sharing,
}

/// Read and parse a config file. An empty file (e.g. a symlink to `/dev/null`) is the default.
pub fn load(path: &Path) -> Result<DiscoveryConfig, DiscoveryError> {
    let text = std::fs::read_to_string(path).map_err(|e| DiscoveryError::Config {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&text).map_err(|message| DiscoveryError::Config {
        path: path.display().to_string(),
        message,
    })
}

/// Parse config text; the error names the offending key.
pub fn parse(text: &str) -> Result<DiscoveryConfig, String> {
    if text.trim().is_empty() {
        return Ok(DiscoveryConfig::default());
    }
    let file: DevicePluginConfig = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    if let Some(v) = file.version.as_deref()
        && v != "v1"
    {
        return Err(format!("version: unknown config version {v:?} (want v1)"));
    }
    let flags = file.flags.as_ref();
    let gfd = flags.and_then(|f| f.gfd.as_ref());
    let sleep_interval = match gfd.and_then(|g| g.sleep_interval.as_ref()) {
        None => None,
        Some(Value::Number(n)) => {
            Some(Some(Duration::from_nanos(n.as_u64().ok_or_else(|| {
                format!("flags.gfd.sleepInterval: {n} is not a positive integer")
            })?)))
        }
        Some(Value::String(s)) => {
            Some(parse_interval(s).map_err(|e| format!("flags.gfd.sleepInterval: {e}"))?)
        }
        Some(other) => {
            return Err(format!("flags.gfd.sleepInterval: unexpected value {other}"));
        }
    };
    if let Some(sharing) = &file.sharing {
        for (section, r) in [
            ("timeSlicing", &sharing.time_slicing),
            ("mps", &sharing.mps),
        ] {
            for e in r.iter().flat_map(|r| r.resources.iter()) {
                if e.name.is_empty() {
                    return Err(format!(
                        "sharing.{section}.resources: an entry has no name (replicas {})",
                        e.replicas
                    ));
                }
                if e.replicas < 1 {
                    return Err(format!(
                        "sharing.{section}.resources[{}].replicas: must be at least 1",
                        e.name
                    ));
                }
            }
        }
    }
    Ok(DiscoveryConfig {
        mig_strategy: flags.and_then(|f| f.mig_strategy),
        oneshot: gfd.and_then(|g| g.oneshot),
        no_timestamp: gfd.and_then(|g| g.no_timestamp),
        sleep_interval,
        machine_type_file: gfd.and_then(|g| g.machine_type_file.clone()),
        sharing: sharing_of(&file),
    })
}

/// The replicated set in effect and its strategy, by the config's own rules. Only
/// `renameByDefault` renames (per-entry `rename` is ignored upstream).
fn sharing_of(c: &DevicePluginConfig) -> Sharing {
    let mut resources = std::collections::BTreeMap::new();
    if let Some((r, _)) = c.replicated() {
        for e in &r.resources {
            resources.insert(
                full_resource_name(&e.name),
                Replication {
                    replicas: u32::try_from(e.replicas).unwrap_or(u32::MAX),
                    renamed: r.rename_by_default.unwrap_or(false),
                },
            );
        }
    }
    Sharing {
        strategy: c.sharing_strategy(),
        resources,
    }
}

/// `60s`, `1m30s`, `500ms`, `2h`, a bare number of seconds, or `infinite` (→ `None`).
pub fn parse_interval(s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    if s == "infinite" {
        return Ok(None);
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Some(Duration::from_secs(secs)));
    }
    gantry_k8s_rules::duration::parse_std_duration(s)
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::device_plugin_config::SharingStrategy;

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("60s"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(parse_interval("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(
            parse_interval("500ms"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(parse_interval("infinite"), Ok(None));
        assert_eq!(parse_interval("5"), Ok(Some(Duration::from_secs(5))));
        assert!(parse_interval("5x").is_err());
        assert!(parse_interval("s").is_err());
    }

    #[test]
    fn parses_upstream_time_slicing_example() {
        let cfg = parse(
            "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: [envvar]\n  gfd:\n    sleepInterval: 30s\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n",
        )
        .expect("parse");
        assert_eq!(cfg.mig_strategy, Some(MigStrategy::Mixed));
        assert_eq!(cfg.sleep_interval, Some(Some(Duration::from_secs(30))));
        assert_eq!(cfg.sharing.strategy, SharingStrategy::TimeSlicing);
        let r = cfg
            .sharing
            .replication("nvidia.com/gpu")
            .expect("replicated");
        assert_eq!((r.replicas, r.renamed), (4, true));
    }

    #[test]
    fn empty_file_is_default_and_errors_name_keys() {
        assert_eq!(parse(""), Ok(DiscoveryConfig::default()));
        let err = parse("flags:\n  migStrategy: weird\n").expect_err("bad strategy");
        assert!(err.contains("flags.migStrategy"), "{err}");
        let err = parse("version: v2\n").expect_err("bad version");
        assert!(err.contains("version"), "{err}");
        let err =
            parse("sharing:\n  mps:\n    resources:\n      - name: gpu\n        replicas: 0\n")
                .expect_err("bad replicas");
        assert!(err.contains("replicas"), "{err}");
    }
}
