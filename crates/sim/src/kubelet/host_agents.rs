//! Runners for the operands that touch the host or serve metrics: the driver container, the
//! validator, the exporter and the toolkit. Each maps the operand pod's args/env onto the
//! agent's options with every host path resolved under the node's host dir, and runs the real
//! agent against the node's SimBackend. A runner that serves metrics binds 127.0.0.1 on a port
//! of its own and publishes it as the pod annotation `sim.gantry.dev/metrics-address`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::names;
use gantry_gpu::Backend;
use gantry_node::exporter::{self, ExporterOptions, RenderOptions, ResourceFilter};
use gantry_node::toolkit::{Runtime, agent as toolkit, cdi, reload::NoReload};
use gantry_node::validator::{self, KubeView, Mode, Seams, ValidatorOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::agents::{AgentContext, AgentFuture, AgentRegistry, DRIVER};
use super::driver::{DriverRunner, host_path};
use super::runners::{setting, stopped};

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

/// `--name value`, `--name=value` or `-n value` for any of `names`, else env `var`.
fn arg(
    args: &[String],
    env: &BTreeMap<String, String>,
    names: &[&str],
    var: &str,
) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        for n in names {
            let dash = if n.len() == 1 { "-" } else { "--" };
            if let Some(v) = a.strip_prefix(&format!("{dash}{n}=")) {
                return Some(v.to_string());
            }
            if *a == format!("{dash}{n}") {
                return it.next().cloned();
            }
        }
    }
    (!var.is_empty()).then(|| env.get(var).cloned()).flatten()
}

/// A boolean flag (`--x`, `--x=true|false`) or env `var` (`true`/`1`).
fn flag(args: &[String], env: &BTreeMap<String, String>, names: &[&str], var: &str) -> bool {
    for a in args {
        for n in names {
            let dash = if n.len() == 1 { "-" } else { "--" };
            if *a == format!("{dash}{n}") {
                return true;
            }
            if let Some(v) = a.strip_prefix(&format!("{dash}{n}=")) {
                return truthy(v);
            }
        }
    }
    env.get(var).is_some_and(|v| truthy(v))
}

fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes")
}

fn backend_of(ctx: &AgentContext, agent: &str) -> Result<Arc<dyn Backend>, String> {
    match &ctx.backend {
        Some(b) => Ok(b.clone()),
        None => Err(format!(
            "node {} has no GPUs: NVML cannot load for the {agent}",
            ctx.node_name
        )),
    }
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

/// Options for `gantry node validator` on a simulated node.
pub fn validator_options(ctx: &AgentContext) -> Result<ValidatorOptions, String> {
    let (a, e) = (&ctx.args, &ctx.env);
    let component = arg(a, e, &["component", "c"], "COMPONENT");
    let wait = flag(a, e, &["wait", "with-wait"], "WITH_WAIT");
    let wait_for = arg(a, e, &["wait-for"], "");
    let mode = Mode::from_flags(component.as_deref(), wait, wait_for.as_deref())
        .map_err(|e| e.to_string())?;
    let mut opts = ValidatorOptions::new(mode);
    let out = arg(a, e, &["output-dir"], "OUTPUT_DIR")
        .unwrap_or_else(|| names::VALIDATIONS_DIR.to_string());
    opts.output_dir = host_path(&ctx.host_root, &out);
    opts.host_root = ctx.host_root.clone();
    opts.driver_root = arg(a, e, &["driver-root"], "NVIDIA_DRIVER_ROOT").map(PathBuf::from);
    opts.node_name = Some(ctx.node_name.clone());
    opts.retry_interval = SIM_VALIDATOR_RETRY;
    opts.metrics_address = LOOPBACK_ANY_PORT;
    Ok(opts)
}

fn validator_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let opts = validator_options(&ctx)?;
        let b = ctx.backend.clone();
        let node = ctx.node_name.clone();
        let seams = Seams {
            backend: Arc::new(move || match &b {
                Some(b) => Ok(b.clone() as Arc<dyn Backend>),
                None => Err(format!(
                    "node {node} has no GPUs (libnvidia-ml cannot load)"
                )),
            }),
            cluster: Some(Arc::new(KubeView {
                client: ctx.client.clone(),
                namespace: ctx.env.get("OPERATOR_NAMESPACE").cloned(),
            })),
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
                .map_err(|e| e.to_string());
        }
        validator::run(opts, seams, stop)
            .await
            .map_err(|e| e.to_string())
    })
}

/// Options for `gantry node exporter` on a simulated node (the listen address is the
/// runner's own, see the module docs).
pub fn exporter_options(ctx: &AgentContext) -> Result<ExporterOptions, String> {
    let (a, e) = (&ctx.args, &ctx.env);
    let mut opts = ExporterOptions {
        address: LOOPBACK_ANY_PORT,
        pod_resources_socket: Some(ctx.pod_resources_socket.clone()),
        pod_resources_interval: SIM_POD_RESOURCES_INTERVAL,
        ..ExporterOptions::default()
    };
    if let Some(ms) = arg(a, e, &["collect-interval", "c"], "DCGM_EXPORTER_INTERVAL") {
        let ms: u64 = ms.trim().parse().map_err(|_| {
            format!(
                "DCGM_EXPORTER_INTERVAL / --collect-interval {ms:?} is not a number of milliseconds"
            )
        })?;
        opts.collect_interval = Duration::from_millis(ms.max(100));
    }
    if let Some(csv) = arg(a, e, &["collectors", "f"], "DCGM_EXPORTER_COLLECTORS") {
        let path = host_path(&ctx.host_root, &csv);
        if path.exists() {
            opts.metrics = exporter::load_metric_set(Some(&path)).map_err(|e| e.to_string())?;
        } else {
            // The exporter image ships its default CSV at this path; the built-in set is that.
            tracing::info!(node = %ctx.node_name, file = %csv, "metrics CSV not on the simulated host; using the built-in default set");
        }
    }
    if flag(a, e, &["no-kubernetes"], "") {
        opts.pod_resources_socket = None;
    }
    opts.resource_filter = ResourceFilter {
        extra: arg(a, e, &["nvidia-resource-names"], "NVIDIA_RESOURCE_NAMES")
            .map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
    };
    opts.render = RenderOptions {
        hostname: (!flag(a, e, &["no-hostname", "n"], "")).then(|| ctx.node_name.clone()),
        virtual_gpus: flag(
            a,
            e,
            &["kubernetes-virtual-gpus"],
            "KUBERNETES_VIRTUAL_GPUS",
        ),
        old_namespace: flag(a, e, &["use-old-namespace", "o"], ""),
        replace_blanks: flag(a, e, &["replace-blanks-in-model-name"], ""),
    };
    Ok(opts)
}

fn exporter_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let backend = backend_of(&ctx, "exporter")?;
        let opts = exporter_options(&ctx)?;
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
            .map_err(|e| e.to_string())
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

/// Options for `gantry node toolkit` on a simulated node: the node's dir is the host root.
pub fn toolkit_config(ctx: &AgentContext) -> Result<toolkit::AgentConfig, String> {
    let (a, e) = (&ctx.args, &ctx.env);
    let mut cfg = toolkit::AgentConfig::new(&ctx.host_root);
    cfg.runtime = match arg(a, e, &["runtime"], "RUNTIME").as_deref() {
        None | Some("auto") => None,
        Some("containerd") => Some(Runtime::Containerd),
        Some("docker") => Some(Runtime::Docker),
        Some("crio") | Some("cri-o") => Some(Runtime::Crio),
        Some(other) => {
            return Err(format!(
                "--runtime {other:?} is not one of auto, containerd, docker, crio"
            ));
        }
    };
    cfg.config = arg(a, e, &["config"], "RUNTIME_CONFIG").map(PathBuf::from);
    cfg.drop_in = flag(a, e, &["drop-in"], "");
    cfg.drop_in_path = arg(a, e, &["drop-in-path"], "").map(PathBuf::from);
    cfg.set_as_default = flag(a, e, &["set-as-default"], "");
    cfg.enable_cdi = flag(a, e, &["enable-cdi", "cdi-enabled"], "CDI_ENABLED");
    cfg.uninstall = flag(a, e, &["uninstall"], "");
    cfg.cdi_only = flag(a, e, &["cdi-only"], "");
    cfg.no_cdi = flag(a, e, &["no-cdi"], "");
    if let Some(name) = arg(a, e, &["runtime-name"], "") {
        cfg.runtime_name = name;
    }
    if let Some(dir) = arg(a, e, &["toolkit-dir"], "") {
        cfg.toolkit_dir = PathBuf::from(&dir);
        cfg.cdi.hook_path = PathBuf::from(dir)
            .join("nvidia-cdi-hook")
            .to_string_lossy()
            .into_owned();
    }
    if let Some(root) = arg(a, e, &["driver-root"], "NVIDIA_DRIVER_ROOT") {
        cfg.driver_root = PathBuf::from(root);
    }
    if let Some(dir) = arg(a, e, &["cdi-dir"], "CDI_OUTPUT_DIR") {
        cfg.cdi_dir = PathBuf::from(dir);
    }
    if let Some(kind) = arg(a, e, &["cdi-kind"], "CDI_KIND") {
        cfg.cdi.kind = kind;
    }
    if let Some(b) = &ctx.backend {
        cfg.driver_version = b.driver_version().ok();
        let (gpus, migs) = cdi_devices(b.as_ref())?;
        ensure_mig_cap_nodes(&ctx.host_root, &migs)?;
        // With a containerized driver the device nodes live under its root as well.
        let dev_root = cfg
            .dev_root
            .clone()
            .unwrap_or_else(|| cfg.driver_root.clone());
        if dev_root != std::path::Path::new("/") {
            ensure_mig_cap_nodes(
                &ctx.host_root
                    .join(dev_root.strip_prefix("/").unwrap_or(&dev_root)),
                &migs,
            )?;
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
        let cfg = toolkit_config(&ctx)?;
        let watch = setting(&ctx.args, &ctx.env, "watch", "")
            .map(|s| {
                s.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("--watch {s:?} is not a number of seconds"))
            })
            .transpose()?;
        let once = cfg.clone();
        let report = tokio::task::spawn_blocking(move || toolkit::run(&once, &mut NoReload))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        tracing::info!(node = %ctx.node_name, files = ?report.files, "toolkit configured the runtime");
        let Some(secs) = watch.filter(|_| !cfg.uninstall && !cfg.no_cdi) else {
            return Ok(());
        };
        // --watch: keep the CDI spec in step with the devices (MIG changes) until stopped.
        let mut stop = ctx.shutdown.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(secs.max(1))) => {}
                _ = stopped(stop.clone()) => return Ok(()),
            }
            let mut watch_cfg = toolkit_config(&ctx)?;
            watch_cfg.cdi_only = true;
            match tokio::task::spawn_blocking(move || toolkit::run(&watch_cfg, &mut NoReload)).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(node = %ctx.node_name, "regenerating the CDI spec: {e}")
                }
                Err(e) => return Err(e.to_string()),
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

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn args_flags_and_env() {
        let env: BTreeMap<String, String> = [
            ("COMPONENT".to_string(), "driver".to_string()),
            ("WITH_WAIT".to_string(), "true".to_string()),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            arg(
                &strings(&["-c", "cuda"]),
                &env,
                &["component", "c"],
                "COMPONENT"
            )
            .as_deref(),
            Some("cuda")
        );
        assert_eq!(
            arg(
                &strings(&["--component=plugin"]),
                &env,
                &["component", "c"],
                "COMPONENT"
            )
            .as_deref(),
            Some("plugin")
        );
        assert_eq!(
            arg(&[], &env, &["component", "c"], "COMPONENT").as_deref(),
            Some("driver")
        );
        assert_eq!(arg(&[], &env, &["wait-for"], ""), None);
        assert!(flag(&[], &env, &["wait"], "WITH_WAIT"));
        assert!(flag(
            &strings(&["--wait"]),
            &BTreeMap::new(),
            &["wait"],
            "WITH_WAIT"
        ));
        assert!(!flag(
            &strings(&["--wait=false"]),
            &BTreeMap::new(),
            &["wait"],
            "WITH_WAIT"
        ));
        assert!(!flag(&[], &BTreeMap::new(), &["wait"], "WITH_WAIT"));
    }

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
