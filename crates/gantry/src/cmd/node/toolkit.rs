//! `gantry node toolkit`: runtime configuration and the CDI spec (flags and env:
//! `gantry_node::toolkit::args`).

use anyhow::Context;
use gantry_node::args::HostPaths;
use gantry_node::toolkit::agent::{self, AgentConfig, AgentReport};
use gantry_node::toolkit::args::ToolkitArgs;
use gantry_node::toolkit::reload::NoReload;
use std::process::ExitCode;
use std::time::Duration;

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
    let cfg = args.config(&HostPaths::identity())?;
    let mut reload = args.reloader(&cfg);
    let report = agent::run(&cfg, reload.as_mut()).context("gantry node toolkit")?;
    print(&report, !args.no_signal);
    let Some(secs) = args.watch() else {
        return Ok(ExitCode::SUCCESS);
    };
    let watch = AgentConfig {
        cdi_only: true,
        ..cfg
    };
    loop {
        std::thread::sleep(Duration::from_secs(secs));
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
