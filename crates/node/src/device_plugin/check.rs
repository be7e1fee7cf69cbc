//! `gantry node device-plugin --health-check SECONDS`: the plugin's health logic run once,
//! read-only, against the backend's live state — listen to the event stream for a while,
//! classify what arrives with the same XID policy, probe every GPU exactly as the plugin's
//! recovery does, and say per GPU whether its devices would be advertised Healthy. Nothing
//! on the GPU is changed (event registration and queries only).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use gantry_gpu::{Backend, event_kind};

use super::health::{Faults, HealthPolicy};
use super::manager::probe;
use super::resources::Physical;

/// One GPU's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuHealth {
    pub index: u32,
    pub uuid: String,
    pub healthy: bool,
    pub detail: String,
}

/// Listens for `listen`, then probes every GPU. `Err` only when the GPUs cannot be counted.
pub fn check(
    backend: &dyn Backend,
    policy: &HealthPolicy,
    listen: Duration,
) -> Result<Vec<GpuHealth>, gantry_gpu::GpuError> {
    let count = backend.device_count()?;
    let mut faults = Faults::default();
    let mut events = Vec::new();
    if !policy.disabled {
        match backend.subscribe(event_kind::HEALTH) {
            Ok(mut stream) => {
                let end = Instant::now() + listen;
                while let Some(left) = end.checked_duration_since(Instant::now()) {
                    match stream.wait(left.min(Duration::from_millis(200))) {
                        Ok(Some(ev)) => {
                            if let Some((target, kind)) = policy.classify(&ev) {
                                faults.record(
                                    target,
                                    kind,
                                    Some(probe(backend, ev.gpu)),
                                    Instant::now(),
                                );
                            }
                            events.push(ev);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            events.clear();
                            tracing::warn!(error = %e, "event stream failed; probes only");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot subscribe to GPU events; probes only"),
        }
    }
    let mut out = Vec::new();
    for index in 0..count {
        let p = probe(backend, index);
        let info = backend.device_info(index).ok();
        let uuid = info.as_ref().map(|i| i.uuid.clone()).unwrap_or_default();
        let phys = Physical::Gpu {
            index,
            uuid: uuid.clone(),
            minor: index,
        };
        let memory_ok =
            p.ecc_volatile.is_none_or(|(_, d)| d == 0) && !p.remap_pending && !p.remap_failure;
        let healthy = !p.lost && memory_ok && !faults.unhealthy(&phys);
        let mut detail = String::new();
        let _ = write!(
            detail,
            "answers queries: {}",
            if p.lost { "no" } else { "yes" }
        );
        match p.ecc_volatile {
            Some((s, d)) => {
                let _ = write!(detail, ", volatile ECC sbe/dbe: {s}/{d}");
            }
            None => detail.push_str(", ECC: off or unreadable"),
        }
        let _ = write!(
            detail,
            ", row remap pending: {}, remap failure: {}",
            p.remap_pending, p.remap_failure
        );
        let seen: Vec<String> = events
            .iter()
            .filter(|e| e.gpu == index)
            .map(|e| format!("kind {:#x} xid {}", e.kind, e.xid))
            .collect();
        let _ = write!(
            detail,
            ", health events in {}s: {}",
            listen.as_secs(),
            if seen.is_empty() {
                "none".to_string()
            } else {
                seen.join("; ")
            }
        );
        out.push(GpuHealth {
            index,
            uuid,
            healthy,
            detail,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_gpu::{SimBackend, SimConfig, catalog};

    #[test]
    fn a_clean_gpu_is_healthy_and_a_lost_one_is_not() {
        let model = catalog::find("L4").expect("catalog has the L4");
        let b = SimBackend::new(SimConfig::new(model, 2, 7));
        let r = check(&b, &HealthPolicy::default(), Duration::from_millis(50)).unwrap();
        assert!(r.iter().all(|g| g.healthy), "{r:?}");
        assert!(
            r[0].detail.contains("answers queries: yes"),
            "{}",
            r[0].detail
        );
        b.inject_fallen_off_bus(1).unwrap();
        let r = check(&b, &HealthPolicy::default(), Duration::from_millis(50)).unwrap();
        assert!(r[0].healthy);
        assert!(!r[1].healthy);
        assert!(
            r[1].detail.contains("answers queries: no"),
            "{}",
            r[1].detail
        );
    }
}
