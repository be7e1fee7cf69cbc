//! CDI: discover the driver's files, generate the `nvidia.com/gpu` spec, validate it against
//! CDI 1.1.0, and write it to the CDI directory only when its content changes.

pub mod discover;
pub mod generate;
pub mod spec;

pub use discover::{DriverFiles, discover};
pub use generate::{Gpu, Input, MigDevice, Options, generate, gpus_from_device_nodes};
pub use spec::{Spec, validate};

use crate::toolkit::error::ToolkitError;
use crate::toolkit::hostfs::HostRoot;
use crate::toolkit::install::Outcome;
use std::path::Path;

/// Where the runtime looks for generated specs (host path).
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";
/// Our spec's file name in that directory.
pub const SPEC_FILE: &str = "nvidia.yaml";

/// The spec as YAML.
pub fn to_yaml(spec: &Spec) -> Result<String, ToolkitError> {
    serde_yaml::to_string(spec).map_err(|e| ToolkitError::Cdi(format!("serialising the spec: {e}")))
}

/// Parses a spec file (YAML or JSON) strictly, as CDI runtimes do.
pub fn from_yaml(text: &str, path: &Path) -> Result<Spec, ToolkitError> {
    serde_yaml::from_str(text).map_err(|e| ToolkitError::Cdi(format!("{}: {e}", path.display())))
}

/// Writes `spec` to `<cdi_dir>/nvidia.yaml` atomically (mode 0644), unless the file already
/// holds exactly this content.
pub fn write_spec(host: &HostRoot, cdi_dir: &Path, spec: &Spec) -> Result<Outcome, ToolkitError> {
    let path = cdi_dir.join(SPEC_FILE);
    let text = to_yaml(spec)?;
    let before = host.read(&path)?;
    if before.as_deref() == Some(text.as_bytes()) {
        return Ok(Outcome::Unchanged);
    }
    host.write_atomic(&path, text.as_bytes())?;
    Ok(if before.is_some() {
        Outcome::Updated
    } else {
        Outcome::Created
    })
}

/// Removes our spec (`--uninstall`).
pub fn remove_spec(host: &HostRoot, cdi_dir: &Path) -> Result<Outcome, ToolkitError> {
    let path = cdi_dir.join(SPEC_FILE);
    if host.read(&path)?.is_none() {
        return Ok(Outcome::Unchanged);
    }
    host.remove(&path)?;
    Ok(Outcome::Removed)
}
