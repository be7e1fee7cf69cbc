//! No import loops between the node agents' modules (`gantry_testkit::module_graph`).

#[test]
fn node_modules_import_no_loop() {
    gantry_testkit::module_graph::assert_no_loops("node");
}
