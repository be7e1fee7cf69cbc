//! Golden tests for `gantry node toolkit` runtime configuration over a corpus of real-world
//! shaped containerd, Docker and CRI-O configs (tests/testdata/toolkit/<runtime>/<case>):
//! `input/` is the host tree before, `expected/` the host tree after (backups aside), `flags`
//! the options. Every case also checks that a second run is a no-op and that `--uninstall`
//! restores the input byte for byte. `GANTRY_UPDATE_GOLDEN=1` rewrites `expected/`.

use gantry_node::toolkit::agent::{self, AgentConfig};
use gantry_node::toolkit::reload::RecordingReloader;
use gantry_node::toolkit::{BACKUP_SUFFIX, Outcome, Runtime};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

type Tree = BTreeMap<PathBuf, Vec<u8>>;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/toolkit")
}

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
                    fs::read(&path).unwrap(),
                );
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

fn write_tree(root: &Path, tree: &Tree) {
    for (rel, bytes) in tree {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }
}

fn without_backups(tree: &Tree) -> Tree {
    tree.iter()
        .filter(|(p, _)| !p.to_string_lossy().ends_with(BACKUP_SUFFIX))
        .map(|(p, b)| (p.clone(), b.clone()))
        .collect()
}

fn config(host: &Path, runtime: Runtime, flags: &str) -> AgentConfig {
    let mut cfg = AgentConfig::new(host);
    cfg.runtime = Some(runtime);
    cfg.no_cdi = true;
    for flag in flags.split_whitespace() {
        match flag {
            "set-as-default" => cfg.set_as_default = true,
            "enable-cdi" => cfg.enable_cdi = true,
            "drop-in" => cfg.drop_in = true,
            other => panic!("unknown flag {other}"),
        }
    }
    cfg
}

fn same(got: &Tree, want: &Tree, what: &str) {
    assert!(
        got == want,
        "{what}\n--- got:\n{}\n--- want:\n{}",
        show(got),
        show(want)
    );
}

fn show(tree: &Tree) -> String {
    tree.iter()
        .map(|(p, b)| format!("=== {}\n{}", p.display(), String::from_utf8_lossy(b)))
        .collect()
}

/// Lines of `before` appear in `after` in order, except lines whose value we are allowed to
/// change (and an older tool's `nvidia` runtime tables) (trailing commas aside, since JSON needs one before an appended member). A one-line
/// file (compact JSON) is checked as a prefix instead.
fn kept_in_order(before: &str, after: &str) -> Result<(), String> {
    if before.lines().count() == 1 {
        let head = before.trim_end().trim_end_matches('}');
        return after
            .starts_with(head)
            .then_some(())
            .ok_or_else(|| format!("{after:?} does not start with {head:?}"));
    }
    let norm = |l: &str| l.trim_end().trim_end_matches(',').to_string();
    let mut after_lines = after.lines().map(norm);
    let mut in_ours = false;
    for line in before.lines() {
        if line.trim_start().starts_with('[') {
            in_ours = line.contains(".nvidia");
        }
        let ours = [
            "default_runtime_name",
            "default-runtime",
            "enable_cdi",
            "imports =",
        ];
        if in_ours || ours.iter().any(|k| line.contains(k)) {
            continue;
        }
        let want = norm(line);
        if !after_lines.any(|l| l == want) {
            return Err(format!(
                "line {line:?} of the input is missing or out of order in the output"
            ));
        }
    }
    Ok(())
}

fn run_case(case: &Path, runtime: Runtime) {
    let name = case.display().to_string();
    let flags = fs::read_to_string(case.join("flags")).unwrap_or_default();
    let input = read_tree(&case.join("input"));
    let tmp = tempfile::tempdir().unwrap();
    write_tree(tmp.path(), &input);
    let cfg = config(tmp.path(), runtime, &flags);

    // Install.
    let mut reloads = RecordingReloader::default();
    let report = agent::run(&cfg, &mut reloads).unwrap_or_else(|e| panic!("{name}: {e}"));
    let after_all = read_tree(tmp.path());
    let after = without_backups(&after_all);
    let expected_dir = case.join("expected");
    if std::env::var_os("GANTRY_UPDATE_GOLDEN").is_some() {
        let _ = fs::remove_dir_all(&expected_dir);
        write_tree(&expected_dir, &after);
    }
    let expected = read_tree(&expected_dir);
    same(
        &after,
        &expected,
        &format!("{name}: output differs from expected/"),
    );
    assert!(
        report.files.iter().any(|(_, o)| *o != Outcome::Unchanged),
        "{name}: nothing changed"
    );
    assert_eq!(
        reloads.reloads,
        vec![runtime],
        "{name}: one reload after a change"
    );

    // Everything else kept, and the originals backed up.
    for (rel, before) in &input {
        let now = &after[rel];
        if now != before {
            let backup = PathBuf::from(format!("{}{BACKUP_SUFFIX}", rel.display()));
            assert_eq!(
                after_all.get(&backup),
                Some(before),
                "{name}: backup of {}",
                rel.display()
            );
            kept_in_order(
                &String::from_utf8_lossy(before),
                &String::from_utf8_lossy(now),
            )
            .unwrap_or_else(|e| panic!("{name}: {}: {e}", rel.display()));
        }
    }

    // A second run is a no-op.
    let mut again = RecordingReloader::default();
    let report = agent::run(&cfg, &mut again).unwrap_or_else(|e| panic!("{name}: second run: {e}"));
    assert!(
        report.files.iter().all(|(_, o)| *o == Outcome::Unchanged),
        "{name}: second run changed {:?}",
        report.files
    );
    assert!(again.reloads.is_empty(), "{name}: second run reloaded");
    same(
        &read_tree(tmp.path()),
        &after_all,
        &format!("{name}: second run touched files"),
    );

    // Uninstall restores the input exactly.
    let undo = AgentConfig {
        uninstall: true,
        ..cfg.clone()
    };
    let mut undo_reloads = RecordingReloader::default();
    agent::run(&undo, &mut undo_reloads).unwrap_or_else(|e| panic!("{name}: uninstall: {e}"));
    let restored = read_tree(tmp.path());
    same(
        &restored,
        &input,
        &format!("{name}: uninstall did not restore the input"),
    );
    assert_eq!(
        undo_reloads.reloads,
        vec![runtime],
        "{name}: reload after uninstall"
    );

    // And uninstalling again changes nothing.
    let mut none = RecordingReloader::default();
    agent::run(&undo, &mut none).unwrap_or_else(|e| panic!("{name}: second uninstall: {e}"));
    same(
        &read_tree(tmp.path()),
        &input,
        &format!("{name}: second uninstall"),
    );
    assert!(none.reloads.is_empty(), "{name}: second uninstall reloaded");
}

fn run_corpus(dir: &str, runtime: Runtime) {
    let mut cases: Vec<PathBuf> = fs::read_dir(testdata().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 3, "corpus {dir} is too small");
    for case in cases {
        run_case(&case, runtime);
    }
}

#[test]
fn containerd_corpus() {
    run_corpus("containerd", Runtime::Containerd);
}

#[test]
fn docker_corpus() {
    run_corpus("docker", Runtime::Docker);
}

#[test]
fn crio_corpus() {
    run_corpus("crio", Runtime::Crio);
}

/// Malformed files are left untouched (no backup, no drop-in) and the error names the file
/// and the position. `case`: first line runtime and flags, second line the expected message.
#[test]
fn malformed_files_are_untouched_and_named() {
    let mut cases: Vec<PathBuf> = fs::read_dir(testdata().join("malformed"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 5);
    for case in cases {
        let spec = fs::read_to_string(case.join("case")).unwrap();
        let mut lines = spec.lines();
        let mut head = lines.next().unwrap().split_whitespace();
        let runtime = match head.next().unwrap() {
            "containerd" => Runtime::Containerd,
            "docker" => Runtime::Docker,
            "crio" => Runtime::Crio,
            other => panic!("runtime {other}"),
        };
        let flags: Vec<&str> = head.collect();
        let want = lines.next().unwrap();
        let input = read_tree(&case.join("input"));
        let tmp = tempfile::tempdir().unwrap();
        write_tree(tmp.path(), &input);
        let cfg = config(tmp.path(), runtime, &flags.join(" "));
        let mut reloads = RecordingReloader::default();
        let err = agent::run(&cfg, &mut reloads)
            .expect_err(&case.display().to_string())
            .to_string();
        assert!(
            err.contains(want),
            "{}: error {err:?} does not contain {want:?}",
            case.display()
        );
        assert!(err.contains("left untouched"), "{err}");
        same(
            &read_tree(tmp.path()),
            &input,
            &format!("{}: files were touched", case.display()),
        );
        assert!(reloads.reloads.is_empty());
    }
}

/// A file edited by someone else after install loses only our entries on uninstall.
#[test]
fn uninstall_after_a_later_edit_removes_only_our_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let input = read_tree(&testdata().join("containerd/v2-comments-kata/input"));
    write_tree(tmp.path(), &input);
    let cfg = config(tmp.path(), Runtime::Containerd, "set-as-default");
    agent::run(&cfg, &mut RecordingReloader::default()).unwrap();
    let path = tmp.path().join("etc/containerd/config.toml");
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str("\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gvisor]\n  runtime_type = \"io.containerd.runsc.v1\"\n");
    fs::write(&path, &text).unwrap();

    let undo = AgentConfig {
        uninstall: true,
        ..cfg
    };
    agent::run(&undo, &mut RecordingReloader::default()).unwrap();
    let out = fs::read_to_string(&path).unwrap();
    assert!(out.contains("runtimes.gvisor"), "{out}");
    assert!(!out.contains("nvidia"), "{out}");
    assert!(
        !tmp.path()
            .join(format!("etc/containerd/config.toml{BACKUP_SUFFIX}"))
            .exists()
    );
    let original =
        String::from_utf8(input[Path::new("etc/containerd/config.toml")].clone()).unwrap();
    kept_in_order(&original, &out).unwrap();
}

/// `--dry-run` computes the files but writes nothing.
#[test]
fn dry_run_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = read_tree(&testdata().join("containerd/v3-containerd2/input"));
    write_tree(tmp.path(), &input);
    let cfg = AgentConfig {
        dry_run: true,
        ..config(tmp.path(), Runtime::Containerd, "drop-in")
    };
    let mut reloads = RecordingReloader::default();
    let report = agent::run(&cfg, &mut reloads).unwrap();
    assert_eq!(report.planned.len(), 2, "{report:?}");
    assert!(
        report
            .planned
            .iter()
            .any(|p| p.path == Path::new("/etc/containerd/conf.d/99-nvidia.toml"))
    );
    same(&read_tree(tmp.path()), &input, "dry run");
    assert!(reloads.reloads.is_empty());
}

/// `--runtime auto` picks containerd when its socket or config exists.
#[test]
fn auto_detects_the_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    let host = gantry_node::toolkit::hostfs::HostRoot::new(tmp.path());
    assert!(Runtime::detect(&host).is_err());
    host.write_atomic(Path::new("/etc/docker/daemon.json"), b"{}")
        .unwrap();
    assert_eq!(Runtime::detect(&host).unwrap(), Runtime::Docker);
    host.write_atomic(Path::new("/run/containerd/containerd.sock"), b"")
        .unwrap();
    assert_eq!(Runtime::detect(&host).unwrap(), Runtime::Containerd);
}

/// A reload that cannot happen (no pid file, no process) fails before any file is written,
/// so the next run still sees the change to make and reloads then.
#[test]
fn unreachable_runtime_fails_before_writing() {
    use gantry_node::toolkit::hostfs::HostRoot;
    use gantry_node::toolkit::reload::SignalReloader;
    let tmp = tempfile::tempdir().unwrap();
    let input = read_tree(&testdata().join("containerd/v3-containerd2/input"));
    write_tree(tmp.path(), &input);
    let cfg = config(tmp.path(), Runtime::Containerd, "");
    let mut signal = SignalReloader {
        host: HostRoot::new(tmp.path()),
        pid_file: None,
    };
    let err = agent::run(&cfg, &mut signal).unwrap_err().to_string();
    assert!(
        err.contains("no pid file /run/containerd/containerd.pid"),
        "{err}"
    );
    same(&read_tree(tmp.path()), &input, "nothing written");
}
