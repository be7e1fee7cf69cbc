//! The real `kubectl` against a test cluster, as a user runs it: the cluster's kubeconfig and
//! a HOME of its own (kubectl's discovery cache stays in the test's directory).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tokio::process::Command;

/// Where the machines this project runs on have kubectl (tests skip, saying so, without it).
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// How long one kubectl call may take before the test fails.
const CALL_LIMIT: Duration = Duration::from_secs(60);

pub struct Kubectl<'a> {
    pub kubeconfig: &'a Path,
    /// HOME, and where [`Kubectl::write`] puts manifests.
    pub dir: &'a Path,
}

impl Kubectl<'_> {
    /// Is kubectl installed? A test that needs it prints why it skips when it is not.
    pub fn installed() -> bool {
        Path::new(KUBECTL).exists()
    }

    /// The command, ready for more arguments or its own stdin/stdout handling.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(KUBECTL);
        c.arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args(args)
            .env("HOME", self.dir)
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl; its stdout, or an error with its stderr unless it exits 0.
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::time::timeout(CALL_LIMIT, self.cmd(args).output())
            .await
            .with_context(|| format!("kubectl {args:?} took over {CALL_LIMIT:?}"))?
            .with_context(|| format!("running {KUBECTL}"))?;
        stdout_of("kubectl", args, &out)
    }

    /// [`Kubectl::run`] for tests without an async runtime at hand.
    pub fn run_blocking(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = std::process::Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args(args)
            .env("HOME", self.dir)
            .output()
            .with_context(|| format!("running {KUBECTL}"))?;
        stdout_of("kubectl", args, &out)
    }

    /// Writes `content` to `name` in the test's directory; the path, for `-f`.
    pub fn write(&self, name: &str, content: &str) -> anyhow::Result<String> {
        let p = self.dir.join(name);
        std::fs::write(&p, content).with_context(|| format!("writing {}", p.display()))?;
        Ok(p.display().to_string())
    }

    /// `kubectl apply -f` of a manifest string.
    pub async fn apply(&self, name: &str, content: &str) -> anyhow::Result<String> {
        let p = self.write(name, content)?;
        self.run(&["apply", "-f", &p]).await
    }
}

/// A finished command's stdout, or an error naming the command, its arguments and its stderr
/// (and the stdout, which often says more) unless it exited 0.
pub fn stdout_of(
    program: &str,
    args: &[&str],
    out: &std::process::Output,
) -> anyhow::Result<String> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_call_names_its_arguments_and_stderr() {
        if !Kubectl::installed() {
            eprintln!("skipping: {KUBECTL} is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("missing-kubeconfig");
        let k = Kubectl {
            kubeconfig: &kc,
            dir: dir.path(),
        };
        for e in [
            k.run(&["get", "pods"]).await.unwrap_err().to_string(),
            k.run_blocking(&["get", "pods"]).unwrap_err().to_string(),
        ] {
            assert!(e.contains(r#"kubectl ["get", "pods"] failed"#), "{e}");
            assert!(e.contains("missing-kubeconfig"), "{e}");
        }
    }
}
