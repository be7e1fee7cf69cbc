//! `auto`'s switch to the fragmentation-aware policy, on synthetic clusters from the bench's workload generator
//! (moved here with the generator out of the scheduler library).

use gantry_bench::workload::synth::{MixSpec, SynthSpec, synth};
use gantry_scheduler::config::{Config, Policy};
use gantry_scheduler::placement::Placer;
use gantry_scheduler::snapshot::Snapshot;
use gantry_scheduler::state::State;

/// `auto` turns the fragmentation-aware policy on only for a binpack cluster with GPU
/// shares and enough pods to take a task mix from.
#[test]
fn auto_needs_shares_and_a_workload() {
    use gantry_scheduler::frag::{AUTO_MIN_PODS, auto_applies};
    let spec = |pending: usize, fraction: u32| SynthSpec {
        nodes: 8,
        gpus_per_node: 4,
        pending,
        running: 0,
        mix: MixSpec {
            whole: 100 - fraction,
            fraction,
            gang: 0,
        },
        queues: 1,
        seed: 3,
    };
    let many = synth(&spec(AUTO_MIN_PODS + 20, 50));
    assert!(auto_applies(&Snapshot::build(&many)));
    let few = synth(&spec(AUTO_MIN_PODS / 4, 50));
    assert!(!auto_applies(&Snapshot::build(&few)));
    let whole = synth(&spec(AUTO_MIN_PODS + 20, 0));
    assert!(!auto_applies(&Snapshot::build(&whole)));
    // The resolved policy differs from KAI's on the large cluster with shares: some
    // pending pod lands elsewhere.
    let s = Snapshot::build(&many);
    let mut st = State::new(&s, &mut Vec::new());
    let (mut auto, mut kai, mut frag) = (
        Placer::new(&s, &Config::default()),
        Placer::new(
            &s,
            &Config {
                policy: Policy::Kai,
                ..Config::default()
            },
        ),
        Placer::new(
            &s,
            &Config {
                policy: Policy::FragmentationAware,
                ..Config::default()
            },
        ),
    );
    let (mut same_as_frag, mut differs_from_kai) = (true, false);
    for pod in 0..s.pods.len() as u32 {
        let a = auto.place(&s, &st, pod);
        same_as_frag &= a == frag.place(&s, &st, pod);
        differs_from_kai |= a != kai.place(&s, &st, pod);
        if let Some(pl) = a {
            st.apply(&s, pod, pl);
        }
    }
    assert!(same_as_frag && differs_from_kai);
}
