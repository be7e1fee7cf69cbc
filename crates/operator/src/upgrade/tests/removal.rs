//! The pod-removal and restart steps: GPU pod deletion, drain, driver pod restart, validation.

use super::*;

// ---- pod deletion / drain ----------------------------------------------------------------

#[test]
fn pod_deletion_evicts_running_gpu_pods_only() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut ds = pod("a", "ds");
    ds.daemonset = true;
    let mut done = pod("a", "done");
    done.phase = "Succeeded".into();
    let mut cpu = pod("a", "cpu");
    cpu.uses_gpu = false;
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![pod("a", "g1"), ds, done, cpu, pod("b", "elsewhere")],
    );
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", key, Some(&NOW.to_string())),
            Action::Evict {
                node: "a".into(),
                pod: pod("a", "g1").key
            }
        ]
    );
}

#[test]
fn pod_deletion_done_when_no_gpu_pods_left() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut n = node("a", PodDeletionRequired);
    n.annotations.insert(key.into(), NOW.to_string());
    let mut going = pod("a", "g");
    going.terminating = true;
    // A terminating pod still blocks, but is not evicted again.
    let v = one(n.clone(), driver("a", false, true), vec![going]);
    assert_eq!(run(&v, &policy()), vec![]);
    let v = one(n, driver("a", false, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", key, None), to("a", PodRestartRequired)]
    );
}

#[test]
fn pod_deletion_failure_goes_to_drain_or_failed() {
    let mut bare = pod("a", "bare");
    bare.controlled = false;
    let mut p = policy();
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![bare.clone()],
    );
    let a = run(&v, &p);
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
    p.drain_enable = true;
    assert_eq!(states(&run(&v, &p)), vec![("a".into(), DrainRequired)]);
    // force allows unmanaged pods; emptyDir needs deleteEmptyDir.
    p.pod_deletion_force = true;
    assert!(states(&run(&v, &p)).is_empty());
    let mut scratch = pod("a", "scratch");
    scratch.empty_dir = true;
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![scratch],
    );
    assert_eq!(states(&run(&v, &p)), vec![("a".into(), DrainRequired)]);
    p.pod_deletion_delete_empty_dir = true;
    assert!(states(&run(&v, &p)).is_empty());
}

#[test]
fn a_pod_without_controller_names_the_policy_field_to_set() {
    let mut bare = pod("a", "bare");
    bare.controlled = false;
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![bare],
    );
    let why: Vec<String> = run(&v, &policy())
        .into_iter()
        .filter_map(|a| match a {
            Action::Event { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert!(
        why.iter()
            .any(|m| m.contains("default/bare has no controller")
                && m.contains(
                    "ClusterPolicy cluster-policy spec.driver.upgradePolicy.podDeletion.force: true"
                )),
        "{why:?}"
    );
}

fn reservation(node: &str, name: &str, group: &str) -> PodView {
    let mut r = pod(node, name);
    r.key.namespace = "gantry-reservation".into();
    r.controlled = false;
    r.reservation = Some(group.into());
    r
}

fn tenant(node: &str, name: &str, group: &str) -> PodView {
    let mut t = pod(node, name);
    t.gpu_groups = vec![group.into()];
    t
}

#[test]
fn reservation_pods_go_with_the_fractions_they_hold() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut n = node("a", PodDeletionRequired);
    n.annotations.insert(key.into(), NOW.to_string());
    let evict = |name: &str| Action::Evict {
        node: "a".into(),
        pod: pod("a", name).key,
    };
    let release = |name: &str| Action::DeletePod {
        node: "a".into(),
        pod: reservation("a", name, "g").key,
    };
    // Two fractions share g1; g2's tenant is gone already. The fractions are evicted, g2's
    // reservation is released, g1's waits for its tenants; none of it is a failure.
    let pods = vec![
        tenant("a", "half-1", "g1"),
        tenant("a", "half-2", "g1"),
        reservation("a", "res-1", "g1"),
        reservation("a", "res-2", "g2"),
    ];
    let v = one(n.clone(), driver("a", false, true), pods);
    assert_eq!(
        run(&v, &policy()),
        vec![evict("half-1"), evict("half-2"), release("res-2")]
    );
    // A leaving tenant still holds its GPU.
    let mut going = tenant("a", "half-1", "g1");
    going.terminating = true;
    let v = one(
        n.clone(),
        driver("a", false, true),
        vec![going, reservation("a", "res-1", "g1")],
    );
    assert_eq!(run(&v, &policy()), vec![]);
    // Tenants gone: released; then the step is done.
    let v = one(
        n.clone(),
        driver("a", false, true),
        vec![reservation("a", "res-1", "g1")],
    );
    assert_eq!(run(&v, &policy()), vec![release("res-1")]);
    let v = one(n, driver("a", false, true), vec![]);
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("a".into(), PodRestartRequired)]
    );
}

#[test]
fn a_drain_releases_idle_reservations_too() {
    let mut p = policy();
    p.drain_enable = true;
    let v = one(
        node("a", DrainRequired),
        driver("a", false, true),
        vec![reservation("a", "res", "g")],
    );
    let a = run(&v, &p);
    assert!(!has_warning(&a), "{a:?}");
    assert!(a.contains(&Action::DeletePod {
        node: "a".into(),
        pod: reservation("a", "res", "g").key
    }));
}

#[test]
fn pod_deletion_times_out() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut n = node("a", PodDeletionRequired);
    n.annotations.insert(key.into(), (NOW - 300).to_string());
    let v = one(n, driver("a", false, true), vec![pod("a", "stuck")]);
    let a = run(&v, &policy());
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
}

#[test]
fn drain_disabled_skips_to_restart() {
    let v = one(
        node("a", DrainRequired),
        driver("a", false, true),
        vec![pod("a", "x")],
    );
    assert_eq!(run(&v, &policy()), vec![to("a", PodRestartRequired)]);
}

#[test]
fn drain_evicts_selected_pods_and_honours_the_skip_label() {
    let key = names::ANNOTATION_UPGRADE_DRAIN_START;
    let mut p = policy();
    p.drain_enable = true;
    p.drain_pod_selector = "team=ml".into();
    let mut ml = pod("a", "ml");
    ml.uses_gpu = false;
    ml.labels.insert("team".into(), "ml".into());
    let mut skip = ml.clone();
    skip.key.name = "skip".into();
    skip.labels
        .insert(names::LABEL_UPGRADE_DRAIN_SKIP.into(), "true".into());
    let mut other = pod("a", "other");
    other.uses_gpu = false;
    let mut ds = ml.clone();
    ds.key.name = "ds".into();
    ds.daemonset = true;
    let v = one(
        node("a", DrainRequired),
        driver("a", false, true),
        vec![ml.clone(), skip, other, ds],
    );
    assert_eq!(
        run(&v, &p),
        vec![
            ann("a", key, Some(&NOW.to_string())),
            Action::Evict {
                node: "a".into(),
                pod: ml.key.clone()
            }
        ]
    );
    // Unmanaged pod without drain.force: the drain fails.
    ml.controlled = false;
    let v = one(node("a", DrainRequired), driver("a", false, true), vec![ml]);
    let a = run(&v, &p);
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
    // Nothing left: on to the restart.
    let v = one(node("a", DrainRequired), driver("a", false, true), vec![]);
    assert_eq!(run(&v, &p), vec![to("a", PodRestartRequired)]);
}

// ---- pod restart / validation ------------------------------------------------------------

#[test]
fn pod_restart_deletes_the_stale_driver_pod_once() {
    let d = driver("a", false, true);
    let v = one(node("a", PodRestartRequired), d.clone(), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![Action::DeletePod {
            node: "a".into(),
            pod: d.key.clone()
        }]
    );
    let mut going = d;
    going.terminating = true;
    let v = one(node("a", PodRestartRequired), going, vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
}

#[test]
fn pod_restart_waits_for_ready_then_restarts_validators() {
    let mut n = node("a", PodRestartRequired);
    n.annotations.insert(
        names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD.into(),
        "true".into(),
    );
    let v = one(n.clone(), driver("a", true, false), vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
    let old = validator("a", "val-old", 10, true);
    let new = validator("a", "val-new", 200, true);
    let v = one(n, driver("a", true, true), vec![old.clone(), new]);
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD, None),
            Action::DeletePod {
                node: "a".into(),
                pod: old.key
            },
            to("a", ValidationRequired)
        ]
    );
}

#[test]
fn crash_looping_new_driver_fails_the_node() {
    let mut d = driver("a", true, false);
    d.restarts = 11;
    let v = one(node("a", PodRestartRequired), d, vec![]);
    let a = run(&v, &policy());
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
}

#[test]
fn validation_passes_on_ready_new_validators() {
    let key = names::ANNOTATION_UPGRADE_VALIDATION_START;
    let mut n = node("a", ValidationRequired);
    n.annotations.insert(key.into(), NOW.to_string());
    let mut v = one(
        n.clone(),
        driver("a", true, true),
        vec![validator("a", "v", 200, true)],
    );
    v.validator_expected = true;
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", key, None), to("a", UncordonRequired)]
    );
    // A node that was cordoned before stays cordoned: straight to done.
    n.annotations.insert(
        names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE.into(),
        "true".into(),
    );
    v.nodes = vec![n];
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", key, None),
            ann("a", names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE, None),
            to("a", UpgradeDone)
        ]
    );
}

#[test]
fn validation_waits_then_times_out() {
    let key = names::ANNOTATION_UPGRADE_VALIDATION_START;
    let mut n = node("a", ValidationRequired);
    // Old (pre-restart) validator pods do not count; the DaemonSet has not made new ones yet.
    let mut v = one(
        n.clone(),
        driver("a", true, true),
        vec![validator("a", "old", 10, true)],
    );
    v.validator_expected = true;
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", key, Some(&NOW.to_string()))]
    );
    n.annotations.insert(key.into(), (NOW - 599).to_string());
    v.nodes = vec![n.clone()];
    v.pods = vec![validator("a", "new", 200, false)];
    assert_eq!(run(&v, &policy()), vec![]);
    n.annotations.insert(key.into(), (NOW - 600).to_string());
    v.nodes = vec![n];
    let a = run(&v, &policy());
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
    // Without a validator DaemonSet there is nothing to wait for.
    let v = one(
        node("a", ValidationRequired),
        driver("a", true, true),
        vec![],
    );
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("a".into(), UncordonRequired)]
    );
}

#[test]
fn uncordon_required_uncordons() {
    let v = one(node("a", UncordonRequired), driver("a", true, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![Action::Uncordon { node: "a".into() }, to("a", UpgradeDone)]
    );
}
