//! mig-parted's shipped layouts apply on the simulator where the hardware takes them, and
//! impossible ones are refused before anything changes.

use std::sync::Arc;

use gantry_gpu::layout::{self, MigLayout};
use gantry_gpu::{Backend, GpuError, SimBackend, SimConfig};

fn node(model: &str) -> Arc<SimBackend> {
    Arc::new(SimBackend::new(
        SimConfig::for_model(model, 2, 7).expect("model in catalog"),
    ))
}

fn layout(devices: &[(&str, u32)]) -> MigLayout {
    MigLayout::enabled(devices.iter().copied())
}

fn assert_applies(model: &str, devices: &[(&str, u32)]) {
    let b = node(model);
    let want = layout(devices);
    layout::apply(b.as_ref(), 0, &want)
        .unwrap_or_else(|e| panic!("{model} {devices:?} should apply: {e}"));
    let got = layout::current(b.as_ref(), 0).expect("current layout");
    assert_eq!(got, want, "{model}: layout read back differs");
    // GPU 1 untouched.
    assert!(!b.mig_mode(1).expect("mig mode").current);
}

#[test]
fn shipped_single_profile_configs_apply() {
    let tables: &[(&str, &[(&str, u32)])] = &[
        (
            "A100-40GB",
            &[
                ("1g.5gb", 7),
                ("1g.5gb+me", 1),
                ("1g.10gb", 4),
                ("2g.10gb", 3),
                ("3g.20gb", 2),
                ("4g.20gb", 1),
                ("7g.40gb", 1),
            ],
        ),
        (
            "A100-80GB",
            &[
                ("1g.10gb", 7),
                ("1g.10gb+me", 1),
                ("1g.20gb", 4),
                ("2g.20gb", 3),
                ("3g.40gb", 2),
                ("4g.40gb", 1),
                ("7g.80gb", 1),
            ],
        ),
        (
            "H100-80GB",
            &[
                ("1g.10gb", 7),
                ("1g.10gb+me", 1),
                ("1g.20gb", 4),
                ("2g.20gb", 3),
                ("3g.40gb", 2),
                ("4g.40gb", 1),
                ("7g.80gb", 1),
            ],
        ),
        (
            "H200",
            &[
                ("1g.18gb", 7),
                ("1g.18gb+me", 1),
                ("1g.35gb", 4),
                ("2g.35gb", 3),
                ("3g.71gb", 2),
                ("4g.71gb", 1),
                ("7g.141gb", 1),
            ],
        ),
    ];
    for (model, configs) in tables {
        for &(profile, count) in *configs {
            assert_applies(model, &[(profile, count)]);
        }
    }
}

#[test]
fn all_balanced_applies_per_model() {
    assert_applies(
        "A100-40GB",
        &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)],
    );
    assert_applies(
        "A100-80GB",
        &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],
    );
    assert_applies(
        "H100-80GB",
        &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],
    );
    assert_applies("H200", &[("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)]);
}

#[test]
fn mixed_layouts_that_need_the_right_order_apply() {
    // 3g must take the upper half for the 2g pair to fit below it.
    assert_applies("H100-80GB", &[("3g.40gb", 1), ("2g.20gb", 2)]);
    assert_applies(
        "H100-80GB",
        &[("4g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1)],
    );
    assert_applies("A100-80GB", &[("2g.20gb", 3), ("1g.10gb", 1)]);
    assert_applies("H200", &[("1g.35gb", 1), ("1g.18gb", 6)]);
    // Compute-instance profiles: two 1-slice CIs share one 2g GI.
    assert_applies("A100-80GB", &[("1c.2g.20gb", 2)]);
}

#[test]
fn all_enabled_and_all_disabled() {
    let b = node("H200");
    layout::apply(b.as_ref(), 0, &layout(&[])).expect("all-enabled");
    assert!(b.mig_mode(0).expect("mode").current);
    assert!(b.mig_devices(0).expect("devices").is_empty());
    layout::apply(b.as_ref(), 0, &layout(&[("1g.18gb", 7)])).expect("all-1g");
    layout::apply(b.as_ref(), 0, &MigLayout::disabled()).expect("all-disabled");
    let mode = b.mig_mode(0).expect("mode");
    assert!(!mode.current && !mode.pending);
}

fn assert_refused_unchanged(model: &str, devices: &[(&str, u32)], needle: &str) {
    let b = node(model);
    let before = layout(&[(b.mig_profiles(0).expect("profiles")[0].name.as_str(), 2)]);
    layout::apply(b.as_ref(), 0, &before).expect("starting layout");
    let err = layout::apply(b.as_ref(), 0, &layout(devices))
        .expect_err(&format!("{model} {devices:?} must be refused"));
    assert!(
        matches!(err, GpuError::MigRefused { gpu: 0, .. }),
        "unexpected error kind: {err:?}"
    );
    assert!(
        err.to_string().contains(needle),
        "error {err} should mention {needle:?}"
    );
    assert_eq!(
        layout::current(b.as_ref(), 0).expect("current"),
        before,
        "a refused layout must change nothing"
    );
}

#[test]
fn impossible_layouts_are_refused_before_anything_changes() {
    assert_refused_unchanged("A100-80GB", &[("1g.10gb", 8)], "at most 7");
    assert_refused_unchanged("H100-80GB", &[("1g.10gb+me", 2)], "at most 1");
    assert_refused_unchanged(
        "H100-80GB",
        &[("4g.40gb", 1), ("3g.40gb", 1), ("1g.10gb", 1)],
        "compute slices",
    );
    assert_refused_unchanged("H200", &[("3g.71gb", 2), ("1g.18gb", 1)], "memory slices");
    assert_refused_unchanged("H200", &[("1g.35gb", 4), ("1g.18gb", 1)], "memory slices");
    // Wrong profile for the model.
    assert_refused_unchanged("H100-80GB", &[("1g.18gb", 1)], "does not exist");
    assert_refused_unchanged("A100-40GB", &[("1g.10gb+me", 1)], "does not exist");
    assert_refused_unchanged("H200", &[("bogus", 1)], "bogus");
}

#[test]
fn mig_on_l4_and_t4_is_not_supported() {
    for model in ["L4", "T4"] {
        let b = node(model);
        let err = layout::apply(b.as_ref(), 0, &layout(&[("1g.10gb", 1)]))
            .expect_err("no MIG on this model");
        assert!(matches!(err, GpuError::NotSupported { .. }), "{err:?}");
        assert!(matches!(
            b.set_mig_mode(0, true),
            Err(GpuError::NotSupported { .. })
        ));
        // Disabling is a no-op, not an error.
        layout::apply(b.as_ref(), 0, &MigLayout::disabled()).expect("all-disabled on L4");
        assert!(!b.device_info(0).expect("info").mig_capable);
    }
}

#[test]
fn explicit_overlapping_placement_is_refused() {
    let b = node("H100-80GB");
    b.set_mig_mode(0, true).expect("enable");
    let three = b
        .create_gpu_instance(
            0,
            "3g.40gb",
            Some(gantry_gpu::Placement { start: 4, size: 4 }),
        )
        .expect("3g at 4");
    assert_eq!(three.placement.start, 4);
    let err = b
        .create_gpu_instance(
            0,
            "2g.20gb",
            Some(gantry_gpu::Placement { start: 4, size: 2 }),
        )
        .expect_err("overlaps the 3g");
    assert!(err.to_string().contains("overlaps"), "{err}");
    let err = b
        .create_gpu_instance(
            0,
            "2g.20gb",
            Some(gantry_gpu::Placement { start: 1, size: 2 }),
        )
        .expect_err("2g cannot start at 1");
    assert!(err.to_string().contains("valid starts"), "{err}");
    // The GPU is unchanged by the refusals.
    assert_eq!(b.gpu_instances(0).expect("gis").len(), 1);
    // Destroying a GI with a CI is refused; after the CI goes it works.
    let ci = b.create_compute_instance(0, three.id, 3).expect("ci");
    assert!(matches!(
        b.destroy_gpu_instance(0, three.id),
        Err(GpuError::InUse { .. })
    ));
    b.destroy_compute_instance(0, three.id, ci.id)
        .expect("destroy ci");
    b.destroy_gpu_instance(0, three.id).expect("destroy gi");
    assert!(b.gpu_instances(0).expect("gis").is_empty());
}

#[test]
fn mig_devices_carry_profile_figures() {
    let b = node("H200");
    layout::apply(
        b.as_ref(),
        0,
        &layout(&[("3g.71gb", 1), ("2g.35gb", 1), ("1g.18gb", 2)]),
    )
    .expect("balanced");
    let devs = b.mig_devices(0).expect("devices");
    assert_eq!(devs.len(), 4);
    let three = devs.iter().find(|d| d.profile == "3g.71gb").expect("3g");
    assert_eq!((three.memory_mib, three.sm_count), (71424, 60));
    assert_eq!(three.engines.copy, 3);
    let mut uuids: Vec<_> = devs.iter().map(|d| d.uuid.clone()).collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 4);
    assert!(uuids.iter().all(|u| u.starts_with("MIG-")));
    let mem = b.mig_device_memory(&three.uuid).expect("mig memory");
    assert_eq!((mem.total_mib, mem.used_mib), (71424, 0));
}
