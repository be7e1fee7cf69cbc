//! The four patch types.

pub mod apply;
pub mod strategic;
pub mod track;

use super::status::ApiError;
use serde_json::Value;

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
