//! The pure core of health: which events make a device Unhealthy (the XID policy and its
//! env knobs), which devices a fault covers (all replicas and MIG devices of a GPU, not
//! one), and when a fault has cleared so the devices come back Healthy.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gantry_gpu::{Event, event_kind};

use super::resources::Physical;

/// Application-level XIDs that leave the GPU usable (upstream's hard-coded set).
pub const DEFAULT_IGNORED_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];
/// XID of a GPU that fell off the bus.
pub const XID_GPU_LOST: u64 = 79;
/// XIDs about uncorrectable memory errors / row remapping: they clear with the ECC state.
pub const MEMORY_XIDS: [u64; 5] = [48, 63, 64, 94, 95];

pub const ENV_DISABLE: &str = "DP_DISABLE_HEALTHCHECKS";
pub const ENV_ENABLE: &str = "DP_ENABLE_HEALTHCHECKS";

/// The XID policy from `DP_DISABLE_HEALTHCHECKS` / `DP_ENABLE_HEALTHCHECKS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthPolicy {
    /// `DP_DISABLE_HEALTHCHECKS=all|xids`: no health checking at all.
    pub disabled: bool,
    pub ignored: BTreeSet<u64>,
    /// Always fatal, beating `ignored`.
    pub fatal: BTreeSet<u64>,
    /// `DP_ENABLE_HEALTHCHECKS=all`: every XID is fatal.
    pub all_fatal: bool,
    /// Quiet period for fatal XIDs (other than a lost GPU or a memory error, which have
    /// their own evidence): the GPU must answer every probe, have no pending or failed row
    /// remap, and see no new XID for this long before its devices are Healthy again. A
    /// reset (no counter has to move) is exactly this evidence; a recurring XID restarts it.
    pub quiet_period: Duration,
}

/// Default [`HealthPolicy::quiet_period`].
pub const DEFAULT_QUIET_PERIOD: Duration = Duration::from_secs(60);

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            disabled: false,
            ignored: DEFAULT_IGNORED_XIDS.into_iter().collect(),
            fatal: BTreeSet::new(),
            all_fatal: false,
            quiet_period: DEFAULT_QUIET_PERIOD,
        }
    }
}

impl HealthPolicy {
    /// Parses the env values (comma-separated, case-insensitive). Malformed entries are
    /// returned as warnings and skipped, as upstream does. As upstream, `disable=all`
    /// wins over any enable list.
    pub fn from_env(disable: Option<&str>, enable: Option<&str>) -> (Self, Vec<String>) {
        let mut policy = HealthPolicy::default();
        let mut warnings = Vec::new();
        let mut parse = |var: &str, value: &str, all: &mut bool, set: &mut BTreeSet<u64>| {
            for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let lower = item.to_ascii_lowercase();
                if lower == "all" || (var == ENV_DISABLE && lower == "xids") {
                    *all = true;
                } else {
                    match lower.parse::<u64>() {
                        Ok(xid) => {
                            set.insert(xid);
                        }
                        Err(_) => {
                            warnings.push(format!("{var}: {item:?} is not an XID number; skipped"))
                        }
                    }
                }
            }
        };
        let mut extra_ignored = BTreeSet::new();
        if let Some(v) = disable {
            parse(ENV_DISABLE, v, &mut policy.disabled, &mut extra_ignored);
        }
        policy.ignored.extend(extra_ignored);
        if let Some(v) = enable {
            parse(ENV_ENABLE, v, &mut policy.all_fatal, &mut policy.fatal);
        }
        (policy, warnings)
    }

    /// What an event does: `None` = nothing (ignored kind or XID).
    pub fn classify(&self, event: &Event) -> Option<(Target, FaultKind)> {
        if self.disabled {
            return None;
        }
        let kind = if event.kind & event_kind::XID_CRITICAL != 0 {
            let xid = event.xid;
            let fatal = self.all_fatal || self.fatal.contains(&xid) || !self.ignored.contains(&xid);
            if !fatal {
                return None;
            }
            if xid == XID_GPU_LOST {
                FaultKind::Lost
            } else if MEMORY_XIDS.contains(&xid) {
                FaultKind::Memory
            } else {
                FaultKind::Xid(xid)
            }
        } else if event.kind & event_kind::DOUBLE_BIT_ECC != 0 {
            FaultKind::Memory
        } else {
            return None;
        };
        let target = match (event.gpu_instance_id, event.compute_instance_id) {
            (Some(gi), Some(ci)) => Target::Mig {
                gpu: event.gpu,
                gi,
                ci,
            },
            (Some(gi), None) => Target::GpuInstance { gpu: event.gpu, gi },
            _ => Target::Gpu(event.gpu),
        };
        Some((target, kind))
    }
}

/// What a fault covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// The whole GPU: the GPU itself, all its replicas and all its MIG devices.
    Gpu(u32),
    /// Every MIG device of one GPU instance.
    GpuInstance { gpu: u32, gi: u32 },
    /// One MIG device.
    Mig { gpu: u32, gi: u32, ci: u32 },
}

impl Target {
    pub fn gpu(self) -> u32 {
        match self {
            Target::Gpu(g) | Target::GpuInstance { gpu: g, .. } | Target::Mig { gpu: g, .. } => g,
        }
    }

    /// Whether a device backed by `phys` is hit by this fault.
    pub fn covers(self, phys: &Physical) -> bool {
        match (self, phys) {
            (Target::Gpu(g), p) => p.gpu() == g,
            (
                Target::GpuInstance { gpu, gi },
                Physical::Mig {
                    parent, gi: pgi, ..
                },
            ) => *parent == gpu && *pgi == gi,
            (
                Target::Mig { gpu, gi, ci },
                Physical::Mig {
                    parent,
                    gi: pgi,
                    ci: pci,
                    ..
                },
            ) => *parent == gpu && *pgi == gi && *pci == ci,
            // A MIG-attributed event on a GPU advertised whole still hits that GPU.
            (
                Target::GpuInstance { gpu, .. } | Target::Mig { gpu, .. },
                Physical::Gpu { index, .. },
            ) => *index == gpu,
        }
    }
}

/// Why a target is unhealthy; decides what clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Fallen off the bus: clears when the GPU, seen lost, answers again.
    Lost,
    /// Uncorrectable memory error: clears when volatile DBE count is 0 and no row remap is
    /// pending or failed (i.e. after a reset).
    Memory,
    /// Any other fatal XID: clears after the quiet period of clean probes, or at once when
    /// the volatile ECC counters dropped (a reset seen directly).
    Xid(u64),
}

/// A GPU's state as the health probe reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Probe {
    pub lost: bool,
    /// Volatile ECC counts (single + double bit) when readable.
    pub ecc_volatile: Option<(u64, u64)>,
    pub remap_pending: bool,
    pub remap_failure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fault {
    kind: FaultKind,
    since: Instant,
    /// Volatile ECC counts when the fault was seen (a drop means the GPU was reset).
    ecc_at_fault: Option<(u64, u64)>,
    seen_lost: bool,
    /// Start of the current run of clean probes with no new event (the quiet period).
    healthy_since: Option<Instant>,
    /// Events for this target while the fault was in force (1 = the first).
    events: u64,
}

/// A fault that cleared, for logs, events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleared {
    pub target: Target,
    pub kind: FaultKind,
    /// How long the devices were withdrawn.
    pub withdrawn_for: Duration,
}

/// Every fault in force. Kept by the shell across restarts of the gRPC servers.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    faults: BTreeMap<Target, Fault>,
}

impl Faults {
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    pub fn targets(&self) -> impl Iterator<Item = Target> + '_ {
        self.faults.keys().copied()
    }

    /// GPUs that need probing.
    pub fn gpus(&self) -> BTreeSet<u32> {
        self.faults.keys().map(|t| t.gpu()).collect()
    }

    /// Whether a device backed by `phys` is unhealthy.
    pub fn unhealthy(&self, phys: &Physical) -> bool {
        self.faults.keys().any(|t| t.covers(phys))
    }

    /// Records a fault; returns whether anything changed. `probe` is the GPU's state now
    /// (for the reset baseline).
    pub fn record(
        &mut self,
        target: Target,
        kind: FaultKind,
        probe: Option<Probe>,
        now: Instant,
    ) -> bool {
        let fault = Fault {
            kind,
            since: now,
            ecc_at_fault: probe.and_then(|p| p.ecc_volatile),
            seen_lost: probe.is_some_and(|p| p.lost),
            healthy_since: None,
            events: 1,
        };
        match self.faults.get_mut(&target) {
            // A recurrence restarts the quiet period; a lost GPU outranks anything else, and
            // the first fault's reset baseline stays.
            Some(f) => {
                f.healthy_since = None;
                f.events += 1;
                f.seen_lost |= fault.seen_lost;
                // Memory faults clear by ECC state alone; another XID on top needs the
                // quiet period as well.
                f.kind = match (f.kind, kind) {
                    (FaultKind::Lost, _) | (_, FaultKind::Lost) => FaultKind::Lost,
                    (FaultKind::Memory, k @ FaultKind::Xid(_)) => k,
                    (k, _) => k,
                };
                false
            }
            None => {
                self.faults.insert(target, fault);
                true
            }
        }
    }

    /// Applies a probe of GPU `gpu`; returns the faults that cleared.
    pub fn observe(
        &mut self,
        gpu: u32,
        probe: Probe,
        policy: &HealthPolicy,
        now: Instant,
    ) -> Vec<Cleared> {
        let mut out = Vec::new();
        self.faults.retain(|target, f| {
            if target.gpu() != gpu {
                return true;
            }
            f.seen_lost |= probe.lost;
            if !cleared(f, probe, policy, now) {
                return true;
            }
            out.push(Cleared {
                target: *target,
                kind: f.kind,
                withdrawn_for: now.saturating_duration_since(f.since),
            });
            false
        });
        out
    }
}

/// Whether the fault has cleared by direct evidence: the GPU answers, its memory state is
/// clean, and (per kind) it was seen lost and is back, or it stayed quiet long enough.
/// No counter has to move: a reset from ECC counts of 0 leaves them at 0.
fn cleared(f: &mut Fault, probe: Probe, policy: &HealthPolicy, now: Instant) -> bool {
    let memory_ok = probe.ecc_volatile.is_none_or(|(_, dbe)| dbe == 0)
        && !probe.remap_pending
        && !probe.remap_failure;
    if probe.lost || !memory_ok {
        f.healthy_since = None;
        return false;
    }
    let reset_seen = match (f.ecc_at_fault, probe.ecc_volatile) {
        (Some((s0, d0)), Some((s, d))) => s < s0 || d < d0,
        _ => false,
    };
    let healthy_since = *f.healthy_since.get_or_insert(now);
    let quiet = now.saturating_duration_since(healthy_since) >= policy.quiet_period;
    match f.kind {
        FaultKind::Lost if f.seen_lost => true,
        FaultKind::Memory => true,
        FaultKind::Lost | FaultKind::Xid(_) => reset_seen || quiet,
    }
}

#[cfg(test)]
mod tests;
