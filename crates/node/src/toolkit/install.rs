//! Runtime configuration as a plan of file changes (computed from the files' current bytes),
//! then applied atomically with backups. Install and uninstall are both plans, so `--dry-run`
//! shows exactly what would be written.

use super::error::ToolkitError;
use super::hostfs::{HostRoot, backup_path};
use super::reload::Reloader;
pub use super::runtime::{Runtime, RuntimeConfig};
use super::{containerd, crio, docker, tomlutil};
use std::fmt;
use std::path::{Path, PathBuf};

/// One file's planned change. `before == after` means nothing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChange {
    /// Host path.
    pub path: PathBuf,
    pub before: Option<Vec<u8>>,
    pub after: Option<Vec<u8>>,
    /// `before` is the user's content (not something we wrote): back it up before the first
    /// change if no backup exists yet.
    pub back_up: bool,
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
            ToolkitError::config(
                path,
                format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
            )
        }),
    }
}

fn containerd_in_place(
    src: &str,
    opts: &containerd::Options,
    path: &Path,
) -> Result<String, ToolkitError> {
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
            let install = |src: &str, (d, c): (bool, bool)| {
                containerd_in_place(src, &cfg.containerd(d, c), &cfg.config)
            };
            let base = original_base(host, cfg, &main_text, &install)?;
            let after = install(&base, (cfg.set_as_default, cfg.enable_cdi))?;
            changes.push(change(&cfg.config, main_before, after, &main_text, &base));
        }
        (Runtime::Containerd, Some(drop_in)) => {
            let glob = import_glob(drop_in);
            let install = |src: &str, _: (bool, bool)| with_import(src, &glob, &cfg.config);
            let base = original_base(host, cfg, &main_text, &install)?;
            let main = tomlutil::parse(&base, &cfg.config)?;
            let opts = cfg.containerd(cfg.set_as_default, cfg.enable_cdi);
            let dropped = containerd::drop_in(&main, &opts, &cfg.config, drop_in)?.to_string();
            let drop_before = host.read(drop_in)?;
            let ours = |bytes: &[u8]| {
                cfg.variants().into_iter().any(|(d, c)| {
                    containerd::drop_in(&main, &cfg.containerd(d, c), &cfg.config, drop_in)
                        .is_ok_and(|doc| doc.to_string().as_bytes() == bytes)
                })
            };
            changes.push(FileChange {
                path: drop_in.clone(),
                back_up: drop_before.as_deref().is_some_and(|b| !ours(b)),
                before: drop_before,
                after: Some(dropped.into_bytes()),
            });
            let after = install(&base, (cfg.set_as_default, cfg.enable_cdi))?;
            changes.push(change(&cfg.config, main_before, after, &main_text, &base));
        }
        (Runtime::Docker, _) => {
            let install = |src: &str, (d, c): (bool, bool)| {
                docker::configure(src, &cfg.docker(d, c), &cfg.config)
            };
            let base = original_base(host, cfg, &main_text, &install)?;
            let after = install(&base, (cfg.set_as_default, cfg.enable_cdi))?;
            changes.push(change(&cfg.config, main_before, after, &main_text, &base));
        }
        (Runtime::Crio, drop_in) => {
            let drop_in = drop_in.clone().unwrap_or_else(|| {
                PathBuf::from(Runtime::Crio.default_drop_in().unwrap_or_default())
            });
            let sources = crio_sources(host, &cfg.config, main_before.as_deref(), &drop_in)?;
            let opts = crio::Options {
                runtime_name: cfg.runtime_name.clone(),
                binary_path: cfg.binary_path.clone(),
                set_as_default: cfg.set_as_default,
            };
            let after = crio::drop_in(&sources, &opts)?.to_string();
            let before = host.read(&drop_in)?;
            let ours = |bytes: &[u8]| {
                [true, false].into_iter().any(|d| {
                    let opts = crio::Options {
                        set_as_default: d,
                        ..opts.clone()
                    };
                    crio::drop_in(&sources, &opts)
                        .is_ok_and(|doc| doc.to_string().as_bytes() == bytes)
                })
            };
            changes.push(FileChange {
                path: drop_in.clone(),
                back_up: before.as_deref().is_some_and(|b| !ours(b)),
                before,
                after: Some(after.into_bytes()),
            });
        }
    }
    Ok(Plan {
        uninstall: false,
        changes,
    })
}

/// Whether `current` is exactly what an install (with any options) makes of `original`.
fn is_ours(
    cfg: &RuntimeConfig,
    original: &str,
    current: &str,
    install: &impl Fn(&str, (bool, bool)) -> Result<String, ToolkitError>,
) -> bool {
    cfg.variants()
        .into_iter()
        .any(|v| install(original, v).is_ok_and(|out| out == current))
}

/// The text an install starts from: the original from our backup while the file is still
/// exactly what we made of it (so changing options never compounds, and uninstall can always
/// give the original back), else the file as it is now.
fn original_base(
    host: &HostRoot,
    cfg: &RuntimeConfig,
    current: &str,
    install: &impl Fn(&str, (bool, bool)) -> Result<String, ToolkitError>,
) -> Result<String, ToolkitError> {
    // No backup means the file did not exist before us (or we never changed it).
    let original = match host.read(&backup_path(&cfg.config))? {
        Some(bytes) => String::from_utf8(bytes).ok(),
        None => Some(String::new()),
    };
    match original {
        Some(original) if is_ours(cfg, &original, current, install) => Ok(original),
        _ => Ok(current.to_string()),
    }
}

/// A change whose "after" equals the text of "before" is no change, even for a missing file
/// that would be created empty. `base` is what the install started from: when it is not the
/// file itself, the file is our own earlier output and needs no backup.
fn change(
    path: &Path,
    before: Option<Vec<u8>>,
    after: String,
    before_text: &str,
    base: &str,
) -> FileChange {
    let after = if before.is_none() && after == before_text {
        None
    } else {
        Some(after.into_bytes())
    };
    FileChange {
        path: path.to_path_buf(),
        back_up: before.is_some() && base == before_text,
        before,
        after,
    }
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
        sources.push((
            config.to_path_buf(),
            tomlutil::parse(&text(config_bytes, config)?, config)?,
        ));
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
        if path == drop_in || name.starts_with('.') || name.ends_with(super::names::BACKUP_SUFFIX) {
            continue;
        }
        let bytes = host.read(&path)?;
        sources.push((
            path.clone(),
            tomlutil::parse(&text(bytes.as_deref(), &path)?, &path)?,
        ));
    }
    Ok(sources)
}

/// The changes that undo [`plan_install`]: a file that is still exactly what we wrote gets its
/// backup back byte for byte; a file edited since loses only our entries; files we created go;
/// files without a backup of ours (we never changed them) stay as they are.
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
            let drop_in = drop_in.clone().unwrap_or_else(|| {
                PathBuf::from(Runtime::Crio.default_drop_in().unwrap_or_default())
            });
            changes.push(undo_owned(host, &drop_in)?);
        }
    }
    Ok(Plan {
        uninstall: true,
        changes,
    })
}

fn undo_owned(host: &HostRoot, path: &Path) -> Result<FileChange, ToolkitError> {
    Ok(FileChange {
        path: path.to_path_buf(),
        back_up: false,
        before: host.read(path)?,
        after: host.read(&backup_path(path))?,
    })
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
    let ours = |original: &str, current: &str| is_ours(cfg, original, current, &install);
    let after = match (&current, backup) {
        (None, backup) => backup,
        (Some(cur), Some(original)) => {
            let cur_text = text(Some(cur.as_slice()), path)?;
            let orig_text = text(Some(original.as_slice()), &backup_path(path))?;
            if ours(&orig_text, &cur_text) {
                Some(original)
            } else {
                Some(remove(&cur_text)?.into_bytes())
            }
        }
        // No backup: we never changed this file, unless we created it from nothing.
        (Some(cur), None) => {
            let cur_text = text(Some(cur.as_slice()), path)?;
            if ours("", &cur_text) {
                None
            } else {
                current.clone()
            }
        }
    };
    Ok(FileChange {
        path: path.to_path_buf(),
        before: current,
        after,
        back_up: false,
    })
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
                && change.back_up
                && let Some(before) = &change.before
                && host.read(&backup)?.is_none()
            {
                host.write_atomic(&backup, before)?;
            }
            let restoring =
                plan.uninstall && change.after.is_some() && host.read(&backup)? == change.after;
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
pub fn run(
    host: &HostRoot,
    cfg: &RuntimeConfig,
    uninstall: bool,
    reloader: &mut dyn Reloader,
) -> Result<Report, ToolkitError> {
    let plan = if uninstall {
        plan_uninstall(host, cfg)?
    } else {
        plan_install(host, cfg)?
    };
    if plan.changes.iter().any(FileChange::changes) {
        reloader.ready(cfg.runtime)?;
    }
    let report = apply(host, &plan)?;
    if report.changed() {
        reloader.reload(cfg.runtime)?;
    }
    Ok(report)
}
