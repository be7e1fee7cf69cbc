//! The operand containers' real command lines in the sim: the simulated kubelet parses them
//! with each agent's own flag type, env from the container. A flag the agent rejects fails the
//! container as the binary would (clap's exit code 2 and message, restarts with back-off), and
//! the operator's rendered env reaches the agent.

use gantry_api::names;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::{
    Env, Kubectl, Look, NS, Res, allocatable, condition, eventually_secs, fixture, policy_state,
};

const SPEC: &str = "1xH100-80GB:2";
const NODE: &str = "h100-80gb-0";
const PLUGIN_CONTAINER: &str = "nvidia-device-plugin";

fn policy_with(extra: serde_json::Value) -> Res<serde_json::Value> {
    let mut v = fixture("clusterpolicy-minimal.yaml")?;
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
        for (k, val) in extra {
            spec.insert(k.clone(), val.clone());
        }
    }
    Ok(v)
}

/// The device plugin pod's name and its main container's status.
async fn plugin_status(client: &kube::Client) -> Option<(String, ContainerStatus)> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .ok()?;
    pods.items.into_iter().find_map(|p| {
        let name = p.metadata.name.clone()?;
        if !name.starts_with("nvidia-device-plugin-daemonset-") {
            return None;
        }
        let cs = p
            .status?
            .container_statuses?
            .into_iter()
            .find(|c| c.name == PLUGIN_CONTAINER)?;
        Some((name, cs))
    })
}

fn describe(cs: &ContainerStatus) -> String {
    format!(
        "restarts {}, ready {}, state {:?}, lastState {:?}",
        cs.restart_count, cs.ready, cs.state, cs.last_state
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_the_agent_rejects_crash_loops_its_pod_and_the_policy_says_why() -> Res {
    let env = Env::start(SPEC).await?;
    let op = env.operator()?;
    // `spec.devicePlugin.args` go after the rendered command, as on a real cluster.
    env.create_policy(policy_with(
        json!({"devicePlugin": {"args": ["--bogus-flag"]}}),
    )?)
    .await?;

    // The container ends as the binary would: clap's usage error, exit code 2, its message in
    // the terminated state; the kubelet restarts it with back-off.
    let (pod, first) = eventually_secs(
        "the device plugin exiting 2 on --bogus-flag",
        240,
        || async {
            let Some((pod, cs)) = plugin_status(env.client()).await else {
                return Look::Seen("no device plugin pod status yet".into());
            };
            let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            match last {
                Some(t)
                    if t.exit_code == 2
                        && t.message
                            .as_deref()
                            .is_some_and(|m| m.contains("unexpected argument '--bogus-flag'"))
                        && !cs.ready =>
                {
                    Look::Done((pod, cs.restart_count))
                }
                _ => Look::Seen(describe(&cs)),
            }
        },
    )
    .await?;
    assert!(first >= 1);
    eventually_secs("the restart count to grow", 120, || async {
        match plugin_status(env.client()).await {
            Some((p, cs)) if p == pod && cs.restart_count > first && !cs.ready => Look::Done(()),
            Some((_, cs)) => Look::Seen(describe(&cs)),
            None => Look::Seen("no pod".into()),
        }
    })
    .await?;

    // The ClusterPolicy is not ready, and names the crash-looping container.
    let why = eventually_secs("the policy not ready, naming the pod", 120, || async {
        let state = policy_state(env.client(), "minimal").await;
        let ready = condition(env.client(), "minimal", "Ready").await;
        match (state.as_deref(), ready) {
            (Some("notReady"), Some((status, _, message)))
                if status == "False"
                    && message.contains("crash-looping")
                    && message.contains(&format!("{pod}/{PLUGIN_CONTAINER}")) =>
            {
                Look::Done(message)
            }
            (s, r) => Look::Seen(format!("state {s:?}, Ready {r:?}")),
        }
    })
    .await?;
    assert!(why.contains(NODE), "{why}");

    // What a person sees with kubectl.
    let k = Kubectl {
        kubeconfig: env.cp().kubeconfig_path(),
        dir: env.dir(),
    };
    let out = k
        .run(&[
            "get",
            "pod",
            "-n",
            NS,
            &pod,
            "-o",
            "jsonpath={.status.containerStatuses[0].lastState.terminated.exitCode} {.status.phase}",
        ])
        .await?;
    assert_eq!(out.trim(), "2 Running");
    op.stop().await;
    Ok(())
}

/// The env the operator renders for the device plugin (DEVICE_LIST_STRATEGY, DEVICE_ID_STRATEGY,
/// PASS_DEVICE_SPECS, through `spec.devicePlugin.env` where the user changes it) shapes what
/// the plugin's Allocate answers, which the sim records on the workload pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_plugin_env_shapes_allocate_in_the_sim() -> Res {
    let env = Env::start(SPEC).await?;
    let op = env.operator()?;
    env.create_policy(policy_with(json!({"devicePlugin": {"env": [
        {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"},
        {"name": "DEVICE_ID_STRATEGY", "value": "index"}
    ]}}))?)
    .await?;
    eventually_secs("2 GPUs advertised", 240, || async {
        let now = allocatable(env.client()).await?;
        Ok::<_, anyhow::Error>(if now == "2" {
            Look::Done(())
        } else {
            Look::Seen(now)
        })
    })
    .await?;
    let pods = Api::<Pod>::namespaced(env.client().clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cuda", "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "cuda",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let record = eventually_secs("the allocation record", 120, || async {
        let p = pods.get("cuda").await.ok()?;
        let a = p
            .metadata
            .annotations?
            .get(names::ANNOTATION_SIM_ALLOCATED)?
            .clone();
        serde_json::from_str::<serde_json::Value>(&a).ok()
    })
    .await?;
    let gpu = &record["main"]["nvidia.com/gpu"];
    // volume-mounts: the list is a mount per device, the env points at their directory.
    assert_eq!(
        gpu["envs"]["NVIDIA_VISIBLE_DEVICES"], "/var/run/nvidia-container-devices",
        "{record}"
    );
    // index: the container's list names the device by its index, not its UUID (the kubelet
    // still knows it by the UUID the plugin advertises).
    let mount = gpu["mounts"][0]["containerPath"]
        .as_str()
        .unwrap_or_default();
    let id = mount
        .strip_prefix("/var/run/nvidia-container-devices/")
        .unwrap_or_default()
        .to_string();
    assert!(id == "0" || id == "1", "{record}");
    assert!(
        gpu["deviceIDs"][0]
            .as_str()
            .is_some_and(|u| u.starts_with("GPU-")),
        "{record}"
    );
    // PASS_DEVICE_SPECS=true (rendered by the operator): the device nodes are passed.
    let devices: Vec<&str> = gpu["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["containerPath"].as_str())
        .collect();
    assert!(devices.contains(&"/dev/nvidiactl"), "{record}");
    assert!(
        devices.contains(&format!("/dev/nvidia{id}").as_str()),
        "{record}"
    );
    op.stop().await;
    Ok(())
}
