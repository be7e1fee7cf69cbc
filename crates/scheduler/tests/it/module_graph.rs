//! No import loops between the scheduler's modules (`gantry_testkit::module_graph`).

use gantry_testkit::module_graph::{crate_src, loops, new_loops};

/// Loops that remain while other work clears them (issue #43). A loop outside this list
/// fails; remove an entry once its loop is gone.
const KNOWN_LOOPS: &[&[&str]] = &[
    &["gpushare::fgd", "gpushare::fill"],
    &[
        "k8s",
        "k8s::binder",
        "k8s::run_loop",
        "k8s::run_loop::boot",
        "k8s::run_loop::writer",
    ],
    &["snapshot", "snapshot::groups", "snapshot::index"],
];

#[test]
fn scheduler_modules_import_no_loop() {
    let new = new_loops("scheduler", KNOWN_LOOPS);
    assert!(new.is_empty(), "import loops in scheduler: {new:?}");
    // The core's own layers (framework, actions, decisions, state, sharing) have none.
    let found = loops(&crate_src("scheduler"));
    assert!(
        found
            .iter()
            .flatten()
            .all(|m| !["framework", "actions", "decisions", "sharing"]
                .iter()
                .any(|p| m.starts_with(p))),
        "{found:?}"
    );
}
