//! A real containerd loads what the toolkit writes. For each kind of config the toolkit
//! edits (containerd's own default, one with other runtimes and `imports`, a missing file;
//! in place and as a drop-in), the test starts the installed containerd on the result with a
//! root, state dir and socket of its own in a temp dir, and reads back what containerd made
//! of it: `containerd config dump` and the CRI plugin's own config (the CRI `Status` call,
//! what `crictl info` prints). The toolkit's uninstall then gives back the original bytes,
//! which containerd loads again. Configs the toolkit refuses stay as they were.
//!
//! containerd comes from the distribution (`scripts/test.sh` installs Debian's package); where
//! it is missing each test says it skips. Debian 12 ships 1.6, which reads config version 2
//! only: the version 3 case runs only on containerd 2.x. The daemon never touches the
//! machine's `/run/containerd` or `/var/lib/containerd`; when the test may make a mount
//! namespace (root), containerd's `opt` plugin also gets a private `/opt`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gantry_node::device_plugin::uds;
use gantry_node::toolkit::hostfs::HostRoot;
use gantry_node::toolkit::install::{self, Outcome};
use gantry_node::toolkit::reload::NoReload;
use gantry_node::toolkit::{Runtime, RuntimeConfig};
use gantry_testkit::{Look, eventually_secs};
use serde_json::Value;
use toml_edit::DocumentMut;

const BINARY: &str = "/usr/local/nvidia/toolkit/nvidia-container-runtime";
const CRI_V2: &str = "io.containerd.grpc.v1.cri";

/// The installed containerd, or why the test skips.
fn containerd() -> Option<(u32, u32)> {
    let out = match Command::new("containerd").arg("--version").output() {
        Ok(out) if out.status.success() => out,
        _ => {
            eprintln!("skipping: no containerd on PATH (scripts/test.sh installs Debian's)");
            return None;
        }
    };
    // "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let version = text
        .split_whitespace()
        .nth(2)
        .map(|v| v.trim_start_matches('v'))
        .and_then(|v| {
            let mut parts = v.split(|c: char| !c.is_ascii_digit());
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        });
    if version.is_none() {
        eprintln!("skipping: cannot read containerd's version from {text:?}");
    }
    version
}

/// `containerd --config FILE config dump`: containerd's merged view (imports applied).
fn dump(config: &Path) -> Result<DocumentMut, String> {
    let out = Command::new("containerd")
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .output()
        .map_err(|e| format!("running containerd: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "containerd rejected {}: {}",
            config.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .parse()
        .map_err(|e| format!("containerd's dump is not TOML: {e}"))
}

/// The item at `keys` under `item`, if every table on the way is there.
fn at<'a>(item: &'a toml_edit::Item, keys: &[&str]) -> Option<&'a toml_edit::Item> {
    keys.iter().try_fold(item, |item, key| item.get(key))
}

fn str_at<'a>(item: &'a toml_edit::Item, keys: &[&str]) -> Option<&'a str> {
    at(item, keys).and_then(|i| i.as_str())
}

/// A containerd daemon on `config` whose root, state and socket live under `dir`.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(config: &Path, dir: &Path) -> Daemon {
        let (root, state) = (dir.join("root"), dir.join("state"));
        let socket = state.join("containerd.sock");
        let log = dir.join("containerd.log");
        let args: Vec<std::ffi::OsString> = vec![
            "--config".into(),
            config.into(),
            "--root".into(),
            root.into(),
            "--state".into(),
            state.into(),
            "--address".into(),
            socket.clone().into(),
        ];
        let mut cmd = if private_opt_works() {
            // containerd's `opt` plugin creates /opt/containerd; give it a tmpfs of its own.
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(r#"mount -t tmpfs gantry-test /opt && exec "$0" "$@""#)
                .arg("containerd");
            c
        } else {
            Command::new("containerd")
        };
        let file = std::fs::File::create(&log).expect("containerd log");
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start containerd");
        Daemon { child, socket, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The CRI plugin's config as containerd reports it (the `config` entry of a verbose CRI
    /// `Status`), once the daemon serves.
    async fn cri_config(&mut self) -> Value {
        let socket = self.socket.clone();
        let seen = eventually_secs("containerd's CRI Status", 60, || {
            let socket = socket.clone();
            let exited = self.child.try_wait().ok().flatten();
            async move {
                if let Some(status) = exited {
                    return Look::Done(Err(format!("containerd exited: {status}")));
                }
                match cri_status(&socket).await {
                    Ok(info) => Look::Done(Ok(info)),
                    Err(e) => Look::Seen(e),
                }
            }
        })
        .await;
        let info = match seen {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => panic!("{e}\n{}", self.log()),
            Err(e) => panic!("{e}\n{}", self.log()),
        };
        let config = info
            .get("config")
            .unwrap_or_else(|| panic!("no `config` in CRI status info: {info:?}"));
        serde_json::from_str(config).expect("CRI config is JSON")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this process may make a mount namespace with a private `/opt`.
fn private_opt_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount -t tmpfs gantry-test /opt")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The CRI `Status` call (k8s.io/cri-api runtime.v1), the two fields the test reads.
#[derive(Clone, PartialEq, prost::Message)]
struct StatusRequest {
    #[prost(bool, tag = "1")]
    verbose: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StatusResponse {
    #[prost(map = "string, string", tag = "2")]
    info: HashMap<String, String>,
}

async fn cri_status(socket: &Path) -> Result<HashMap<String, String>, String> {
    let channel = uds::connect(socket, Duration::from_secs(2))
        .await
        .map_err(|e| format!("dialing {}: {e}", socket.display()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| e.to_string())?;
    let reply: tonic::Response<StatusResponse> = grpc
        .unary(
            tonic::Request::new(StatusRequest { verbose: true }),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/runtime.v1.RuntimeService/Status",
            ),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map_err(|e| format!("CRI Status: {e}"))?;
    Ok(reply.into_inner().info)
}

/// A temp dir holding the runtime config (and the drop-in directory) at real paths: the
/// toolkit runs with host root `/`, so the `imports` it writes resolve for containerd too.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        Host {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn config(&self) -> PathBuf {
        self.path("etc/containerd/config.toml")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    fn runtime_config(&self, drop_in: bool, set_as_default: bool) -> RuntimeConfig {
        let mut cfg =
            RuntimeConfig::new(Runtime::Containerd, Path::new("/usr/local/nvidia/toolkit"));
        cfg.config = self.config();
        cfg.drop_in = drop_in.then(|| self.path("etc/containerd/conf.d/99-nvidia.toml"));
        cfg.set_as_default = set_as_default;
        cfg.enable_cdi = true;
        cfg
    }

    fn toolkit(&self, cfg: &RuntimeConfig, uninstall: bool) -> Result<install::Report, String> {
        install::run(&HostRoot::new("/"), cfg, uninstall, &mut NoReload).map_err(|e| e.to_string())
    }
}

/// What the test expects containerd to report.
struct Want {
    default_runtime: &'static str,
    /// Runtimes (besides `nvidia`) and their `runtime_type`.
    others: &'static [(&'static str, &'static str)],
    /// `SystemdCgroup` carried over from the runtime the nvidia entry copies.
    systemd_cgroup: Option<bool>,
}

/// containerd's dump of `config` names the nvidia runtime as the toolkit meant it.
fn check_dump(config: &Path, want: &Want) {
    let doc = dump(config).unwrap_or_else(|e| panic!("{e}"));
    let containerd = at(doc.as_item(), &["plugins", CRI_V2, "containerd"])
        .unwrap_or_else(|| panic!("no CRI containerd table in containerd's dump:\n{doc}"));
    assert_eq!(
        str_at(containerd, &["default_runtime_name"]),
        Some(want.default_runtime),
        "default runtime in containerd's dump:\n{doc}"
    );
    let nvidia = ["runtimes", "nvidia"];
    let field = |k: &[&str]| at(containerd, &[&nvidia[..], k].concat());
    assert_eq!(
        field(&["runtime_type"]).and_then(|i| i.as_str()),
        Some("io.containerd.runc.v2"),
        "{doc}"
    );
    assert_eq!(
        field(&["options", "BinaryName"]).and_then(|i| i.as_str()),
        Some(BINARY),
        "{doc}"
    );
    assert_eq!(
        field(&["options", "SystemdCgroup"]).and_then(|i| i.as_bool()),
        want.systemd_cgroup,
        "{doc}"
    );
    for (name, kind) in want.others {
        assert_eq!(
            str_at(containerd, &["runtimes", name, "runtime_type"]),
            Some(*kind),
            "runtime {name} in containerd's dump:\n{doc}"
        );
    }
}

/// The running daemon's CRI plugin knows the nvidia runtime handler as the toolkit wrote it.
async fn check_daemon(config: &Path, want: &Want) {
    let run = tempfile::tempdir().expect("tempdir");
    let mut daemon = Daemon::start(config, run.path());
    let cri = daemon.cri_config().await;
    let containerd = &cri["containerd"];
    assert_eq!(
        containerd["defaultRuntimeName"].as_str(),
        Some(want.default_runtime),
        "CRI config: {cri:#}"
    );
    let nvidia = &containerd["runtimes"]["nvidia"];
    assert_eq!(nvidia["runtimeType"], "io.containerd.runc.v2", "{cri:#}");
    assert_eq!(nvidia["options"]["BinaryName"], BINARY, "{cri:#}");
    if let Some(v) = want.systemd_cgroup {
        assert_eq!(nvidia["options"]["SystemdCgroup"], v, "{cri:#}");
    }
    for (name, kind) in want.others {
        assert_eq!(
            containerd["runtimes"][name]["runtimeType"], *kind,
            "{cri:#}"
        );
    }
    // containerd 1.7+ reads `enable_cdi`; 1.6 has no CDI support and no such setting.
    if let Some(cdi) = cri.get("enableCDI") {
        assert_eq!(cdi, true, "{cri:#}");
    }
    let log = daemon.log();
    assert!(
        !log.contains("failed to load plugin io.containerd.grpc.v1.cri"),
        "{log}"
    );
}

/// containerd loads `config` and has no nvidia runtime in it.
fn check_gone(config: &Path) {
    let doc = dump(config).unwrap_or_else(|e| panic!("after uninstall: {e}"));
    assert!(
        at(
            doc.as_item(),
            &["plugins", CRI_V2, "containerd", "runtimes", "nvidia"]
        )
        .is_none(),
        "nvidia runtime still in containerd's view after uninstall:\n{doc}"
    );
}

/// Install, check containerd's view, uninstall, check the original bytes are back and load.
async fn round_trip(host: &Host, cfg: &RuntimeConfig, original: Option<&[u8]>, want: &Want) {
    let report = host.toolkit(cfg, false).expect("install");
    assert!(report.changed(), "{report:?}");
    check_dump(&cfg.config, want);
    check_daemon(&cfg.config, want).await;
    let report = host.toolkit(cfg, true).expect("uninstall");
    assert!(report.changed(), "{report:?}");
    let now = std::fs::read(&cfg.config).ok();
    assert_eq!(
        now.as_deref(),
        original,
        "uninstall gives back the original bytes ({:?})",
        report.files
    );
    if original.is_some() {
        check_gone(&cfg.config);
        let run = tempfile::tempdir().expect("tempdir");
        let mut daemon = Daemon::start(&cfg.config, run.path());
        let cri = daemon.cri_config().await;
        assert!(
            cri["containerd"]["runtimes"].get("nvidia").is_none(),
            "{cri:#}"
        );
    }
    if let Some(drop_in) = &cfg.drop_in {
        assert!(!drop_in.exists(), "uninstall removes the drop-in");
    }
}

/// A config as a kubeadm node has it: runc with systemd cgroups, a Kata runtime, and an
/// `imports` glob whose file sets another plugin (containerd 1.6 replaces a whole plugin
/// table from an import, so the file must not touch the CRI plugin).
fn existing_runtimes(host: &Host) -> String {
    host.write(
        "etc/containerd/extra/10-opt.toml",
        &format!(
            "version = 2\n[plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{}\"\n",
            host.path("opt").display()
        ),
    );
    format!(
        r#"# Managed by hand.
version = 2
imports = ["{extra}/*.toml"]

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
        runtime_type = "io.containerd.kata.v2"
        privileged_without_host_devices = true
"#,
        extra = host.path("etc/containerd/extra").display()
    )
}

const EXISTING: Want = Want {
    default_runtime: "runc",
    others: &[
        ("runc", "io.containerd.runc.v2"),
        ("kata", "io.containerd.kata.v2"),
    ],
    systemd_cgroup: Some(true),
};

mod configs;
mod edits;
