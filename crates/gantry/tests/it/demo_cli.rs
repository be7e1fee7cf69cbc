//! `gantry demo --plain` as a user runs it, from a fresh directory: it succeeds, prints no
//! WARN or ERROR line and no colour codes, draws the grid's legend and the faulted GPU, and
//! its shutdown is silent (the log file it names holds no client errors).

use std::process::Command;

#[test]
fn plain_demo_is_quiet_and_draws_its_legend_and_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .current_dir(dir.path())
        // Four H100 nodes: the story without its MIG and time-slicing parts, in less time.
        .args([
            "demo",
            "--plain",
            "--no-ui",
            "--nodes",
            "4xH100-80GB:8,1xcpu",
        ])
        .env_remove("GANTRY_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("gantry demo runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the demo succeeds:\n{text}");
    let noisy: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(
        noisy.is_empty(),
        "a clean run prints no WARN/ERROR: {noisy:#?}"
    );
    assert!(
        !text.contains('\x1b'),
        "no terminal escape codes in plain output"
    );
    assert!(
        text.contains("one cell per GPU: ██ whole GPU"),
        "plain output explains its cells:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("h100-80gb-0") && l.contains("XX")),
        "the fault phase draws the withdrawn GPU:\n{text}"
    );
    let summary_line = text
        .lines()
        .find(|l| l.starts_with("log: gantry-demo.log ("))
        .unwrap_or_else(|| panic!("the demo names its log file:\n{text}"));
    assert!(summary_line.ends_with(", 0 errors)"), "{summary_line}");
    let log = std::fs::read_to_string(dir.path().join("gantry-demo.log")).expect("the log file");
    assert!(!log.contains("ERROR"), "no errors logged:\n{log}");
    assert!(
        !log.contains("kube_client"),
        "no client complains about the shutdown:\n{log}"
    );
    assert!(!log.contains('\x1b'), "the log file has no colour codes");
}
