//! `gantry node validator`: proves a node's GPU stack works layer by layer and records each
//! layer in a ready file under `/run/nvidia/validations` that the next layer's operands wait
//! on (reference gpu-operator §3.3). Modes:
//! - `--component driver|toolkit|cuda|plugin`: check once (or until it passes with `--wait`),
//!   write `<component>-ready`, exit;
//! - `--wait-for COMPONENT`: block until `<component>-ready` exists;
//! - `--component metrics`: serve the ready states as Prometheus gauges;
//! - neither: idle until stopped, then remove the ready files (upstream's preStop).
//!
//! Seams: the GPU backend ([`BackendSource`]), the host root (files), and [`ClusterView`].

pub mod args;
pub mod checks;
pub mod cluster;
mod component;
pub mod metrics;
mod options;

use std::future::Future;
use std::path::{Path, PathBuf};

use gantry_api::names::{self, ready_file};

pub use checks::DriverInfo;
pub use cluster::{ClusterView, KubeView};
pub use component::{Component, ValidatorError};
pub use options::{
    BackendSource, DEFAULT_METRICS_ADDRESS, DEFAULT_RETRY_INTERVAL, Mode, Seams, ValidatorOptions,
};

/// Run the validator in `opts.mode` until done or `shutdown` resolves.
pub fn run(
    opts: ValidatorOptions,
    seams: Seams,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> futures::future::BoxFuture<'static, Result<(), ValidatorError>> {
    run_boxed(opts, seams, Box::pin(shutdown))
}

// Not generic and never inlined, so the body's state machine is compiled here once, not in
// every crate that calls [`run`] (docs/benchmarks.md, "Build time").
#[inline(never)]
fn run_boxed(
    opts: ValidatorOptions,
    seams: Seams,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> futures::future::BoxFuture<'static, Result<(), ValidatorError>> {
    Box::pin(run_inner(opts, seams, shutdown))
}

async fn run_inner(
    opts: ValidatorOptions,
    seams: Seams,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> Result<(), ValidatorError> {
    match opts.mode.clone() {
        Mode::Check { component, wait } => validate(&opts, &seams, component, wait, shutdown).await,
        Mode::WaitFor(component) => wait_for(&opts, component, shutdown).await,
        Mode::Idle => {
            shutdown.await;
            remove_ready_files(&opts.output_dir)
        }
        Mode::Metrics => {
            let listener = metrics::bind(opts.metrics_address).await?;
            metrics::serve(listener, opts, seams, shutdown).await
        }
    }
}

/// Check `component` (retrying under `wait`) and write its ready file.
pub async fn validate(
    opts: &ValidatorOptions,
    seams: &Seams,
    component: Component,
    wait: bool,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ValidatorError> {
    tokio::pin!(shutdown);
    loop {
        match check(opts, seams, component).await {
            Ok(contents) => {
                let path = opts.output_dir.join(component.ready_file());
                write_atomic(&path, contents.as_bytes())?;
                tracing::info!(%component, file = %path.display(), "validation passed");
                return Ok(());
            }
            Err(e) if wait && e.is_retryable() => {
                tracing::info!(%component, "not ready yet, retrying: {e}");
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            _ = tokio::time::sleep(opts.retry_interval) => {}
            _ = &mut shutdown => {
                return Err(ValidatorError::Interrupted(format!("{component} validation")));
            }
        }
    }
}

/// One attempt at `component`; `Ok` holds the ready file's contents.
pub async fn check(
    opts: &ValidatorOptions,
    seams: &Seams,
    component: Component,
) -> Result<String, ValidatorError> {
    let not_ready = |reason: String| ValidatorError::NotReady { component, reason };
    match component {
        Component::Driver => {
            let managed = match &seams.cluster {
                Some(c) => c.driver_managed().await?,
                None => false,
            };
            if managed {
                let ctr = opts.output_dir.join(ready_file::DRIVER_CTR);
                if !ctr.exists() {
                    return Err(not_ready(format!(
                        "the driver is operator-managed and the driver container is not ready yet ({} does not exist)",
                        ctr.display()
                    )));
                }
            }
            let backend = (seams.backend)().map_err(|e| not_ready(format!("NVML: {e}")))?;
            let version = backend
                .driver_version()
                .map_err(|e| not_ready(format!("NVML reports no driver version: {e}")))?;
            let driver_root = opts.driver_root.clone().unwrap_or_else(|| {
                PathBuf::from(if managed { names::DRIVER_ROOT_DIR } else { "/" })
            });
            let host = crate::toolkit::hostfs::HostRoot::new(&opts.host_root);
            let dev_root = if host.path(&driver_root.join("dev")).is_dir() {
                driver_root.clone()
            } else {
                PathBuf::from("/")
            };
            tracing::info!(%version, managed, "driver loaded");
            Ok(checks::driver_ready_contents(&DriverInfo {
                is_host_driver: !managed,
                driver_root,
                dev_root,
            }))
        }
        Component::Toolkit => toolkit_ready(opts)
            .map(|_| String::new())
            .map_err(not_ready),
        Component::Cuda => {
            let backend = (seams.backend)().map_err(|e| not_ready(format!("NVML: {e}")))?;
            let count = backend
                .device_count()
                .map_err(|e| not_ready(format!("counting GPUs: {e}")))?;
            if count == 0 {
                return Err(not_ready("NVML sees no GPU".into()));
            }
            // The workload: every GPU must answer for its identity and memory.
            for gpu in 0..count {
                backend
                    .device_info(gpu)
                    .and_then(|_| backend.memory(gpu))
                    .map_err(|e| not_ready(format!("GPU {gpu}: {e}")))?;
            }
            Ok(String::new())
        }
        Component::Plugin => {
            let node = opts
                .node_name
                .as_deref()
                .ok_or(ValidatorError::NoNodeName {
                    what: "the plugin validation",
                })?;
            let cluster = seams.cluster.as_ref().ok_or_else(|| {
                not_ready("no Kubernetes API access to read the Node's allocatable".into())
            })?;
            let alloc = cluster.allocatable(node).await?;
            if checks::plugin_devices(&alloc) == 0 {
                return Err(not_ready(format!(
                    "Node {node} advertises no {} or {}* in its allocatable yet",
                    names::RESOURCE_GPU,
                    names::RESOURCE_MIG_PREFIX
                )));
            }
            Ok(String::new())
        }
    }
}

/// The runtime config registers the NVIDIA runtime, or a valid CDI spec for `nvidia.com/gpu`
/// exists. `Err` says what was looked at.
fn toolkit_ready(opts: &ValidatorOptions) -> Result<(), String> {
    let host = crate::toolkit::hostfs::HostRoot::new(&opts.host_root);
    let read = |p: &Path| std::fs::read_to_string(host.path(p)).ok();
    let dir_files = |d: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(host.path(Path::new(d)))
            .map(|it| {
                it.filter_map(|e| e.ok())
                    .map(|e| Path::new(d).join(e.file_name()))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let name = &opts.runtime_name;
    let mut problems = Vec::new();
    let toml_files = ["/etc/containerd/config.toml", "/etc/crio/crio.conf"]
        .into_iter()
        .map(PathBuf::from)
        .chain(dir_files("/etc/containerd/conf.d"))
        .chain(dir_files("/etc/crio/crio.conf.d"));
    for path in toml_files {
        let Some(text) = read(&path) else { continue };
        match checks::toml_has_runtime(&text, name) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    let daemon = Path::new("/etc/docker/daemon.json");
    if let Some(text) = read(daemon) {
        match checks::daemon_json_has_runtime(&text, name) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => problems.push(format!("{}: {e}", daemon.display())),
        }
    }
    let cdi_dirs = ["/etc/cdi", crate::toolkit::cdi::DEFAULT_CDI_DIR];
    for path in cdi_dirs.into_iter().flat_map(dir_files) {
        let Some(text) = read(&path) else { continue };
        match crate::toolkit::cdi::from_yaml(&text, &path) {
            Ok(spec) if spec.kind == names::RESOURCE_GPU => {
                match crate::toolkit::cdi::validate(&spec) {
                    Ok(()) => return Ok(()),
                    Err(errs) => problems.push(format!(
                        "{}: invalid CDI spec: {}",
                        path.display(),
                        errs.join("; ")
                    )),
                }
            }
            Ok(_) => {}
            Err(e) => problems.push(e.to_string()),
        }
    }
    let mut msg = format!(
        "no container runtime config under {} registers the {name:?} runtime and no CDI spec for {} exists in /etc/cdi or {}",
        opts.host_root.display(),
        names::RESOURCE_GPU,
        crate::toolkit::cdi::DEFAULT_CDI_DIR
    );
    if !problems.is_empty() {
        msg.push_str(&format!(" (problems: {})", problems.join("; ")));
    }
    Err(msg)
}

/// Block until `<output-dir>/<component>-ready` exists.
pub async fn wait_for(
    opts: &ValidatorOptions,
    component: Component,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ValidatorError> {
    tokio::pin!(shutdown);
    let path = opts.output_dir.join(component.ready_file());
    loop {
        if path.exists() {
            tracing::info!(file = %path.display(), "ready");
            return Ok(());
        }
        tracing::debug!(file = %path.display(), "waiting");
        tokio::select! {
            _ = tokio::time::sleep(opts.retry_interval) => {}
            _ = &mut shutdown => return Err(ValidatorError::Interrupted(path.display().to_string())),
        }
    }
}

/// Remove the ready files the validator writes (not the driver container's own).
pub fn remove_ready_files(dir: &Path) -> Result<(), ValidatorError> {
    for c in Component::ALL {
        let path = dir.join(c.ready_file());
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(file = %path.display(), "removed"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ValidatorError::Io {
                    path,
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Write via a temp file + rename so a reader never sees half a file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ValidatorError> {
    let io = |p: &Path, e: std::io::Error| ValidatorError::Io {
        path: p.to_path_buf(),
        reason: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

#[cfg(test)]
mod tests;
