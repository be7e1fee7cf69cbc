//! Durations as KAI's configuration writes them.

use serde::{Deserialize, Serialize};

/// A Go duration as KAI's configuration writes it (`"10m"`, `"168h"`, `"1h30m"`), kept in
/// nanoseconds; serialised back the same way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct GoDuration(pub i64);

impl GoDuration {
    pub fn from_secs(s: i64) -> GoDuration {
        GoDuration(s.saturating_mul(1_000_000_000))
    }
    pub fn secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl std::fmt::Display for GoDuration {
    /// Go's `Duration.String` for whole seconds and above (`1h30m0s`), else `Nms`/`Nns`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0;
        if n == 0 {
            return f.write_str("0s");
        }
        let (sign, n) = if n < 0 {
            ("-", -(n as i128))
        } else {
            ("", n as i128)
        };
        if n % 1_000_000_000 != 0 {
            return write!(f, "{sign}{}ns", n);
        }
        let s = n / 1_000_000_000;
        let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
        match (h, m) {
            (0, 0) => write!(f, "{sign}{s}s"),
            (0, _) => write!(f, "{sign}{m}m{s}s"),
            _ => write!(f, "{sign}{h}h{m}m{s}s"),
        }
    }
}

impl Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<GoDuration, D::Error> {
        let s = String::deserialize(d)?;
        gantry_k8s_rules::duration::parse_go_duration(s.trim())
            .map(GoDuration)
            .map_err(|e| serde::de::Error::custom(format!("{s:?}: {e}")))
    }
}
