//! KAI `pkg/scheduler/plugins/minruntime/{resolver,minruntime}_test.go`, on KAI's test queue
//! tree: dev (preempt 5s, reclaim 10s) > dev-team1 (reclaim 8s), dev-team2 (preempt 3s);
//! prod (20s, 30s) > prod-team1 (reclaim 25s), prod-team2 (15s, 35s); research (4s, 6s) >
//! research-project (7s, 9s).

use super::*;
use crate::input::{ClusterInput, PodGroupInput, PodInput, PodPhase, QueueInput};

const S: i64 = 1_000_000_000;

fn queue(
    name: &str,
    parent: Option<&str>,
    preempt: Option<i64>,
    reclaim: Option<i64>,
) -> QueueInput {
    QueueInput {
        name: name.into(),
        parent: parent.map(str::to_string),
        preempt_min_runtime: preempt.map(|s| s * S),
        reclaim_min_runtime: reclaim.map(|s| s * S),
        ..Default::default()
    }
}

fn tree() -> ClusterInput {
    ClusterInput {
        now: 1_000,
        queues: vec![
            queue("dev", None, Some(5), Some(10)),
            queue("prod", None, Some(20), Some(30)),
            queue("research", None, Some(4), Some(6)),
            queue("dev-team1", Some("dev"), None, Some(8)),
            queue("dev-team2", Some("dev"), Some(3), None),
            queue("prod-team1", Some("prod"), None, Some(25)),
            queue("prod-team2", Some("prod"), Some(15), Some(35)),
            queue("research-project", Some("research"), Some(7), Some(9)),
            queue("no-reclaim", None, None, None),
            queue("leaf", Some("no-reclaim"), None, None),
        ],
        ..Default::default()
    }
}

fn cfg(method: ResolveMethod) -> MinRuntimeConfig {
    MinRuntimeConfig {
        preempt_min_runtime: Some(GoDuration::from_secs(2)),
        reclaim_min_runtime: Some(GoDuration::from_secs(1)),
        reclaim_resolve_method: method,
    }
}

fn secs(input: &ClusterInput, kind: Kind, method: ResolveMethod, a: &str, b: &str) -> i64 {
    let s = Snapshot::build(input);
    let q = |n: &str| s.queue_by_name(n).unwrap();
    resolve(&s, &cfg(method), kind, q(a), q(b)) / S
}

#[test]
fn preempt_walks_up_from_the_victim_queue() {
    let t = tree();
    let p = |v: &str| secs(&t, Kind::Preempt, ResolveMethod::Lca, v, v);
    assert_eq!(p("prod-team2"), 15, "own value");
    assert_eq!(p("prod-team1"), 20, "inherited from prod");
    assert_eq!(p("dev-team1"), 5, "inherited from dev");
    assert_eq!(p("prod"), 20);
    assert_eq!(p("research"), 4);
    assert_eq!(p("leaf"), 2, "nothing set: the default");
}

#[test]
fn reclaim_queue_method_walks_up_from_the_victim() {
    let t = tree();
    let r = |a: &str, v: &str| secs(&t, Kind::Reclaim, ResolveMethod::Queue, a, v);
    assert_eq!(r("dev-team1", "prod-team2"), 35);
    assert_eq!(r("dev-team1", "dev-team2"), 10);
    assert_eq!(r("dev-team1", "research-project"), 9);
}

#[test]
fn reclaim_lca_method_uses_the_child_below_the_common_ancestor() {
    let t = tree();
    let r = |a: &str, v: &str| secs(&t, Kind::Reclaim, ResolveMethod::Lca, a, v);
    assert_eq!(r("dev-team1", "prod-team2"), 30, "different roots: prod's");
    assert_eq!(r("dev-team2", "dev-team1"), 8, "siblings: the victim's own");
    assert_eq!(r("prod-team1", "prod-team2"), 35);
    assert_eq!(r("prod-team2", "prod-team2"), 35, "same queue: its own");
    assert_eq!(r("dev-team1", "research-project"), 6, "research's");
    assert_eq!(r("dev-team1", "leaf"), 1, "root sets nothing: the default");
}

/// KAI's design doc example (docs/developer/designs/min-runtime): A > B (600s) > C > leaf1
/// (0s), leaf2 (180s); B > D (60s) > leaf3.
#[test]
fn reclaim_lca_design_examples() {
    let t = ClusterInput {
        queues: vec![
            queue("A", None, None, None),
            queue("B", Some("A"), None, Some(600)),
            queue("C", Some("B"), None, None),
            queue("D", Some("B"), None, Some(60)),
            queue("leaf1", Some("C"), None, Some(0)),
            queue("leaf2", Some("C"), None, Some(180)),
            queue("leaf3", Some("D"), None, None),
        ],
        ..Default::default()
    };
    let r = |a: &str, v: &str| secs(&t, Kind::Reclaim, ResolveMethod::Lca, a, v);
    assert_eq!(r("leaf1", "leaf3"), 60);
    assert_eq!(r("leaf1", "leaf2"), 180);
    assert_eq!(r("leaf3", "leaf1"), 600);
}

fn with_job(
    mut t: ClusterInput,
    queue: &str,
    started_ago: Option<i64>,
    min: u32,
    pods: usize,
) -> ClusterInput {
    t.pod_groups.push(PodGroupInput {
        namespace: "ns".into(),
        name: "victim".into(),
        queue: queue.into(),
        min_member: Some(min),
        last_start: started_ago.map(|a| t.now - a),
        ..Default::default()
    });
    for i in 0..pods {
        t.pods.push(PodInput {
            namespace: "ns".into(),
            name: format!("victim-{i}"),
            pod_group: "victim".into(),
            phase: PodPhase::Running,
            node: Some("n".into()),
            ..Default::default()
        });
    }
    t
}

fn check(t: &ClusterInput, kind: Kind, method: ResolveMethod, from: &str, after: usize) -> bool {
    let s = Snapshot::build(t);
    let g = (0..s.groups.len() as GroupId)
        .find(|&g| s.groups[g as usize].name == "victim")
        .unwrap();
    allows(
        &s,
        &cfg(method),
        kind,
        s.queue_by_name(from).unwrap(),
        g,
        after,
    )
}

/// minruntime_test.go `preemptFilterFn` / `reclaimFilterFn`.
#[test]
fn filters_protect_young_jobs() {
    let lca = ResolveMethod::Lca;
    // prod-team2 preempt 15s: 10s old is protected, 30s old is not, no start time is not.
    let t = with_job(tree(), "prod-team2", Some(10), 1, 1);
    assert!(!check(&t, Kind::Preempt, lca, "dev-team1", 0));
    let t = with_job(tree(), "prod-team2", Some(30), 1, 1);
    assert!(check(&t, Kind::Preempt, lca, "dev-team1", 0));
    let t = with_job(tree(), "prod-team2", None, 1, 1);
    assert!(check(&t, Kind::Preempt, lca, "dev-team1", 0));
    // Reclaim from dev-team1: 30s by LCA (prod), 35s by queue; 20s old is protected by both,
    // 40s old by neither.
    let t = with_job(tree(), "prod-team2", Some(20), 1, 1);
    assert!(!check(&t, Kind::Reclaim, lca, "dev-team1", 0));
    assert!(!check(
        &t,
        Kind::Reclaim,
        ResolveMethod::Queue,
        "dev-team1",
        0
    ));
    let t = with_job(tree(), "prod-team2", Some(40), 1, 1);
    assert!(check(&t, Kind::Reclaim, lca, "dev-team1", 0));
}

/// minruntime_test.go `preemptScenarioValidatorFn` / `reclaimScenarioValidatorFn`: a
/// protected elastic job may lose the pods above its minimum only.
#[test]
fn elastic_jobs_keep_their_minimum() {
    let lca = ResolveMethod::Lca;
    let t = with_job(tree(), "prod-team2", Some(10), 1, 3);
    assert!(
        check(&t, Kind::Preempt, lca, "dev-team1", 2),
        "one of three taken"
    );
    let t = with_job(tree(), "prod-team2", Some(10), 2, 3);
    assert!(
        !check(&t, Kind::Preempt, lca, "dev-team1", 1),
        "two of three taken"
    );
    let t = with_job(tree(), "prod-team2", Some(20), 1, 3);
    assert!(check(&t, Kind::Reclaim, lca, "dev-team1", 2));
    let t = with_job(tree(), "prod-team2", Some(20), 2, 3);
    assert!(!check(&t, Kind::Reclaim, lca, "dev-team1", 1));
}
