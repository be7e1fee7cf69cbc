//! The published cluster-trace-gpu-v2023 files read as they are: a few rows of each layout
//! (node files keyed by `sn`, older ones by `name`; full pod files and the `multigpu*` ones
//! without `gpu_spec` and the time columns), and bad input named by file, line and column.

use gantry_bench::workload::trace::{parse_nodes, parse_pods, to_shapes};
use gantry_scheduler::gpushare::ModelSet;

const NODES_SN: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0227,96000,786432,8,G2
openb-node-1000,64000,262144,2,P100
";

const NODES_NAME: &str = "name,cpu_milli,memory_mib,gpu,model
node-a,64000,262144,4,T4
";

const PODS_FULL: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
openb-pod-0002,4000,15360,0,0,,BE,Running,1000,2000,1000
openb-pod-0003,8000,30720,2,1000,P100|G2,LS,Pending,1500,,
";

const PODS_MULTIGPU: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli
openb-pod-0000,12000,16384,1,1000
openb-pod-0001,6000,12288,8,1000
";

#[test]
fn node_files_keyed_by_sn_or_name() {
    let n = parse_nodes("nodes.csv", NODES_SN.as_bytes()).unwrap();
    assert_eq!(n.len(), 3);
    assert_eq!(n[0].name, "openb-node-0000");
    assert_eq!((n[0].gpu, n[0].model.as_str()), (0, ""));
    assert_eq!(
        (n[1].cpu_milli, n[1].memory_mib, n[1].gpu),
        (96_000, 786_432, 8)
    );
    assert_eq!(n[1].model, "G2");
    let n = parse_nodes("old.csv", NODES_NAME.as_bytes()).unwrap();
    assert_eq!((n[0].name.as_str(), n[0].gpu), ("node-a", 4));
}

#[test]
fn pod_files_with_and_without_optional_columns() {
    let nodes = parse_nodes("nodes.csv", NODES_SN.as_bytes()).unwrap();
    let full = parse_pods("default.csv", PODS_FULL.as_bytes()).unwrap();
    assert_eq!(full.len(), 4);
    assert_eq!((full[1].num_gpu, full[1].gpu_milli), (1, 460));
    assert_eq!(full[1].creation_time, 427_061);
    assert_eq!(full[3].gpu_spec, vec!["P100".to_string(), "G2".to_string()]);
    let multi = parse_pods("multigpu20.csv", PODS_MULTIGPU.as_bytes()).unwrap();
    assert_eq!(multi.len(), 2);
    assert_eq!((multi[1].num_gpu, multi[1].gpu_milli), (8, 1000));
    assert!(
        multi
            .iter()
            .all(|p| p.gpu_spec.is_empty() && p.creation_time == 0)
    );

    let (specs, shapes) = to_shapes(&nodes, &full);
    assert_eq!(specs[1].gpus, 8);
    assert_eq!((shapes[1].num_gpu, shapes[1].milli), (1, 460));
    assert_eq!((shapes[2].num_gpu, shapes[2].milli), (0, 0));
    // gpu_spec names both node models: the pod accepts G2 and P100 nodes only.
    let ModelSet::Only(_) = shapes[3].models else {
        panic!("constrained pod read as unconstrained");
    };
    assert!(shapes[3].models.allows(specs[1].model) && shapes[3].models.allows(specs[2].model));
    assert_eq!(shapes[0].models, ModelSet::Any);
    // The request as written ranks the pod's type for the paper's FGD order; no request
    // ranks first.
    assert_eq!(shapes[0].spec, 0);
    assert!(shapes[3].spec > 0);
}

#[test]
fn bad_input_names_the_file_line_and_column() {
    let e = parse_nodes("nodes.csv", "sn,cpu_milli,gpu,model\na,1,1,T4\n".as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("nodes.csv") && e.contains("memory_mib"), "{e}");
    let bad = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,10,1,500\np1,lots,10,1,500\n";
    let e = parse_pods("pods.csv", bad.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("pods.csv:3: column cpu_milli:"), "{e}");
    let over = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,10,1,1500\n";
    let e = parse_pods("pods.csv", over.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gpu_milli") && e.contains("1500"), "{e}");
    let e = parse_pods(
        "empty.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n".as_bytes(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "empty.csv: no rows");
}
