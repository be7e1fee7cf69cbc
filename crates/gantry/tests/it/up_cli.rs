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
