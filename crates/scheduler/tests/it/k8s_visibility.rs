//! What a user sees with the real kubectl: `kubectl describe pod` lists `Scheduled` for a
//! placed pod and `FailedScheduling` with `gantry explain`'s reason for a pending one (one
//! Event object whose count grows, not one per cycle); `kubectl get queues` fills CHILDREN;
//! every queue's status keeps the fair share the scheduler wrote (the CRD schema does not
//! prune it) and `gantry explain queues` prints it.

use crate::cluster;
use crate::k8s_kai::queue;

use cluster::{Cluster, Result, eventually_secs};
use gantry_api::kai::Queue;
use gantry_testkit::Look;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use std::time::Duration;

fn pod(name: &str, queue: &str, gpus: u32) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: {queue}}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
"#
    )
}

/// The `Events:` section of `kubectl describe pod`.
async fn described_events(c: &Cluster, name: &str) -> Result<String> {
    let out = c.kubectl(&["describe", "pod", name]).await?;
    Ok(out
        .split_once("\nEvents:")
        .map(|(_, e)| e.to_string())
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_scheduling_events_and_queues_show_children_and_fair_share() -> Result {
    let c = Cluster::start("1xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    eventually_secs("Queue CRD served", 60, || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    // KAI's queue of queues, with two teams of 1 guaranteed GPU each.
    let queues = [
        queue("vis-root", None, -1, -1),
        queue("vis-a", Some("vis-root"), 1, -1),
        queue("vis-b", Some("vis-root"), 1, -1),
    ]
    .join("---\n");
    c.apply("queues.yaml", &queues).await?;
    let pods = [pod("placed", "vis-a", 1), pod("too-big", "vis-b", 4)].join("---\n");
    c.apply("pods.yaml", &pods).await?;
    let placed = c.wait_running("default", "placed").await?;
    let node = cluster::node_of(&placed).ok_or("placed is bound")?;

    // kube-scheduler's words, from the scheduler's name.
    let want = format!("Successfully assigned default/placed to {node}");
    let ev = eventually_secs("describe pod placed lists Scheduled", 60, || async {
        let ev = described_events(&c, "placed").await.unwrap_or_default();
        if ev.contains("Scheduled") && ev.contains(&want) {
            Look::Done(ev)
        } else {
            Look::Seen(ev)
        }
    })
    .await?;
    println!("kubectl describe pod placed, Events:{ev}");
    let line = ev.lines().find(|l| l.contains(&want)).unwrap_or_default();
    assert!(
        line.contains("Normal") && line.contains("kai-scheduler"),
        "{ev}"
    );

    // The pending pod: FailedScheduling with the reason `gantry explain` gives.
    let explained = gantry_scheduler::k8s::explain::explain_pod(
        &c.client,
        "default",
        "too-big",
        "kai-scheduler",
        gantry_api::names::DEFAULT_RESERVATION_NAMESPACE,
    )
    .await?;
    let reason = explained
        .lines()
        .find_map(|l| l.strip_prefix("Pending:"))
        .map(str::trim)
        .ok_or_else(|| format!("explain gives a reason: {explained}"))?
        .to_string();
    let ev = eventually_secs(
        "describe pod too-big lists FailedScheduling",
        60,
        || async {
            let ev = described_events(&c, "too-big").await.unwrap_or_default();
            if ev.contains("FailedScheduling") {
                Look::Done(ev)
            } else {
                Look::Seen(ev)
            }
        },
    )
    .await?;
    println!("kubectl describe pod too-big, Events:{ev}");
    let line = ev
        .lines()
        .find(|l| l.contains("FailedScheduling"))
        .unwrap_or_default();
    assert!(
        line.contains("Warning") && line.contains("kai-scheduler"),
        "{ev}"
    );
    // kubectl wraps long messages; compare the words.
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let flat = words(&ev).join(" ");
    assert!(
        flat.contains(&words(&reason).join(" ")),
        "the event says what explain says ({reason:?}): {ev}"
    );

    // kubectl get queues: CHILDREN as KAI's queue controller fills it.
    let out = eventually_secs("kubectl get queues shows CHILDREN", 60, || async {
        let out = c.kubectl(&["get", "queues"]).await.unwrap_or_default();
        let root = out.lines().find(|l| l.starts_with("vis-root "));
        if root.is_some_and(|l| l.contains("vis-a") && l.contains("vis-b")) {
            Look::Done(out)
        } else {
            Look::Seen(out)
        }
    })
    .await?;
    println!("kubectl get queues:\n{out}");
    assert!(
        out.lines().next().unwrap_or("").contains("CHILDREN"),
        "{out}"
    );

    // Every queue keeps the fair share the scheduler wrote, and `gantry explain queues`
    // prints a number for each.
    let queues: Api<Queue> = Api::all(c.client.clone());
    let table = eventually_secs("every queue's status has a fair share", 60, || async {
        let qs = queues.list(&ListParams::default()).await?.items;
        let missing: Vec<String> = qs
            .iter()
            .filter(|q| {
                q.status
                    .as_ref()
                    .and_then(|s| s.fair_share.as_ref())
                    .and_then(|f| f.get("nvidia.com/gpu"))
                    .is_none()
            })
            .filter_map(|q| q.metadata.name.clone())
            .collect();
        Ok::<_, kube::Error>(if missing.is_empty() {
            Look::Done(gantry_scheduler::k8s::explain::queue_table(&qs))
        } else {
            Look::Seen(format!("no fair share yet: {missing:?}"))
        })
    })
    .await?;
    for name in ["vis-root", "vis-a", "vis-b"] {
        let row = table
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .ok_or_else(|| format!("{name} in {table}"))?;
        let fair: f64 = row.split_whitespace().nth(4).unwrap_or("-").parse()?;
        assert!(fair >= 0.0, "{row}");
    }
    println!("gantry explain queues:\n{table}");
    let a = table
        .lines()
        .find(|l| l.contains("vis-a "))
        .unwrap_or_default();
    assert!(
        a.starts_with("  vis-a"),
        "children under their parent: {table}"
    );

    // However many cycles have run by now, the pending pod has one FailedScheduling object
    // per thing said (a repeat raises the count).
    let events: Vec<Event> = Api::<Event>::namespaced(c.client.clone(), "default")
        .list(&ListParams::default().fields("involvedObject.name=too-big"))
        .await?
        .items;
    let failed: Vec<&Event> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .collect();
    let said: std::collections::BTreeSet<_> = failed.iter().map(|e| &e.message).collect();
    assert_eq!(failed.len(), said.len(), "{failed:#?}");
    assert!(failed.len() <= 2, "{failed:#?}");
    assert_eq!(
        failed[0].reporting_component.as_deref(),
        Some("kai-scheduler")
    );

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
