//! `gantry node <agent>`: one subcommand per entry of the agent registry, run on this machine
//! (here on simulated GPUs, `--sim-model`), ending as a command line tool does.

use std::process::{Command, Output};

fn node(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("node")
        .args(args)
        // The agents' env names must not leak in from the test's environment.
        .env_remove("NODE_NAME")
        .env_remove("CONFIG_MAP")
        .env_remove("CONFIG_FILE")
        .output()
        .expect("running gantry node")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn node_help_lists_every_registered_agent() {
    let out = node(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = text(&out.stdout);
    for agent in gantry_node::agent::AGENTS {
        assert!(
            help.contains(agent.name) && help.contains(agent.about),
            "{} missing: {help}",
            agent.name
        );
    }
}

#[test]
fn agents_run_on_simulated_gpus_and_report_on_stdout() {
    let out = node(&[
        "discovery",
        "--sim-model",
        "A100-40GB",
        "--sim-gpus",
        "2",
        "--print",
        "--no-timestamp",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let labels = text(&out.stdout);
    assert!(labels.contains("nvidia.com/gpu.count=2\n"), "{labels}");
    assert!(
        labels.contains("nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n"),
        "{labels}"
    );
    let out = node(&[
        "device-plugin",
        "--sim-model",
        "H100-80GB",
        "--sim-gpus",
        "2",
        "--health-check",
        "0",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.starts_with("health policy: "), "{report}");
    assert_eq!(
        report.lines().filter(|l| l.contains(": Healthy (")).count(),
        2,
        "{report}"
    );
}

#[test]
fn bad_command_lines_end_as_a_cli_does() {
    // Rejected by clap: usage error, exit code 2.
    let out = node(&["device-plugin", "--bogus"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("'--bogus'"), "{out:?}");
    // Parsed but meaningless: the flag and value named, exit code 1.
    let out = node(&["device-plugin", "--config-map", "bad"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        text(&out.stderr).trim_end(),
        "error: --config-map \"bad\": expected namespace/name"
    );
    // A failure while running: the agent named.
    let out = node(&["exporter", "--sim-model", "no-such-gpu"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).starts_with("error: gantry node exporter: --sim-model"),
        "{out:?}"
    );
}
