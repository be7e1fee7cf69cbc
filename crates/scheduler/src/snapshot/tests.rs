//! The build's group lookup (neighbours first, then the hash index) gives every pod the
//! group a plain search by (namespace, name) gives, in any order of pods and groups.

use super::*;
use crate::input::PodGroupInput;
use proptest::prelude::*;

fn cluster(groups: &[(u8, u8)], pods: &[(u8, u8, bool)]) -> ClusterInput {
    let mut input = ClusterInput::default();
    input.queues.push(crate::input::QueueInput {
        name: "q".into(),
        ..Default::default()
    });
    input.nodes.push(NodeInput {
        name: "n".into(),
        ..Default::default()
    });
    for &(ns, g) in groups {
        input.pod_groups.push(PodGroupInput {
            namespace: format!("ns{ns}"),
            name: format!("g{g}"),
            queue: "q".into(),
            ..Default::default()
        });
    }
    for (i, &(ns, g, running)) in pods.iter().enumerate() {
        input.pods.push(PodInput {
            namespace: format!("ns{ns}"),
            name: format!("p{i}"),
            // Some pods name a holder group's name: never matched to the holder.
            pod_group: if g == 7 {
                "<p0>".into()
            } else {
                format!("g{g}")
            },
            phase: if running {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
            node: running.then(|| "n".into()),
            ..Default::default()
        });
    }
    input
}

proptest! {
    #[test]
    fn group_lookup_matches_search(
        groups in proptest::collection::vec((0u8..2, 0u8..8), 0..24),
        pods in proptest::collection::vec((0u8..2, 0u8..8, any::<bool>()), 0..40),
    ) {
        let input = cluster(&groups, &pods);
        let s = Snapshot::build(&input);
        for (i, p) in s.pods.iter().enumerate() {
            let want = s.groups.iter().position(|g| {
                !g.foreign && g.namespace == p.namespace && g.name == input.pods[i].pod_group
            });
            let got = &s.groups[p.group as usize];
            match want {
                Some(w) => prop_assert_eq!(p.group as usize, w, "pod {}", p.name),
                None => {
                    prop_assert!(got.foreign, "pod {} has no group but got {}", p.name, got.name);
                    prop_assert_eq!(got.name.as_ref(), format!("<{}>", p.name));
                }
            }
        }
    }
}
