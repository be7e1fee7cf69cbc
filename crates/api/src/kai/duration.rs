//! Go `time.Duration` strings (`1h30m`, `300ms`, `-5m`, `1.5h`), as KAI's metav1.Duration
//! fields use them. Parsed to signed nanoseconds like Go's `time.ParseDuration`.

/// Parse a Go duration string into nanoseconds. The error names the bad input.
pub fn parse_go_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("must be a Go duration like \"90s\" or \"1h30m\", got {s:?}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let num: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += num * unit;
    }
    if total > i64::MAX as f64 {
        return Err(format!("duration {s:?} is out of range"));
    }
    let n = total.round() as i64;
    Ok(if neg { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("90s"), Ok(90_000_000_000));
        assert_eq!(parse_go_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("-5m"), Ok(-300_000_000_000));
        assert_eq!(parse_go_duration("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("300ms"), Ok(300_000_000));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("5 minutes").is_err());
        assert!(parse_go_duration("h").is_err());
    }
}
