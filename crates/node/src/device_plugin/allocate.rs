//! The pure core of Allocate: requested IDs → what the container runtime needs to expose
//! exactly those devices (env, mounts, device nodes, CDI names).

use std::collections::HashMap;

use super::error::RequestError;
use super::resources::{Physical, ResourceSet};
use super::settings::{DeviceIdStrategy, DeviceListStrategy, Settings, SharingKind};
use crate::proto::deviceplugin::{CdiDevice, ContainerAllocateResponse, DeviceSpec, Mount};

pub const ENV_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// The IMEX channels of the `envvar` strategy (read by the container runtime).
pub const ENV_IMEX_CHANNELS: &str = "NVIDIA_IMEX_CHANNELS";
/// Root of the volume-mounts device list (the toolkit reads mounts below it).
pub const VOLUME_MOUNT_ROOT: &str = "/var/run/nvidia-container-devices";
/// CDI kind of the toolkit's spec (`nvidia-ctk cdi generate` default), so names resolve
/// against the spec `gantry node toolkit` writes.
pub const CDI_KIND: &str = "nvidia.com/gpu";
/// Annotation key stem for the `cdi-annotations` strategy.
pub const CDI_ANNOTATION_PLUGIN: &str = "nvidia-device-plugin";
pub const ENV_MPS_PIPE: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// Control device nodes every GPU container needs.
pub const CONTROL_NODES: [&str; 4] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// `/dev/nvidia-caps/nvidia-cap<N>` minors of MIG GI/CI access files, keyed by
/// `gpu<minor>/gi<g>/access` and `gpu<minor>/gi<g>/ci<c>/access` (the driver's
/// `/proc/driver/nvidia-caps/mig-minors`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors(HashMap<String, u32>);

impl MigMinors {
    /// Parses the `mig-minors` file (`<key> <minor>` per line; other lines are skipped).
    pub fn parse(text: &str) -> Self {
        let map = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let (key, minor) = (it.next()?, it.next()?.parse().ok()?);
                Some((key.to_string(), minor))
            })
            .collect();
        MigMinors(map)
    }

    /// Minor for a key, else the driver's fixed layout (config 1, monitor 2, then per GPU
    /// 15 GIs × (1 GI + 8 CIs)) when the file is not readable (e.g. on simulated nodes).
    fn minor(&self, gpu_minor: u32, gi: u32, ci: Option<u32>) -> u32 {
        let key = match ci {
            Some(ci) => format!("gpu{gpu_minor}/gi{gi}/ci{ci}/access"),
            None => format!("gpu{gpu_minor}/gi{gi}/access"),
        };
        self.0
            .get(&key)
            .copied()
            .unwrap_or_else(|| 3 + gpu_minor * 135 + gi * 9 + ci.map_or(0, |c| c + 1))
    }
}

/// Per-response context the shell supplies (kept out of the core to stay deterministic).
#[derive(Debug, Clone, Copy)]
pub struct AllocateContext<'a> {
    /// Unique suffix for the CDI annotation key (a fresh UUID per response upstream).
    pub annotation_id: &'a str,
    pub mig_minors: &'a MigMinors,
    /// The configured IMEX channels whose device node exists on this node.
    pub imex_channels: &'a [u32],
}

/// Validates one container's request and builds its response.
pub fn allocate(
    set: &ResourceSet,
    settings: &Settings,
    ids: &[String],
    ctx: AllocateContext<'_>,
) -> Result<ContainerAllocateResponse, RequestError> {
    let mut physical: Vec<&Physical> = Vec::with_capacity(ids.len());
    for id in ids {
        let dev = set.device(id).ok_or_else(|| RequestError::UnknownDevice {
            resource: set.name.clone(),
            id: id.clone(),
        })?;
        if !physical.contains(&&dev.physical) {
            physical.push(&dev.physical);
        }
    }
    if let Some(share) = set.sharing
        && share.fail_requests_greater_than_one
        && ids.len() > 1
        && ids.iter().any(|id| id.contains("::"))
    {
        return Err(RequestError::SharedRequestTooLarge {
            resource: set.name.clone(),
            count: ids.len(),
        });
    }

    let device_ids: Vec<String> = physical
        .iter()
        .map(|p| match settings.device_id_strategy {
            DeviceIdStrategy::Uuid => p.uuid().to_string(),
            DeviceIdStrategy::Index => p.index_id(),
        })
        .collect();

    let mut resp = ContainerAllocateResponse::default();
    let strategies = &settings.device_list_strategies;
    let only_cdi = strategies.iter().all(|s| s.is_cdi());

    let imex = ctx.imex_channels;
    if strategies.contains(&DeviceListStrategy::Envvar) {
        resp.envs
            .insert(ENV_VISIBLE_DEVICES.into(), device_ids.join(","));
        if !imex.is_empty() {
            let ids: Vec<String> = imex.iter().map(u32::to_string).collect();
            resp.envs.insert(ENV_IMEX_CHANNELS.into(), ids.join(","));
        }
    }
    if strategies.contains(&DeviceListStrategy::VolumeMounts) {
        resp.envs
            .insert(ENV_VISIBLE_DEVICES.into(), VOLUME_MOUNT_ROOT.into());
        let imex_paths = imex.iter().map(|c| format!("{VOLUME_MOUNT_ROOT}/imex/{c}"));
        for container_path in device_ids
            .iter()
            .map(|id| format!("{VOLUME_MOUNT_ROOT}/{id}"))
            .chain(imex_paths)
        {
            resp.mounts.push(Mount {
                container_path,
                host_path: "/dev/null".into(),
                read_only: true,
            });
        }
    }
    let cdi_names: Vec<String> = device_ids
        .iter()
        .map(|id| format!("{CDI_KIND}={id}"))
        .collect();
    if strategies.contains(&DeviceListStrategy::CdiAnnotations) {
        resp.annotations.insert(
            format!(
                "{}{CDI_ANNOTATION_PLUGIN}_{}",
                settings.cdi_annotation_prefix, ctx.annotation_id
            ),
            cdi_names.join(","),
        );
    }
    if strategies.contains(&DeviceListStrategy::CdiCri) {
        resp.cdi_devices = cdi_names
            .iter()
            .map(|name| CdiDevice { name: name.clone() })
            .collect();
    }
    if settings.pass_device_specs && !only_cdi {
        resp.devices = device_specs(&physical, settings, ctx.mig_minors);
    }
    for (on, key) in [
        (settings.gdrcopy_enabled, "NVIDIA_GDRCOPY"),
        (settings.gds_enabled, "NVIDIA_GDS"),
        (settings.mofed_enabled, "NVIDIA_MOFED"),
    ] {
        if on {
            resp.envs.insert(key.into(), "enabled".into());
        }
    }
    if let (Some(share), Some(root)) = (set.sharing, settings.mps_root.as_deref())
        && share.kind == SharingKind::Mps
    {
        let pipe = format!("/mps/{}/pipe", set.short_name());
        resp.envs.insert(ENV_MPS_PIPE.into(), pipe.clone());
        resp.mounts.push(Mount {
            container_path: pipe,
            host_path: format!("{}/{}/pipe", root.trim_end_matches('/'), set.short_name()),
            read_only: false,
        });
        resp.mounts.push(Mount {
            container_path: "/dev/shm".into(),
            host_path: format!("{}/shm", root.trim_end_matches('/')),
            read_only: false,
        });
    }
    Ok(resp)
}

fn device_specs(
    physical: &[&Physical],
    settings: &Settings,
    minors: &MigMinors,
) -> Vec<DeviceSpec> {
    let root = settings.dev_root().trim_end_matches('/');
    let spec = |path: String| DeviceSpec {
        host_path: format!("{root}{path}"),
        container_path: path,
        permissions: "rw".into(),
    };
    let mut out: Vec<DeviceSpec> = CONTROL_NODES.iter().map(|p| spec(p.to_string())).collect();
    for phys in physical {
        let paths = match phys {
            Physical::Gpu { minor, .. } => vec![format!("/dev/nvidia{minor}")],
            Physical::Mig {
                parent_minor,
                gi,
                ci,
                ..
            } => vec![
                format!("/dev/nvidia{parent_minor}"),
                format!(
                    "/dev/nvidia-caps/nvidia-cap{}",
                    minors.minor(*parent_minor, *gi, None)
                ),
                format!(
                    "/dev/nvidia-caps/nvidia-cap{}",
                    minors.minor(*parent_minor, *gi, Some(*ci))
                ),
            ],
        };
        for p in paths {
            if !out.iter().any(|s| s.container_path == p) {
                out.push(spec(p));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_plugin::inventory::Inventory;
    use crate::device_plugin::resources::build;
    use crate::device_plugin::resources::tests::{gpu, inv, time_sliced};
    use crate::device_plugin::settings::MigStrategy;

    fn ctx(minors: &MigMinors) -> AllocateContext<'_> {
        AllocateContext {
            annotation_id: "abc",
            mig_minors: minors,
            imex_channels: &[],
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn with(strategies: &[DeviceListStrategy]) -> Settings {
        Settings {
            device_list_strategies: strategies.iter().copied().collect(),
            ..Settings::default()
        }
    }

    #[test]
    fn envvar_uuid_and_index() {
        let m = MigMinors::default();
        let s = with(&[DeviceListStrategy::Envvar]);
        let set = &build(&inv(4), &s).unwrap()[0];
        let r = allocate(set, &s, &ids(&["GPU-00000002", "GPU-00000000"]), ctx(&m)).unwrap();
        assert_eq!(r.envs[ENV_VISIBLE_DEVICES], "GPU-00000002,GPU-00000000");
        assert!(r.mounts.is_empty() && r.devices.is_empty() && r.cdi_devices.is_empty());
        let s = Settings {
            device_id_strategy: DeviceIdStrategy::Index,
            ..s
        };
        let r = allocate(set, &s, &ids(&["GPU-00000002"]), ctx(&m)).unwrap();
        assert_eq!(r.envs[ENV_VISIBLE_DEVICES], "2");
        assert!(matches!(
            allocate(set, &s, &ids(&["GPU-nope"]), ctx(&m)),
            Err(RequestError::UnknownDevice { .. })
        ));
    }

    #[test]
    fn volume_mounts() {
        let m = MigMinors::default();
        let s = with(&[DeviceListStrategy::VolumeMounts]);
        let set = &build(&inv(2), &s).unwrap()[0];
        let r = allocate(set, &s, &ids(&["GPU-00000001"]), ctx(&m)).unwrap();
        assert_eq!(r.envs[ENV_VISIBLE_DEVICES], VOLUME_MOUNT_ROOT);
        assert_eq!(r.mounts.len(), 1);
        assert_eq!(
            r.mounts[0].container_path,
            "/var/run/nvidia-container-devices/GPU-00000001"
        );
        assert_eq!(r.mounts[0].host_path, "/dev/null");
    }

    #[test]
    fn cdi_strategies_only_add_cdi() {
        let m = MigMinors::default();
        let s = Settings {
            pass_device_specs: true,
            ..with(&[
                DeviceListStrategy::CdiAnnotations,
                DeviceListStrategy::CdiCri,
            ])
        };
        let set = &build(&inv(2), &s).unwrap()[0];
        let r = allocate(set, &s, &ids(&["GPU-00000001"]), ctx(&m)).unwrap();
        assert!(r.envs.is_empty() && r.devices.is_empty() && r.mounts.is_empty());
        assert_eq!(
            r.annotations["cdi.k8s.io/nvidia-device-plugin_abc"],
            "nvidia.com/gpu=GPU-00000001"
        );
        assert_eq!(r.cdi_devices[0].name, "nvidia.com/gpu=GPU-00000001");
    }

    #[test]
    fn replicas_collapse_and_strict_requests_fail() {
        let m = MigMinors::default();
        let mut s = time_sliced(4, None);
        let set = &build(&inv(2), &s).unwrap()[0];
        let r = allocate(
            set,
            &s,
            &ids(&["GPU-00000000::1", "GPU-00000000::3"]),
            ctx(&m),
        )
        .unwrap();
        assert_eq!(r.envs[ENV_VISIBLE_DEVICES], "GPU-00000000");
        if let Some(sh) = s.sharing.as_mut() {
            sh.fail_requests_greater_than_one = true;
        }
        let set = &build(&inv(2), &s).unwrap()[0];
        assert!(matches!(
            allocate(
                set,
                &s,
                &ids(&["GPU-00000000::1", "GPU-00000001::0"]),
                ctx(&m)
            ),
            Err(RequestError::SharedRequestTooLarge { count: 2, .. })
        ));
        assert!(allocate(set, &s, &ids(&["GPU-00000000::1"]), ctx(&m)).is_ok());
    }

    #[test]
    fn device_specs_for_gpus_and_mig() {
        let m =
            MigMinors::parse("config 1\nmonitor 2\ngpu1/gi3/access 30\ngpu1/gi3/ci0/access 31\n");
        let s = Settings {
            pass_device_specs: true,
            mig_strategy: MigStrategy::Mixed,
            dev_root: Some("/run/nvidia/driver".into()),
            ..Settings::default()
        };
        let inventory = Inventory {
            gpus: vec![gpu(0, &[]), gpu(1, &[("3g.40gb", 3)])],
        };
        let sets = build(&inventory, &s).unwrap();
        let mig = sets
            .iter()
            .find(|s| s.name == "nvidia.com/mig-3g.40gb")
            .unwrap();
        let r = allocate(mig, &s, &ids(&["MIG-1-0"]), ctx(&m)).unwrap();
        let paths: Vec<&str> = r
            .devices
            .iter()
            .map(|d| d.container_path.as_str())
            .collect();
        assert_eq!(&paths[..4], CONTROL_NODES);
        assert_eq!(
            &paths[4..],
            [
                "/dev/nvidia1",
                "/dev/nvidia-caps/nvidia-cap30",
                "/dev/nvidia-caps/nvidia-cap31"
            ]
        );
        assert_eq!(r.devices[4].host_path, "/run/nvidia/driver/dev/nvidia1");
        assert_eq!(r.devices[4].permissions, "rw");
        // Without the file: the driver's fixed layout.
        let r = allocate(mig, &s, &ids(&["MIG-1-0"]), ctx(&MigMinors::default())).unwrap();
        assert_eq!(
            r.devices[5].container_path,
            format!("/dev/nvidia-caps/nvidia-cap{}", 3 + 135 + 27)
        );
    }

    #[test]
    fn imex_channels_follow_the_device_list_strategy() {
        let m = MigMinors::default();
        let s = Settings {
            device_list_strategies: [DeviceListStrategy::Envvar, DeviceListStrategy::VolumeMounts]
                .into(),
            ..Settings::default()
        };
        let set = &build(&inv(1), &s).unwrap()[0];
        let with_channel = AllocateContext {
            imex_channels: &[0],
            ..ctx(&m)
        };
        let r = allocate(set, &s, &ids(&["GPU-00000000"]), with_channel).unwrap();
        assert_eq!(r.envs[ENV_IMEX_CHANNELS], "0");
        let mounts: Vec<&str> = r.mounts.iter().map(|m| m.container_path.as_str()).collect();
        assert_eq!(
            mounts,
            [
                "/var/run/nvidia-container-devices/GPU-00000000",
                "/var/run/nvidia-container-devices/imex/0"
            ]
        );
        let r = allocate(set, &s, &ids(&["GPU-00000000"]), ctx(&m)).unwrap();
        assert!(!r.envs.contains_key(ENV_IMEX_CHANNELS));
        assert_eq!(r.mounts.len(), 1);
    }

    #[test]
    fn mps_mounts_and_feature_envs() {
        let m = MigMinors::default();
        let mut s = time_sliced(2, Some("nvidia.com/gpu.shared"));
        if let Some(sh) = s.sharing.as_mut() {
            sh.kind = SharingKind::Mps;
        }
        s.mps_root = Some("/run/nvidia/mps".into());
        s.gds_enabled = true;
        let set = &build(&inv(1), &s).unwrap()[0];
        let r = allocate(set, &s, &ids(&["GPU-00000000::0"]), ctx(&m)).unwrap();
        assert_eq!(r.envs[ENV_MPS_PIPE], "/mps/gpu.shared/pipe");
        assert_eq!(r.envs["NVIDIA_GDS"], "enabled");
        assert_eq!(r.mounts[0].host_path, "/run/nvidia/mps/gpu.shared/pipe");
        assert_eq!(r.mounts[1].container_path, "/dev/shm");
    }
}
