//! What the plugin advertises and allocates: whole GPUs, time slicing, MIG strategies,
//! `DEVICE_LIST_STRATEGY`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_gpus_are_advertised_and_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 8);
    let mut kubelet = TestKubelet::start(dir.path());
    let plugin = Plugin::start(dir.path(), ConfigSource::Defaults, backend.clone());
    let seen = kubelet
        .wait("8 GPUs", |s| s.healthy("nvidia.com/gpu") == 8)
        .await;
    assert_eq!(seen.registrations, ["nvidia.com/gpu"]);
    assert_eq!(seen.ids("nvidia.com/gpu"), uuids(backend.as_ref()));
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    let uuids = uuids(backend.as_ref());
    let mut client = kubelet.client("nvidia.com/gpu").await;
    let resp = client
        .allocate(pb::AllocateRequest {
            container_requests: vec![
                pb::ContainerAllocateRequest {
                    devices_ids: vec![uuids[1].clone()],
                },
                pb::ContainerAllocateRequest {
                    devices_ids: vec![uuids[2].clone(), uuids[3].clone()],
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.container_responses.len(), 2);
    assert_eq!(
        resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        uuids[1]
    );
    assert_eq!(
        resp.container_responses[1].envs["NVIDIA_VISIBLE_DEVICES"],
        format!("{},{}", uuids[2], uuids[3])
    );
    let err = client
        .allocate(pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest {
                devices_ids: vec!["GPU-bogus".into()],
            }],
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("GPU-bogus"), "{err}");

    // Preferred allocation: with the sim's topology, an NVLink-connected set.
    let pref = client
        .get_preferred_allocation(pb::PreferredAllocationRequest {
            container_requests: vec![pb::ContainerPreferredAllocationRequest {
                available_device_i_ds: uuids.clone(),
                must_include_device_i_ds: vec![uuids[5].clone()],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let got = &pref.container_responses[0].device_i_ds;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], uuids[5]);

    plugin.stop().await;
    assert!(
        !dir.path().join("nvidia-gpu.sock").exists(),
        "clean shutdown removes the socket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_slicing_with_and_without_rename() {
    for (rename, resource) in [
        (None, "nvidia.com/gpu"),
        (Some("nvidia.com/gpu.shared"), "nvidia.com/gpu.shared"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let backend = sim("A100-40GB", 2);
        let mut kubelet = TestKubelet::start(dir.path());
        let plugin = Plugin::start(dir.path(), inline(time_sliced(4, rename)), backend.clone());
        let seen = kubelet
            .wait("8 replicas", |s| s.healthy(resource) == 8)
            .await;
        assert_eq!(seen.registrations, [resource]);
        let u = uuids(backend.as_ref());
        let ids = seen.ids(resource);
        assert_eq!(&ids[..4], [0, 1, 2, 3].map(|n| format!("{}::{n}", u[0])));
        assert_eq!(&ids[4..], [0, 1, 2, 3].map(|n| format!("{}::{n}", u[1])));

        let mut client = kubelet.client(resource).await;
        let resp = client
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: vec![ids[0].clone(), ids[1].clone()],
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"], u[0],
            "replicas collapse"
        );
        plugin.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_single_and_mixed_on_h100_all_balanced() {
    let backend = sim("H100-80GB", 2);
    let balanced = MigLayout::enabled([("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]);
    for gpu in 0..2 {
        layout::apply(backend.as_ref(), gpu, &balanced).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = TestKubelet::start(dir.path());
    let mixed = Settings {
        mig_strategy: MigStrategy::Mixed,
        ..Settings::default()
    };
    let plugin = Plugin::start(dir.path(), inline(mixed), backend.clone());
    let seen = kubelet
        .wait("mixed resources", |s| {
            s.healthy("nvidia.com/mig-1g.10gb") == 4
                && s.healthy("nvidia.com/mig-2g.20gb") == 2
                && s.healthy("nvidia.com/mig-3g.40gb") == 2
        })
        .await;
    assert_eq!(seen.registrations.len(), 3);
    assert!(
        seen.ids("nvidia.com/mig-3g.40gb")
            .iter()
            .all(|id| id.starts_with("MIG-"))
    );
    let mig_uuid = seen.ids("nvidia.com/mig-2g.20gb")[0].clone();
    let mut client = kubelet.client("nvidia.com/mig-2g.20gb").await;
    let resp = client
        .allocate(pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest {
                devices_ids: vec![mig_uuid.clone()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        mig_uuid
    );

    // An XID attributed to one MIG device hits only that device...
    health_watching(&backend).await;
    let target = backend
        .mig_devices(0)
        .unwrap()
        .into_iter()
        .find(|m| m.profile == "3g.40gb")
        .unwrap();
    backend
        .inject_xid(
            0,
            62,
            Some(target.gpu_instance_id),
            Some(target.compute_instance_id),
        )
        .unwrap();
    let seen = kubelet
        .wait("one MIG device unhealthy", |s| {
            s.healthy("nvidia.com/mig-3g.40gb") == 1
        })
        .await;
    let bad: Vec<&pb::Device> = seen.devices["nvidia.com/mig-3g.40gb"]
        .iter()
        .filter(|d| d.health == pb::UNHEALTHY)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].id, target.uuid);
    assert_eq!(seen.healthy("nvidia.com/mig-1g.10gb"), 4);
    // ...one for the whole GPU hits every MIG device on it.
    backend.inject_xid(1, 62, None, None).unwrap();
    kubelet
        .wait("GPU 1's MIG devices unhealthy", |s| {
            s.healthy("nvidia.com/mig-1g.10gb") == 2
                && s.healthy("nvidia.com/mig-2g.20gb") == 1
                && s.healthy("nvidia.com/mig-3g.40gb") == 0
        })
        .await;
    plugin.stop().await;

    // single on unlike MIG devices is refused (the last good config keeps serving)...
    let dir = tempfile::tempdir().unwrap();
    let _kubelet = TestKubelet::start(dir.path());
    let single = Settings {
        mig_strategy: MigStrategy::Single,
        ..Settings::default()
    };
    let mut plugin = Plugin::start(dir.path(), inline(single.clone()), backend.clone());
    // The last good config is the built-in one: whole GPUs (the error may be published
    // before the built-in config's servers are).
    let status = plugin
        .wait_status("single refused, whole GPUs served", |s| {
            s.config_error.is_some() && s.resources.get("nvidia.com/gpu") == Some(&2)
        })
        .await;
    assert!(status.config_error.unwrap().contains("migStrategy single"));
    plugin.stop().await;

    // ...and on all-1g.10gb it advertises the MIG devices as nvidia.com/gpu.
    let all_1g = MigLayout::enabled([("1g.10gb", 7)]);
    for gpu in 0..2 {
        layout::apply(backend.as_ref(), gpu, &all_1g).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = TestKubelet::start(dir.path());
    let plugin = Plugin::start(dir.path(), inline(single), backend.clone());
    let seen = kubelet
        .wait("single", |s| s.healthy("nvidia.com/gpu") == 14)
        .await;
    assert!(
        seen.ids("nvidia.com/gpu")
            .iter()
            .all(|id| id.starts_with("MIG-"))
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_per_device_list_strategy() {
    let backend = sim("L4", 2);
    let u = uuids(backend.as_ref());
    let cases = [
        (DeviceListStrategy::Envvar, "envvar"),
        (DeviceListStrategy::VolumeMounts, "volume-mounts"),
        (DeviceListStrategy::CdiAnnotations, "cdi-annotations"),
        (DeviceListStrategy::CdiCri, "cdi-cri"),
    ];
    for (strategy, name) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut kubelet = TestKubelet::start(dir.path());
        let settings = Settings {
            device_list_strategies: [strategy].into(),
            ..Settings::default()
        };
        let plugin = Plugin::start(dir.path(), inline(settings), backend.clone());
        kubelet
            .wait("2 GPUs", |s| s.healthy("nvidia.com/gpu") == 2)
            .await;
        let mut client = kubelet.client("nvidia.com/gpu").await;
        let r = client
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: vec![u[1].clone()],
                }],
            })
            .await
            .unwrap()
            .into_inner()
            .container_responses
            .remove(0);
        match strategy {
            DeviceListStrategy::Envvar => {
                assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], u[1], "{name}")
            }
            DeviceListStrategy::VolumeMounts => {
                assert_eq!(
                    r.envs["NVIDIA_VISIBLE_DEVICES"],
                    "/var/run/nvidia-container-devices"
                );
                assert_eq!(
                    r.mounts[0].container_path,
                    format!("/var/run/nvidia-container-devices/{}", u[1])
                );
            }
            DeviceListStrategy::CdiAnnotations => {
                assert!(r.envs.is_empty(), "{name}");
                let (key, value) = r.annotations.iter().next().unwrap();
                assert!(key.starts_with("cdi.k8s.io/nvidia-device-plugin_"), "{key}");
                assert_eq!(*value, format!("nvidia.com/gpu={}", u[1]));
            }
            DeviceListStrategy::CdiCri => {
                assert!(r.envs.is_empty(), "{name}");
                assert_eq!(r.cdi_devices[0].name, format!("nvidia.com/gpu={}", u[1]));
            }
        }
        plugin.stop().await;
    }
}
