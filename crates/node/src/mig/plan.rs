//! The pure core: from a mig-parted config, the selected config name and what each GPU looks
//! like now, decide per GPU what to do. Layouts a GPU cannot hold are refused here, for every
//! GPU, before any step is carried out.
//!
//! As mig-parted does, the file is checked for shape and profile grammar only; a profile is
//! looked up in the profile table of each GPU an entry of the selected config applies to, so
//! entries for GPUs the node does not have (or other configs) never fail a node.

use gantry_api::mig_parted::MigPartedConfig;
use gantry_gpu::layout::{self, MigLayout, PlannedInstance};

use super::state::{ExistingInstance, GpuFacts};

/// Why no plan could be made. Nothing has been touched when one of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("mig-parted config is invalid: {0}")]
    InvalidConfig(String),
    #[error("MIG config {name:?} is not in the mig-parted config (known: {known})")]
    UnknownConfig { name: String, known: String },
    #[error("GPU {gpu} ({model}) cannot do MIG, but MIG config {config:?} enables MIG on it")]
    NotMigCapable {
        gpu: u32,
        model: String,
        config: String,
    },
    #[error("GPU {gpu} ({model}) cannot hold MIG config {config:?} ({layout}): {reason}")]
    Impossible {
        gpu: u32,
        model: String,
        config: String,
        layout: String,
        reason: String,
    },
}

/// What one GPU needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuAction {
    /// No entry of the config selects this GPU: it is left as it is.
    NotSelected,
    /// The GPU already looks as wanted.
    Unchanged,
    /// Tear down what is there, set the MIG mode if needed, create the wanted instances.
    Change {
        /// `Some(on)` when the MIG mode must change (needs the GPU idle and a GPU reset).
        set_mode: Option<bool>,
        /// GPU instances to destroy (with their compute instances), in order.
        destroy: Vec<ExistingInstance>,
        /// GPU instances to create, with placements and compute instances.
        create: Vec<PlannedInstance>,
    },
}

/// The plan for one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    pub gpu: u32,
    pub model: String,
    pub current: MigLayout,
    /// `None` when no entry selects the GPU.
    pub wanted: Option<MigLayout>,
    pub action: GpuAction,
}

impl GpuPlan {
    pub fn changes(&self) -> bool {
        matches!(self.action, GpuAction::Change { .. })
    }
}

/// The plan for a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigPlan {
    pub config: String,
    pub gpus: Vec<GpuPlan>,
}

impl MigPlan {
    /// Whether anything changes.
    pub fn changes(&self) -> bool {
        self.gpus.iter().any(GpuPlan::changes)
    }
    /// Whether GPU clients (device plugin, exporter, workload pods) must be stopped first: any
    /// instance teardown or mode change needs the GPU free of processes, as upstream assumes.
    pub fn needs_clients_stopped(&self) -> bool {
        self.changes()
    }
    /// Whether any GPU's MIG mode changes.
    pub fn mode_change(&self) -> bool {
        self.gpus.iter().any(|g| {
            matches!(
                g.action,
                GpuAction::Change {
                    set_mode: Some(_),
                    ..
                }
            )
        })
    }
}

/// Plan `config_name` of `config` for GPUs in the state `gpus`.
pub fn plan(
    config: &MigPartedConfig,
    config_name: &str,
    gpus: &[GpuFacts],
) -> Result<MigPlan, PlanError> {
    let problems = config.validate_shape();
    if !problems.is_empty() {
        let text = problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(PlanError::InvalidConfig(text));
    }
    if !config.mig_configs.contains_key(config_name) {
        return Err(PlanError::UnknownConfig {
            name: config_name.to_string(),
            known: config
                .mig_configs
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let gpus = gpus
        .iter()
        .map(|g| plan_gpu(config, config_name, g))
        .collect::<Result<_, _>>()?;
    Ok(MigPlan {
        config: config_name.to_string(),
        gpus,
    })
}

fn plan_gpu(
    config: &MigPartedConfig,
    config_name: &str,
    gpu: &GpuFacts,
) -> Result<GpuPlan, PlanError> {
    let mut out = GpuPlan {
        gpu: gpu.index,
        model: gpu.name.clone(),
        current: gpu.layout.clone(),
        wanted: None,
        action: GpuAction::NotSelected,
    };
    let Some(entry) = config.entry_for(
        config_name,
        gpu.index,
        gpu.pci_device_id,
        Some(gpu.pci_subsystem_id),
    ) else {
        return Ok(out);
    };
    let wanted = if entry.mig_enabled {
        MigLayout {
            enabled: true,
            devices: entry
                .mig_devices
                .iter()
                .flatten()
                .filter_map(|(p, &n)| Some((p.clone(), u32::try_from(n).ok().filter(|&n| n > 0)?)))
                .collect(),
        }
    } else {
        MigLayout::disabled()
    };
    out.wanted = Some(wanted.clone());
    let Some(mode) = gpu.mode.filter(|_| !gpu.profiles.is_empty()) else {
        if wanted.enabled {
            return Err(PlanError::NotMigCapable {
                gpu: gpu.index,
                model: gpu.name.clone(),
                config: config_name.to_string(),
            });
        }
        out.action = GpuAction::Unchanged;
        return Ok(out);
    };
    let create = if wanted.enabled {
        layout::plan(&gpu.profiles, &wanted).map_err(|e| PlanError::Impossible {
            gpu: gpu.index,
            model: gpu.name.clone(),
            config: config_name.to_string(),
            layout: describe(&wanted),
            reason: e.to_string(),
        })?
    } else {
        Vec::new()
    };
    let mode_ok = mode.current == wanted.enabled && mode.pending == wanted.enabled;
    // Every GPU instance must carry its compute instances: a bare GI left by an interrupted
    // apply holds slices without showing up as a MIG device.
    let instances_ok = gpu.instances.len() == create.len()
        && gpu
            .instances
            .iter()
            .all(|i| !i.compute_instances.is_empty());
    if mode_ok && gpu.layout == wanted && instances_ok {
        out.action = GpuAction::Unchanged;
        return Ok(out);
    }
    out.action = GpuAction::Change {
        set_mode: (!mode_ok).then_some(wanted.enabled),
        destroy: if mode.current {
            gpu.instances.clone()
        } else {
            Vec::new()
        },
        create,
    };
    Ok(out)
}

/// `MIG disabled`, `MIG enabled, no instances`, or `1g.10gb×2, 2g.20gb×1`.
pub fn describe(layout: &MigLayout) -> String {
    if !layout.enabled {
        return "MIG disabled".to_string();
    }
    if layout.devices.is_empty() {
        return "MIG enabled, no instances".to_string();
    }
    layout
        .devices
        .iter()
        .map(|(p, n)| format!("{p}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::mig_parted::default_config;
    use gantry_gpu::catalog;
    use gantry_gpu::{MigMode, Placement};

    fn facts(model: &str, index: u32) -> GpuFacts {
        let m = catalog::find(model).expect("catalog model");
        GpuFacts {
            index,
            name: m.name.to_string(),
            pci_device_id: m.pci_device_id,
            pci_subsystem_id: 0,
            profiles: m.mig_profiles(),
            mode: m.mig_capable().then_some(MigMode::default()),
            instances: Vec::new(),
            layout: MigLayout::disabled(),
        }
    }

    #[test]
    fn h200_all_1g_18gb_enables_mig_and_creates_seven_instances() {
        let p = plan(&default_config(), "all-1g.18gb", &[facts("H200", 0)]).unwrap();
        let GpuAction::Change {
            set_mode,
            destroy,
            create,
        } = &p.gpus[0].action
        else {
            panic!("expected a change, got {:?}", p.gpus[0].action);
        };
        assert_eq!(*set_mode, Some(true));
        assert!(destroy.is_empty());
        assert_eq!(create.len(), 7);
        assert!(create.iter().all(|c| c.profile.name == "1g.18gb"));
        assert!(p.needs_clients_stopped() && p.mode_change());
    }

    #[test]
    fn disabled_gpu_wanting_disabled_is_unchanged() {
        let p = plan(&default_config(), "all-disabled", &[facts("H100-80GB", 0)]).unwrap();
        assert_eq!(p.gpus[0].action, GpuAction::Unchanged);
        assert!(!p.needs_clients_stopped());
    }

    #[test]
    fn profile_of_another_model_is_refused_naming_gpu_and_profile() {
        let mut cfg = default_config();
        let entries = cfg.mig_configs.get("all-1g.18gb").unwrap().clone();
        let mut e = entries[0].clone();
        e.device_filter = None;
        cfg.mig_configs.insert("odd".into(), vec![e]);
        let err = plan(&cfg, "odd", &[facts("H100-80GB", 3)]).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, PlanError::Impossible { gpu: 3, .. }),
            "{text}"
        );
        assert!(text.contains("GPU 3") && text.contains("1g.18gb"), "{text}");
    }

    #[test]
    fn too_many_instances_are_refused() {
        let yaml = "version: v1\nmig-configs:\n  big:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 3}\n";
        let cfg: MigPartedConfig = serde_yaml::from_str(yaml).unwrap();
        let err = plan(&cfg, "big", &[facts("A100-80GB", 0)]).unwrap_err();
        assert!(err.to_string().contains("3g.40gb"), "{err}");
    }

    #[test]
    fn unknown_config_lists_known_ones() {
        let err = plan(&default_config(), "nope", &[]).unwrap_err();
        assert!(err.to_string().contains("all-balanced"), "{err}");
    }

    #[test]
    fn non_mig_gpu_wanting_mig_is_refused() {
        let err = plan(&default_config(), "all-enabled", &[facts("L4", 0)]).unwrap_err();
        assert!(
            matches!(err, PlanError::NotMigCapable { gpu: 0, .. }),
            "{err}"
        );
    }

    #[test]
    fn filtered_entries_leave_other_models_alone() {
        let p = plan(&default_config(), "all-1g.18gb", &[facts("H100-80GB", 0)]).unwrap();
        assert_eq!(p.gpus[0].action, GpuAction::NotSelected);
    }

    /// mig-parted checks profiles only where an entry meets a GPU: an unknown (but well-formed)
    /// profile in an entry for a B200 or in another config does not fail an H100 node.
    #[test]
    fn unknown_profiles_elsewhere_are_ignored_and_fail_only_where_they_apply() {
        let yaml = r#"version: v1
mig-configs:
  mine:
    - device-filter: ["0x290110DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.99gb": 7}
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"2g.20gb": 3}
  other:
    - devices: all
      mig-enabled: true
      mig-devices: {"6g.123gb": 1}
"#;
        let cfg: MigPartedConfig = serde_yaml::from_str(yaml).unwrap();
        assert!(!cfg.validate().is_empty(), "offline check still names them");
        let p = plan(&cfg, "mine", &[facts("H100-80GB", 0)]).unwrap();
        assert_eq!(p.gpus[0].wanted, Some(MigLayout::enabled([("2g.20gb", 3)])));
        let err = plan(&cfg, "mine", &[facts("B200", 1)]).unwrap_err();
        assert!(err.to_string().contains("1g.99gb"), "{err}");
        let err = plan(&cfg, "other", &[facts("H100-80GB", 0)]).unwrap_err();
        assert!(err.to_string().contains("6g.123gb"), "{err}");
        // Grammar is still checked everywhere, as mig-parted does when it reads the file.
        let bad = yaml.replace("1g.99gb", "one-gig");
        let cfg: MigPartedConfig = serde_yaml::from_str(&bad).unwrap();
        assert!(matches!(
            plan(&cfg, "mine", &[facts("H100-80GB", 0)]),
            Err(PlanError::InvalidConfig(_))
        ));
    }

    /// Every `all-<profile>` and `all-balanced` entry of the default config fits every catalog
    /// GPU it applies to.
    #[test]
    fn every_default_config_fits_every_catalog_gpu_it_selects() {
        let cfg = default_config();
        for m in catalog::MODELS.iter().filter(|m| m.mig_capable()) {
            let mut selected = 0;
            for name in cfg.mig_configs.keys() {
                let p = plan(&cfg, name, &[facts(m.key, 0)])
                    .unwrap_or_else(|e| panic!("{} {name}: {e}", m.key));
                selected += usize::from(p.gpus[0].wanted.is_some());
            }
            // all-disabled, all-enabled, all-balanced, and one per profile of the model.
            assert_eq!(selected, 3 + m.mig.len(), "{}", m.key);
        }
    }

    #[test]
    fn stray_bare_gpu_instance_forces_a_rebuild() {
        let mut g = facts("H100-80GB", 0);
        g.mode = Some(MigMode {
            current: true,
            pending: true,
        });
        g.layout = MigLayout::enabled([]);
        g.instances.push(ExistingInstance {
            instance: gantry_gpu::GpuInstance {
                id: 7,
                profile: "1g.10gb".into(),
                profile_id: 19,
                placement: Placement { start: 0, size: 1 },
                slices: 1,
                memory_mib: 9856,
            },
            compute_instances: vec![],
        });
        let p = plan(&default_config(), "all-enabled", &[g]).unwrap();
        assert!(
            matches!(&p.gpus[0].action, GpuAction::Change { set_mode: None, destroy, create } if destroy.len() == 1 && create.is_empty())
        );
    }
}
