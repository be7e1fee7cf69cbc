//! The demo's phases. Every step goes through the real code paths: manifests are applied to
//! the API server, the operator and the scheduler react, the simulated kubelets run what
//! they are given. The demo only applies, waits and reports.

use std::time::{Duration, Instant};

use gantry_sim::cluster::Up;
use gantry_sim::nodes::NodePlan;
use gantry_sim::ui::{Collector, UiServer};
use gantry_sim::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::components::Components;
use crate::frames::Frame;
use crate::steps::{Run, role};
use crate::story::story;
use crate::summary::{self, Summary};
use crate::view::{self, Update};
use crate::{DemoError, DemoOptions};

pub(crate) const PHASES: usize = 10;

/// A finished demo whose cluster is still up (for `--keep` and for tests).
pub struct Demo {
    pub cp: ControlPlane,
    pub up: Up,
    pub client: kube::Client,
    pub collector: Collector,
    pub ui: Option<UiServer>,
    pub plan: Vec<NodePlan>,
    /// Every frame the demo showed, in order (the plain output prints each one).
    pub frames: Vec<Frame>,
    components: Components,
    collect_task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Demo {
    /// Stop everything in dependency order, every API client before the API server, so
    /// no watch or request sees the server go away (a clean run ends silently).
    pub async fn shutdown(self) {
        tracing::debug!("demo shutdown: components");
        self.components.stop().await;
        tracing::debug!("demo shutdown: collector and web view");
        self.collect_task.abort();
        let _ = self.collect_task.await;
        drop(self.ui);
        tracing::debug!("demo shutdown: nodes");
        drop(self.up);
        tracing::debug!("demo shutdown: control plane");
        self.cp.shutdown().await;
        tracing::debug!("demo shutdown: done");
    }
}

/// Run the whole demo. On success the cluster is left running in the returned [`Demo`].
// A plain fn returning a boxed future: the body compiles once, here, not again in
// every crate that awaits it (docs/benchmarks.md, "Build time").
pub fn run(
    opts: DemoOptions,
) -> futures::future::BoxFuture<'static, Result<(Demo, Summary), DemoError>> {
    Box::pin(run_inner(opts))
}

async fn run_inner(opts: DemoOptions) -> Result<(Demo, Summary), DemoError> {
    let plan = gantry_sim::nodes::plan(&opts.nodes)
        .map_err(|e| DemoError::Start(format!("--nodes {:?}: {e}", opts.nodes)))?;
    let t0 = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions {
        port: opts.port,
        kubeconfig: Some(opts.kubeconfig.clone()),
        ..Default::default()
    })
    .await
    .map_err(|e| DemoError::Start(format!("starting the control plane: {e}")))?;
    let client = cp
        .client()
        .map_err(|e| DemoError::Start(format!("client for the control plane: {e}")))?;
    // A directory of its own for the nodes' host dirs and control socket, so a demo runs
    // beside a `gantry up` (or another demo) without sharing sockets.
    let dir = tempfile::Builder::new()
        .prefix("gantry-demo-")
        .tempdir()
        .map_err(|e| DemoError::Start(format!("creating a temporary directory: {e}")))?;
    let up = gantry_sim::cluster::up(&cp, Some(dir.path()), &opts.nodes)
        .await
        .map_err(|e| DemoError::Start(format!("starting the simulated nodes: {e}")))?;
    let (collector, collect_task) = Collector::start(
        client.clone(),
        up.cluster.nodes().cloned().collect(),
        Duration::from_millis(500),
    );
    let ui = match opts.ui_port {
        Some(port) => Some(
            gantry_sim::ui::serve(collector.clone(), port)
                .await
                .map_err(|e| {
                    DemoError::Start(format!("serving the web page on 127.0.0.1:{port}: {e}"))
                })?,
        ),
        None => None,
    };
    let (report, view_task) = view::spawn(opts.live, collector.clone());
    let components = Components::start(client.clone()).await?;

    let mut run = Run {
        client: client.clone(),
        collector: collector.clone(),
        sim_nodes: up.cluster.nodes().cloned().collect(),
        frames: Vec::new(),
        plan: &plan,
        report: report.clone(),
        timeout: opts.phase_timeout,
        phase: 0,
        phases: Vec::new(),
        started: t0,
    };
    run.phase = 1;
    let _ = report.send(Update::Phase {
        index: 1,
        total: PHASES,
        name: format!(
            "Start the control plane, {} simulated nodes, the operator and the scheduler",
            plan.len()
        ),
    });
    run.step(format!("kubeconfig {}", cp.kubeconfig_path().display()));
    if let Some(u) = &ui {
        run.step(format!("web view {}", u.url()));
    }
    let start = async {
        let ready = run.all_ready();
        run.end("start", "every node registered and Ready", ready)
            .await
    };
    let gpu_ready = match start.await {
        Ok(()) => story(&mut run, &up).await,
        Err(e) => Err(e),
    };
    let gpu_ready = match gpu_ready {
        Ok(d) => d,
        Err(e) => {
            let frames = std::mem::take(&mut run.frames);
            drop(run);
            drop(report);
            let _ = view_task.await;
            let demo = Demo {
                cp,
                up,
                client,
                collector,
                ui,
                plan,
                frames,
                components,
                collect_task,
                _dir: dir,
            };
            demo.shutdown().await;
            return Err(e);
        }
    };

    // ---- summary ----
    let snap = collector
        .collect(&client, &up.cluster.nodes().cloned().collect::<Vec<_>>())
        .await
        .map_err(|e| DemoError::kube("reading the cluster for the summary", e))?;
    let pods = run.pods(None, "").await?;
    let events: Vec<Event> = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| DemoError::kube("listing events", e))?
        .items;
    let (waited, evicted) = summary::waited_and_evicted(&pods, &events, Duration::from_secs(2));
    let summary = Summary {
        nodes: plan.len(),
        gpu_nodes: plan.iter().filter(|p| role(p).is_some()).count(),
        time_to_gpu_ready: gpu_ready,
        gpus_total: snap.gpus_total,
        gpus_allocated: snap.gpus_allocated,
        queues: summary::queue_lines(&snap),
        waited,
        evicted,
        phases: run.phases.clone(),
    };
    let frames = std::mem::take(&mut run.frames);
    drop(run);
    drop(report);
    let _ = view_task.await;
    Ok((
        Demo {
            cp,
            up,
            client,
            collector,
            ui,
            plan,
            frames,
            components,
            collect_task,
            _dir: dir,
        },
        summary,
    ))
}
