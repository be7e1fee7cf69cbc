//! No import loops between the sim's modules (`gantry_testkit::module_graph`).

use gantry_testkit::module_graph::{crate_src, loops};

#[test]
fn sim_modules_import_no_loop() {
    let found = loops(&crate_src("sim"));
    assert!(found.is_empty(), "import loops in sim: {found:?}");
}
