//! `helm install` of the chart against `gantry up --bare`, end to end, with RBAC enforced:
//! the chart's operator, scheduler and admission webhook run from their Deployments (the
//! sim's kubelet runs Gantry's image in-process, as the pods' ServiceAccounts), bring the ClusterPolicy to
//! `ready`, advertise the GPUs and schedule a KAI gang and a fractional pod, with no RBAC
//! denial; `helm upgrade` rolls the changed Deployment and `helm uninstall` removes what the
//! docs say it removes. And a ServiceAccount without a role gets upstream's 403.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use gantry_testkit::eventually_secs;

use super::chart::{chart, helm, run_helm};

type Result<T = ()> = anyhow::Result<T>;

/// `gantry up --bare` (or another `gantry up`) as a child process (the binary as users run
/// it); killed on drop.
pub(crate) struct Bare {
    child: Child,
    pub(crate) dir: tempfile::TempDir,
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bare {
    pub(crate) fn start(nodes: Option<&str>) -> Result<Bare> {
        Self::start_with(&["--bare"], nodes)
    }

    /// `gantry up ARGS --no-ui --port 0 [--nodes NODES]`.
    pub(crate) fn start_with(args: &[&str], nodes: Option<&str>) -> Result<Bare> {
        let dir = tempfile::tempdir()?;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gantry"));
        cmd.arg("up")
            .args(args)
            .args(["--no-ui", "--port", "0", "--kubeconfig"])
            .arg(dir.path().join("kubeconfig"))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("up.log"))?)
            .stderr(std::fs::File::create(dir.path().join("up.err"))?);
        if let Some(n) = nodes {
            cmd.args(["--nodes", n]);
        }
        Ok(Bare {
            child: cmd.spawn()?,
            dir,
        })
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Result<String> {
        kubectl_as(&self.kubeconfig(), self.dir.path(), args)
    }

    pub(crate) fn helm(&self, helm: &Path, args: &[&str]) -> Result<String> {
        let kc = self.kubeconfig();
        let mut all: Vec<&str> = args.to_vec();
        let kcs = kc.to_string_lossy().into_owned();
        all.extend(["--kubeconfig", &kcs]);
        run_helm(helm, &all, &[])
    }

    /// RBAC's denials so far, from the API server's `/metrics`.
    pub(crate) fn denials(&self) -> Result<u64> {
        let m = self.kubectl(&["get", "--raw", "/metrics"])?;
        let line = m
            .lines()
            .find(|l| {
                l.starts_with("apiserver_authorization_decisions_total")
                    && l.contains("decision=\"denied\"")
            })
            .ok_or_else(|| anyhow::anyhow!("no denied counter in /metrics:\n{m}"))?;
        Ok(line.rsplit(' ').next().unwrap_or_default().trim().parse()?)
    }

    /// The sim's log lines naming an RBAC denial (for failure messages).
    pub(crate) fn denial_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("up.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("RBAC: forbidden"))
            .take(10)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `helm install gantry <chart> -n gantry --create-namespace --wait` (+ `extra`), deployed.
    pub(crate) fn install_chart(&self, helm: &Path, extra: &[&str]) -> Result<()> {
        let chart = chart();
        let chart = chart.to_string_lossy().into_owned();
        let mut args = vec![
            "install",
            "gantry",
            &chart,
            "-n",
            "gantry",
            "--create-namespace",
            "--wait",
            "--timeout",
            "180s",
        ];
        args.extend_from_slice(extra);
        let out = self.helm(helm, &args)?;
        anyhow::ensure!(out.contains("STATUS: deployed"), "{out}");
        Ok(())
    }

    pub(crate) async fn wait_ready(&self, nodes: usize) -> Result<()> {
        eventually_secs("gantry up --bare serving its nodes", 60, || async {
            let out = self.kubectl(&["get", "nodes", "-o", "name"])?;
            anyhow::Ok(out.lines().count() == nodes)
        })
        .await?;
        Ok(())
    }
}

fn kubectl_as(kubeconfig: &Path, home: &Path, args: &[&str]) -> Result<String> {
    gantry_testkit::Kubectl {
        kubeconfig,
        dir: home,
    }
    .run_blocking(args)
}

pub(crate) fn kubectl_missing() -> bool {
    !gantry_testkit::Kubectl::installed()
}

/// helm, or `None` (the reason printed) when helm or kubectl cannot be had.
pub(crate) fn helm_and_kubectl() -> Option<&'static Path> {
    let helm = match helm() {
        Ok(h) => h,
        Err(why) => {
            eprintln!("skipping: {why}");
            return None;
        }
    };
    if kubectl_missing() {
        eprintln!("skipping: kubectl is not installed");
        return None;
    }
    Some(helm)
}

const WORKLOADS: &str = r#"
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: default-parent-queue
  resources:
    gpu: {quota: 8, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: batch/v1
kind: Job
metadata: {name: gang, namespace: default, labels: {kai.scheduler/queue: team-a}}
spec:
  parallelism: 2
  completions: 2
  template:
    metadata: {labels: {kai.scheduler/queue: team-a}}
    spec:
      schedulerName: kai-scheduler
      restartPolicy: Never
      containers:
        - {name: train, image: busybox, resources: {limits: {nvidia.com/gpu: "4"}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: half
  namespace: default
  labels: {kai.scheduler/queue: team-a}
  annotations: {gpu-fraction: "0.5"}
spec:
  schedulerName: kai-scheduler
  containers:
    - {name: c, image: busybox}
"#;

/// Phases of the pods matching `selector` in `ns`, with their nodes: `phase@node` each.
fn pods(b: &Bare, ns: &str, selector: &str) -> Result<Vec<String>> {
    let out = b.kubectl(&[
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        selector,
        "-o",
        "jsonpath={range .items[*]}{.status.phase}@{.spec.nodeName}{\"\\n\"}{end}",
    ])?;
    Ok(out.lines().map(str::to_string).collect())
}

fn all_running(p: &[String], n: usize) -> bool {
    p.len() == n && p.iter().all(|s| s.starts_with("Running@") && s.len() > 8)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_uninstall_on_gantry_up_bare() -> Result {
    let Some(helm) = helm_and_kubectl() else {
        return Ok(());
    };
    let b = Bare::start(Some("2xH100-80GB:8,1xcpu"))?;
    b.wait_ready(3).await?;
    // Bare: none of the chart's objects exist yet.
    let ns = b.kubectl(&["get", "namespaces", "-o", "name"])?;
    assert!(
        !ns.contains("gantry-reservation") && !ns.contains("gpu-operator"),
        "{ns}"
    );

    b.install_chart(helm, &[])?;
    let chart = chart();
    let chart = chart.to_string_lossy().into_owned();
    // `--wait` saw both Deployments available; the pods run from the chart's image.
    for c in ["operator", "scheduler"] {
        let sel = format!("app.kubernetes.io/component={c}");
        let p = pods(&b, "gantry", &sel)?;
        assert!(all_running(&p, 1), "{c}: {p:?}");
        let sa = b.kubectl(&[
            "-n",
            "gantry",
            "get",
            "pods",
            "-l",
            &sel,
            "-o",
            "jsonpath={.items[0].spec.serviceAccountName}",
        ])?;
        assert_eq!(sa, format!("gantry-{c}"));
        let rollout = b.kubectl(&[
            "-n",
            "gantry",
            "rollout",
            "status",
            &format!("deployment/gantry-{c}"),
            "--timeout=60s",
        ])?;
        assert!(rollout.contains("successfully rolled out"), "{rollout}");
    }
    eventually_secs("the chart's ClusterPolicy ready", 120, || async {
        let s = b.kubectl(&[
            "get",
            "clusterpolicy",
            "cluster-policy",
            "-o",
            "jsonpath={.status.state}",
        ])?;
        anyhow::Ok(s == "ready")
    })
    .await?;
    eventually_secs("the GPUs advertised", 60, || async {
        let s = b.kubectl(&[
            "get",
            "nodes",
            "-o",
            r"jsonpath={.items[*].status.allocatable.nvidia\.com/gpu}",
        ])?;
        anyhow::Ok(s.split_whitespace().collect::<Vec<_>>() == ["8", "8"])
    })
    .await?;

    // KAI workloads, scheduled by the chart's scheduler (the only one: `--bare`).
    let wl = b.dir.path().join("workloads.yaml");
    std::fs::write(&wl, WORKLOADS)?;
    b.kubectl(&["apply", "-f", &wl.to_string_lossy()])?;
    eventually_secs("the gang's two pods running", 90, || async {
        anyhow::Ok(all_running(
            &pods(&b, "default", "batch.kubernetes.io/job-name=gang")?,
            2,
        ))
    })
    .await?;
    eventually_secs("the gpu-fraction pod running", 90, || async {
        let s = b.kubectl(&[
            "-n",
            "default",
            "get",
            "pod",
            "half",
            "-o",
            "jsonpath={.status.phase}@{.spec.nodeName}",
        ])?;
        anyhow::Ok(s.starts_with("Running@") && s.len() > 8)
    })
    .await?;
    let pg = b.kubectl(&[
        "-n",
        "default",
        "get",
        "podgroups",
        "-o",
        "jsonpath={.items[*].spec.minMember}",
    ])?;
    assert!(
        pg.split_whitespace().any(|m| m == "2"),
        "the gang's PodGroup: {pg}"
    );
    let share = b.kubectl(&[
        "-n",
        "default",
        "get",
        "pod",
        "half",
        "-o",
        "jsonpath={.metadata.labels.runai-gpu-group}",
    ])?;
    assert!(!share.is_empty(), "the fraction pod shares a GPU group");
    let holder = b.kubectl(&[
        "-n",
        "gantry",
        "get",
        "lease",
        "gantry-scheduler",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])?;
    assert!(
        holder.starts_with("gantry-scheduler-"),
        "the chart's pod leads: {holder}"
    );
    assert_eq!(b.denials()?, 0, "RBAC denials:\n{}", b.denial_log());

    // Upgrade: a value change rolls the operator's Deployment to a new ReplicaSet.
    let before = b.kubectl(&[
        "-n",
        "gantry",
        "get",
        "deployment",
        "gantry-operator",
        "-o",
        "jsonpath={.metadata.generation}",
    ])?;
    b.helm(
        helm,
        &[
            "upgrade",
            "gantry",
            &chart,
            "-n",
            "gantry",
            "--set",
            "operator.logging.level=debug",
            "--wait",
            "--timeout",
            "180s",
        ],
    )?;
    let after = b.kubectl(&[
        "-n",
        "gantry",
        "get",
        "deployment",
        "gantry-operator",
        "-o",
        "jsonpath={.metadata.generation}",
    ])?;
    assert_ne!(before, after);
    // operator.upgradeCRD: the pre-upgrade hook Job applied the CRDs as its ServiceAccount.
    let managers = b.kubectl(&[
        "get",
        "crd",
        "clusterpolicies.nvidia.com",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ])?;
    assert!(managers.contains("gantry-crds"), "{managers}");
    let rollout = b.kubectl(&[
        "-n",
        "gantry",
        "rollout",
        "status",
        "deployment/gantry-operator",
        "--timeout=90s",
    ])?;
    assert!(rollout.contains("successfully rolled out"), "{rollout}");
    eventually_secs(
        "the old operator pod gone, the new one running",
        60,
        || async {
            let p = pods(&b, "gantry", "app.kubernetes.io/component=operator")?;
            let env = b.kubectl(&[
                "-n",
                "gantry",
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/component=operator",
                "-o",
                "jsonpath={.items[*].spec.containers[0].env[?(@.name==\"GANTRY_LOG\")].value}",
            ])?;
            anyhow::Ok(all_running(&p, 1) && env == "debug")
        },
    )
    .await?;
    let rs = b.kubectl(&[
        "-n",
        "gantry",
        "get",
        "replicasets",
        "-l",
        "app.kubernetes.io/component=operator",
        "-o",
        "jsonpath={.items[*].spec.replicas}",
    ])?;
    let mut sizes: Vec<&str> = rs.split_whitespace().collect();
    sizes.sort();
    assert_eq!(sizes, ["0", "1"], "old ReplicaSet kept at 0 as history");
    let rev = b.kubectl(&[
        "-n",
        "gantry",
        "get",
        "deployment",
        "gantry-operator",
        "-o",
        r"jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}",
    ])?;
    assert_eq!(rev, "2");
    let s = b.kubectl(&[
        "get",
        "clusterpolicy",
        "cluster-policy",
        "-o",
        "jsonpath={.status.state}",
    ])?;
    assert_eq!(s, "ready");
    assert_eq!(b.denials()?, 0, "RBAC denials:\n{}", b.denial_log());

    // Uninstall: the release's objects go (their pods with them); queues and CRDs stay.
    b.helm(helm, &["uninstall", "gantry", "-n", "gantry", "--wait"])?;
    eventually_secs(
        "the operator's and scheduler's pods and the operands gone",
        60,
        || async {
            let p = b.kubectl(&[
                "-n",
                "gantry",
                "get",
                "pods,deployments,replicasets,daemonsets",
                "-o",
                "name",
            ])?;
            anyhow::Ok(p.trim().is_empty())
        },
    )
    .await?;
    let left = b.kubectl(&["get", "clusterpolicies,clusterroles", "-o", "name"])?;
    assert!(
        !left.contains("cluster-policy")
            && !left.contains("clusterrole.rbac.authorization.k8s.io/gantry-"),
        "{left}"
    );
    let queues = b.kubectl(&["get", "queues", "-o", "name"])?;
    assert!(queues.contains("default-queue"), "kept: {queues}");
    b.kubectl(&["get", "crd", "clusterpolicies.nvidia.com"])?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_without_a_role_gets_403() -> Result {
    if kubectl_missing() {
        eprintln!("skipping: kubectl is not installed");
        return Ok(());
    }
    let b = Bare::start(None)?;
    eventually_secs("gantry up --bare serving", 60, || async {
        b.kubectl(&["get", "namespaces", "-o", "name"])
            .map(|_| true)
    })
    .await?;
    b.kubectl(&["create", "namespace", "x"])?;
    b.kubectl(&["-n", "x", "create", "serviceaccount", "nobody"])?;
    // The TokenRequest API, as `kubectl create token` (and the kubelet) use it.
    let token = b.kubectl(&["-n", "x", "create", "token", "nobody"])?;
    let token = token.trim();
    let as_nobody = |args: &[&str]| {
        let mut all = vec!["--token", token];
        all.extend_from_slice(args);
        b.kubectl(&all)
    };
    assert_eq!(b.denials()?, 0);
    let err = as_nobody(&["-n", "x", "get", "pods"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"pods is forbidden: User "system:serviceaccount:x:nobody" cannot list resource "pods" in API group "" in the namespace "x""#),
        "{err}"
    );
    assert_eq!(b.denials()?, 1);
    // Granted in x only.
    b.kubectl(&[
        "-n",
        "x",
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ])?;
    b.kubectl(&[
        "-n",
        "x",
        "create",
        "rolebinding",
        "nobody-reads",
        "--role=pod-reader",
        "--serviceaccount=x:nobody",
    ])?;
    as_nobody(&["-n", "x", "get", "pods"])?;
    let err = as_nobody(&["-n", "default", "get", "pods"])
        .unwrap_err()
        .to_string();
    assert!(err.contains(r#"in the namespace "default""#), "{err}");
    let err = as_nobody(&["-n", "x", "delete", "pod", "p"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"pods "p" is forbidden"#) && err.contains("cannot delete"),
        "{err}"
    );
    // Deleting the ServiceAccount revokes its token.
    b.kubectl(&["-n", "x", "delete", "serviceaccount", "nobody"])?;
    let err = as_nobody(&["-n", "x", "get", "pods"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Unauthorized"), "{err}");
    assert_eq!(b.denials()?, 3);
    Ok(())
}
