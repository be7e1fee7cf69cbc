//! `gantry node mig-manager` as an [`Agent`]: the daemon that follows the Node's
//! `nvidia.com/mig.config` label, or (`--config NAME`) one apply or dry run.

use std::sync::Arc;
use std::time::Duration;

use gantry_api::mig_parted::MigPartedConfig;

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use crate::args::GpuArgs;
use crate::mig::{self, ConfigSource, DaemonOptions, ReadOnly, args::MigManagerArgs, daemon};

pub struct MigManager;

pub enum Options {
    Daemon {
        daemon: DaemonOptions,
        gpu: GpuArgs,
    },
    /// `--config NAME`: apply (or, `--dry-run`, print) that layout once.
    Apply {
        name: String,
        source: ConfigSource,
        custom: Option<(String, String)>,
        dry_run: bool,
        gpu: GpuArgs,
    },
}

impl Agent for MigManager {
    const NAME: &'static str = "mig-manager";
    const ABOUT: &'static str =
        "MIG manager: plan and apply a named layout of a mig-parted config (`--dry-run` prints it)";
    type Args = MigManagerArgs;
    type Options = Options;

    fn options(args: MigManagerArgs, host: &dyn Host) -> Result<Options, AgentError> {
        let Some(name) = args.config.clone() else {
            let mut daemon = args
                .daemon_options(host.paths())
                .map_err(AgentError::failed)?;
            if host.simulated() {
                daemon.poll_interval = Duration::from_millis(200);
                daemon.clients_timeout = Duration::from_secs(60);
            }
            return Ok(Options::Daemon {
                daemon,
                gpu: args.gpu,
            });
        };
        if host.simulated() {
            // The one-shot apply is a tool run by hand, not an operand.
            return Err("mig-manager --config (apply once) is not run on simulated nodes; run it as the daemon".to_string().into());
        }
        let source = args.source(host.paths()).map_err(AgentError::failed)?;
        let custom = args.custom_layouts(&source).map_err(AgentError::failed)?;
        Ok(Options::Apply {
            name,
            source,
            custom,
            dry_run: args.dry_run,
            gpu: args.gpu,
        })
    }

    fn run(o: Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        Box::pin(async move {
            match o {
                Options::Daemon { daemon, gpu } => {
                    let backend = host.gpus(&gpu, "to partition")?;
                    let client = host
                        .client(None)
                        .await
                        .map_err(|e| format!("connecting to the Kubernetes API: {e}"))?;
                    mig::run(daemon, backend, client, shutdown)
                        .await
                        .map_err(AgentError::failed)
                }
                Options::Apply {
                    name,
                    source,
                    custom,
                    dry_run,
                    gpu,
                } => {
                    let backend = host.gpus(&gpu, "to partition")?;
                    let config = load(host.as_ref(), &source, custom.as_ref()).await?;
                    if dry_run {
                        // Only a read-only view reaches the planner: a dry run cannot change a GPU.
                        let facts = mig::observe(ReadOnly::new(backend.as_ref()))
                            .map_err(|e| format!("reading the GPUs: {e}"))?;
                        let plan = mig::plan(&config, &name, &facts)
                            .map_err(|e| format!("{source}: {e}"))?;
                        host.print(mig::render::render(&plan).trim_end());
                        return Ok(());
                    }
                    let report = mig::reconcile(backend.as_ref(), &config, &name)
                        .map_err(|e| format!("applying MIG config {name:?} from {source}: {e}"))?;
                    host.print(&if report.changed.is_empty() {
                        format!("MIG config {name:?} already applied")
                    } else {
                        format!("MIG config {name:?} applied to GPU(s) {:?}", report.changed)
                    });
                    Ok(())
                }
            }
        })
    }
}

/// The mig-parted config of `source`: a plain file needs no cluster (the dry run on a bare
/// machine); a ConfigMap is read through the API, the custom layouts merged in.
async fn load(
    host: &dyn Host,
    source: &ConfigSource,
    custom: Option<&(String, String)>,
) -> Result<MigPartedConfig, AgentError> {
    match source {
        ConfigSource::File(p) => {
            let path = p.display().to_string();
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("reading mig-parted config {path}: {e}"))?;
            Ok(serde_yaml::from_str(&text)
                .map_err(|e| format!("parsing mig-parted config {path}: {e}"))?)
        }
        ConfigSource::ConfigMap { .. } => {
            let client = host
                .client(None)
                .await
                .map_err(|e| format!("connecting to the Kubernetes API: {e}"))?;
            Ok(daemon::load_config(&client, source, custom).await?)
        }
    }
}
