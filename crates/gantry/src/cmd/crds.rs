use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Write one file per CRD (`<plural>.<group>.yaml`) into this directory instead of
    /// printing them; `deploy/crds` is kept in sync this way.
    #[arg(long)]
    output_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.output_dir {
        None => print!("{}", gantry_api::crds::all_crds_yaml()?),
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for (name, body) in gantry_api::crds::crd_files()? {
                let path = dir.join(&name);
                std::fs::write(&path, body)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
