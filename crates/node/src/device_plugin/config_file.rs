//! Config file v1 (YAML or JSON) into the plugin's settings: parsed and checked with
//! `gantry_api`'s types, the flags and env folded in first as upstream does.

use std::path::Path;

use super::error::DevicePluginError;
use super::overrides::Overrides;
use super::settings::{
    AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, DeviceSelector, Imex,
    ReplicatedResource, ResourcePattern, Settings, Sharing, SharingKind, qualify_resource_name,
};
use gantry_api::device_plugin_config::{DeviceDiscoveryStrategy, DevicePluginConfig};

/// Parses and validates a config file v1 (YAML or JSON; `gantry_api` types and
/// validation) into settings. An empty file means built-in defaults.
pub fn parse_settings(path: &Path, bytes: &[u8]) -> Result<Settings, DevicePluginError> {
    parse_settings_with(path, bytes, &Overrides::default())
}

/// As [`parse_settings`], with the flags and env folded in before the file is checked, as
/// upstream does (it validates after merging): `MPS_ROOT` / `--mps-root` satisfies an MPS
/// config without `flags.mpsRoot`, and `MIG_STRATEGY` counts for the MPS-with-mixed rule.
pub fn parse_settings_with(
    path: &Path,
    bytes: &[u8],
    overrides: &Overrides,
) -> Result<Settings, DevicePluginError> {
    let err = |message: String| DevicePluginError::Config {
        path: path.to_path_buf(),
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| err(format!("not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Ok(Settings::default());
    }
    let mut config: DevicePluginConfig =
        serde_yaml::from_str(text).map_err(|e| err(e.to_string()))?;
    if overrides.mps_root.is_some() || overrides.mig_strategy.is_some() {
        let flags = config.flags.get_or_insert_with(Default::default);
        if let Some(root) = &overrides.mps_root {
            flags.mps_root = Some(root.clone());
        }
        if let Some(m) = overrides.mig_strategy {
            flags.mig_strategy = Some(m);
        }
    }
    if let Some(d) = config
        .flags
        .as_ref()
        .and_then(|f| f.device_discovery_strategy)
        .filter(|d| {
            matches!(
                d,
                DeviceDiscoveryStrategy::Tegra | DeviceDiscoveryStrategy::Vfio
            )
        })
    {
        return Err(err(format!(
            "flags.deviceDiscoveryStrategy {d:?}: Gantry finds GPUs through NVML only (auto or nvml)"
        )));
    }
    let problems = config.validate();
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(err(list.join("; ")));
    }
    for key in config.extra.keys() {
        tracing::warn!(file = %path.display(), key = %key, "unknown top-level key ignored");
    }
    Ok(settings_from_config(&config))
}

/// Config file v1 → settings, with Gantry's fixes: `resources`, `rename` and `devices`
/// are honoured.
pub fn settings_from_config(c: &DevicePluginConfig) -> Settings {
    use gantry_api::device_plugin_config as api;
    let flags = c.flags.as_ref();
    let mut s = Settings {
        mig_strategy: c.mig_strategy(),
        device_list_strategies: c
            .device_list_strategies()
            .into_iter()
            .map(|d| match d {
                api::DeviceListStrategy::Envvar => DeviceListStrategy::Envvar,
                api::DeviceListStrategy::VolumeMounts => DeviceListStrategy::VolumeMounts,
                api::DeviceListStrategy::CdiAnnotations => DeviceListStrategy::CdiAnnotations,
                api::DeviceListStrategy::CdiCri => DeviceListStrategy::CdiCri,
            })
            .collect(),
        device_id_strategy: match c.device_id_strategy() {
            api::DeviceIdStrategy::Uuid => DeviceIdStrategy::Uuid,
            api::DeviceIdStrategy::Index => DeviceIdStrategy::Index,
        },
        pass_device_specs: c.pass_device_specs(),
        cdi_annotation_prefix: c.cdi_annotation_prefix().to_string(),
        driver_root: flags
            .and_then(|f| f.nvidia_driver_root.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "/".to_string()),
        dev_root: flags
            .and_then(|f| f.nvidia_dev_root.clone())
            .filter(|r| !r.is_empty()),
        gdrcopy_enabled: flags.and_then(|f| f.gdrcopy_enabled).unwrap_or(false),
        gds_enabled: flags.and_then(|f| f.gds_enabled).unwrap_or(false),
        mofed_enabled: flags.and_then(|f| f.mofed_enabled).unwrap_or(false),
        allocation_policy: match c.shared_devices_allocation_policy() {
            api::AllocationPolicy::Distributed => AllocationPolicy::Distributed,
            api::AllocationPolicy::Packed => AllocationPolicy::Packed,
        },
        mps_root: c.mps_root().map(str::to_string),
        // `check` has refused anything but `[]` and `[0]`.
        imex: Imex {
            channel_ids: c
                .imex
                .iter()
                .flat_map(|i| i.channel_ids.iter().flatten())
                .filter_map(|&id| u32::try_from(id).ok())
                .collect(),
            required: c.imex.as_ref().and_then(|i| i.required).unwrap_or(false),
        },
        ..Settings::default()
    };
    let patterns = |list: &Option<Vec<api::ResourcePattern>>| -> Vec<ResourcePattern> {
        list.iter()
            .flatten()
            .map(|p| ResourcePattern {
                pattern: p.pattern.clone(),
                name: qualify_resource_name(&p.name),
            })
            .collect()
    };
    if let Some(r) = &c.resources {
        s.gpu_patterns = patterns(&r.gpus);
        s.mig_patterns = patterns(&r.mig);
    }
    if c.sharing_strategy() != api::SharingStrategy::None
        && let Some((r, strategy)) = c.replicated()
    {
        let rename_by_default = r.rename_by_default.unwrap_or(false);
        s.sharing = Some(Sharing {
            kind: if strategy == api::SharingStrategy::Mps {
                SharingKind::Mps
            } else {
                SharingKind::TimeSlicing
            },
            fail_requests_greater_than_one: c.fail_requests_greater_than_one(),
            resources: r
                .resources
                .iter()
                .filter(|x| x.replicas > 1)
                .map(|x| {
                    let name = qualify_resource_name(&x.name);
                    let rename = match &x.rename {
                        Some(rn) if !rn.is_empty() => Some(qualify_resource_name(rn)),
                        _ if rename_by_default => Some(format!("{name}.shared")),
                        _ => None,
                    };
                    ReplicatedResource {
                        rename,
                        devices: match &x.devices {
                            None | Some(api::ReplicatedDevices::All(_)) => DeviceSelector::All,
                            Some(api::ReplicatedDevices::Count(n)) => {
                                DeviceSelector::Count(usize::try_from(*n).unwrap_or(0))
                            }
                            Some(api::ReplicatedDevices::List(ids)) => {
                                DeviceSelector::List(ids.clone())
                            }
                        },
                        replicas: u32::try_from(x.replicas).unwrap_or(u32::MAX),
                        name,
                    }
                })
                .collect(),
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::device_plugin::settings::MigStrategy;

    fn parse(text: &str) -> Result<Settings, DevicePluginError> {
        parse_settings(Path::new("/config/config.yaml"), text.as_bytes())
    }

    /// The device plugin README's MPS example has no `flags.mpsRoot`: the Helm chart passes
    /// `MPS_ROOT`. Refused alone, accepted once the env/flag is folded in, with its replicas.
    #[test]
    fn readme_mps_example_needs_mps_root_from_flag_or_env() {
        let text = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("mpsRoot"), "{e}");
        let o = Overrides {
            mps_root: Some("/run/nvidia/mps".into()),
            ..Overrides::default()
        };
        let s = parse_settings_with(Path::new("/c.yaml"), text.as_bytes(), &o).unwrap();
        assert_eq!(s.mps_root.as_deref(), Some("/run/nvidia/mps"));
        let sh = s.sharing.unwrap();
        assert_eq!(sh.kind, SharingKind::Mps);
        assert_eq!(sh.resources[0].replicas, 10);
        // MIG_STRATEGY=mixed from the env still makes MPS invalid, as upstream says.
        let o = Overrides {
            mig_strategy: Some(MigStrategy::Mixed),
            ..o
        };
        let e = parse_settings_with(Path::new("/c.yaml"), text.as_bytes(), &o).unwrap_err();
        assert!(e.to_string().contains("mixed"), "{e}");
    }

    #[test]
    fn upstream_time_slicing_example() {
        let s = parse(
            "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, cdi-cri]\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n",
        )
        .unwrap();
        let sh = s.sharing.unwrap();
        assert_eq!(sh.kind, SharingKind::TimeSlicing);
        assert!(sh.fail_requests_greater_than_one);
        assert_eq!(
            sh.resources[0].rename.as_deref(),
            Some("nvidia.com/gpu.shared")
        );
        assert_eq!(sh.resources[0].replicas, 4);
        assert_eq!(
            s.device_list_strategies,
            BTreeSet::from([DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri])
        );
    }

    #[test]
    fn rename_devices_and_resources_are_kept() {
        let s = parse(
            "{\"resources\": {\"gpus\": [{\"pattern\": \"*A100*\", \"name\": \"a100\"}]}, \"sharing\": {\"timeSlicing\": {\"resources\": [{\"name\": \"gpu\", \"rename\": \"gpu.ts\", \"devices\": [\"0\", \"1\"], \"replicas\": 2}]}}, \"flags\": {\"migStrategy\": \"mixed\", \"nvidiaDriverRoot\": \"/run/nvidia/driver\"}}",
        )
        .unwrap();
        assert_eq!(s.gpu_patterns[0].name, "nvidia.com/a100");
        let sharing = s.sharing.clone().unwrap();
        let r = &sharing.resources[0];
        assert_eq!(r.rename.as_deref(), Some("nvidia.com/gpu.ts"));
        assert_eq!(
            r.devices,
            DeviceSelector::List(vec!["0".into(), "1".into()])
        );
        assert_eq!(s.mig_strategy, MigStrategy::Mixed);
        assert_eq!(s.dev_root(), "/run/nvidia/driver");
    }

    #[test]
    fn bad_files_name_the_problem() {
        let e = parse("version: v2\n").unwrap_err().to_string();
        assert!(
            e.contains("/config/config.yaml") && e.contains("version"),
            "{e}"
        );
        let e = parse("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("sharing.timeSlicing.resources[0].replicas"),
            "{e}"
        );
        assert!(parse("flags: [").is_err());
        assert_eq!(parse("  \n").unwrap(), Settings::default());
        // MPS defaults to strict requests.
        let s = parse("flags: {mpsRoot: /run/nvidia/mps}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}").unwrap();
        assert!(s.sharing.unwrap().fail_requests_greater_than_one);
    }
}
