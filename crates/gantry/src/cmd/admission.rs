//! `gantry admission`: the mutating webhook that gives fractional-GPU pods their share's
//! environment (KAI's GPU-sharing admission), served over TLS from a `kubernetes.io/tls`
//! Secret mounted at `--cert-dir`.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use gantry_scheduler::k8s::admission::AdmissionConfig;
use gantry_scheduler::k8s::webhook;

#[derive(clap::Args)]
pub struct Args {
    /// HTTPS address the API server calls (`POST /mutate-pod`; `/healthz` for probes).
    #[arg(long, default_value = "0.0.0.0:9443")]
    address: SocketAddr,
    /// Directory holding `tls.crt` and `tls.key`.
    #[arg(long, default_value = "/etc/gantry/webhook-certs")]
    cert_dir: PathBuf,
    /// Only pods with this `spec.schedulerName` are changed.
    #[arg(long, default_value = gantry_api::names::DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// RuntimeClass set on fractional pods that name none; empty: leave it unset.
    #[arg(long, default_value = gantry_api::names::RUNTIME_CLASS_NVIDIA)]
    runtime_class: String,
}

impl Args {
    /// The address and port the container serves on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The serving certificate (`tls.crt`, `tls.key` under `--cert-dir`) and what to inject.
    pub fn server(&self) -> Result<(webhook::ServerTls, AdmissionConfig), webhook::WebhookError> {
        let tls = webhook::tls_config_from_dir(&self.cert_dir)?;
        let cfg = AdmissionConfig {
            scheduler_name: self.scheduler_name.clone(),
            runtime_class: Some(self.runtime_class.clone()).filter(|r| !r.is_empty()),
        };
        Ok((tls, cfg))
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (tls, cfg) = args.server()?;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let (addr, serve) = webhook::bind(args.address, tls, cfg, rx).await?;
        tracing::info!(%addr, "admission webhook serving");
        tokio::spawn(async move {
            gantry_runtime::shutdown::signal().await;
            let _ = tx.send(true);
        });
        serve.await;
        Ok(ExitCode::SUCCESS)
    })
}
