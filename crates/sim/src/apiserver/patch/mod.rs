//! The four patch types.

pub mod apply;
pub mod strategic;
pub mod track;

use super::status::ApiError;
use serde::de::IgnoredAny;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// The top-level fields a merge or strategic patch sets or removes: every other field of
/// the patched object is the current object's, unchanged. `None` where that is not known
/// from the keys alone (a JSON patch, a directive such as `$patch`, a body not an object).
pub fn top_level_fields(kind: PatchType, body: &[u8]) -> Option<Vec<String>> {
    if !matches!(kind, PatchType::Merge | PatchType::Strategic) {
        return None;
    }
    // The keys only: the values are skipped, not decoded (the patch itself decodes them).
    let keys: BTreeMap<String, IgnoredAny> = serde_json::from_slice(body).ok()?;
    keys.into_keys()
        .map(|k| (!k.starts_with('$')).then_some(k))
        .collect()
}

/// Applies a JSON (RFC 6902) or merge (RFC 7386) or strategic patch to `current`.
/// Server-side apply is handled by the caller (it needs ownership data).
pub fn apply_simple(
    kind: PatchType,
    current: &Value,
    body: &[u8],
    what: &str,
) -> Result<Value, ApiError> {
    match kind {
        PatchType::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("invalid JSON patch for {what}: {e}"))
            })?;
            let mut out = current.clone();
            json_patch::patch(&mut out, &patch).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch for {what} cannot be applied: {e}"),
                )
            })?;
            Ok(out)
        }
        PatchType::Merge => {
            let patch: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("invalid merge patch for {what}: {e}"))
            })?;
            let mut out = current.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Strategic => {
            let patch: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("invalid strategic merge patch for {what}: {e}"))
            })?;
            strategic::apply(current, &patch)
        }
        PatchType::Apply => Err(ApiError::internal(
            "server-side apply is not a simple patch",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_names_its_top_level_fields_unless_it_has_a_directive_there() {
        let keys = |kind, body: &str| top_level_fields(kind, body.as_bytes());
        let named = Some(vec!["metadata".to_string(), "status".to_string()]);
        let body = r#"{"metadata": {"labels": {"a": null}}, "status": {"phase": "Running"}}"#;
        assert_eq!(keys(PatchType::Merge, body), named);
        assert_eq!(keys(PatchType::Strategic, body), named);
        let directive = r#"{"$setElementOrder/conditions": [], "status": {}}"#;
        assert_eq!(keys(PatchType::Strategic, directive), None);
        assert_eq!(
            keys(
                PatchType::Json,
                r#"[{"op": "add", "path": "/spec/x", "value": 1}]"#
            ),
            None
        );
        assert_eq!(keys(PatchType::Merge, "[1]"), None);
        assert_eq!(keys(PatchType::Merge, "not json"), None);
    }
}
