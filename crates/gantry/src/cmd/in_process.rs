//! `gantry operator` and `gantry scheduler` as the sim's kubelet runs them for pods of
//! Gantry's image (the Helm chart's Deployments): the container's args parsed by the same
//! clap definitions as the CLI, env-backed flags read from the container's env (never this
//! process's), and the component's API client authenticated as the pod's ServiceAccount.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use gantry_sim::kubelet::agents::AgentFuture;
use gantry_sim::kubelet::components::{ComponentContext, ComponentRunner};

/// A simulated pod has no network namespace of its own: metrics and health listen on a free
/// loopback port instead of the container's.
const LOOPBACK_ANY_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// The runners `gantry up` registers, by subcommand.
pub fn runners() -> BTreeMap<String, ComponentRunner> {
    let mut m: BTreeMap<String, ComponentRunner> = BTreeMap::new();
    m.insert("operator".into(), Arc::new(operator));
    m.insert("scheduler".into(), Arc::new(scheduler));
    m
}

/// Parse `gantry <sub> ARGS` with `A`'s flags; a flag with `env = VAR` not given on the
/// command line takes `env[VAR]` (clap's precedence: flag, then env, then default).
pub fn parse<A: clap::Args + clap::FromArgMatches>(
    sub: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<A, String> {
    let cmd = A::augment_args(clap::Command::new("gantry"));
    let mut from_env = Vec::new();
    for a in cmd.get_arguments() {
        let (Some(var), Some(long)) = (a.get_env(), a.get_long()) else {
            continue;
        };
        let flag = format!("--{long}");
        let given = args
            .iter()
            .any(|x| *x == flag || x.starts_with(&format!("{flag}=")));
        if let Some(v) = env.get(var.to_string_lossy().as_ref()).filter(|_| !given) {
            from_env.push(format!("{flag}={v}"));
        }
    }
    let cmd = cmd.mut_args(|a| a.env(clap::builder::Resettable::Reset));
    let words = std::iter::once(sub.to_string())
        .chain(args.iter().cloned())
        .chain(from_env);
    let m = cmd
        .try_get_matches_from(words)
        .map_err(|e| e.render().to_string().trim().to_string())?;
    A::from_arg_matches(&m).map_err(|e| e.to_string())
}

fn operator(ctx: ComponentContext) -> AgentFuture {
    Box::pin(async move {
        let args: super::operator::Args = parse("operator", &ctx.args, &ctx.env)?;
        let mut opts = super::operator::options(&args);
        opts.metrics_address = Some(LOOPBACK_ANY_PORT);
        opts.identity = ctx.pod_name.clone();
        let mut stop = ctx.shutdown;
        let stop = async move {
            let _ = stop.wait_for(|v| *v).await;
        };
        gantry_operator::run::run(ctx.client, opts, stop)
            .await
            .map_err(|e| e.to_string())
    })
}

fn scheduler(ctx: ComponentContext) -> AgentFuture {
    Box::pin(async move {
        let args: super::scheduler::Args = parse("scheduler", &ctx.args, &ctx.env)?;
        let mut opts = super::scheduler::options(&args);
        opts.metrics_address = Some(LOOPBACK_ANY_PORT);
        opts.identity = ctx.pod_name.clone();
        gantry_scheduler::k8s::run(ctx.client, opts, ctx.shutdown)
            .await
            .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Args, Debug)]
    struct A {
        #[arg(long, env = "NS_VAR", default_value = "dflt")]
        namespace: String,
        #[arg(long, default_value_t = 1)]
        n: u32,
    }

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn flags_then_container_env_then_defaults() {
        let a: A = parse("x", &[], &env(&[])).unwrap();
        assert_eq!((a.namespace.as_str(), a.n), ("dflt", 1));
        let a: A = parse("x", &["--n=3".into()], &env(&[("NS_VAR", "from-env")])).unwrap();
        assert_eq!((a.namespace.as_str(), a.n), ("from-env", 3));
        let a: A = parse(
            "x",
            &["--namespace".into(), "flag".into()],
            &env(&[("NS_VAR", "e")]),
        )
        .unwrap();
        assert_eq!(a.namespace, "flag");
        let err = parse::<A>("x", &["--bogus".into()], &env(&[])).unwrap_err();
        assert!(err.contains("--bogus"), "{err}");
    }
}
