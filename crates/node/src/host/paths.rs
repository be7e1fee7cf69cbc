//! Where the paths an agent is given are on the machine it runs on.

use std::path::{Path, PathBuf};

/// How the paths an agent is given map onto the machine it runs on: a path in the agent's
/// container becomes a host path through the container's hostPath mounts (an unmounted path is
/// taken as a host path), and a host path is found where the machine keeps it. On a node both
/// are the identity ([`HostPaths::identity`]: the agent sees the host through its mounts
/// itself); the simulated kubelet maps a container's mounts and the node's host directory.
#[derive(Clone, Debug, Default)]
pub struct HostPaths {
    /// (path in the container, host path), longest first.
    mounts: Vec<(PathBuf, PathBuf)>,
    /// (host path, where it is here), longest first.
    host: Vec<(PathBuf, PathBuf)>,
}

fn longest_first(mut v: Vec<(PathBuf, PathBuf)>) -> Vec<(PathBuf, PathBuf)> {
    v.sort_by_key(|(from, _)| std::cmp::Reverse(from.components().count()));
    v
}

fn rewrite(table: &[(PathBuf, PathBuf)], p: &Path) -> Option<PathBuf> {
    table.iter().find_map(|(from, to)| {
        let rel = p.strip_prefix(from).ok()?;
        Some(if rel.as_os_str().is_empty() {
            to.clone()
        } else {
            to.join(rel)
        })
    })
}

impl HostPaths {
    pub fn identity() -> Self {
        HostPaths::default()
    }

    /// `mounts`: (container path, host path); `host`: (host path, where it is here).
    pub fn new(mounts: Vec<(PathBuf, PathBuf)>, host: Vec<(PathBuf, PathBuf)>) -> Self {
        HostPaths {
            mounts: longest_first(mounts),
            host: longest_first(host),
        }
    }

    /// Where the agent's path `p` is on this machine.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        let host = rewrite(&self.mounts, p).unwrap_or_else(|| p.to_path_buf());
        rewrite(&self.host, &host).unwrap_or(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_follow_the_longest_mount() {
        let h = HostPaths::new(
            vec![
                ("/host".into(), "/".into()),
                ("/plugins".into(), "/var/lib/kubelet/device-plugins".into()),
            ],
            vec![
                ("/".into(), "/n1".into()),
                ("/var/lib/kubelet/device-plugins".into(), "/dp".into()),
            ],
        );
        assert_eq!(h.resolve(Path::new("/host")), Path::new("/n1"));
        assert_eq!(h.resolve(Path::new("/host/etc/x")), Path::new("/n1/etc/x"));
        assert_eq!(
            h.resolve(Path::new("/plugins/k.sock")),
            Path::new("/dp/k.sock")
        );
        assert_eq!(
            h.resolve(Path::new("/host/var/lib/kubelet/device-plugins")),
            Path::new("/dp")
        );
        // Unmounted: a host path.
        assert_eq!(h.resolve(Path::new("/etc/y")), Path::new("/n1/etc/y"));
        assert_eq!(
            HostPaths::identity().resolve(Path::new("/a")),
            Path::new("/a")
        );
    }
}
