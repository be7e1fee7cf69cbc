//! Restart safety: the leader is killed mid-run (its whole runtime dropped, no clean
//! shutdown, lease not released); a second scheduler takes the Lease once it expires and
//! finishes. No pod is bound twice, no node holds more GPUs than it has, and no reservation
//! pod is left without tenants.

use crate::cluster;

use cluster::{Cluster, Result, annotation, eventually_secs};
use gantry_api::names;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn manifests() -> String {
    let mut s = String::new();
    for i in 0..8 {
        s.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata:
  name: frac-{i}
  annotations: {{gpu-fraction: "0.5"}}
spec:
  schedulerName: kai-scheduler
  containers: [{{name: main, image: ubuntu}}]
"#
        ));
    }
    s.push_str(
        r#"---
apiVersion: batch/v1
kind: Job
metadata: {name: whole}
spec:
  parallelism: 3
  completions: 3
  template:
    spec:
      schedulerName: kai-scheduler
      restartPolicy: Never
      containers:
      - name: main
        image: ubuntu
        resources: {limits: {nvidia.com/gpu: 1}}
"#,
    );
    s
}

/// A client for `kubeconfig` whose every POST (binds, reservation pods) goes out 150 ms late.
async fn slow_writes_client(kubeconfig: &std::path::Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::client::ClientBuilder::try_from(cfg)?
        .with_layer(&tower::layer::layer_fn(SlowPosts))
        .build())
}

#[derive(Clone)]
struct SlowPosts<S>(S);

impl<S, B> tower::Service<http::Request<B>> for SlowPosts<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::result::Result<S::Response, S::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let post = req.method() == http::Method::POST;
        let answer = self.0.call(req);
        Box::pin(async move {
            if post {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            answer.await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_leaves_no_double_binds_and_no_leaked_reservations() -> Result {
    let c = Cluster::start("2xH100-80GB:4").await?;
    let lease = Duration::from_secs(3);
    // First scheduler on its own runtime and thread, so killing it kills everything it spawned.
    let kc = c.kubeconfig_path().to_path_buf();
    let mut o1 = c.options();
    o1.leader_elect = true;
    o1.lease_duration = lease;
    o1.identity = "first".into();
    // One bind at a time, each write slowed: the kill below lands mid-run on any machine.
    o1.bind_concurrency = 1;
    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
    let first = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async move {
            let client = slow_writes_client(&kc).await.ok()?;
            let (_tx, rx) = tokio::sync::watch::channel(false);
            tokio::select! {
                _ = gantry_scheduler::k8s::run(client, o1, rx) => {}
                _ = kill_rx => {}
            }
            Some(())
        });
        rt.shutdown_background();
        Some(())
    });
    eventually_secs("Queue CRD served", 60, || async {
        c.kubectl(&["get", "queues"]).await.ok()
    })
    .await?;
    c.apply("work.yaml", &manifests()).await?;
    // Kill the leader as soon as the first binds land: the rest is mid-flight.
    eventually_secs("a first bind", 60, || async {
        let ps = c.pods("default", "").await;
        ps.iter()
            .any(|p| cluster::node_of(p).is_some())
            .then_some(())
    })
    .await?;
    let _ = kill_tx.send(());
    let _ = first.join();
    let bound_at_kill = c
        .pods("default", "")
        .await
        .iter()
        .filter(|p| cluster::node_of(p).is_some())
        .count();
    assert!(bound_at_kill < 11, "the first scheduler was to die mid-run");

    let mut o2 = c.options();
    o2.leader_elect = true;
    o2.lease_duration = lease;
    o2.identity = "second".into();
    let (stop, handle) = c.scheduler(o2);
    let pods = eventually_secs("all 11 pods Running", 120, || async {
        let ps = c.pods("default", "").await;
        let running = ps
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 11).then_some(ps)
    })
    .await?;
    // No bind failed because the pod was already bound elsewhere, and no pod was rejected by
    // a kubelet for lack of GPUs (what a double bind or a double-counted GPU would cause).
    for p in &pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        for e in c.events("default", &name).await {
            let m = e.message.unwrap_or_default();
            assert!(!m.contains("already bound"), "{name}: {m}");
        }
        assert_ne!(
            p.status.as_ref().and_then(|s| s.reason.as_deref()),
            Some("OutOfnvidia.com/gpu")
        );
    }
    // Shares per GPU group stay within one GPU; one reservation pod per group in use.
    let mut groups: BTreeMap<String, u32> = BTreeMap::new();
    for p in pods.iter().filter(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("frac-"))
    }) {
        let g = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_GPU_GROUP))
            .cloned()
            .ok_or("fraction pod without group")?;
        assert!(annotation(p, names::ANNOTATION_SHARED_GPU_CONFIGMAP).is_some());
        *groups.entry(g).or_default() += 1;
    }
    assert!(groups.values().all(|&n| n <= 2), "{groups:?}");
    let want: BTreeSet<String> = groups.keys().cloned().collect();
    let sel = format!("{}={}", names::LABEL_APP, names::RESERVATION_APP);
    eventually_secs("reservation pods == GPU groups in use", 60, || async {
        let have: BTreeSet<String> = c
            .pods(names::DEFAULT_RESERVATION_NAMESPACE, &sel)
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                p.metadata
                    .labels
                    .as_ref()?
                    .get(names::LABEL_GPU_GROUP)
                    .cloned()
            })
            .collect();
        (have == want).then_some(())
    })
    .await?;
    // GPUs per node: whole-GPU pods + reservation pods never exceed the node's 4.
    let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
    let whole = c.pods("default", "job-name=whole").await;
    let res = c.pods(names::DEFAULT_RESERVATION_NAMESPACE, &sel).await;
    for p in whole
        .iter()
        .chain(res.iter())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Some(n) = cluster::node_of(p) {
            *per_node.entry(n).or_default() += 1;
        }
    }
    assert!(per_node.values().all(|&n| n <= 4), "{per_node:?}");
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
