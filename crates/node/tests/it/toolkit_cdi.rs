//! CDI generation over a fake driver root (plain files standing in for libraries, binaries,
//! firmware, sockets and device nodes): the spec lists exactly the files present, validates
//! against CDI 1.1.0, is written only when it changes, and generation is deterministic.

use gantry_node::toolkit::Outcome;
use gantry_node::toolkit::agent::{self, AgentConfig};
use gantry_node::toolkit::cdi::{self, DriverFiles, Gpu, Input, MigDevice, Options, Spec};
use gantry_node::toolkit::hostfs::HostRoot;
use gantry_node::toolkit::reload::RecordingReloader;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const VERSION: &str = "550.54.15";

/// Files of the fake driver root; `extra` are present but must not be in the spec.
const PRESENT: &[&str] = &[
    "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
    "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15",
    "usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.550.54.15",
    "usr/lib/x86_64-linux-gnu/libnvidia-nvvm.so.550.54.15",
    "usr/bin/nvidia-smi",
    "usr/bin/nvidia-debugdump",
    "usr/bin/nvidia-persistenced",
    "lib/firmware/nvidia/550.54.15/gsp_ga10x.bin",
    "lib/firmware/nvidia/550.54.15/gsp_tu10x.bin",
    "run/nvidia-persistenced/socket",
    "dev/nvidia0",
    "dev/nvidia1",
    "dev/nvidiactl",
    "dev/nvidia-uvm",
    "dev/nvidia-uvm-tools",
    "dev/nvidia-caps/nvidia-cap1",
    "dev/nvidia-caps/nvidia-cap2",
    "dev/nvidia-caps/nvidia-cap12",
    "dev/nvidia-caps/nvidia-cap13",
];
const DISTRACTORS: &[&str] = &[
    "usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3",
    "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.0.1",
    "usr/bin/ls",
    "lib/firmware/nvidia/535.0.1/gsp_ga10x.bin",
    "dev/nvidia-foo",
    "dev/null",
];

fn fake_root() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in PRESENT.iter().chain(DISTRACTORS) {
        let p = tmp.path().join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, "").unwrap();
    }
    let lib = tmp.path().join("usr/lib/x86_64-linux-gnu");
    std::os::unix::fs::symlink("libcuda.so.550.54.15", lib.join("libcuda.so.1")).unwrap();
    std::os::unix::fs::symlink("libcuda.so.1", lib.join("libcuda.so")).unwrap();
    // Merged /usr: /lib -> usr/lib must not list the libraries twice.
    std::os::unix::fs::symlink("usr/lib", tmp.path().join("lib64")).unwrap();
    fs::create_dir_all(tmp.path().join("var")).unwrap();
    std::os::unix::fs::symlink("/run", tmp.path().join("var/run")).unwrap();
    tmp
}

fn discover(root: &Path) -> DriverFiles {
    cdi::discover(&HostRoot::new(root), Path::new("/"), Path::new("/"), None).unwrap()
}

fn paths_in(spec: &Spec) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut mounts = BTreeSet::new();
    let mut nodes = BTreeSet::new();
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    for e in edits {
        mounts.extend(e.mounts.iter().map(|m| m.host_path.clone()));
        nodes.extend(e.device_nodes.iter().filter_map(|n| n.host_path.clone()));
    }
    (mounts, nodes)
}

fn backend_like_input(driver: DriverFiles) -> Input {
    Input {
        gpus: vec![
            Gpu {
                index: 1,
                uuid: Some("GPU-b2f1c3d4-0000-1111-2222-333344445555".into()),
                minor: 1,
                pci_bus_id: Some("00000000:3B:00.0".into()),
                ..Default::default()
            },
            Gpu {
                index: 0,
                uuid: Some("GPU-a1e0b2c3-0000-1111-2222-333344445555".into()),
                minor: 0,
                pci_bus_id: Some("00000000:17:00.0".into()),
                ..Default::default()
            },
        ],
        migs: vec![MigDevice {
            parent: 0,
            index: 0,
            gi: 1,
            ci: 0,
            uuid: Some("MIG-5c1f3e2a-aaaa-bbbb-cccc-ddddeeeeffff".into()),
            gi_cap_minor: 12,
            ci_cap_minor: 13,
        }],
        driver,
    }
}

#[test]
fn spec_lists_exactly_the_present_files() {
    let root = fake_root();
    let driver = discover(root.path());
    assert_eq!(driver.version.as_deref(), Some(VERSION));
    let spec = cdi::generate(&backend_like_input(driver), &Options::default()).unwrap();
    cdi::validate(&spec).unwrap();

    let (mounts, nodes) = paths_in(&spec);
    let want_mounts: BTreeSet<String> = PRESENT
        .iter()
        .filter(|p| !p.starts_with("dev/"))
        .map(|p| format!("/{p}"))
        .collect();
    let want_nodes: BTreeSet<String> = PRESENT
        .iter()
        .filter(|p| p.starts_with("dev/"))
        .filter(|p| !p.ends_with("cap1") && !p.ends_with("cap2"))
        .map(|p| format!("/{p}"))
        .collect();
    assert_eq!(mounts, want_mounts);
    assert_eq!(nodes, want_nodes);

    let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "0",
            "GPU-a1e0b2c3-0000-1111-2222-333344445555",
            "0:0",
            "MIG-5c1f3e2a-aaaa-bbbb-cccc-ddddeeeeffff",
            "1",
            "GPU-b2f1c3d4-0000-1111-2222-333344445555",
            "all"
        ]
    );
    assert_eq!(spec.kind, "nvidia.com/gpu");
    assert_eq!(spec.cdi_version, "0.5.0");
    let env = &spec.container_edits.env;
    assert!(env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()));
    assert!(env.contains(&"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu".to_string()));
    let hooks: Vec<String> = spec
        .container_edits
        .hooks
        .iter()
        .map(|h| h.args.join(" "))
        .collect();
    assert_eq!(
        hooks,
        [
            "nvidia-cdi-hook create-symlinks --link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
            "nvidia-cdi-hook enable-cuda-compat --host-driver-version=550.54.15",
            "nvidia-cdi-hook update-ldcache --folder /usr/lib/x86_64-linux-gnu",
        ]
    );

    // The spec survives a strict round trip and matches the golden file.
    let yaml = cdi::to_yaml(&spec).unwrap();
    assert_eq!(
        cdi::from_yaml(&yaml, Path::new("nvidia.yaml")).unwrap(),
        spec
    );
    let golden =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/toolkit/cdi/fake-root.yaml");
    if std::env::var_os("GANTRY_UPDATE_GOLDEN").is_some() {
        fs::create_dir_all(golden.parent().unwrap()).unwrap();
        fs::write(&golden, &yaml).unwrap();
    }
    assert_eq!(yaml, fs::read_to_string(&golden).unwrap());
}

#[test]
fn a_driver_root_moves_host_paths_not_container_paths() {
    let tmp = tempfile::tempdir().unwrap();
    for f in [
        "run/nvidia/driver/usr/lib64/libcuda.so.570.1.2",
        "run/nvidia/driver/dev/nvidia0",
        "run/nvidia/driver/dev/nvidiactl",
    ] {
        let p = tmp.path().join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, "").unwrap();
    }
    let driver = cdi::discover(
        &HostRoot::new(tmp.path()),
        Path::new("/run/nvidia/driver"),
        Path::new("/run/nvidia/driver"),
        None,
    )
    .unwrap();
    let input = Input {
        gpus: cdi::gpus_from_device_nodes(&driver),
        migs: vec![],
        driver,
    };
    let spec = cdi::generate(&input, &Options::default()).unwrap();
    let m = &spec.container_edits.mounts[0];
    assert_eq!(
        (m.host_path.as_str(), m.container_path.as_str()),
        (
            "/run/nvidia/driver/usr/lib64/libcuda.so.570.1.2",
            "/usr/lib64/libcuda.so.570.1.2"
        )
    );
    let n = &spec.devices[0].container_edits.device_nodes[0];
    assert_eq!(
        (n.path.as_str(), n.host_path.as_deref()),
        ("/dev/nvidia0", Some("/run/nvidia/driver/dev/nvidia0"))
    );
}

#[test]
fn missing_nodes_are_errors_not_silent_omissions() {
    let root = fake_root();
    let driver = discover(root.path());
    let mut input = backend_like_input(driver);
    input.gpus[0].minor = 7;
    let err = cdi::generate(&input, &Options::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("/dev/nvidia7 not found"), "{err}");
    let mut input = backend_like_input(discover(root.path()));
    input.migs[0].ci_cap_minor = 99;
    let err = cdi::generate(&input, &Options::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nvidia-cap99 not found"), "{err}");
}

#[test]
fn cdi_only_writes_once_and_follows_device_changes() {
    let root = fake_root();
    let mut cfg = AgentConfig::new(root.path());
    cfg.cdi_only = true;
    let mut rec = RecordingReloader::default();
    let report = agent::run(&cfg, &mut rec).unwrap();
    let spec_path = PathBuf::from("/var/run/cdi/nvidia.yaml");
    assert_eq!(report.files, vec![(spec_path.clone(), Outcome::Created)]);
    assert_eq!(report.cdi_devices, ["0", "1", "all"]);
    // /var/run -> /run inside the host root: the spec lands in the host's /run/cdi.
    let written = fs::read_to_string(root.path().join("run/cdi/nvidia.yaml")).unwrap();
    let spec = cdi::from_yaml(&written, Path::new("nvidia.yaml")).unwrap();
    cdi::validate(&spec).unwrap();

    let report = agent::run(&cfg, &mut rec).unwrap();
    assert_eq!(report.files, vec![(spec_path.clone(), Outcome::Unchanged)]);
    fs::write(root.path().join("dev/nvidia2"), "").unwrap();
    let report = agent::run(&cfg, &mut rec).unwrap();
    assert_eq!(report.files, vec![(spec_path.clone(), Outcome::Updated)]);
    assert_eq!(report.cdi_devices, ["0", "1", "2", "all"]);
    assert!(rec.reloads.is_empty(), "CDI never signals the runtime");

    let undo = AgentConfig {
        uninstall: true,
        ..cfg
    };
    let report = agent::run(&undo, &mut rec).unwrap();
    assert_eq!(report.files, vec![(spec_path, Outcome::Removed)]);
    assert!(!root.path().join("run/cdi/nvidia.yaml").exists());
}

#[test]
fn no_gpus_is_an_error_naming_the_dev_root() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = AgentConfig::new(tmp.path());
    cfg.cdi_only = true;
    let err = agent::run(&cfg, &mut RecordingReloader::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no /dev/nvidia<N> device nodes"), "{err}");
}

fn arb_driver() -> impl Strategy<Value = DriverFiles> {
    let libs = prop::collection::btree_set("lib[a-z-]{1,8}", 0..6);
    let bins =
        prop::sample::subsequence(vec!["nvidia-smi", "nvidia-debugdump", "nvidia-imex"], 0..3);
    let ctl = prop::sample::subsequence(
        vec![
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset",
        ],
        0..4,
    );
    (libs, bins, ctl, any::<bool>()).prop_map(|(libs, bins, ctl, cuda)| {
        let mut libraries: Vec<PathBuf> = libs
            .into_iter()
            .map(|l| PathBuf::from(format!("/usr/lib64/{l}.so.{VERSION}")))
            .collect();
        if cuda {
            libraries.insert(0, PathBuf::from(format!("/usr/lib64/libcuda.so.{VERSION}")));
        }
        DriverFiles {
            driver_root: PathBuf::from("/"),
            dev_root: PathBuf::from("/"),
            version: Some(VERSION.into()),
            libraries,
            binaries: bins
                .into_iter()
                .map(|b| PathBuf::from(format!("/usr/bin/{b}")))
                .collect(),
            control_nodes: ctl.into_iter().map(PathBuf::from).collect(),
            gpu_minors: (0..8).collect(),
            cap_minors: (0..200).collect(),
            ..Default::default()
        }
    })
}

fn arb_input() -> impl Strategy<Value = Input> {
    let gpus = prop::collection::btree_map(0u32..8, (any::<bool>(), "[0-9a-f]{8}"), 1..6);
    (
        gpus,
        arb_driver(),
        prop::collection::vec((0usize..8, 1u32..8, 0u32..4), 0..10),
    )
        .prop_map(|(gpus, driver, migs)| {
            let gpus: Vec<Gpu> = gpus
                .into_iter()
                .map(|(i, (has_uuid, u))| Gpu {
                    index: i,
                    minor: i,
                    uuid: has_uuid.then(|| format!("GPU-{u}-0000")),
                    ..Default::default()
                })
                .collect();
            let mut seen = BTreeSet::new();
            let migs = migs
                .into_iter()
                .filter_map(|(p, gi, ci)| {
                    let parent = gpus[p % gpus.len()].index;
                    seen.insert((parent, gi, ci)).then_some((parent, gi, ci))
                })
                .enumerate()
                .map(|(n, (parent, gi, ci))| MigDevice {
                    parent,
                    index: n as u32,
                    gi,
                    ci,
                    uuid: Some(format!("MIG-{parent}-{gi}-{ci}")),
                    gi_cap_minor: 10 + gi * 10,
                    ci_cap_minor: 11 + gi * 10 + ci,
                })
                .collect();
            Input { gpus, migs, driver }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn generation_is_deterministic_valid_and_names_are_unique(input in arb_input(), seed in any::<u64>()) {
        let spec = cdi::generate(&input, &Options::default()).unwrap();
        // Same devices in another order: same spec, same bytes.
        let mut shuffled = input.clone();
        let k = (seed as usize) % shuffled.gpus.len().max(1);
        shuffled.gpus.rotate_left(k);
        shuffled.migs.reverse();
        let again = cdi::generate(&shuffled, &Options::default()).unwrap();
        prop_assert_eq!(cdi::to_yaml(&spec).unwrap(), cdi::to_yaml(&again).unwrap());
        prop_assert!(cdi::validate(&spec).is_ok());

        let names: Vec<&String> = spec.devices.iter().map(|d| &d.name).collect();
        let unique: BTreeSet<&String> = names.iter().copied().collect();
        prop_assert_eq!(unique.len(), names.len());
        let expected = input.gpus.len()
            + input.gpus.iter().filter(|g| g.uuid.is_some()).count()
            + input.migs.len() * 2
            + 1;
        prop_assert_eq!(names.len(), expected);
        // Every mount is one of the driver files, and every one of them is mounted.
        let mounts: BTreeSet<String> = spec.container_edits.mounts.iter().map(|m| m.container_path.clone()).collect();
        let files: BTreeSet<String> = input.driver.libraries.iter().chain(&input.driver.binaries).map(|p| p.display().to_string()).collect();
        prop_assert_eq!(mounts, files);
    }
}

/// The spec written on a real H200 node (driver 580.159.04, libraries under
/// /usr/local/nvidia/lib64 found through ld.so.conf) parses strictly and validates.
#[test]
fn spec_observed_on_an_h200_validates() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/toolkit/cdi/h200-observed.yaml");
    let spec = cdi::from_yaml(&fs::read_to_string(&path).unwrap(), &path).unwrap();
    cdi::validate(&spec).unwrap();
    assert_eq!(
        spec.devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["0", "all"]
    );
    assert!(
        spec.container_edits
            .mounts
            .iter()
            .any(|m| m.host_path == "/usr/local/nvidia/lib64/libcuda.so.580.159.04")
    );
}
