//! Shared harness: a `gantry_testkit::Cluster` (the embedded control plane, simulated GPU nodes,
//! the Job controller) with the real device plugin and GPU feature discovery running as
//! DaemonSets, the real kubectl, and a scheduler started in-process.

#![allow(dead_code)]

use gantry_scheduler::k8s::Options;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::ops::Deref;
use std::path::Path;
use std::time::Duration;

pub use gantry_testkit::{Look, eventually_secs};

pub type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The test cluster (`c.cp()`, `c.sim()?`, `c.dir()` through `Deref`) and its client.
pub struct Cluster {
    pub client: kube::Client,
    kit: gantry_testkit::Cluster,
}

impl Deref for Cluster {
    type Target = gantry_testkit::Cluster;

    fn deref(&self) -> &gantry_testkit::Cluster {
        &self.kit
    }
}

fn daemonset(name: &str, command: &[&str]) -> DaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {gantry_api::names::NFD_GPU_LABELS[0]: "true"},
                    // As on a node, the agents learn their Node from the downward API.
                    "containers": [{"name": name, "image": "gantry", "command": command,
                                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]
                }
            }
        }
    }))
    .expect("static daemonset")
}

impl Cluster {
    /// `gantry_testkit::eventually` for tests written against the cluster: waits until the look
    /// holds, and on timeout says what it last saw.
    pub async fn wait<T, L, F, Fut>(&self, what: &str, limit: Duration, look: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = L>,
        L: gantry_testkit::IntoLook<T>,
    {
        Ok(gantry_testkit::eventually(what, limit, look).await?)
    }

    /// Nodes per `spec` (e.g. `2xH100-80GB:2`), with the device plugin and GFD running, and
    /// every GPU allocatable.
    pub async fn start(spec: &str) -> Result<Cluster> {
        Self::start_with_plugin_args(spec, &[]).await
    }

    /// [`Cluster::start`] with extra device-plugin flags.
    pub async fn start_with_plugin_args(spec: &str, plugin_args: &[&str]) -> Result<Cluster> {
        Self::start_labelled(spec, plugin_args, None).await
    }

    /// [`Cluster::start`] with the nodes labelled into topology domains
    /// (`gantry_sim::node_topology`, e.g. `zone=4,rack=2`).
    pub async fn start_with_topology(spec: &str, topology: &str) -> Result<Cluster> {
        Self::start_labelled(spec, &[], Some(topology)).await
    }

    async fn start_labelled(
        spec: &str,
        plugin_args: &[&str],
        topology: Option<&str>,
    ) -> Result<Cluster> {
        let plan = gantry_sim::nodes::plan(spec)?;
        let want: u64 = plan.iter().map(|p| u64::from(p.gpus)).sum();
        let mut builder = gantry_testkit::Cluster::builder()
            .controllers()
            .namespace("kube-system")
            .namespace("default")
            .nodes(spec);
        if let Some(t) = topology {
            builder = builder.topology(t);
        }
        let kit = builder.start().await?;
        let client = kit.client().clone();
        let ds: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
        ds.create(
            &PostParams::default(),
            &daemonset(
                "device-plugin",
                &[&["gantry", "node", "device-plugin"][..], plugin_args].concat(),
            ),
        )
        .await?;
        ds.create(
            &PostParams::default(),
            &daemonset("gfd", &["gantry", "node", "discovery"]),
        )
        .await?;
        let c = Cluster { client, kit };
        eventually_secs("GPUs allocatable and GFD labels", 60, || async {
            let nodes = Api::<Node>::all(c.client.clone())
                .list(&ListParams::default())
                .await?;
            let gpus: u64 = nodes
                .items
                .iter()
                .filter_map(|n| {
                    n.status
                        .as_ref()?
                        .allocatable
                        .as_ref()?
                        .get("nvidia.com/gpu")?
                        .0
                        .parse::<u64>()
                        .ok()
                })
                .sum();
            let labelled = nodes.items.iter().all(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(gantry_api::names::LABEL_GPU_MEMORY))
            });
            Ok::<_, kube::Error>(if gpus >= want && labelled {
                Look::Done(())
            } else {
                Look::Seen(format!(
                    "{gpus} of {want} GPUs allocatable, all labelled: {labelled}"
                ))
            })
        })
        .await?;
        Ok(c)
    }

    pub fn options(&self) -> Options {
        Options {
            leader_elect: false,
            reservation_timeout: Duration::from_secs(20),
            ..Default::default()
        }
    }

    /// Start a scheduler in this runtime; flip the sender to stop it.
    pub fn scheduler(
        &self,
        opts: Options,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let client = self.client.clone();
        let h = tokio::spawn(async move {
            if let Err(e) = gantry_scheduler::k8s::run(client, opts, rx).await {
                eprintln!("scheduler stopped: {e}");
            }
        });
        (tx, h)
    }

    /// The real kubectl against this cluster (`gantry_testkit::Kubectl::run`).
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        Ok(self.kit.kubectl().run(args).await?)
    }

    /// `kubectl apply -f` of a manifest string.
    pub async fn apply(&self, name: &str, yaml: &str) -> Result<String> {
        Ok(self.kit.kubectl().apply(name, yaml).await?)
    }

    pub async fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }

    pub async fn pods(&self, ns: &str, selector: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn wait_running(&self, ns: &str, name: &str) -> Result<Pod> {
        Ok(
            eventually_secs(&format!("pod {ns}/{name} Running"), 60, || async {
                let Some(p) = self.pod(ns, name).await else {
                    return Look::Seen("no such pod".into());
                };
                let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                if phase.as_deref() == Some("Running") {
                    Look::Done(p)
                } else {
                    Look::Seen(format!("phase {phase:?} on node {:?}", node_of(&p)))
                }
            })
            .await?,
        )
    }

    pub async fn events(&self, ns: &str, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect()
    }

    /// The first Event on the pod with `reason`, waiting for it.
    pub async fn wait_event(&self, ns: &str, name: &str, reason: &str) -> Result<String> {
        Ok(
            eventually_secs(&format!("event {reason} on {ns}/{name}"), 60, || async {
                let events = self.events(ns, name).await;
                match events.iter().find(|e| e.reason.as_deref() == Some(reason)) {
                    Some(e) => Look::Done(e.message.clone().unwrap_or_default()),
                    None => Look::Seen(format!(
                        "events {:?}",
                        events
                            .iter()
                            .map(|e| (e.reason.clone(), e.message.clone()))
                            .collect::<Vec<_>>()
                    )),
                }
            })
            .await?,
        )
    }
}

pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

pub fn annotation(p: &Pod, k: &str) -> Option<String> {
    p.metadata.annotations.as_ref()?.get(k).cloned()
}

pub fn kubeconfig(c: &Cluster) -> &Path {
    c.kubeconfig_path()
}
