//! The Node labels the MIG manager reads and writes, as pure functions over a label map:
//! the selected config, the `mig.config.state` values, and pausing / restoring the deploy
//! labels of GPU clients around a change (as upstream's reconfigure script does).

use std::collections::BTreeMap;

use gantry_api::names::{
    DEPLOY_PAUSED_FOR_MIG_CHANGE, LABEL_DEPLOY_PREFIX, LABEL_MIG_CONFIG, MIG_PAUSED_OPERANDS,
};

/// `nvidia.com/mig.config.state` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigState {
    Pending,
    Rebooting,
    Success,
    Failed,
}

impl ConfigState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigState::Pending => "pending",
            ConfigState::Rebooting => "rebooting",
            ConfigState::Success => "success",
            ConfigState::Failed => "failed",
        }
    }
}

/// The selected config name; an empty or missing label means "do nothing".
pub fn selected_config(labels: &BTreeMap<String, String>) -> Option<&str> {
    labels
        .get(LABEL_MIG_CONFIG)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// Deploy labels to write to pause the GPU clients: every present one becomes
/// `paused-for-mig-change`, except `false` (the client is off for good) — absent ones stay
/// absent. Returns only the labels that change.
pub fn pause(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    deploy_labels(labels)
        .filter(|(_, v)| *v != "false" && *v != DEPLOY_PAUSED_FOR_MIG_CHANGE)
        .map(|(k, _)| (k, DEPLOY_PAUSED_FOR_MIG_CHANGE.to_string()))
        .collect()
}

/// Deploy labels to write after the change: paused ones go back to `true`; `false` and absent
/// ones are left alone. Returns only the labels that change.
pub fn restore(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    deploy_labels(labels)
        .filter(|(_, v)| *v == DEPLOY_PAUSED_FOR_MIG_CHANGE)
        .map(|(k, _)| (k, "true".to_string()))
        .collect()
}

fn deploy_labels(labels: &BTreeMap<String, String>) -> impl Iterator<Item = (String, &str)> {
    MIG_PAUSED_OPERANDS.iter().filter_map(|op| {
        let key = format!("{LABEL_DEPLOY_PREFIX}{op}");
        let v = labels.get(&key)?.as_str();
        Some((key, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pause_keeps_false_and_absent_and_restore_undoes_it() {
        let labels = map(&[
            ("nvidia.com/gpu.deploy.device-plugin", "true"),
            ("nvidia.com/gpu.deploy.dcgm-exporter", "false"),
            ("nvidia.com/gpu.deploy.gpu-feature-discovery", "true"),
            ("nvidia.com/gpu.deploy.driver", "true"),
        ]);
        let paused = pause(&labels);
        assert_eq!(
            paused,
            map(&[
                (
                    "nvidia.com/gpu.deploy.device-plugin",
                    "paused-for-mig-change"
                ),
                (
                    "nvidia.com/gpu.deploy.gpu-feature-discovery",
                    "paused-for-mig-change"
                ),
            ])
        );
        let mut after = labels.clone();
        after.extend(paused);
        assert!(pause(&after).is_empty(), "pausing twice changes nothing");
        let restored = restore(&after);
        after.extend(restored);
        assert_eq!(after, labels);
        assert!(restore(&after).is_empty());
    }

    #[test]
    fn empty_label_selects_nothing() {
        assert_eq!(
            selected_config(&map(&[("nvidia.com/mig.config", " ")])),
            None
        );
        assert_eq!(
            selected_config(&map(&[("nvidia.com/mig.config", "all-balanced")])),
            Some("all-balanced")
        );
        assert_eq!(ConfigState::Failed.as_str(), "failed");
    }
}
