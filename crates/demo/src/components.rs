//! The operator, the scheduler and its admission webhook, run in-process against the demo's
//! cluster exactly as `gantry operator` / `gantry scheduler` / `gantry admission` run them
//! against a real one. `gantry up` starts the webhook through [`admission`] too.

use tokio::sync::watch;
use tokio::task::JoinHandle;

use gantry_scheduler::k8s::admission::AdmissionConfig;
use gantry_scheduler::k8s::webhook_local;

use crate::DemoError;

pub struct Components {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    admission: webhook_local::Local,
}

/// The GPU-sharing admission webhook for `scheduler_name`, served in-process (loopback, a
/// fresh CA) and registered with the API server: fractional pods created from now on get
/// their share's environment.
pub fn admission<'a>(
    client: kube::Client,
    scheduler_name: &'a str,
) -> futures::future::BoxFuture<'a, Result<webhook_local::Local, String>> {
    Box::pin(admission_inner(client, scheduler_name))
}

async fn admission_inner(
    client: kube::Client,
    scheduler_name: &str,
) -> Result<webhook_local::Local, String> {
    let tls = gantry_sim::tls::generate().map_err(|e| e.to_string())?;
    let certs = webhook_local::Certificates {
        ca_pem: tls.ca_pem,
        cert_pem: tls.cert_pem,
        key_pem: tls.key_pem,
    };
    let cfg = AdmissionConfig {
        scheduler_name: scheduler_name.to_string(),
        ..Default::default()
    };
    webhook_local::start(client, &certs, cfg)
        .await
        .map_err(|e| format!("starting the admission webhook: {e}"))
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

impl Components {
    pub async fn start(client: kube::Client) -> Result<Self, DemoError> {
        let (stop, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let op_client = client.clone();
        let op_stop = stopped(rx.clone());
        tasks.push(tokio::spawn(async move {
            let mut opts = gantry_operator::run::RunOptions::new(
                "gpu-operator",
                gantry_operator::run::DEFAULT_IMAGE,
            );
            opts.leader_elect = false;
            if let Err(e) = gantry_operator::run::run(op_client, opts, op_stop).await {
                tracing::error!(error = %e, "operator stopped");
            }
        }));
        let opts = gantry_scheduler::k8s::Options {
            leader_elect: false,
            ..Default::default()
        };
        let hook = admission(client.clone(), &opts.scheduler_name)
            .await
            .map_err(DemoError::Start)?;
        tasks.push(tokio::spawn(async move {
            if let Err(e) = gantry_scheduler::k8s::run(client, opts, rx).await {
                tracing::error!(error = %e, "scheduler stopped");
            }
        }));
        Ok(Components {
            stop,
            tasks,
            admission: hook,
        })
    }

    pub async fn stop(self) {
        self.admission.stop().await;
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), t).await;
        }
    }
}
