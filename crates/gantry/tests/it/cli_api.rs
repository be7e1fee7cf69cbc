//! CLI tests for `gantry crds` and `gantry validate`.

use std::path::PathBuf;
use std::process::Command;

fn gantry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
}

fn api_tests(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../api/tests")
        .join(sub)
}

#[test]
fn crds_prints_every_crd_as_yaml() {
    let out = gantry()
        .arg("crds")
        .output()
        .unwrap_or_else(|e| panic!("run gantry: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut kinds = Vec::new();
    let (docs, err) = gantry_api::validate::parse_documents(&text);
    assert!(err.is_none(), "not YAML: {err:?}");
    for v in docs {
        assert_eq!(v["kind"], "CustomResourceDefinition");
        kinds.push(
            v["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert_eq!(
        kinds,
        [
            "ClusterPolicy",
            "NVIDIADriver",
            "MigClusterPolicy",
            "Queue",
            "PodGroup",
            "Topology"
        ]
    );
}

#[test]
fn crds_output_dir_matches_deploy() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = gantry()
        .args(["crds", "--output-dir"])
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success());
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    for (name, _) in gantry_api::crds::crd_files().unwrap_or_else(|e| panic!("{e}")) {
        let a = std::fs::read_to_string(dir.path().join(&name)).unwrap_or_default();
        let b = std::fs::read_to_string(deploy.join(&name)).unwrap_or_default();
        assert_eq!(a, b, "{name} differs from deploy/crds");
    }
}

#[test]
fn validate_good_files_exit_zero() {
    let mut cmd = gantry();
    cmd.args(["validate", "-f"]);
    for f in [
        "clusterpolicy-helm-defaults.yaml",
        "queues-two-level.yaml",
        "podgroups.yaml",
        "device-plugin-time-slicing.yaml",
        "mig-parted-examples.yaml",
        "migclusterpolicies.yaml",
    ] {
        cmd.arg(api_tests("fixtures").join(f));
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(": ok")).count(),
        6,
        "{stdout}"
    );
}

#[test]
fn validate_bad_files_exit_one_with_paths() {
    let bad = api_tests("bad");
    let out = gantry()
        .args(["validate", "-f"])
        .arg(bad.join("dp-replicas-one.yaml"))
        .arg(bad.join("mig-unknown-profile.yaml"))
        .arg(api_tests("fixtures").join("queues-default.yaml"))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "dp-replicas-one.yaml: sharing.timeSlicing.resources[0].replicas: must be >= 2, got 1"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("mig-unknown-profile.yaml: mig-configs[\"all-1g.7gb\"][0].mig-devices[\"1g.7gb\"]: unknown MIG profile"), "{stdout}");
    assert!(stdout.contains("queues-default.yaml: ok"), "{stdout}");
}

#[test]
fn validate_reads_stdin_and_reports_missing_files() {
    use std::io::Write;
    let mut child = gantry()
        .args(["validate", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(b"version: v1\nflags: {migStrategy: bogus}\n")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.contains("<stdin>: flags.migStrategy: must be one of"),
        "{stdout}"
    );
    let out = gantry()
        .args(["validate", "-f", "/nonexistent/x.yaml"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/nonexistent/x.yaml: cannot read"));
}

#[test]
fn validate_refuses_deep_nesting_before_parsing() {
    // 100,000 levels: the API server refuses it at once; validate must too (the YAML parser
    // alone would take minutes), naming the file and the limit.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("deep.json");
    let n = 100_000;
    let body = format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
    std::fs::write(&path, body).unwrap_or_else(|e| panic!("{e}"));
    let out = gantry()
        .args(["validate", "-f"])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let want = format!(
        "{}: <document>: nested more than 128 levels deep",
        path.display()
    );
    assert!(stdout.contains(&want), "{stdout}");
    assert!(!stdout.contains("note:"), "nothing else is said: {stdout}");
}
