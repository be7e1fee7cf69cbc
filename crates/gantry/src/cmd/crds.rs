use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    print!("{}", gantry_api::crds::all_crds_yaml()?);
    Ok(ExitCode::SUCCESS)
}
