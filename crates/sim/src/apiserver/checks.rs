//! The checks every object passes before it is stored, in upstream's order: decode and
//! validate built-in types, prune/default/validate custom resources against their CRD's
//! structural schema (unknown fields per `fieldValidation`), then etcd's size limit.

use super::schema::{self, Checks, CrdSchema, FieldValidation};
use super::server::ApiServer;
use super::status::ApiError;
use super::target::Target;
use super::validate;
use serde_json::Value;

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

impl ApiServer {
    /// The `openAPIV3Schema` of `t`'s CRD in the requested version, if it declares one.
    /// Reads the store: call it before `Store::mutate`, never inside (the lock is not
    /// re-entrant).
    pub(crate) fn crd_schema(&self, t: &Target) -> Option<CrdSchema> {
        if t.info.builtin {
            return None;
        }
        CrdSchema::of(
            self.store.get(CRDS, "", t.info.crd.as_deref()?)?,
            &t.version,
        )
    }

    /// Validates (and, for custom resources, prunes and defaults) `obj` in place; `before` is
    /// the stored object an update replaces, with the top-level fields known to be unchanged.
    pub(crate) fn check_object(
        &self,
        t: &Target,
        obj: &mut Value,
        before: Option<(&Value, validate::Settled<'_>)>,
        checks: &mut Checks,
    ) -> Result<(), ApiError> {
        let info = &t.info;
        let mut reported = false;
        validate::builtin(info, &t.version, obj, before, |unknown, obj| {
            let list: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            reported = true;
            unknown_fields(t, &list, checks)?;
            // As upstream's typed decode, which has nowhere to keep them.
            unknown.iter().for_each(|f| f.prune(obj));
            Ok(())
        })?;
        if !info.builtin
            && let Some(schema) = &checks.schema
        {
            let walk = schema::apply(schema.value(), obj);
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            reported = true;
            unknown_fields(t, &walk.unknown, checks)?;
            if !walk.errors.is_empty() {
                return Err(ApiError::invalid_fields(
                    &validate::qualified_kind(info),
                    name,
                    &walk.errors,
                ));
            }
        }
        if !reported {
            unknown_fields(t, &[], checks)?;
        }
        // The object's size is checked where it is encoded for storage (the store's
        // `TooLarge`), as etcd refuses it.
        Ok(())
    }
}

/// Unknown fields per `fieldValidation`: `Strict` refuses the object (400, upstream's strict
/// decoding error), `Warn` sends a `Warning` per field, `Ignore` drops them silently.
/// Keys the body repeats are reported the same way, after the unknown fields (the last value
/// of a repeated key is the one kept, as upstream).
fn unknown_fields(t: &Target, unknown: &[String], checks: &mut Checks) -> Result<(), ApiError> {
    let duplicates = std::mem::take(&mut checks.duplicates);
    if unknown.is_empty() && duplicates.is_empty() {
        return Ok(());
    }
    let list = unknown
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .chain(duplicates.iter().map(|f| format!("duplicate field {f:?}")));
    match checks.mode {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{kind} in version {v:?} cannot be handled as a {kind}: strict decoding error: {}",
            list.collect::<Vec<_>>().join(", "),
            kind = t.info.kind,
            v = t.version,
        ))),
        FieldValidation::Warn => {
            checks.warnings.extend(list);
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}
