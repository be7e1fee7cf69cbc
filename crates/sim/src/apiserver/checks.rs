//! The checks every object passes before it is stored, in upstream's order: decode and
//! validate built-in types, prune/default/validate custom resources against their CRD's
//! structural schema (unknown fields per `fieldValidation`), then etcd's size limit.

use super::objects::Target;
use super::schema::{self, Checks, FieldValidation};
use super::status::ApiError;
use super::{ApiServer, decode, validate};
use serde_json::Value;

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

impl ApiServer {
    /// The `openAPIV3Schema` of `t`'s CRD in the requested version, if it declares one.
    /// Reads the store: call it before `Store::mutate`, never inside (the lock is not
    /// re-entrant).
    pub(crate) fn crd_schema(&self, t: &Target) -> Option<Value> {
        if t.info.builtin {
            return None;
        }
        let crd = self.store.get(CRDS, "", t.info.crd.as_deref()?)?;
        crd.pointer("/spec/versions")?
            .as_array()?
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(t.version.as_str()))?
            .pointer("/schema/openAPIV3Schema")
            .cloned()
    }

    /// Validates (and, for custom resources, prunes and defaults) `obj` in place.
    pub(crate) fn check_object(
        &self,
        t: &Target,
        obj: &mut Value,
        checks: &mut Checks,
    ) -> Result<(), ApiError> {
        let info = &t.info;
        validate::builtin(info, &t.version, obj)?;
        if !info.builtin
            && let Some(schema) = &checks.schema
        {
            let walk = schema::apply(schema, obj);
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !walk.unknown.is_empty() {
                let list: Vec<String> = walk
                    .unknown
                    .iter()
                    .map(|f| format!("unknown field {f:?}"))
                    .collect();
                match checks.mode {
                    FieldValidation::Strict => {
                        return Err(ApiError::bad_request(format!(
                            "{kind} in version {v:?} cannot be handled as a {kind}: strict decoding error: {}",
                            list.join(", "),
                            kind = info.kind,
                            v = t.version,
                        )));
                    }
                    FieldValidation::Warn => checks.warnings.extend(list),
                    FieldValidation::Ignore => {}
                }
            }
            if !walk.errors.is_empty() {
                return Err(ApiError::invalid_fields(
                    &validate::qualified_kind(info),
                    name,
                    &walk.errors,
                ));
            }
        }
        decode::check_object_size(obj)
    }
}
