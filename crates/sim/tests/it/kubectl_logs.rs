//! `kubectl logs` against the embedded API server: an in-process agent's tracing output is
//! its container's log, with `-c`, `--tail`, `-f`, `--previous`, and the real server's errors
//! for a container that does not exist or has not started.

use crate::kubectl::{KUBECTL, Kubectl};
use gantry_sim::kubelet::in_process::AgentFuture;
use gantry_sim::kubelet::{AgentContext, AgentRegistry};
use gantry_testkit::{Cluster, eventually_secs};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

type Result<T = ()> = anyhow::Result<T>;

/// An agent that logs `tick N` every 100 ms; with env `TICKS` it fails after that many.
fn ticker(mut ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let limit: Option<u32> = ctx.env.get("TICKS").and_then(|t| t.parse().ok());
        tracing::info!(node = %ctx.node_name, "ticker starting");
        for n in 1.. {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = ctx.shutdown.changed() => return Ok(()),
            }
            tracing::info!("tick {n}");
            tracing::debug!("not in the log: below INFO");
            if limit.is_some_and(|l| n >= l) {
                return Err(format!("done after {n} ticks").into());
            }
        }
        Ok(())
    })
}

/// A pod on l4-0 whose `main` container is the ticker; `side` adds a plain container (the
/// sim restarts a pod's containers together, so a crashing pod has no side container).
fn pod(name: &str, extra_env: &str, volume: bool, side: bool) -> String {
    let (mounts, volumes) = if volume {
        (
            "    volumeMounts:\n    - {name: cfg, mountPath: /cfg}\n",
            "  volumes:\n  - name: cfg\n    configMap: {name: not-there}\n",
        )
    } else {
        ("", "")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: l4-0\n  containers:\n  - name: main\n    image: gantry\n    command: [gantry, node, validator]\n    env: [{extra_env}]\n{mounts}{side}{volumes}",
        side = if side {
            "  - name: side\n    image: busybox\n"
        } else {
            ""
        }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_follows_and_refuses_like_a_real_server() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let mut agents = AgentRegistry::new();
    agents.register("validator", Arc::new(ticker));
    let env = Cluster::builder()
        .nodes("1xL4:1")
        .agents(agents)
        .start()
        .await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };

    let f = k.write("ticker.yaml", &pod("ticker", "", false, true))?;
    k.run(&["apply", "-f", &f]).await?;
    let out = eventually_secs("ticker's tick 3 in kubectl logs", 60, || async {
        let out = k
            .run(&["logs", "ticker", "-c", "main"])
            .await
            .unwrap_or_default();
        anyhow::Ok(out.contains("tick 3").then_some(out))
    })
    .await?;
    assert!(
        out.lines()
            .next()
            .is_some_and(|l| l.contains("INFO") && l.contains("ticker starting node=l4-0")),
        "{out}"
    );
    assert!(!out.contains("below INFO"), "{out}");
    // The first container is the default (kubectl says so on stderr).
    assert!(
        k.run(&["logs", "ticker"])
            .await?
            .contains("ticker starting")
    );
    let tail = k
        .run(&["logs", "ticker", "-c", "main", "--tail", "2"])
        .await?;
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(tail.contains("tick"), "{tail}");
    // A plain container prints nothing.
    assert_eq!(k.run(&["logs", "ticker", "-c", "side"]).await?, "");

    // -f: lines keep arriving after the ones already written.
    let mut follow = k
        .cmd(&["logs", "-f", "ticker", "-c", "main", "--tail", "1"])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = follow
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let tick = |l: &str| {
        l.rsplit("tick ")
            .next()
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await??
        .and_then(|l| tick(&l))
        .ok_or_else(|| anyhow::anyhow!("no first line from kubectl logs -f"))?;
    let mut last = first;
    while last < first + 5 {
        let l = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await??
            .ok_or_else(|| anyhow::anyhow!("kubectl logs -f ended early"))?;
        let n = tick(&l).ok_or_else(|| anyhow::anyhow!("not a tick: {l}"))?;
        assert_eq!(n, last + 1, "lines in order, none lost");
        last = n;
    }
    follow.kill().await?;

    // Errors, as the real server words them.
    let err = k
        .run(&["logs", "ticker", "-c", "nope"])
        .await
        .expect_err("no such container");
    assert!(
        err.to_string()
            .contains("container nope is not valid for pod ticker"),
        "{err}"
    );
    let err = k.run(&["logs", "ghost"]).await.expect_err("no such pod");
    assert!(
        err.to_string().contains("pods \"ghost\" not found"),
        "{err}"
    );
    let f = k.write("stuck.yaml", &pod("stuck", "", true, true))?;
    k.run(&["apply", "-f", &f]).await?;
    let err = eventually_secs("stuck's container waiting", 60, || async {
        let e = k.run(&["logs", "stuck", "-c", "main"]).await.err();
        anyhow::Ok(e.filter(|e| e.to_string().contains("is waiting to start")))
    })
    .await?;
    assert!(
        err.to_string()
            .contains("container \"main\" in pod \"stuck\" is waiting to start: ContainerCreating"),
        "{err}"
    );

    // --previous: the run before a restart, with the error the agent exited with.
    let f = k.write(
        "crasher.yaml",
        &pod("crasher", "{name: TICKS, value: \"2\"}", false, false),
    )?;
    k.run(&["apply", "-f", &f]).await?;
    let prev = eventually_secs("crasher restarted", 60, || async {
        let out = k
            .run(&["logs", "crasher", "-c", "main", "--previous"])
            .await
            .ok();
        anyhow::Ok(out.filter(|o| o.contains("Error: done after 2 ticks")))
    })
    .await?;
    assert!(prev.contains("tick 1") && prev.contains("tick 2"), "{prev}");
    let err = k
        .run(&["logs", "ticker", "-c", "main", "--previous"])
        .await
        .expect_err("never restarted");
    assert!(
        err.to_string()
            .contains("previous terminated container \"main\" in pod \"ticker\" not found"),
        "{err}"
    );
    Ok(())
}
