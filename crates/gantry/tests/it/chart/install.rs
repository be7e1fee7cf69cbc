//! `helm install` and `helm uninstall` on the embedded cluster, checked with kubectl.

use super::*;

/// kubectl against the embedded cluster; fails with its stderr.
fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> Result<String> {
    gantry_testkit::Kubectl {
        kubeconfig,
        dir: home,
    }
    .run_blocking(args)
}

fn names_of(list_json: &str) -> Result<BTreeSet<String>> {
    let v: Value = serde_json::from_str(list_json)?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_and_uninstalls_on_the_embedded_cluster() -> Result {
    let helm = helm_or_skip!().to_path_buf();
    if !gantry_testkit::Kubectl::installed() {
        eprintln!("skipping: {} is not installed", gantry_testkit::KUBECTL);
        return Ok(());
    }
    let env = gantry_testkit::Cluster::builder().start().await?;
    let kc = env.kubeconfig_path().to_path_buf();
    let home_path = env.dir().to_path_buf();
    // helm and kubectl block; the API server needs this runtime meanwhile.
    let result = tokio::task::spawn_blocking(move || -> Result {
        let chart = chart();
        let chart = chart.to_string_lossy();
        let kcs = kc.to_string_lossy();
        let out = run_helm(
            &helm,
            &[
                "install",
                "gantry",
                chart.as_ref(),
                "-n",
                "gantry",
                "--create-namespace",
                "--kubeconfig",
                kcs.as_ref(),
                // An upstream version pin that has no effect: the notes say so by name.
                "--set",
                "devicePlugin.version=v0.17.0",
            ],
            &[],
        )?;
        assert!(out.contains("STATUS: deployed"), "{out}");
        assert!(
            out.contains("WARNING: these values are accepted for compatibility")
                && out
                    .contains("  - devicePlugin.version=v0.17.0 (Gantry runs its own devicePlugin"),
            "{out}"
        );
        // nfd.enabled (upstream's default): the notes say NFD's API is missing and how to
        // install it, since this chart does not ship it as upstream's does.
        assert!(
            out.contains(
                "Node Feature Discovery: nfd.enabled=true, but the cluster does not serve"
            ) && out.contains("oci://registry.k8s.io/nfd/charts/node-feature-discovery"),
            "{out}"
        );
        let k = |args: &[&str]| kubectl(&kc, &home_path, args);

        let deployments = names_of(&k(&["-n", "gantry", "get", "deployments", "-o", "json"])?)?;
        assert_eq!(
            deployments,
            BTreeSet::from([
                "gantry-admission".to_string(),
                "gantry-operator".to_string(),
                "gantry-scheduler".to_string()
            ])
        );
        let cp_yaml = k(&["get", "clusterpolicy", "cluster-policy", "-o", "json"])?;
        let cp: Value = serde_json::from_str(&cp_yaml)?;
        assert_eq!(cp["spec"]["mig"]["strategy"], "single");
        assert_eq!(
            cp["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "gantry"
        );
        let queues = names_of(&k(&["get", "queues", "-o", "json"])?)?;
        assert!(queues.contains("default-queue") && queues.contains("default-parent-queue"));
        for (kind, ns, name) in [
            ("clusterrole", None, "gantry-operator"),
            ("clusterrolebinding", None, "gantry-scheduler"),
            ("role", Some("gantry"), "gantry-operator"),
            (
                "role",
                Some("gantry-reservation"),
                "gantry-scheduler-reservation",
            ),
            ("serviceaccount", Some("gantry"), "gantry-scheduler"),
            ("configmap", Some("gantry"), "gantry-exporter-metrics"),
            ("namespace", None, "gantry-reservation"),
            ("crd", None, "clusterpolicies.nvidia.com"),
        ] {
            let mut args = vec!["get", kind, name, "-o", "name"];
            if let Some(ns) = ns {
                args.extend(["-n", ns]);
            }
            k(&args)?;
        }
        let list = run_helm(
            &helm,
            &[
                "list",
                "-n",
                "gantry",
                "--kubeconfig",
                kcs.as_ref(),
                "-o",
                "json",
            ],
            &[],
        )?;
        let releases: Value = serde_json::from_str(&list)?;
        assert_eq!(releases[0]["name"], "gantry");
        assert_eq!(releases[0]["status"], "deployed");

        run_helm(
            &helm,
            &[
                "uninstall",
                "gantry",
                "-n",
                "gantry",
                "--kubeconfig",
                kcs.as_ref(),
            ],
            &[],
        )?;
        let deployments = names_of(&k(&["-n", "gantry", "get", "deployments", "-o", "json"])?)?;
        assert!(deployments.is_empty(), "{deployments:?}");
        let policies = names_of(&k(&["get", "clusterpolicies", "-o", "json"])?)?;
        assert!(policies.is_empty(), "{policies:?}");
        let roles = names_of(&k(&["get", "clusterroles", "-o", "json"])?)?;
        assert!(!roles.contains("gantry-operator"), "{roles:?}");
        // Kept on purpose: the default queues (resource-policy keep) and the CRDs.
        let queues = names_of(&k(&["get", "queues", "-o", "json"])?)?;
        assert!(queues.contains("default-queue"), "{queues:?}");
        k(&["get", "crd", "queues.scheduling.run.ai", "-o", "name"])?;
        let list = run_helm(
            &helm,
            &[
                "list",
                "-n",
                "gantry",
                "--kubeconfig",
                kcs.as_ref(),
                "-o",
                "json",
            ],
            &[],
        )?;
        assert_eq!(serde_json::from_str::<Value>(&list)?, serde_json::json!([]));
        Ok(())
    })
    .await?;
    env.shutdown().await;
    result
}
