//! The upstream corpus: files written in the shapes of upstream's own samples and defaults
//! (mig-parted's default config and the GPU Operator's ConfigMap of it, the device plugin
//! README's configs, KAI's docs), each run through `gantry validate`, which must accept it.
//! The agents' handling of the same files is tested where they live: the MIG manager in
//! `gantry-node`'s `mig_upstream`, the device plugin and discovery in `sharing_follow`.

use std::path::PathBuf;
use std::process::Command;

fn corpus() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_upstream_shaped_fixture_passes_gantry_validate() {
    let files = corpus();
    assert!(files.len() >= 5, "corpus: {files:?}");
    for f in files {
        let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(["validate", "-f"])
            .arg(&f)
            .output()
            .unwrap_or_else(|e| panic!("run gantry: {e}"));
        assert!(
            out.status.success(),
            "{}: {}{}",
            f.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every named config of upstream's default is in Gantry's built-in default (but the three
/// for 189 GB GB200 boards: one profile table per PCI id, the 186 GB one).
#[test]
fn builtin_default_names_every_upstream_config() {
    let (upstream, missing) =
        configs_missing_from_builtin("tests/fixtures/upstream/mig-parted-config-default.yaml");
    assert_eq!(missing, ["all-3g.95gb", "all-4g.95gb", "all-7g.189gb"]);
    // Upstream's 68 less those three, plus HGX B300's seven and GB300's six.
    let ours = gantry_api::mig_parted::default_config().mig_configs.len();
    assert_eq!((upstream, ours), (68, 78));
}

/// How many configs a mig-parted file names, and those Gantry's built-in default lacks.
fn configs_missing_from_builtin(file: &str) -> (usize, Vec<String>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let upstream: gantry_api::mig_parted::MigPartedConfig =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let ours = gantry_api::mig_parted::default_config();
    let missing = upstream
        .mig_configs
        .keys()
        .filter(|k| !ours.mig_configs.contains_key(*k))
        .cloned()
        .collect();
    (upstream.mig_configs.len(), missing)
}

fn validate(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("validate")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run gantry: {e}"));
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("write stdin");
    drop(input);
    let out = child.wait_with_output().expect("gantry validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// NVIDIA's files as NVIDIA ships them (tests/fixtures/upstream/nvidia/README.md): mig-parted's
/// default config and the GPU Operator's `default-mig-parted-config` ConfigMap pass, and every
/// config mig-parted's file names is in Gantry's built-in default but the 189 GB GB200 three.
#[test]
fn nvidias_mig_files_pass_gantry_validate() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/nvidia");
    for name in [
        "mig-parted-config-default.yaml",
        "gpu-operator-0400_configmap.yaml",
    ] {
        let f = dir.join(name);
        let (ok, out) = validate(&["-f", &f.display().to_string()], None);
        assert!(ok, "{name}: {out}");
        assert!(out.contains(&format!("{}: ok", f.display())), "{out}");
    }
    let (_, missing) = configs_missing_from_builtin(
        "tests/fixtures/upstream/nvidia/mig-parted-config-default.yaml",
    );
    assert_eq!(missing, ["all-3g.95gb", "all-4g.95gb", "all-7g.189gb"]);
}

/// HGX B300's entries in the shape NVIDIA's newer default gives them pass; an entry for a GPU
/// nobody knows yet is a warning when a device-filter scopes it (mig-parted skips it on other
/// GPUs), and an error when it applies to every GPU.
#[test]
fn b300_entries_in_upstreams_shape_pass() {
    let b300 = r#"version: v1
mig-configs:
  all-1g.34gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.34gb": 7
  all-1g.34gb.me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.34gb+me": 1
  all-1g.67gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.67gb": 4
  all-7g.269gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "7g.269gb": 1
  all-balanced:
    - device-filter: ["0x318210DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.34gb": 2
        "2g.67gb": 1
        "3g.135gb": 1
    - device-filter: ["0x4F0010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.99gb": 2
        "4g.135gb": 1
"#;
    let (ok, out) = validate(&["-f", "-"], Some(b300));
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "<stdin>: note: mig-configs.all-balanced[1].mig-devices[\"1g.99gb\"]: warning: no GPU Gantry knows has profile \"1g.99gb\""
        ),
        "{out}"
    );
    assert!(out.contains("<stdin>: ok"), "{out}");
    let unscoped = "version: v1\nmig-configs:\n  all-1g.99gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.99gb\": 7}\n";
    let (ok, out) = validate(&["-f", "-"], Some(unscoped));
    assert!(!ok, "{out}");
    assert!(out.contains("unknown MIG profile"), "{out}");
}

/// dcgm-exporter's CSV shapes, the 1.x-compatibility one included: each selects the metrics
/// Gantry can read, under the CSV's own names (fields it cannot read are skipped with a log).
#[test]
fn dcgm_exporter_csvs_select_metrics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    for (file, first, skipped) in [
        (
            "dcgm-exporter-1.x-compatibility-metrics.csv",
            "dcgm_sm_clock",
            0,
        ),
        (
            "dcgm-exporter-dcp-metrics-included.csv",
            "DCGM_FI_DEV_SM_CLOCK",
            1,
        ),
    ] {
        let set = gantry_node::exporter::load_metric_set(Some(&dir.join(file)))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(set.metrics[0].name, first, "{file}");
        assert!(set.metrics.len() >= 10, "{file}: {:?}", set.metrics);
        assert_eq!(
            set.unsupported.len(),
            skipped,
            "{file}: {:?}",
            set.unsupported
        );
    }
}
