//! Property test of the health core against a model GPU: random fault sequences (ignored and
//! fatal XIDs, XID 119, off-bus, double-bit ECC with a pending row remap, resets) and probe
//! ticks. A GPU is never Healthy while it is known bad (lost, DBE count, remap pending after
//! a fatal event), ignored XIDs never withdraw it, a fatal XID is not forgiven before the
//! quiet period, and after a reset and one quiet period every GPU is Healthy again.

use std::time::{Duration, Instant};

use gantry_gpu::{Event, event_kind};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::health::{Faults, HealthPolicy, Probe, XID_GPU_LOST};
use super::resources::Physical;

const GPUS: u32 = 2;
const QUIET: u64 = 30;

#[derive(Debug, Clone)]
enum Op {
    Xid(u32, u64),
    OffBus(u32),
    Dbe(u32),
    Reset(u32),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            0..GPUS,
            prop::sample::select(vec![13u64, 31, 43, 62, 74, 119])
        )
            .prop_map(|(g, x)| Op::Xid(g, x)),
        (0..GPUS).prop_map(Op::OffBus),
        (0..GPUS).prop_map(Op::Dbe),
        (0..GPUS).prop_map(Op::Reset),
        (1..40u64).prop_map(Op::Tick),
    ]
}

#[derive(Debug, Clone, Copy, Default)]
struct Gpu {
    lost: bool,
    dbe: u64,
    remap_pending: bool,
    /// A fatal event was seen while it was bad (since the last reset).
    fatal_since_reset: bool,
    /// Time of the last fatal, non-memory, non-lost XID.
    last_xid: Option<u64>,
}

impl Gpu {
    fn probe(&self) -> Probe {
        if self.lost {
            return Probe {
                lost: true,
                ..Probe::default()
            };
        }
        Probe {
            lost: false,
            ecc_volatile: Some((0, self.dbe)),
            remap_pending: self.remap_pending,
            remap_failure: false,
        }
    }
    fn bad(&self) -> bool {
        self.lost || self.dbe > 0 || self.remap_pending
    }
}

fn event(gpu: u32, kind: u64, xid: u64) -> Event {
    Event {
        gpu,
        gpu_uuid: format!("GPU-{gpu}"),
        kind,
        xid,
        gpu_instance_id: None,
        compute_instance_id: None,
    }
}

fn phys(index: u32) -> Physical {
    Physical::Gpu {
        index,
        uuid: format!("GPU-{index}"),
        minor: index,
    }
}

/// Runs one sequence, adding (operations, fatal faults recorded) to `totals`. `Err` on a
/// violation.
fn run(ops: Vec<Op>, totals: &std::cell::Cell<(u64, u64)>) -> Result<(), TestCaseError> {
    let n_ops = ops.len() as u64;
    let mut n_faults = 0u64;
    let policy = HealthPolicy {
        quiet_period: Duration::from_secs(QUIET),
        ..HealthPolicy::default()
    };
    let t0 = Instant::now();
    let mut now = 0u64;
    let mut gpus = [Gpu::default(); GPUS as usize];
    let mut faults = Faults::default();
    let at = |s: u64| t0 + Duration::from_secs(s);
    for op in ops {
        let ev = match op {
            Op::Xid(g, x) => Some(event(g, event_kind::XID_CRITICAL, x)),
            Op::OffBus(g) => {
                gpus[g as usize].lost = true;
                Some(event(g, event_kind::XID_CRITICAL, XID_GPU_LOST))
            }
            Op::Dbe(g) => {
                let m = &mut gpus[g as usize];
                if !m.lost {
                    m.dbe += 1;
                    m.remap_pending = true;
                }
                Some(event(g, event_kind::DOUBLE_BIT_ECC, 48))
            }
            Op::Reset(g) => {
                let m = &mut gpus[g as usize];
                *m = Gpu {
                    last_xid: m.last_xid,
                    ..Gpu::default()
                };
                None
            }
            Op::Tick(dt) => {
                now += dt;
                None
            }
        };
        if let Some(e) = ev {
            let m = &mut gpus[e.gpu as usize];
            if let Some((target, kind)) = policy.classify(&e) {
                m.fatal_since_reset = true;
                n_faults += 1;
                if matches!(kind, super::health::FaultKind::Xid(_)) {
                    m.last_xid = Some(now);
                }
                faults.record(target, kind, Some(m.probe()), at(now));
            } else {
                prop_assert!(
                    [13, 31, 43].contains(&e.xid),
                    "a fatal XID was ignored: {e:?}"
                );
            }
        }
        for g in faults.gpus() {
            faults.observe(g, gpus[g as usize].probe(), &policy, at(now));
        }
        for g in 0..GPUS {
            let m = gpus[g as usize];
            let healthy = !faults.unhealthy(&phys(g));
            prop_assert!(
                !(healthy && m.bad() && m.fatal_since_reset),
                "GPU {g} Healthy while bad: {m:?}"
            );
            if let Some(t) = m.last_xid {
                prop_assert!(
                    !(healthy && now < t + QUIET && m.fatal_since_reset),
                    "GPU {g} forgiven {}s after a fatal XID",
                    now - t
                );
            }
        }
    }
    // Liveness: reset everything, then one quiet period of clean probes.
    for g in 0..GPUS {
        gpus[g as usize] = Gpu::default();
    }
    for step in [0, 1, QUIET, QUIET + 1] {
        for g in faults.gpus() {
            faults.observe(g, gpus[g as usize].probe(), &policy, at(now + step));
        }
    }
    prop_assert!(
        faults.is_empty(),
        "stuck faults: {:?}",
        faults.targets().collect::<Vec<_>>()
    );
    let (o, f) = totals.get();
    totals.set((o + n_ops, f + n_faults));
    Ok(())
}

#[test]
fn faults_and_resets_never_leave_a_bad_gpu_healthy_nor_a_good_one_withdrawn() {
    let cases = 512;
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases));
    let totals = std::cell::Cell::new((0, 0));
    let result = runner.run(&prop::collection::vec(op(), 1..60), |ops| run(ops, &totals));
    let (ops, faults) = totals.get();
    println!(
        "health chaos: {cases} sequences, {ops} operations, {faults} fatal faults, violations: {}",
        u32::from(result.is_err())
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
