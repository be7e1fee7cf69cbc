//! `gantry explain pod NAMESPACE/NAME`: why a pod is pending (queue, fair share, per node).

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum ExplainCommand {
    /// Queue, fair share and usage, the scheduler's reason, and why each node was rejected.
    Pod(PodArgs),
}

#[derive(clap::Args)]
pub struct PodArgs {
    /// NAMESPACE/NAME
    pod: String,
    #[arg(long, default_value = gantry_api::names::DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

pub fn run(cmd: ExplainCommand) -> anyhow::Result<ExitCode> {
    let ExplainCommand::Pod(args) = cmd;
    let (ns, name) = args
        .pod
        .split_once('/')
        .with_context(|| format!("pod {:?}: expected NAMESPACE/NAME", args.pod))?;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let client = gantry_scheduler::k8s::client(args.kubeconfig.as_deref()).await?;
        let out = gantry_scheduler::k8s::explain::explain_pod(
            &client,
            ns,
            name,
            &args.scheduler_name,
            gantry_api::names::DEFAULT_RESERVATION_NAMESPACE,
        )
        .await?;
        print!("{out}");
        Ok(ExitCode::SUCCESS)
    })
}
