//! `gantry node discovery` (GPU Feature Discovery) as an [`Agent`].

use std::sync::Arc;

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use crate::args::GpuArgs;
use crate::discovery::{self, DiscoveryOptions, args::DiscoveryArgs};

pub struct Discovery;

pub struct Options {
    discovery: DiscoveryOptions,
    gpu: GpuArgs,
    fail_on_init_error: bool,
    /// `--print`: compute the labels once and print them.
    print: bool,
}

impl Agent for Discovery {
    const NAME: &'static str = "discovery";
    const ABOUT: &'static str =
        "GPU Feature Discovery: compute the `nvidia.com/gpu.*` node labels and apply them";
    type Args = DiscoveryArgs;
    type Options = Options;

    fn options(args: DiscoveryArgs, host: &dyn Host) -> Result<Options, AgentError> {
        Ok(Options {
            discovery: args.options(host.paths()).map_err(AgentError::failed)?,
            gpu: args.gpu,
            fail_on_init_error: args.fail_on_init_error,
            print: args.print,
        })
    }

    fn run(o: Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        Box::pin(async move {
            let backend = match host.gpus(&o.gpu, "to discover") {
                Ok(b) => b,
                // GFD_FAIL_ON_INIT_ERROR=false: upstream logs the error and idles until stopped.
                Err(e) if !o.fail_on_init_error && !o.print => {
                    tracing::error!("{e}; idling (--fail-on-init-error=false)");
                    shutdown.await;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            if o.print {
                let labels = discovery::labels_once(&o.discovery, backend.as_ref())
                    .map_err(AgentError::failed)?;
                for line in discovery::render(&labels).lines() {
                    host.print(line);
                }
                return Ok(());
            }
            let client = host.client(None).await?;
            discovery::run(o.discovery, backend, client, shutdown)
                .await
                .map_err(AgentError::failed)
        })
    }
}
