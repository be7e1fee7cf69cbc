//! No import loops between the node agents' modules (`gantry_testkit::module_graph`).

use gantry_testkit::module_graph::{crate_src, loops};

#[test]
fn node_modules_import_no_loop() {
    let found = loops(&crate_src("node"));
    assert!(found.is_empty(), "import loops in node: {found:?}");
}
