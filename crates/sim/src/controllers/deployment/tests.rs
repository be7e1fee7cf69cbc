use super::*;
use serde_json::json;

fn deploy(replicas: i32, image: &str, strategy: serde_json::Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "d-uid", "generation": 2},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": strategy,
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": image}]}}}
    }))
    .unwrap()
}

fn now() -> Time {
    serde_json::from_value(json!("2025-01-01T00:00:00Z")).unwrap()
}

/// The ReplicaSet the plan would create, with `spec`/`ready`/`available` pods.
fn rs(d: &Deployment, revision: i64, spec: i32, pods: i32, avail: i32) -> ReplicaSet {
    let hash = template_hash(&d.spec.as_ref().unwrap().template);
    let mut r = new_replica_set(d, &hash, spec, revision);
    r.status = serde_json::from_value(json!({"replicas": pods, "readyReplicas": avail,
        "availableReplicas": avail}))
    .unwrap();
    r
}

#[test]
fn first_pass_creates_the_replica_set_at_full_size() {
    let d = deploy(3, "a", json!({}));
    let p = plan(&d, &[], &now());
    let [Action::Create(r)] = p.actions.as_slice() else {
        panic!("{:?}", p.actions)
    };
    let hash = template_hash(&d.spec.as_ref().unwrap().template);
    assert_eq!(
        r.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    let spec = r.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.selector.match_labels.as_ref().unwrap()[LABEL_POD_TEMPLATE_HASH],
        hash
    );
    let tl = spec.template.as_ref().unwrap().metadata.as_ref().unwrap();
    assert_eq!(tl.labels.as_ref().unwrap()[LABEL_POD_TEMPLATE_HASH], hash);
    assert_eq!(
        r.metadata.annotations.as_ref().unwrap()[ANNOTATION_REVISION],
        "1"
    );
    let o = &r.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((o.kind.as_str(), o.uid.as_str()), ("Deployment", "d-uid"));
    let prog = &p.status.conditions.as_ref().unwrap()[1];
    assert_eq!(prog.reason.as_deref(), Some("NewReplicaSetCreated"));
}

#[test]
fn steady_state_is_complete_and_idle() {
    let d = deploy(3, "a", json!({}));
    let r = rs(&d, 1, 3, 3, 3);
    let p = plan(&d, &[&r], &now());
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let s = &p.status;
    assert_eq!(
        (
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas
        ),
        (Some(3), Some(3), Some(3), Some(3))
    );
    assert_eq!(s.unavailable_replicas, Some(0));
    assert_eq!(s.observed_generation, Some(2));
    let c = s.conditions.as_ref().unwrap();
    assert_eq!(
        (c[0].type_.as_str(), c[0].status.as_str()),
        ("Available", "True")
    );
    assert_eq!(c[1].reason.as_deref(), Some("NewReplicaSetAvailable"));
    // Scaling is a resize of the one ReplicaSet.
    let p = plan(&deploy(5, "a", json!({})), &[&r], &now());
    assert!(
        matches!(&p.actions[..], [Action::Scale { replicas: 5, .. }]),
        "{:?}",
        p.actions
    );
}

#[test]
fn rolling_update_stays_within_surge_and_unavailability() {
    let v1 = deploy(4, "a", json!({}));
    let v2 = deploy(4, "b", json!({}));
    assert_eq!(fenceposts(&v2, 4), (1, 1));
    let old = rs(&v1, 1, 4, 4, 4);
    // Surge: one new pod beyond the four; and, as upstream in the same pass, one old pod
    // may go (3 of 4 stay available while the new one is not).
    let p = plan(&v2, &[&old], &now());
    let [Action::Create(new), Action::Scale { replicas: 3, .. }] = p.actions.as_slice() else {
        panic!("{:?}", p.actions)
    };
    assert_eq!(new.spec.as_ref().unwrap().replicas, Some(1));
    assert_eq!(
        new.metadata.annotations.as_ref().unwrap()[ANNOTATION_REVISION],
        "2"
    );
    // New one not available yet: one old pod may go (3 stay available).
    let new = rs(&v2, 2, 1, 1, 0);
    let p = plan(&v2, &[&old, &new], &now());
    assert_eq!(
        p.actions,
        [Action::Scale {
            name: old.metadata.name.clone().unwrap(),
            replicas: 3
        }]
    );
    assert_eq!(p.status.updated_replicas, Some(1));
    assert_eq!(
        p.status.conditions.as_ref().unwrap()[1].reason.as_deref(),
        Some("ReplicaSetUpdated")
    );
    // Old at 3: the new one grows to 2.
    let old3 = rs(&v1, 1, 3, 3, 3);
    let p = plan(&v2, &[&old3, &new], &now());
    assert!(
        matches!(&p.actions[..], [Action::Scale { replicas: 2, .. }]),
        "{:?}",
        p.actions
    );
    // Done: the old one at 0 and gone; the new complete.
    let old0 = rs(&v1, 1, 0, 0, 0);
    let full = rs(&v2, 2, 4, 4, 4);
    let p = plan(&v2, &[&old0, &full], &now());
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(
        p.status.conditions.as_ref().unwrap()[1].reason.as_deref(),
        Some("NewReplicaSetAvailable")
    );
}

#[test]
fn unavailable_old_pods_go_first() {
    let v1 = deploy(2, "a", json!({}));
    let v2 = deploy(
        2,
        "b",
        json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
    );
    // Old: 2 pods, none available; the new ReplicaSet exists at 0.
    let old = rs(&v1, 1, 2, 2, 0);
    let new = rs(&v2, 2, 0, 0, 0);
    let p = plan(&v2, &[&old, &new], &now());
    assert_eq!(
        p.actions,
        [Action::Scale {
            name: old.metadata.name.clone().unwrap(),
            replicas: 1
        }]
    );
    let c = p.status.conditions.as_ref().unwrap();
    assert_eq!(
        (c[0].status.as_str(), c[0].reason.as_deref()),
        ("False", Some("MinimumReplicasUnavailable"))
    );
}

#[test]
fn recreate_drains_before_creating() {
    let v1 = deploy(2, "a", json!({"type": "Recreate"}));
    let v2 = deploy(2, "b", json!({"type": "Recreate"}));
    let old = rs(&v1, 1, 2, 2, 2);
    let p = plan(&v2, &[&old], &now());
    assert!(
        matches!(&p.actions[0], Action::Create(r) if r.spec.as_ref().unwrap().replicas == Some(0))
    );
    assert!(p.actions.contains(&Action::Scale {
        name: old.metadata.name.clone().unwrap(),
        replicas: 0
    }));
    let draining = rs(&v1, 1, 0, 1, 0);
    let new = rs(&v2, 2, 0, 0, 0);
    assert!(plan(&v2, &[&draining, &new], &now()).actions.is_empty());
    let drained = rs(&v1, 1, 0, 0, 0);
    let p = plan(&v2, &[&drained, &new], &now());
    assert!(
        matches!(&p.actions[..], [Action::Scale { replicas: 2, .. }]),
        "{:?}",
        p.actions
    );
}

#[test]
fn history_beyond_the_limit_is_deleted() {
    let cur = deploy(1, "z", json!({}));
    let mut d = cur.clone();
    d.spec.as_mut().unwrap().revision_history_limit = Some(1);
    let olds: Vec<ReplicaSet> = (1..=3)
        .map(|i| rs(&deploy(1, &format!("v{i}"), json!({})), i, 0, 0, 0))
        .collect();
    let new = rs(&cur, 4, 1, 1, 1);
    let mut all: Vec<&ReplicaSet> = olds.iter().collect();
    all.push(&new);
    let p = plan(&d, &all, &now());
    assert_eq!(
        p.actions,
        [
            Action::Delete(olds[0].metadata.name.clone().unwrap()),
            Action::Delete(olds[1].metadata.name.clone().unwrap())
        ]
    );
}

#[test]
fn conditions_keep_their_times_while_unchanged() {
    let d0 = deploy(1, "a", json!({}));
    let r = rs(&d0, 1, 1, 1, 1);
    let first = plan(&d0, &[&r], &now()).status;
    let mut d = d0.clone();
    d.status = Some(first.clone());
    let later: Time = serde_json::from_value(json!("2025-01-02T00:00:00Z")).unwrap();
    assert_eq!(plan(&d, &[&r], &later).status, first);
}
