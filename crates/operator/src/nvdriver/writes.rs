//! The NVIDIADriver controller's writes and lists: server-side apply of rendered objects,
//! stale-object deletion, owner labels, statuses; and the CR list other controllers share.

use std::collections::{BTreeSet, HashSet};

use gantry_api::common::EffectiveUpgradePolicy;
use gantry_api::names;
use gantry_api::nvidia_driver::{NVIDIADriver, NVIDIADriverStatus};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::{NvDriverError, NvDriverOptions, api_err, not_found, status};
use crate::reconcile::apply::{self, KindInfo, ObjectKey};
use crate::render::{self, LABEL_NVIDIA_DRIVER};

/// Field manager of the owner-label writes (merge patches: the ClusterPolicy's node labels
/// are applied under the operator's own manager, which must not drop this one).
pub const NODE_FIELD_MANAGER: &str = "gantry-operator-nvidiadriver";

/// Kinds an NVIDIADriver renders (apiVersion, kind): what stale objects are looked up in.
const KINDS: &[(&str, &str)] = &[
    ("apps/v1", "DaemonSet"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
];

/// Apply one rendered object unless the stored copy is up to date; (its key, whether written).
pub(super) async fn apply_one(
    client: &kube::Client,
    obj: Value,
) -> Result<(ObjectKey, bool), NvDriverError> {
    let want = apply::stamp(obj);
    let key =
        apply::key_of(&want).ok_or(NvDriverError::BadObject("no apiVersion, kind or name"))?;
    let info = apply::kind_info(&key.0, &key.1).ok_or(NvDriverError::BadObject(
        "a kind the operator cannot address",
    ))?;
    let api = api_for(client, &info, &key.2);
    let what = format!("{} {}/{}", key.1, key.2, key.3);
    let have = api
        .get_opt(&key.3)
        .await
        .map_err(api_err(format!("reading {what}")))?
        .map(|o| serde_json::to_value(o).unwrap_or_default());
    if have.is_some_and(|h| apply::up_to_date(&want, &h)) {
        return Ok((key, false));
    }
    api.patch(
        &key.3,
        &PatchParams::apply(crate::FIELD_MANAGER).force(),
        &Patch::Apply(&want),
    )
    .await
    .map_err(api_err(format!("applying {what}")))?;
    tracing::info!(object = %what, "applied (NVIDIADriver)");
    Ok((key, true))
}

fn api_for(client: &kube::Client, info: &KindInfo, ns: &str) -> Api<DynamicObject> {
    if info.namespaced {
        Api::namespaced_with(client.clone(), ns, &info.resource)
    } else {
        Api::all_with(client.clone(), &info.resource)
    }
}

/// Delete objects carrying [`LABEL_NVIDIA_DRIVER`] that are not in `desired`, except those of
/// the CRs in `kept` (their spec failed to render). Returns the number of deletions.
pub(super) async fn delete_stale(
    client: &kube::Client,
    opts: &NvDriverOptions,
    desired: &HashSet<ObjectKey>,
    kept: &BTreeSet<String>,
) -> Result<usize, NvDriverError> {
    let mut n = 0;
    for (api_version, kind) in KINDS {
        let Some(info) = apply::kind_info(api_version, kind) else {
            continue;
        };
        let api = api_for(client, &info, &opts.namespace);
        let list = api
            .list(&ListParams::default().labels(LABEL_NVIDIA_DRIVER))
            .await
            .map_err(api_err(format!("listing {kind}s")))?;
        for o in list.items {
            let labels = o.metadata.labels.clone().unwrap_or_default();
            let owner = labels.get(LABEL_NVIDIA_DRIVER).cloned().unwrap_or_default();
            if labels.get(render::LABEL_MANAGED_BY).map(String::as_str) != Some(render::MANAGED_BY)
                || kept.contains(&owner)
                || o.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let name = o.metadata.name.clone().unwrap_or_default();
            let ns = if info.namespaced {
                opts.namespace.clone()
            } else {
                String::new()
            };
            let key = (api_version.to_string(), kind.to_string(), ns, name.clone());
            if desired.contains(&key) {
                continue;
            }
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => tracing::info!(kind, name, "deleted (no NVIDIADriver renders it)"),
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(api_err(format!("deleting {kind} {name}"))(e)),
            }
            n += 1;
        }
    }
    Ok(n)
}

/// Set (or with `None` remove) a node's owner label.
pub(super) async fn set_owner(
    client: &kube::Client,
    node: &str,
    owner: Option<&str>,
) -> Result<usize, NvDriverError> {
    let pp = PatchParams {
        field_manager: Some(NODE_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let body = json!({ "metadata": { "labels": { names::LABEL_DRIVER_OWNER: owner } } });
    match Api::<Node>::all(client.clone())
        .patch(node, &pp, &Patch::Merge(&body))
        .await
    {
        Ok(_) => {
            tracing::info!(node, owner, "NVIDIADriver owner label");
            Ok(1)
        }
        Err(e) if not_found(&e) => Ok(0),
        Err(e) => Err(api_err(format!("labelling Node {node}"))(e)),
    }
}

/// Write the CR's status unless it already says the same; 1 when written.
pub(super) async fn write_status(
    api: &Api<NVIDIADriver>,
    name: &str,
    old: Option<&NVIDIADriverStatus>,
    new: NVIDIADriverStatus,
) -> Result<usize, NvDriverError> {
    if old.is_some_and(|s| status::same(s, &new)) {
        return Ok(0);
    }
    let pp = PatchParams {
        field_manager: Some(crate::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api
        .patch_status(name, &pp, &Patch::Merge(&json!({ "status": new })))
        .await
    {
        Ok(_) => Ok(1),
        Err(e) if not_found(&e) => Ok(0),
        Err(e) => Err(api_err(format!("writing status of NVIDIADriver {name}"))(e)),
    }
}

/// Every NVIDIADriver not being deleted: those that parse, and those that do not with why.
pub async fn list_crs(
    client: &kube::Client,
) -> Result<(Vec<NVIDIADriver>, Vec<(DynamicObject, String)>), kube::Error> {
    let ar = ApiResource::erase::<NVIDIADriver>(&());
    let list = Api::<DynamicObject>::all_with(client.clone(), &ar)
        .list(&ListParams::default())
        .await?;
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for o in list.items {
        if o.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let parsed = serde_json::to_value(&o).and_then(serde_json::from_value::<NVIDIADriver>);
        match parsed {
            Ok(c) => ok.push(c),
            Err(e) => bad.push((o, e.to_string())),
        }
    }
    Ok((ok, bad))
}

/// Each NVIDIADriver's owner-label value and its upgrade policy, with NVIDIADriver defaults:
/// `autoUpgrade` is on unless the CR turns it off (an absent `upgradePolicy` too). A CR that
/// cannot be read walks no pool (its status says why).
pub async fn upgrade_policies(
    client: &kube::Client,
) -> Result<Vec<(String, EffectiveUpgradePolicy)>, kube::Error> {
    let (crs, _) = list_crs(client).await?;
    Ok(crs
        .iter()
        .map(|c| {
            let name = c.metadata.name.as_deref().unwrap_or_default();
            let up = c
                .spec
                .upgrade_policy
                .clone()
                .unwrap_or_default()
                .effective(true);
            (render::owner_value(name), up)
        })
        .collect())
}
