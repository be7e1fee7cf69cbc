//! `state-dcgm` (NVIDIA's standalone DCGM host engine) and `state-dcgm-exporter`
//! (`gantry node exporter`, dcgm-exporter's metric names on :9400, with its Service and
//! ServiceMonitor).

use gantry_api::cluster_policy::defaults;
use gantry_api::names::{self, validator_component as component};
use serde_json::{Map, Value, json};

use super::RenderError;
use super::image::{self, chart};
use super::meta::{Ctx, Rule, service_account};
use super::pod::{
    Container, DaemonSet, driver_root_volume, env, host_volume, merge_env, mount, mount_ro,
    node_env, vol,
};
use super::prereq::service_monitor;
use super::validator::add_wait_for;

pub(crate) const HOSTENGINE: &str = "nvidia-dcgm";
pub(crate) const EXPORTER: &str = "nvidia-dcgm-exporter";
pub(crate) const EXPORTER_PORT: i32 = 9400;
const EXPORTER_PORT_NAME: &str = "gpu-metrics";
/// Where a `dcgmExporter.config` ConfigMap's `dcgm-metrics.csv` is mounted.
const METRICS_CSV: &str = "/etc/dcgm-exporter/dcgm-metrics.csv";

fn app_selector(app: &str) -> Map<String, Value> {
    [(names::LABEL_APP.to_string(), Value::from(app))]
        .into_iter()
        .collect()
}

pub(crate) fn hostengine(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let d = &ctx.spec.dcgm;
    let img = image::upstream(
        ctx,
        "spec.dcgm",
        Some(&d.image),
        "DCGM_IMAGE",
        Some(chart::DCGM),
    )?;
    let port = d.host_port.unwrap_or(defaults::DCGM_HOST_PORT);
    let mut out = service_account(ctx, HOSTENGINE, &[], &[])?;
    let mut ds = DaemonSet::new(HOSTENGINE, names::operand::DCGM, HOSTENGINE);
    ds.runtime_class = true;
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;
    let mut c = Container::new("nvidia-dcgm-ctr", img.reference());
    c.image_spec = Some(&d.image);
    c.env = merge_env("spec.dcgm.env", Vec::new(), d.container.env.as_ref())?;
    c.settings = Some(("spec.dcgm", &d.container));
    c.extra.insert(
        "ports".into(),
        json!([{ "name": "dcgm", "containerPort": port, "hostPort": port, "protocol": "TCP" }]),
    );
    ds.containers.push(c.json()?);
    ds.host_network = d.container.host_network == Some(true);
    ds.pull_secrets.push(&d.image);
    out.push(ds.json(ctx)?);
    let mut svc = Map::new();
    svc.insert("internalTrafficPolicy".into(), "Local".into());
    svc.insert(
        "ports".into(),
        json!([{ "name": "dcgm", "port": port, "targetPort": port, "protocol": "TCP" }]),
    );
    out.push(ctx.service(HOSTENGINE, &app_selector(HOSTENGINE), svc, None)?);
    Ok(out)
}

pub(crate) fn exporter(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let e = &spec.dcgm_exporter;
    let pod_labels = e.enable_pod_labels == Some(true) || e.enable_pod_uid == Some(true);
    // Pod attribution comes from the kubelet's pod-resources socket; reading pod labels or
    // UIDs needs the API, and only then does the exporter get a role.
    let cluster_rules: &[Rule] = if pod_labels {
        &[Rule(&[""], &["pods"], &["get", "list", "watch"])]
    } else {
        &[]
    };
    let mut out = service_account(ctx, EXPORTER, &[], cluster_rules)?;
    let mut ds = DaemonSet::new(EXPORTER, names::operand::DCGM_EXPORTER, EXPORTER);
    ds.runtime_class = true;
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;

    let mut base = node_env();
    if spec.dcgm_enabled() {
        base.push(env(
            "DCGM_REMOTE_HOSTENGINE_INFO",
            &format!(
                "{HOSTENGINE}:{}",
                spec.dcgm.host_port.unwrap_or(defaults::DCGM_HOST_PORT)
            ),
        ));
    }
    let mut user = e.container.env.clone().unwrap_or_default();
    let custom_csv = e
        .config
        .as_ref()
        .and_then(|c| c.name.as_deref())
        .filter(|n| !n.is_empty());
    // CSV paths under /etc/dcgm-exporter name files inside NVIDIA's image; Gantry's exporter
    // has the same default set built in, so such a value is dropped unless our ConfigMap
    // mount provides the file.
    user.retain(|v| {
        v.name != "DCGM_EXPORTER_COLLECTORS"
            || !v
                .value
                .as_deref()
                .unwrap_or("")
                .starts_with("/etc/dcgm-exporter/")
    });
    let mut envs = merge_env("spec.dcgmExporter.env", base, Some(&user))?;
    let mut mounts = vec![
        mount_ro(vol::POD_RESOURCES, "/var/lib/kubelet/pod-resources"),
        mount(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        json!({ "name": vol::DRIVER_ROOT, "mountPath": names::DRIVER_ROOT_DIR, "readOnly": true, "mountPropagation": "HostToContainer" }),
    ];
    let kubelet = spec.kubelet_root_dir().trim_end_matches('/');
    ds.volume(host_volume(
        vol::POD_RESOURCES,
        &format!("{kubelet}/pod-resources"),
        "Directory",
    ));
    ds.volume(driver_root_volume(ctx));
    if let Some(cm) = custom_csv {
        envs.push(env("DCGM_EXPORTER_COLLECTORS", METRICS_CSV));
        mounts.push(json!({ "name": "metrics-config", "mountPath": METRICS_CSV, "subPath": "dcgm-metrics.csv", "readOnly": true }));
        ds.volume(super::pod::config_map_volume("metrics-config", cm, false));
    }
    if let Some(h) = e
        .hpc_job_mapping
        .as_ref()
        .filter(|h| h.enabled == Some(true))
    {
        let dir = h
            .directory
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or(defaults::HPC_JOB_MAPPING_DIR);
        envs.push(env("DCGM_HPC_JOB_MAPPING_DIR", dir));
        mounts.push(mount("hpc-job-mapping", dir));
        ds.volume(host_volume("hpc-job-mapping", dir, "DirectoryOrCreate"));
    }
    if e.enable_pod_labels == Some(true) {
        envs.push(env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"));
    }
    if e.enable_pod_uid == Some(true) {
        envs.push(env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", "true"));
    }
    if let Some(r) = e
        .pod_label_allowlist_regex
        .as_ref()
        .filter(|r| !r.is_empty())
    {
        envs.push(env(
            "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
            &r.join(","),
        ));
    }
    let mut c = Container::new(EXPORTER, image::gantry(ctx, Some(&e.image)));
    c.image_spec = Some(&e.image);
    c.command = ["gantry", "node", "exporter", "-a"]
        .map(String::from)
        .to_vec();
    c.command.push(format!(":{EXPORTER_PORT}"));
    c.env = envs;
    c.mounts = mounts;
    c.privileged = true;
    c.settings = Some(("spec.dcgmExporter", &e.container));
    c.extra.insert(
        "ports".into(),
        json!([{ "name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP" }]),
    );
    ds.containers.push(c.json()?);
    ds.host_pid = e.host_pid == Some(true);
    ds.host_network = e.container.host_network == Some(true);
    ds.pull_secrets.push(&e.image);
    for (k, v) in e.annotations.iter().flatten() {
        ds.pod_annotations.insert(k.clone(), v.as_str().into());
    }
    out.push(ds.json(ctx)?);

    let selector = app_selector(EXPORTER);
    let mut svc = Map::new();
    let service = e.service.as_ref();
    if let Some(t) = service
        .and_then(|s| s.type_.as_deref())
        .filter(|t| !t.is_empty())
    {
        svc.insert("type".into(), t.into());
    }
    if let Some(p) = service
        .and_then(|s| s.internal_traffic_policy.as_deref())
        .filter(|p| !p.is_empty())
    {
        svc.insert("internalTrafficPolicy".into(), p.into());
    }
    svc.insert(
        "ports".into(),
        json!([{ "name": EXPORTER_PORT_NAME, "port": EXPORTER_PORT, "targetPort": EXPORTER_PORT, "protocol": "TCP" }]),
    );
    out.push(ctx.service(
        EXPORTER,
        &selector,
        svc,
        Some(json!({ "prometheus.io/scrape": "true" })),
    )?);
    if ctx.facts.has_service_monitor_crd && spec.dcgm_exporter_service_monitor_enabled() {
        out.push(service_monitor(
            ctx,
            EXPORTER,
            EXPORTER_PORT_NAME,
            &selector,
            e.service_monitor.as_ref(),
            "spec.dcgmExporter.serviceMonitor",
        )?);
    }
    Ok(out)
}
