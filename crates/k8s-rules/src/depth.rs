//! The nesting limit for request bodies and manifests, shared by the API server and
//! `gantry validate` so both refuse the same documents. The check is a linear scan that runs
//! before any parser: a YAML parser given 100,000 nested `[` spends minutes before failing.

/// Deepest nesting of objects and arrays accepted (serde_json's own recursion limit).
pub const MAX_DEPTH: usize = 128;

/// The deepest nesting of `{`/`[` outside strings, stopping at `limit + 1`. Linear; quotes
/// are JSON's (and YAML's double quotes); YAML single-quoted scalars are skipped too.
pub fn nesting_depth(body: &[u8], limit: usize, yaml: bool) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                i += 1;
                while i < body.len() && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if yaml => {
                i += 1;
                while i < body.len() && body[i] != b'\'' {
                    i += 1;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
                if max > limit {
                    return max;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

/// Whether `body` nests deeper than [`MAX_DEPTH`].
pub fn too_deep(body: &[u8], yaml: bool) -> bool {
    nesting_depth(body, MAX_DEPTH, yaml) > MAX_DEPTH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_is_counted_outside_strings() {
        assert_eq!(
            nesting_depth(br#"{"a":{"b":[1,{"c":"{{{["}]}}"#, 100, false),
            4
        );
        assert_eq!(nesting_depth(br#"{"a":"\"{{"}"#, 100, false), 1);
        assert_eq!(nesting_depth(b"a: '{{{'\nb: [1]", 100, true), 1);
        let deep = "{\"a\":".repeat(100_000);
        assert_eq!(nesting_depth(deep.as_bytes(), 128, false), 129);
        assert!(too_deep(deep.as_bytes(), true));
        assert!(!too_deep(b"{a: [1, {b: 2}]}", true));
    }
}
