//! Named configs: a directory of config files (a mounted ConfigMap, one key per file)
//! from which the node label `nvidia.com/device-plugin.config` picks one, with the
//! config-manager's default name and fallback strategies.

use std::path::Path;

/// What to do when the node label is empty and no default name is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Use the config named `default`.
    Named,
    /// Use the only config present.
    Single,
    /// Use built-in defaults.
    Empty,
}

impl std::str::FromStr for Fallback {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "named" => Ok(Fallback::Named),
            "single" => Ok(Fallback::Single),
            "empty" => Ok(Fallback::Empty),
            other => Err(format!(
                "unknown fallback strategy {other:?} (named, single, empty)"
            )),
        }
    }
}

/// Upstream Helm default.
pub const DEFAULT_FALLBACKS: [Fallback; 2] = [Fallback::Named, Fallback::Single];

/// Picks a config name; `Ok(None)` = built-in defaults. A label naming a missing config
/// is an error, as upstream.
pub fn select(
    available: &[String],
    label: Option<&str>,
    default: Option<&str>,
    fallbacks: &[Fallback],
) -> Result<Option<String>, String> {
    let wanted = label
        .filter(|l| !l.is_empty())
        .or(default.filter(|d| !d.is_empty()));
    if let Some(name) = wanted {
        return if available.iter().any(|a| a == name) {
            Ok(Some(name.to_string()))
        } else {
            Err(format!("config {name:?} not found among {available:?}"))
        };
    }
    for fb in fallbacks {
        match fb {
            Fallback::Named if available.iter().any(|a| a == "default") => {
                return Ok(Some("default".into()));
            }
            Fallback::Single if available.len() == 1 => return Ok(Some(available[0].clone())),
            Fallback::Empty => return Ok(None),
            _ => {}
        }
    }
    Err(format!(
        "no config selected: node label empty, no default, and fallbacks {fallbacks:?} found nothing among {available:?}"
    ))
}

/// Config names in a directory (ConfigMap mounts add `..data` etc., which are skipped).
pub fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || entry.path().is_dir() {
            continue;
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn label_then_default_then_fallbacks() {
        let avail = names(&["a100", "default", "ts4"]);
        assert_eq!(
            select(&avail, Some("ts4"), Some("a100"), &DEFAULT_FALLBACKS),
            Ok(Some("ts4".into()))
        );
        assert_eq!(
            select(&avail, Some(""), Some("a100"), &DEFAULT_FALLBACKS),
            Ok(Some("a100".into()))
        );
        assert_eq!(
            select(&avail, None, None, &DEFAULT_FALLBACKS),
            Ok(Some("default".into()))
        );
        assert!(
            select(&avail, Some("nope"), None, &DEFAULT_FALLBACKS)
                .unwrap_err()
                .contains("nope")
        );
        assert_eq!(
            select(&names(&["only"]), None, None, &DEFAULT_FALLBACKS),
            Ok(Some("only".into()))
        );
        assert!(select(&names(&["x", "y"]), None, None, &DEFAULT_FALLBACKS).is_err());
        assert_eq!(
            select(&names(&["x", "y"]), None, None, &[Fallback::Empty]),
            Ok(None)
        );
    }
}
