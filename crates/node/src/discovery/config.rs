//! The device plugin config file (v1) keys GFD reads: `flags.migStrategy`, `flags.gfd.*` and
//! `sharing`. Parsed leniently like upstream (unknown keys ignored); YAML or JSON.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::DiscoveryError;
use super::labels::MigStrategy;
use super::sharing::{ReplicatedEntry, Sharing};

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

#[derive(Deserialize, Default)]
#[serde(default)]
struct File {
    version: Option<String>,
    flags: Flags,
    sharing: SharingSection,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Flags {
    mig_strategy: Option<String>,
    gfd: Gfd,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Gfd {
    oneshot: Option<bool>,
    no_timestamp: Option<bool>,
    sleep_interval: Option<serde_yaml::Value>,
    machine_type_file: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SharingSection {
    time_slicing: Option<Replicated>,
    mps: Option<Replicated>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Replicated {
    rename_by_default: bool,
    resources: Vec<Resource>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Resource {
    name: String,
    replicas: u32,
}

impl Replicated {
    fn entries(&self) -> Vec<ReplicatedEntry> {
        self.resources
            .iter()
            .map(|r| ReplicatedEntry {
                name: r.name.clone(),
                replicas: r.replicas,
            })
            .collect()
    }
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
    let file: File = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    if let Some(v) = file.version.as_deref()
        && v != "v1"
    {
        return Err(format!("version: unknown config version {v:?} (want v1)"));
    }
    let mig_strategy = match file.flags.mig_strategy.as_deref() {
        None => None,
        Some(s) => Some(s.parse::<MigStrategy>().map_err(|_| {
            format!("flags.migStrategy: unknown strategy {s:?} (none, single, mixed)")
        })?),
    };
    let sleep_interval = match &file.flags.gfd.sleep_interval {
        None => None,
        Some(serde_yaml::Value::Number(n)) => {
            Some(Some(Duration::from_nanos(n.as_u64().ok_or_else(|| {
                format!("flags.gfd.sleepInterval: {n} is not a positive integer")
            })?)))
        }
        Some(serde_yaml::Value::String(s)) => {
            Some(parse_interval(s).map_err(|e| format!("flags.gfd.sleepInterval: {e}"))?)
        }
        Some(other) => {
            return Err(format!(
                "flags.gfd.sleepInterval: unexpected value {other:?}"
            ));
        }
    };
    let ts = file
        .sharing
        .time_slicing
        .as_ref()
        .map(|r| (r.entries(), r.rename_by_default));
    let mps = file
        .sharing
        .mps
        .as_ref()
        .map(|r| (r.entries(), r.rename_by_default));
    for (section, entries) in [("timeSlicing", &ts), ("mps", &mps)] {
        if let Some((entries, _)) = entries {
            if let Some(e) = entries.iter().find(|e| e.name.is_empty()) {
                return Err(format!(
                    "sharing.{section}.resources: an entry has no name (replicas {})",
                    e.replicas
                ));
            }
            if let Some(e) = entries.iter().find(|e| e.replicas < 1) {
                return Err(format!(
                    "sharing.{section}.resources[{}].replicas: must be at least 1",
                    e.name
                ));
            }
        }
    }
    let sharing = Sharing::from_sections(
        ts.as_ref().map(|(e, r)| (e.as_slice(), *r)),
        mps.as_ref().map(|(e, r)| (e.as_slice(), *r)),
    );
    Ok(DiscoveryConfig {
        mig_strategy,
        oneshot: file.flags.gfd.oneshot,
        no_timestamp: file.flags.gfd.no_timestamp,
        sleep_interval,
        machine_type_file: file.flags.gfd.machine_type_file,
        sharing,
    })
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
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{s:?}: missing unit (use s, m, h, ms)"))?;
        let (num, tail) = rest.split_at(digits);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("{s:?}: bad number {num:?}"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("{s:?}: unknown unit {unit:?} (use s, m, h, ms)")),
        };
        total += Duration::from_secs_f64(value * scale);
        rest = next;
    }
    Ok(Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::sharing::SharingStrategy;

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
