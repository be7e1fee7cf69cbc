//! `gantry node toolkit` (the container runtime's `nvidia` runtime and the CDI spec) as an
//! [`Agent`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::Backend;

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use crate::toolkit::agent::{self as toolkit, AgentConfig, AgentReport};
use crate::toolkit::args::ToolkitArgs;
use crate::toolkit::reload::{NoReload, Reloader};
use crate::toolkit::{Outcome, cdi};

pub struct Toolkit;

pub struct Options {
    args: ToolkitArgs,
    config: AgentConfig,
}

impl Agent for Toolkit {
    const NAME: &'static str = "toolkit";
    const ABOUT: &'static str =
        "Configure the container runtime for the `nvidia` runtime and write the CDI spec";
    type Args = ToolkitArgs;
    type Options = Options;

    fn options(args: ToolkitArgs, host: &dyn Host) -> Result<Options, AgentError> {
        let config = config(&args, host)?;
        Ok(Options { args, config })
    }

    fn run(o: Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        Box::pin(async move {
            let Options { args, config: cfg } = o;
            // The simulated host's runtime is no process: nothing to signal after a change.
            let (simulated, reloader) = (host.simulated(), args.clone());
            let report = blocking(move || {
                let mut reload: Box<dyn Reloader> = if simulated {
                    Box::new(NoReload)
                } else {
                    reloader.reloader(&cfg)
                };
                toolkit::run(&cfg, reload.as_mut())
            })
            .await?;
            print(host.as_ref(), &report, !args.no_signal);
            let Some(secs) = args.watch() else {
                return Ok(());
            };
            // --watch: keep the CDI spec in step with the devices (MIG changes) until stopped.
            let mut shutdown = shutdown;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                    _ = &mut shutdown => return Ok::<(), AgentError>(()),
                }
                let mut watch = config(&args, host.as_ref())?;
                watch.cdi_only = true;
                match blocking(move || toolkit::run(&watch, &mut NoReload)).await {
                    Ok(r) => {
                        for (path, outcome) in
                            r.files.iter().filter(|(_, o)| *o != Outcome::Unchanged)
                        {
                            host.print(&format!("{}: {outcome}", path.display()));
                        }
                    }
                    Err(e) => tracing::warn!("regenerating the CDI spec: {e}"),
                }
            }
        })
    }
}

async fn blocking(
    f: impl FnOnce() -> Result<AgentReport, crate::toolkit::ToolkitError> + Send + 'static,
) -> Result<AgentReport, AgentError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(AgentError::failed)?
        .map_err(AgentError::failed)
}

/// The agent's config on `host`. A simulated node has no driver to read the devices from:
/// the CDI spec gets the node's GPUs and MIG devices (a CPU node: none), and the MIG
/// capability nodes are created as `nvidia-ctk system create-device-nodes` would.
fn config(args: &ToolkitArgs, host: &dyn Host) -> Result<AgentConfig, AgentError> {
    let mut cfg = args.config(host.paths()).map_err(AgentError::failed)?;
    let Some(b) = host.simulated_gpus() else {
        return Ok(cfg);
    };
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
    if dev_root != Path::new("/") {
        ensure_mig_cap_nodes(&cfg.host.path(&dev_root), &migs)?;
    }
    cfg.devices = Some((gpus, migs));
    Ok(cfg)
}

fn print(host: &dyn Host, report: &AgentReport, signal: bool) {
    for (path, outcome) in &report.files {
        host.print(&format!("{}: {outcome}", path.display()));
    }
    for planned in &report.planned {
        host.print(&match &planned.content {
            Some(text) => format!("would write {}:\n{text}", planned.path.display()),
            None => format!("would remove {}", planned.path.display()),
        });
    }
    if let Some(runtime) = report.runtime
        && report.reloaded
    {
        host.print(&if signal {
            format!("asked {runtime} to reload its configuration")
        } else {
            format!("{runtime} configuration changed; not signalled (--no-signal)")
        });
    }
    if !report.cdi_devices.is_empty() {
        host.print(&format!("CDI devices: {}", report.cdi_devices.join(", ")));
    }
}

/// The GPUs and MIG devices of `b` as the CDI generator wants them. MIG cap minors follow the
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

/// Create the `/dev/nvidia-caps/nvidia-cap<N>` nodes the MIG devices need, as
/// `nvidia-ctk system create-device-nodes` does on a real host.
pub fn ensure_mig_cap_nodes(host_root: &Path, migs: &[cdi::MigDevice]) -> Result<(), String> {
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
        let mut cfg = AgentConfig::new(tmp.path());
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
