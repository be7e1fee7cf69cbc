//! Runs every command of `docs/quickstart.md`, as a user would, in order: each line of the
//! `sh` blocks goes to `bash -c` with the freshly built `gantry` in place of
//! `cargo run --release --`; a line ending in `&` runs in the background for the rest of the
//! test; `export K=V` sets the environment of the lines after it; a line ending in
//! `# expect: TEXT` is retried until its output is exactly TEXT.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gantry_testkit::{Look, eventually_secs};

/// How long a retried line (kubectl, or one with `# expect:`) may take to succeed.
const RETRY_FOR_SECS: u64 = 240;

struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SIGTERM first so `gantry up` shuts down cleanly; then make sure.
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The lines of the doc's ```sh blocks, continuation lines joined.
fn sh_lines(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in doc.lines() {
        let t = line.trim_end();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if in_sh && !t.trim().is_empty() && !t.trim_start().starts_with('#') {
            out.push(t.to_string());
        }
    }
    out
}

/// `(command, expected output)`: the expectation is a trailing `# expect: …` comment.
fn split_expect(line: &str) -> (String, Option<String>) {
    match line.split_once("# expect:") {
        Some((cmd, exp)) => (cmd.trim().to_string(), Some(exp.trim().to_string())),
        None => (line.trim().to_string(), None),
    }
}

fn bash(cmd: &str, dir: &Path, env: &[(String, String)]) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(format!("set -o pipefail; {cmd}"))
        .current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn every_quickstart_command_works() {
    if !kubectl_available() {
        eprintln!("skipping: kubectl is not on PATH (the quick start uses it)");
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(repo.join("docs/quickstart.md")).expect("docs/quickstart.md");
    let gantry = env!("CARGO_BIN_EXE_gantry");
    // A scratch working directory that sees the repository's deploy/ like a clone's root.
    let work = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        repo.join("deploy").canonicalize().expect("deploy/"),
        work.path().join("deploy"),
    )
    .expect("symlink deploy/");
    let mut env: Vec<(String, String)> = vec![("GANTRY_LOG".into(), "warn".into())];
    let mut bg = Background(Vec::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime for the waits");
    let lines = sh_lines(&doc);
    assert!(
        lines.len() >= 10,
        "the quick start lost its commands: {lines:?}"
    );

    for line in lines {
        let (cmd, expect) = split_expect(&line);
        let cmd = cmd.replace("cargo run --release --", gantry);
        eprintln!("$ {cmd}");
        if let Some(assign) = cmd.strip_prefix("export ") {
            let (k, v) = assign.split_once('=').expect("export K=V");
            let v = v.replace("$PWD", &work.path().display().to_string());
            env.push((k.to_string(), v));
            continue;
        }
        if let Some(cmd) = cmd.strip_suffix('&') {
            let log = std::fs::File::create(work.path().join(format!("bg-{}.log", bg.0.len())))
                .expect("log");
            let child = bash(cmd, work.path(), &env)
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("spawn background command");
            bg.0.push(child);
            continue;
        }
        // kubectl lines may race the cluster (a CRD not yet served, pods not yet up): retry
        // them; anything else (the demo, a fault) runs once.
        let retry = expect.is_some() || cmd.starts_with("kubectl ");
        // A limit of 0 looks once.
        let limit = if retry { RETRY_FOR_SECS } else { 0 };
        let ran = rt.block_on(eventually_secs(&format!("`{cmd}`"), limit, || async {
            let out = bash(&cmd, work.path(), &env).output().expect("run command");
            let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let ok = match &expect {
                Some(e) => out.status.success() && &stdout == e,
                None => out.status.success(),
            };
            if ok {
                return Look::Done(stdout);
            }
            // Each look starts processes: at most one every 0.7 s.
            tokio::time::sleep(Duration::from_millis(600)).await;
            Look::Seen(format!(
                "exit {:?}\nexpected: {expect:?}\nstdout: {stdout}\nstderr: {stderr}",
                out.status.code()
            ))
        }));
        match ran {
            Ok(stdout) => {
                if stdout.contains("Summary") {
                    eprintln!("{stdout}");
                }
            }
            Err(e) => {
                let logs: Vec<String> = (0..bg.0.len())
                    .map(|i| {
                        std::fs::read_to_string(work.path().join(format!("bg-{i}.log")))
                            .unwrap_or_default()
                    })
                    .collect();
                panic!(
                    "quick start command failed: {e}\nbackground logs:\n{}",
                    logs.join("\n---\n")
                );
            }
        }
    }
}

#[test]
fn the_harness_reads_the_doc_as_written() {
    let doc = "text\n```sh\ncargo run --release -- up &\n# a comment\nkubectl get x   # expect: 8 8\n```\n```console\nnot run\n```\n";
    let lines = sh_lines(doc);
    assert_eq!(
        lines,
        [
            "cargo run --release -- up &",
            "kubectl get x   # expect: 8 8"
        ]
    );
    assert_eq!(
        split_expect(&lines[1]),
        ("kubectl get x".to_string(), Some("8 8".to_string()))
    );
    assert_eq!(split_expect("a b").1, None);
}
