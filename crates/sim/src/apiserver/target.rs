//! The arguments of every verb: which resource, version and namespace it acts on
//! ([`Target`]), and the options of a list or a delete.

use super::patch::{self, strategic::ListKind};
use super::resources::ResourceInfo;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use crate::store::{ObjKey, Stored};
use serde_json::{Value, json};
use std::sync::Arc;

/// Which resource, in which version and namespace ("" for cluster scope) a verb acts on.
#[derive(Clone)]
pub struct Target {
    pub info: Arc<ResourceInfo>,
    pub version: String,
    pub namespace: String,
}

impl Target {
    pub fn key(&self, name: &str) -> ObjKey {
        ObjKey {
            gr: self.info.gr(),
            namespace: self.namespace.clone(),
            name: name.to_string(),
        }
    }
    pub(super) fn api_version(&self) -> String {
        self.info.api_version(&self.version)
    }
    pub(super) fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.info.plural, &self.info.group, name)
    }
    /// What a write answers with the object it stored.
    pub fn served(&self, stored: Option<Stored>) -> Served {
        Served {
            stored,
            api_version: self.served_version(),
        }
    }

    /// The object as served in the requested version.
    pub fn present(&self, obj: &Value) -> Value {
        served_as(obj, self.served_version().as_deref())
    }

    /// The version a custom resource is served in (the store keeps the one it was written
    /// in); None for a built-in kind, served as stored.
    fn served_version(&self) -> Option<String> {
        (!self.info.builtin).then(|| self.api_version())
    }
    pub(super) fn list_kinds(
        &self,
    ) -> impl Fn(&[String], &str, Option<&Value>) -> ListKind<'static> + '_ {
        let builtin = self.info.builtin;
        move |path: &[String], field: &str, sample: Option<&Value>| {
            if builtin || path.first().map(String::as_str) == Some("f:metadata") {
                patch::strategic::list_kind(field, sample)
            } else {
                ListKind::Atomic
            }
        }
    }
}

/// A write's answer: the object it stored, served in the requested version.
pub struct Served {
    stored: Option<Stored>,
    /// See [`Target::served_version`].
    api_version: Option<String>,
}

impl Served {
    /// The object, decoded.
    pub fn value(&self) -> Value {
        let obj = self.stored.as_ref().map_or(&Value::Null, |s| &*s.object);
        served_as(obj, self.api_version.as_deref())
    }

    /// The object as a JSON body: the stored JSON itself where it is served as stored.
    pub fn body(&self) -> bytes::Bytes {
        match &self.stored {
            Some(s) if self.api_version.is_none() => bytes::Bytes::from_owner(s.json.clone()),
            _ => serde_json::to_vec(&self.value()).unwrap_or_default().into(),
        }
    }
}

/// `obj` as served in `api_version` (None: as stored).
fn served_as(obj: &Value, api_version: Option<&str>) -> Value {
    let mut out = obj.clone();
    if let Some(v) = api_version {
        out["apiVersion"] = json!(v);
    }
    out
}

/// Options of a delete (query parameters or a DeleteOptions body).
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    pub propagation: Option<String>,
    pub grace_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOpts {
    pub fn from_body(body: &Value) -> Self {
        Self {
            propagation: body
                .get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string),
            grace_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
            uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

/// Options of a list.
#[derive(Debug, Default, Clone)]
pub struct ListOpts {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}
