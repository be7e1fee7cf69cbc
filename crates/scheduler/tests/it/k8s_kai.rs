//! KAI semantics end to end in the sim through kubectl (issue #18): a project whose CPU and
//! memory quotas are -1 reclaims its guaranteed GPU from a borrower in another department;
//! KAI's priority example (`build` preempts `train` in a queue limited to 1 GPU) with the
//! PriorityClasses the scheduler installs; KAI's queue metric names on `/metrics`.

use crate::cluster;

use cluster::{Cluster, Result};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) fn queue(name: &str, parent: Option<&str>, gpu_quota: i32, gpu_limit: i32) -> String {
    let parent = parent
        .map(|p| format!("  parentQueue: {p}\n"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
{parent}  resources:
    gpu: {{quota: {gpu_quota}, limit: {gpu_limit}, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
"#
    )
}

fn pod(name: &str, queue: &str, class: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: {queue}, priorityClassName: {class}}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: ubuntu
    resources:
      requests: {{cpu: 100m, memory: 64Mi}}
      limits: {{nvidia.com/gpu: 1}}
"#
    )
}

/// A free local port for the scheduler's `/metrics`.
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn get_metrics(port: u16) -> Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_minus_one_project_reclaims_from_another_department() -> Result {
    let c = Cluster::start("1xH100-80GB:2").await?;
    let port = free_port()?;
    let mut opts = c.options();
    opts.metrics_address = Some(([127, 0, 0, 1], port).into());
    let (stop, handle) = c.scheduler(opts);
    // The scheduler installs KAI's PriorityClasses and the Queue CRD.
    c.wait(
        "train PriorityClass and Queue CRD",
        Duration::from_secs(20),
        || async {
            c.kubectl(&["get", "priorityclass", "train"]).await.ok()?;
            c.kubectl(&["get", "queues"]).await.ok()
        },
    )
    .await?;
    let setup = [
        queue("dept-a", None, 1, -1),
        queue("proj-a", Some("dept-a"), 1, -1),
        queue("dept-b", None, 0, -1),
        queue("proj-b", Some("dept-b"), 0, -1),
    ]
    .join("---");
    c.apply("queues.yaml", &setup).await?;

    // proj-b borrows both GPUs; its department has nothing else pending.
    c.apply(
        "b.yaml",
        &format!(
            "{}---{}",
            pod("b-1", "proj-b", "train"),
            pod("b-2", "proj-b", "train")
        ),
    )
    .await?;
    c.wait_running("default", "b-1").await?;
    c.wait_running("default", "b-2").await?;

    // proj-a claims its guaranteed GPU: one of proj-b's pods is reclaimed.
    c.apply("a.yaml", &pod("a-1", "proj-a", "train")).await?;
    c.wait_running("default", "a-1").await?;
    let mut victims = Vec::new();
    for n in ["b-1", "b-2"] {
        if let Some(m) = c
            .events("default", n)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Reclaimed"))
            .and_then(|e| e.message)
        {
            assert!(m.contains("proj-a") && m.contains("proj-b"), "{m}");
            victims.push(n);
        }
    }
    assert_eq!(
        victims.len(),
        1,
        "exactly one proj-b pod reclaimed: {victims:?}"
    );

    // KAI's queue panels' metric names, with KAI's label.
    let out = c
        .wait(
            "KAI queue metrics for proj-a",
            Duration::from_secs(20),
            || async {
                let m = get_metrics(port).await.ok()?;
                m.contains(r#"kai_queue_allocated_gpus{queue_name="proj-a"} 1.0"#)
                    .then_some(m)
            },
        )
        .await?;
    for name in [
        "kai_queue_info",
        "kai_queue_deserved_gpus",
        "kai_queue_quota_cpu_cores",
        "kai_queue_quota_memory_bytes",
        "kai_queue_allocated_gpus",
        "kai_queue_allocated_cpu_cores",
        "kai_queue_allocated_memory_bytes",
        "kai_queue_fair_share_gpu",
        "kai_queue_fair_share_cpu_cores",
        "kai_queue_fair_share_memory_gb",
    ] {
        assert!(
            out.contains(&format!("# HELP {name} ")),
            "{name} missing or without HELP:\n{out}"
        );
    }
    assert!(
        out.contains(r#"kai_queue_quota_cpu_cores{queue_name="proj-a"} -1.0"#),
        "{out}"
    );

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_preempts_train_in_a_queue_limited_to_one_gpu() -> Result {
    // KAI's docs/priority example. Two GPUs, so only the queue's limit stands in the way.
    let c = Cluster::start("1xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    c.wait(
        "KAI PriorityClasses and Queue CRD",
        Duration::from_secs(20),
        || async {
            for class in ["train", "build-preemptible", "build", "inference"] {
                c.kubectl(&["get", "priorityclass", class]).await.ok()?;
            }
            c.kubectl(&["get", "queues"]).await.ok()
        },
    )
    .await?;
    let value = c
        .kubectl(&["get", "priorityclass", "build", "-o", "jsonpath={.value}"])
        .await?;
    assert_eq!(value.trim(), "100");
    // quota 1 so the non-preemptible `build` pod is within its quota; limit 1.
    c.apply("test-queue.yaml", &queue("test", None, 1, 1))
        .await?;
    c.apply("train.yaml", &pod("train-pod", "test", "train"))
        .await?;
    c.wait_running("default", "train-pod").await?;
    c.apply("build.yaml", &pod("build-pod", "test", "build"))
        .await?;
    c.wait_running("default", "build-pod").await?;
    let m = c.wait_event("default", "train-pod", "Preempted").await?;
    assert!(m.contains("priority 100 > 50"), "{m}");
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}

/// GPUs requested by the pods bound to `node`, terminating ones included.
async fn gpus_bound_to(c: &Cluster, node: &str) -> i64 {
    c.pods("default", "")
        .await
        .iter()
        .filter(|p| cluster::node_of(p).as_deref() == Some(node))
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get("nvidia.com/gpu")
                .and_then(|q| q.0.parse::<i64>().ok())
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaimer_binds_right_after_a_slow_victim_is_gone_never_before() -> Result {
    // One GPU. The victim has a 30 s grace period and a finalizer the test holds, so it stays
    // Terminating (bound, holding its GPU) for as long as the test says: KAI's Releasing.
    let c = Cluster::start("1xH100-80GB:1").await?;
    let (stop, handle) = c.scheduler(c.options());
    c.wait("Queue CRD served", Duration::from_secs(20), || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.apply(
        "queues.yaml",
        &[queue("qa", None, 1, -1), queue("qb", None, 0, -1)].join("---"),
    )
    .await?;
    let victim = pod("victim", "qb", "train").replace(
        "  name: victim\n",
        "  name: victim\n  finalizers: [test.gantry.dev/hold]\n",
    );
    let victim = victim.replace(
        "  schedulerName: kai-scheduler\n",
        "  schedulerName: kai-scheduler\n  terminationGracePeriodSeconds: 30\n",
    );
    c.apply("victim.yaml", &victim).await?;
    let node = cluster::node_of(&c.wait_running("default", "victim").await?).ok_or("no node")?;
    c.apply("reclaimer.yaml", &pod("reclaimer", "qa", "train"))
        .await?;
    c.wait_event("default", "victim", "Reclaimed").await?;
    // While the victim terminates: the reclaimer waits, the GPU is never given twice, and
    // no other pod is evicted in its place.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(6) {
        let r = c
            .pod("default", "reclaimer")
            .await
            .ok_or("reclaimer vanished")?;
        assert_eq!(
            cluster::node_of(&r),
            None,
            "bound while the victim still holds the GPU"
        );
        assert!(
            gpus_bound_to(&c, &node).await <= 1,
            "node {node} over-committed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let v = c
        .pod("default", "victim")
        .await
        .ok_or("victim gone early")?;
    assert!(
        v.metadata.deletion_timestamp.is_some(),
        "victim not terminating"
    );
    // The victim goes: the reclaimer is bound right after.
    c.kubectl(&[
        "patch",
        "pod",
        "victim",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .await?;
    c.wait("victim gone", Duration::from_secs(20), || async {
        c.pod("default", "victim").await.is_none().then_some(())
    })
    .await?;
    let gone = std::time::Instant::now();
    c.wait("reclaimer bound", Duration::from_secs(20), || async {
        let r = c.pod("default", "reclaimer").await?;
        cluster::node_of(&r)
    })
    .await?;
    let after = gone.elapsed();
    assert!(
        after < Duration::from_secs(5),
        "bound {after:?} after the victim was gone"
    );
    assert!(gpus_bound_to(&c, &node).await <= 1);
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
