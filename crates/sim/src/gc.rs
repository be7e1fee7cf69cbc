//! Garbage collection the way kube-controller-manager does it: dependents of a deleted
//! owner are deleted (background), `orphan` owners release their dependents first,
//! `foregroundDeletion` owners wait until their dependents are gone, and a terminating
//! namespace is emptied before it disappears.

use crate::apiserver::ApiServer;
use crate::apiserver::objects::{DeleteOpts, Target};
use crate::store::{Event, EventType};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// Finalizer of an owner deleted with `propagationPolicy: Foreground`.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer of an owner deleted with `propagationPolicy: Orphan`.
pub const ORPHAN: &str = "orphan";
/// The namespace spec finalizer the namespace controller clears.
const NAMESPACE_FINALIZER: &str = "kubernetes";
const MANAGER: &str = "gantry-garbage-collector";

/// Runs until `stop` turns true.
pub async fn run(api: Arc<ApiServer>, mut stop: watch::Receiver<bool>) {
    let (mut rx, _) = api.store.subscribe();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => sweep(&api),
            ev = rx.recv() => match ev {
                Ok(ev) => on_event(&api, &ev),
                Err(broadcast::error::RecvError::Lagged(_)) => sweep(&api),
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

fn target_for(api: &ApiServer, gr: &str, namespace: &str) -> Option<Target> {
    let info = api.registry.all().into_iter().find(|r| r.gr() == gr)?;
    let version = info.versions.first()?.clone();
    Some(Target {
        info,
        version,
        namespace: namespace.to_string(),
    })
}

fn meta<'v>(obj: &'v Value, f: &str) -> &'v str {
    obj.get("metadata")
        .and_then(|m| m.get(f))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|x| x == f))
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Every object (gr, object) whose ownerReferences name `uid`.
fn dependents(api: &ApiServer, uid: &str, namespace: &str) -> Vec<(String, Arc<Value>)> {
    let mut out = Vec::new();
    for gr in api.store.resources() {
        let ns = (!namespace.is_empty()).then_some(namespace);
        for o in api.store.list(&gr, ns, None).0 {
            if owner_uids(&o).iter().any(|u| u == uid) {
                out.push((gr.clone(), o));
            }
        }
    }
    out
}

fn uid_exists(api: &ApiServer, uid: &str) -> bool {
    api.store.resources().iter().any(|gr| {
        api.store
            .list(gr, None, None)
            .0
            .iter()
            .any(|o| meta(o, "uid") == uid)
    })
}

/// Rewrites an object with `f`, retrying on conflicts.
fn modify(api: &ApiServer, gr: &str, ns: &str, name: &str, f: impl Fn(&mut Value)) {
    let Some(t) = target_for(api, gr, ns) else {
        return;
    };
    for _ in 0..5 {
        let Some(cur) = api.store.get(gr, ns, name) else {
            return;
        };
        let mut obj = (*cur).clone();
        f(&mut obj);
        let sub = "";
        let res = if t.info.has_status() && obj.get("status") != cur.get("status") {
            api.update(&t, name, "status", obj.clone(), MANAGER)
                .and_then(|_| api.update(&t, name, sub, obj, MANAGER))
        } else {
            api.update(&t, name, sub, obj, MANAGER)
        };
        match res {
            Err(e) if e.code == 409 => continue,
            Err(e) if e.code != 404 => {
                tracing::warn!(%gr, %ns, %name, error = %e, "garbage collector update failed")
            }
            _ => {}
        }
        return;
    }
}

fn remove_finalizer(api: &ApiServer, gr: &str, ns: &str, name: &str, fin: &str) {
    modify(api, gr, ns, name, |o| {
        if let Some(list) = o
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|x| x != fin);
        }
    });
}

fn delete(api: &ApiServer, gr: &str, ns: &str, name: &str, propagation: &str) {
    let Some(t) = target_for(api, gr, ns) else {
        return;
    };
    let opts = DeleteOpts {
        propagation: Some(propagation.into()),
        ..Default::default()
    };
    if let Err(e) = api.delete(&t, name, &opts)
        && e.code != 404
    {
        tracing::warn!(%gr, %ns, %name, error = %e, "garbage collector delete failed");
    }
}

fn on_event(api: &ApiServer, ev: &Event) {
    match ev.kind {
        EventType::Deleted => {
            let uid = meta(&ev.object, "uid");
            collect_dependents(api, uid, &ev.key.namespace, &ev.key.gr);
            // An owner waiting in foreground deletion may now be free to go.
            for owner in owner_uids(&ev.object) {
                recheck_owner(api, &owner);
            }
        }
        _ => {
            if ev.object.pointer("/metadata/deletionTimestamp").is_some() {
                finalize(api, &ev.key.gr, &ev.key.namespace, &ev.key.name);
            }
        }
    }
}

/// Deletes (or releases, when other owners remain) the dependents of a deleted owner.
fn collect_dependents(api: &ApiServer, uid: &str, owner_ns: &str, owner_gr: &str) {
    if uid.is_empty() {
        return;
    }
    // Dependents of a cluster-scoped owner may live in any namespace.
    let scoped = target_for(api, owner_gr, owner_ns).is_some_and(|t| t.info.namespaced);
    for (gr, dep) in dependents(api, uid, if scoped { owner_ns } else { "" }) {
        let (ns, name) = (
            meta(&dep, "namespace").to_string(),
            meta(&dep, "name").to_string(),
        );
        let others: Vec<String> = owner_uids(&dep).into_iter().filter(|u| u != uid).collect();
        if others.iter().any(|u| uid_exists(api, u)) {
            modify(api, &gr, &ns, &name, |o| drop_owner(o, uid));
        } else {
            delete(api, &gr, &ns, &name, "Background");
        }
    }
}

fn drop_owner(o: &mut Value, uid: &str) {
    if let Some(refs) = o
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
    }
}

fn recheck_owner(api: &ApiServer, uid: &str) {
    for gr in api.store.resources() {
        for o in api.store.list(&gr, None, None).0 {
            if meta(&o, "uid") == uid && o.pointer("/metadata/deletionTimestamp").is_some() {
                finalize(api, &gr, meta(&o, "namespace"), meta(&o, "name"));
                return;
            }
        }
    }
}

/// Progresses an object that is being deleted: orphaning, foreground, namespaces.
fn finalize(api: &ApiServer, gr: &str, ns: &str, name: &str) {
    let Some(obj) = api.store.get(gr, ns, name) else {
        return;
    };
    let uid = meta(&obj, "uid").to_string();
    if has_finalizer(&obj, ORPHAN) {
        for (dgr, dep) in dependents(api, &uid, "") {
            modify(
                api,
                &dgr,
                meta(&dep, "namespace"),
                meta(&dep, "name"),
                |o| drop_owner(o, &uid),
            );
        }
        remove_finalizer(api, gr, ns, name, ORPHAN);
    } else if has_finalizer(&obj, FOREGROUND) {
        let deps = dependents(api, &uid, "");
        if deps.is_empty() {
            remove_finalizer(api, gr, ns, name, FOREGROUND);
        }
        for (dgr, dep) in deps {
            if dep.pointer("/metadata/deletionTimestamp").is_none() {
                delete(
                    api,
                    &dgr,
                    meta(&dep, "namespace"),
                    meta(&dep, "name"),
                    "Foreground",
                );
            }
        }
    }
    if gr == "/namespaces" {
        finish_namespace(api, name);
    }
}

/// Deletes everything in a terminating namespace; once empty, the namespace goes.
fn finish_namespace(api: &ApiServer, ns: &str) {
    let mut remaining = 0;
    for gr in api.store.resources() {
        if gr == "/namespaces" {
            continue;
        }
        for o in api.store.list(&gr, Some(ns), None).0 {
            remaining += 1;
            if o.pointer("/metadata/deletionTimestamp").is_none() {
                delete(api, &gr, ns, meta(&o, "name"), "Background");
            }
        }
    }
    if remaining > 0 {
        return;
    }
    let Some(t) = target_for(api, "/namespaces", "") else {
        return;
    };
    let Some(cur) = api.store.get("/namespaces", "", ns) else {
        return;
    };
    let mut obj = (*cur).clone();
    if let Some(list) = obj
        .pointer_mut("/spec/finalizers")
        .and_then(Value::as_array_mut)
    {
        list.retain(|f| f != NAMESPACE_FINALIZER);
    }
    let has_meta_finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    if has_meta_finalizers {
        let _ = api.update(&t, ns, "", obj, MANAGER);
        return;
    }
    let key = t.key(ns);
    let _ = api
        .store
        .mutate::<crate::store::StoreError>(&key, |cur, _| match cur {
            Some(c) if c.pointer("/metadata/deletionTimestamp").is_some() => {
                let mut gone = (**c).clone();
                gone["spec"] = json!({});
                Ok(crate::store::Mutation::Delete(gone))
            }
            _ => Ok(crate::store::Mutation::Unchanged),
        });
}

/// Periodic pass over everything being deleted (catches up after lag or restarts).
fn sweep(api: &ApiServer) {
    for gr in api.store.resources() {
        for o in api.store.list(&gr, None, None).0 {
            if o.pointer("/metadata/deletionTimestamp").is_some() {
                finalize(api, &gr, meta(&o, "namespace"), meta(&o, "name"));
            }
        }
    }
}
