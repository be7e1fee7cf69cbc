//! API errors rendered as `meta.k8s.io/v1 Status` objects, the way clients expect them.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// One field's problem, as apimachinery's `field.Error`: the Status cause `reason`, the
/// field path (`spec.containers[0].name`) and the detail (`Required value`, `Invalid value: ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".into(),
        }
    }
    pub fn invalid(field: impl Into<String>, value: &Value, why: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {why}", show(value)),
        }
    }
    pub fn not_supported(field: impl Into<String>, value: &Value, allowed: &[Value]) -> Self {
        let allowed: Vec<String> = allowed.iter().map(show).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                show(value),
                allowed.join(", ")
            ),
        }
    }
    pub fn type_invalid(field: impl Into<String>, value: &Value, why: &str) -> Self {
        Self {
            reason: "FieldValueTypeInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {why}", show(value)),
        }
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: format!("Too long: must have at most {max} bytes"),
        }
    }
    pub fn forbidden(field: impl Into<String>, why: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {why}"),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A value as Go's `%#v`-ish rendering in field errors: strings quoted, the rest as JSON.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// An error answered to a client: HTTP code, `reason` and a message naming the object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, group, kind, causes).
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        let what = qualified(resource, group);
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": group, "kind": resource}))
    }
    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        let what = qualified(resource, group);
        Self::new(
            409,
            "AlreadyExists",
            format!("{what} \"{name}\" already exists"),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }
    pub fn conflict(resource: &str, group: &str, name: &str, why: &str) -> Self {
        let what = qualified(resource, group);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": resource}))
    }
    pub fn invalid(kind: &str, name: &str, field: &str, why: &str) -> Self {
        Self::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {field}: {why}")).with_details(
            json!({"name": name, "kind": kind, "causes": [{"reason": "FieldValueInvalid", "message": why, "field": field}]}),
        )
    }
    /// 422 Invalid with every field error as a cause; the message lists them as upstream.
    pub fn invalid_fields(kind: &str, name: &str, errs: &[FieldError]) -> Self {
        let list = match errs {
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let causes: Vec<Value> = errs
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {list}"),
        )
        .with_details(json!({"name": name, "kind": kind, "causes": causes}))
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {ct:?})"
            ),
        )
    }
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The Status object body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

/// A JSON response with the content type kubectl requires.
pub fn json_response<T: serde::Serialize + ?Sized>(code: StatusCode, body: &T) -> Response {
    json_body(code, serde_json::to_vec(body).unwrap_or_default().into())
}

/// [`json_response`] of a body already encoded.
pub fn json_body(code: StatusCode, body: bytes::Bytes) -> Response {
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// A `Status` of success, as answered by some deletes.
pub fn success_status(details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::TooLarge { .. } => {
                ApiError::new(413, "RequestEntityTooLarge", e.to_string())
            }
            e => ApiError::internal(format!("storage failed: {e}")),
        }
    }
}
