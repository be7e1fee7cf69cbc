//! Random MIG create/destroy sequences never break the placement invariants, and a refused
//! operation changes nothing.

use proptest::prelude::*;

use gantry_gpu::mig::{COMPUTE_SLICES, MEMORY_SLICES};
use gantry_gpu::{Backend, GpuInstance, SimBackend, SimConfig};

#[derive(Debug, Clone)]
enum Op {
    CreateGi { profile: usize, start: Option<u32> },
    DestroyGi { pick: usize },
    CreateCi { pick: usize, slices: u32 },
    DestroyCi { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..8, proptest::option::of(0u32..8))
            .prop_map(|(profile, start)| Op::CreateGi { profile, start }),
        2 => (0usize..8).prop_map(|pick| Op::DestroyGi { pick }),
        2 => (0usize..8, prop_oneof![Just(1u32), Just(2), Just(3), Just(4), Just(7)])
            .prop_map(|(pick, slices)| Op::CreateCi { pick, slices }),
        1 => (0usize..8).prop_map(|pick| Op::DestroyCi { pick }),
    ]
}

type Snapshot = (Vec<GpuInstance>, Vec<Vec<u32>>);

fn snapshot(b: &SimBackend) -> Snapshot {
    let gis = b.gpu_instances(0).expect("gpu instances");
    let cis = gis
        .iter()
        .map(|g| {
            b.compute_instances(0, g.id)
                .expect("cis")
                .iter()
                .map(|c| c.id)
                .collect()
        })
        .collect();
    (gis, cis)
}

fn check_invariants(b: &SimBackend) {
    let profiles = b.mig_profiles(0).expect("profiles");
    let gis = b.gpu_instances(0).expect("gpu instances");
    let mut used = [false; MEMORY_SLICES as usize];
    let mut compute = 0;
    for g in &gis {
        let p = profiles
            .iter()
            .find(|p| p.name == g.profile)
            .expect("known profile");
        assert!(p.placement_starts.contains(&g.placement.start), "{g:?}");
        assert_eq!(g.placement.size, p.memory_slices);
        for s in g.placement.range() {
            assert!(s < MEMORY_SLICES, "{g:?} beyond the last memory slice");
            assert!(!used[s as usize], "memory slice {s} used twice: {gis:?}");
            used[s as usize] = true;
        }
        compute += g.slices;
        let count = gis.iter().filter(|o| o.profile == g.profile).count() as u32;
        assert!(count <= p.max_count, "{} × {}", count, g.profile);
        let ci_slices: u32 = b
            .compute_instances(0, g.id)
            .expect("cis")
            .iter()
            .map(|c| c.slices)
            .sum();
        assert!(ci_slices <= g.slices, "CIs overfill GI {}", g.id);
    }
    assert!(compute <= COMPUTE_SLICES, "{compute} compute slices in use");
    let mut ids: Vec<u32> = gis.iter().map(|g| g.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), gis.len(), "GI ids unique");
    // MIG devices agree with the instances.
    let devs = b.mig_devices(0).expect("devices");
    let cis: usize = gis
        .iter()
        .map(|g| b.compute_instances(0, g.id).expect("cis").len())
        .sum();
    assert_eq!(devs.len(), cis);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_mig_sequences_keep_placements_valid(
        model in prop_oneof![Just("A100-40GB"), Just("A100-80GB"), Just("H100-80GB"), Just("H200")],
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let b = SimBackend::new(SimConfig::for_model(model, 1, 3).expect("model"));
        b.set_mig_mode(0, true).expect("enable MIG");
        let profiles = b.mig_profiles(0).expect("profiles");
        for op in ops {
            let before = snapshot(&b);
            let gis = before.0.clone();
            let result = match op {
                Op::CreateGi { profile, start } => {
                    let p = &profiles[profile % profiles.len()];
                    let placement = start.map(|s| gantry_gpu::Placement { start: s, size: p.memory_slices });
                    b.create_gpu_instance(0, &p.name, placement).map(|_| ())
                }
                Op::DestroyGi { pick } if !gis.is_empty() => {
                    b.destroy_gpu_instance(0, gis[pick % gis.len()].id)
                }
                Op::CreateCi { pick, slices } if !gis.is_empty() => {
                    b.create_compute_instance(0, gis[pick % gis.len()].id, slices).map(|_| ())
                }
                Op::DestroyCi { pick } if !gis.is_empty() => {
                    let g = &gis[pick % gis.len()];
                    match b.compute_instances(0, g.id).expect("cis").first() {
                        Some(c) => b.destroy_compute_instance(0, g.id, c.id),
                        None => Ok(()),
                    }
                }
                _ => Ok(()),
            };
            if result.is_err() {
                prop_assert_eq!(snapshot(&b), before, "a refused operation changed the GPU");
            }
            check_invariants(&b);
        }
    }
}

/// Independent brute force: can these profiles (name, memory slices, compute slices, starts)
/// be placed without sharing a memory slice and within the compute slices?
fn fits(items: &[(u32, u32, Vec<u32>)], used: u8, compute: u32) -> bool {
    let Some(((size, slices, starts), rest)) = items.split_first() else {
        return true;
    };
    if compute + slices > COMPUTE_SLICES {
        return false;
    }
    starts.iter().any(|&s| {
        let mask = (((1u16 << size) - 1) << s) as u8;
        s + size <= MEMORY_SLICES && used & mask == 0 && fits(rest, used | mask, compute + slices)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn layouts_apply_exactly_when_some_placement_exists(
        model in prop_oneof![Just("A100-40GB"), Just("A100-80GB"), Just("H100-80GB"), Just("H200")],
        counts in proptest::collection::vec(prop_oneof![6 => Just(0u32), 2 => 1u32..3, 1 => 3u32..8], 7),
    ) {
        let b = SimBackend::new(SimConfig::for_model(model, 1, 9).expect("model"));
        let profiles = b.mig_profiles(0).expect("profiles");
        let wanted: Vec<(&str, u32)> = profiles
            .iter()
            .zip(&counts)
            .filter(|(_, n)| **n > 0)
            .map(|(p, n)| (p.name.as_str(), *n))
            .collect();
        let layout = gantry_gpu::layout::MigLayout::enabled(wanted.iter().copied());
        let feasible = wanted.iter().all(|(name, n)| {
            profiles.iter().any(|p| p.name == *name && *n <= p.max_count)
        }) && {
            let items: Vec<(u32, u32, Vec<u32>)> = wanted
                .iter()
                .flat_map(|(name, n)| {
                    let p = profiles.iter().find(|p| p.name == *name).expect("profile");
                    std::iter::repeat_n((p.memory_slices, p.slices, p.placement_starts.clone()), *n as usize)
                })
                .collect();
            fits(&items, 0, 0)
        };
        match gantry_gpu::layout::apply(&b, 0, &layout) {
            Ok(()) => {
                prop_assert!(feasible, "applied an impossible layout {wanted:?}");
                prop_assert_eq!(gantry_gpu::layout::current(&b, 0).expect("current"), layout);
                check_invariants(&b);
            }
            Err(e) => {
                prop_assert!(!feasible, "refused a possible layout {wanted:?}: {e}");
                prop_assert!(b.mig_devices(0).map(|d| d.is_empty()).unwrap_or(true));
            }
        }
    }
}
