//! What every printer builds a table from: the column definition, and the cells all kinds
//! share (the name, and ages as kubectl shows them).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// A column definition (`meta.k8s.io/v1` `TableColumnDefinition`).
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub kind: &'static str,
    pub format: &'static str,
    pub priority: i64,
    pub description: String,
}

impl Column {
    pub(super) fn new(name: &str, kind: &'static str, priority: i64) -> Column {
        Column {
            name: name.into(),
            kind,
            format: if name == "Name" { "name" } else { "" },
            priority,
            description: String::new(),
        }
    }
    pub(super) fn json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

pub(super) fn name_of(o: &Value) -> Value {
    o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)
}

/// `AGE` as kubectl shows it, from `metadata.creationTimestamp`.
pub(super) fn age_of(o: &Value, now: DateTime<Utc>) -> Value {
    since(o.pointer("/metadata/creationTimestamp"), now)
}

/// A timestamp's age (`<unknown>` when absent or unreadable).
pub(super) fn since(ts: Option<&Value>, now: DateTime<Utc>) -> Value {
    ts.and_then(Value::as_str)
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| human_duration(now - t.with_timezone(&Utc)))
        .unwrap_or_else(|| "<unknown>".into())
        .into()
}

/// apimachinery's `duration.HumanDuration`: two significant units while they matter.
pub fn human_duration(d: chrono::Duration) -> String {
    let secs = d.num_seconds();
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    let (m, h) = (secs / 60, secs / 3600);
    let (days, years) = (h / 24, h / (24 * 365));
    if secs < 60 * 2 {
        format!("{secs}s")
    } else if m < 10 {
        match secs % 60 {
            0 => format!("{m}m"),
            s => format!("{m}m{s}s"),
        }
    } else if m < 60 * 3 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            mm => format!("{h}h{mm}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{days}d"),
            hh => format!("{days}d{hh}h"),
        }
    } else if h < 24 * 365 * 2 {
        format!("{days}d")
    } else if h < 24 * 365 * 8 {
        match days % 365 {
            0 => format!("{years}y"),
            dd => format!("{years}y{dd}d"),
        }
    } else {
        format!("{years}y")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn human_durations_match_apimachinery() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 12 * 60, "3h12m"),
            (9 * 3600, "9h"),
            (50 * 3600, "2d2h"),
            (9 * 24 * 3600, "9d"),
            (3 * 365 * 24 * 3600, "3y"),
            (3 * 365 * 24 * 3600 + 5 * 24 * 3600, "3y5d"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::seconds(secs)), want, "{secs} s");
        }
        assert_eq!(human_duration(Duration::seconds(-5)), "<invalid>");
    }
}
