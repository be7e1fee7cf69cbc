//! `gantry explain pod NAMESPACE/NAME`: why a pod is pending (queue, fair share, per node);
//! `gantry explain queues`: the queue tree with fair share and allocation.

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum ExplainCommand {
    /// Queue, fair share and usage, the scheduler's reason, and why each node was rejected.
    Pod(PodArgs),
    /// The queue tree: quota, deserved, fair share, allocated and requested GPUs per queue,
    /// as the scheduler last wrote them in each Queue's status.
    Queues(QueuesArgs),
}

#[derive(clap::Args)]
pub struct QueuesArgs {
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
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
    let args = match cmd {
        ExplainCommand::Pod(args) => args,
        ExplainCommand::Queues(args) => return queues(args),
    };
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

fn queues(args: QueuesArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let client = gantry_scheduler::k8s::client(args.kubeconfig.as_deref()).await?;
        print!(
            "{}",
            gantry_scheduler::k8s::explain::explain_queues(&client).await?
        );
        Ok(ExitCode::SUCCESS)
    })
}
