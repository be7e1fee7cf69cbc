//! The process seam: telling the container runtime to pick up its new configuration.

use super::error::ToolkitError;
use super::hostfs::HostRoot;
use super::runtime::Runtime;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Asks a runtime to reload; called only after a file actually changed.
pub trait Reloader {
    fn reload(&mut self, runtime: Runtime) -> Result<(), ToolkitError>;

    /// Checked before any file is written, so a reload that cannot happen fails the run
    /// while the config is still untouched (a later run would see nothing to change and
    /// never reload).
    fn ready(&self, _runtime: Runtime) -> Result<(), ToolkitError> {
        Ok(())
    }
}

/// Sends SIGHUP to the runtime daemon: the pid comes from a pid file, or else from the host's
/// `/proc` (the process whose `comm` is the daemon's name; needs the host PID namespace).
pub struct SignalReloader {
    pub host: HostRoot,
    /// Host path of the pid file; `None` uses the runtime's usual one.
    pub pid_file: Option<PathBuf>,
}

impl SignalReloader {
    fn pid(&self, runtime: Runtime) -> Result<u32, ToolkitError> {
        let pid_file = self
            .pid_file
            .clone()
            .unwrap_or_else(|| PathBuf::from(runtime.default_pid_file()));
        if let Some(bytes) = self.host.read(&pid_file)? {
            let text = String::from_utf8_lossy(&bytes);
            return text
                .trim()
                .parse::<u32>()
                .map_err(|_| ToolkitError::Reload {
                    runtime: runtime.to_string(),
                    message: format!(
                        "pid file {} holds {:?}, not a process id",
                        pid_file.display(),
                        text.trim()
                    ),
                });
        }
        find_process(&self.host, runtime.process_name())?.ok_or_else(|| ToolkitError::Reload {
            runtime: runtime.to_string(),
            message: format!(
                "no pid file {} and no `{}` process in {}; pass --pid-file, --reload-command or --no-signal",
                pid_file.display(),
                runtime.process_name(),
                self.host.path(Path::new("/proc")).display()
            ),
        })
    }
}

impl Reloader for SignalReloader {
    fn ready(&self, runtime: Runtime) -> Result<(), ToolkitError> {
        self.pid(runtime).map(|_| ())
    }

    fn reload(&mut self, runtime: Runtime) -> Result<(), ToolkitError> {
        let pid = self.pid(runtime)?;
        run(
            runtime,
            &[
                "kill".to_string(),
                "-s".into(),
                "HUP".into(),
                pid.to_string(),
            ],
        )
    }
}

/// The lowest pid whose `comm` is exactly `name`.
fn find_process(host: &HostRoot, name: &str) -> Result<Option<u32>, ToolkitError> {
    let proc_dir = host.real_path(Path::new("/proc"));
    let entries = match std::fs::read_dir(&proc_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ToolkitError::io("listing", proc_dir, e)),
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(proc_dir.join(pid.to_string()).join("comm"))
                .is_ok_and(|c| c.trim_end() == name)
        })
        .collect();
    pids.sort_unstable();
    Ok(pids.first().copied())
}

/// Runs a user-given command (e.g. `systemctl restart containerd`).
pub struct CommandReloader {
    pub argv: Vec<String>,
}

impl Reloader for CommandReloader {
    fn reload(&mut self, runtime: Runtime) -> Result<(), ToolkitError> {
        run(runtime, &self.argv)
    }
}

fn run(runtime: Runtime, argv: &[String]) -> Result<(), ToolkitError> {
    let err = |message: String| ToolkitError::Reload {
        runtime: runtime.to_string(),
        message,
    };
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| err("empty reload command".into()))?;
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| err(format!("running `{}`: {e}", argv.join(" "))))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(err(format!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Leaves the runtime alone (`--no-signal`).
pub struct NoReload;

impl Reloader for NoReload {
    fn reload(&mut self, _runtime: Runtime) -> Result<(), ToolkitError> {
        Ok(())
    }
}

/// Records reload requests instead of acting on them (tests, `--dry-run`).
#[derive(Debug, Default)]
pub struct RecordingReloader {
    pub reloads: Vec<Runtime>,
}

impl Reloader for RecordingReloader {
    fn reload(&mut self, runtime: Runtime) -> Result<(), ToolkitError> {
        self.reloads.push(runtime);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_from_file_and_from_proc() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostRoot::new(dir.path());
        host.write_atomic(Path::new("/var/run/docker.pid"), b"4242\n")
            .unwrap();
        let r = SignalReloader {
            host: host.clone(),
            pid_file: None,
        };
        assert_eq!(r.pid(Runtime::Docker).unwrap(), 4242);
        host.write_atomic(Path::new("/proc/77/comm"), b"containerd\n")
            .unwrap();
        host.write_atomic(Path::new("/proc/78/comm"), b"containerd-shim\n")
            .unwrap();
        assert_eq!(r.pid(Runtime::Containerd).unwrap(), 77);
        let err = r.pid(Runtime::Crio).unwrap_err().to_string();
        assert!(err.contains("/var/run/crio/crio.pid"), "{err}");
    }

    #[test]
    fn failing_command_is_reported() {
        let mut r = CommandReloader {
            argv: vec!["false".into()],
        };
        let err = r.reload(Runtime::Containerd).unwrap_err().to_string();
        assert!(
            err.starts_with("reloading containerd: `false` failed"),
            "{err}"
        );
    }
}
