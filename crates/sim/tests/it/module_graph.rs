//! No import loops between the sim's modules (`gantry_testkit::module_graph`).

#[test]
fn sim_modules_import_no_loop() {
    gantry_testkit::module_graph::assert_no_loops("sim");
}
