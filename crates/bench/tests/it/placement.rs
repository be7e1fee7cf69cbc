//! The one choice behaves the same whichever candidates an index offers, and a restriction
//! of the candidate nodes only ever removes nodes.

use gantry_bench::workload::synth::{MixSpec, SynthSpec, synth};
use gantry_scheduler::config::{Config, Policy, Strategy};
use gantry_scheduler::placement::Placer;
use gantry_scheduler::snapshot::{NodeId, Snapshot};
use gantry_scheduler::state::State;

fn cluster(seed: u64) -> gantry_scheduler::input::ClusterInput {
    synth(&SynthSpec {
        nodes: 48,
        gpus_per_node: 4,
        pending: 400,
        running: 60,
        mix: MixSpec {
            whole: 30,
            fraction: 50,
            gang: 20,
        },
        queues: 2,
        seed,
    })
}

/// A valid pod with no node yet.
fn waiting(s: &Snapshot<'_>, st: &State, pod: u32) -> bool {
    st.placement[pod as usize].is_none() && s.pods[pod as usize].invalid.is_none()
}

/// The free-GPU index (KAI binpack) and the class index (the GPU-sharing policy) choose
/// what scoring every node of the class list chooses: every pending pod of a synthetic
/// cluster (whole, fractional, gang and CPU pods, some already running) gets the same node
/// and devices, on several seeds.
#[test]
fn indexes_and_node_scan_place_alike() {
    for policy in [Policy::Kai, Policy::FragmentationAware] {
        for seed in 1..=5 {
            let input = cluster(seed);
            let s = Snapshot::build(&input);
            let cfg = Config {
                policy,
                seed,
                ..Config::default()
            };
            let (mut fast, mut scan) = (Placer::new(&s, &cfg), Placer::new(&s, &cfg));
            scan.scan = true;
            let mut st = State::new(&s, &mut Vec::new());
            let (mut placed, mut refused) = (0, 0);
            for pod in 0..s.pods.len() as u32 {
                if !waiting(&s, &st, pod) {
                    continue;
                }
                let a = fast.place(&s, &st, pod);
                assert_eq!(
                    a,
                    scan.place(&s, &st, pod),
                    "{policy:?} seed {seed} pod {pod}"
                );
                match a {
                    Some(pl) => {
                        placed += 1;
                        st.apply(&s, pod, pl);
                    }
                    None => refused += 1,
                }
            }
            // The workload overflows the cluster: both outcomes occur.
            assert!(
                placed > 0 && refused > 0,
                "{policy:?} seed {seed}: {placed} / {refused}"
            );
        }
    }
}

/// With every node allowed, `place_where` is `place`; with some nodes barred, the answer
/// is an allowed node, and it is the unrestricted answer whenever that node is allowed.
#[test]
fn restricted_candidates() {
    let policies = [
        (Policy::Kai, Strategy::Binpack),
        (Policy::Kai, Strategy::Spread),
        (Policy::FragmentationAware, Strategy::Binpack),
        (Policy::BestFit, Strategy::Binpack),
        (Policy::FirstFit, Strategy::Binpack),
    ];
    for (policy, strategy) in policies {
        let input = cluster(7);
        let s = Snapshot::build(&input);
        let cfg = Config {
            policy,
            gpu_strategy: strategy,
            seed: 7,
            ..Config::default()
        };
        let (mut all, mut some) = (Placer::new(&s, &cfg), Placer::new(&s, &cfg));
        let allowed = |n: NodeId| !n.is_multiple_of(3);
        let mut st = State::new(&s, &mut Vec::new());
        let (mut same, mut moved) = (0, 0);
        for pod in 0..s.pods.len() as u32 {
            if !waiting(&s, &st, pod) {
                continue;
            }
            let free = all.place(&s, &st, pod);
            assert_eq!(free, all.place_where(&s, &st, pod, |_| true));
            let within = some.place_where(&s, &st, pod, allowed);
            if let Some(pl) = &within {
                assert!(allowed(pl.node), "{policy:?}: pod {pod} on barred node");
            }
            match &free {
                Some(pl) if allowed(pl.node) => {
                    assert_eq!(free, within, "{policy:?}: pod {pod}");
                    same += 1;
                }
                _ => moved += 1,
            }
            // The unrestricted choice drives the state, so the cluster fills as it would.
            if let Some(pl) = free.or(within) {
                st.apply(&s, pod, pl);
            }
        }
        assert!(same > 0 && moved > 0, "{policy:?}: {same} / {moved}");
    }
}
