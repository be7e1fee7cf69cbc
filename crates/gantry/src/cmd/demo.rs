//! `gantry demo`: the whole story on the embedded sim (see crates/demo).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Simulated nodes (COUNT x MODEL : GPUs, comma-separated).
    #[arg(long, default_value = gantry_demo::DEFAULT_NODES)]
    nodes: String,
    /// Leave the cluster up after the summary (until Ctrl-C) and print how to reach it.
    #[arg(long)]
    keep: bool,
    /// Plain line-by-line output even on a terminal.
    #[arg(long)]
    plain: bool,
    /// Kubernetes API port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "gantry-demo.kubeconfig")]
    kubeconfig: PathBuf,
    /// Port of the read-only web view on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    ui_port: u16,
    /// Do not serve the web view.
    #[arg(long)]
    no_ui: bool,
    /// Longest one phase may take, in seconds, before the demo fails.
    #[arg(long, default_value_t = 120)]
    phase_timeout: u64,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Where the components' log goes (`-`: stderr). The terminal shows the story; the log
    /// (filtered by `--log`) keeps what the operator, scheduler and node agents said.
    #[arg(long, default_value = "gantry-demo.log")]
    log_file: PathBuf,
}

impl Args {
    /// The log file, or `None` for stderr.
    pub fn log_file(&self) -> Option<PathBuf> {
        (self.log_file.as_os_str() != "-").then(|| self.log_file.clone())
    }
}

/// `log: gantry-demo.log (1 warning, 0 errors)`.
fn log_line(file: &std::path::Path) -> String {
    let (w, e) = super::logging::counts();
    let plural = |n: usize, one: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    format!(
        "log: {} ({}, {})",
        file.display(),
        plural(w, "warning"),
        plural(e, "error")
    )
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let opts = gantry_demo::DemoOptions {
            nodes: args.nodes.clone(),
            live: !args.plain && std::io::stdout().is_terminal(),
            port: args.port,
            kubeconfig: args.kubeconfig.clone(),
            ui_port: (!args.no_ui).then_some(args.ui_port),
            phase_timeout: std::time::Duration::from_secs(args.phase_timeout),
        };
        let log_hint = args
            .log_file()
            .map(|f| format!(" (the log is in {})", f.display()))
            .unwrap_or_default();
        let (demo, summary) = gantry_demo::run(opts)
            .await
            .with_context(|| format!("the demo failed{log_hint}"))?;
        println!("\n{summary}");
        if let Some(path) = &args.summary_json {
            let text = serde_json::to_string_pretty(&summary)?;
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        if args.keep {
            let kc = demo.cp.kubeconfig_path().display().to_string();
            println!("The cluster stays up until Ctrl-C.");
            println!("  kubeconfig: {kc}");
            if let Some(ui) = &demo.ui {
                println!("  web view:   {}", ui.url());
            }
            println!("  try:");
            println!("    export KUBECONFIG={kc}");
            println!("    kubectl get nodes -o jsonpath='{{.items[*].status.allocatable.nvidia\\.com/gpu}}'");
            println!("    kubectl get clusterpolicy cluster-policy -o jsonpath='{{.status.state}}'");
            println!("    kubectl get queues");
            println!("    kubectl get pods -A -o wide");
            println!("    gantry explain queues");
            println!("    gantry explain pod team-b/<a pending batch-b pod>");
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        }
        demo.shutdown().await;
        if let Some(file) = args.log_file() {
            println!("{}", log_line(&file));
        }
        Ok(ExitCode::SUCCESS)
    })
}
