//! `gantry up` refuses bad input before it starts anything, and says each failure once.

use std::process::Command;

fn gantry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
}

/// stdout, stderr and success of `gantry up ARGS` in a scratch directory.
fn up(args: &[&str]) -> (String, String, bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let out = gantry()
        .arg("up")
        .args(["--no-ui", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(args)
        .current_dir(dir.path())
        .output()
        .expect("running gantry up");
    assert!(
        !kubeconfig.exists() || out.status.success(),
        "a failed start left a kubeconfig"
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[test]
fn up_rejects_a_bad_node_spec_before_serving() {
    let (stdout, stderr, ok) = up(&["--port", "0", "--nodes", "3xFOO"]);
    assert!(!ok);
    assert_eq!(stdout, "", "nothing may claim to be serving: {stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line: {stderr}");
    assert!(lines[0].starts_with("error: --nodes \"3xFOO\""), "{stderr}");
    assert!(lines[0].contains("FOO"), "{stderr}");
}

#[test]
fn up_reports_a_port_in_use_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let (stdout, stderr, ok) = up(&["--port", &port]);
    assert!(!ok);
    assert!(!stdout.contains("serving"), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "one error line: {stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "said once: {stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}

/// What is left in a private `$TMPDIR` after a `gantry up` there.
fn leftovers(tmp: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(tmp)
        .expect("reading TMPDIR")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `gantry up` with `args`, its `$TMPDIR` set to `tmp`, nothing else started in-process.
fn up_in(tmp: &std::path::Path, dir: &std::path::Path, args: &[&str]) -> Command {
    let mut c = gantry();
    c.arg("up")
        .args(["--no-ui", "--no-operator", "--no-scheduler", "--port", "0"])
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(args)
        .env("TMPDIR", tmp)
        .current_dir(dir);
    c
}

#[test]
fn a_start_that_fails_part_way_leaves_no_temporary_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A TMPDIR so deep that the first node's kubelet socket path is past the 108-byte limit
    // of Unix sockets: the control plane starts, the nodes then fail.
    let tmp = dir.path().join("t".repeat(100));
    std::fs::create_dir(&tmp).expect("TMPDIR");
    let out = up_in(&tmp, dir.path(), &["--nodes", "2xcpu"])
        .output()
        .expect("running gantry up");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started after all: {stderr}");
    assert!(
        stderr.contains("starting the simulated nodes"),
        "failed elsewhere: {stderr}"
    );
    assert_eq!(leftovers(&tmp), Vec::<String>::new(), "{stderr}");
}

#[test]
fn an_interrupted_start_leaves_no_temporary_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).expect("TMPDIR");
    // 400 nodes: their 800 sockets fit a 1,024-descriptor limit, and starting them takes long
    // enough (~0.3 s) for the signal to land part-way.
    let mut child = up_in(&tmp, dir.path(), &["--nodes", "400xcpu"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running gantry up");
    // Ctrl-C once the sim's directory exists: the nodes are being started.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !leftovers(&tmp).iter().any(|n| n.starts_with("gantry-sim-")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no sim directory appeared"
        );
        assert!(
            child.try_wait().expect("waiting").is_none(),
            "gantry up exited before starting its nodes"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let out = child.wait_with_output().expect("waiting for gantry up");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 130)),
        "{:?}: {stderr}",
        out.status
    );
    assert_eq!(leftovers(&tmp), Vec::<String>::new(), "{stderr}");
}
