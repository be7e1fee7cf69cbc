//! Issue #20 point 4, in the sim: a `gpu-fraction: 0.5` pod the user did not edit gets its
//! GPU the way KAI's pods do on a real node. The admission webhook (`gantry admission`,
//! called by the sim API server over HTTPS like the real one) adds the ConfigMap references;
//! the binder writes the share (the reservation pod's GPU UUID, the portion, the memory limit);
//! the kubelet builds the container's environment from them, and the container's
//! `nvidia-smi -L` lists exactly the reserved GPU.

use crate::cluster::{Cluster, Result, eventually_secs};
use base64::Engine;
use gantry_api::names;
use gantry_scheduler::k8s::admission::AdmissionConfig;
use gantry_scheduler::k8s::webhook;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use serde_json::json;

const FRACTION: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  generateName: infer-
  labels: {kai.scheduler/queue: default-queue}
  annotations: {gpu-fraction: "0.5"}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
    command: [sh, -c, "nvidia-smi -L; printenv GPU_PORTION GPU_MEMORY_LIMIT; sleep infinity"]
"#;

fn webhook_config(url: &str, ca_pem: &str, policy: &str) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gantry-admission"},
        "webhooks": [{
            "name": "gpu-sharing.gantry.dev",
            "clientConfig": {"url": url,
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "failurePolicy": policy, "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
        }],
    }))
    .expect("static webhook configuration")
}

async fn create_fraction(c: &Cluster) -> std::result::Result<Pod, kube::Error> {
    let pod: Pod = serde_yaml::from_str(FRACTION).expect("static pod");
    Api::<Pod>::namespaced(c.client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fraction_pod_sees_exactly_its_reserved_gpu_and_its_share() -> Result {
    let c = Cluster::start("1xH100-80GB:2").await?;
    let (stop, handle) = c.scheduler(c.options());
    // The webhook, with a CA the API server is told to trust.
    let tls = gantry_sim::tls::generate()?;
    let (stop_hook_tx, stop_hook) = tokio::sync::watch::channel(false);
    let cfg = webhook::tls_config(&tls.cert_pem, &tls.key_pem, "generated")?;
    let (addr, serve) = webhook::bind(
        "127.0.0.1:0".parse()?,
        cfg,
        AdmissionConfig::default(),
        stop_hook,
    )
    .await?;
    let served = tokio::spawn(serve);
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(c.client.clone());
    let url = format!("https://127.0.0.1:{}/mutate-pod", addr.port());
    hooks
        .create(
            &PostParams::default(),
            &webhook_config(&url, &tls.ca_pem, "Fail"),
        )
        .await?;
    eventually_secs("default queue", 60, || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;

    // Created as the user wrote it; admitted with the references.
    let created = create_fraction(&c).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let prefix = created
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_SHARED_GPU_CONFIGMAP))
        .cloned()
        .ok_or("the webhook set no ConfigMap prefix")?;
    assert!(
        prefix.starts_with("infer-") && prefix.ends_with("-shared-gpu"),
        "{prefix}"
    );
    let spec = created.spec.as_ref().ok_or("no spec")?;
    assert_eq!(spec.runtime_class_name.as_deref(), Some("nvidia"));
    let env = spec.containers[0].env.clone().unwrap_or_default();
    let refs: Vec<String> = env
        .iter()
        .filter_map(|e| e.value_from.as_ref()?.config_map_key_ref.as_ref())
        .map(|r| format!("{}/{}", r.name, r.key))
        .collect();
    assert_eq!(
        refs,
        [
            format!("{prefix}-0/NVIDIA_VISIBLE_DEVICES"),
            format!("{prefix}-0/GPU_PORTION"),
            format!("{prefix}-0/RUNAI_NUM_OF_GPUS"),
        ]
    );

    // Bound, Running, and its output names the reservation's GPU and the share.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let lines = eventually_secs("the fraction runs and prints its GPU", 90, || async {
        let p = pods.get(&name).await.ok()?;
        let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
        let log = pods.logs(&name, &LogParams::default()).await.ok()?;
        let lines: Vec<String> = log.lines().map(str::to_string).collect();
        (running && lines.len() >= 3).then_some(lines)
    })
    .await?;
    let reservations =
        Api::<Pod>::namespaced(c.client.clone(), names::DEFAULT_RESERVATION_NAMESPACE)
            .list(&ListParams::default())
            .await?;
    let uuids: Vec<String> = reservations
        .items
        .iter()
        .filter_map(gantry_scheduler::k8s::convert::reserved_uuid)
        .collect();
    assert_eq!(uuids.len(), 1, "one reserved GPU: {uuids:?}");
    assert!(
        lines[0].starts_with("GPU 0: ") && lines[0].ends_with(&format!("(UUID: {})", uuids[0])),
        "the container sees exactly the reserved GPU: {lines:?}"
    );
    assert_eq!(lines.len(), 3, "one GPU, then the two values: {lines:?}");
    assert_eq!(lines[1], "0.50");
    assert!(
        lines[2].ends_with("Mi") && lines[2] != "0Mi",
        "memory limit: {lines:?}"
    );

    // The webhook gone: with failurePolicy Fail a fraction is refused, naming the webhook.
    stop_hook_tx.send(true)?;
    served.await?;
    let refused = create_fraction(&c).await;
    match refused {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 500);
            assert!(
                s.message
                    .contains("failed calling webhook \"gpu-sharing.gantry.dev\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    stop.send(true)?;
    handle.await?;
    Ok(())
}
