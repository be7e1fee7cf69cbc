//! Read-only probe of the NVML backend: prints everything the `Backend` trait reads, as JSON,
//! one object per GPU. `cargo run -p gantry-gpu --example nvml_probe -- [--driver-root DIR]`.
//! Never changes GPU state.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gantry_gpu::{Backend, NvmlBackend, event_kind};
use serde_json::{Value, json};

fn show<T: serde::Serialize>(r: gantry_gpu::Result<T>) -> Value {
    match r {
        Ok(v) => serde_json::to_value(v).unwrap_or(Value::Null),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut root: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        if a == "--driver-root" {
            root = args.next().map(PathBuf::from);
        }
    }
    let b = match NvmlBackend::open(root.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let count = b.device_count().unwrap_or(0);
    let mut gpus = Vec::new();
    for g in 0..count {
        let t = Instant::now();
        let metrics = json!({
            "memory": show(b.memory(g)),
            "utilization": show(b.utilization(g)),
            "temperature": show(b.temperature(g)),
            "power": show(b.power(g)),
            "energy_mj": show(b.total_energy_mj(g)),
            "clocks": show(b.clocks(g)),
            "violations": show(b.violations(g)),
            "vgpu_license_status": show(b.vgpu_license_status(g)),
            "ecc": show(b.ecc(g)),
            "row_remap": show(b.row_remap(g)),
            "pcie": show(b.pcie(g)),
            "processes": show(b.processes(g)),
        });
        let metrics_us = t.elapsed().as_micros();
        // Mean cost of each read, warm, over 200 calls.
        let time = |f: &dyn Fn() -> bool| {
            let t = Instant::now();
            let ok = (0..200).filter(|_| f()).count();
            json!({ "mean_us": t.elapsed().as_secs_f64() * 1e6 / 200.0, "ok": ok })
        };
        let timings = json!({
            "memory": time(&|| b.memory(g).is_ok()),
            "utilization": time(&|| b.utilization(g).is_ok()),
            "temperature": time(&|| b.temperature(g).is_ok()),
            "power": time(&|| b.power(g).is_ok()),
            "energy": time(&|| b.total_energy_mj(g).is_ok()),
            "clocks": time(&|| b.clocks(g).is_ok()),
            "violations": time(&|| b.violations(g).is_ok()),
            "ecc": time(&|| b.ecc(g).is_ok()),
            "row_remap": time(&|| b.row_remap(g).is_ok()),
            "pcie": time(&|| b.pcie(g).is_ok()),
            "nvlinks": time(&|| b.nvlinks(g).is_ok()),
            "processes": time(&|| b.processes(g).is_ok()),
            "device_info": time(&|| b.device_info(g).is_ok()),
            "mig_mode": time(&|| b.mig_mode(g).is_ok()),
        });
        gpus.push(json!({
            "info": show(b.device_info(g)),
            "metrics": metrics,
            "metrics_read_us": metrics_us,
            "timings": timings,
            "nvlinks": show(b.nvlinks(g)),
            "profiling": show(b.profiling(g, None)),
            "mig_mode": show(b.mig_mode(g)),
            "mig_profiles": show(b.mig_profiles(g)),
            "gpu_instances": show(b.gpu_instances(g)),
            "mig_devices": show(b.mig_devices(g)),
            "topology_to_0": show(b.topology(g, 0)),
        }));
    }
    let events = match b.subscribe(event_kind::HEALTH) {
        Ok(mut s) => show(s.wait(Duration::from_millis(500))),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let out = json!({
        "library": b.library_path().display().to_string(),
        "driver_version": show(b.driver_version()),
        "cuda_driver_version": show(b.cuda_driver_version()),
        "nvml_version": show(b.nvml_version()),
        "device_count": count,
        "gpus": gpus,
        "event_wait_500ms": events,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}
