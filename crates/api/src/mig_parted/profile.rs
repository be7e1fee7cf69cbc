//! MIG profile strings: `<G>g.<GB>gb`, or `<C>c.<G>g.<GB>gb` for a compute-instance
//! sub-profile, optionally followed by `+attr[,attr]` (`me`, `me.all`, `gfx`) or `-me`.

use std::fmt;
use std::str::FromStr;

/// Positive attributes a profile may carry.
pub const ATTRIBUTES: [&str; 3] = ["me", "me.all", "gfx"];
/// Negative attributes (`-me`: no media extensions).
pub const NEGATIVE_ATTRIBUTES: [&str; 1] = ["me"];
/// GPU-instance slice counts NVML defines.
pub const SLICE_COUNTS: [u32; 7] = [1, 2, 3, 4, 6, 7, 8];

/// GPU-instance profiles that exist on at least one MIG-capable GPU model (A100 40/80 GB,
/// A30, H100 80 GB, H100 NVL, GH200, H20, H200, B200, GB200, B300, GB300, RTX PRO 6000). The per-model tables (which
/// profile fits which GPU, how many) live in the GPU catalog; this is only the name set.
pub const KNOWN_PROFILES: &[&str] = &[
    // A100 40 GB
    "1g.5gb",
    "1g.5gb+me",
    "1g.10gb",
    "2g.10gb",
    "3g.20gb",
    "4g.20gb",
    "7g.40gb",
    // A100 / H100 80 GB class
    "1g.10gb+me",
    "1g.20gb",
    "2g.20gb",
    "3g.40gb",
    "4g.40gb",
    "7g.80gb",
    // A30
    "1g.6gb",
    "1g.6gb+me",
    "2g.12gb",
    "2g.12gb+me",
    "4g.24gb",
    // H100 NVL / GH200
    "1g.12gb",
    "1g.12gb+me",
    "1g.24gb",
    "2g.24gb",
    "3g.47gb",
    "4g.47gb",
    "7g.94gb",
    "3g.48gb",
    "4g.48gb",
    "7g.96gb",
    // GH200 144 GB HBM3e
    "1g.36gb",
    "2g.36gb",
    "3g.72gb",
    "4g.72gb",
    "7g.144gb",
    // H200 141 GB
    "1g.18gb",
    "1g.18gb+me",
    "1g.35gb",
    "2g.35gb",
    "3g.71gb",
    "4g.71gb",
    "7g.141gb",
    // B200
    "1g.23gb",
    "1g.23gb+me",
    "1g.45gb",
    "2g.45gb",
    "3g.90gb",
    "4g.90gb",
    "7g.180gb",
    // GB200 (186 GB; the 189 GB boards' 3g/4g/7g)
    "1g.47gb",
    "2g.47gb",
    "3g.93gb",
    "4g.93gb",
    "7g.186gb",
    "3g.95gb",
    "4g.95gb",
    "7g.189gb",
    // HGX B300 (269 GB)
    "1g.34gb",
    "1g.34gb+me",
    "1g.67gb",
    "2g.67gb",
    "3g.135gb",
    "4g.135gb",
    "7g.269gb",
    // GB300
    "1g.35gb+me",
    "1g.70gb",
    "2g.70gb",
    "3g.139gb",
    "4g.139gb",
    "7g.278gb",
    // RTX PRO 6000 Blackwell
    "1g.24gb+me",
    "1g.24gb+gfx",
    "1g.24gb-me",
    "1g.24gb+me.all",
    "2g.48gb",
    "2g.48gb+gfx",
    "2g.48gb-me",
    "2g.48gb+me.all",
    "4g.96gb",
    "4g.96gb+gfx",
];

/// A parsed MIG profile.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigProfile {
    /// Compute slices when it differs from `gpu_slices` (a CI sub-profile), else `None`.
    pub compute_slices: Option<u32>,
    pub gpu_slices: u32,
    pub memory_gb: u32,
    /// `+a,b` attributes, in order.
    pub attributes: Vec<String>,
    /// `-a` attributes.
    pub negative: Vec<String>,
}

impl MigProfile {
    /// The GPU-instance part: the profile without a `<C>c.` prefix.
    pub fn gpu_instance(&self) -> MigProfile {
        MigProfile {
            compute_slices: None,
            ..self.clone()
        }
    }
    /// Whether this is a compute-instance sub-profile (C < G).
    pub fn is_sub_profile(&self) -> bool {
        self.compute_slices.is_some()
    }
    /// Profile as used in resource names, labels and config names: `+` becomes `.`.
    pub fn dotted(&self) -> String {
        self.to_string().replace('+', ".")
    }
    /// Whether a GPU model ships this profile (name-level check; see [`KNOWN_PROFILES`]).
    pub fn is_known(&self) -> bool {
        let gi = self.gpu_instance().to_string();
        KNOWN_PROFILES.contains(&gi.as_str())
            && self.compute_slices.is_none_or(|c| {
                self.attributes.is_empty() && self.negative.is_empty() && c < self.gpu_slices
            })
    }
}

impl fmt::Display for MigProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = self.compute_slices {
            write!(f, "{c}c.")?;
        }
        write!(f, "{}g.{}gb", self.gpu_slices, self.memory_gb)?;
        if !self.attributes.is_empty() {
            write!(f, "+{}", self.attributes.join(","))?;
        }
        for n in &self.negative {
            write!(f, "-{n}")?;
        }
        Ok(())
    }
}

fn number(s: &str, suffix: &str, whole: &str) -> Result<u32, String> {
    let n = s
        .strip_suffix(suffix)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| grammar_error(whole))?;
    n.parse::<u32>().map_err(|_| grammar_error(whole))
}

fn grammar_error(s: &str) -> String {
    format!(
        "{s:?} is not a MIG profile: expected <G>g.<GB>gb or <C>c.<G>g.<GB>gb, optionally with +me, +me.all, +gfx or -me (e.g. 1g.10gb, 1g.5gb+me, 1c.2g.10gb)"
    )
}

impl FromStr for MigProfile {
    type Err = String;

    /// Parse the grammar only; use [`parse_known_profile`] to also require a real profile.
    fn from_str(s: &str) -> Result<Self, String> {
        if !s.contains(['+', '-'])
            && (s.ends_with(".me") || s.ends_with(".me.all") || s.ends_with(".gfx"))
        {
            return Err(format!(
                "{s:?} is not a MIG profile: attributes are written with '+' in mig-devices (e.g. 1g.5gb+me); the '.' form is only for config and resource names"
            ));
        }
        let (base, attributes, negative) = if let Some((b, a)) = s.split_once('+') {
            let attrs: Vec<String> = a.split(',').map(str::to_string).collect();
            for at in &attrs {
                if !ATTRIBUTES.contains(&at.as_str()) {
                    return Err(format!(
                        "{s:?}: unknown MIG profile attribute {at:?} (known: me, me.all, gfx)"
                    ));
                }
            }
            (b, attrs, Vec::new())
        } else if let Some((b, n)) = s.split_once('-') {
            if !NEGATIVE_ATTRIBUTES.contains(&n) {
                return Err(format!(
                    "{s:?}: unknown negative MIG profile attribute {n:?} (known: -me)"
                ));
            }
            (b, Vec::new(), vec![n.to_string()])
        } else {
            (s, Vec::new(), Vec::new())
        };
        let parts: Vec<&str> = base.split('.').collect();
        let (c, g, gb) = match parts.as_slice() {
            [g, gb] => (None, *g, *gb),
            [c, g, gb] => (Some(number(c, "c", s)?), *g, *gb),
            _ => return Err(grammar_error(s)),
        };
        let g = number(g, "g", s)?;
        let gb = number(gb, "gb", s)?;
        if !SLICE_COUNTS.contains(&g) {
            return Err(format!(
                "{s:?}: a GPU instance has 1, 2, 3, 4, 6, 7 or 8 slices, got {g}"
            ));
        }
        if gb == 0 {
            return Err(format!("{s:?}: memory must be at least 1gb"));
        }
        let compute_slices = match c {
            Some(c) if c == g => None,
            Some(c) if c == 0 || c > g => {
                return Err(format!(
                    "{s:?}: compute slices ({c}) must be between 1 and the GPU slices ({g})"
                ));
            }
            other => other,
        };
        Ok(MigProfile {
            compute_slices,
            gpu_slices: g,
            memory_gb: gb,
            attributes,
            negative,
        })
    }
}

/// Parse a profile and require it to exist on some GPU model; the error says why and lists
/// the known profiles of the same slice count.
pub fn parse_known_profile(s: &str) -> Result<MigProfile, String> {
    let p: MigProfile = s.parse()?;
    if p.is_known() {
        return Ok(p);
    }
    let prefix = format!("{}g.", p.gpu_slices);
    let same: Vec<&str> = KNOWN_PROFILES
        .iter()
        .copied()
        .filter(|k| k.starts_with(&prefix))
        .collect();
    Err(format!(
        "unknown MIG profile {s:?}: no supported GPU has it (known {}g profiles: {})",
        p.gpu_slices,
        same.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for s in [
            "1g.10gb",
            "1g.5gb+me",
            "1c.2g.10gb",
            "1g.24gb-me",
            "1g.24gb+me.all",
            "7g.141gb",
        ] {
            let p: MigProfile = s.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.to_string(), s);
        }
        let p: MigProfile = "3c.3g.20gb".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.to_string(), "3g.20gb");
        assert_eq!(
            "1g.5gb+me".parse::<MigProfile>().map(|p| p.dotted()),
            Ok("1g.5gb.me".into())
        );
    }

    #[test]
    fn rejects_bad_grammar() {
        for s in [
            "",
            "1g",
            "g.10gb",
            "1g.10",
            "5g.10gb",
            "1g.0gb",
            "3c.2g.10gb",
            "1g.5gb+foo",
            "1g.5gb-gfx",
            "1g.5gb.me",
            "x1g.5gb",
        ] {
            assert!(s.parse::<MigProfile>().is_err(), "{s} parsed");
        }
        assert!(
            "1g.5gb.me"
                .parse::<MigProfile>()
                .err()
                .unwrap_or_default()
                .contains("'+'")
        );
    }

    #[test]
    fn known_profiles() {
        assert!(parse_known_profile("1g.10gb").is_ok());
        assert!(parse_known_profile("1c.3g.20gb").is_ok());
        assert!(parse_known_profile("1g.18gb+me").is_ok());
        let e = parse_known_profile("1g.7gb").err().unwrap_or_default();
        assert!(
            e.contains("unknown MIG profile \"1g.7gb\"") && e.contains("1g.10gb"),
            "{e}"
        );
        assert!(parse_known_profile("2g.10gb+me").is_err());
        for k in KNOWN_PROFILES {
            assert!(k.parse::<MigProfile>().is_ok(), "{k}");
        }
    }
}
