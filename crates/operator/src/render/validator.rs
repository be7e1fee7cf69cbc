//! `state-operator-validation` (the per-node validation chain every other operand waits on)
//! and `state-node-status-exporter`, both `gantry node validator`, plus the validation init
//! containers the other operands use to wait for the layer below.

use gantry_api::common::{ContainerSettings, ImageSpec};
use gantry_api::names::{self, validator_component as component};
use k8s_openapi::api::core::v1::EnvVar;
use serde_json::{Map, Value, json};

use super::RenderError;
use super::image;
use super::meta::{Ctx, Rule, service_account};
use super::pod::{
    Container, DaemonSet, HOST_ROOT_MOUNT, driver_root_in_container, driver_root_volume, env,
    host_root_volume, merge_env, mount, mount_bidi, node_env, validations_volume, vol,
};
use super::prereq::service_monitor;

pub(crate) const DAEMONSET: &str = "nvidia-operator-validator";
const NODE_STATUS_EXPORTER: &str = "nvidia-node-status-exporter";
const NODE_STATUS_PORT: i32 = 8000;

/// The validator's image (`spec.validator`, under the Gantry image rule) and its block.
pub(crate) fn validator_image<'a>(ctx: &Ctx<'a>) -> (String, Option<&'a ImageSpec>) {
    let block = ctx.spec.validator.as_ref().map(|v| &v.image);
    (image::gantry(ctx, block), block)
}

fn host_mounts() -> Vec<Value> {
    vec![
        mount_bidi(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        json!({ "name": vol::HOST_ROOT, "mountPath": HOST_ROOT_MOUNT, "readOnly": true, "mountPropagation": "HostToContainer" }),
        json!({ "name": vol::DRIVER_ROOT, "mountPath": names::DRIVER_ROOT_DIR, "readOnly": true, "mountPropagation": "HostToContainer" }),
    ]
}

/// `gantry node validator --wait-for <component>`: blocks until `<component>-ready` exists.
pub(crate) fn add_wait_for<'a>(
    ctx: &Ctx<'a>,
    ds: &mut DaemonSet<'a>,
    what: &str,
) -> Result<(), RenderError> {
    let (image, block) = validator_image(ctx);
    let name = format!("{what}-validation");
    let mut c = Container::new(&name, image);
    c.image_spec = block;
    c.command = ["gantry", "node", "validator", "--wait-for", what]
        .map(String::from)
        .to_vec();
    c.env = node_env();
    c.mounts = vec![mount(vol::VALIDATIONS, names::VALIDATIONS_DIR)];
    ds.init.push(c.json()?);
    ds.volume(validations_volume());
    if let Some(b) = block {
        ds.pull_secrets.push(b);
    }
    Ok(())
}

/// `gantry node validator --component <what> --wait`: checks the component (retrying until
/// it passes) and writes `<what>-ready`.
pub(crate) fn add_check<'a>(
    ctx: &Ctx<'a>,
    ds: &mut DaemonSet<'a>,
    what: &str,
    extra_env: Option<&Vec<EnvVar>>,
) -> Result<(), RenderError> {
    let (image, block) = validator_image(ctx);
    let v = ctx.spec.validator.as_ref();
    let name = format!("{what}-validation");
    let mut c = Container::new(&name, image);
    c.image_spec = block;
    c.command = [
        "gantry",
        "node",
        "validator",
        "--component",
        what,
        "--wait",
        "--host-root",
        HOST_ROOT_MOUNT,
        "--driver-root",
        driver_root_in_container(ctx),
    ]
    .map(String::from)
    .to_vec();
    if what == component::TOOLKIT {
        // The runtime handler the toolkit registered is named after the RuntimeClass.
        c.command.extend([
            "--runtime-name".to_string(),
            ctx.spec.runtime_class().to_string(),
        ]);
    }
    let mut base = node_env();
    base.push(env("MIG_STRATEGY", ctx.spec.mig_strategy().as_str()));
    let base = merge_env(
        "spec.validator.env",
        base,
        v.and_then(|v| v.container.env.as_ref()),
    )?;
    c.env = merge_env(&format!("spec.validator.{what}.env"), base, extra_env)?;
    c.mounts = host_mounts();
    c.privileged = true;
    ds.init.push(c.json()?);
    ds.volume(validations_volume());
    ds.volume(host_root_volume(ctx));
    ds.volume(driver_root_volume(ctx));
    if let Some(b) = block {
        ds.pull_secrets.push(b);
    }
    Ok(())
}

pub(crate) fn render(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let v = spec.validator.as_ref();
    let mut out = service_account(
        ctx,
        DAEMONSET,
        &[
            Rule(&[""], &["pods"], &["list", "create"]),
            Rule(&["apps"], &["daemonsets"], &["list"]),
        ],
        &[Rule(&[""], &["nodes"], &["get"])],
    )?;
    let mut ds = DaemonSet::new(DAEMONSET, names::operand::OPERATOR_VALIDATOR, DAEMONSET);
    ds.runtime_class = true;
    let env_of = |sel: fn(
        &gantry_api::cluster_policy::ValidatorSpec,
    ) -> Option<&gantry_api::common::EnvOnly>| {
        v.and_then(sel).and_then(|e| e.env.as_ref())
    };
    add_check(
        ctx,
        &mut ds,
        component::DRIVER,
        env_of(|v| v.driver.as_ref()),
    )?;
    add_check(
        ctx,
        &mut ds,
        component::TOOLKIT,
        env_of(|v| v.toolkit.as_ref()),
    )?;
    add_check(ctx, &mut ds, component::CUDA, env_of(|v| v.cuda.as_ref()))?;
    // Without a device plugin nothing would ever advertise GPUs: the check would never pass.
    if spec.device_plugin_enabled() {
        add_check(
            ctx,
            &mut ds,
            component::PLUGIN,
            env_of(|v| v.plugin.as_ref()),
        )?;
    }
    let (image, block) = validator_image(ctx);
    let settings = v.map(|v| &v.container);
    let mut main = Container::new(DAEMONSET, image);
    main.image_spec = block;
    main.command = ["gantry", "node", "validator"].map(String::from).to_vec();
    main.env = merge_env(
        "spec.validator.env",
        node_env(),
        settings.and_then(|s| s.env.as_ref()),
    )?;
    main.mounts = host_mounts();
    main.privileged = true;
    main.settings = settings.map(|s| ("spec.validator", s));
    ds.containers.push(main.json()?);
    ds.host_network = settings.and_then(|s| s.host_network) == Some(true);
    out.push(ds.json(ctx)?);
    Ok(out)
}

pub(crate) fn node_status_exporter(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let section = &ctx.spec.node_status_exporter;
    let mut out = service_account(
        ctx,
        NODE_STATUS_EXPORTER,
        &[],
        &[Rule(&[""], &["nodes"], &["get"])],
    )?;
    let mut ds = DaemonSet::new(
        NODE_STATUS_EXPORTER,
        names::operand::NODE_STATUS_EXPORTER,
        NODE_STATUS_EXPORTER,
    );
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;
    let mut c = Container::new(
        NODE_STATUS_EXPORTER,
        image::gantry(ctx, Some(&section.image)),
    );
    c.image_spec = Some(&section.image);
    c.command = [
        "gantry",
        "node",
        "validator",
        "--component",
        component::METRICS,
        "--metrics-address",
    ]
    .map(String::from)
    .to_vec();
    c.command.push(format!(":{NODE_STATUS_PORT}"));
    c.env = merge_env(
        "spec.nodeStatusExporter.env",
        node_env(),
        section.container.env.as_ref(),
    )?;
    c.mounts = vec![mount(vol::VALIDATIONS, names::VALIDATIONS_DIR)];
    c.settings = Some((
        "spec.nodeStatusExporter",
        &section.container as &ContainerSettings,
    ));
    c.extra.insert(
        "ports".into(),
        json!([{ "name": "metrics", "containerPort": NODE_STATUS_PORT, "protocol": "TCP" }]),
    );
    ds.containers.push(c.json()?);
    ds.pull_secrets.push(&section.image);
    ds.host_network = section.container.host_network == Some(true);
    out.push(ds.json(ctx)?);

    let selector: Map<String, Value> = [(
        names::LABEL_APP.to_string(),
        Value::from(NODE_STATUS_EXPORTER),
    )]
    .into_iter()
    .collect();
    let mut svc = Map::new();
    svc.insert(
        "ports".into(),
        json!([{ "name": "metrics", "port": NODE_STATUS_PORT, "targetPort": NODE_STATUS_PORT, "protocol": "TCP" }]),
    );
    out.push(ctx.service(NODE_STATUS_EXPORTER, &selector, svc, None)?);
    if ctx.facts.has_service_monitor_crd {
        out.push(service_monitor(
            ctx,
            NODE_STATUS_EXPORTER,
            "metrics",
            &selector,
            None,
            "spec.nodeStatusExporter",
        )?);
    }
    Ok(out)
}
