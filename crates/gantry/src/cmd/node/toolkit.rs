//! `gantry node toolkit`: runtime configuration and the CDI spec.

use anyhow::Context;
use gantry_node::toolkit::agent::{self, AgentConfig, AgentReport};
use gantry_node::toolkit::reload::{CommandReloader, NoReload, Reloader, SignalReloader};
use gantry_node::toolkit::{Runtime, cdi};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum RuntimeArg {
    Auto,
    Containerd,
    Docker,
    Crio,
}

#[derive(clap::Args)]
pub struct ToolkitArgs {
    /// Where the host's `/` is mounted; every host path below is resolved under it.
    #[arg(long, env = "GANTRY_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// Container runtime to configure.
    #[arg(long, env = "RUNTIME", value_enum, default_value = "auto")]
    runtime: RuntimeArg,
    /// The runtime's main config file (default: /etc/containerd/config.toml,
    /// /etc/docker/daemon.json or /etc/crio/crio.conf).
    #[arg(long, env = "RUNTIME_CONFIG")]
    config: Option<PathBuf>,
    /// containerd: write /etc/containerd/conf.d/99-nvidia.toml plus an `imports` line instead
    /// of editing config.toml in place.
    #[arg(long)]
    drop_in: bool,
    /// Path of the drop-in (containerd with --drop-in; CRI-O always uses one).
    #[arg(long)]
    drop_in_path: Option<PathBuf>,
    /// Make `nvidia` the default runtime.
    #[arg(long)]
    set_as_default: bool,
    /// Also turn on CDI in the runtime (containerd `enable_cdi`, Docker `features.cdi`).
    #[arg(long)]
    enable_cdi: bool,
    /// Where nvidia-container-runtime and nvidia-cdi-hook are installed on the host.
    #[arg(long, default_value = gantry_node::toolkit::DEFAULT_TOOLKIT_DIR)]
    toolkit_dir: PathBuf,
    /// Name of the runtime to register.
    #[arg(long, default_value = gantry_node::toolkit::DEFAULT_RUNTIME_NAME)]
    runtime_name: String,
    /// Undo: restore the runtime config (byte for byte when unchanged since) and remove the spec.
    #[arg(long)]
    uninstall: bool,
    /// Only write the CDI spec.
    #[arg(long, conflicts_with = "no_cdi")]
    cdi_only: bool,
    /// Do not write the CDI spec.
    #[arg(long)]
    no_cdi: bool,
    /// Host path of the driver installation (`/run/nvidia/driver` with the driver container).
    #[arg(long, env = "NVIDIA_DRIVER_ROOT", default_value = "/")]
    driver_root: PathBuf,
    /// Host path the /dev nodes live under (default: the driver root).
    #[arg(long)]
    dev_root: Option<PathBuf>,
    /// Driver version (default: from /proc/driver/nvidia/version or the library names).
    #[arg(long)]
    driver_version: Option<String>,
    /// CDI spec directory (host path).
    #[arg(long, env = "CDI_OUTPUT_DIR", default_value = cdi::DEFAULT_CDI_DIR)]
    cdi_dir: PathBuf,
    /// CDI kind.
    #[arg(long, env = "CDI_KIND", default_value = "nvidia.com/gpu")]
    cdi_kind: String,
    /// Print what would be written; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not signal the runtime after changing its config.
    #[arg(long)]
    no_signal: bool,
    /// Pid file of the runtime daemon (host path) to send SIGHUP to.
    #[arg(long, conflicts_with_all = ["no_signal", "reload_command"])]
    pid_file: Option<PathBuf>,
    /// Command that reloads the runtime instead of SIGHUP, e.g. "systemctl restart containerd".
    #[arg(long, conflicts_with = "no_signal")]
    reload_command: Option<String>,
    /// Keep running and rewrite the CDI spec when the devices change, checking every N seconds.
    #[arg(long, value_name = "SECONDS")]
    watch: Option<u64>,
}

fn config(args: &ToolkitArgs) -> AgentConfig {
    let mut cfg = AgentConfig::new(&args.host_root);
    cfg.runtime = match args.runtime {
        RuntimeArg::Auto => None,
        RuntimeArg::Containerd => Some(Runtime::Containerd),
        RuntimeArg::Docker => Some(Runtime::Docker),
        RuntimeArg::Crio => Some(Runtime::Crio),
    };
    cfg.config = args.config.clone();
    cfg.drop_in = args.drop_in;
    cfg.drop_in_path = args.drop_in_path.clone();
    cfg.toolkit_dir = args.toolkit_dir.clone();
    cfg.runtime_name = args.runtime_name.clone();
    cfg.set_as_default = args.set_as_default;
    cfg.enable_cdi = args.enable_cdi;
    cfg.uninstall = args.uninstall;
    cfg.cdi_only = args.cdi_only;
    cfg.no_cdi = args.no_cdi;
    cfg.driver_root = args.driver_root.clone();
    cfg.dev_root = args.dev_root.clone();
    cfg.driver_version = args.driver_version.clone();
    cfg.cdi_dir = args.cdi_dir.clone();
    cfg.cdi.kind = args.cdi_kind.clone();
    cfg.cdi.hook_path = args
        .toolkit_dir
        .join("nvidia-cdi-hook")
        .to_string_lossy()
        .into_owned();
    cfg.dry_run = args.dry_run;
    cfg
}

fn reloader(args: &ToolkitArgs, cfg: &AgentConfig) -> Box<dyn Reloader> {
    if args.no_signal || args.dry_run {
        Box::new(NoReload)
    } else if let Some(cmd) = &args.reload_command {
        Box::new(CommandReloader {
            argv: cmd.split_whitespace().map(str::to_string).collect(),
        })
    } else {
        Box::new(SignalReloader {
            host: cfg.host.clone(),
            pid_file: args.pid_file.clone(),
        })
    }
}

fn print(report: &AgentReport, signal: bool) {
    for (path, outcome) in &report.files {
        println!("{}: {outcome}", path.display());
    }
    for planned in &report.planned {
        match &planned.content {
            Some(text) => println!("would write {}:\n{text}", planned.path.display()),
            None => println!("would remove {}", planned.path.display()),
        }
    }
    if let Some(runtime) = report.runtime
        && report.reloaded
    {
        if signal {
            println!("asked {runtime} to reload its configuration");
        } else {
            println!("{runtime} configuration changed; not signalled (--no-signal)");
        }
    }
    if !report.cdi_devices.is_empty() {
        println!("CDI devices: {}", report.cdi_devices.join(", "));
    }
}

pub fn run(args: ToolkitArgs) -> anyhow::Result<ExitCode> {
    if args
        .reload_command
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        anyhow::bail!("--reload-command is empty");
    }
    let cfg = config(&args);
    let mut reload = reloader(&args, &cfg);
    let report = agent::run(&cfg, reload.as_mut()).context("gantry node toolkit")?;
    print(&report, !args.no_signal);
    let Some(secs) = args
        .watch
        .filter(|_| !args.uninstall && !args.dry_run && !args.no_cdi)
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let watch = AgentConfig {
        cdi_only: true,
        ..cfg
    };
    loop {
        std::thread::sleep(Duration::from_secs(secs.max(1)));
        match agent::run(&watch, &mut NoReload) {
            Ok(r) => {
                for (path, outcome) in r
                    .files
                    .iter()
                    .filter(|(_, o)| *o != gantry_node::toolkit::Outcome::Unchanged)
                {
                    println!("{}: {outcome}", path.display());
                }
            }
            Err(e) => tracing::warn!("regenerating the CDI spec: {e}"),
        }
    }
}
