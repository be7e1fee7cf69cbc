//! Per-pool drivers end to end in the sim, through the real kubectl: a ClusterPolicy with
//! `useNvidiaDriverCRD: true` and two NVIDIADrivers — the A100 pool on one driver version, the
//! H100 pool on another — give each pool's nodes their own driver (the discovery labels show
//! which) and every GPU allocatable. Then the A100 CR's version changes and only the A100 nodes
//! go through the upgrade; a third CR overlapping the H100 pool is refused in both CRs' status
//! and changes nothing; upstream's own sample applies unchanged (and, selecting every GPU node,
//! is refused the same way); deleting a CR removes its DaemonSets and nothing else.

use crate::support::*;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gantry_api::names;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};

const A100: [&str; 2] = ["a100-80gb-0", "a100-80gb-1"];
const H100: [&str; 2] = ["h100-80gb-0", "h100-80gb-1"];
const A100_V1: &str = "535.230.02";
const A100_V2: &str = "535.247.01";
const H100_V: &str = "580.95.05";
const OWNER: &str = names::LABEL_DRIVER_OWNER;

/// What this test asks kubectl about NVIDIADrivers.
trait NvdQueries {
    async fn driver_daemonsets(&self, selector: &str) -> anyhow::Result<String>;
    async fn nvd(&self, name: &str, path: &str) -> String;
}

impl NvdQueries for Kubectl<'_> {
    /// `kubectl get ds -n NS -l SELECTOR -o name`: the NVIDIADriver DaemonSets it selects.
    async fn driver_daemonsets(&self, selector: &str) -> anyhow::Result<String> {
        self.run(&["get", "ds", "-n", NS, "-l", selector, "-o", "name"])
            .await
    }

    /// `kubectl get nvd NAME -o jsonpath=…`.
    async fn nvd(&self, name: &str, path: &str) -> String {
        let jp = format!("jsonpath={path}");
        self.run(&["get", "nvd", name, "-o", &jp])
            .await
            .unwrap_or_default()
    }
}

const POLICY: &str = r#"
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  operator: {}
  daemonsets: {}
  driver: {useNvidiaDriverCRD: true}
  toolkit: {}
  devicePlugin: {}
  dcgmExporter: {}
  dcgm: {enabled: false}
  nodeStatusExporter: {}
  gfd: {env: [{name: GFD_SLEEP_INTERVAL, value: 1s}]}
"#;

fn a100_cr(version: &str) -> String {
    format!(
        r#"
apiVersion: nvidia.com/v1alpha1
kind: NVIDIADriver
metadata: {{name: a100}}
spec:
  driverType: gpu
  repository: nvcr.io/nvidia
  image: driver
  version: "{version}"
  nodeSelector: {{pool: a100}}
  upgradePolicy: {{autoUpgrade: true, maxParallelUpgrades: 1, maxUnavailable: "100%"}}
"#
    )
}

const H100_CR: &str = r#"
apiVersion: nvidia.com/v1alpha1
kind: NVIDIADriver
metadata: {name: h100}
spec:
  driverType: gpu
  kernelModuleType: open
  repository: nvcr.io/nvidia
  image: driver
  version: "580.95.05"
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions: [{key: pool, operator: In, values: [h100]}]
"#;

const EXTRA_CR: &str = r#"
apiVersion: nvidia.com/v1alpha1
kind: NVIDIADriver
metadata: {name: h100-extra}
spec:
  repository: nvcr.io/nvidia
  image: driver
  version: "590.10.01"
  nodeSelector: {kubernetes.io/hostname: h100-80gb-0}
"#;

async fn labels(client: &kube::Client) -> BTreeMap<String, BTreeMap<String, String>> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default()
}

/// node -> uid of its driver pod (component `nvidia-driver`).
async fn driver_pods(client: &kube::Client) -> BTreeMap<String, String> {
    let lp = ListParams::default().labels("app.kubernetes.io/component=nvidia-driver");
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| Some((p.spec?.node_name?, p.metadata.uid?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Every pool node runs its version (per the discovery labels) under its CR.
async fn versions_are(client: &kube::Client, a100: &str) -> bool {
    let l = labels(client).await;
    let is = |n: &str, owner: &str, v: &str| {
        l.get(n).is_some_and(|l| {
            l.get(OWNER).map(String::as_str) == Some(owner)
                && l.get(names::LABEL_CUDA_DRIVER_VERSION_FULL)
                    .map(String::as_str)
                    == Some(v)
        })
    };
    A100.iter().all(|n| is(n, "a100", a100)) && H100.iter().all(|n| is(n, "h100", H100_V))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_per_pool_drivers_upgrade_one_pool_and_refuse_overlaps() -> Res {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Env::start("2xA100-80GB:8,2xH100-80GB:8").await?;
    let client = env.client().clone();
    let k = Kubectl {
        kubeconfig: env.cp().kubeconfig_path(),
        dir: env.dir(),
    };
    eventually_secs("every simulated node to register", 60, || async {
        labels(&client).await.len() == 4
    })
    .await?;
    // The pools, as an admin labels them.
    k.run(&["label", "nodes", A100[0], A100[1], "pool=a100"])
        .await?;
    k.run(&["label", "nodes", H100[0], H100[1], "pool=h100"])
        .await?;
    let _op = env.operator()?;
    k.apply("policy.yaml", POLICY).await?;
    k.apply("a100.yaml", &a100_cr(A100_V1)).await?;
    k.apply("h100.yaml", H100_CR).await?;

    eventually_secs("each pool on its own driver version", 180, || {
        versions_are(&client, A100_V1)
    })
    .await?;
    eventually_secs("every GPU allocatable", 120, || async {
        allocatable(&client).await.ok().as_deref() == Some("8 8 8 8")
    })
    .await?;
    for cr in ["a100", "h100"] {
        eventually_secs(&format!("NVIDIADriver {cr} ready"), 60, || async {
            k.nvd(cr, "{.status.state}").await == "ready"
        })
        .await?;
    }
    let ds = k.driver_daemonsets("gantry.dev/nvidia-driver").await?;
    assert_eq!(ds.lines().count(), 2, "one driver DaemonSet per pool: {ds}");
    assert!(ds.contains("nvidia-gpu-driver-ubuntu"), "{ds}");
    // Nothing left to change: a round writes nothing.
    let nw = gantry_operator::node_watch::NodeWatch::start(client.clone());
    let opts = gantry_operator::nvdriver::NvDriverOptions::new(NS);
    let round = gantry_operator::nvdriver::reconcile_once(&client, &opts, &nw).await?;
    assert_eq!((round.writes, round.busy), (0, false), "a settled round");
    let generation = k
        .nvd("a100", "{.status.conditions[0].observedGeneration}")
        .await;
    assert_eq!(generation, k.nvd("a100", "{.metadata.generation}").await);

    // Record every upgrade state each node goes through from here on.
    let seen: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let recorder = {
        let seen = seen.clone();
        let api = Api::<Node>::all(client.clone());
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(n)) = s.next().await {
                let state = n
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(names::LABEL_UPGRADE_STATE).cloned());
                if let (Some(name), Some(st), Ok(mut m)) = (n.metadata.name, state, seen.lock()) {
                    m.entry(name).or_default().insert(st);
                }
            }
        })
    };
    let before = driver_pods(&client).await;
    assert_eq!(before.len(), 4, "{before:?}");

    // A new version for the A100 pool only.
    k.run(&[
        "patch",
        "nvd",
        "a100",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"spec":{{"version":"{A100_V2}"}}}}"#),
    ])
    .await?;
    eventually_secs(
        "the A100 pool upgraded, the H100 pool as it was",
        240,
        || async {
            let l = labels(&client).await;
            let done = A100.iter().all(|n| {
                l.get(*n)
                    .and_then(|l| l.get(names::LABEL_UPGRADE_STATE))
                    .is_some_and(|s| s == "upgrade-done")
            });
            done && versions_are(&client, A100_V2).await
        },
    )
    .await?;
    recorder.abort();
    let after = driver_pods(&client).await;
    {
        let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        for n in A100 {
            let states = seen.get(n).cloned().unwrap_or_default();
            for s in ["upgrade-required", "pod-restart-required", "upgrade-done"] {
                assert!(states.contains(s), "{n} went through {states:?}");
            }
            assert_ne!(before.get(n), after.get(n), "{n}'s driver pod was replaced");
        }
        for n in H100 {
            let states = seen.get(n).cloned().unwrap_or_default();
            assert!(
                states.iter().all(|s| s == "upgrade-done"),
                "{n} was not walked: {states:?}"
            );
            assert_eq!(before.get(n), after.get(n), "{n}'s driver pod is untouched");
        }
    }

    // A third CR overlapping the H100 pool: refused in both CRs' status; nothing changes.
    k.apply("extra.yaml", EXTRA_CR).await?;
    eventually_secs("both CRs name the node and each other", 60, || async {
        let extra = k
            .nvd(
                "h100-extra",
                "{.status.conditions[?(@.type==\"Error\")].message}",
            )
            .await;
        let h100 = k
            .nvd("h100", "{.status.conditions[?(@.type==\"Error\")].message}")
            .await;
        extra.contains("node h100-80gb-0 is also selected by NVIDIADriver h100")
            && h100.contains("node h100-80gb-0 is also selected by NVIDIADriver h100-extra")
            && k.nvd("h100-extra", "{.status.state}").await == "notReady"
    })
    .await?;
    let extra_ds = k
        .driver_daemonsets("gantry.dev/nvidia-driver=h100-extra")
        .await?;
    assert!(extra_ds.trim().is_empty(), "{extra_ds}");
    assert_eq!(driver_pods(&client).await, after, "no driver pod changed");
    assert!(versions_are(&client, A100_V2).await);

    // Upstream's sample, as published: no default key, an empty nodeSelector (every GPU node).
    let sample = include_str!("../../../api/tests/fixtures/nvidiadriver-upstream-sample.yaml");
    k.apply("sample.yaml", sample).await?;
    eventually_secs(
        "the sample is read and refused for its overlaps",
        60,
        || async {
            let msg = k
                .nvd(
                    "nvidiadriver-sample",
                    "{.status.conditions[?(@.type==\"Error\")].message}",
                )
                .await;
            A100.iter()
                .chain(H100.iter())
                .all(|n| msg.contains(&format!("node {n} ")))
        },
    )
    .await?;
    assert_eq!(
        k.nvd("nvidiadriver-sample", "{.spec.image}").await,
        "driver"
    );
    assert_eq!(driver_pods(&client).await, after, "no driver pod changed");
    k.run(&["delete", "nvd", "nvidiadriver-sample", "h100-extra"])
        .await?;
    eventually_secs("h100 ready again", 60, || async {
        k.nvd("h100", "{.status.state}").await == "ready"
    })
    .await?;

    // Deleting a CR removes its DaemonSets and owner labels; the other operands stay.
    let plugin = |c: kube::Client| async move {
        Api::<Pod>::namespaced(c, NS)
            .list(&ListParams::default().labels(&format!("app={}", names::app::DEVICE_PLUGIN)))
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|p| Some((p.spec?.node_name?, p.metadata.uid?)))
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default()
    };
    let plugins = plugin(client.clone()).await;
    assert_eq!(plugins.len(), 4, "{plugins:?}");
    k.run(&["delete", "nvd", "a100"]).await?;
    eventually_secs(
        "the A100 pool's driver gone, owner labels removed",
        60,
        || async {
            let l = labels(&client).await;
            let pods = driver_pods(&client).await;
            A100.iter().all(|n| {
                !pods.contains_key(*n) && l.get(*n).is_some_and(|l| !l.contains_key(OWNER))
            })
        },
    )
    .await?;
    let left = k.driver_daemonsets("gantry.dev/nvidia-driver").await?;
    assert_eq!(left.lines().count(), 1, "{left}");
    assert_eq!(
        plugin(client.clone()).await,
        plugins,
        "device plugin pods untouched"
    );
    let now = driver_pods(&client).await;
    for n in H100 {
        assert_eq!(now.get(n), after.get(n), "{n}'s driver pod untouched");
    }

    // The ClusterPolicy takes the driver back and the last CR goes: nothing of the CRs is
    // left. A quiet loop then skips its hand-back lists, but an owner label set by hand
    // afterwards is still seen and removed.
    k.run(&[
        "patch",
        "clusterpolicy",
        "cluster-policy",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"driver":{"useNvidiaDriverCRD":false}}}"#,
    ])
    .await?;
    k.run(&["delete", "nvd", "h100"]).await?;
    eventually_secs(
        "handed back: no CR DaemonSet, no owner label",
        60,
        || async {
            let l = labels(&client).await;
            k.driver_daemonsets("gantry.dev/nvidia-driver")
                .await
                .is_ok_and(|d| d.trim().is_empty())
                && l.values().all(|l| !l.contains_key(OWNER))
        },
    )
    .await?;
    k.run(&["label", "nodes", H100[0], &format!("{OWNER}=h100")])
        .await?;
    eventually_secs("a stray owner label removed", 60, || async {
        labels(&client)
            .await
            .get(H100[0])
            .is_some_and(|l| !l.contains_key(OWNER))
    })
    .await?;
    Ok(())
}
