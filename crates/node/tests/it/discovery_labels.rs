//! GFD label computation on the simulated backend: every catalog model, the three MIG
//! strategies, and sharing configs.

use std::sync::Arc;

use gantry_gpu::catalog::{self, GpuModel};
use gantry_gpu::{Backend, SimBackend, SimConfig};
use gantry_node::discovery::{self, DiscoveryError, DiscoveryOptions, Labels, MigStrategy, config};

fn sim(model: &'static GpuModel, count: u32) -> Arc<SimBackend> {
    Arc::new(SimBackend::new(SimConfig::new(model, count, 7)))
}

fn opts(strategy: MigStrategy, config_file: Option<std::path::PathBuf>) -> DiscoveryOptions {
    DiscoveryOptions {
        mig_strategy: Some(strategy),
        no_timestamp: true,
        config_file,
        host_root: std::path::PathBuf::from("/nonexistent-host-root"),
        ..Default::default()
    }
}

fn labels(b: &SimBackend, strategy: MigStrategy) -> Labels {
    discovery::labels_once(&opts(strategy, None), b).expect("labels")
}

fn get<'a>(l: &'a Labels, key: &str) -> &'a str {
    l.get(&format!("nvidia.com/{key}"))
        .map(String::as_str)
        .unwrap_or_else(|| panic!("label nvidia.com/{key} missing in {l:#?}"))
}

fn with_config(
    b: &SimBackend,
    strategy: MigStrategy,
    yaml: &str,
) -> Result<Labels, DiscoveryError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    discovery::labels_once(&opts(strategy, Some(path)), b)
}

/// Enable MIG on `gpu` and create one GI+full CI per profile name.
fn mig(b: &SimBackend, gpu: u32, profiles: &[&str]) {
    b.set_mig_mode(gpu, true).expect("enable MIG");
    for p in profiles {
        let gi = b.create_gpu_instance(gpu, p, None).expect("create GI");
        b.create_compute_instance(gpu, gi.id, gi.slices)
            .expect("create CI");
    }
}

fn expected_family(model: &GpuModel) -> &'static str {
    match model.compute_capability {
        (8, 0) => "ampere",
        (8, 9) => "ada-lovelace",
        (9, _) => "hopper",
        (10 | 12, _) => "blackwell",
        (7, 5) => "turing",
        other => panic!("catalog model with unexpected compute capability {other:?}"),
    }
}

#[test]
fn every_catalog_model_labels_whole_gpus() {
    for model in catalog::MODELS {
        let b = sim(model, 2);
        let l = labels(&b, MigStrategy::None);
        let info = b.device_info(0).expect("info");
        let mem = b.memory(0).expect("memory").total_mib;
        assert_eq!(get(&l, "gpu.count"), "2", "{}", model.key);
        assert_eq!(
            get(&l, "gpu.product"),
            info.name.replace(' ', "-"),
            "{}",
            model.key
        );
        assert_eq!(get(&l, "gpu.memory"), mem.to_string(), "{}", model.key);
        assert_eq!(
            get(&l, "gpu.family"),
            expected_family(model),
            "{}",
            model.key
        );
        assert_eq!(
            get(&l, "gpu.compute.major"),
            model.compute_capability.0.to_string()
        );
        assert_eq!(
            get(&l, "gpu.compute.minor"),
            model.compute_capability.1.to_string()
        );
        assert_eq!(get(&l, "gpu.replicas"), "1");
        assert_eq!(get(&l, "gpu.sharing-strategy"), "none");
        assert_eq!(get(&l, "mig.capable"), model.mig_capable().to_string());
        assert_eq!(get(&l, "cuda.driver-version.full"), "580.159.04");
        assert_eq!(get(&l, "cuda.driver-version.major"), "580");
        assert_eq!(get(&l, "cuda.driver-version.minor"), "159");
        assert_eq!(get(&l, "cuda.driver-version.revision"), "04");
        assert_eq!(get(&l, "cuda.driver.rev"), "04");
        assert_eq!(get(&l, "cuda.runtime-version.full"), "13.0");
        assert_eq!(get(&l, "cuda.runtime.major"), "13");
        assert_eq!(get(&l, "mps.capable"), "false");
        assert_eq!(get(&l, "vgpu.present"), "false");
        assert_eq!(get(&l, "gpu.machine"), "unknown");
        assert_eq!(get(&l, "gpu.mode"), "unknown");
        assert!(!l.contains_key("nvidia.com/mig.strategy"));
        assert!(!l.contains_key("nvidia.com/gfd.timestamp"));
    }
}

#[test]
fn h200_matches_the_real_machine() {
    let b = sim(&catalog::H200, 1);
    let l = labels(&b, MigStrategy::None);
    assert_eq!(get(&l, "gpu.product"), "NVIDIA-H200");
    assert_eq!(get(&l, "gpu.memory"), "143771");
    assert_eq!(get(&l, "gpu.family"), "hopper");
    assert_eq!(get(&l, "gpu.compute.major"), "9");
    assert_eq!(get(&l, "gpu.compute.minor"), "0");
    assert_eq!(get(&l, "mig.capable"), "true");
}

#[test]
fn timestamp_machine_and_mode_from_host_root() {
    let b = sim(&catalog::L4, 1);
    let root = tempfile::tempdir().expect("tempdir");
    let dmi = root.path().join("sys/class/dmi/id");
    std::fs::create_dir_all(&dmi).expect("mkdir");
    std::fs::write(dmi.join("product_name"), "ProLiant DL380 Gen11\n").expect("write");
    let bus = b.device_info(0).expect("info").pci_bus_id;
    let (dom, rest) = bus.split_once(':').expect("bus id");
    let bdf = format!(
        "{:04x}:{}",
        u32::from_str_radix(dom, 16).expect("hex"),
        rest.to_lowercase()
    );
    let dev = root.path().join("sys/bus/pci/devices").join(bdf);
    std::fs::create_dir_all(&dev).expect("mkdir");
    std::fs::write(dev.join("class"), "0x030200\n").expect("write");
    let o = DiscoveryOptions {
        host_root: root.path().to_path_buf(),
        ..Default::default()
    };
    let l = discovery::labels_once(&o, b.as_ref()).expect("labels");
    assert_eq!(get(&l, "gpu.machine"), "ProLiant-DL380-Gen11");
    assert_eq!(get(&l, "gpu.mode"), "compute");
    let ts: u64 = get(&l, "gfd.timestamp").parse().expect("unix seconds");
    assert!(ts > 1_600_000_000);
}

#[test]
fn mixed_strategy_labels_each_profile() {
    let model = &catalog::H100_SXM5_80GB;
    let small = model.mig[0].name;
    let big = model
        .mig
        .iter()
        .find(|p| p.slices == 3 && !p.name.contains('+'))
        .expect("a 3g profile")
        .name;
    let b = sim(model, 2);
    mig(&b, 0, &[small, small, big]);
    let l = labels(&b, MigStrategy::Mixed);
    assert_eq!(get(&l, "mig.strategy"), "mixed");
    // Whole-GPU labels: both GPUs counted; GPU 1 (MIG off) is the last writer.
    assert_eq!(get(&l, "gpu.count"), "2");
    assert_eq!(get(&l, "gpu.replicas"), "1");
    let devices = b.mig_devices(0).expect("mig devices");
    let small_dev = devices
        .iter()
        .find(|d| d.profile == small)
        .expect("small device");
    let key = |p: &str, k: &str| format!("mig-{p}.{k}");
    assert_eq!(get(&l, &key(small, "count")), "2");
    assert_eq!(get(&l, &key(big, "count")), "1");
    assert_eq!(
        get(&l, &key(small, "product")),
        format!("NVIDIA-H100-80GB-HBM3-MIG-{small}")
    );
    assert_eq!(
        get(&l, &key(small, "memory")),
        small_dev.memory_mib.to_string()
    );
    assert_eq!(
        get(&l, &key(small, "multiprocessors")),
        small_dev.sm_count.to_string()
    );
    assert_eq!(get(&l, &key(small, "slices.gi")), "1");
    assert_eq!(get(&l, &key(small, "slices.ci")), "1");
    assert_eq!(
        get(&l, &key(small, "engines.copy")),
        small_dev.engines.copy.to_string()
    );
    assert_eq!(get(&l, &key(small, "replicas")), "1");
    assert_eq!(get(&l, &key(small, "sharing-strategy")), "none");
    assert!(!l.contains_key(&format!("nvidia.com/mig-{small}.family")));
}

#[test]
fn none_strategy_gives_mig_enabled_gpus_zero_replicas() {
    let model = &catalog::A100_SXM4_40GB;
    let b = sim(model, 1);
    mig(&b, 0, &[model.mig[0].name]);
    let l = labels(&b, MigStrategy::None);
    assert_eq!(get(&l, "gpu.count"), "1");
    assert_eq!(get(&l, "gpu.replicas"), "0");
    assert_eq!(get(&l, "gpu.sharing-strategy"), "none");
    assert_eq!(get(&l, "gpu.product"), "NVIDIA-A100-SXM4-40GB");
    assert!(l.keys().all(|k| !k.starts_with("nvidia.com/mig-")));
}

#[test]
fn single_strategy_valid_layout() {
    let model = &catalog::A100_SXM4_80GB;
    let p = model.mig[0].name;
    let b = sim(model, 2);
    mig(&b, 0, &[p, p]);
    mig(&b, 1, &[p, p, p]);
    let l = labels(&b, MigStrategy::Single);
    let d = &b.mig_devices(1).expect("devices")[0];
    assert_eq!(get(&l, "mig.strategy"), "single");
    assert_eq!(get(&l, "gpu.count"), "5");
    assert_eq!(
        get(&l, "gpu.product"),
        format!("NVIDIA-A100-SXM4-80GB-MIG-{p}")
    );
    assert_eq!(get(&l, "gpu.memory"), d.memory_mib.to_string());
    assert_eq!(get(&l, "gpu.multiprocessors"), d.sm_count.to_string());
    assert_eq!(get(&l, "gpu.replicas"), "1");
    assert_eq!(get(&l, "gpu.family"), "ampere");
}

#[test]
fn single_strategy_invalid_layouts() {
    let model = &catalog::H200;
    let (a, c) = (
        model.mig[0].name,
        model.mig.iter().find(|p| p.slices == 2).expect("2g").name,
    );
    let invalid = |l: &Labels| {
        assert_eq!(get(l, "gpu.product"), "NVIDIA-H200-MIG-INVALID");
        assert_eq!(get(l, "gpu.count"), "0");
        assert_eq!(get(l, "gpu.replicas"), "0");
        assert_eq!(get(l, "gpu.memory"), "0");
        assert_eq!(get(l, "gpu.sharing-strategy"), "");
    };
    // MIG on one GPU, off on the other.
    let b = sim(model, 2);
    mig(&b, 0, &[a]);
    invalid(&labels(&b, MigStrategy::Single));
    // MIG on but no MIG devices.
    let b = sim(model, 1);
    mig(&b, 0, &[]);
    invalid(&labels(&b, MigStrategy::Single));
    // Two profiles.
    let b = sim(model, 1);
    mig(&b, 0, &[a, c]);
    invalid(&labels(&b, MigStrategy::Single));
    // No MIG at all: whole GPUs, as with `none`.
    let b = sim(model, 1);
    assert_eq!(
        get(&labels(&b, MigStrategy::Single), "gpu.product"),
        "NVIDIA-H200"
    );
}

const TS_PLAIN: &str = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n";
const TS_RENAMED: &str = "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n";
const MPS: &str = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n";

#[test]
fn time_slicing_adds_shared_suffix_unless_renamed() {
    let b = sim(&catalog::T4, 2);
    let l = with_config(&b, MigStrategy::None, TS_PLAIN).expect("labels");
    assert_eq!(get(&l, "gpu.product"), "Tesla-T4-SHARED");
    assert_eq!(get(&l, "gpu.replicas"), "4");
    assert_eq!(get(&l, "gpu.sharing-strategy"), "time-slicing");
    assert_eq!(get(&l, "gpu.count"), "2");
    assert_eq!(get(&l, "mps.capable"), "false");
    let l = with_config(&b, MigStrategy::None, TS_RENAMED).expect("labels");
    assert_eq!(get(&l, "gpu.product"), "Tesla-T4");
    assert_eq!(get(&l, "gpu.replicas"), "4");
    assert_eq!(get(&l, "gpu.sharing-strategy"), "time-slicing");
}

#[test]
fn mps_sharing_and_its_mig_conflict() {
    let model = &catalog::H100_SXM5_80GB;
    let b = sim(model, 1);
    let l = with_config(&b, MigStrategy::None, MPS).expect("labels");
    assert_eq!(get(&l, "mps.capable"), "true");
    assert_eq!(get(&l, "gpu.sharing-strategy"), "mps");
    assert_eq!(get(&l, "gpu.replicas"), "3");
    assert_eq!(get(&l, "gpu.product"), "NVIDIA-H100-80GB-HBM3-SHARED");
    // The device plugin refuses MPS under `mixed`; GFD labels what the plugin then advertises:
    // no MPS and no replicas (the only GPU is MIG-enabled, so no whole GPU either).
    mig(&b, 0, &[model.mig[0].name]);
    let l = with_config(&b, MigStrategy::Mixed, MPS).expect("labels");
    assert_ne!(get(&l, "gpu.sharing-strategy"), "mps");
    assert_eq!(get(&l, "gpu.replicas"), "0");
}

#[test]
fn mixed_strategy_shares_a_mig_resource() {
    let model = &catalog::A100_SXM4_40GB;
    let p = model.mig[0].name;
    let b = sim(model, 1);
    mig(&b, 0, &[p, p]);
    let yaml = format!(
        "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-{p}\n      replicas: 2\n"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, yaml).expect("write");
    // The strategy comes from the file when the flag is not given.
    let o = DiscoveryOptions {
        config_file: Some(path),
        no_timestamp: true,
        ..Default::default()
    };
    let l = discovery::labels_once(&o, b.as_ref()).expect("labels");
    assert_eq!(get(&l, "mig.strategy"), "mixed");
    assert_eq!(get(&l, &format!("mig-{p}.replicas")), "2");
    assert_eq!(
        get(&l, &format!("mig-{p}.sharing-strategy")),
        "time-slicing"
    );
    assert_eq!(
        get(&l, &format!("mig-{p}.product")),
        format!("NVIDIA-A100-SXM4-40GB-MIG-{p}-SHARED")
    );
    // The whole GPU has MIG on: no sharing there.
    assert_eq!(get(&l, "gpu.replicas"), "0");
}

#[test]
fn config_errors_name_the_file() {
    let b = sim(&catalog::L4, 1);
    let err = with_config(&b, MigStrategy::None, "flags: [").expect_err("bad yaml");
    assert!(err.to_string().contains("config.yaml"), "{err}");
    let parsed = config::parse("").expect("empty config");
    assert_eq!(parsed, config::DiscoveryConfig::default());
}

#[test]
fn print_format_is_sorted_key_value_lines() {
    let b = sim(&catalog::L4, 1);
    let text = discovery::render(&labels(&b, MigStrategy::None));
    let lines: Vec<&str> = text.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    assert!(
        lines.contains(&"nvidia.com/gpu.product=NVIDIA-L4"),
        "{text}"
    );
}
