//! The simulated backend through the `Backend` trait: identity, load-driven metrics, events,
//! faults and topology.

use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::layout::{self, MigLayout};
use gantry_gpu::sim::{XID_DOUBLE_BIT_ECC, XID_FALLEN_OFF_BUS};
use gantry_gpu::{
    Backend, GpuError, NvmlBackend, SimBackend, SimConfig, SimProcess, TopologyLevel, event_kind,
    throttle,
};

fn sim(model: &str, count: u32) -> Arc<SimBackend> {
    Arc::new(SimBackend::new(
        SimConfig::for_model(model, count, 42)
            .expect("catalog model")
            .manual_clock(),
    ))
}

#[test]
fn shared_as_dyn_backend_with_catalog_identity() {
    let b: Arc<dyn Backend> = sim("H200", 8);
    assert_eq!(b.device_count().expect("count"), 8);
    let info = b.device_info(3).expect("info");
    assert_eq!(info.name, "NVIDIA H200");
    assert_eq!(info.pci_device_id, 0x2335_10DE);
    assert_eq!(info.pci_subsystem_id, 0x18BF_10DE);
    assert_eq!(info.compute_capability, (9, 0));
    assert!(info.mig_capable);
    assert!(
        info.uuid.starts_with("GPU-") && info.uuid.len() == 40,
        "{}",
        info.uuid
    );
    assert_eq!(b.memory(3).expect("memory").total_mib, 143771);
    assert_eq!(b.driver_version().expect("driver"), "580.159.04");
    assert_eq!(b.cuda_driver_version().expect("cuda"), 13000);
    assert_eq!(b.vgpu_license_status(0), Ok(0));
    let uuids: std::collections::BTreeSet<_> = (0..8)
        .map(|i| b.device_info(i).expect("info").uuid)
        .collect();
    assert_eq!(uuids.len(), 8, "UUIDs are unique per GPU");
    assert!(matches!(b.device_info(8), Err(GpuError::NotFound(_))));
}

#[test]
fn same_seed_same_gpus_other_seed_other_gpus() {
    let a = SimBackend::new(SimConfig::for_model("L4", 2, 1).expect("L4"));
    let b = SimBackend::new(SimConfig::for_model("L4", 2, 1).expect("L4"));
    let c = SimBackend::new(SimConfig::for_model("L4", 2, 2).expect("L4"));
    let uuid = |s: &SimBackend| s.device_info(1).expect("info").uuid;
    assert_eq!(uuid(&a), uuid(&b));
    assert_ne!(uuid(&a), uuid(&c));
}

#[test]
fn metrics_move_with_load() {
    let b = sim("H100-80GB", 8);
    b.advance(Duration::from_secs(60));
    let idle_power = b.power(0).expect("power").usage_mw;
    let idle_temp = b.temperature(0).expect("temp").gpu_c;
    let idle_clocks = b.clocks(0).expect("clocks");
    assert_eq!(b.utilization(0).expect("util").gpu_pct, 0);
    assert_ne!(idle_clocks.throttle_reasons & throttle::GPU_IDLE, 0);
    let e0 = b.total_energy_mj(0).expect("energy");
    let idle_tx = b.pcie_throughput(0).expect("pcie").tx_kbps;
    assert_eq!(b.pcie(0).expect("pcie").link_gen, 5);

    b.set_load(0, 0.9, 40_000).expect("load");
    b.advance(Duration::from_secs(120));
    let u = b.utilization(0).expect("util");
    assert!((85..=95).contains(&u.gpu_pct), "util {}", u.gpu_pct);
    assert!(u.memory_pct > 0);
    let m = b.memory(0).expect("memory");
    assert_eq!(m.used_mib, 40_000);
    assert_eq!(m.used_mib + m.free_mib + m.reserved_mib, m.total_mib);
    let p = b.power(0).expect("power");
    assert!(
        p.usage_mw > idle_power * 4,
        "{} vs idle {}",
        p.usage_mw,
        idle_power
    );
    assert!(p.usage_mw <= p.limit_mw);
    assert_eq!(p.limit_mw, 700_000);
    let t = b.temperature(0).expect("temp");
    assert!(
        t.gpu_c > idle_temp + 20,
        "{} vs idle {}",
        t.gpu_c,
        idle_temp
    );
    assert!(t.memory_c.expect("HBM sensor") > t.gpu_c);
    assert!(b.clocks(0).expect("clocks").sm_mhz > idle_clocks.sm_mhz);
    assert!(b.pcie_throughput(0).expect("pcie").tx_kbps > idle_tx * 10);
    // Energy over 120 s at several hundred watts.
    let e1 = b.total_energy_mj(0).expect("energy");
    assert!(e1 - e0 > 120 * 400_000, "energy grew by {} mJ", e1 - e0);
    // Other GPUs stay idle.
    assert_eq!(b.utilization(1).expect("util").gpu_pct, 0);
    // NVLink counters grow on the busy GPU.
    let tx: u64 = b.nvlinks(0).expect("links").iter().map(|l| l.tx_kib).sum();
    assert!(tx > 0);

    // Idle time counted as low-utilisation clock violation; no power capping at 90 %.
    let v = b.violations(0).expect("violations");
    assert_eq!(v.low_utilization_ns, 60_000_000_000);
    assert_eq!(v.power_ns, 0);
    b.set_load(0, 1.0, 40_000).expect("full load");
    b.advance(Duration::from_secs(10));
    assert_eq!(
        b.violations(0).expect("violations").power_ns,
        10_000_000_000
    );
    assert_ne!(
        b.clocks(0).expect("clocks").throttle_reasons & throttle::SW_POWER_CAP,
        0
    );

    // Load goes away: temperature falls back, energy keeps counting slowly.
    b.set_load(0, 0.0, 0).expect("unload");
    b.advance(Duration::from_secs(600));
    assert!(b.temperature(0).expect("temp").gpu_c <= idle_temp + 1);
    assert!(b.total_energy_mj(0).expect("energy") > e1);
}

#[test]
fn processes_drive_load_and_show_up() {
    let b = sim("L4", 1);
    b.start_process(SimProcess {
        pid: 100,
        gpu: 0,
        gpu_instance: None,
        compute_instance: None,
        memory_mib: 5000,
        utilization: 0.5,
    })
    .expect("start");
    b.advance(Duration::from_secs(5));
    let procs = b.processes(0).expect("procs");
    assert_eq!(procs.len(), 1);
    assert_eq!((procs[0].pid, procs[0].used_memory_mib), (100, 5000));
    assert_eq!(b.memory(0).expect("mem").used_mib, 5000);
    assert!(b.utilization(0).expect("util").gpu_pct >= 45);
    assert!(b.stop_process(100));
    assert!(!b.stop_process(100));
    assert_eq!(b.memory(0).expect("mem").used_mib, 0);
    assert!(
        b.temperature(0).expect("temp").memory_c.is_none(),
        "GDDR part"
    );
    assert!(matches!(
        b.profiling(0, None),
        Err(GpuError::NotSupported { .. })
    ));
    assert!(
        b.set_load(0, 1.5, 0).is_err(),
        "utilisation above 1.0 is refused"
    );
}

#[test]
fn mig_processes_load_their_instance() {
    let b = sim("H200", 1);
    layout::apply(b.as_ref(), 0, &MigLayout::enabled([("3g.71gb", 2)])).expect("layout");
    let devs = b.mig_devices(0).expect("devices");
    let d = &devs[1];
    b.start_process(SimProcess {
        pid: 7,
        gpu: 0,
        gpu_instance: Some(d.gpu_instance_id),
        compute_instance: Some(d.compute_instance_id),
        memory_mib: 30_000,
        utilization: 1.0,
    })
    .expect("start on MIG device");
    b.advance(Duration::from_secs(60));
    assert_eq!(b.mig_device_memory(&d.uuid).expect("mem").used_mib, 30_000);
    assert_eq!(b.mig_device_memory(&devs[0].uuid).expect("mem").used_mib, 0);
    assert!(matches!(
        b.utilization(0),
        Err(GpuError::NotSupported { .. })
    ));
    let prof = b.profiling(0, Some(d.gpu_instance_id)).expect("gpm");
    assert!(prof.graphics_active > 0.9);
    let other = b.profiling(0, Some(devs[0].gpu_instance_id)).expect("gpm");
    assert_eq!(other.graphics_active, 0.0);
    assert!(b.power(0).expect("power").usage_mw > 200_000);
    // A process on a MIG GPU must name its instance.
    let err = b
        .start_process(SimProcess {
            pid: 8,
            gpu: 0,
            gpu_instance: None,
            compute_instance: None,
            memory_mib: 1,
            utilization: 0.1,
        })
        .expect_err("needs a GPU instance");
    assert!(err.to_string().contains("MIG enabled"), "{err}");
    // Busy instances cannot be torn down.
    assert!(matches!(
        layout::apply(b.as_ref(), 0, &MigLayout::enabled([("7g.141gb", 1)])),
        Err(GpuError::InUse { .. })
    ));
}

#[test]
fn injected_xid_reaches_every_subscriber() {
    let b = sim("H100-80GB", 8);
    let mut health = b.subscribe(event_kind::HEALTH).expect("subscribe");
    let mut all = b.subscribe(event_kind::ALL).expect("subscribe");
    assert_eq!(health.wait(Duration::from_millis(10)).expect("wait"), None);
    b.inject_xid(5, 31, None, None).expect("xid");
    let ev = health
        .wait(Duration::from_secs(1))
        .expect("wait")
        .expect("event");
    assert_eq!((ev.gpu, ev.kind, ev.xid), (5, event_kind::XID_CRITICAL, 31));
    assert_eq!(ev.gpu_uuid, b.device_info(5).expect("info").uuid);
    assert_eq!(ev.gpu_instance_id, None);
    assert_eq!(
        all.wait(Duration::from_secs(1))
            .expect("wait")
            .map(|e| e.xid),
        Some(31)
    );
    assert_eq!(b.last_xid(5).expect("xid"), 31);
    // MIG-attributed XID keeps its instance ids.
    b.inject_xid(2, 13, Some(3), Some(0)).expect("xid");
    let ev = health
        .wait(Duration::from_secs(1))
        .expect("wait")
        .expect("event");
    assert_eq!(
        (ev.gpu_instance_id, ev.compute_instance_id),
        (Some(3), Some(0))
    );
    assert_eq!(
        all.wait(Duration::from_secs(1))
            .expect("wait")
            .map(|e| e.xid),
        Some(13)
    );
    // MIG changes are events too, but not health events.
    b.set_mig_mode(0, true).expect("mig");
    assert_eq!(health.wait(Duration::from_millis(10)).expect("wait"), None);
    let mig = all
        .wait(Duration::from_secs(1))
        .expect("wait")
        .expect("event");
    assert_eq!(mig.kind, event_kind::MIG_CONFIG_CHANGE);
    // A dropped subscriber does not break delivery to the others.
    drop(all);
    b.inject_xid(1, 79, None, None).expect("xid");
    assert!(health.wait(Duration::from_secs(1)).expect("wait").is_some());
}

/// A stream can wake its reader instead of being waited on: the callback runs once per
/// event of the stream's kinds, after the event can be taken without waiting.
#[test]
fn a_stream_wakes_its_reader_on_each_event() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let b = sim("H100-80GB", 2);
    let mut health = b.subscribe(event_kind::HEALTH).expect("subscribe");
    let woken = Arc::new(AtomicUsize::new(0));
    let w = woken.clone();
    assert!(health.on_event(Arc::new(move || {
        w.fetch_add(1, Ordering::SeqCst);
    })));
    b.set_mig_mode(0, true).expect("mig (not a health event)");
    assert_eq!(woken.load(Ordering::SeqCst), 0);
    b.inject_xid(1, 48, None, None).expect("xid");
    assert_eq!(woken.load(Ordering::SeqCst), 1);
    let ev = health.wait(Duration::ZERO).expect("wait").expect("event");
    assert_eq!(ev.xid, 48);
    assert_eq!(health.wait(Duration::ZERO).expect("wait"), None);
}

#[test]
fn gpu_lost_fails_calls_until_reset() {
    let b = sim("A100-80GB", 8);
    let mut events = b.subscribe(event_kind::HEALTH).expect("subscribe");
    b.inject_fallen_off_bus(4).expect("fault");
    let ev = events
        .wait(Duration::from_secs(1))
        .expect("wait")
        .expect("event");
    assert_eq!((ev.gpu, ev.xid), (4, XID_FALLEN_OFF_BUS));
    for r in [
        b.memory(4).map(|_| ()),
        b.power(4).map(|_| ()),
        b.device_info(4).map(|_| ()),
        b.mig_mode(4).map(|_| ()),
        b.set_mig_mode(4, true).map(|_| ()),
        b.topology(0, 4).map(|_| ()),
    ] {
        assert_eq!(r, Err(GpuError::GpuLost { gpu: 4 }));
    }
    assert!(GpuError::GpuLost { gpu: 4 }.to_string().contains("GPU 4"));
    assert!(b.memory(3).is_ok(), "other GPUs are unaffected");
    assert_eq!(b.device_count().expect("count"), 8);
    b.reset_gpu(4).expect("reset");
    assert!(b.memory(4).is_ok());
    assert_eq!(b.last_xid(4).expect("xid"), 0);
    assert!(!b.is_lost(4).expect("lost"));
}

#[test]
fn double_bit_ecc_counts_and_reports() {
    let b = sim("H200", 2);
    let mut events = b.subscribe(event_kind::ALL).expect("subscribe");
    b.inject_ecc_dbe(1).expect("dbe");
    let first = events
        .wait(Duration::from_secs(1))
        .expect("wait")
        .expect("event");
    assert_eq!(first.kind, event_kind::DOUBLE_BIT_ECC);
    let xid = events
        .wait(Duration::from_secs(1))
        .expect("wait")
        .expect("event");
    assert_eq!(xid.xid, XID_DOUBLE_BIT_ECC);
    let ecc = b.ecc(1).expect("ecc");
    assert_eq!((ecc.dbe_volatile, ecc.dbe_aggregate), (1, 1));
    let rows = b.row_remap(1).expect("remap");
    assert_eq!(rows.uncorrectable_rows, 1);
    assert!(rows.pending);
    b.inject_ecc_sbe(1, 5).expect("sbe");
    assert_eq!(b.ecc(1).expect("ecc").sbe_volatile, 5);
    b.reset_gpu(1).expect("reset");
    let ecc = b.ecc(1).expect("ecc");
    assert_eq!(
        (ecc.dbe_volatile, ecc.dbe_aggregate, ecc.sbe_volatile),
        (0, 1, 0)
    );
    assert!(!b.row_remap(1).expect("remap").pending);
    assert_eq!(b.ecc(0).expect("ecc").dbe_aggregate, 0);
}

#[test]
fn topology_nvswitch_for_hgx_and_pcie_for_l4() {
    let hgx = sim("H100-80GB", 8);
    for a in 0..8 {
        for c in 0..8 {
            let level = hgx.topology(a, c).expect("topology");
            if a == c {
                assert_eq!(level, TopologyLevel::Internal);
            } else {
                assert_eq!(level, TopologyLevel::NvLink { links: 18 });
            }
        }
    }
    let links = hgx.nvlinks(2).expect("links");
    assert_eq!(links.len(), 18);
    assert!(links.iter().all(|l| l.active && l.remote_is_switch));
    assert!(
        links
            .iter()
            .all(|l| l.crc_flit_errors == 0 && l.replay_errors == 0)
    );
    hgx.inject_nvlink_crc_errors(2, 5, 120).expect("crc errors");
    let l5 = &hgx.nvlinks(2).expect("links")[5];
    assert_eq!(
        (l5.crc_flit_errors, l5.crc_data_errors, l5.replay_errors),
        (120, 30, 120)
    );
    assert!(
        hgx.inject_nvlink_crc_errors(2, 18, 1).is_err(),
        "no link 18"
    );

    let a100 = sim("A100-40GB", 4);
    assert_eq!(
        a100.topology(0, 3).expect("topo"),
        TopologyLevel::NvLink { links: 4 }
    );
    let peers: std::collections::BTreeSet<_> = a100
        .nvlinks(0)
        .expect("links")
        .into_iter()
        .map(|l| l.remote_pci_bus_id)
        .collect();
    assert_eq!(peers.len(), 3, "a 4-GPU board links every peer directly");

    let l4 = sim("L4", 8);
    assert!(l4.nvlinks(0).expect("links").is_empty());
    assert_eq!(l4.topology(0, 1).expect("topo"), TopologyLevel::Single);
    assert_eq!(l4.topology(0, 2).expect("topo"), TopologyLevel::Node);
    assert_eq!(l4.topology(0, 7).expect("topo"), TopologyLevel::System);
    assert!(TopologyLevel::NvLink { links: 18 }.distance() < TopologyLevel::Single.distance());
}

#[test]
fn mig_mode_stays_pending_while_the_gpu_is_busy() {
    let b = sim("A100-40GB", 1);
    b.start_process(SimProcess {
        pid: 1,
        gpu: 0,
        gpu_instance: None,
        compute_instance: None,
        memory_mib: 100,
        utilization: 0.2,
    })
    .expect("start");
    let mode = b.set_mig_mode(0, true).expect("set");
    assert!(mode.pending && !mode.current);
    assert!(matches!(
        layout::apply(b.as_ref(), 0, &MigLayout::enabled([("1g.5gb", 7)])),
        Err(GpuError::InUse { .. })
    ));
    b.reset_gpu(0).expect("reset");
    assert!(b.mig_mode(0).expect("mode").current);
    assert!(b.processes(0).expect("procs").is_empty());
    layout::apply(b.as_ref(), 0, &MigLayout::enabled([("1g.5gb", 7)])).expect("apply");
    assert_eq!(b.mig_devices(0).expect("devs").len(), 7);
}

#[test]
fn nvml_with_a_bogus_driver_root_says_what_it_tried() {
    let root = std::env::temp_dir().join("gantry-no-driver-here");
    match NvmlBackend::open(Some(&root)) {
        // A machine with a driver finds the library through the plain soname.
        Ok(b) => assert!(b.library_path().ends_with("libnvidia-ml.so.1")),
        Err(GpuError::Init(msg)) => assert!(msg.contains("libnvidia-ml"), "{msg}"),
        Err(e @ GpuError::LibraryNotFound { .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with("NVML library not found: "), "{msg}");
            assert!(
                msg.contains("gantry-no-driver-here/usr/lib64/libnvidia-ml.so.1"),
                "{msg}"
            );
            assert!(
                msg.contains("/usr/local/nvidia/lib64/libnvidia-ml.so.1"),
                "{msg}"
            );
            assert!(
                msg.ends_with("is the NVIDIA driver installed? set --driver-root"),
                "{msg}"
            );
        }
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}
