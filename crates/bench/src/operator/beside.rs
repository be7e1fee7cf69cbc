//! `gantry bench operator --beside-up`: a second cluster under load on the same machine while
//! the bench runs, as on a shared machine where someone else's `gantry up` is busy. It is
//! `gantry up` itself (a child process: control plane, simulated nodes, in-process operator and
//! scheduler) with the bench's default ClusterPolicy applied and a steady stream of short
//! one-GPU pods through the KAI scheduler: created in batches, run for a while, deleted once
//! they finish.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use gantry_api::names;

/// What the second cluster runs.
#[derive(Clone, Debug)]
pub struct BesideUp {
    /// `gantry up --nodes` spec of the second cluster.
    pub nodes: String,
    /// Pods created per second (in batches every 2 s).
    pub pods_per_sec: u32,
    /// How long each pod runs (`sim.gantry.dev/run-time`).
    pub run_time: Duration,
}

impl Default for BesideUp {
    fn default() -> Self {
        BesideUp {
            nodes: "100xH100-80GB:8".into(),
            pods_per_sec: 10,
            run_time: Duration::from_secs(15),
        }
    }
}

const NAMESPACE: &str = "beside-load";
const BATCH_EVERY: Duration = Duration::from_secs(2);

/// The running second cluster; dropping it stops the load and kills `gantry up`.
pub struct Running {
    child: tokio::process::Child,
    load: tokio::task::JoinHandle<()>,
    created: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Pods the load has created so far.
    pub fn created(&self) -> u64 {
        self.created.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.load.abort();
        let _ = self.child.start_kill();
    }
}

/// Start `gantry up` (program `exe`) with its kubeconfig under `dir`, wait until its nodes
/// registered, apply `policy` and start the load.
pub async fn start(exe: &Path, dir: &Path, b: &BesideUp, policy: &str) -> anyhow::Result<Running> {
    let kubeconfig: PathBuf = dir.join("beside-up.kubeconfig");
    let child = tokio::process::Command::new(exe)
        .args(["up", "--port", "0", "--no-ui", "--nodes", &b.nodes])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the second `gantry up`")?;
    let want = gantry_sim::nodes::plan(&b.nodes)?.len();
    let t0 = Instant::now();
    let client = loop {
        if t0.elapsed() > Duration::from_secs(300) {
            anyhow::bail!("the second `gantry up` did not serve its {want} nodes within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Ok(client) = client_for(&kubeconfig).await else {
            continue;
        };
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        if let Ok(l) = nodes.list_metadata(&ListParams::default()).await
            && l.items.len() >= want
        {
            break client;
        }
    };
    super::install_crds(&client).await?;
    super::create_policy(&client, policy).await?;
    let ns: Api<Namespace> = Api::all(client.clone());
    let obj = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    match ns.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("creating the load's namespace"),
    }
    let created = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let load = tokio::spawn(drive(client, b.clone(), created.clone()));
    Ok(Running {
        child,
        load,
        created,
    })
}

async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// One load pod: one GPU through the KAI scheduler's default queue, running `run_time`.
pub fn load_pod(i: u64, run_time: Duration) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("load-{i:07}"), "namespace": NAMESPACE,
            "labels": {names::LABEL_QUEUE: names::DEFAULT_QUEUE},
            "annotations": {names::ANNOTATION_SIM_RUN_TIME: format!("{}s", run_time.as_secs())},
        },
        "spec": {
            "schedulerName": names::DEFAULT_SCHEDULER_NAME,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "load",
                            "resources": {"limits": {names::RESOURCE_GPU: "1"}}}],
        },
    })
}

/// Create a batch every [`BATCH_EVERY`] and delete the pods that finished, until aborted.
/// Errors (the second cluster busy) skip the round: the load is background, not measured.
async fn drive(
    client: kube::Client,
    b: BesideUp,
    created: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let per_batch = (u64::from(b.pods_per_sec) * BATCH_EVERY.as_secs()).max(1);
    let mut next = 0u64;
    let mut tick = tokio::time::interval(BATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for _ in 0..per_batch {
            let Ok(pod) = serde_json::from_value::<Pod>(load_pod(next, b.run_time)) else {
                return;
            };
            next += 1;
            if pods.create(&PostParams::default(), &pod).await.is_ok() {
                created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if let Ok(l) = pods.list(&ListParams::default()).await {
            let finished = l.items.into_iter().filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                matches!(phase, Some("Succeeded" | "Failed"))
            });
            for p in finished {
                if let Some(n) = p.metadata.name {
                    let _ = pods.delete(&n, &DeleteParams::default()).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_pod_is_a_valid_one_gpu_kai_pod() {
        let pod: Pod = serde_json::from_value(load_pod(7, Duration::from_secs(15))).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("load-0000007"));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("kai-scheduler"));
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref();
        assert_eq!(limits.unwrap()["nvidia.com/gpu"].0, "1");
        assert_eq!(
            pod.metadata.annotations.unwrap()[names::ANNOTATION_SIM_RUN_TIME],
            "15s"
        );
    }
}
