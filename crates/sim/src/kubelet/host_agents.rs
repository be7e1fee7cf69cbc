//! Runners for the operands that touch the host or serve metrics: the driver container, the
//! validator, the exporter and the toolkit. Each parses the container's command line with the
//! agent's own flag type, converts it with the node's paths (the container's hostPath mounts
//! into the node's host dir), and runs the real agent against the node's SimBackend. A runner that serves metrics binds 127.0.0.1 on a port
//! of its own and publishes it as the pod annotation `sim.gantry.dev/metrics-address`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::names;
use gantry_gpu::Backend;
use gantry_node::exporter::{self, ExporterOptions, args::ExporterArgs};
use gantry_node::toolkit::{agent as toolkit, args::ToolkitArgs, cdi, reload::NoReload};
use gantry_node::validator::{self, KubeView, Mode, Seams, ValidatorOptions, args::ValidatorArgs};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::agents::{AgentContext, AgentFuture, AgentRegistry, DRIVER};
use super::driver::DriverRunner;
use super::runners::{gpus, parse, stopped};

/// `--wait` / `--wait-for` poll period on simulated nodes (upstream: 5 s).
pub const SIM_VALIDATOR_RETRY: Duration = Duration::from_secs(1);
/// How often the simulated exporter refreshes pod attribution.
pub const SIM_POD_RESOURCES_INTERVAL: Duration = Duration::from_secs(1);

/// Register the driver, validator, exporter and toolkit runners.
pub fn register(r: &mut AgentRegistry) {
    r.register(DRIVER, Arc::new(DriverRunner::default()));
    r.register("validator", Arc::new(validator_runner));
    r.register("exporter", Arc::new(exporter_runner));
    r.register("toolkit", Arc::new(toolkit_runner));
}

/// Put the address a runner serves on onto its pod.
async fn publish_address(ctx: &AgentContext, addr: SocketAddr) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.pod_namespace);
    let patch = json!({"metadata": {"annotations": {
        names::ANNOTATION_SIM_METRICS_ADDRESS: addr.to_string()}}});
    api.patch(
        &ctx.pod_name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        format!(
            "publishing {} on pod {}/{}: {e}",
            names::ANNOTATION_SIM_METRICS_ADDRESS,
            ctx.pod_namespace,
            ctx.pod_name
        )
    })
}

const LOOPBACK_ANY_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Options for `gantry node validator` on a simulated node: attempts retry faster; the
/// metrics server binds a loopback port of its own (see the module docs).
pub fn validator_options(
    ctx: &AgentContext,
    args: &ValidatorArgs,
) -> Result<ValidatorOptions, String> {
    let mut opts = args.options(&ctx.paths)?;
    opts.retry_interval = opts.retry_interval.min(SIM_VALIDATOR_RETRY);
    opts.metrics_address = LOOPBACK_ANY_PORT;
    Ok(opts)
}

fn validator_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let args: ValidatorArgs = parse(&ctx, "gantry node validator")?;
        let opts = validator_options(&ctx, &args)?;
        let b = ctx.backend.clone();
        let node = ctx.node_name.clone();
        let seams = Seams {
            backend: Arc::new(move || match &b {
                Some(b) => Ok(b.clone() as Arc<dyn Backend>),
                None => Err(format!(
                    "node {node} has no GPUs (libnvidia-ml cannot load)"
                )),
            }),
            cluster: Some(Arc::new(KubeView::new(
                ctx.client.clone(),
                args.namespace.clone(),
            ))),
        };
        let stop = stopped(ctx.shutdown.clone());
        if opts.mode == Mode::Metrics {
            let listener = validator::metrics::bind(opts.metrics_address)
                .await
                .map_err(|e| e.to_string())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            publish_address(&ctx, addr).await?;
            return validator::metrics::serve(listener, opts, seams, stop)
                .await
                .map_err(|e| e.to_string().into());
        }
        validator::run(opts, seams, stop)
            .await
            .map_err(|e| e.to_string().into())
    })
}

/// Options for `gantry node exporter` on a simulated node: the listen address is the
/// runner's own (see the module docs), pod attribution refreshes faster.
pub fn exporter_options(
    ctx: &AgentContext,
    args: &ExporterArgs,
) -> Result<ExporterOptions, String> {
    let mut opts = args.options(&ctx.paths, &ctx.node_name)?;
    opts.address = LOOPBACK_ANY_PORT;
    opts.pod_resources_interval = opts.pod_resources_interval.min(SIM_POD_RESOURCES_INTERVAL);
    Ok(opts)
}

fn exporter_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let argv = exporter::args::normalize_args(ctx.args.iter().cloned());
        let args: ExporterArgs = gantry_node::args::parse("gantry node exporter", &argv, &ctx.env)?;
        for line in args.report() {
            tracing::info!(node = %ctx.node_name, "{line}");
        }
        let opts = exporter_options(&ctx, &args)?;
        let backend = gpus(&ctx, "(NVML cannot load for the exporter)")?;
        let listener = tokio::net::TcpListener::bind(opts.address)
            .await
            .map_err(|e| format!("binding the exporter on {}: {e}", opts.address))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        // The first sample calls the backend: keep it off the async workers.
        let exp = tokio::task::spawn_blocking(move || exporter::Exporter::start(opts, backend))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        publish_address(&ctx, addr).await?;
        exp.serve(listener, stopped(ctx.shutdown.clone()))
            .await
            .map_err(|e| e.to_string().into())
    })
}

/// The node's GPUs and MIG devices as the CDI generator wants them. MIG cap minors follow the
/// driver's fixed layout (what `/proc/driver/nvidia-caps/mig-minors` lists on a real host).
pub fn cdi_devices(b: &dyn Backend) -> Result<(Vec<cdi::Gpu>, Vec<cdi::MigDevice>), String> {
    let count = b.device_count().map_err(|e| e.to_string())?;
    let (mut gpus, mut migs) = (Vec::new(), Vec::new());
    for gpu in 0..count {
        let info = match b.device_info(gpu) {
            Ok(i) => i,
            // A lost GPU has no device node the runtime could use.
            Err(e) => {
                tracing::warn!(gpu, error = %e, "GPU left out of the CDI spec");
                continue;
            }
        };
        let minor = info.minor_number;
        gpus.push(cdi::Gpu {
            index: gpu,
            uuid: Some(info.uuid),
            minor,
            pci_bus_id: Some(info.pci_bus_id),
            drm_card: None,
            drm_render: None,
        });
        for m in b.mig_devices(gpu).unwrap_or_default() {
            let gi_cap = 3 + minor * 135 + m.gpu_instance_id * 9;
            migs.push(cdi::MigDevice {
                parent: gpu,
                index: m.index,
                gi: m.gpu_instance_id,
                ci: m.compute_instance_id,
                uuid: Some(m.uuid),
                gi_cap_minor: gi_cap,
                ci_cap_minor: gi_cap + 1 + m.compute_instance_id,
            });
        }
    }
    Ok((gpus, migs))
}

/// The config of `gantry node toolkit` on a simulated node, with the node's GPUs and MIG
/// devices for the CDI spec (on a real host they are read from the driver).
pub fn toolkit_config(
    ctx: &AgentContext,
    args: &ToolkitArgs,
) -> Result<toolkit::AgentConfig, String> {
    let mut cfg = args.config(&ctx.paths).map_err(|e| e.to_string())?;
    if let Some(b) = &ctx.backend {
        if cfg.driver_version.is_none() {
            cfg.driver_version = b.driver_version().ok();
        }
        let (gpus, migs) = cdi_devices(b.as_ref())?;
        ensure_mig_cap_nodes(cfg.host.root(), &migs)?;
        // With a containerized driver the device nodes live under its root as well.
        let dev_root = cfg
            .dev_root
            .clone()
            .unwrap_or_else(|| cfg.driver_root.clone());
        if dev_root != std::path::Path::new("/") {
            ensure_mig_cap_nodes(&cfg.host.path(&dev_root), &migs)?;
        }
        cfg.devices = Some((gpus, migs));
    }
    Ok(cfg)
}

/// Create the `/dev/nvidia-caps/nvidia-cap<N>` nodes the MIG devices need, as
/// `nvidia-ctk system create-device-nodes` does on a real host.
pub fn ensure_mig_cap_nodes(
    host_root: &std::path::Path,
    migs: &[cdi::MigDevice],
) -> Result<(), String> {
    if migs.is_empty() {
        return Ok(());
    }
    let dir = host_root.join("dev/nvidia-caps");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let minors = migs.iter().flat_map(|m| [m.gi_cap_minor, m.ci_cap_minor]);
    for minor in [1, 2].into_iter().chain(minors) {
        let path = dir.join(format!("nvidia-cap{minor}"));
        if !path.exists() {
            std::fs::write(&path, b"").map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

fn toolkit_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let args: ToolkitArgs = parse(&ctx, "gantry node toolkit")?;
        let cfg = toolkit_config(&ctx, &args)?;
        // The simulated host's runtime is no process: nothing to signal after a change.
        let once = cfg.clone();
        let report = tokio::task::spawn_blocking(move || toolkit::run(&once, &mut NoReload))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        tracing::info!(node = %ctx.node_name, files = ?report.files, "toolkit configured the runtime");
        let Some(secs) = args.watch() else {
            return Ok(());
        };
        // --watch: keep the CDI spec in step with the devices (MIG changes) until stopped.
        let mut stop = ctx.shutdown.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                _ = stopped(stop.clone()) => return Ok(()),
            }
            let mut watch_cfg = toolkit_config(&ctx, &args)?;
            watch_cfg.cdi_only = true;
            match tokio::task::spawn_blocking(move || toolkit::run(&watch_cfg, &mut NoReload)).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(node = %ctx.node_name, "regenerating the CDI spec: {e}")
                }
                Err(e) => return Err(e.to_string().into()),
            }
            if *stop.borrow_and_update() {
                return Ok(());
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolkit_cdi_spec_from_sim_gpus() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = gantry_gpu::SimBackend::new(
            gantry_gpu::SimConfig::for_model("H100-80GB", 2, 1).unwrap(),
        );
        let dev = tmp.path().join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        for n in ["nvidiactl", "nvidia0", "nvidia1"] {
            std::fs::write(dev.join(n), "").unwrap();
        }
        let mut cfg = toolkit::AgentConfig::new(tmp.path());
        cfg.cdi_only = true;
        cfg.driver_version = backend.driver_version().ok();
        cfg.devices = Some(cdi_devices(&backend).unwrap());
        let report = toolkit::run(&cfg, &mut NoReload).unwrap();
        assert!(
            report.cdi_devices.contains(&"all".to_string()),
            "{report:?}"
        );
    }

    #[test]
    fn mig_devices_get_cap_minors_and_nodes() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = gantry_gpu::SimBackend::new(
            gantry_gpu::SimConfig::for_model("A100-80GB", 2, 1).unwrap(),
        );
        backend.set_mig_mode(1, true).unwrap();
        let gi = backend.create_gpu_instance(1, "1g.10gb", None).unwrap();
        backend.create_compute_instance(1, gi.id, 1).unwrap();
        let (gpus, migs) = cdi_devices(&backend).unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(migs.len(), 1);
        let m = &migs[0];
        assert_eq!(m.parent, 1);
        // The driver's fixed layout: 3 + minor * 135 + gi * 9, the CI right after its GI.
        assert_eq!(m.gi_cap_minor, 3 + 135 + m.gi * 9);
        assert_eq!(m.ci_cap_minor, m.gi_cap_minor + 1 + m.ci);
        ensure_mig_cap_nodes(tmp.path(), &migs).unwrap();
        let caps = tmp.path().join("dev/nvidia-caps");
        for minor in [1, 2, m.gi_cap_minor, m.ci_cap_minor] {
            assert!(caps.join(format!("nvidia-cap{minor}")).exists(), "{minor}");
        }
    }
}
