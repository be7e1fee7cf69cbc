use super::*;
use crate::device_plugin::settings::{ReplicatedResource, Sharing};

pub(crate) fn gpu(index: u32, migs: &[(&str, u32)]) -> Gpu {
    Gpu {
        index,
        uuid: format!("GPU-{index:08}"),
        product: "NVIDIA H100 80GB HBM3".into(),
        minor: index,
        mig_enabled: !migs.is_empty(),
        mig_devices: migs
            .iter()
            .enumerate()
            .map(|(j, (profile, gi))| Mig {
                parent: index,
                index: j as u32,
                uuid: format!("MIG-{index}-{j}"),
                gpu_instance: *gi,
                compute_instance: 0,
                profile: profile.to_string(),
                whole_instance: !profile.contains('c'),
            })
            .collect(),
    }
}

pub(crate) fn inv(n: u32) -> Inventory {
    Inventory {
        gpus: (0..n).map(|i| gpu(i, &[])).collect(),
    }
}

pub(crate) fn time_sliced(replicas: u32, rename: Option<&str>) -> Settings {
    Settings {
        sharing: Some(Sharing {
            kind: SharingKind::TimeSlicing,
            fail_requests_greater_than_one: false,
            resources: vec![ReplicatedResource {
                name: names::RESOURCE_GPU.into(),
                rename: rename.map(str::to_string),
                devices: DeviceSelector::All,
                replicas,
            }],
        }),
        ..Settings::default()
    }
}

fn summary(sets: &[ResourceSet]) -> Vec<(String, usize)> {
    sets.iter()
        .map(|s| (s.name.clone(), s.devices.len()))
        .collect()
}

#[test]
fn whole_gpus() {
    let sets = build(&inv(8), &Settings::default()).unwrap();
    assert_eq!(summary(&sets), [("nvidia.com/gpu".to_string(), 8)]);
    assert_eq!(sets[0].devices[3].id, "GPU-00000003");
    assert_eq!(sets[0].socket_name(), "nvidia-gpu.sock");
}

#[test]
fn time_slicing_with_and_without_rename() {
    let sets = build(&inv(2), &time_sliced(4, None)).unwrap();
    assert_eq!(summary(&sets), [("nvidia.com/gpu".to_string(), 8)]);
    let ids: Vec<&str> = sets[0].devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        &ids[..4],
        [
            "GPU-00000000::0",
            "GPU-00000000::1",
            "GPU-00000000::2",
            "GPU-00000000::3"
        ]
    );

    let sets = build(&inv(2), &time_sliced(4, Some("nvidia.com/gpu.shared"))).unwrap();
    assert_eq!(summary(&sets), [("nvidia.com/gpu.shared".to_string(), 8)]);
    assert_eq!(sets[0].socket_name(), "nvidia-gpu.shared.sock");
}

#[test]
fn sharing_devices_selector_is_honoured() {
    let mut s = time_sliced(2, Some("nvidia.com/gpu.shared"));
    if let Some(sh) = s.sharing.as_mut() {
        sh.resources[0].devices = DeviceSelector::List(vec!["1".into(), "GPU-00000003".into()]);
    }
    let sets = build(&inv(4), &s).unwrap();
    assert_eq!(
        summary(&sets),
        [
            ("nvidia.com/gpu".to_string(), 2),
            ("nvidia.com/gpu.shared".to_string(), 4)
        ]
    );
    if let Some(sh) = s.sharing.as_mut() {
        sh.resources[0].devices = DeviceSelector::List(vec!["7".into()]);
    }
    assert!(matches!(
        build(&inv(4), &s),
        Err(DevicePluginError::UnknownDeviceSelector { .. })
    ));
    if let Some(sh) = s.sharing.as_mut() {
        sh.resources[0].devices = DeviceSelector::Count(1);
    }
    let sets = build(&inv(4), &s).unwrap();
    assert_eq!(summary(&sets)[1], ("nvidia.com/gpu.shared".to_string(), 2));
}

#[test]
fn user_resource_patterns_are_honoured() {
    let s = Settings {
        gpu_patterns: vec![ResourcePattern {
            pattern: "*H100*".into(),
            name: "nvidia.com/h100".into(),
        }],
        ..Settings::default()
    };
    let sets = build(&inv(2), &s).unwrap();
    assert_eq!(summary(&sets), [("nvidia.com/h100".to_string(), 2)]);
}

#[test]
fn mig_strategies() {
    let balanced = [
        ("1g.10gb", 7),
        ("1g.10gb", 8),
        ("2g.20gb", 3),
        ("3g.40gb", 2),
    ];
    let inventory = Inventory {
        gpus: vec![gpu(0, &balanced), gpu(1, &balanced)],
    };
    let none = build(&inventory, &Settings::default()).unwrap();
    assert_eq!(summary(&none), [("nvidia.com/gpu".to_string(), 2)]);

    let mixed = Settings {
        mig_strategy: MigStrategy::Mixed,
        ..Settings::default()
    };
    assert_eq!(
        summary(&build(&inventory, &mixed).unwrap()),
        [
            ("nvidia.com/mig-1g.10gb".to_string(), 4),
            ("nvidia.com/mig-2g.20gb".to_string(), 2),
            ("nvidia.com/mig-3g.40gb".to_string(), 2)
        ]
    );

    let single = Settings {
        mig_strategy: MigStrategy::Single,
        ..Settings::default()
    };
    assert!(matches!(
        build(&inventory, &single),
        Err(DevicePluginError::SingleUnlike { .. })
    ));
    let alike = Inventory {
        gpus: vec![gpu(0, &[("1g.10gb", 7); 7]), gpu(1, &[("1g.10gb", 7); 7])],
    };
    let sets = build(&alike, &single).unwrap();
    assert_eq!(summary(&sets), [("nvidia.com/gpu".to_string(), 14)]);
    assert_eq!(sets[0].devices[0].physical.index_id(), "0:0");
    let half = Inventory {
        gpus: vec![gpu(0, &[("1g.10gb", 7)]), gpu(1, &[])],
    };
    assert!(matches!(
        build(&half, &single),
        Err(DevicePluginError::SingleMixedModes { .. })
    ));
}

#[test]
fn mps_rules() {
    let mut s = time_sliced(4, None);
    if let Some(sh) = s.sharing.as_mut() {
        sh.kind = SharingKind::Mps;
    }
    assert!(matches!(
        build(&inv(1), &s),
        Err(DevicePluginError::MpsWithoutRoot)
    ));
    s.mps_root = Some("/run/nvidia/mps".into());
    assert_eq!(build(&inv(1), &s).unwrap()[0].devices.len(), 4);
    s.mig_strategy = MigStrategy::Single;
    let migs = Inventory {
        gpus: vec![gpu(0, &[("1g.10gb", 7)])],
    };
    assert!(matches!(
        build(&migs, &s),
        Err(DevicePluginError::MpsOnMig { .. })
    ));
}

#[test]
fn resource_names_are_checked() {
    assert!(validate_name("nvidia.com/gpu.shared").is_ok());
    assert!(validate_name("gpu").is_err());
    assert!(validate_name("kubernetes.io/gpu").is_err());
    assert!(validate_name("nvidia.com/GPU").is_err());
}
