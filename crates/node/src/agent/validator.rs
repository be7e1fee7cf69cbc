//! `gantry node validator` as an [`Agent`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use crate::args::GpuArgs;
use crate::validator::{
    self, ClusterView, KubeView, Mode, Seams, ValidatorOptions, args::ValidatorArgs,
};

/// The longest `--wait` / `--wait-for` poll period on a simulated node (upstream: 5 s).
pub const SIM_VALIDATOR_RETRY: Duration = Duration::from_secs(1);

pub struct Validator;

pub struct Options {
    validator: ValidatorOptions,
    gpu: GpuArgs,
    namespace: Option<String>,
    kubeconfig: Option<PathBuf>,
}

impl Agent for Validator {
    const NAME: &'static str = "validator";
    const ABOUT: &'static str = "Validate a layer of the node's GPU stack and write its ready file (or wait for one, serve the state as metrics, or idle and clean up on stop)";
    type Args = ValidatorArgs;
    type Options = Options;

    fn options(args: ValidatorArgs, host: &dyn Host) -> Result<Options, AgentError> {
        let mut validator = args.options(host.paths())?;
        if host.simulated() {
            validator.retry_interval = validator.retry_interval.min(SIM_VALIDATOR_RETRY);
        }
        Ok(Options {
            validator,
            gpu: args.gpu,
            namespace: args.namespace,
            kubeconfig: args.kubeconfig,
        })
    }

    fn run(o: Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        Box::pin(async move {
            let opts = o.validator;
            let needs_api = !matches!(opts.mode, Mode::WaitFor(_) | Mode::Idle);
            let cluster = if needs_api {
                match host.client(o.kubeconfig.as_deref()).await {
                    Ok(c) => Some(Arc::new(KubeView::new(c, o.namespace)) as Arc<dyn ClusterView>),
                    // The driver, toolkit and cuda checks work without the API (host driver).
                    Err(e) => {
                        tracing::warn!("{e}; validating without the Kubernetes API");
                        None
                    }
                }
            } else {
                None
            };
            // NVML is opened per attempt: under --wait the driver may still be loading.
            let (h, gpu) = (host.clone(), o.gpu);
            let backend: validator::BackendSource =
                Arc::new(move || h.gpus(&gpu, "(libnvidia-ml cannot load)"));
            let seams = Seams { backend, cluster };
            if opts.mode == Mode::Metrics {
                let listener = validator::metrics::bind(host.listen_address(opts.metrics_address))
                    .await
                    .map_err(AgentError::failed)?;
                host.serving(listener.local_addr().map_err(AgentError::failed)?)
                    .await?;
                return validator::metrics::serve(listener, opts, seams, shutdown)
                    .await
                    .map_err(AgentError::failed);
            }
            validator::run(opts, seams, shutdown)
                .await
                .map_err(AgentError::failed)
        })
    }
}
