//! The crate graph keeps the promises the crates' descriptions make:
//! - the pure crates (`gantry-api`, `gantry-k8s-rules`, the scheduler core without its `k8s`
//!   feature) build without tokio, hyper or rustls (`cargo tree -e normal`);
//! - every dependency a crate declares is used by its code, and every workspace dependency by
//!   some crate (what `cargo machete` checks, without the tool).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gantry is two levels below the workspace root")
        .to_path_buf()
}

/// The package names in `cargo tree -p <package> -e normal <extra>`.
fn normal_dependencies(package: &str, extra: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .args(extra)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} {extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

const IO_STACK: &[&str] = &["tokio", "hyper", "rustls", "mio"];

fn assert_pure(package: &str, extra: &[&str]) {
    let deps = normal_dependencies(package, extra);
    assert!(
        deps.contains(package),
        "cargo tree did not list {package}: {deps:?}"
    );
    let io: Vec<&String> = deps
        .iter()
        .filter(|d| {
            IO_STACK
                .iter()
                .any(|bad| d.as_str() == *bad || d.starts_with(&format!("{bad}-")))
        })
        .collect();
    assert!(
        io.is_empty(),
        "{package} {extra:?} pulls in the I/O stack: {io:?}"
    );
}

#[test]
fn api_types_build_without_the_io_stack() {
    assert_pure("gantry-api", &[]);
    assert_pure("gantry-k8s-rules", &[]);
}

#[test]
fn scheduler_core_builds_without_the_io_stack() {
    assert_pure("gantry-scheduler", &["--no-default-features"]);
    // The check can fail: with its default `k8s` feature the scheduler has the whole stack.
    let full = normal_dependencies("gantry-scheduler", &[]);
    assert!(full.contains("tokio"), "{full:?}");
}

/// Dependencies used where a source scan cannot see them, with the reason.
const USED_UNSEEN: &[(&str, &str)] = &[
    // Code generated into OUT_DIR by tonic-prost-build calls them.
    ("gantry-node", "tonic-prost"),
    ("gantry-node", "prost"),
];

/// `(section, key)` of every dependency in a manifest's dependency tables.
fn declared(manifest: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(manifest).expect("reading a Cargo.toml");
    let doc: toml_edit::DocumentMut = text.parse().expect("parsing a Cargo.toml");
    let mut out = Vec::new();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(t) = doc.get(section).and_then(|t| t.as_table_like()) {
            out.extend(t.iter().map(|(k, _)| (section.to_string(), k.to_string())));
        }
    }
    out
}

/// Every `.rs` file's text under `dirs` of `krate`.
fn sources(krate: &Path, dirs: &[&str]) -> String {
    fn walk(p: &Path, out: &mut String) {
        let Ok(entries) = std::fs::read_dir(p) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                out.push('\n');
            }
        }
    }
    let mut out = String::new();
    for d in dirs {
        let p = krate.join(d);
        if p.is_file() {
            out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
        } else {
            walk(&p, &mut out);
        }
    }
    out
}

/// Whether `code` names crate `ident` as a path (`ident::…`, `use ident`, `extern crate ident`).
fn mentions(code: &str, ident: &str) -> bool {
    code.match_indices(ident).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = &code[i + ident.len()..];
        let boundary = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        boundary && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

#[test]
fn every_declared_dependency_is_used() {
    let root = workspace_root();
    let mut unused = Vec::new();
    let mut used_keys = BTreeSet::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    for krate in &crates {
        let manifest = krate.join("Cargo.toml");
        let doc: toml_edit::DocumentMut =
            std::fs::read_to_string(&manifest).unwrap().parse().unwrap();
        let package = doc["package"]["name"].as_str().unwrap().to_string();
        let lib = sources(krate, &["src", "examples", "benches"]);
        let dev = sources(krate, &["tests", "src", "examples", "benches"]);
        let build = sources(krate, &["build.rs"]);
        for (section, key) in declared(&manifest) {
            used_keys.insert(key.clone());
            let code = match section.as_str() {
                "dependencies" => &lib,
                "dev-dependencies" => &dev,
                _ => &build,
            };
            let ident = key.replace('-', "_");
            let unseen = USED_UNSEEN.contains(&(package.as_str(), key.as_str()));
            if !unseen && !mentions(code, &ident) {
                unused.push(format!("{package} [{section}] {key}"));
            }
        }
    }
    assert!(unused.is_empty(), "declared but never used: {unused:#?}");

    let doc: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let workspace_deps: Vec<String> = doc["workspace"]["dependencies"]
        .as_table_like()
        .unwrap()
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| !used_keys.contains(k))
        .collect();
    assert!(
        workspace_deps.is_empty(),
        "workspace dependencies no crate uses: {workspace_deps:?}"
    );
}

#[test]
fn the_usage_scan_sees_paths_and_not_substrings() {
    assert!(mentions("use tokio::sync;", "tokio"));
    assert!(mentions("let x = serde_json::json!({});", "serde_json"));
    assert!(mentions("extern crate libc;", "libc"));
    assert!(!mentions("use my_tokio::sync;", "tokio"));
    assert!(!mentions("// tokio is not used here", "tokio"));
    assert!(!mentions("use serde_json_ext::x;", "serde_json"));
}
