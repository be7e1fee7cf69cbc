use super::*;

fn xid(gpu: u32, xid: u64) -> Event {
    Event {
        gpu,
        gpu_uuid: format!("GPU-{gpu}"),
        kind: event_kind::XID_CRITICAL,
        xid,
        gpu_instance_id: None,
        compute_instance_id: None,
    }
}

fn gpu_phys(index: u32) -> Physical {
    Physical::Gpu {
        index,
        uuid: format!("GPU-{index}"),
        minor: index,
    }
}

#[test]
fn default_policy_ignores_application_xids() {
    let p = HealthPolicy::default();
    for x in DEFAULT_IGNORED_XIDS {
        assert_eq!(p.classify(&xid(0, x)), None, "xid {x}");
    }
    assert_eq!(
        p.classify(&xid(1, 79)),
        Some((Target::Gpu(1), FaultKind::Lost))
    );
    assert_eq!(
        p.classify(&xid(0, 48)),
        Some((Target::Gpu(0), FaultKind::Memory))
    );
    assert_eq!(
        p.classify(&xid(0, 62)),
        Some((Target::Gpu(0), FaultKind::Xid(62)))
    );
    let mut sbe = xid(0, 0);
    sbe.kind = event_kind::SINGLE_BIT_ECC;
    assert_eq!(p.classify(&sbe), None);
    sbe.kind = event_kind::DOUBLE_BIT_ECC;
    assert_eq!(p.classify(&sbe), Some((Target::Gpu(0), FaultKind::Memory)));
}

#[test]
fn env_knobs_follow_upstream_precedence() {
    let (p, w) = HealthPolicy::from_env(Some("62, bogus"), Some("13"));
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("bogus"));
    assert_eq!(p.classify(&xid(0, 62)), None);
    assert!(p.classify(&xid(0, 13)).is_some());
    let (p, _) = HealthPolicy::from_env(None, Some("ALL"));
    assert!(p.classify(&xid(0, 31)).is_some());
    let (p, _) = HealthPolicy::from_env(Some("xids"), Some("79"));
    assert!(p.disabled);
    assert_eq!(p.classify(&xid(0, 79)), None);
}

#[test]
fn a_gpu_fault_covers_every_device_it_backs() {
    let mig = Physical::Mig {
        parent: 2,
        parent_minor: 2,
        index: 0,
        uuid: "MIG-a".into(),
        gi: 1,
        ci: 0,
    };
    assert!(Target::Gpu(2).covers(&mig));
    assert!(Target::Gpu(2).covers(&gpu_phys(2)));
    assert!(!Target::Gpu(1).covers(&mig));
    assert!(
        Target::Mig {
            gpu: 2,
            gi: 1,
            ci: 0
        }
        .covers(&mig)
    );
    assert!(
        !Target::Mig {
            gpu: 2,
            gi: 2,
            ci: 0
        }
        .covers(&mig)
    );
    assert!(Target::GpuInstance { gpu: 2, gi: 1 }.covers(&mig));
}

fn quiet(secs: u64) -> HealthPolicy {
    HealthPolicy {
        quiet_period: Duration::from_secs(secs),
        ..HealthPolicy::default()
    }
}

const LOST: Probe = Probe {
    lost: true,
    ecc_volatile: None,
    remap_pending: false,
    remap_failure: false,
};

#[test]
fn lost_gpu_recovers_after_it_answers_again() {
    let policy = HealthPolicy::default();
    let t0 = Instant::now();
    let mut faults = Faults::default();
    assert!(faults.record(Target::Gpu(0), FaultKind::Lost, Some(LOST), t0));
    assert!(faults.unhealthy(&gpu_phys(0)));
    assert!(faults.observe(0, LOST, &policy, t0).is_empty());
    let cleared = faults.observe(0, Probe::default(), &policy, t0 + Duration::from_secs(4));
    assert_eq!(cleared.len(), 1);
    assert_eq!(cleared[0].withdrawn_for, Duration::from_secs(4));
    assert!(!faults.unhealthy(&gpu_phys(0)));
}

#[test]
fn memory_fault_recovers_when_ecc_state_clears() {
    let policy = HealthPolicy::default();
    let t0 = Instant::now();
    let bad = Probe {
        ecc_volatile: Some((0, 1)),
        remap_pending: true,
        ..Probe::default()
    };
    let mut faults = Faults::default();
    faults.record(Target::Gpu(3), FaultKind::Memory, Some(bad), t0);
    assert!(faults.observe(3, bad, &policy, t0).is_empty());
    let pending_only = Probe {
        ecc_volatile: Some((0, 0)),
        remap_pending: true,
        ..Probe::default()
    };
    assert!(faults.observe(3, pending_only, &policy, t0).is_empty());
    let clean = Probe {
        ecc_volatile: Some((0, 0)),
        ..Probe::default()
    };
    assert_eq!(faults.observe(3, clean, &policy, t0).len(), 1);
}

/// XID 119 on a GPU whose counters sit at 0: a reset leaves them at 0, so recovery
/// cannot wait for a drop. Clean probes for the quiet period bring it back.
#[test]
fn fatal_xid_recovers_after_the_quiet_period_with_no_counter_moving() {
    let t0 = Instant::now();
    let zero = Probe {
        ecc_volatile: Some((0, 0)),
        ..Probe::default()
    };
    let policy = quiet(30);
    let mut faults = Faults::default();
    assert!(faults.record(Target::Gpu(0), FaultKind::Xid(119), Some(zero), t0));
    assert!(faults.observe(0, zero, &policy, t0).is_empty());
    assert!(
        faults
            .observe(0, zero, &policy, t0 + Duration::from_secs(29))
            .is_empty()
    );
    assert_eq!(
        faults.observe(0, zero, &policy, t0 + Duration::from_secs(30)),
        vec![Cleared {
            target: Target::Gpu(0),
            kind: FaultKind::Xid(119),
            withdrawn_for: Duration::from_secs(30),
        }]
    );
    assert!(faults.is_empty());
}

#[test]
fn a_recurring_xid_restarts_the_quiet_period() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let policy = quiet(10);
    let mut faults = Faults::default();
    faults.record(Target::Gpu(1), FaultKind::Xid(62), None, t0);
    assert!(faults.observe(1, Probe::default(), &policy, t0).is_empty());
    // Recurs at t0+8: the clean run starts over.
    assert!(!faults.record(Target::Gpu(1), FaultKind::Xid(62), None, t0 + s(8)));
    assert!(
        faults
            .observe(1, Probe::default(), &policy, t0 + s(9))
            .is_empty()
    );
    assert!(
        faults
            .observe(1, Probe::default(), &policy, t0 + s(18))
            .is_empty()
    );
    assert_eq!(
        faults
            .observe(1, Probe::default(), &policy, t0 + s(19))
            .len(),
        1
    );
}

#[test]
fn an_unanswering_gpu_or_pending_remap_stops_the_quiet_period() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let policy = quiet(10);
    let mut faults = Faults::default();
    faults.record(Target::Gpu(0), FaultKind::Xid(119), None, t0);
    assert!(faults.observe(0, Probe::default(), &policy, t0).is_empty());
    assert!(faults.observe(0, LOST, &policy, t0 + s(5)).is_empty());
    assert!(
        faults
            .observe(0, Probe::default(), &policy, t0 + s(6))
            .is_empty()
    );
    let pending = Probe {
        remap_pending: true,
        ..Probe::default()
    };
    assert!(faults.observe(0, pending, &policy, t0 + s(15)).is_empty());
    assert!(
        faults
            .observe(0, Probe::default(), &policy, t0 + s(16))
            .is_empty()
    );
    assert!(
        faults
            .observe(0, Probe::default(), &policy, t0 + s(25))
            .is_empty()
    );
    assert_eq!(
        faults
            .observe(0, Probe::default(), &policy, t0 + s(26))
            .len(),
        1
    );
}

#[test]
fn a_counter_drop_is_a_reset_seen_directly() {
    let t0 = Instant::now();
    let fine = Probe {
        ecc_volatile: Some((5, 0)),
        ..Probe::default()
    };
    let mut faults = Faults::default();
    faults.record(Target::Gpu(0), FaultKind::Xid(62), Some(fine), t0);
    let policy = quiet(3600);
    assert!(
        faults
            .observe(0, fine, &policy, t0 + Duration::from_secs(60))
            .is_empty()
    );
    let reset = Probe {
        ecc_volatile: Some((0, 0)),
        ..Probe::default()
    };
    assert_eq!(faults.observe(0, reset, &policy, t0).len(), 1);
}

#[test]
fn an_xid_on_top_of_a_memory_fault_needs_the_quiet_period_too() {
    let t0 = Instant::now();
    let policy = quiet(10);
    let mut faults = Faults::default();
    faults.record(Target::Gpu(0), FaultKind::Memory, None, t0);
    faults.record(Target::Gpu(0), FaultKind::Xid(119), None, t0);
    assert!(faults.observe(0, Probe::default(), &policy, t0).is_empty());
    assert_eq!(
        faults
            .observe(0, Probe::default(), &policy, t0 + Duration::from_secs(10))
            .len(),
        1
    );
}
