//! The Deployment controller's core, pure: (Deployment, its ReplicaSets) → ReplicaSets to
//! create, scale and delete, and the status `kubectl rollout status` reads. The new
//! ReplicaSet is the one whose `pod-template-hash` is the hash of the Deployment's template;
//! a template change rolls pods over within `maxSurge` / `maxUnavailable` (upstream's
//! defaults: 25% each, surge rounded up, unavailable down) or, with `Recreate`, all at once.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const ANNOTATION_REVISION: &str = "deployment.kubernetes.io/revision";
const DEFAULT_HISTORY_LIMIT: i32 = 10;

/// What to do with the ReplicaSets, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Create(Box<ReplicaSet>),
    Scale { name: String, replicas: i32 },
    Delete(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub status: DeploymentStatus,
}

/// The `pod-template-hash` of a template: a short stable hash of its JSON.
pub fn template_hash(t: &PodTemplateSpec) -> String {
    super::hash::short_hash(&serde_json::to_string(t).unwrap_or_default())
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn name(rs: &ReplicaSet) -> String {
    rs.metadata.name.clone().unwrap_or_default()
}

/// `maxSurge` / `maxUnavailable` as pod counts for `want` replicas (upstream's
/// `ResolveFenceposts`: surge rounds up, unavailable down; both 0 means 1 unavailable).
/// Recreate has neither.
pub fn fenceposts(d: &Deployment, want: i32) -> (i32, i32) {
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return (0, 0);
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let pct = IntOrString::String("25%".into());
    let resolve = |v: Option<&IntOrString>, up: bool| match v.unwrap_or(&pct) {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => {
            let p: i64 = s.trim_end_matches('%').parse().unwrap_or(25);
            let n = i64::from(want) * p;
            (if up { (n + 99) / 100 } else { n / 100 }) as i32
        }
    };
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), true);
    let mut unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(want.max(0)))
}

/// The ReplicaSet for the Deployment's current template.
pub fn new_replica_set(d: &Deployment, hash: &str, replicas: i32, revision: i64) -> ReplicaSet {
    let spec = d.spec.clone().unwrap_or_default();
    let mut template = spec.template.clone();
    let mut tmeta = template.metadata.take().unwrap_or_default();
    let mut labels = tmeta.labels.take().unwrap_or_default();
    labels.insert(LABEL_POD_TEMPLATE_HASH.into(), hash.into());
    tmeta.labels = Some(labels.clone());
    template.metadata = Some(tmeta);
    let mut selector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(LABEL_POD_TEMPLATE_HASH.into(), hash.into());
    let dname = d.metadata.name.clone().unwrap_or_default();
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{dname}-{hash}")),
            namespace: d.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_REVISION.to_string(),
                revision.to_string(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: dname,
                uid: d.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    }
}

/// The plan for one Deployment; `rss` are the ReplicaSets it controls (by owner uid), `now`
/// stamps changed conditions.
pub fn plan(d: &Deployment, rss: &[&ReplicaSet], now: &Time) -> Plan {
    let spec = d.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0);
    let hash = template_hash(&spec.template);
    let is_new = |rs: &&ReplicaSet| {
        rs.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_POD_TEMPLATE_HASH))
            == Some(&hash)
    };
    let new = rss.iter().copied().find(is_new);
    let mut old: Vec<&ReplicaSet> = rss.iter().copied().filter(|r| !is_new(r)).collect();
    old.sort_by_key(|r| (revision(r), r.metadata.creation_timestamp.clone()));
    let (surge, max_unavailable) = fenceposts(d, want);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let mut actions = Vec::new();
    let old_spec: i32 = old.iter().map(|r| replicas(r)).sum();
    let max_revision = rss.iter().map(|r| revision(r)).max().unwrap_or(0);

    // Desired size of the new ReplicaSet this pass (None: leave it).
    let new_replicas = new.map(replicas).unwrap_or(0);
    let mut target_new = None;
    if spec.paused != Some(true) {
        if recreate {
            for r in old.iter().filter(|r| replicas(r) > 0) {
                actions.push(Action::Scale {
                    name: name(r),
                    replicas: 0,
                });
            }
            let old_pods: i32 = old
                .iter()
                .map(|r| r.status.as_ref().map(|s| s.replicas).unwrap_or(0))
                .sum();
            target_new = Some(if old_spec == 0 && old_pods == 0 {
                want
            } else {
                0
            });
        } else if old_spec == 0 || new_replicas > want {
            target_new = Some(want);
        } else {
            // Scale the new one up within the surge; else the old ones down within the
            // unavailability budget (one step per pass, as upstream).
            let total = old_spec + new_replicas;
            let room = (want + surge - total).max(0);
            let up = room.min(want - new_replicas).max(0);
            target_new = Some(new_replicas + up);
            // A new ReplicaSet created this pass counts at its size, none of it available.
            let (new_spec, new_avail) = match new {
                Some(r) => (replicas(r), available(r)),
                None => (up, 0),
            };
            if up == 0 || new.is_none() {
                actions.extend(scale_down_old(
                    &old,
                    new_spec,
                    new_avail,
                    want,
                    max_unavailable,
                ));
            }
        }
    }
    match (new, target_new) {
        (None, Some(n)) => actions.insert(
            0,
            Action::Create(Box::new(new_replica_set(d, &hash, n, max_revision + 1))),
        ),
        (Some(r), Some(n)) if n != replicas(r) => actions.push(Action::Scale {
            name: name(r),
            replicas: n,
        }),
        _ => {}
    }
    // History: drained old ReplicaSets beyond revisionHistoryLimit, oldest first.
    let limit = spec
        .revision_history_limit
        .unwrap_or(DEFAULT_HISTORY_LIMIT)
        .max(0) as usize;
    let drained: Vec<&&ReplicaSet> = old
        .iter()
        .filter(|r| replicas(r) == 0 && r.status.as_ref().is_none_or(|s| s.replicas == 0))
        .collect();
    if drained.len() > limit {
        for r in &drained[..drained.len() - limit] {
            actions.push(Action::Delete(name(r)));
        }
    }
    Plan {
        actions,
        status: status(d, new, rss, want, max_unavailable, &hash, now),
    }
}

/// Upstream's `reconcileOldReplicaSets`: first old pods that are not available go, then
/// available ones while at least `want - maxUnavailable` stay available.
fn scale_down_old(
    old: &[&ReplicaSet],
    new_spec: i32,
    new_avail: i32,
    want: i32,
    max_unavailable: i32,
) -> Vec<Action> {
    let all: i32 = old.iter().map(|r| replicas(r)).sum::<i32>() + new_spec;
    let min_available = want - max_unavailable;
    let new_unavailable = (new_spec - new_avail).max(0);
    let mut budget = all - min_available - new_unavailable;
    let mut sizes: Vec<(String, i32, i32)> = old
        .iter()
        .map(|r| (name(r), replicas(r), available(r)))
        .collect();
    // Unhealthy old pods first.
    for (_, size, avail) in sizes.iter_mut() {
        if budget <= 0 {
            break;
        }
        let unhealthy = (*size - *avail).max(0).min(budget);
        *size -= unhealthy;
        budget -= unhealthy;
    }
    // Then available ones, keeping the minimum available.
    let avail_total: i32 = old.iter().map(|r| available(r)).sum::<i32>() + new_avail;
    let mut more = (avail_total - min_available).max(0);
    for (_, size, _) in sizes.iter_mut() {
        if more <= 0 {
            break;
        }
        let n = (*size).min(more);
        *size -= n;
        more -= n;
    }
    sizes
        .into_iter()
        .zip(old)
        .filter(|((_, size, _), r)| *size != replicas(r))
        .map(|((name, size, _), _)| Action::Scale {
            name,
            replicas: size,
        })
        .collect()
}

fn condition(
    prev: Option<&DeploymentStatus>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: &Time,
) -> DeploymentCondition {
    let status = if ok { "True" } else { "False" };
    let before = prev
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_));
    let same_status = before.is_some_and(|c| c.status == status);
    let same = before.is_some_and(|c| same_status && c.reason.as_deref() == Some(reason));
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: if same_status {
            before.and_then(|c| c.last_transition_time.clone())
        } else {
            Some(now.clone())
        },
        last_update_time: if same {
            before.and_then(|c| c.last_update_time.clone())
        } else {
            Some(now.clone())
        },
    }
}

fn status(
    d: &Deployment,
    new: Option<&ReplicaSet>,
    rss: &[&ReplicaSet],
    want: i32,
    max_unavailable: i32,
    hash: &str,
    now: &Time,
) -> DeploymentStatus {
    let st = |f: fn(&k8s_openapi::api::apps::v1::ReplicaSetStatus) -> i32| -> i32 {
        rss.iter().filter_map(|r| r.status.as_ref()).map(f).sum()
    };
    let pods = st(|s| s.replicas);
    let ready = st(|s| s.ready_replicas.unwrap_or(0));
    let avail = st(|s| s.available_replicas.unwrap_or(0));
    let spec_total: i32 = rss.iter().map(|r| replicas(r)).sum();
    let updated = new
        .and_then(|r| r.status.as_ref())
        .map(|s| s.replicas)
        .unwrap_or(0);
    let prev = d.status.as_ref();
    let dname = d.metadata.name.clone().unwrap_or_default();
    let rs_name = format!("{dname}-{hash}");
    let available = avail >= want - max_unavailable;
    let complete = updated == want && pods == want && avail == want;
    let mut conditions = vec![condition(
        prev,
        "Available",
        available,
        if available {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        format!(
            "Deployment {} minimum availability.",
            if available { "has" } else { "does not have" }
        ),
        now,
    )];
    let (reason, message) = match (new, complete) {
        (None, _) => (
            "NewReplicaSetCreated",
            format!("Created new replica set {rs_name:?}"),
        ),
        (Some(_), true) => (
            "NewReplicaSetAvailable",
            format!("ReplicaSet {rs_name:?} has successfully progressed."),
        ),
        (Some(_), false) => (
            "ReplicaSetUpdated",
            format!("ReplicaSet {rs_name:?} is progressing."),
        ),
    };
    conditions.push(condition(prev, "Progressing", true, reason, message, now));
    DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(pods),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(avail),
        unavailable_replicas: Some((spec_total - avail).max(0)),
        conditions: Some(conditions),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
