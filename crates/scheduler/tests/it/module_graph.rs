//! No import loops between the scheduler's modules (`gantry_testkit::module_graph`).

use gantry_testkit::module_graph::{crate_src, loops};

#[test]
fn scheduler_modules_import_no_loop() {
    let found = loops(&crate_src("scheduler"));
    assert!(found.is_empty(), "import loops in scheduler: {found:?}");
}
