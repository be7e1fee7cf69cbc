//! The NVIDIA driver container on a simulated node: "installs" the driver in-process. After a
//! short install delay it sets the node's simulated driver version from the image tag, creates
//! the driver root and writes `<host>/run/nvidia/validations/.driver-ctr-ready` (what the real
//! container's startup probe does), then runs until stopped and removes that file. While the
//! node's `driver-fail` fault is set the container exits 1 (so it crash-loops).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gantry_api::names;
use tokio::sync::watch;

use super::in_process::{AgentContext, AgentExit, AgentFuture, AgentRunner};

/// How long a simulated driver install takes by default.
pub const DEFAULT_INSTALL_DELAY: Duration = Duration::from_secs(1);

/// The driver version in an image reference's tag: `…/driver:580.95.05-ubuntu24.04` →
/// `580.95.05`. `None` for a digest (`@sha256:…`), no tag, or a tag without a version.
pub fn version_from_image(image: &str) -> Option<String> {
    if image.contains('@') {
        return None;
    }
    let last = &image[image.rfind('/').map_or(0, |i| i + 1)..];
    let tag = last.split_once(':')?.1;
    let version = tag.split('-').next()?;
    let parts: Vec<&str> = version.split('.').collect();
    let ok = parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    ok.then(|| version.to_string())
}

/// `<host root>/<host path>`.
pub fn host_path(host_root: &Path, host: &str) -> PathBuf {
    host_root.join(host.trim_start_matches('/'))
}

/// The driver container's runner.
#[derive(Debug, Clone, Copy)]
pub struct DriverRunner {
    pub install_delay: Duration,
}

impl Default for DriverRunner {
    fn default() -> Self {
        DriverRunner {
            install_delay: DEFAULT_INSTALL_DELAY,
        }
    }
}

/// Resolves when `rx` is (or becomes) true, or its sender is gone (never, then).
async fn until_true(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

const FAULT_MESSAGE: &str = "the driver failed to load (sim fault driver-fail; clear it with `gantry sim fault NODE --driver-ok`)";

impl AgentRunner for DriverRunner {
    fn run(&self, ctx: AgentContext) -> AgentFuture {
        let delay = self.install_delay;
        let run = async move {
            let AgentContext {
                host_root,
                backend,
                image,
                mut shutdown,
                mut driver_fail,
                node_name,
                ..
            } = ctx;
            let ready =
                host_path(&host_root, names::VALIDATIONS_DIR).join(names::ready_file::DRIVER_CTR);
            // A container start always begins without the ready file (startup probe not passed).
            let _ = std::fs::remove_file(&ready);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = until_true(&mut shutdown) => return Ok(()),
                _ = until_true(&mut driver_fail) => return Err(FAULT_MESSAGE.into()),
            }
            if let (Some(b), Some(v)) = (&backend, version_from_image(&image)) {
                b.set_driver_version(&v);
            }
            let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
            let root = host_path(&host_root, names::DRIVER_ROOT_DIR);
            std::fs::create_dir_all(&root).map_err(|e| io(&root, e))?;
            // The real container's root (shared at the driver root) carries the device nodes it
            // created; the toolkit and validator look for them there.
            mirror_device_nodes(&host_root.join("dev"), &root.join("dev"))
                .map_err(|e| io(&root, e))?;
            if let Some(dir) = ready.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            }
            std::fs::write(&ready, b"").map_err(|e| io(&ready, e))?;
            tracing::info!(node = %node_name, %image, "simulated driver installed");
            let result = tokio::select! {
                _ = until_true(&mut shutdown) => Ok(()),
                _ = until_true(&mut driver_fail) => Err(FAULT_MESSAGE.to_string()),
            };
            let _ = std::fs::remove_file(&ready);
            result
        };
        Box::pin(async move { run.await.map_err(AgentExit::from) })
    }
}

/// Copy the `nvidia*` entries of `from` (empty files, and directories such as `nvidia-caps`
/// one level deep) into `to`.
fn mirror_device_nodes(from: &Path, to: &Path) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    std::fs::create_dir_all(to)?;
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("nvidia") {
            continue;
        }
        let target = to.join(&name);
        if e.path().is_dir() {
            std::fs::create_dir_all(&target)?;
            for inner in std::fs::read_dir(e.path())?.flatten() {
                std::fs::write(target.join(inner.file_name()), b"")?;
            }
        } else {
            std::fs::write(&target, b"")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_tags() {
        let v = |s: &str| version_from_image(s);
        assert_eq!(
            v("nvcr.io/nvidia/driver:580.95.05-ubuntu24.04").as_deref(),
            Some("580.95.05")
        );
        assert_eq!(
            v("registry:5000/nvidia/driver:550.127.08").as_deref(),
            Some("550.127.08")
        );
        assert_eq!(v("nvcr.io/nvidia/driver@sha256:0123"), None);
        assert_eq!(v("nvcr.io/nvidia/driver:latest"), None);
        assert_eq!(v("nvcr.io/nvidia/driver"), None);
        assert_eq!(v("registry:5000/nvidia/driver"), None);
    }

    #[test]
    fn device_nodes_are_mirrored_into_the_driver_root() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("dev");
        std::fs::create_dir_all(dev.join("nvidia-caps")).unwrap();
        for f in ["nvidia0", "nvidiactl", "null"] {
            std::fs::write(dev.join(f), b"").unwrap();
        }
        std::fs::write(dev.join("nvidia-caps/nvidia-cap1"), b"").unwrap();
        let root = d.path().join("run/nvidia/driver/dev");
        mirror_device_nodes(&dev, &root).unwrap();
        assert!(root.join("nvidia0").exists() && root.join("nvidiactl").exists());
        assert!(root.join("nvidia-caps/nvidia-cap1").exists());
        assert!(!root.join("null").exists());
    }
}
