//! Garbage collection the way kube-controller-manager does it: dependents of a deleted
//! owner are deleted (background), `orphan` owners release their dependents first,
//! `foregroundDeletion` owners wait until their blocking dependents are gone, a terminating
//! namespace is emptied before it disappears, and a deleted CRD takes its custom objects with
//! it (`customresourcecleanup.apiextensions.k8s.io`). Every object written with
//! ownerReferences is checked against its owners ([`owners::decide`]), so a dependent whose
//! owner is gone or was re-created (another uid) is collected even when it was written after
//! the owner's deletion; a periodic pass does the same for everything.

mod owners;

use crate::apiserver::meta::{CRD_CLEANUP, FOREGROUND, ORPHAN};
use crate::apiserver::server::ApiServer;
use crate::apiserver::target::{DeleteOpts, Target};
use crate::store::feed::{Feed, Gap};
use crate::store::{Event, EventType, ObjKey};
use owners::{Action, Owner};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";
/// The namespace spec finalizer the namespace controller clears.
const NAMESPACE_FINALIZER: &str = "kubernetes";
const MANAGER: &str = "gantry-garbage-collector";
/// How often every owner reference in the store is checked (events cover the rest).
const OWNER_SWEEP: Duration = Duration::from_secs(30);
/// After an owner sweep that took `d`, the next is at least `OWNER_SWEEP_PACE × d` later.
const OWNER_SWEEP_PACE: u32 = 50;

/// Runs until `stop` turns true.
pub async fn run(api: Arc<ApiServer>, mut stop: watch::Receiver<bool>) {
    let mut feed = Feed::from_now(&api.store);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let owner_sweep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(owner_sweep);
    // What is being deleted, from the events; the 1 s retries visit these, not every object
    // (at 5,000 nodes that scan was ~5 % of the API server's process). The owner sweep, due at
    // once, fills it first.
    let mut terminating = BTreeSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => retry(&api, &mut terminating),
            _ = &mut owner_sweep => {
                let started = tokio::time::Instant::now();
                sweep_owners(&api);
                terminating = sweep(&api);
                // Every object each time: at thousands of nodes a sweep takes a while, so
                // the next waits long enough to keep the sweeps to a few percent of a core.
                let next = OWNER_SWEEP.max(started.elapsed() * OWNER_SWEEP_PACE);
                owner_sweep.as_mut().reset(tokio::time::Instant::now() + next);
            }
            // Behind the live ring it goes on from the history; only events compacted
            // before it read them take a pass over everything.
            ev = feed.next() => match ev {
                Ok(ev) => on_event(&api, &ev, &mut terminating),
                Err(Gap::Missed) => {
                    terminating = sweep(&api);
                    sweep_owners(&api);
                }
                Err(Gap::Closed) => return,
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

/// The object has a `deletionTimestamp`: it goes once its finalizers are done.
fn being_deleted(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

fn owner_refs(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/ownerReferences")
}

fn owner_uids(obj: &Value) -> Vec<String> {
    owner_refs(obj)
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
        for o in api.store.list_stubs(&gr, ns) {
            if owner_uids(&o).iter().any(|u| u == uid) {
                out.push((gr.clone(), o));
            }
        }
    }
    out
}

/// Where the owner a reference names stands, looked up in the dependent's namespace (or
/// cluster-wide for a cluster-scoped kind).
fn resolve(api: &ApiServer, dependent_ns: &str, r: &owners::OwnerRef) -> Owner {
    let Some(info) = api.registry.by_kind(r.group(), &r.kind) else {
        return Owner::Unresolvable;
    };
    let ns = if info.namespaced {
        // A cluster-scoped dependent cannot have a namespaced owner.
        if dependent_ns.is_empty() {
            return Owner::Absent;
        }
        dependent_ns
    } else {
        ""
    };
    owners::classify(r, api.store.get_stub(&info.gr(), ns, &r.name).as_deref())
}

/// Check one dependent against its owners and act on the decision. `seen` may be an old
/// event's copy: the decision is taken on the object as stored now, if it is the same one.
fn attempt(api: &ApiServer, gr: &str, seen: &Value) {
    if owners::refs(seen).is_empty() {
        return;
    }
    let (ns, name, uid) = (
        meta(seen, "namespace"),
        meta(seen, "name"),
        meta(seen, "uid"),
    );
    // Owners and the decision read metadata only.
    let Some(dep) = api.store.get_stub(gr, ns, name) else {
        return;
    };
    if meta(&dep, "uid") != uid {
        return;
    }
    let states: Vec<(String, Owner)> = owners::refs(&dep)
        .iter()
        .map(|r| (r.uid.clone(), resolve(api, ns, r)))
        .collect();
    match owners::decide(&dep, &states) {
        Action::Keep => {}
        Action::Delete(propagation) => delete_as(api, gr, ns, name, propagation, Some(uid)),
        Action::DropRefs(uids) => modify(api, gr, ns, name, |o| {
            for u in &uids {
                drop_owner(o, u);
            }
        }),
    }
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
    delete_as(api, gr, ns, name, propagation, None)
}

/// A delete with `propagation`, only of the object with `uid` when given.
fn delete_as(
    api: &ApiServer,
    gr: &str,
    ns: &str,
    name: &str,
    propagation: &str,
    uid: Option<&str>,
) {
    let Some(t) = target_for(api, gr, ns) else {
        return;
    };
    let opts = DeleteOpts {
        propagation: Some(propagation.into()),
        uid: uid.map(str::to_string),
        ..Default::default()
    };
    if let Err(e) = api.delete(&t, name, &opts)
        && e.code != 404
        && e.code != 409
    {
        tracing::warn!(%gr, %ns, %name, error = %e, "garbage collector delete failed");
    }
}

fn on_event(api: &ApiServer, ev: &Event, terminating: &mut BTreeSet<ObjKey>) {
    match ev.kind {
        EventType::Deleted => {
            terminating.remove(&ev.key);
            let uid = meta(&ev.object, "uid");
            collect_dependents(api, uid, &ev.key.namespace, &ev.key.gr);
            // An owner waiting in foreground deletion may now be free to go.
            for owner in owner_uids(&ev.object) {
                recheck_owner(api, &owner);
            }
        }
        _ => {
            if being_deleted(&ev.object) {
                terminating.insert(ev.key.clone());
                finalize(api, &ev.key.gr, &ev.key.namespace, &ev.key.name);
            }
            // A dependent written after its owner went (or naming an old uid). One whose
            // references did not change was checked at its earlier version; an owner that
            // went since is handled by the owner's own deletion event.
            if ev
                .prev
                .as_deref()
                .is_none_or(|p| owner_refs(p) != owner_refs(&ev.object))
            {
                attempt(api, &ev.key.gr, &ev.object);
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
        attempt(api, &gr, &dep);
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
        for o in api.store.list_stubs(&gr, None) {
            if meta(&o, "uid") == uid && being_deleted(&o) {
                finalize(api, &gr, meta(&o, "namespace"), meta(&o, "name"));
                return;
            }
        }
    }
}

/// Progresses an object that is being deleted: orphaning, foreground, namespaces.
fn finalize(api: &ApiServer, gr: &str, ns: &str, name: &str) {
    let Some(obj) = api.store.get_stub(gr, ns, name) else {
        return;
    };
    let uid = meta(&obj, "uid").to_string();
    if owners::has_finalizer(&obj, ORPHAN) {
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
    } else if owners::has_finalizer(&obj, FOREGROUND) {
        // Every dependent goes; the owner waits only for those that block it.
        let deps = dependents(api, &uid, "");
        if !deps.iter().any(|(_, d)| blocks(d, &uid)) {
            remove_finalizer(api, gr, ns, name, FOREGROUND);
        }
        for (dgr, dep) in deps {
            attempt(api, &dgr, &dep);
        }
    }
    if gr == "/namespaces" {
        finish_namespace(api, name);
    }
    if gr == CRDS
        && owners::has_finalizer(&obj, CRD_CLEANUP)
        && let Some(crd) = api.store.get(gr, ns, name)
    {
        finish_crd(api, &crd);
    }
}

/// The dependent's reference to `uid` has `blockOwnerDeletion: true`.
fn blocks(dep: &Value, uid: &str) -> bool {
    dep.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("uid").and_then(Value::as_str) == Some(uid)
                && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
        })
}

/// Deletes a terminating CRD's custom objects (each as a client's delete would: their
/// finalizers hold them); once none is left, the CRD's cleanup finalizer goes, and with it
/// the CRD.
fn finish_crd(api: &ApiServer, crd: &Value) {
    let name = meta(crd, "name");
    if let Some(info) = crate::apiserver::resources::from_crd(crd) {
        let gr = info.gr();
        let objs = api.store.list_stubs(&gr, None);
        if objs.len() > 0 {
            for o in objs {
                if !being_deleted(&o) {
                    delete(
                        api,
                        &gr,
                        meta(&o, "namespace"),
                        meta(&o, "name"),
                        "Background",
                    );
                }
            }
            return;
        }
    }
    remove_finalizer(api, CRDS, "", name, CRD_CLEANUP);
}

/// Deletes everything in a terminating namespace; once empty, the namespace goes.
fn finish_namespace(api: &ApiServer, ns: &str) {
    let mut remaining = 0;
    for gr in api.store.resources() {
        if gr == "/namespaces" {
            continue;
        }
        for o in api.store.list_stubs(&gr, Some(ns)) {
            remaining += 1;
            if !being_deleted(&o) {
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
            Some(c) if being_deleted(c) => {
                let mut gone = (**c).clone();
                gone["spec"] = json!({});
                Ok(crate::store::Mutation::Delete(gone))
            }
            _ => Ok(crate::store::Mutation::Unchanged),
        });
}

/// Checks every dependent against its owners, and drops custom objects whose CRD is gone
/// (left by a server that did not clean up after a CRD deletion): catches up after lag or
/// restarts.
fn sweep_owners(api: &ApiServer) {
    for gr in api.store.resources() {
        let objs = api.store.list_stubs(&gr, None);
        // Asked after the list: a CRD created meanwhile serves its new objects by now.
        if !api.registry.all().iter().any(|r| r.gr() == gr) {
            purge(api, &gr, objs);
            continue;
        }
        for o in objs {
            attempt(api, &gr, &o);
        }
    }
}

/// Removes objects of a resource nobody serves any more (each only as listed: same uid).
fn purge(api: &ApiServer, gr: &str, objs: impl Iterator<Item = Arc<Value>>) {
    for o in objs {
        let uid = meta(&o, "uid");
        let key = crate::store::ObjKey {
            gr: gr.to_string(),
            namespace: meta(&o, "namespace").to_string(),
            name: meta(&o, "name").to_string(),
        };
        let r = api
            .store
            .mutate::<crate::store::StoreError>(&key, |cur, _| {
                Ok(match cur {
                    Some(c) if meta(c, "uid") == uid => {
                        crate::store::Mutation::Delete((**c).clone())
                    }
                    _ => crate::store::Mutation::Unchanged,
                })
            });
        if let Err(e) = r {
            tracing::warn!(%key, error = %e, "removing an object of a deleted CRD failed");
        }
    }
}

/// A pass over everything: progresses each object being deleted and returns their keys
/// (at start, after events were missed, and with each owner sweep).
fn sweep(api: &ApiServer) -> BTreeSet<ObjKey> {
    let mut out = BTreeSet::new();
    for gr in api.store.resources() {
        for o in api.store.list_stubs(&gr, None) {
            if being_deleted(&o) {
                let key = ObjKey {
                    gr: gr.clone(),
                    namespace: meta(&o, "namespace").to_string(),
                    name: meta(&o, "name").to_string(),
                };
                finalize(api, &key.gr, &key.namespace, &key.name);
                out.insert(key);
            }
        }
    }
    out
}

/// Every second: progresses the objects being deleted again (a namespace waiting for its
/// content, a foreground owner for its dependents); those gone or no longer terminating
/// leave the set.
fn retry(api: &ApiServer, terminating: &mut BTreeSet<ObjKey>) {
    terminating.retain(|k| {
        let still = api
            .store
            .get_stub(&k.gr, &k.namespace, &k.name)
            .is_some_and(|o| being_deleted(&o));
        if still {
            finalize(api, &k.gr, &k.namespace, &k.name);
        }
        still
    });
}
