//! `continue` tokens of paged lists: the last key of the previous page and the list's
//! resourceVersion.

use super::status::ApiError;
use base64::Engine;
use serde_json::{Map, Value, json};

pub(crate) fn encode_continue(key: &(String, String), rv: u64) -> String {
    let raw = json!({"ns": key.0, "name": key.1, "rv": rv}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// The last key of the previous page and the list's resourceVersion (absent in old tokens).
pub(crate) fn decode_continue(tok: &str) -> Result<((String, String), Option<u64>), ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {tok:?}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok)
        .map_err(|_| bad())?;
    let v: Map<String, Value> = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let s = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(bad)
    };
    Ok(((s("ns")?, s("name")?), v.get("rv").and_then(Value::as_u64)))
}
