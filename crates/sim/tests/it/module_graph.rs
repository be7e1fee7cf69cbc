//! No import loops between the sim's modules (`gantry_testkit::module_graph`).

use gantry_testkit::module_graph::new_loops;

/// Loops that remain while other work clears them (issue #43). A loop outside this list
/// fails; remove an entry once its loop is gone.
const KNOWN_LOOPS: &[&[&str]] = &[
    &["store", "store::memory", "store::sqlite"],
    &[
        "apiserver",
        "apiserver::deletion",
        "apiserver::discovery",
        "apiserver::logs",
        "apiserver::metrics",
        "apiserver::objects",
        "apiserver::openapi",
        "apiserver::rbac",
        "apiserver::rbac::escalation",
        "apiserver::rbac::tokens",
        "apiserver::routes",
        "apiserver::services",
        "apiserver::table",
        "apiserver::table::builtin",
        "apiserver::watch",
        "apiserver::webhooks",
        "gc",
        "gc::owners",
    ],
    &["kubelet::host_agents", "kubelet::runners"],
];

#[test]
fn sim_modules_import_no_loop() {
    let new = new_loops("sim", KNOWN_LOOPS);
    assert!(new.is_empty(), "import loops in sim: {new:?}");
}
