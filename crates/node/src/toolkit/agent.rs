//! One run of the toolkit agent: configure the runtime, then write the CDI spec (or undo both).

use super::cdi;
use super::error::ToolkitError;
use super::hostfs::HostRoot;
use super::install::{self, Outcome, Runtime, RuntimeConfig};
use super::reload::Reloader;
use std::path::PathBuf;

/// Everything `gantry node toolkit` was asked to do. Paths other than `host` are host paths.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub host: HostRoot,
    /// `None`: detect the runtime from sockets and config files.
    pub runtime: Option<Runtime>,
    /// The runtime's main config; `None` uses its default path.
    pub config: Option<PathBuf>,
    /// containerd: use a drop-in (at this path, or upstream's default when `drop_in` is set but
    /// `drop_in_path` is not). CRI-O always uses one.
    pub drop_in: bool,
    pub drop_in_path: Option<PathBuf>,
    pub toolkit_dir: PathBuf,
    pub runtime_name: String,
    pub set_as_default: bool,
    pub enable_cdi: bool,
    pub uninstall: bool,
    /// Only (re)write the CDI spec; leave the runtime config alone.
    pub cdi_only: bool,
    /// Skip the CDI spec.
    pub no_cdi: bool,
    pub driver_root: PathBuf,
    /// Defaults to the driver root.
    pub dev_root: Option<PathBuf>,
    pub driver_version: Option<String>,
    pub cdi_dir: PathBuf,
    pub cdi: cdi::Options,
    /// The GPUs and MIG devices from a GPU backend; `None` takes them from `/dev/nvidia<N>`.
    pub devices: Option<(Vec<cdi::Gpu>, Vec<cdi::MigDevice>)>,
    /// Compute everything, write nothing, signal nothing.
    pub dry_run: bool,
}

impl AgentConfig {
    /// Defaults matching the operator-style install, with the host at `host_root`.
    pub fn new(host_root: impl Into<PathBuf>) -> Self {
        let toolkit_dir = PathBuf::from(super::DEFAULT_TOOLKIT_DIR);
        Self {
            host: HostRoot::new(host_root),
            runtime: None,
            config: None,
            drop_in: false,
            drop_in_path: None,
            cdi: cdi::Options {
                hook_path: toolkit_dir
                    .join("nvidia-cdi-hook")
                    .to_string_lossy()
                    .into_owned(),
                ..Default::default()
            },
            toolkit_dir,
            runtime_name: super::DEFAULT_RUNTIME_NAME.to_string(),
            set_as_default: false,
            enable_cdi: false,
            uninstall: false,
            cdi_only: false,
            no_cdi: false,
            driver_root: PathBuf::from("/"),
            dev_root: None,
            driver_version: None,
            cdi_dir: PathBuf::from(cdi::DEFAULT_CDI_DIR),
            devices: None,
            dry_run: false,
        }
    }

    /// The runtime configuration this agent config asks for.
    pub fn runtime_config(&self, runtime: Runtime) -> RuntimeConfig {
        let mut cfg = RuntimeConfig::new(runtime, &self.toolkit_dir);
        if let Some(c) = &self.config {
            cfg.config = c.clone();
        }
        cfg.runtime_name = self.runtime_name.clone();
        cfg.set_as_default = self.set_as_default;
        cfg.enable_cdi = self.enable_cdi;
        match runtime {
            Runtime::Containerd if self.drop_in || self.drop_in_path.is_some() => {
                cfg.drop_in = self
                    .drop_in_path
                    .clone()
                    .or_else(|| runtime.default_drop_in().map(PathBuf::from));
            }
            Runtime::Crio if self.drop_in_path.is_some() => cfg.drop_in = self.drop_in_path.clone(),
            _ => {}
        }
        cfg
    }
}

/// A file a dry run would write (`None`: would remove).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFile {
    pub path: PathBuf,
    pub content: Option<String>,
}

/// What a run did (or, for a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentReport {
    pub runtime: Option<Runtime>,
    pub files: Vec<(PathBuf, Outcome)>,
    pub reloaded: bool,
    pub planned: Vec<PlannedFile>,
    /// Device names in the CDI spec.
    pub cdi_devices: Vec<String>,
}

/// Runs the agent once.
pub fn run(cfg: &AgentConfig, reloader: &mut dyn Reloader) -> Result<AgentReport, ToolkitError> {
    let mut report = AgentReport::default();
    if !cfg.cdi_only {
        let runtime = match cfg.runtime {
            Some(r) => r,
            None => Runtime::detect(&cfg.host)?,
        };
        report.runtime = Some(runtime);
        let rc = cfg.runtime_config(runtime);
        let plan = if cfg.uninstall {
            install::plan_uninstall(&cfg.host, &rc)?
        } else {
            install::plan_install(&cfg.host, &rc)?
        };
        if cfg.dry_run {
            for change in plan.changes.iter().filter(|c| c.changes()) {
                report.planned.push(PlannedFile {
                    path: change.path.clone(),
                    content: change
                        .after
                        .as_ref()
                        .map(|b| String::from_utf8_lossy(b).into_owned()),
                });
            }
            report.files.extend(
                plan.changes
                    .iter()
                    .filter(|c| !c.changes())
                    .map(|c| (c.path.clone(), Outcome::Unchanged)),
            );
        } else {
            if plan.changes.iter().any(|c| c.changes()) {
                reloader.ready(runtime)?;
            }
            let applied = install::apply(&cfg.host, &plan)?;
            if applied.changed() {
                reloader.reload(runtime)?;
                report.reloaded = true;
            }
            report.files.extend(applied.files);
        }
    }
    if cfg.no_cdi {
        return Ok(report);
    }
    let spec_path = cfg.cdi_dir.join(cdi::SPEC_FILE);
    if cfg.uninstall {
        if cfg.dry_run {
            if cfg.host.read(&spec_path)?.is_some() {
                report.planned.push(PlannedFile {
                    path: spec_path,
                    content: None,
                });
            }
        } else {
            report
                .files
                .push((spec_path, cdi::remove_spec(&cfg.host, &cfg.cdi_dir)?));
        }
        return Ok(report);
    }
    let spec = generate_spec(cfg)?;
    report.cdi_devices = spec.devices.iter().map(|d| d.name.clone()).collect();
    if cfg.dry_run {
        let text = cdi::to_yaml(&spec)?;
        if cfg.host.read(&spec_path)?.as_deref() == Some(text.as_bytes()) {
            report.files.push((spec_path, Outcome::Unchanged));
        } else {
            report.planned.push(PlannedFile {
                path: spec_path,
                content: Some(text),
            });
        }
    } else {
        report
            .files
            .push((spec_path, cdi::write_spec(&cfg.host, &cfg.cdi_dir, &spec)?));
    }
    Ok(report)
}

/// Discovers the driver files and builds the spec for the configured (or found) devices.
pub fn generate_spec(cfg: &AgentConfig) -> Result<cdi::Spec, ToolkitError> {
    let dev_root = cfg
        .dev_root
        .clone()
        .unwrap_or_else(|| cfg.driver_root.clone());
    let driver = cdi::discover(
        &cfg.host,
        &cfg.driver_root,
        &dev_root,
        cfg.driver_version.as_deref(),
    )?;
    let (gpus, migs) = match &cfg.devices {
        Some((g, m)) => (g.clone(), m.clone()),
        None => (cdi::gpus_from_device_nodes(&driver), Vec::new()),
    };
    if gpus.is_empty() {
        return Err(ToolkitError::Cdi(format!(
            "no GPUs: no /dev/nvidia<N> device nodes under {}",
            cfg.host.path(&dev_root).display()
        )));
    }
    cdi::generate(&cdi::Input { gpus, migs, driver }, &cfg.cdi)
}
