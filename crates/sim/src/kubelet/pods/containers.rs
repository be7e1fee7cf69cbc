//! What one container run is: an in-process agent when its command names one (operands,
//! the driver), else a plain container that runs per the pod's sim annotations.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gantry_api::names;
use gantry_node::host::HostPaths;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;

use super::ctx::{Ctx, HostVolumes};
use crate::kubelet::in_process::{AgentContext, DRIVER, agent_command, driver_image};
use crate::kubelet::node_dirs::NodeDirs;
/// One container's run: its exit code and a message.
pub(super) type ContainerRun =
    std::pin::Pin<Box<dyn std::future::Future<Output = (i32, String)> + Send>>;

/// What a container that is not an in-process agent does.
#[derive(Clone, Copy)]
pub(super) enum PlainRun {
    /// Completes at once (plain init containers).
    Immediate,
    /// Runs for the pod's `sim.gantry.dev/run-time` (forever without it), then exits with
    /// `sim.gantry.dev/exit-code`.
    Annotated,
}

/// The in-process context for a runner-run container.
fn agent_context(
    ctx: &Ctx,
    pod: &Pod,
    c: &Container,
    args: Vec<String>,
    stop: watch::Receiver<bool>,
) -> AgentContext {
    AgentContext {
        node_name: ctx.node.name.clone(),
        host_root: ctx.node.dirs.host_root.clone(),
        paths: host_paths(&ctx.host_volumes, c, &ctx.node.dirs),
        device_plugin_dir: ctx.node.dirs.device_plugins.clone(),
        kubelet_socket: ctx.node.dirs.kubelet_socket(),
        pod_resources_socket: ctx.node.dirs.pod_resources_socket(),
        backend: ctx.node.backend.clone(),
        client: ctx.env.client.clone(),
        args,
        env: container_env(ctx, c, pod),
        pod_name: ctx.r.name.clone(),
        pod_namespace: ctx.r.namespace.clone(),
        shutdown: stop,
        image: c.image.clone().unwrap_or_default(),
        driver_fail: ctx.node.driver_fail.subscribe(),
    }
}

/// One container's run: its runner in-process when it has one, else the plain behaviour.
pub(super) fn container_run(
    ctx: &Ctx,
    pod: &Pod,
    c: &Container,
    stop: watch::Receiver<bool>,
    plain: PlainRun,
) -> ContainerRun {
    let agent = match driver_image(c) {
        Some(_) => ctx
            .env
            .agents
            .get(DRIVER)
            .map(|r| (DRIVER.to_string(), Vec::new(), r)),
        // Node agents (`gantry node <agent>`), else Gantry's components (`gantry operator`).
        None => agent_command(c)
            .or_else(|| crate::kubelet::component_pods::key(c))
            .and_then(|(name, args)| ctx.env.agents.get(&name).map(|r| (name, args, r))),
    };
    // Each run of the container has a log (`kubectl logs`): an agent's tracing events.
    let log = crate::logs::start(&ctx.r.uid, &c.name);
    if let Some((name, args, runner)) = agent {
        let policy = c.termination_message_policy.clone();
        let fut = crate::logs::capture(
            log.clone(),
            runner.run(agent_context(ctx, pod, c, args, stop)),
        );
        return Box::pin(async move {
            let r = match fut.await {
                Ok(()) => (0, String::new()),
                Err(exit) => {
                    // What the process would print on its way out: clap prints its own
                    // message (`error: …`), `gantry` prefixes an error with `Error:`.
                    let printed = if exit.code == 1 {
                        format!("Error: {}", exit.message)
                    } else {
                        exit.message.clone()
                    };
                    for line in printed.lines() {
                        log.push(line.to_string());
                    }
                    tracing::debug!(agent = %name, code = exit.code, "agent container ended");
                    (exit.code, termination_message(policy.as_deref(), &printed))
                }
            };
            log.end_run();
            r
        });
    }
    // What the container's command prints (`nvidia-smi -L`, `env`, …), as the runtime would
    // have set it up: the device plugins' env, then the pod spec's (which wins).
    let mut env = crate::kubelet::lock::lock(&ctx.device_env)
        .get(&c.name)
        .cloned()
        .unwrap_or_default();
    env.extend(container_env(ctx, c, pod));
    let gpus: Vec<gantry_gpu::DeviceInfo> = ctx
        .node
        .backend
        .as_ref()
        .map(|b| {
            use gantry_gpu::Backend;
            let n = b.device_count().unwrap_or(0);
            (0..n).filter_map(|i| b.device_info(i).ok()).collect()
        })
        .unwrap_or_default();
    for line in crate::kubelet::tools::output(&crate::kubelet::tools::command_line(c), &env, &gpus)
    {
        log.push(line);
    }
    if let PlainRun::Immediate = plain {
        log.end_run();
        return Box::pin(async { (0, String::new()) });
    }
    let run_time = annotation(pod, names::ANNOTATION_SIM_RUN_TIME).map(|d| {
        gantry_k8s_rules::duration::parse_std_duration(d.trim()).map_err(|e| e.to_string())
    });
    let exit_code = annotation(pod, names::ANNOTATION_SIM_EXIT_CODE)
        .and_then(|c| c.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let mut stop = stop;
    Box::pin(async move {
        let run = async {
            match run_time {
                Some(Ok(d)) => {
                    tokio::time::sleep(d).await;
                    (exit_code, String::new())
                }
                Some(Err(e)) => (
                    1,
                    format!("annotation {}: {e}", names::ANNOTATION_SIM_RUN_TIME),
                ),
                // No run time: runs until deleted.
                None => std::future::pending().await,
            }
        };
        // A plain container stops at once when asked (SIGTERM honoured: exit 0).
        let stopped = async {
            while !*stop.borrow_and_update() {
                if stop.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let r = tokio::select! {
            r = run => r,
            () = stopped => (0, String::new()),
        };
        log.end_run();
        r
    })
}

/// Run every main container of the pod once; returns the pod's exit code (first non-zero)
/// and a message.
pub(super) fn run_containers(ctx: &Ctx, pod: &Pod, stop: watch::Receiver<bool>) -> ContainerRun {
    let futs: Vec<ContainerRun> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| container_run(ctx, pod, c, stop.clone(), PlainRun::Annotated))
        .collect();
    Box::pin(async move {
        futures::future::join_all(futs)
            .await
            .into_iter()
            .find(|(code, _)| *code != 0)
            .unwrap_or((0, String::new()))
    })
}

/// The terminated state's message of a container that failed having printed `printed`: with
/// `terminationMessagePolicy: FallbackToLogsOnError` the kubelet uses the log's tail (80 lines,
/// 2048 bytes at most); with `File` (the default) the termination-log file, which no agent
/// writes.
fn termination_message(policy: Option<&str>, printed: &str) -> String {
    if policy != Some("FallbackToLogsOnError") {
        return String::new();
    }
    let lines: Vec<&str> = printed.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    let mut cut = tail.len().saturating_sub(2048);
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    tail[cut..].to_string()
}

/// A container's env as the kubelet gives it (sources read when the pod started).
fn container_env(ctx: &Ctx, c: &Container, pod: &Pod) -> BTreeMap<String, String> {
    let sources = crate::kubelet::lock::lock(&ctx.sources);
    crate::kubelet::env::resolve(c, pod, &ctx.node.name, &sources).unwrap_or_default()
}

/// Where the kubelet keeps its own directories on a host, and where the sim keeps them (short
/// paths: unix socket paths are limited to 108 bytes).
fn kubelet_dirs(dirs: &NodeDirs) -> [(PathBuf, PathBuf); 2] {
    [
        (
            PathBuf::from("/var/lib/kubelet/device-plugins"),
            dirs.device_plugins.clone(),
        ),
        (
            PathBuf::from("/var/lib/kubelet/pod-resources"),
            dirs.pod_resources.clone(),
        ),
    ]
}

/// The container's paths on the simulated node: its hostPath mounts (with `subPath`), then
/// host paths under the node's host dir, the kubelet's directories where the node keeps them.
fn host_paths(volumes: &HostVolumes, c: &Container, dirs: &NodeDirs) -> HostPaths {
    let mounts = c
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let host = volumes.path(&m.name)?;
            let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => host.join(sub),
                None => host.to_path_buf(),
            };
            Some((PathBuf::from(&m.mount_path), host))
        })
        .collect();
    let mut host: Vec<(PathBuf, PathBuf)> = kubelet_dirs(dirs).into();
    host.push((PathBuf::from("/"), dirs.host_root.clone()));
    HostPaths::new(mounts, host)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn container_paths_follow_its_host_path_mounts() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "volumes": [
                {"name": "host-root", "hostPath": {"path": "/"}},
                {"name": "plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                {"name": "cfg", "configMap": {"name": "c"}}]}
        }))
        .unwrap();
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [
                {"name": "host-root", "mountPath": "/host"},
                {"name": "plugins", "mountPath": "/dp"},
                {"name": "cfg", "mountPath": "/config"}]
        }))
        .unwrap();
        let dirs = NodeDirs::new(Path::new("/sim"), "n1");
        let volumes = HostVolumes::of(pod.spec.as_ref().unwrap());
        let paths = host_paths(&volumes, &c, &dirs);
        let at = |p: &str| paths.resolve(Path::new(p));
        assert_eq!(at("/host"), Path::new("/sim/n1"));
        assert_eq!(
            at("/host/etc/containerd"),
            Path::new("/sim/n1/etc/containerd")
        );
        assert_eq!(
            at("/dp/kubelet.sock"),
            dirs.device_plugins.join("kubelet.sock")
        );
        // Unmounted (or not a hostPath): a host path.
        assert_eq!(at("/config/x"), Path::new("/sim/n1/config/x"));
        assert_eq!(
            at("/var/lib/kubelet/pod-resources/kubelet.sock"),
            dirs.pod_resources_socket()
        );
    }

    #[test]
    fn termination_message_follows_the_policy() {
        let printed = "error: unexpected argument '--x' found\n\nUsage: a";
        assert_eq!(termination_message(None, printed), "");
        assert_eq!(termination_message(Some("File"), printed), "");
        assert_eq!(
            termination_message(Some("FallbackToLogsOnError"), printed),
            printed
        );
        let long: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let m = termination_message(Some("FallbackToLogsOnError"), &long);
        assert!(m.len() <= 2048 && m.ends_with("line 199"), "{m}");
    }
}
