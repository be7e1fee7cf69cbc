//! Every file under tests/bad/ must give at least one problem, each with a path, and every
//! `# expect: <text>` line of the file must appear in one of the messages. Never a panic.

use std::path::PathBuf;

use gantry_api::validate::validate_text;

fn bad_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bad")
}

#[test]
fn malformed_files_give_clear_errors_with_paths() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(bad_dir())
        .unwrap_or_else(|e| panic!("tests/bad: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "want at least 20 malformed files, have {}",
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{name}: {e}"));
        let problems = validate_text(&text);
        assert!(!problems.is_empty(), "{name}: no problem reported");
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        for p in &problems {
            assert!(
                !p.path.is_empty() && !p.message.is_empty(),
                "{name}: empty path or message in {p:?}"
            );
        }
        let mut expects: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        if text.trim().is_empty()
            || text
                .lines()
                .all(|l| l.starts_with('#') || l.trim().is_empty() || l == "---")
        {
            expects.push("file is empty");
        }
        assert!(!expects.is_empty(), "{name}: add an `# expect:` line");
        for want in expects {
            if !shown.iter().any(|s| s.contains(want)) {
                failures.push(format!("{name}: expected {want:?} in {shown:#?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
