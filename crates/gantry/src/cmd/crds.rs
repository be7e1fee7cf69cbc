use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

#[derive(clap::Args)]
pub struct Args {
    /// Write one file per CRD (`<plural>.<group>.yaml`) into this directory instead of
    /// printing them; `deploy/crds` is kept in sync this way.
    #[arg(long, conflicts_with = "apply")]
    output_dir: Option<PathBuf>,
    /// Server-side apply the CRDs to the cluster instead of printing them (what the chart's
    /// pre-upgrade hook runs, as upstream's `upgradeCRD` runs `kubectl apply`: Helm itself
    /// never upgrades CRDs).
    #[arg(long)]
    pub(crate) apply: bool,
    /// Kubeconfig for `--apply`; without it: in-cluster config, else KUBECONFIG / ~/.kube/config.
    #[arg(long, requires = "apply")]
    kubeconfig: Option<PathBuf>,
}

/// Field manager of `--apply`.
const FIELD_MANAGER: &str = "gantry-crds";

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.apply {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        return rt.block_on(apply(args.kubeconfig));
    }
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

async fn apply(kubeconfig: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let client = gantry_runtime::client::client(kubeconfig.as_deref()).await?;
    apply_with(client).await
}

/// Server-side apply every CRD with `client`.
pub(crate) async fn apply_with(client: kube::Client) -> anyhow::Result<ExitCode> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    // Forced: the CRDs Helm created at install time (or `kubectl apply`) are taken over.
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in gantry_api::crds::all_crds()? {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CustomResourceDefinition {name}"))?;
        println!("applied customresourcedefinition {name}");
    }
    Ok(ExitCode::SUCCESS)
}
