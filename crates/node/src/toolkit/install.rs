//! Runtime configuration as a plan of file changes (computed from the files' current bytes),
//! then applied atomically with backups. Install and uninstall are both plans, so `--dry-run`
//! shows exactly what would be written.

use super::error::ToolkitError;
use super::hostfs::{HostRoot, backup_path};
use super::reload::Reloader;
use super::{containerd, crio, docker, tomlutil};
use std::fmt;
use std::path::{Path, PathBuf};

/// A container runtime we know how to configure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Containerd,
    Docker,
    Crio,
}

impl Runtime {
    pub fn default_config(self) -> &'static str {
        match self {
            Runtime::Containerd => "/etc/containerd/config.toml",
            Runtime::Docker => "/etc/docker/daemon.json",
            Runtime::Crio => "/etc/crio/crio.conf",
        }
    }

    /// The drop-in upstream writes (Docker has none).
    pub fn default_drop_in(self) -> Option<&'static str> {
        match self {
            Runtime::Containerd => Some("/etc/containerd/conf.d/99-nvidia.toml"),
            Runtime::Crio => Some("/etc/crio/crio.conf.d/99-nvidia.toml"),
            Runtime::Docker => None,
        }
    }

    /// The daemon's process name (`/proc/<pid>/comm`).
    pub fn process_name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::Docker => "dockerd",
            Runtime::Crio => "crio",
        }
    }

    pub fn default_pid_file(self) -> &'static str {
        match self {
            Runtime::Containerd => "/run/containerd/containerd.pid",
            Runtime::Docker => "/var/run/docker.pid",
            Runtime::Crio => "/var/run/crio/crio.pid",
        }
    }

    fn sockets(self) -> &'static [&'static str] {
        match self {
            Runtime::Containerd => &["/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock"],
            Runtime::Docker => &["/var/run/docker.sock", "/run/docker.sock"],
            Runtime::Crio => &["/var/run/crio/crio.sock", "/run/crio/crio.sock"],
        }
    }

    /// Picks the node's runtime: the first (containerd, CRI-O, Docker) whose socket or config
    /// file exists under the host root. containerd comes first because Docker runs on it.
    pub fn detect(host: &HostRoot) -> Result<Runtime, ToolkitError> {
        [Runtime::Containerd, Runtime::Crio, Runtime::Docker]
            .into_iter()
            .find(|r| {
                r.sockets()
                    .iter()
                    .chain([r.default_config()].iter())
                    .any(|p| host.resolve(Path::new(p)).is_some())
            })
            .ok_or_else(|| {
                ToolkitError::config(
                    host.root(),
                    "no container runtime found (looked for containerd, CRI-O and Docker sockets and \
                     config files under this host root); pass --runtime",
                )
            })
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Containerd => "containerd",
            Runtime::Docker => "docker",
            Runtime::Crio => "crio",
        })
    }
}

/// How to configure one runtime. Paths are host paths (resolved under the host root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    pub runtime: Runtime,
    /// The runtime's main config file.
    pub config: PathBuf,
    /// containerd: write the drop-in here plus an `imports` line (else edit `config` in place).
    /// CRI-O: our drop-in (always used). Docker: ignored.
    pub drop_in: Option<PathBuf>,
    pub runtime_name: String,
    /// Absolute host path of `nvidia-container-runtime`.
    pub binary_path: String,
    pub set_as_default: bool,
    pub enable_cdi: bool,
}

impl RuntimeConfig {
    /// Upstream defaults for `runtime` with the runtime binary in `toolkit_dir`; containerd is
    /// edited in place unless `drop_in` is set afterwards.
    pub fn new(runtime: Runtime, toolkit_dir: &Path) -> Self {
        Self {
            runtime,
            config: PathBuf::from(runtime.default_config()),
            drop_in: match runtime {
                Runtime::Crio => runtime.default_drop_in().map(PathBuf::from),
                _ => None,
            },
            runtime_name: super::DEFAULT_RUNTIME_NAME.to_string(),
            binary_path: toolkit_dir.join("nvidia-container-runtime").to_string_lossy().into_owned(),
            set_as_default: false,
            enable_cdi: false,
        }
    }

    fn containerd(&self, set_as_default: bool, enable_cdi: bool) -> containerd::Options {
        containerd::Options {
            runtime_name: self.runtime_name.clone(),
            binary_path: self.binary_path.clone(),
            set_as_default,
            enable_cdi,
        }
    }

    fn docker(&self, set_as_default: bool, enable_cdi: bool) -> docker::Options {
        docker::Options {
            runtime_name: self.runtime_name.clone(),
            binary_path: self.binary_path.clone(),
            set_as_default,
            enable_cdi,
        }
    }

    /// Every option combination an earlier install may have used (for "is this file exactly
    /// what we wrote?" on uninstall).
    fn variants(&self) -> [(bool, bool); 4] {
        [
            (self.set_as_default, self.enable_cdi),
            (!self.set_as_default, self.enable_cdi),
            (self.set_as_default, !self.enable_cdi),
            (!self.set_as_default, !self.enable_cdi),
        ]
    }
}

/// One file's planned change. `before == after` means nothing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChange {
    /// Host path.
    pub path: PathBuf,
    pub before: Option<Vec<u8>>,
    pub after: Option<Vec<u8>>,
}

impl FileChange {
    pub fn changes(&self) -> bool {
        self.before != self.after
    }
}

/// The file changes of an install or uninstall, in the order they are applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub uninstall: bool,
    pub changes: Vec<FileChange>,
}

/// What happened to a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Created,
    Updated,
    Restored,
    Removed,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Restored => "restored",
            Outcome::Removed => "removed",
        })
    }
}

/// Per-file outcomes of an applied plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub files: Vec<(PathBuf, Outcome)>,
}

impl Report {
    pub fn changed(&self) -> bool {
        self.files.iter().any(|(_, o)| *o != Outcome::Unchanged)
    }
}

fn text(bytes: Option<&[u8]>, path: &Path) -> Result<String, ToolkitError> {
    match bytes {
        None => Ok(String::new()),
        Some(b) => String::from_utf8(b.to_vec()).map_err(|e| {
            ToolkitError::config(path, format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
        }),
    }
}

fn containerd_in_place(src: &str, opts: &containerd::Options, path: &Path) -> Result<String, ToolkitError> {
    let mut doc = tomlutil::parse(src, path)?;
    containerd::configure(&mut doc, opts, path)?;
    Ok(doc.to_string())
}

fn import_glob(drop_in: &Path) -> String {
    let dir = drop_in.parent().unwrap_or(Path::new("/"));
    format!("{}/*.toml", dir.to_string_lossy().trim_end_matches('/'))
}

fn with_import(src: &str, glob: &str, path: &Path) -> Result<String, ToolkitError> {
    let mut doc = tomlutil::parse(src, path)?;
    containerd::add_import(&mut doc, glob, path)?;
    Ok(doc.to_string())
}

/// The changes that register the runtime.
pub fn plan_install(host: &HostRoot, cfg: &RuntimeConfig) -> Result<Plan, ToolkitError> {
    let main_before = host.read(&cfg.config)?;
    let main_text = text(main_before.as_deref(), &cfg.config)?;
    let mut changes = Vec::new();
    match (cfg.runtime, &cfg.drop_in) {
        (Runtime::Containerd, None) => {
            let after = containerd_in_place(&main_text, &cfg.containerd(cfg.set_as_default, cfg.enable_cdi), &cfg.config)?;
            changes.push(change(&cfg.config, main_before, after, &main_text));
        }
        (Runtime::Containerd, Some(drop_in)) => {
            let main = tomlutil::parse(&main_text, &cfg.config)?;
            let opts = cfg.containerd(cfg.set_as_default, cfg.enable_cdi);
            let dropped = containerd::drop_in(&main, &opts, &cfg.config, drop_in)?.to_string();
            let drop_before = host.read(drop_in)?;
            changes.push(FileChange { path: drop_in.clone(), before: drop_before, after: Some(dropped.into_bytes()) });
            let after = with_import(&main_text, &import_glob(drop_in), &cfg.config)?;
            changes.push(change(&cfg.config, main_before, after, &main_text));
        }
        (Runtime::Docker, _) => {
            let after = docker::configure(&main_text, &cfg.docker(cfg.set_as_default, cfg.enable_cdi), &cfg.config)?;
            changes.push(change(&cfg.config, main_before, after, &main_text));
        }
        (Runtime::Crio, drop_in) => {
            let drop_in = drop_in.clone().unwrap_or_else(|| PathBuf::from(Runtime::Crio.default_drop_in().unwrap_or_default()));
            let sources = crio_sources(host, &cfg.config, main_before.as_deref(), &drop_in)?;
            let opts = crio::Options {
                runtime_name: cfg.runtime_name.clone(),
                binary_path: cfg.binary_path.clone(),
                set_as_default: cfg.set_as_default,
            };
            let after = crio::drop_in(&sources, &opts)?.to_string();
            changes.push(FileChange { path: drop_in.clone(), before: host.read(&drop_in)?, after: Some(after.into_bytes()) });
        }
    }
    Ok(Plan { uninstall: false, changes })
}

/// A change whose "after" equals the text of "before" is no change, even for a missing file
/// that would be created empty.
fn change(path: &Path, before: Option<Vec<u8>>, after: String, before_text: &str) -> FileChange {
    let after = if before.is_none() && after == before_text { None } else { Some(after.into_bytes()) };
    FileChange { path: path.to_path_buf(), before, after }
}

/// `crio.conf`, then the drop-in directory's other files in CRI-O's (lexical) order.
fn crio_sources(
    host: &HostRoot,
    config: &Path,
    config_bytes: Option<&[u8]>,
    drop_in: &Path,
) -> Result<Vec<(PathBuf, toml_edit::DocumentMut)>, ToolkitError> {
    let mut sources = Vec::new();
    if config_bytes.is_some() {
        sources.push((config.to_path_buf(), tomlutil::parse(&text(config_bytes, config)?, config)?));
    }
    let Some(dir) = drop_in.parent() else {
        return Ok(sources);
    };
    let real = host.real_path(dir);
    let mut names: Vec<String> = match std::fs::read_dir(&real) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(ToolkitError::io("listing", real, e)),
    };
    names.sort();
    for name in names {
        let path = dir.join(&name);
        if path == drop_in || name.starts_with('.') || name.ends_with(super::BACKUP_SUFFIX) {
            continue;
        }
        let bytes = host.read(&path)?;
        sources.push((path.clone(), tomlutil::parse(&text(bytes.as_deref(), &path)?, &path)?));
    }
    Ok(sources)
}

/// The changes that undo [`plan_install`]: a file that is still exactly what we wrote gets its
/// backup back byte for byte; a file edited since loses only our entries; files we created go.
pub fn plan_uninstall(host: &HostRoot, cfg: &RuntimeConfig) -> Result<Plan, ToolkitError> {
    let mut changes = Vec::new();
    let glob = cfg.drop_in.as_deref().map(import_glob);
    match (cfg.runtime, &cfg.drop_in) {
        (Runtime::Containerd, None) | (Runtime::Docker, _) => {
            let install = |src: &str, (d, c): (bool, bool)| match cfg.runtime {
                Runtime::Docker => docker::configure(src, &cfg.docker(d, c), &cfg.config),
                _ => containerd_in_place(src, &cfg.containerd(d, c), &cfg.config),
            };
            let remove = |src: &str| match cfg.runtime {
                Runtime::Docker => docker::unconfigure(src, &cfg.runtime_name, &cfg.config),
                _ => {
                    let mut doc = tomlutil::parse(src, &cfg.config)?;
                    containerd::unconfigure(&mut doc, &cfg.runtime_name, &cfg.config)?;
                    Ok(doc.to_string())
                }
            };
            changes.push(undo_edit(host, cfg, &cfg.config, install, remove)?);
        }
        (Runtime::Containerd, Some(drop_in)) => {
            changes.push(undo_owned(host, drop_in)?);
            let glob = glob.unwrap_or_default();
            let install = |src: &str, _: (bool, bool)| with_import(src, &glob, &cfg.config);
            let remove = |src: &str| {
                let mut doc = tomlutil::parse(src, &cfg.config)?;
                containerd::remove_import(&mut doc, &glob, &cfg.config)?;
                Ok(doc.to_string())
            };
            changes.push(undo_edit(host, cfg, &cfg.config, install, remove)?);
        }
        (Runtime::Crio, drop_in) => {
            let drop_in = drop_in.clone().unwrap_or_else(|| PathBuf::from(Runtime::Crio.default_drop_in().unwrap_or_default()));
            changes.push(undo_owned(host, &drop_in)?);
        }
    }
    Ok(Plan { uninstall: true, changes })
}

fn undo_owned(host: &HostRoot, path: &Path) -> Result<FileChange, ToolkitError> {
    Ok(FileChange { path: path.to_path_buf(), before: host.read(path)?, after: host.read(&backup_path(path))? })
}

fn undo_edit(
    host: &HostRoot,
    cfg: &RuntimeConfig,
    path: &Path,
    install: impl Fn(&str, (bool, bool)) -> Result<String, ToolkitError>,
    remove: impl Fn(&str) -> Result<String, ToolkitError>,
) -> Result<FileChange, ToolkitError> {
    let current = host.read(path)?;
    let backup = host.read(&backup_path(path))?;
    let ours = |original: &str, current: &str| {
        cfg.variants().into_iter().any(|v| install(original, v).is_ok_and(|out| out == current))
    };
    let after = match (&current, backup) {
        (None, backup) => backup,
        (Some(cur), Some(original)) => {
            let cur_text = text(Some(cur.as_slice()), path)?;
            let orig_text = text(Some(original.as_slice()), &backup_path(path))?;
            if ours(&orig_text, &cur_text) { Some(original) } else { Some(remove(&cur_text)?.into_bytes()) }
        }
        (Some(cur), None) => {
            let cur_text = text(Some(cur.as_slice()), path)?;
            if ours("", &cur_text) { None } else { Some(remove(&cur_text)?.into_bytes()) }
        }
    };
    Ok(FileChange { path: path.to_path_buf(), before: current, after })
}

/// Applies a plan: install keeps a backup of each file's first original; uninstall drops it.
pub fn apply(host: &HostRoot, plan: &Plan) -> Result<Report, ToolkitError> {
    let mut report = Report::default();
    for change in &plan.changes {
        let backup = backup_path(&change.path);
        let outcome = if !change.changes() {
            Outcome::Unchanged
        } else {
            if !plan.uninstall
                && let Some(before) = &change.before
                && host.read(&backup)?.is_none()
            {
                host.write_atomic(&backup, before)?;
            }
            let restoring = plan.uninstall && change.after.is_some() && host.read(&backup)? == change.after;
            match (&change.before, &change.after) {
                (_, Some(after)) => host.write_atomic(&change.path, after)?,
                (_, None) => host.remove(&change.path)?,
            }
            match (&change.before, &change.after, restoring) {
                (_, Some(_), true) => Outcome::Restored,
                (None, Some(_), _) => Outcome::Created,
                (Some(_), Some(_), _) => Outcome::Updated,
                (_, None, _) => Outcome::Removed,
            }
        };
        if plan.uninstall {
            host.remove(&backup)?;
        }
        report.files.push((change.path.clone(), outcome));
    }
    Ok(report)
}

/// Plans, applies and — only when a file changed — asks the runtime to reload.
pub fn run(host: &HostRoot, cfg: &RuntimeConfig, uninstall: bool, reloader: &mut dyn Reloader) -> Result<Report, ToolkitError> {
    let plan = if uninstall { plan_uninstall(host, cfg)? } else { plan_install(host, cfg)? };
    let report = apply(host, &plan)?;
    if report.changed() {
        reloader.reload(cfg.runtime)?;
    }
    Ok(report)
}
