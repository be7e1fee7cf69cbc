//! `state-container-toolkit`: `gantry node toolkit` registers the `nvidia` runtime with the
//! node's container runtime and writes the CDI spec, after the driver validates.

use gantry_api::names::{self, validator_component as component};
use serde_json::{Value, json};

use super::RenderError;
use super::image;
use super::meta::{Ctx, service_account};
use super::pod::{
    Container, DaemonSet, HOST_ROOT_MOUNT, env, host_root_volume, host_volume, merge_env, mount,
    mount_bidi, node_env, user_env, validations_volume, vol,
};
use super::validator::add_check;

pub(crate) const DAEMONSET: &str = "nvidia-container-toolkit-daemonset";
const SERVICE_ACCOUNT: &str = "nvidia-container-toolkit";
/// Seconds between checks for device changes (CDI spec refresh).
const WATCH_SECONDS: &str = "30";

/// The runtime flag value and the host directory of its config.
fn runtime(ctx: &Ctx<'_>) -> (&'static str, &'static str) {
    match ctx.facts.container_runtime.as_str() {
        "crio" | "cri-o" => ("crio", "/etc/crio"),
        "docker" => ("docker", "/etc/docker"),
        _ => ("containerd", "/etc/containerd"),
    }
}

/// Parent directory of a host file path (`/etc/containerd/config.toml` -> `/etc/containerd`).
fn parent(path: &str) -> Option<&str> {
    let p = path.trim_end_matches('/').rsplit_once('/')?.0;
    (!p.is_empty()).then_some(p)
}

pub(crate) fn render(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let t = &spec.toolkit;
    // The toolkit talks to no API: a bare ServiceAccount.
    let mut out = service_account(ctx, SERVICE_ACCOUNT, &[], &[])?;
    let mut ds = DaemonSet::new(
        DAEMONSET,
        names::operand::CONTAINER_TOOLKIT,
        SERVICE_ACCOUNT,
    );
    add_check(
        ctx,
        &mut ds,
        component::DRIVER,
        spec.validator
            .as_ref()
            .and_then(|v| v.driver.as_ref())
            .and_then(|e| e.env.as_ref()),
    )?;

    let (runtime, config_dir) = runtime(ctx);
    let install_dir = spec.toolkit_install_dir();
    // NVIDIADriver CRs install the driver in the same place the ClusterPolicy's would.
    let driver_root = if spec.driver_enabled() {
        spec.driver_install_dir()
    } else {
        "/"
    };
    let mut cmd: Vec<String> = [
        "gantry",
        "node",
        "toolkit",
        "--host-root",
        HOST_ROOT_MOUNT,
        "--runtime",
        runtime,
        "--runtime-name",
        spec.runtime_class(),
        "--toolkit-dir",
        install_dir,
        "--driver-root",
        driver_root,
    ]
    .map(String::from)
    .to_vec();
    // Writable host directories, mounted under the read-only host root.
    let mut dirs = vec![
        ("runtime-config", config_dir.to_string()),
        ("toolkit-install-dir", install_dir.to_string()),
    ];
    // Upstream's CONTAINERD_CONFIG (k3s, RKE2, microk8s paths) becomes `--config`.
    if let Some(cfg) =
        user_env(t.container.env.as_ref(), "CONTAINERD_CONFIG").filter(|v| !v.is_empty())
    {
        cmd.extend(["--config".to_string(), cfg.to_string()]);
        if let Some(dir) = parent(cfg)
            && dir != config_dir
        {
            dirs.push(("runtime-config-custom", dir.to_string()));
        }
    }
    if spec.cdi_enabled() {
        cmd.push("--enable-cdi".into());
        dirs.push((vol::CDI, "/var/run/cdi".to_string()));
    } else {
        cmd.push("--no-cdi".into());
    }
    cmd.extend(["--watch".to_string(), WATCH_SECONDS.to_string()]);

    let mut mounts = vec![
        mount_bidi(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        json!({ "name": vol::HOST_ROOT, "mountPath": HOST_ROOT_MOUNT, "readOnly": true, "mountPropagation": "HostToContainer" }),
    ];
    for (name, dir) in &dirs {
        ds.volume(host_volume(name, dir, "DirectoryOrCreate"));
        mounts.push(mount(name, &format!("{HOST_ROOT_MOUNT}{dir}")));
    }
    let mut base = node_env();
    base.push(env("CONTAINERD_RUNTIME_CLASS", spec.runtime_class()));
    let mut c = Container::new(
        "nvidia-container-toolkit-ctr",
        image::gantry(ctx, Some(&t.image)),
    );
    c.image_spec = Some(&t.image);
    c.command = cmd;
    c.env = merge_env("spec.toolkit.env", base, t.container.env.as_ref())?;
    c.mounts = mounts;
    c.privileged = true;
    c.settings = Some(("spec.toolkit", &t.container));
    ds.containers.push(c.json()?);
    ds.volume(validations_volume());
    ds.volume(host_root_volume(ctx));
    // Reloading the runtime signals a host process.
    ds.host_pid = true;
    ds.host_network = t.container.host_network == Some(true);
    ds.pull_secrets.push(&t.image);
    out.push(ds.json(ctx)?);
    Ok(out)
}
