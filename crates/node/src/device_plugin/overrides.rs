//! Flags and env that beat the config file (upstream's precedence: flag > file > default).

use std::collections::BTreeSet;

use super::settings::{
    AllocationPolicy, DeviceIdStrategy, DeviceListStrategy, MigStrategy, Settings,
};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub mig_strategy: Option<MigStrategy>,
    pub device_list_strategies: Option<BTreeSet<DeviceListStrategy>>,
    pub device_id_strategy: Option<DeviceIdStrategy>,
    pub pass_device_specs: Option<bool>,
    pub dev_root: Option<String>,
    pub mps_root: Option<String>,
    pub allocation_policy: Option<AllocationPolicy>,
    pub cdi_annotation_prefix: Option<String>,
    pub gdrcopy_enabled: Option<bool>,
    pub gds_enabled: Option<bool>,
    pub mofed_enabled: Option<bool>,
    pub imex_channel_ids: Option<Vec<u32>>,
    pub imex_required: Option<bool>,
}

impl Overrides {
    pub fn apply(&self, s: &mut Settings) {
        fn set<T: Clone>(from: &Option<T>, to: &mut T) {
            if let Some(v) = from {
                *to = v.clone();
            }
        }
        set(&self.mig_strategy, &mut s.mig_strategy);
        set(&self.device_list_strategies, &mut s.device_list_strategies);
        set(&self.device_id_strategy, &mut s.device_id_strategy);
        set(&self.pass_device_specs, &mut s.pass_device_specs);
        if let Some(v) = &self.dev_root {
            s.dev_root = Some(v.clone());
        }
        if let Some(v) = &self.mps_root {
            s.mps_root = Some(v.clone());
        }
        set(&self.allocation_policy, &mut s.allocation_policy);
        set(&self.cdi_annotation_prefix, &mut s.cdi_annotation_prefix);
        set(&self.gdrcopy_enabled, &mut s.gdrcopy_enabled);
        set(&self.gds_enabled, &mut s.gds_enabled);
        set(&self.mofed_enabled, &mut s.mofed_enabled);
        set(&self.imex_channel_ids, &mut s.imex.channel_ids);
        set(&self.imex_required, &mut s.imex.required);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_beats_the_file() {
        // The file's `nvidiaDriverRoot` is the device root when no `nvidiaDevRoot` is given.
        let mut s = Settings {
            driver_root: "/run/nvidia/driver".into(),
            ..Settings::default()
        };
        Overrides {
            gds_enabled: Some(true),
            cdi_annotation_prefix: Some("cdi.example.com/".into()),
            imex_channel_ids: Some(vec![0]),
            ..Overrides::default()
        }
        .apply(&mut s);
        assert_eq!(s.dev_root(), "/run/nvidia/driver");
        assert!(s.gds_enabled);
        assert_eq!(s.cdi_annotation_prefix, "cdi.example.com/");
        assert_eq!(s.imex.channel_ids, vec![0]);
        Overrides {
            dev_root: Some("/".into()),
            ..Overrides::default()
        }
        .apply(&mut s);
        assert_eq!(s.dev_root(), "/");
        // Nothing given: nothing changes.
        let before = s.clone();
        Overrides::default().apply(&mut s);
        assert_eq!(s, before);
    }
}
