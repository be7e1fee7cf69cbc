//! Server-side apply (PATCH with `application/apply-patch+yaml`): create or merge by field
//! ownership, then the same preparation as any other write.

use super::super::meta::now;
use super::super::patch::apply as ssa;
use super::super::schema::Checks;
use super::super::server::ApiServer;
use super::super::status::ApiError;
use super::super::target::{Served, Target};
use super::rv_of;
use crate::store::Mutation;
use serde_json::{Value, json};

impl ApiServer {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn server_side_apply(
        &self,
        t: &Target,
        name: &str,
        sub: &str,
        body: &[u8],
        manager: Option<&str>,
        force: bool,
        what: &str,
        checks: &mut Checks,
    ) -> Result<(Served, bool), ApiError> {
        let Some(manager) = manager.filter(|m| !m.is_empty()) else {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        };
        let applied = super::super::decode::yaml(body, "apply").map_err(|e| {
            ApiError::bad_request(format!(
                "invalid apply configuration for {what}: {}",
                e.message
            ))
        })?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(format!(
                "the apply configuration for {what} must be an object"
            )));
        }
        if let Some(n) = applied.pointer("/metadata/name").and_then(Value::as_str)
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let lk = t.list_kinds();
        let time = now();
        let av = t.api_version();
        let writer = ssa::Writer {
            manager,
            subresource: sub,
            api_version: &av,
            time: &time,
        };
        let mut created = false;
        if self
            .store
            .get_stub(&t.info.gr(), &t.namespace, name)
            .is_none()
        {
            if sub == "status" {
                return Err(t.not_found(name));
            }
            self.ensure_namespace(t)?;
        }
        let out = self.guaranteed_write(&t.key(name), checks, |cur, checks| {
            created = cur.is_none();
            match cur {
                None => {
                    let mut obj = ssa::apply(None, &applied, &writer, force, &lk)?;
                    obj["metadata"]["name"] = json!(name);
                    let mf = obj.pointer("/metadata/managedFields").cloned();
                    let mut obj = self.prepare_create(t, obj, manager, checks)?;
                    if let Some(mf) = mf {
                        obj["metadata"]["managedFields"] = mf;
                    }
                    Ok(Mutation::Put(obj))
                }
                Some(cur) => {
                    if let Some(rv) = applied.pointer("/metadata/resourceVersion").and_then(Value::as_str)
                        && rv != rv_of(cur)
                    {
                        return Err(ApiError::conflict(&t.info.plural, &t.info.group, name, "the object has been modified; please apply your changes to the latest version and try again"));
                    }
                    let merged = ssa::apply(Some(cur), &applied, &writer, force, &lk)?;
                    let mf = merged.pointer("/metadata/managedFields").cloned();
                    let mut m = self.prepare_update(t, cur, merged, sub, None, None, checks)?;
                    if let Mutation::Put(obj) | Mutation::Delete(obj) = &mut m {
                        match mf {
                            Some(mf) => obj["metadata"]["managedFields"] = mf,
                            None => {
                                if let Some(meta) = obj["metadata"].as_object_mut() {
                                    meta.remove("managedFields");
                                }
                            }
                        }
                    }
                    Ok(m)
                }
            }
        })?;
        self.after_write(t);
        Ok((t.served(out), created))
    }
}
