//! The `gantry` binary: CLI wiring only. Each subcommand lives in `cmd/<name>.rs`
//! and calls into the library crates; no logic of its own lives here.

mod cmd;

// mimalloc instead of glibc's malloc: the scheduler binds ~20% faster on it, and glibc kept
// up to ~110 MiB of freed memory in the operator's arenas at 1,000 nodes. The `system-alloc`
// feature (off by default) keeps glibc's, so heap profilers that hook malloc (heaptrack) see
// every allocation.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hand freed memory back to the OS at once instead of after mimalloc's default 10 ms (x10
/// for arenas), unless `MIMALLOC_PURGE_DELAY` says otherwise. For long-lived controllers whose
/// memory comes in bursts (a watch relist, a round over every node): the operator at 1,000
/// nodes went from 77 / 98 MiB (end / peak) to 59 / 70 MiB (docs/benchmarks.md).
#[cfg(not(feature = "system-alloc"))]
#[allow(unsafe_code)]
pub(crate) fn purge_freed_memory_promptly() {
    // mimalloc 3's `mimalloc.h`: `void mi_option_set(mi_option_t, long)` and
    // `mi_option_purge_delay` = 15. The library is the one the allocator above links in.
    unsafe extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a plain integer option; called before the runtime starts its threads.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

/// glibc's malloc has no such option (and mimalloc is not linked in).
#[cfg(feature = "system-alloc")]
pub(crate) fn purge_freed_memory_promptly() {}

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gantry",
    version,
    about = "GPU infrastructure for Kubernetes: operator, node agents, scheduler and an embedded sim"
)]
struct Cli {
    /// Log filter (RUST_LOG syntax), e.g. `info` or `gantry_sim=debug`.
    #[arg(long, global = true, env = "GANTRY_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process, so the size of the biggest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Print every CRD Gantry serves as multi-document YAML.
    Crds(cmd::crds::Args),
    /// Check manifests and config files offline; exit 1 on problems.
    Validate(cmd::validate::Args),
    /// Node agents (run as DaemonSets on GPU nodes).
    #[command(subcommand)]
    Node(cmd::node::NodeCommand),
    /// Control a running simulated cluster (fault injection).
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
    /// Benchmarks that print a table.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Start the embedded control plane (Kubernetes API on 127.0.0.1 over HTTPS) in the foreground.
    Up(cmd::up::Args),
    /// The whole story on simulated GPU nodes: operator, scheduler, sharing, MIG, upgrades, faults.
    Demo(cmd::demo::Args),
    /// The GPU operator: reconciles the ClusterPolicy into labelled nodes and operand DaemonSets.
    Operator(cmd::operator::Args),
    /// The KAI-compatible batch scheduler (queues, gangs, GPU fractions) against a cluster.
    Scheduler(cmd::scheduler::Args),
    /// The GPU-sharing admission webhook: fractional pods get their GPU's env from the binder.
    Admission(cmd::admission::Args),
    /// Explain scheduling: `gantry explain pod NAMESPACE/NAME`.
    #[command(subcommand)]
    Explain(cmd::explain::ExplainCommand),
}

fn main() -> ExitCode {
    // dcgm-exporter's Go-style flags (`-web-config-file`, `-rbmn`) become `--long` first.
    let cli = Cli::parse_from(gantry_node::exporter::args::normalize(
        std::env::args_os().collect(),
    ));
    let log_file = match &cli.command {
        Command::Demo(args) => args.log_file(),
        _ => None,
    };
    cmd::logging::init(&cli.log, log_file.as_deref());
    let result = match cli.command {
        Command::Crds(args) => cmd::crds::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Node(cmd) => cmd::node::run(cmd),
        Command::Sim(cmd) => cmd::sim::run(cmd),
        Command::Bench(cmd) => cmd::bench::run(cmd),
        Command::Up(args) => cmd::up::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Operator(args) => cmd::operator::run(args),
        Command::Scheduler(args) => cmd::scheduler::run(args),
        Command::Admission(args) => cmd::admission::run(args),
        Command::Explain(cmd) => cmd::explain::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
