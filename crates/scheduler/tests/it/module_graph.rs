//! No import loops between the scheduler's modules (`gantry_testkit::module_graph`).

#[test]
fn scheduler_modules_import_no_loop() {
    gantry_testkit::module_graph::assert_no_loops("scheduler");
}
