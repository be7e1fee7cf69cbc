//! Which image each operand container runs.
//!
//! **Operands Gantry implements** (container toolkit, operator validator and every
//! validation init container, device plugin, GPU feature discovery, dcgm-exporter, MIG
//! manager, node status exporter) run Gantry's own image — the one the operator runs
//! (`gantry operator --image`, else [`DEFAULT_IMAGE`]) — with `gantry node <agent> …`. The
//! component's image block in the ClusterPolicy (e.g. `devicePlugin.repository/image/version`,
//! which upstream-shaped policies point at NVIDIA's images) is then ignored, except when it
//! names a Gantry image (`image: gantry`): that reference is used instead, so one operand can
//! run another Gantry build. Its `imagePullPolicy` and `imagePullSecrets` always apply.
//!
//! **Operands Gantry does not implement** (driver, k8s-driver-manager, DCGM host engine, MPS
//! control daemon, vGPU manager, vGPU device manager, VFIO manager, sandbox and Kata device
//! plugins, CC manager, sandbox validator, GDS, GDRCopy) run NVIDIA's image, resolved as
//! upstream does: the CR's `repository`/`image`/`version` (`image` alone is used verbatim;
//! a `sha256:` version gives `repo/image@sha256:…`), else the operator's image env var
//! (`DRIVER_IMAGE`, `DCGM_IMAGE`, … in [`super::ClusterFacts::image_env`]), else — where
//! upstream would fail — the upstream chart's default image. Driver-type images (driver,
//! vGPU manager, GDS, GDRCopy) get `-<os><VERSION_ID>` appended to their tag (see
//! [`Resolved::with_suffix`]).

use gantry_api::common::ImageSpec;

use super::RenderError;
use super::meta::Ctx;

/// Gantry's image when the operator was not told which one it runs.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/gantry-dev/gantry:", env!("CARGO_PKG_VERSION"));

/// Upstream chart defaults, used when neither the CR nor the operator env names an image.
pub(crate) mod chart {
    pub const DRIVER: (&str, &str, &str) = ("nvcr.io/nvidia", "driver", "595.91.07");
    pub const DRIVER_MANAGER: (&str, &str, &str) = (
        "nvcr.io/nvidia/cloud-native",
        "k8s-driver-manager",
        "v0.12.0",
    );
    pub const DEVICE_PLUGIN: (&str, &str, &str) =
        ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0");
    pub const DCGM: (&str, &str, &str) =
        ("nvcr.io/nvidia/cloud-native", "dcgm", "4.6.0-1-ubuntu24.04");
    pub const VALIDATOR: (&str, &str, &str) = ("nvcr.io/nvidia", "gpu-operator", "v26.7.0");
    pub const VGPU_DEVICE_MANAGER: (&str, &str, &str) = (
        "nvcr.io/nvidia/cloud-native",
        "vgpu-device-manager",
        "v0.4.1",
    );
    pub const VFIO_MANAGER: (&str, &str, &str) = ("nvcr.io/nvidia", "cuda", "13.0.1-base-ubi9");
    pub const SANDBOX_DEVICE_PLUGIN: (&str, &str, &str) =
        ("nvcr.io/nvidia", "kubevirt-gpu-device-plugin", "v1.6.0");
    pub const KATA_DEVICE_PLUGIN: (&str, &str, &str) = (
        "nvcr.io/nvidia/cloud-native",
        "nvidia-sandbox-device-plugin",
        "v0.0.1",
    );
    pub const CC_MANAGER: (&str, &str, &str) =
        ("nvcr.io/nvidia/cloud-native", "k8s-cc-manager", "v0.3.0");
    pub const GDS: (&str, &str, &str) = ("nvcr.io/nvidia/cloud-native", "nvidia-fs", "2.29.4");
    pub const GDRCOPY: (&str, &str, &str) = ("nvcr.io/nvidia/cloud-native", "gdrdrv", "v2.6");
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|v| !v.is_empty())
}

/// A resolved image reference, keeping how it was formed so a tag suffix can be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// `repo/image` and a tag.
    Tagged { base: String, tag: String },
    /// `repo/image@sha256:…`: used as is.
    Digest(String),
    /// A whole reference given verbatim (CR `image` alone, or an env var).
    Verbatim(String),
}

impl Resolved {
    pub fn reference(&self) -> String {
        match self {
            Resolved::Tagged { base, tag } => format!("{base}:{tag}"),
            Resolved::Digest(r) | Resolved::Verbatim(r) => r.clone(),
        }
    }

    /// Driver-type tag: `<tag>-<suffix>`. Digests are used as is; a verbatim reference
    /// gets the suffix on its tag when it has one.
    pub fn with_suffix(&self, suffix: &str) -> String {
        match self {
            Resolved::Tagged { base, tag } => format!("{base}:{tag}-{suffix}"),
            Resolved::Digest(r) => r.clone(),
            Resolved::Verbatim(r) => {
                let after_slash = r.rsplit('/').next().unwrap_or(r);
                if r.contains('@') || !after_slash.contains(':') {
                    r.clone()
                } else {
                    format!("{r}-{suffix}")
                }
            }
        }
    }

    pub fn is_digest(&self) -> bool {
        match self {
            Resolved::Digest(_) => true,
            Resolved::Verbatim(r) => r.contains('@'),
            Resolved::Tagged { .. } => false,
        }
    }
}

/// Resolve an upstream-image operand (see the module docs). `path` names the CR section
/// for errors, `env_key` the operator env var, `default` the chart default (`None`: the
/// chart has none and the user must set one).
pub(crate) fn upstream(
    ctx: &Ctx<'_>,
    path: &str,
    spec: Option<&ImageSpec>,
    env_key: &str,
    default: Option<(&str, &str, &str)>,
) -> Result<Resolved, RenderError> {
    if let Some(s) = spec {
        match (
            nonempty(&s.repository),
            nonempty(&s.image),
            nonempty(&s.version),
        ) {
            (None, Some(image), None) => return Ok(Resolved::Verbatim(image.to_string())),
            (Some(repo), Some(image), Some(v)) if v.starts_with("sha256:") => {
                return Ok(Resolved::Digest(format!("{repo}/{image}@{v}")));
            }
            (Some(repo), Some(image), Some(v)) => {
                return Ok(Resolved::Tagged {
                    base: format!("{repo}/{image}"),
                    tag: v.to_string(),
                });
            }
            (None, None, None) => {}
            _ => {
                return Err(RenderError {
                    path: path.to_string(),
                    message: "incomplete image: set repository, image and version together, \
                              or image alone as a full reference"
                        .into(),
                });
            }
        }
    }
    if let Some(r) = ctx.facts.image_env.get(env_key).filter(|r| !r.is_empty()) {
        return Ok(Resolved::Verbatim(r.clone()));
    }
    match default {
        Some((repo, image, tag)) => Ok(Resolved::Tagged {
            base: format!("{repo}/{image}"),
            tag: tag.to_string(),
        }),
        None => Err(RenderError {
            path: path.to_string(),
            message: format!(
                "no image: set repository, image and version (or the operator env {env_key})"
            ),
        }),
    }
}

/// Whether an image block names a Gantry image (`image: gantry`, or a verbatim reference
/// whose last path segment is `gantry`).
pub(crate) fn names_gantry(spec: &ImageSpec) -> bool {
    nonempty(&spec.image).is_some_and(|i| {
        let last = i.rsplit('/').next().unwrap_or(i);
        let name = last.split(['@', ':']).next().unwrap_or(last);
        name == "gantry"
    })
}

/// The image of an operand Gantry implements (see the module docs).
pub(crate) fn gantry(ctx: &Ctx<'_>, spec: Option<&ImageSpec>) -> String {
    if let Some(s) = spec
        && names_gantry(s)
        && let Some(r) = s.reference()
    {
        return r;
    }
    if ctx.facts.operator_image.is_empty() {
        DEFAULT_IMAGE.to_string()
    } else {
        ctx.facts.operator_image.clone()
    }
}
