//! Operand objects: apply what differs, delete what no enabled state renders, read readiness.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;

use super::apply::{self, KindInfo, ObjectKey};
use super::operand_pods::OperandPod;
use super::{Ctx, Error};
use crate::FIELD_MANAGER;
use crate::render::{ClusterFacts, LABEL_MANAGED_BY, LABEL_STATE, MANAGED_BY, State, StateObjects};
use crate::status::{self, Readiness};

pub(crate) async fn crd_exists(ctx: &Ctx, name: &str) -> Result<bool, Error> {
    let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    api.get_opt(name)
        .await
        .map(|o| o.is_some())
        .map_err(|e| Error::api("reading", format!("CustomResourceDefinition {name}"), e))
}

fn describe(key: &ObjectKey) -> String {
    let (_, kind, ns, name) = key;
    if ns.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {ns}/{name}")
    }
}

fn api_for(ctx: &Ctx, info: &KindInfo, ns: &str) -> Api<DynamicObject> {
    if info.namespaced {
        Api::namespaced_with(ctx.client.clone(), ns, &info.resource)
    } else {
        Api::all_with(ctx.client.clone(), &info.resource)
    }
}

/// The stored copy of `key`: from the watch cache for watched kinds, else a GET.
async fn current(ctx: &Ctx, info: &KindInfo, key: &ObjectKey) -> Result<Option<Value>, Error> {
    let (_, _, ns, name) = key;
    if let Some((_, store)) = ctx
        .children
        .iter()
        .find(|(k, _)| k.resource == info.resource)
    {
        let mut r = ObjectRef::new_with(name, info.resource.clone());
        if info.namespaced {
            r = r.within(ns);
        }
        return Ok(store
            .get(&r)
            .map(|o| serde_json::to_value(o.as_ref()).unwrap_or_default()));
    }
    let got = api_for(ctx, info, ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api("reading", describe(key), e))?;
    Ok(got.map(|o| serde_json::to_value(o).unwrap_or_default()))
}

/// Apply every enabled state's objects that are not up to date, except the `held` states'
/// (left as they are); returns the keys rendered.
pub(crate) async fn apply_all(
    ctx: &Ctx,
    rendered: &[StateObjects],
    held: &[State],
) -> Result<HashSet<ObjectKey>, Error> {
    let mut desired = HashSet::new();
    for st in rendered
        .iter()
        .filter(|s| s.enabled && !held.contains(&s.state))
    {
        let state = st.state.name();
        for obj in &st.objects {
            let want = apply::stamp(obj.clone());
            let key = apply::key_of(&want).ok_or(Error::BadObject { state })?;
            let info = apply::kind_info(&key.0, &key.1).ok_or_else(|| Error::UnknownKind {
                state,
                api_version: key.0.clone(),
                kind: key.1.clone(),
                name: key.3.clone(),
            })?;
            let have = current(ctx, &info, &key).await?;
            if !have.is_some_and(|h| apply::up_to_date(&want, &h)) {
                let api = api_for(ctx, &info, &key.2);
                ctx.metrics.wrote();
                api.patch(
                    &key.3,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&want),
                )
                .await
                .map_err(|e| Error::api("applying", describe(&key), e))?;
                tracing::info!(object = %describe(&key), state, "applied");
            }
            desired.insert(key);
        }
    }
    Ok(desired)
}

fn ours(o: &DynamicObject) -> Option<&str> {
    let labels = o.metadata.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    labels.get(LABEL_STATE).map(String::as_str)
}

fn key_of_stored(info: &KindInfo, o: &DynamicObject) -> ObjectKey {
    (
        info.resource.api_version.clone(),
        info.resource.kind.clone(),
        if info.namespaced {
            o.metadata.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        },
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// Delete operator objects (by `LABEL_STATE` and managed-by) that nothing renders now; the
/// `held` states' objects stay.
pub(crate) async fn delete_stale(
    ctx: &Ctx,
    desired: &HashSet<ObjectKey>,
    facts: &ClusterFacts,
    held: &[State],
) -> Result<(), Error> {
    let held_names: Vec<&str> = held.iter().map(|s| s.name()).collect();
    let keep = |o: &DynamicObject| ours(o).is_none_or(|s| held_names.contains(&s));
    let mut stale: Vec<(KindInfo, ObjectKey)> = Vec::new();
    for (info, store) in &ctx.children {
        for o in store.state() {
            if o.metadata.deletion_timestamp.is_some() || keep(&o) {
                continue;
            }
            let key = key_of_stored(info, &o);
            if !desired.contains(&key) {
                stale.push((info.clone(), key));
            }
        }
    }
    // Unwatched kinds exist only with their CRDs; list them by label then.
    let optional = [
        ("ServiceMonitor", facts.has_service_monitor_crd),
        ("PrometheusRule", facts.has_prometheus_rule_crd),
    ];
    for (kind, present) in optional {
        let Some(info) = apply::kind_info("monitoring.coreos.com/v1", kind).filter(|_| present)
        else {
            continue;
        };
        let list = api_for(ctx, &info, &ctx.opts.namespace)
            .list(&ListParams::default().labels(LABEL_STATE))
            .await
            .map_err(|e| Error::api("listing", format!("{kind}s"), e))?;
        for o in list.items.iter().filter(|o| !keep(o)) {
            let key = key_of_stored(&info, o);
            if !desired.contains(&key) {
                stale.push((info.clone(), key));
            }
        }
    }
    for (info, key) in stale {
        ctx.metrics.wrote();
        match api_for(ctx, &info, &key.2)
            .delete(&key.3, &DeleteParams::background())
            .await
        {
            Ok(_) => tracing::info!(object = %describe(&key), "deleted (no longer rendered)"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::api("deleting", describe(&key), e)),
        }
    }
    Ok(())
}

fn is_daemonset(o: &Value) -> bool {
    o.get("kind").and_then(Value::as_str) == Some("DaemonSet")
}

type Readinesses = Vec<(crate::render::State, Readiness)>;

/// Each state's readiness, and the nodes whose operand pods crash-loop.
pub(crate) async fn readiness(
    ctx: &Ctx,
    rendered: &[StateObjects],
) -> Result<(Readinesses, BTreeMap<String, Vec<String>>), Error> {
    let ds_info = apply::kind_info("apps/v1", "DaemonSet");
    let mut out = Vec::new();
    let mut crashing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Read from the cache once per reconcile, and only when some DaemonSet needs its pods.
    let mut all_pods: Option<Vec<Arc<OperandPod>>> = None;
    for st in rendered {
        if !st.enabled {
            out.push((st.state, Readiness::Disabled));
            continue;
        }
        let mut ready = true;
        for obj in st.objects.iter().filter(|o| is_daemonset(o)) {
            let Some(key) = apply::key_of(obj) else {
                continue;
            };
            let Some(info) = ds_info.as_ref() else {
                continue;
            };
            let stored: Option<DaemonSet> = current(ctx, info, &key)
                .await?
                .and_then(|v| serde_json::from_value(v).ok());
            let Some(ds) = stored else {
                ready = false;
                continue;
            };
            let on_delete = ds
                .spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.type_.as_deref())
                == Some("OnDelete");
            // Pods are read only where the rules need them: all of them for OnDelete, else
            // the crash-looping ones of a DaemonSet not ready, to name them (during a rollout
            // on thousands of nodes, every round would otherwise copy every pod).
            let quick = status::daemonset_ready(&ds, &[], None);
            let pods = if on_delete || !quick {
                let keep = |p: &OperandPod| on_delete || p.crash_looping();
                pods_of(all_pods.get_or_insert_with(|| ctx.pods.state()), &ds, keep)
            } else {
                Vec::new()
            };
            let refs: Vec<&Pod> = pods.iter().collect();
            let ok = if on_delete {
                on_delete_counts_ok(&ds) && status::daemonset_ready(&ds, &refs, None)
            } else {
                quick
            };
            if !ok {
                ready = false;
                for p in &pods {
                    for (node, c) in status::crash_looping(p) {
                        crashing.entry(node).or_default().push(c);
                    }
                }
            }
        }
        out.push((
            st.state,
            if ready {
                Readiness::Ready
            } else {
                Readiness::NotReady
            },
        ));
    }
    Ok((out, crashing))
}

/// OnDelete: every scheduled pod runs the current template (the controller's count).
fn on_delete_counts_ok(ds: &DaemonSet) -> bool {
    ds.status.as_ref().is_some_and(|s| {
        s.desired_number_scheduled == 0
            || s.updated_number_scheduled.unwrap_or(0) >= s.desired_number_scheduled
    })
}

/// The pods a DaemonSet controls (its uid as their controller) that `keep` keeps, from the
/// operand pod cache.
fn pods_of(
    all: &[Arc<OperandPod>],
    ds: &DaemonSet,
    keep: impl Fn(&OperandPod) -> bool,
) -> Vec<Pod> {
    let Some(uid) = ds.metadata.uid.as_deref() else {
        return Vec::new();
    };
    all.iter()
        .filter(|p| p.controlled_by(uid) && keep(p))
        .map(|p| p.to_pod())
        .collect()
}
