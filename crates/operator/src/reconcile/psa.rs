//! `psa.enabled`: as upstream's operator does, label the operator's namespace for Pod Security
//! Admission at the `privileged` level (enforce, audit, warn), since the operand DaemonSets are
//! privileged. Labels are only added: turning `psa.enabled` off leaves them, as upstream does.

use std::collections::BTreeMap;

use gantry_api::cluster_policy::ClusterPolicySpec;
use gantry_api::names::PSA_LABELS;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};

use super::{Ctx, Error};
use crate::FIELD_MANAGER;

/// The labels `psa.enabled` asks for, or none.
pub(crate) fn labels(spec: &ClusterPolicySpec) -> BTreeMap<&'static str, &'static str> {
    let on = spec.psa.as_ref().and_then(|p| p.enabled).unwrap_or(false);
    if on {
        PSA_LABELS.iter().map(|l| (*l, "privileged")).collect()
    } else {
        BTreeMap::new()
    }
}

/// Apply [`labels`] to the namespace when any is missing (one read, a patch only on change).
pub(crate) async fn ensure(ctx: &Ctx, spec: &ClusterPolicySpec) -> Result<(), Error> {
    let want = labels(spec);
    if want.is_empty() {
        return Ok(());
    }
    let ns = ctx.opts.namespace.as_str();
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let what = || format!("Namespace {ns}");
    let have = api
        .get(ns)
        .await
        .map_err(|e| Error::api("reading", what(), e))?
        .metadata
        .labels
        .unwrap_or_default();
    if want
        .iter()
        .all(|(k, v)| have.get(*k).map(String::as_str) == Some(*v))
    {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"labels": want}});
    api.patch(
        ns,
        &PatchParams::apply(FIELD_MANAGER),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| Error::api("labelling", what(), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileged_only_when_enabled() {
        let spec = |enabled: Option<bool>| ClusterPolicySpec {
            psa: Some(gantry_api::common::EnabledOnly {
                enabled,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(labels(&ClusterPolicySpec::default()).is_empty());
        assert!(labels(&spec(None)).is_empty());
        assert!(labels(&spec(Some(false))).is_empty());
        let on = labels(&spec(Some(true)));
        assert_eq!(on.len(), 3);
        assert_eq!(on["pod-security.kubernetes.io/enforce"], "privileged");
    }
}
