use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Manifests (ClusterPolicy, NVIDIADriver, MigClusterPolicy, Queue, PodGroup, ConfigMaps,
    /// Pods and the pod templates of Deployments, DaemonSets, StatefulSets, ReplicaSets, Jobs
    /// and CronJobs; other kinds are skipped with a note) or config files (device plugin
    /// config v1, mig-parted config v1); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut problems = 0usize;
    for path in &args.files {
        let (name, text) = if path.as_os_str() == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            ("<stdin>".to_string(), s)
        } else {
            match std::fs::read(path) {
                Ok(bytes) => (
                    path.display().to_string(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ),
                Err(e) => {
                    println!("{}: cannot read: {e}", path.display());
                    problems += 1;
                    continue;
                }
            }
        };
        for n in gantry_api::validate::notes_text(&text) {
            println!("{name}: note: {n}");
        }
        let report = gantry_api::validate::validate_text(&text);
        for p in &report {
            println!("{name}: {p}");
        }
        problems += report.len();
        if report.is_empty() {
            println!("{name}: ok");
        }
    }
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
