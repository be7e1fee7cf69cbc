//! `gantry operator`, `gantry scheduler`, `gantry admission` and `gantry crds --apply` as the sim's
//! kubelet runs them for pods of Gantry's image (the Helm chart's Deployments and its CRD upgrade
//! hook Job): the container's args parsed by the same clap definitions as the CLI, env-backed
//! flags read from the container's env (never this process's), and the component's API client
//! authenticated as the pod's ServiceAccount.
//! The admission webhook serves its container port on a loopback port of its own, published
//! on its pod, so the API server reaches it through the chart's Service.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use gantry_sim::kubelet::component_pods::{ComponentContext, ComponentRunner};
use gantry_sim::kubelet::in_process::AgentFuture;

/// A simulated pod has no network namespace of its own: metrics and health listen on a free
/// loopback port instead of the container's.
const LOOPBACK_ANY_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// The runners `gantry up` registers, by subcommand.
pub fn runners() -> BTreeMap<String, ComponentRunner> {
    let mut m: BTreeMap<String, ComponentRunner> = BTreeMap::new();
    m.insert("operator".into(), Arc::new(operator));
    m.insert("scheduler".into(), Arc::new(scheduler));
    m.insert("admission".into(), Arc::new(admission));
    m.insert("crds".into(), Arc::new(crds));
    m
}

/// The chart's pre-upgrade hook: `gantry crds --apply` as the hook's ServiceAccount.
fn crds(ctx: ComponentContext) -> AgentFuture {
    Box::pin(async move {
        let args: super::crds::Args = gantry_node::args::parse("gantry", &ctx.args, &ctx.env)?;
        if !args.apply {
            return Err("in a pod, gantry crds only runs with --apply".into());
        }
        super::crds::apply_with(ctx.client("crds")?)
            .await
            .map(drop)
            .map_err(|e| format!("{e:#}").into())
    })
}

fn operator(ctx: ComponentContext) -> AgentFuture {
    Box::pin(async move {
        let args: super::operator::Args = gantry_node::args::parse("gantry", &ctx.args, &ctx.env)?;
        let client = ctx.client("operator")?;
        let mut opts = super::operator::options(&args);
        opts.metrics_address = Some(LOOPBACK_ANY_PORT);
        opts.identity = ctx.pod_name.clone();
        let mut stop = ctx.shutdown;
        let stop = async move {
            let _ = stop.wait_for(|v| *v).await;
        };
        gantry_operator::run::run(client, opts, stop)
            .await
            .map_err(|e| e.to_string().into())
    })
}

fn scheduler(ctx: ComponentContext) -> AgentFuture {
    Box::pin(async move {
        let args: super::scheduler::Args = gantry_node::args::parse("gantry", &ctx.args, &ctx.env)?;
        let mut opts = super::scheduler::options(&args).map_err(|e| format!("{e:#}"))?;
        opts.metrics_address = Some(LOOPBACK_ANY_PORT);
        opts.identity = ctx.pod_name.clone();
        gantry_scheduler::k8s::run(ctx.client("scheduler")?, opts, ctx.shutdown)
            .await
            .map_err(|e| e.to_string().into())
    })
}

fn admission(ctx: ComponentContext) -> AgentFuture {
    Box::pin(async move {
        let args: super::admission::Args = gantry_node::args::parse("gantry", &ctx.args, &ctx.env)?;
        let (tls, cfg) = args.server().map_err(|e| e.to_string())?;
        let (addr, serve) =
            gantry_scheduler::k8s::webhook::bind(LOOPBACK_ANY_PORT, tls, cfg, ctx.shutdown.clone())
                .await
                .map_err(|e| e.to_string())?;
        ctx.ports.publish(args.address().port(), addr).await?;
        tracing::info!(%addr, container_port = args.address().port(), "admission webhook serving");
        serve.await;
        Ok(())
    })
}
