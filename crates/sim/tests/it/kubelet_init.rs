//! Init containers in the sim kubelet: they run in order before the main containers, a
//! `gantry node <agent>` init container runs its runner in-process, a failing one restarts
//! with back-off (the pod stays Pending) or fails the pod under `restartPolicy: Never`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use gantry_sim::kubelet::AgentRegistry;
use gantry_sim::kubelet::in_process::{AgentContext, AgentFuture};
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Records which runner ran when; `validator` fails until it has been called `fail_first`
/// times, `exporter` (the main container) runs until stopped.
fn registry(log: Arc<Mutex<Vec<String>>>, calls: Arc<AtomicU32>, fail_first: u32) -> AgentRegistry {
    let mut r = AgentRegistry::new();
    let l = log.clone();
    r.register(
        "validator",
        Arc::new(move |ctx: AgentContext| -> AgentFuture {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let l = l.clone();
            Box::pin(async move {
                l.lock()
                    .map_err(|e| e.to_string())?
                    .push(format!("validator {}", ctx.args.join(" ")));
                if n < fail_first {
                    Err(format!("attempt {n} fails").into())
                } else {
                    Ok(())
                }
            })
        }),
    );
    r.register(
        "exporter",
        Arc::new(move |mut ctx: AgentContext| -> AgentFuture {
            let l = log.clone();
            Box::pin(async move {
                l.lock().map_err(|e| e.to_string())?.push("exporter".into());
                while !*ctx.shutdown.borrow_and_update() {
                    if ctx.shutdown.changed().await.is_err() {
                        break;
                    }
                }
                Ok(())
            })
        }),
    );
    r
}

fn pod(name: &str, policy: &str) -> Res<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "h100-80gb-0", "restartPolicy": policy,
                 "initContainers": [
                     {"name": "plain", "image": "busybox", "command": ["sh", "-c", "true"]},
                     {"name": "driver-validation", "image": "gantry", "command": ["gantry"],
                      "args": ["node", "validator", "--component", "driver"]}],
                 "containers": [{"name": "main", "image": "gantry", "command": ["gantry"],
                                 "args": ["node", "exporter"]}]}
    }))?)
}

fn status(p: &Pod) -> Value {
    serde_json::to_value(p.status.clone()).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_and_restart_with_backoff() -> Res<()> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(AtomicU32::new(0));
    let env = Cluster::builder()
        .nodes("1xH100-80GB:8")
        .agents(registry(log.clone(), calls.clone(), 2))
        .start()
        .await?;
    let client = env.client().clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("op", "Always")?)
        .await?;

    // The failing init container crash-loops while the pod stays Pending and uninitialized.
    eventually_secs("init container in back-off", 60, || async {
        let Ok(p) = pods.get("op").await else {
            return false;
        };
        let s = status(&p);
        let i = &s["initContainerStatuses"];
        if i[1]["state"]["waiting"]["reason"] != "CrashLoopBackOff" {
            return false;
        }
        assert_eq!(s["phase"], "Pending");
        assert_eq!(i[0]["state"]["terminated"]["reason"], "Completed");
        assert_eq!(i[1]["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        true
    })
    .await?;

    eventually_secs("pod running after its init containers", 60, || async {
        pods.get("op").await.is_ok_and(|p| {
            let s = status(&p);
            s["phase"] == "Running" && s["containerStatuses"][0]["state"]["running"].is_object()
        })
    })
    .await?;
    let s = status(&pods.get("op").await?);
    let inits = s["initContainerStatuses"]
        .as_array()
        .ok_or("no init statuses")?;
    assert_eq!(inits.len(), 2);
    for i in inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
    }
    assert_eq!(inits[1]["restartCount"], 2);
    assert_eq!(inits[0]["restartCount"], 0);
    let initialized = s["conditions"]
        .as_array()
        .ok_or("no conditions")?
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    assert!(initialized, "{s}");
    // The kubelet reports Running before the main container's agent starts: wait for it.
    eventually_secs("the exporter agent started", 60, || async {
        let log = log.lock().map_err(|e| e.to_string())?.clone();
        Res::Ok(if log.last().is_some_and(|l| l == "exporter") {
            Look::Done(())
        } else {
            Look::Seen(format!("log {log:?}"))
        })
    })
    .await?;
    let log = log.lock().map_err(|e| e.to_string())?.clone();
    assert_eq!(
        log,
        [
            "validator --component driver",
            "validator --component driver",
            "validator --component driver",
            "exporter"
        ]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_init_container_fails_a_never_restart_pod() -> Res<()> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let env = Cluster::builder()
        .nodes("1xH100-80GB:8")
        .agents(registry(log.clone(), Arc::new(AtomicU32::new(0)), u32::MAX))
        .start()
        .await?;
    let client = env.client().clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("once", "Never")?)
        .await?;
    eventually_secs("pod failed", 60, || async {
        pods.get("once")
            .await
            .is_ok_and(|p| status(&p)["phase"] == "Failed")
    })
    .await?;
    let s = status(&pods.get("once").await?);
    assert_eq!(
        s["initContainerStatuses"][1]["state"]["terminated"]["exitCode"],
        1
    );
    assert_eq!(
        s["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let log = log.lock().map_err(|e| e.to_string())?.clone();
    assert_eq!(log, ["validator --component driver"]);
    Ok(())
}

/// A main container that fails is started again from what the kubelet kept of the admitted
/// pod: its args, its env, and the downward API's `status.podIP` / `status.hostIP`, which are
/// the IPs this kubelet gave the pod (the pod as it arrived had none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_container_runs_again_with_its_env_and_the_pods_ips() -> Res<()> {
    let runs = Arc::new(Mutex::new(Vec::<(Vec<String>, Vec<Option<String>>)>::new()));
    let mut agents = AgentRegistry::new();
    let seen = runs.clone();
    agents.register(
        "exporter",
        Arc::new(move |mut ctx: AgentContext| -> AgentFuture {
            let seen = seen.clone();
            Box::pin(async move {
                let env = ["POD_IP", "HOST_IP", "MY_NAME", "PLAIN"]
                    .map(|k| ctx.env.get(k).cloned())
                    .to_vec();
                let n = {
                    let mut r = seen.lock().map_err(|e| e.to_string())?;
                    r.push((ctx.args.clone(), env));
                    r.len()
                };
                if n == 1 {
                    return Err("the first run fails".into());
                }
                while !*ctx.shutdown.borrow_and_update() {
                    if ctx.shutdown.changed().await.is_err() {
                        break;
                    }
                }
                Ok(())
            })
        }),
    );
    let env = Cluster::builder()
        .nodes("1xH100-80GB:8")
        .agents(agents)
        .start()
        .await?;
    let pods: Api<Pod> = Api::namespaced(env.client().clone(), "default");
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "again", "namespace": "default"},
        "spec": {"nodeName": "h100-80gb-0",
                 "containers": [{"name": "main", "image": "gantry", "command": ["gantry"],
                                 "args": ["node", "exporter", "--web-config-file="],
                                 "env": [
                                     {"name": "POD_IP", "valueFrom": field("status.podIP")},
                                     {"name": "HOST_IP", "valueFrom": field("status.hostIP")},
                                     {"name": "MY_NAME", "valueFrom": field("metadata.name")},
                                     {"name": "PLAIN", "value": "v"}]}]}
    }))?;
    pods.create(&PostParams::default(), &p).await?;

    let s = eventually_secs("the container restarted once and runs", 60, || async {
        let s = status(&pods.get("again").await?);
        let c = &s["containerStatuses"][0];
        let n = runs.lock().map_err(|e| e.to_string())?.len();
        Res::Ok(
            if c["restartCount"] == 1 && c["state"]["running"].is_object() && n == 2 {
                Look::Done(s)
            } else {
                Look::Seen(format!("{n} runs, status {s}"))
            },
        )
    })
    .await?;
    let (pod_ip, host_ip) = (
        s["podIP"].as_str().ok_or("no podIP")?,
        s["hostIP"].as_str().ok_or("no hostIP")?,
    );
    let runs = runs.lock().map_err(|e| e.to_string())?.clone();
    for (args, env) in &runs {
        assert_eq!(args, &["--web-config-file="]);
        assert_eq!(
            env,
            &[
                Some(pod_ip.to_string()),
                Some(host_ip.to_string()),
                Some("again".to_string()),
                Some("v".to_string())
            ]
        );
    }
    Ok(())
}
