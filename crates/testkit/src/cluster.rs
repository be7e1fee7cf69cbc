//! A simulated cluster for a test: the embedded control plane, its client, and on request the
//! CRDs, namespaces, simulated nodes (kubelets and agent runners) and the sim's controllers.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use gantry_sim::cluster::SimCluster;
use gantry_sim::controllers::Controllers;
use gantry_sim::kubelet::AgentRegistry;
use gantry_sim::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use tempfile::TempDir;

use crate::{Look, Recorder};

/// What to start; see [`Cluster::builder`].
#[must_use = "a builder does nothing until `start`"]
pub struct ClusterBuilder {
    options: ControlPlaneOptions,
    nodes: Option<String>,
    topology: Option<String>,
    agents: Option<AgentRegistry>,
    crds: bool,
    controllers: bool,
    namespaces: Vec<String>,
}

/// A running test cluster. Everything it started lives as long as it does; dropping it stops
/// the nodes, then the controllers, then the control plane, and removes its directory.
pub struct Cluster {
    // Fields drop in this order: nodes and controllers before the API server they talk to,
    // the directory holding the nodes' roots last.
    sim: Option<SimCluster>,
    _controllers: Option<Controllers>,
    client: kube::Client,
    cp: ControlPlane,
    dir: TempDir,
}

impl Cluster {
    /// A control plane with default options and nothing else until asked for:
    ///
    /// ```no_run
    /// # async fn f() -> anyhow::Result<()> {
    /// let c = gantry_testkit::Cluster::builder()
    ///     .nodes("2xH100-80GB:8,1xcpu")
    ///     .crds()
    ///     .controllers()
    ///     .namespace("gpu-operator")
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            options: ControlPlaneOptions::default(),
            nodes: None,
            topology: None,
            agents: None,
            crds: false,
            controllers: false,
            namespaces: Vec::new(),
        }
    }

    /// A client of the control plane (clone it for an `Api`).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    pub fn cp(&self) -> &ControlPlane {
        &self.cp
    }

    /// The simulated nodes; an error if the builder was not given [`ClusterBuilder::nodes`].
    pub fn sim(&self) -> anyhow::Result<&SimCluster> {
        self.sim
            .as_ref()
            .context("this test cluster has no nodes: start it with `.nodes(spec)`")
    }

    /// The test's own directory under /tmp (the nodes' root when there are nodes; short, as
    /// Unix socket paths must be). Removed when the cluster is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig_path(&self) -> &Path {
        self.cp.kubeconfig_path()
    }

    /// The real kubectl against this cluster, with the test's directory as its HOME.
    pub fn kubectl(&self) -> crate::Kubectl<'_> {
        crate::Kubectl {
            kubeconfig: self.kubeconfig_path(),
            dir: self.dir(),
        }
    }

    /// The control plane's client configuration, for a client of a test's own.
    pub fn kube_config(&self) -> anyhow::Result<kube::Config> {
        self.cp
            .kube_config()
            .context("the control plane's client configuration")
    }

    /// Stop the nodes and controllers, then the control plane, waiting for its tasks to end.
    pub async fn shutdown(self) {
        let Cluster {
            sim,
            _controllers,
            client,
            cp,
            dir,
        } = self;
        drop((sim, _controllers, client));
        cp.shutdown().await;
        drop(dir);
    }

    /// A client of this cluster that records the writes it sends.
    pub fn recorder(&self) -> anyhow::Result<Recorder> {
        Recorder::new(self.kube_config()?)
    }
}

impl ClusterBuilder {
    /// Control-plane options other than the defaults (a data dir, a short watch history, …).
    pub fn options(mut self, options: ControlPlaneOptions) -> Self {
        self.options = options;
        self
    }

    /// Simulated nodes per `spec` (`gantry_sim::nodes::plan`, e.g. `2xH100-80GB:8,1xcpu`),
    /// running the default agent runners unless [`ClusterBuilder::agents`] says otherwise.
    pub fn nodes(mut self, spec: &str) -> Self {
        self.nodes = Some(spec.to_string());
        self
    }

    /// Topology labels for the nodes (`gantry_sim::node_topology`, e.g. `zone=4,rack=2`: the
    /// nodes in spec order, 4 to a zone and 2 to a rack).
    pub fn topology(mut self, spec: &str) -> Self {
        self.topology = Some(spec.to_string());
        self
    }

    /// The agent runners the nodes' kubelets use instead of the default registry
    /// (`AgentRegistry::new()` for none).
    pub fn agents(mut self, agents: AgentRegistry) -> Self {
        self.agents = Some(agents);
        self
    }

    /// Install every Gantry CRD (`gantry_api::crds::all_crds`).
    pub fn crds(mut self) -> Self {
        self.crds = true;
        self
    }

    /// Run the sim's DaemonSet, Job, Deployment and ReplicaSet controllers.
    pub fn controllers(mut self) -> Self {
        self.controllers = true;
        self
    }

    /// Create a namespace (once for each call).
    pub fn namespace(mut self, name: &str) -> Self {
        self.namespaces.push(name.to_string());
        self
    }

    pub async fn start(self) -> anyhow::Result<Cluster> {
        let cp = ControlPlane::start(self.options)
            .await
            .context("starting the control plane")?;
        let client = cp.client().context("the control plane's client")?;
        if self.crds {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            for crd in gantry_api::crds::all_crds().context("the CRDs")? {
                let name = crd.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &crd)
                    .await
                    .with_context(|| format!("creating CRD {name}"))?;
            }
        }
        for name in &self.namespaces {
            gantry_runtime::ensure_namespace(&client, name)
                .await
                .with_context(|| format!("creating namespace {name}"))?;
        }
        let dir = tempfile::Builder::new()
            .prefix("gt")
            .tempdir_in("/tmp")
            .context("a directory under /tmp")?;
        let sim = match &self.nodes {
            Some(spec) => {
                let mut plan =
                    gantry_sim::nodes::plan(spec).with_context(|| format!("node spec {spec:?}"))?;
                if let Some(t) = &self.topology {
                    gantry_sim::node_topology::apply(&mut plan, t)
                        .with_context(|| format!("topology spec {t:?}"))?;
                }
                let agents = self
                    .agents
                    .unwrap_or_else(gantry_sim::kubelet::node_agents::default_registry);
                let names: Vec<String> = plan.iter().map(|p| p.name.clone()).collect();
                let sim = gantry_sim::cluster::start(client.clone(), dir.path(), plan, agents)
                    .await
                    .with_context(|| format!("starting nodes {spec:?}"))?;
                registered(&client, &names).await?;
                Some(sim)
            }
            None => None,
        };
        let controllers = self
            .controllers
            .then(|| gantry_sim::controllers::start(client.clone()));
        Ok(Cluster {
            sim,
            _controllers: controllers,
            client,
            cp,
            dir,
        })
    }
}

/// Waits until every planned node has registered its Node object: the kubelets register in
/// the background, and a test addresses its nodes by name from its first line.
async fn registered(client: &kube::Client, names: &[String]) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    crate::eventually_secs("the simulated nodes registered", 120, || async {
        let listed = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) => return Look::Seen(format!("listing nodes: {e}")),
        };
        let have: HashSet<String> = listed
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        match names.iter().find(|n| !have.contains(*n)) {
            Some(missing) => Look::Seen(format!("node {missing} not registered yet")),
            None => Look::Done(()),
        }
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ListParams;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sets_up_what_was_asked_and_cleans_up() -> anyhow::Result<()> {
        let c = Cluster::builder()
            .crds()
            .namespace("a")
            .namespace("a")
            .start()
            .await?;
        let crds = Api::<CustomResourceDefinition>::all(c.client().clone())
            .list(&ListParams::default())
            .await?;
        assert_eq!(crds.items.len(), gantry_api::crds::all_crds()?.len());
        Api::<k8s_openapi::api::core::v1::Namespace>::all(c.client().clone())
            .get("a")
            .await?;
        let err = c.sim().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("no nodes"), "{err}");
        let dir = c.dir().to_path_buf();
        assert!(dir.is_dir() && dir.starts_with("/tmp"), "{}", dir.display());
        c.shutdown().await;
        assert!(!dir.exists(), "{} left behind", dir.display());
        Ok(())
    }
}
