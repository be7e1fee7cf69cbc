//! `gantry sim …`: talk to a running simulated cluster (`gantry up --nodes …`) through its
//! control socket `<data-dir>/sim-control.sock`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gantry_sim::cluster::{self, Fault, control};
use gantry_sim::kubelet::probe;

#[derive(clap::Subcommand)]
pub enum SimCommand {
    /// Inject a fault into (or repair) a simulated node of a running `gantry up`.
    Fault(FaultArgs),
    /// A one-shot test kubelet: serve `DIR/kubelet.sock`, wait for a device plugin to
    /// register, list its devices and optionally allocate some; print what it answered.
    KubeletProbe(KubeletProbeArgs),
    /// One share of `gantry bench nodes --kubelet-processes N`: simulated kubelets for every
    /// N-th node of the spec, against the bench's API server, until stdin closes.
    #[command(hide = true)]
    Kubelets(KubeletsArgs),
}

#[derive(clap::Args)]
pub struct KubeletsArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    nodes: String,
    /// `I/N`: the nodes at positions I, I+N, I+2N, … of the spec.
    #[arg(long)]
    share: String,
    /// Where the nodes' host directories go.
    #[arg(long)]
    dir: PathBuf,
}

fn kubelets(args: &KubeletsArgs) -> anyhow::Result<ExitCode> {
    let (share, of) = args
        .share
        .split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|(i, n)| i < n)
        .with_context(|| format!("--share {:?}: expected I/N with I < N", args.share))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let _cluster =
            gantry_bench::nodes::run_kubelets(&args.kubeconfig, &args.nodes, share, of, &args.dir)
                .await
                .with_context(|| format!("simulated kubelets, share {}", args.share))?;
        // Until the bench closes our stdin (or goes away).
        let mut sink = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct KubeletProbeArgs {
    /// Directory for `kubelet.sock` (the plugin's `--plugin-dir`).
    #[arg(long)]
    dir: PathBuf,
    /// The resource whose plugin to probe.
    #[arg(long, default_value = gantry_api::names::RESOURCE_GPU)]
    resource: String,
    /// Allocate this many healthy devices (GetPreferredAllocation, Allocate, PreStartContainer).
    #[arg(long, default_value_t = 0)]
    allocate: usize,
    /// Give up after this many seconds, from the start.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// With `--allocate 1`: treat the allocation as a GPU reservation pod's and also print the
    /// environment the binder gives a pod holding this fraction of it (`shareEnv`).
    #[arg(long, requires = "gpu_memory_mib")]
    fraction: Option<f64>,
    /// The node's GPU memory in MiB (GFD's `nvidia.com/gpu.memory`), for the share's limits.
    #[arg(long)]
    gpu_memory_mib: Option<u64>,
}

/// The fractional container's env for the reserved GPU(s) of `report`, as the binder writes it.
fn share_env(
    report: &probe::ProbeReport,
    fraction: f64,
    gpu_memory_mib: Option<u64>,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    anyhow::ensure!(
        fraction > 0.0 && fraction < 1.0,
        "--fraction {fraction}: expected a share between 0 and 1 (exclusive)"
    );
    let alloc = report
        .allocate
        .as_ref()
        .context("--fraction needs --allocate 1: nothing was allocated")?;
    // What KAI's reservation container reports: the UUID of the one GPU it was given.
    let visible = alloc
        .containers
        .first()
        .and_then(|c| c.envs.get("NVIDIA_VISIBLE_DEVICES"))
        .filter(|v| v.starts_with("GPU-"))
        .map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
        .unwrap_or_else(|| alloc.device_ids.clone());
    anyhow::ensure!(
        visible.len() == 1,
        "a reservation holds exactly one GPU; the plugin gave {visible:?}"
    );
    let milli = (fraction * 1000.0).round() as u32;
    Ok(gantry_scheduler::k8s::binder::share_env(
        &visible,
        milli,
        gpu_memory_mib,
        false,
    ))
}

fn kubelet_probe(args: &KubeletProbeArgs) -> anyhow::Result<ExitCode> {
    let opts = probe::ProbeOptions {
        dir: args.dir.clone(),
        resource: args.resource.clone(),
        allocate: args.allocate,
        timeout: std::time::Duration::from_secs(args.timeout),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt
        .block_on(probe::run(&opts))
        .with_context(|| format!("kubelet probe on {}", args.dir.display()))?;
    let share = args
        .fraction
        .map(|f| share_env(&report, f, args.gpu_memory_mib))
        .transpose()?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(env) = &share {
            v["shareEnv"] = serde_json::json!(env);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", probe::render_text(&report));
        if let Some(env) = &share {
            println!("fractional container env (as the binder writes it):");
            for (k, v) in env {
                println!("  {k}={v}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["xid", "off_bus", "ecc_dbe", "clear", "power_off", "power_on", "driver_fail", "driver_ok"])))]
pub struct FaultArgs {
    /// The simulated node, e.g. `h100-80gb-0`.
    node: String,
    /// Report this XID on the GPU (e.g. 79, 48, 13).
    #[arg(long)]
    xid: Option<u64>,
    /// The GPU falls off the bus (XID 79; NVML calls on it fail until `--clear`).
    #[arg(long)]
    off_bus: bool,
    /// A double-bit ECC error (XID 48, pending row remap).
    #[arg(long)]
    ecc_dbe: bool,
    /// Reset the GPU: clears a lost GPU, the last XID and volatile ECC counts.
    #[arg(long)]
    clear: bool,
    /// Power the node off: its containers stop, no heartbeat, Ready becomes Unknown.
    #[arg(long)]
    power_off: bool,
    /// Power the node on again.
    #[arg(long)]
    power_on: bool,
    /// The node's driver container fails to load the driver (exits 1 and crash-loops).
    #[arg(long)]
    driver_fail: bool,
    /// Clear --driver-fail: the driver container installs again on its next restart.
    #[arg(long)]
    driver_ok: bool,
    /// GPU index on the node (for --xid, --off-bus, --ecc-dbe, --clear).
    #[arg(long)]
    gpu: Option<u32>,
    /// `--data-dir` of the running `gantry up` (none: the one in-memory `gantry up` running here).
    #[arg(long, conflicts_with = "sim_dir")]
    data_dir: Option<PathBuf>,
    /// The sim directory `gantry up` printed (holds `sim-control.sock`), to pick one of several.
    #[arg(long)]
    sim_dir: Option<PathBuf>,
}

/// The API server URL of the kubeconfig kubectl would use (`$KUBECONFIG`, else
/// `./gantry.kubeconfig` as `gantry up` writes it).
fn kubeconfig_server() -> Option<String> {
    let path = std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("gantry.kubeconfig"));
    let text = std::fs::read_to_string(&path).ok()?;
    let kc: serde_json::Value = serde_yaml::from_str(&text).ok()?;
    let named = |list: &str, name: &str| {
        kc.get(list)?
            .as_array()?
            .iter()
            .find(|e| e.get("name").and_then(|n| n.as_str()) == Some(name))
            .cloned()
    };
    let context = kc.get("current-context")?.as_str()?;
    let ctx = named("contexts", context)?;
    let cluster = ctx.pointer("/context/cluster")?.as_str()?;
    named("clusters", cluster)?
        .pointer("/cluster/server")?
        .as_str()
        .map(str::to_string)
}

/// The directory of the sim to talk to: named; else the in-memory one whose API server the
/// kubeconfig points at; else the only one running here.
fn target_sim(args: &FaultArgs) -> anyhow::Result<PathBuf> {
    if let Some(d) = &args.sim_dir {
        return Ok(d.clone());
    }
    if let Some(d) = &args.data_dir {
        return Ok(cluster::sim_dir(d));
    }
    let running = cluster::running_temp_sims();
    if let Some(server) = kubeconfig_server()
        && let Some(s) = running
            .iter()
            .find(|s| s.server.as_deref() == Some(&server))
    {
        return Ok(s.dir.clone());
    }
    match running.as_slice() {
        [] => anyhow::bail!(
            "no in-memory `gantry up --nodes …` is running here; for one started with --data-dir, pass the same --data-dir"
        ),
        [one] => Ok(one.dir.clone()),
        many => anyhow::bail!(
            "{} in-memory sims are running and none serves $KUBECONFIG's cluster ({}); pick one with --sim-dir",
            many.len(),
            many.iter()
                .map(|s| s.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn fault(args: &FaultArgs) -> anyhow::Result<Fault> {
    let gpu = || {
        args.gpu
            .context("this fault needs --gpu INDEX (the GPU's index on the node, from 0)")
    };
    Ok(if let Some(xid) = args.xid {
        Fault::Xid { gpu: gpu()?, xid }
    } else if args.off_bus {
        Fault::OffBus { gpu: gpu()? }
    } else if args.ecc_dbe {
        Fault::EccDbe { gpu: gpu()? }
    } else if args.clear {
        Fault::Clear { gpu: gpu()? }
    } else if args.power_off {
        Fault::PowerOff
    } else if args.driver_fail {
        Fault::DriverFail
    } else if args.driver_ok {
        Fault::DriverOk
    } else {
        Fault::PowerOn
    })
}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SimCommand::Fault(args) => {
            let req = control::Request {
                node: args.node.clone(),
                fault: fault(&args)?,
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let msg = rt.block_on(control::send(&target_sim(&args)?, &req))?;
            println!("{msg}");
            Ok(ExitCode::SUCCESS)
        }
        SimCommand::KubeletProbe(args) => kubelet_probe(&args),
        SimCommand::Kubelets(args) => kubelets(&args),
    }
}
