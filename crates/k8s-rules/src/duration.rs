//! Go `time.Duration` strings (`1h30m`, `300ms`, `-1.5h`, `.5s`), parsed exactly as Go's
//! `time.ParseDuration`: integer arithmetic on nanoseconds, the fraction through a float as
//! Go does, an error on overflow. KAI's `metav1.Duration` fields and agent flags use them.

use std::time::Duration;

/// A duration that cannot be parsed, naming the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("duration {input:?}: {reason}")]
pub struct DurationError {
    pub input: String,
    pub reason: String,
}

const LIMIT: u64 = 1 << 63;

fn unit_nanos(u: &str) -> Option<u64> {
    Some(match u {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Go's `leadingInt`: the leading digits, `None` on overflow past 2^63.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let mut x: u64 = 0;
    for b in s[..end].bytes() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(b - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[end..]))
}

/// Go's `leadingFraction`: digits after the point, with their scale; excess digits are dropped.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    for b in s[..end].bytes() {
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(b - b'0');
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[end..])
}

/// Parse into signed nanoseconds.
pub fn parse_go_duration(input: &str) -> Result<i64, DurationError> {
    let err = |reason: String| DurationError {
        input: input.to_string(),
        reason,
    };
    let invalid = || err("must be a Go duration like \"90s\", \"1h30m\" or \"300ms\"".into());
    let (neg, mut s) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !s.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(|| err("out of range".into()))?;
        s = rest;
        let pre = before != s.len();
        let (mut f, mut scale, mut post) = (0, 1.0, false);
        if let Some(rest) = s.strip_prefix('.') {
            let before = rest.len();
            (f, scale, s) = leading_fraction(rest);
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(err("missing unit (ns, us, ms, s, m, h)".into()));
        }
        let (u, rest) = s.split_at(unit_len);
        s = rest;
        let unit = unit_nanos(u)
            .ok_or_else(|| err(format!("unknown unit {u:?} (ns, us, ms, s, m, h)")))?;
        if v > LIMIT / unit {
            return Err(err("out of range".into()));
        }
        v *= unit;
        if f > 0 {
            // Go goes through float64 here: exact to the nanosecond for fractions of hours.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(err("out of range".into()));
            }
        }
        total += v;
        if total > LIMIT {
            return Err(err("out of range".into()));
        }
    }
    if neg {
        // -2^63 is representable.
        return Ok((total as i128).wrapping_neg() as i64);
    }
    i64::try_from(total).map_err(|_| err("out of range".into()))
}

/// Parse a duration that must not be negative into a [`Duration`].
pub fn parse_std_duration(input: &str) -> Result<Duration, DurationError> {
    let n = parse_go_duration(input)?;
    u64::try_from(n)
        .map(Duration::from_nanos)
        .map_err(|_| DurationError {
            input: input.to_string(),
            reason: "must not be negative".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_examples() {
        for (s, want) in [
            ("0", 0),
            ("5s", 5_000_000_000),
            ("30s", 30_000_000_000),
            ("1478s", 1_478_000_000_000),
            ("-5s", -5_000_000_000),
            ("+5s", 5_000_000_000),
            ("-0", 0),
            ("5.0s", 5_000_000_000),
            ("5.6s", 5_600_000_000),
            ("5.s", 5_000_000_000),
            (".5s", 500_000_000),
            ("1.0s", 1_000_000_000),
            ("1.004s", 1_004_000_000),
            ("100.00100s", 100_001_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12\u{b5}s", 12_000),
            ("13\u{3bc}s", 13_000),
            ("14ms", 14_000_000),
            ("15m", 900_000_000_000),
            ("16h", 57_600_000_000_000),
            ("3h30m", 12_600_000_000_000),
            ("10.5s4m", 250_500_000_000),
            ("-2m3.4s", -123_400_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("39h9m14.425s", 140_954_425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 1_200_000_000_000),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("0.100000000000000000000h", 360_000_000_000),
        ] {
            assert_eq!(parse_go_duration(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn go_failures() {
        for (s, why) in [
            ("", "Go duration"),
            ("3", "missing unit"),
            ("-", "Go duration"),
            ("s", "Go duration"),
            (".", "Go duration"),
            ("-.", "Go duration"),
            (".s", "Go duration"),
            ("+.s", "Go duration"),
            ("1d", "unknown unit \"d\""),
            ("5 minutes", "unknown unit \" minutes\""),
            ("9223372036854775808ns", "out of range"),
            ("9223372036854775.808us", "out of range"),
            ("9223372036854ms775us808ns", "out of range"),
        ] {
            let e = parse_go_duration(s).expect_err(s).to_string();
            assert!(
                e.contains(why) && e.contains(&format!("{s:?}")),
                "{s:?}: {e}"
            );
        }
        assert!(parse_std_duration("-1s").is_err());
        assert_eq!(parse_std_duration("1.5s"), Ok(Duration::from_millis(1500)));
    }
}
