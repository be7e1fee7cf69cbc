//! Property tests for runtime configuration over the golden corpus inputs: whatever sequence
//! of installs (with any options) runs, each result equals a single install from the original,
//! repeating it changes nothing, and an uninstall gives back the original bytes.

use gantry_node::toolkit::Runtime;
use gantry_node::toolkit::agent::{self, AgentConfig};
use gantry_node::toolkit::reload::RecordingReloader;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

type Tree = BTreeMap<PathBuf, String>;

const CASES: &[(&str, Runtime, bool)] = &[
    ("containerd/v2-default-systemd", Runtime::Containerd, false),
    ("containerd/v2-comments-kata", Runtime::Containerd, false),
    ("containerd/v2-comments-kata", Runtime::Containerd, true),
    ("containerd/v3-containerd2", Runtime::Containerd, false),
    ("containerd/v3-imports-present", Runtime::Containerd, true),
    (
        "containerd/v2-nvidia-ctk-configured",
        Runtime::Containerd,
        false,
    ),
    ("containerd/missing-file", Runtime::Containerd, false),
    ("docker/existing-runtimes", Runtime::Docker, false),
    ("docker/tabs-cdi", Runtime::Docker, false),
    ("docker/missing-file", Runtime::Docker, false),
    ("crio/crio-conf-runc", Runtime::Crio, false),
];

fn read_tree(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.map(|e| e.unwrap()) {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(
                    path.strip_prefix(root).unwrap().to_path_buf(),
                    fs::read_to_string(&path).unwrap(),
                );
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

fn host_with(input: &Tree) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (rel, bytes) in input {
        let path = tmp.path().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }
    tmp
}

fn cfg(host: &Path, runtime: Runtime, drop_in: bool, (default, cdi): (bool, bool)) -> AgentConfig {
    let mut cfg = AgentConfig::new(host);
    cfg.runtime = Some(runtime);
    cfg.no_cdi = true;
    cfg.drop_in = drop_in;
    cfg.set_as_default = default;
    cfg.enable_cdi = cdi;
    cfg
}

fn without_backups(tree: Tree) -> Tree {
    tree.into_iter()
        .filter(|(p, _)| !p.to_string_lossy().ends_with(".gantry-backup"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn installs_never_compound_and_uninstall_restores(
        case in 0..CASES.len(),
        ops in prop::collection::vec((any::<bool>(), any::<bool>()), 1..5),
        undo in (any::<bool>(), any::<bool>()),
    ) {
        let (dir, runtime, drop_in) = CASES[case];
        let input = read_tree(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/toolkit").join(dir).join("input"));
        let host = host_with(&input);
        for flags in ops {
            let c = cfg(host.path(), runtime, drop_in, flags);
            agent::run(&c, &mut RecordingReloader::default()).unwrap();
            let now = read_tree(host.path());

            let fresh = host_with(&input);
            agent::run(&cfg(fresh.path(), runtime, drop_in, flags), &mut RecordingReloader::default()).unwrap();
            prop_assert_eq!(without_backups(now.clone()), without_backups(read_tree(fresh.path())), "{} {:?}", dir, flags);

            let mut again = RecordingReloader::default();
            agent::run(&c, &mut again).unwrap();
            prop_assert!(again.reloads.is_empty());
            prop_assert_eq!(&read_tree(host.path()), &now);
        }
        let c = AgentConfig { uninstall: true, ..cfg(host.path(), runtime, drop_in, undo) };
        agent::run(&c, &mut RecordingReloader::default()).unwrap();
        prop_assert_eq!(read_tree(host.path()), input);
    }
}
