//! The operator and the scheduler, run in-process against the demo's cluster exactly as
//! `gantry operator` / `gantry scheduler` run them against a real one.

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::DemoError;

pub struct Components {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
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
        tasks.push(tokio::spawn(async move {
            let opts = gantry_scheduler::k8s::Options {
                leader_elect: false,
                ..Default::default()
            };
            if let Err(e) = gantry_scheduler::k8s::run(client, opts, rx).await {
                tracing::error!(error = %e, "scheduler stopped");
            }
        }));
        Ok(Components { stop, tasks })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), t).await;
        }
    }
}
