//! No import loops between the node agents' modules (`gantry_testkit::module_graph`).

use gantry_testkit::module_graph::new_loops;

/// Loops that remain while other work clears them (issue #43). A loop outside this list
/// fails; remove an entry once its loop is gone.
const KNOWN_LOOPS: &[&[&str]] = &[&["device_plugin::load", "device_plugin::manager"]];

#[test]
fn node_modules_import_no_loop() {
    let new = new_loops("node", KNOWN_LOOPS);
    assert!(new.is_empty(), "import loops in node: {new:?}");
}
