//! The part of the device plugin config (v1) that discovery labels depend on: which resources
//! are replicated, how many times, whether they are renamed, and by which strategy.

use std::collections::BTreeMap;

/// How replicated resources are shared (`nvidia.com/<R>.sharing-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharingStrategy {
    #[default]
    None,
    TimeSlicing,
    Mps,
}

impl SharingStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            SharingStrategy::None => "none",
            SharingStrategy::TimeSlicing => "time-slicing",
            SharingStrategy::Mps => "mps",
        }
    }
}

/// One replicated resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub replicas: u32,
    /// Advertised under another name (`<name>.shared`); then the product gets no `-SHARED`.
    pub renamed: bool,
}

/// Sharing as the device plugin applies it, keyed by full resource name (`nvidia.com/gpu`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sharing {
    pub strategy: SharingStrategy,
    pub resources: BTreeMap<String, Replication>,
}

/// One `sharing.timeSlicing` / `sharing.mps` entry as written in the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicatedEntry {
    /// Resource name, with or without the `nvidia.com/` prefix.
    pub name: String,
    pub replicas: u32,
}

impl Sharing {
    /// No sharing at all (the default config).
    pub fn none() -> Self {
        Self::default()
    }

    /// Build from the config file's two sharing sections, with the device plugin's rules: a
    /// present `mps` section is the replicated set; the strategy is `mps` if it has an entry with
    /// replicas > 1, else `time-slicing` if `timeSlicing` does, else none. Only
    /// `renameByDefault` renames (per-entry `rename` is ignored upstream).
    pub fn from_sections(
        time_slicing: Option<(&[ReplicatedEntry], bool)>,
        mps: Option<(&[ReplicatedEntry], bool)>,
    ) -> Self {
        let replicated = |entries: &[ReplicatedEntry]| entries.iter().any(|e| e.replicas > 1);
        let (strategy, chosen) = match (mps, time_slicing) {
            (Some(m), _) if replicated(m.0) => (SharingStrategy::Mps, Some(m)),
            (Some(m), _) => (SharingStrategy::None, Some(m)),
            (None, Some(t)) if replicated(t.0) => (SharingStrategy::TimeSlicing, Some(t)),
            (None, t) => (SharingStrategy::None, t),
        };
        let mut resources = BTreeMap::new();
        if let Some((entries, rename_by_default)) = chosen {
            for e in entries {
                resources.insert(
                    full_resource_name(&e.name),
                    Replication {
                        replicas: e.replicas,
                        renamed: rename_by_default,
                    },
                );
            }
        }
        Sharing {
            strategy,
            resources,
        }
    }

    pub fn replication(&self, resource: &str) -> Option<Replication> {
        self.resources.get(resource).copied()
    }
}

/// `gpu` → `nvidia.com/gpu`; names that already carry a prefix are kept.
pub fn full_resource_name(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{}{}", gantry_api::names::GFD_PREFIX, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, replicas: u32) -> ReplicatedEntry {
        ReplicatedEntry {
            name: name.into(),
            replicas,
        }
    }

    #[test]
    fn mps_section_wins_when_present() {
        let ts = [entry("nvidia.com/gpu", 4)];
        let mps = [entry("gpu", 2)];
        let s = Sharing::from_sections(Some((&ts, false)), Some((&mps, false)));
        assert_eq!(s.strategy, SharingStrategy::Mps);
        assert_eq!(s.replication("nvidia.com/gpu").map(|r| r.replicas), Some(2));
    }

    #[test]
    fn time_slicing_with_rename() {
        let ts = [entry("nvidia.com/gpu", 4)];
        let s = Sharing::from_sections(Some((&ts, true)), None);
        assert_eq!(s.strategy, SharingStrategy::TimeSlicing);
        assert_eq!(
            s.replication("nvidia.com/gpu"),
            Some(Replication {
                replicas: 4,
                renamed: true
            })
        );
    }

    #[test]
    fn one_replica_is_not_sharing() {
        let ts = [entry("nvidia.com/gpu", 1)];
        let s = Sharing::from_sections(Some((&ts, false)), None);
        assert_eq!(s.strategy, SharingStrategy::None);
    }
}
