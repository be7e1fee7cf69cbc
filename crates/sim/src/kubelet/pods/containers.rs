//! What one container run is: an in-process agent when its command names one (operands,
//! the driver), else a plain container that runs per the pod's sim annotations.

use std::collections::BTreeMap;

use gantry_api::names;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;

use super::annotation;
use super::lifecycle::Ctx;
use crate::kubelet::agents::{AgentContext, DRIVER, agent_command, driver_image};
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
        device_plugin_dir: ctx.node.dirs.device_plugins.clone(),
        kubelet_socket: ctx.node.dirs.kubelet_socket(),
        pod_resources_socket: ctx.node.dirs.pod_resources_socket(),
        backend: ctx.node.backend.clone(),
        client: ctx.env.client.clone(),
        args,
        env: container_env(c, pod, &ctx.node.name),
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
            .or_else(|| crate::kubelet::components::key(c))
            .and_then(|(name, args)| ctx.env.agents.get(&name).map(|r| (name, args, r))),
    };
    // Each run of the container has a log (`kubectl logs`): an agent's tracing events.
    let log = crate::logs::start(&ctx.r.uid, &c.name);
    if let Some((name, args, runner)) = agent {
        let fut = crate::logs::capture(
            log.clone(),
            runner.run(agent_context(ctx, pod, c, args, stop)),
        );
        return Box::pin(async move {
            let r = match fut.await {
                Ok(()) => (0, String::new()),
                Err(e) => {
                    // What the process would print on its way out.
                    log.push(format!("Error: {e}"));
                    (1, format!("agent {name}: {e}"))
                }
            };
            log.end_run();
            r
        });
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
pub(super) fn run_containers(
    ctx: &Ctx,
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    stop: watch::Receiver<bool>,
) -> ContainerRun {
    let futs: Vec<ContainerRun> = spec
        .containers
        .iter()
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

/// A container's env with the downward-API fields agents commonly read resolved.
fn container_env(c: &Container, pod: &Pod, node: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let v = match (&e.value, &e.value_from) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(from)) => {
                from.field_ref
                    .as_ref()
                    .and_then(|f| match f.field_path.as_str() {
                        "spec.nodeName" => Some(node.to_string()),
                        "metadata.name" => pod.metadata.name.clone(),
                        "metadata.namespace" => pod.metadata.namespace.clone(),
                        _ => None,
                    })
            }
            _ => None,
        };
        if let Some(v) = v {
            out.insert(e.name.clone(), v);
        }
    }
    out
}
