//! Time-based fair share end to end in the sim: a queue that used the whole cluster loses the
//! freed GPUs to a starved queue, its usage is in `Queue.status.usage` and decays once it
//! stops running; the PodGroups carry the start min-runtime counts from.

use crate::cluster;
use crate::k8s_kai::queue;

use cluster::{Cluster, Result, eventually_secs, node_of};
use gantry_api::kai::{PodGroup, Queue};
use gantry_scheduler::config::{Action, GoDuration};
use gantry_scheduler::usage::{ClientType, UsageDbConfig, UsageParams};
use gantry_testkit::Look;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

const TRAIN: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: train}
value: 50
"#;

/// lab (everything) > heavy, starved (quota 0, weight 1 each).
fn queues() -> String {
    [
        TRAIN.to_string(),
        queue("lab", None, -1, -1),
        queue("heavy", Some("lab"), 0, -1),
        queue("starved", Some("lab"), 0, -1),
    ]
    .join("---")
}

fn pod(name: &str, queue: &str) -> String {
    crate::k8s_reclaim::pod(name, queue, "train")
}

/// One pod holding both GPUs: deleting it frees them in the same scheduling cycle. Two pods
/// could end seconds apart on a loaded machine, and with a 10 s half-life heavy's usage
/// decays enough meanwhile for its fair share of the second GPU to come back (correctly).
fn pod_of_both(name: &str, queue: &str) -> String {
    pod(name, queue).replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2")
}

/// `status.usage["nvidia.com/gpu"]` of a queue (0 when not written yet).
async fn gpu_usage(c: &Cluster, queue: &str) -> f64 {
    let api: Api<Queue> = Api::all(c.client.clone());
    api.get_opt(queue)
        .await
        .ok()
        .flatten()
        .and_then(|q| q.status?.usage?.get("nvidia.com/gpu").cloned())
        .and_then(|v| v.0.parse().ok())
        .unwrap_or(0.0)
}

async fn phase(c: &Cluster, name: &str) -> (Option<String>, Option<String>) {
    match c.pod("default", name).await {
        Some(p) => (p.status.as_ref().and_then(|s| s.phase.clone()), node_of(&p)),
        None => (None, None),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starved_queue_gets_freed_gpus_first_and_usage_decays() -> Result {
    let c = Cluster::start("1xH100-80GB:2").await?;
    let mut opts = c.options();
    opts.namespace = "default".into();
    // Allocation decides alone here (no reclaim): who gets the GPUs that free up.
    opts.config.actions = vec![Action::Allocate, Action::Preempt];
    opts.config.usage_db_config = Some(UsageDbConfig {
        client_type: ClientType::Internal,
        usage_params: UsageParams {
            window_size: Some(GoDuration::from_secs(600)),
            half_life_period: Some(GoDuration::from_secs(10)),
            fetch_interval: Some(GoDuration::from_secs(1)),
            ..Default::default()
        },
        ..Default::default()
    });
    let (stop, handle) = c.scheduler(opts);
    eventually_secs("Queue CRD served", 60, || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.apply("queues.yaml", &queues()).await?;

    // heavy runs the whole cluster until its usage dominates the (decayed) history.
    c.apply("heavy.yaml", &pod_of_both("heavy-1", "heavy"))
        .await?;
    c.wait_running("default", "heavy-1").await?;
    eventually_secs("heavy's usage in its Queue status", 90, || async {
        let u = gpu_usage(&c, "heavy").await;
        if u >= 0.8 {
            Look::Done(u)
        } else {
            Look::Seen(format!("status.usage gpu {u}"))
        }
    })
    .await?;
    // Its PodGroup carries its start (min-runtime counts from there).
    let groups: Api<PodGroup> = Api::namespaced(c.client.clone(), "default");
    eventually_secs("last-start-timestamp on heavy's PodGroup", 30, || async {
        let l = groups.list(&ListParams::default()).await.ok()?;
        let stamped = l
            .items
            .iter()
            .filter(|g| g.spec.queue.as_deref() == Some("heavy"))
            .filter(|g| {
                g.metadata.annotations.as_ref().is_some_and(|a| {
                    a.contains_key(gantry_api::names::ANNOTATION_LAST_START_TIMESTAMP)
                })
            })
            .count();
        (stamped == 1).then_some(())
    })
    .await?;

    // Both queues wait for GPUs, heavy's pods first (older); then heavy's running pod ends.
    c.apply(
        "waiting-heavy.yaml",
        &format!("{}---{}", pod("heavy-3", "heavy"), pod("heavy-4", "heavy")),
    )
    .await?;
    c.apply(
        "waiting-starved.yaml",
        &format!(
            "{}---{}",
            pod("starved-1", "starved"),
            pod("starved-2", "starved")
        ),
    )
    .await?;
    // Every waiting pod has been through a cycle (its group is marked unschedulable while
    // the GPUs are taken) before they free up: a pod the scheduler has not seen yet asks for
    // nothing, and a starved queue asking for one GPU has a fair share of one.
    eventually_secs(
        "the waiting pods' groups marked unschedulable",
        60,
        || async {
            let l = groups.list(&ListParams::default()).await.ok()?;
            let waiting = |q: &str| {
                l.items
                    .iter()
                    .filter(|g| g.spec.queue.as_deref() == Some(q))
                    .filter(|g| {
                        g.status
                            .as_ref()
                            .and_then(|s| s.scheduling_conditions.as_ref())
                            .is_some_and(|c| !c.is_empty())
                    })
                    .count()
            };
            (waiting("heavy") == 2 && waiting("starved") == 2).then_some(())
        },
    )
    .await?;
    // heavy's younger pods cannot preempt its running one (same priority).
    c.kubectl(&["delete", "pod", "heavy-1", "--wait=false"])
        .await?;

    // The freed GPUs go to the starved queue: its fair share holds both, heavy's none.
    c.wait_running("default", "starved-1").await?;
    c.wait_running("default", "starved-2").await?;
    for p in ["heavy-3", "heavy-4"] {
        let (ph, node) = phase(&c, p).await;
        assert_eq!(
            (ph.as_deref(), node),
            (Some("Pending"), None),
            "{p}: the starved queue should have had both freed GPUs"
        );
    }

    // heavy no longer runs: its usage decays (half-life 10 s) while starved's grows.
    let before = gpu_usage(&c, "heavy").await;
    eventually_secs("heavy's usage decays", 90, || async {
        let (h, s) = (gpu_usage(&c, "heavy").await, gpu_usage(&c, "starved").await);
        if h < before / 2.0 && s > h {
            Look::Done(())
        } else {
            Look::Seen(format!("heavy {h} (was {before}), starved {s}"))
        }
    })
    .await?;

    // The history is persisted for the next scheduler (restart, new leader).
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    eventually_secs("usage history ConfigMap", 30, || async {
        let cm = cms
            .get_opt(gantry_scheduler::k8s::usage::USAGE_CONFIGMAP)
            .await
            .ok()??;
        let json = cm.data?.get("usage.json")?.clone();
        let t: gantry_scheduler::usage::Tracker = serde_json::from_str(&json).ok()?;
        t.buckets
            .iter()
            .any(|b| b.queues.get("heavy").is_some_and(|v| v[0] > 0.0))
            .then_some(())
    })
    .await?;
    // And kubectl shows it.
    let out = c
        .kubectl(&["get", "queue", "heavy", "-o", "jsonpath={.status.usage}"])
        .await?;
    assert!(out.contains("nvidia.com/gpu"), "{out}");

    let _ = stop.send(true);
    let _ = handle.await;
    Ok(())
}
