//! The demo's phases. Every step goes through the real code paths: manifests are applied to
//! the API server, the operator and the scheduler react, the simulated kubelets run what
//! they are given. The demo only applies, waits and reports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gantry_api::names;
use gantry_sim::cluster::{Fault, Up};
use gantry_sim::nodes::NodePlan;
use gantry_sim::ui::{Collector, UiServer};
use gantry_sim::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::apply;
use crate::components::Components;
use crate::manifests;
use crate::summary::{self, Summary};
use crate::view::{self, Reporter, Update};
use crate::wait::{Progress, until};
use crate::{DemoError, DemoOptions};

const PHASES: usize = 10;

/// A finished demo whose cluster is still up (for `--keep` and for tests).
pub struct Demo {
    pub cp: ControlPlane,
    pub up: Up,
    pub client: kube::Client,
    pub collector: Collector,
    pub ui: Option<UiServer>,
    pub plan: Vec<NodePlan>,
    components: Components,
    _dir: tempfile::TempDir,
}

impl Demo {
    pub async fn shutdown(self) {
        self.components.stop().await;
        drop(self.ui);
        drop(self.up);
        self.cp.shutdown().await;
    }
}

/// What kind of GPU node the demo makes of each model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Whole,
    Mig,
    TimeSliced,
}

fn role(p: &NodePlan) -> Option<Role> {
    let m = p.gpu.filter(|_| p.gpus > 0)?;
    Some(if m.key.starts_with("A100") {
        Role::Mig
    } else if m.key == "L4" || m.key == "T4" {
        Role::TimeSliced
    } else {
        Role::Whole
    })
}

fn alloc(node: &Node, resource: &str) -> i64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

fn mig_alloc(node: &Node) -> i64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| {
            a.iter()
                .filter(|(k, _)| k.starts_with("nvidia.com/mig-"))
                .filter_map(|(_, q)| q.0.parse::<i64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

struct Run<'a> {
    client: kube::Client,
    plan: &'a [NodePlan],
    report: Reporter,
    timeout: Duration,
    phase: usize,
    phases: Vec<(String, Duration)>,
    started: Instant,
}

impl Run<'_> {
    fn begin(&mut self, name: &str) {
        self.phase += 1;
        self.started = Instant::now();
        let _ = self.report.send(Update::Phase {
            index: self.phase,
            total: PHASES,
            name: name.to_string(),
        });
    }

    fn step(&self, s: impl Into<String>) {
        let _ = self.report.send(Update::Step(s.into()));
    }

    fn end(&mut self, name: &str) {
        let d = self.started.elapsed();
        self.phases.push((name.to_string(), d));
        let _ = self.report.send(Update::PhaseDone {
            name: name.to_string(),
            secs: d.as_secs_f64(),
        });
    }

    fn nodes_with(&self, r: Role) -> Vec<&NodePlan> {
        self.plan.iter().filter(|p| role(p) == Some(r)).collect()
    }

    async fn label_node(&self, node: &str, key: &str, value: &str) -> Result<(), DemoError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"labels": {key: value}}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| DemoError::kube(&format!("labelling node {node}"), e))?;
        Ok(())
    }

    async fn nodes(&self) -> Result<BTreeMap<String, Node>, DemoError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| DemoError::kube("listing nodes", e))?;
        Ok(list
            .items
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
            .collect())
    }

    async fn pods(&self, ns: Option<&str>, selector: &str) -> Result<Vec<Pod>, DemoError> {
        let api: Api<Pod> = match ns {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let lp = if selector.is_empty() {
            ListParams::default()
        } else {
            ListParams::default().labels(selector)
        };
        Ok(api
            .list(&lp)
            .await
            .map_err(|e| DemoError::kube("listing pods", e))?
            .items)
    }

    /// Wait until Job `ns/job` has `want` Running pods.
    async fn job_running(&self, ns: &str, job: &str, want: usize) -> Result<(), DemoError> {
        let what = format!("Job {ns}/{job} to have {want} running pods");
        until(&what, self.timeout, || async {
            let pods = self.pods(Some(ns), &format!("job-name={job}")).await?;
            let running = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            Ok(if running >= want {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{running} of {want} running"))
            })
        })
        .await
    }

    /// Wait until `node` advertises exactly `want` `nvidia.com/gpu`.
    async fn wait_gpus(&self, node: &str, want: i64, note: &str) -> Result<(), DemoError> {
        let what = format!("{node} to advertise {want} GPUs{note}");
        until(&what, self.timeout, || async {
            let n = self.nodes().await?;
            let have = n
                .get(node)
                .map(|n| alloc(n, names::RESOURCE_GPU))
                .unwrap_or(0);
            Ok(if have == want {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{have}"))
            })
        })
        .await
    }

    fn dynamic(&self, group: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        Api::all_with(self.client.clone(), &ar)
    }

    /// Every GPU node advertises what its role promises.
    async fn gpus_advertised(&self) -> Result<Progress<()>, DemoError> {
        let nodes = self.nodes().await?;
        for p in self.plan {
            let Some(r) = role(p) else { continue };
            let Some(n) = nodes.get(&p.name) else {
                return Ok(Progress::NotYet(format!("node {} not registered", p.name)));
            };
            let gpus = alloc(n, names::RESOURCE_GPU);
            let ok = match r {
                Role::Whole => gpus == p.gpus as i64,
                Role::TimeSliced => gpus == 4 * p.gpus as i64,
                Role::Mig => mig_alloc(n) > 0,
            };
            if !ok {
                return Ok(Progress::NotYet(format!(
                    "{} advertises nvidia.com/gpu={gpus}, mig={}",
                    p.name,
                    mig_alloc(n)
                )));
            }
        }
        Ok(Progress::Done(()))
    }

    async fn cluster_policy_state(&self) -> Result<String, DemoError> {
        let api = self.dynamic("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies");
        let cp = api
            .get("cluster-policy")
            .await
            .map_err(|e| DemoError::kube("reading ClusterPolicy cluster-policy", e))?;
        Ok(cp.data["status"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string())
    }
}

/// Run the whole demo. On success the cluster is left running in the returned [`Demo`].
pub async fn run(opts: DemoOptions) -> Result<(Demo, Summary), DemoError> {
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
    let (collector, _collect_task) = Collector::start(
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
    run.end("start");

    let gpu_ready = story(&mut run, &up).await;
    let gpu_ready = match gpu_ready {
        Ok(d) => d,
        Err(e) => {
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
                components,
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
            components,
            _dir: dir,
        },
        summary,
    ))
}

/// Phases 2–10. Returns the time from applying the ClusterPolicy to GPUs advertised.
async fn story(run: &mut Run<'_>, up: &Up) -> Result<Duration, DemoError> {
    // 2: CRDs
    run.begin("Install the CRDs (ClusterPolicy, MigClusterPolicy, Queue, PodGroup, ...)");
    let crds = gantry_api::crds::all_crds_yaml()
        .map_err(|e| DemoError::Start(format!("rendering the CRDs: {e}")))?;
    let n = apply::apply_all(&run.client, "gantry crds", &crds).await?;
    run.step(format!("{n} CRDs applied"));
    run.end("CRDs");

    // 3: the operator turns bare GPU nodes into a GPU pool
    run.begin("Apply a ClusterPolicy: the operator deploys the GPU stack on the GPU nodes");
    let ts = run
        .nodes_with(Role::TimeSliced)
        .into_iter()
        .map(|p| p.name.clone())
        .collect::<Vec<_>>();
    let mig = run
        .nodes_with(Role::Mig)
        .into_iter()
        .map(|p| p.name.clone())
        .collect::<Vec<_>>();
    for n in &ts {
        run.label_node(n, names::LABEL_DEVICE_PLUGIN_CONFIG, "l4-time-sliced")
            .await?;
    }
    for n in &mig {
        run.label_node(n, names::LABEL_MIG_CONFIG, "all-balanced")
            .await?;
    }
    run.step(format!(
        "time-slicing x4 on {ts:?}, MIG all-balanced on {mig:?}"
    ));
    apply::apply_all(
        &run.client,
        manifests::TIME_SLICING.0,
        manifests::TIME_SLICING.1,
    )
    .await?;
    let applied = Instant::now();
    apply::apply_all(
        &run.client,
        manifests::CLUSTER_POLICY.0,
        manifests::CLUSTER_POLICY.1,
    )
    .await?;
    run.step("ClusterPolicy cluster-policy applied; waiting for every GPU node to advertise GPUs");
    until("every GPU node to advertise its GPUs", run.timeout, || {
        run.gpus_advertised()
    })
    .await?;
    let gpu_ready = applied.elapsed();
    run.step(format!(
        "GPU-ready in {:.1} s; waiting for ClusterPolicy state=ready",
        gpu_ready.as_secs_f64()
    ));
    until("ClusterPolicy status.state=ready", run.timeout, || async {
        let s = run.cluster_policy_state().await?;
        Ok(if s == "ready" {
            Progress::Done(())
        } else {
            Progress::NotYet(format!("state {s:?}"))
        })
    })
    .await?;
    run.end("GPU operator");

    // 4: queues
    run.begin("Create the teams' queues (team-a: 16 GPUs guaranteed, team-b: 12)");
    apply::apply_all(&run.client, manifests::QUEUES.0, manifests::QUEUES.1).await?;
    run.end("queues");

    // 5: team B over quota + MIG
    run.begin("Team B borrows idle H100s (24 GPUs on a 12-GPU quota) and takes MIG slices");
    apply::apply_all(&run.client, manifests::TEAM_B.0, manifests::TEAM_B.1).await?;
    run.job_running("team-b", "batch-b", 6).await?;
    if !mig.is_empty() {
        run.job_running("team-b", "mig-b", 4).await?;
    }
    run.end("team B");

    // 6: team A fractions + time-sliced
    run.begin("Team A: fractional inference (0.5 GPU, 20 GB) and pods on time-sliced L4s");
    apply::apply_all(
        &run.client,
        manifests::TEAM_A_INFERENCE.0,
        manifests::TEAM_A_INFERENCE.1,
    )
    .await?;
    run.job_running("team-a", "infer-half", 2).await?;
    run.job_running("team-a", "infer-mem", 2).await?;
    if !ts.is_empty() {
        run.job_running("team-a", "l4-a", 3).await?;
    }
    let reservations = run
        .pods(Some(names::DEFAULT_RESERVATION_NAMESPACE), "")
        .await?;
    run.step(format!(
        "{} reservation pod(s) hold the shared GPUs",
        reservations.len()
    ));
    run.end("team A inference");

    // 7: gang + reclaim
    run.begin("Team A's gang training job reclaims GPUs from team B");
    apply::apply_all(
        &run.client,
        manifests::TEAM_A_TRAINING.0,
        manifests::TEAM_A_TRAINING.1,
    )
    .await?;
    run.job_running("team-a", "train-a", 2).await?;
    run.end("gang + reclaim");

    // 8: MIG re-slice
    if !mig.is_empty() {
        run.begin("MigClusterPolicy: re-slice the A100s into 1g.10gb, one node at a time");
        // Team B's MIG job finishes first: a GPU cannot be re-sliced under running processes
        // (the MIG manager would report the node failed, as on real hardware).
        let jobs: Api<k8s_openapi::api::batch::v1::Job> =
            Api::namespaced(run.client.clone(), "team-b");
        jobs.delete("mig-b", &kube::api::DeleteParams::background())
            .await
            .map_err(|e| DemoError::kube("deleting Job team-b/mig-b", e))?;
        until("Job team-b/mig-b's pods to finish", run.timeout, || async {
            let left = run.pods(Some("team-b"), "job-name=mig-b").await?.len();
            Ok(if left == 0 {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{left} pods left"))
            })
        })
        .await?;
        run.step("team B's MIG job finished; applying the MigClusterPolicy");
        apply::apply_all(
            &run.client,
            manifests::MIG_POLICY.0,
            manifests::MIG_POLICY.1,
        )
        .await?;
        let policies = run.dynamic(
            "nvidia.com",
            "v1alpha1",
            "MigClusterPolicy",
            "migclusterpolicies",
        );
        until(
            "the MigClusterPolicy to report success on every A100 node",
            run.timeout,
            || async {
                let p = policies
                    .get("a100-small-slices")
                    .await
                    .map_err(|e| DemoError::kube("reading MigClusterPolicy", e))?;
                let nodes = p.data["status"]["nodes"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let ok = nodes.iter().filter(|n| n["state"] == "success").count();
                Ok(if ok == mig.len() {
                    Progress::Done(())
                } else {
                    Progress::NotYet(format!("{ok} of {} nodes at success", mig.len()))
                })
            },
        )
        .await?;
        let want = |p: &NodePlan| 7 * p.gpus as i64;
        until(
            "the A100 nodes to advertise nvidia.com/mig-1g.10gb",
            run.timeout,
            || async {
                let nodes = run.nodes().await?;
                for p in run.nodes_with(Role::Mig) {
                    let have = nodes
                        .get(&p.name)
                        .map(|n| alloc(n, "nvidia.com/mig-1g.10gb"))
                        .unwrap_or(0);
                    if have != want(p) {
                        return Ok(Progress::NotYet(format!(
                            "{}: {have} of {}",
                            p.name,
                            want(p)
                        )));
                    }
                }
                Ok(Progress::Done(()))
            },
        )
        .await?;
        run.step("team B submits its MIG job again, onto the new 1g.10gb slices");
        apply::apply_all(&run.client, manifests::TEAM_B.0, manifests::TEAM_B.1).await?;
        run.job_running("team-b", "mig-b", 4).await?;
        run.end("MIG re-slice");
    } else {
        run.begin("MigClusterPolicy (skipped: no A100 nodes in --nodes)");
        run.end("MIG re-slice");
    }

    // 9: driver upgrade
    run.begin(&format!(
        "Driver upgrade to {} rolls through the GPU nodes",
        manifests::UPGRADED_DRIVER
    ));
    let cps = run.dynamic("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies");
    let patch = json!({"spec": {"driver": {"version": manifests::UPGRADED_DRIVER}}});
    cps.patch(
        "cluster-policy",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| DemoError::kube("changing driver.version", e))?;
    let gpu_nodes: Vec<String> = run
        .plan
        .iter()
        .filter(|p| role(p).is_some())
        .map(|p| p.name.clone())
        .collect();
    until(
        "every GPU node to reach upgrade-done on the new driver",
        run.timeout * 2,
        || async {
            let nodes = run.nodes().await?;
            let mut states: BTreeMap<String, usize> = BTreeMap::new();
            let mut done = 0;
            for name in &gpu_nodes {
                let n = nodes.get(name);
                let st = n
                    .and_then(|n| n.metadata.labels.as_ref())
                    .and_then(|l| l.get(names::LABEL_UPGRADE_STATE))
                    .cloned()
                    .unwrap_or_default();
                let cordoned = n
                    .and_then(|n| n.spec.as_ref())
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false);
                let version_ok = up
                    .cluster
                    .node(name)
                    .and_then(|s| s.backend.as_ref())
                    .map(|b| {
                        use gantry_gpu::Backend as _;
                        b.driver_version()
                            .map(|v| v == manifests::UPGRADED_DRIVER)
                            .unwrap_or(false)
                    })
                    == Some(true);
                if st == "upgrade-done" && !cordoned && version_ok {
                    done += 1;
                }
                *states
                    .entry(if st.is_empty() { "-".into() } else { st })
                    .or_default() += 1;
            }
            run.step(format!("{done}/{} nodes done: {states:?}", gpu_nodes.len()));
            Ok(if done == gpu_nodes.len() {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{states:?}"))
            })
        },
    )
    .await?;
    run.job_running("team-a", "train-a", 2).await?;
    run.end("driver upgrade");

    // 10: a GPU fault
    run.begin("A GPU falls off the bus; the device plugin withdraws it; a reset brings it back");
    if let Some(p) = run.nodes_with(Role::Whole).first().map(|p| (*p).clone()) {
        let full = p.gpus as i64;
        up.cluster
            .fault(&p.name, &Fault::OffBus { gpu: 0 })
            .await
            .map_err(|e| DemoError::Start(format!("injecting the fault: {e}")))?;
        run.step(format!("{} GPU 0: XID 79 (fallen off the bus)", p.name));
        run.wait_gpus(&p.name, full - 1, "").await?;
        up.cluster
            .fault(&p.name, &Fault::Clear { gpu: 0 })
            .await
            .map_err(|e| DemoError::Start(format!("resetting the GPU: {e}")))?;
        run.step(format!("{} GPU 0 reset", p.name));
        run.wait_gpus(&p.name, full, " again").await?;
    }
    run.end("GPU fault");
    Ok(gpu_ready)
}
