//! The file seam: every host path is resolved under a host root, and every write is atomic
//! (temp file in the same directory, fsync, rename, fsync of the directory).

use super::error::ToolkitError;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The directory the host's `/` is mounted at (`/` on the host itself, `/host` in a pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoot(PathBuf);

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self(root.into())
    }

    pub fn root(&self) -> &Path {
        &self.0
    }

    /// Where the host path `host_path` (absolute on the host) lives for this process.
    pub fn path(&self, host_path: &Path) -> PathBuf {
        let mut out = self.0.clone();
        for c in host_path.components() {
            if let Component::Normal(part) = c {
                out.push(part);
            }
        }
        out
    }

    /// Resolves `host_path` following symlinks *inside* the host root (an absolute link target
    /// means the host's `/`, not ours). `None` when it does not exist.
    pub fn resolve(&self, host_path: &Path) -> Option<PathBuf> {
        let (resolved, complete) = self.follow(host_path);
        complete.then_some(resolved)
    }

    /// Where a host path really is for this process: symlinks in its existing part are
    /// followed inside the host root, so `/host/var/run -> /run` never escapes to our `/run`.
    pub fn real_path(&self, host_path: &Path) -> PathBuf {
        self.path(&self.follow(host_path).0)
    }

    /// Follows symlinks component by component; the flag says whether every component exists
    /// (missing ones are appended as given).
    fn follow(&self, host_path: &Path) -> (PathBuf, bool) {
        let mut todo: Vec<std::ffi::OsString> = normal_parts(host_path);
        todo.reverse();
        let mut resolved: Vec<std::ffi::OsString> = Vec::new();
        let mut hops = 0;
        while let Some(part) = todo.pop() {
            if part == ".." {
                resolved.pop();
                continue;
            }
            resolved.push(part);
            let here = self.path(&join(&resolved));
            let Ok(meta) = fs::symlink_metadata(&here) else {
                todo.reverse();
                resolved.extend(todo.into_iter().filter(|p| p != ".."));
                return (join(&resolved), false);
            };
            if meta.file_type().is_symlink() {
                hops += 1;
                let Ok(target) = fs::read_link(&here) else {
                    return (join(&resolved), false);
                };
                if hops > 40 {
                    return (join(&resolved), false);
                }
                resolved.pop();
                if target.is_absolute() {
                    resolved.clear();
                }
                let mut parts = normal_parts(&target);
                parts.reverse();
                todo.extend(parts);
            }
        }
        (join(&resolved), true)
    }

    /// Reads a host file; `Ok(None)` when it does not exist.
    pub fn read(&self, host_path: &Path) -> Result<Option<Vec<u8>>, ToolkitError> {
        let path = self.real_path(host_path);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ToolkitError::io("reading", path, e)),
        }
    }

    /// Atomically replaces (or creates, with mode 0644) a host file, keeping an existing file's
    /// mode and owner.
    pub fn write_atomic(&self, host_path: &Path, bytes: &[u8]) -> Result<(), ToolkitError> {
        let path = self.real_path(host_path);
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.0.clone());
        fs::create_dir_all(&dir).map_err(|e| ToolkitError::io("creating directory", &dir, e))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.gantry-tmp-{}", std::process::id()));
        let existing = fs::metadata(&path).ok();
        let result = (|| {
            let mut f =
                fs::File::create(&tmp).map_err(|e| ToolkitError::io("creating", &tmp, e))?;
            f.write_all(bytes)
                .map_err(|e| ToolkitError::io("writing", &tmp, e))?;
            let mode = existing.as_ref().map_or(0o644, |m| m.mode() & 0o7777);
            f.set_permissions(fs::Permissions::from_mode(mode))
                .map_err(|e| ToolkitError::io("setting permissions of", &tmp, e))?;
            if let Some(m) = &existing {
                let mine = f
                    .metadata()
                    .map_err(|e| ToolkitError::io("inspecting", &tmp, e))?;
                if (mine.uid(), mine.gid()) != (m.uid(), m.gid()) {
                    std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()))
                        .map_err(|e| ToolkitError::io("setting owner of", &tmp, e))?;
                }
            }
            f.sync_all()
                .map_err(|e| ToolkitError::io("syncing", &tmp, e))?;
            fs::rename(&tmp, &path).map_err(|e| ToolkitError::io("renaming into place", &path, e))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        sync_dir(&dir)
    }

    /// Removes a host file if present.
    pub fn remove(&self, host_path: &Path) -> Result<(), ToolkitError> {
        let path = self.real_path(host_path);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(path.parent().unwrap_or(&self.0)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ToolkitError::io("removing", path, e)),
        }
    }
}

/// Where the backup of a host file is kept: next to it, with a suffix no config glob matches.
pub fn backup_path(host_path: &Path) -> PathBuf {
    let mut name = host_path.as_os_str().to_owned();
    name.push(super::names::BACKUP_SUFFIX);
    PathBuf::from(name)
}

fn sync_dir(dir: &Path) -> Result<(), ToolkitError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ToolkitError::io("syncing directory", dir, e))
}

fn normal_parts(p: &Path) -> Vec<std::ffi::OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

fn join(parts: &[std::ffi::OsString]) -> PathBuf {
    let mut p = PathBuf::from("/");
    for part in parts {
        p.push(part);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_keeps_absolute_links_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostRoot::new(dir.path());
        fs::create_dir_all(dir.path().join("run/x")).unwrap();
        fs::write(dir.path().join("run/x/socket"), "").unwrap();
        fs::create_dir_all(dir.path().join("var")).unwrap();
        std::os::unix::fs::symlink("/run", dir.path().join("var/run")).unwrap();
        assert_eq!(
            host.resolve(Path::new("/var/run/x/socket")),
            Some(PathBuf::from("/run/x/socket"))
        );
        assert_eq!(host.resolve(Path::new("/var/run/missing")), None);
        assert_eq!(
            host.real_path(Path::new("/var/run/cdi/nvidia.yaml")),
            dir.path().join("run/cdi/nvidia.yaml")
        );
        host.write_atomic(Path::new("/var/run/cdi/nvidia.yaml"), b"x")
            .unwrap();
        assert!(dir.path().join("run/cdi/nvidia.yaml").exists());
    }

    #[test]
    fn atomic_write_keeps_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostRoot::new(dir.path());
        let file = Path::new("/etc/a.toml");
        host.write_atomic(file, b"one").unwrap();
        let real = host.path(file);
        fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
        host.write_atomic(file, b"two").unwrap();
        assert_eq!(fs::read(&real).unwrap(), b"two");
        assert_eq!(fs::metadata(&real).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(dir.path().join("etc")).unwrap().count(), 1);
    }
}
