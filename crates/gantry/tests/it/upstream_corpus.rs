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
/// for 189 GB GB200 boards, which the catalog does not model).
#[test]
fn builtin_default_names_every_upstream_config() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let text = std::fs::read_to_string(dir.join("mig-parted-config-default.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let upstream: gantry_api::mig_parted::MigPartedConfig =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let ours = gantry_api::mig_parted::default_config();
    let missing: Vec<&String> = upstream
        .mig_configs
        .keys()
        .filter(|k| !ours.mig_configs.contains_key(*k))
        .collect();
    assert_eq!(missing, ["all-3g.95gb", "all-4g.95gb", "all-7g.189gb"]);
    // Upstream's 68 less those three, plus B300's six.
    assert_eq!(
        (upstream.mig_configs.len(), ours.mig_configs.len()),
        (68, 71)
    );
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
