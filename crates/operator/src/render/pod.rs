//! Pod-level building blocks: env, volumes, containers, and the operand DaemonSet with the
//! `daemonsets.*` common settings applied.

use gantry_api::cluster_policy::UpdateStrategy;
use gantry_api::common::{ContainerSettings, ImageSpec};
use gantry_api::names;
use k8s_openapi::api::core::v1::EnvVar;
use serde_json::{Map, Value, json};

use super::RenderError;
use super::meta::{Ctx, to_json};

/// Mount points inside operand containers.
pub(crate) const HOST_ROOT_MOUNT: &str = "/host";
pub(crate) const DRIVER_ROOT_MOUNT: &str = names::DRIVER_ROOT_DIR;

pub(crate) fn env(name: &str, value: &str) -> Value {
    json!({ "name": name, "value": value })
}

/// Env var from the downward API (`spec.nodeName`, `metadata.namespace`).
pub(crate) fn env_field(name: &str, field: &str) -> Value {
    json!({ "name": name, "valueFrom": { "fieldRef": { "fieldPath": field } } })
}

/// `NODE_NAME` and `OPERATOR_NAMESPACE`, which every Gantry agent reads.
pub(crate) fn node_env() -> Vec<Value> {
    vec![
        env_field("NODE_NAME", "spec.nodeName"),
        env_field("OPERATOR_NAMESPACE", "metadata.namespace"),
    ]
}

/// Upstream's env merge: a user var replaces the rendered one of the same name in place,
/// new names are appended in the user's order.
pub(crate) fn merge_env(
    path: &str,
    mut base: Vec<Value>,
    user: Option<&Vec<EnvVar>>,
) -> Result<Vec<Value>, RenderError> {
    for (i, e) in user.into_iter().flatten().enumerate() {
        let v = to_json(&format!("{path}[{i}]"), e)?;
        match base
            .iter_mut()
            .find(|b| b.get("name").and_then(Value::as_str) == Some(e.name.as_str()))
        {
            Some(slot) => *slot = v,
            None => base.push(v),
        }
    }
    Ok(base)
}

/// Value of a user env var, if set with a literal value.
pub(crate) fn user_env<'a>(user: Option<&'a Vec<EnvVar>>, name: &str) -> Option<&'a str> {
    user?.iter().find(|e| e.name == name)?.value.as_deref()
}

/// A hostPath volume.
pub(crate) fn host_volume(name: &str, path: &str, type_: &str) -> Value {
    if type_.is_empty() {
        json!({ "name": name, "hostPath": { "path": path } })
    } else {
        json!({ "name": name, "hostPath": { "path": path, "type": type_ } })
    }
}

pub(crate) fn config_map_volume(name: &str, config_map: &str, optional: bool) -> Value {
    json!({ "name": name, "configMap": { "name": config_map, "optional": optional } })
}

pub(crate) fn mount(name: &str, path: &str) -> Value {
    json!({ "name": name, "mountPath": path })
}

pub(crate) fn mount_ro(name: &str, path: &str) -> Value {
    json!({ "name": name, "mountPath": path, "readOnly": true })
}

/// A mount that shares host mounts both ways (the validations dir, `/run/nvidia`).
pub(crate) fn mount_bidi(name: &str, path: &str) -> Value {
    json!({ "name": name, "mountPath": path, "mountPropagation": "Bidirectional" })
}

/// Host paths most operands share, as volumes.
pub(crate) mod vol {
    pub const VALIDATIONS: &str = "run-nvidia-validations";
    pub const HOST_ROOT: &str = "host-root";
    pub const DRIVER_ROOT: &str = "driver-install-dir";
    pub const RUN_NVIDIA: &str = "run-nvidia";
    pub const DEVICE_PLUGINS: &str = "device-plugin";
    pub const POD_RESOURCES: &str = "pod-gpu-resources";
    pub const CDI: &str = "cdi-root";
    pub const MPS_ROOT: &str = "mps-root";
}

pub(crate) fn validations_volume() -> Value {
    host_volume(
        vol::VALIDATIONS,
        names::VALIDATIONS_DIR,
        "DirectoryOrCreate",
    )
}

pub(crate) fn host_root_volume(ctx: &Ctx<'_>) -> Value {
    host_volume(vol::HOST_ROOT, ctx.spec.host_root(), "")
}

pub(crate) fn driver_root_volume(ctx: &Ctx<'_>) -> Value {
    host_volume(
        vol::DRIVER_ROOT,
        ctx.spec.driver_install_dir(),
        "DirectoryOrCreate",
    )
}

/// Where an agent finds the driver root inside its container: the driver container's
/// install dir when the operator manages the driver (through the ClusterPolicy or through
/// NVIDIADriver CRs), else the host root.
pub(crate) fn driver_root_in_container(ctx: &Ctx<'_>) -> &'static str {
    if ctx.spec.driver_enabled() {
        DRIVER_ROOT_MOUNT
    } else {
        HOST_ROOT_MOUNT
    }
}

/// A container.
pub(crate) struct Container<'a> {
    pub name: &'a str,
    pub image: String,
    /// The CR image block the pull policy comes from (`None`: `IfNotPresent`).
    pub image_spec: Option<&'a ImageSpec>,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<Value>,
    pub mounts: Vec<Value>,
    pub privileged: bool,
    /// CR resources / extra args (appended to `args`), with the field path for errors.
    pub settings: Option<(&'a str, &'a ContainerSettings)>,
    /// Further fields (`ports`, probes, `lifecycle`, `envFrom`, ...).
    pub extra: Map<String, Value>,
}

impl<'a> Container<'a> {
    pub fn new(name: &'a str, image: String) -> Self {
        Container {
            name,
            image,
            image_spec: None,
            command: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            mounts: Vec::new(),
            privileged: false,
            settings: None,
            extra: Map::new(),
        }
    }

    pub fn json(self) -> Result<Value, RenderError> {
        let mut m = Map::new();
        m.insert("name".into(), self.name.into());
        m.insert("image".into(), self.image.into());
        let policy = self
            .image_spec
            .map_or("IfNotPresent", ImageSpec::pull_policy);
        m.insert("imagePullPolicy".into(), policy.into());
        let mut args = self.args;
        if let Some((path, s)) = self.settings {
            args.extend(s.args.iter().flatten().cloned());
            if let Some(r) = &s.resources {
                m.insert(
                    "resources".into(),
                    to_json(&format!("{path}.resources"), r)?,
                );
            }
        }
        if self.command.first().is_some_and(|c| c == "gantry") {
            // A Gantry agent writes no termination-log file: its last log lines (clap's
            // message for a rejected flag, the error it stopped on) go into the status.
            m.insert(
                "terminationMessagePolicy".into(),
                "FallbackToLogsOnError".into(),
            );
        }
        if !self.command.is_empty() {
            m.insert("command".into(), json!(self.command));
        }
        if !args.is_empty() {
            m.insert("args".into(), json!(args));
        }
        if !self.env.is_empty() {
            m.insert("env".into(), Value::Array(self.env));
        }
        if !self.mounts.is_empty() {
            m.insert("volumeMounts".into(), Value::Array(self.mounts));
        }
        if self.privileged {
            // Root explicitly: a privileged agent reaches host paths (kubelet sockets, driver
            // files), and Gantry's own image runs as a non-root user by default.
            m.insert(
                "securityContext".into(),
                json!({ "privileged": true, "runAsUser": 0 }),
            );
        }
        m.extend(self.extra);
        Ok(Value::Object(m))
    }
}

/// One operand DaemonSet.
pub(crate) struct DaemonSet<'a> {
    pub name: String,
    /// `app` label and selector (upstream's, which external tools select on).
    pub app: String,
    /// The `nvidia.com/gpu.deploy.<operand>` key that must be `true`.
    pub operand: &'a str,
    /// Further nodeSelector entries (OS, kernel, `mps.capable`).
    pub node_selector: Vec<(String, String)>,
    pub service_account: &'a str,
    pub init: Vec<Value>,
    pub containers: Vec<Value>,
    pub volumes: Vec<Value>,
    pub host_pid: bool,
    pub host_network: bool,
    /// Set `runtimeClassName` to the operator's RuntimeClass (pods that need GPUs).
    pub runtime_class: bool,
    /// Image blocks whose pull secrets the pod gets.
    pub pull_secrets: Vec<&'a ImageSpec>,
    /// Driver-type DaemonSets are always `OnDelete` (the upgrade controller restarts them).
    pub on_delete: bool,
    pub labels: Map<String, Value>,
    pub pod_annotations: Map<String, Value>,
    pub extra_pod_spec: Map<String, Value>,
}

impl<'a> DaemonSet<'a> {
    pub fn new(name: &str, operand: &'a str, service_account: &'a str) -> Self {
        DaemonSet {
            name: name.to_string(),
            app: name.to_string(),
            operand,
            node_selector: Vec::new(),
            service_account,
            init: Vec::new(),
            containers: Vec::new(),
            volumes: Vec::new(),
            host_pid: false,
            host_network: false,
            runtime_class: false,
            pull_secrets: Vec::new(),
            on_delete: false,
            labels: Map::new(),
            pod_annotations: Map::new(),
            extra_pod_spec: Map::new(),
        }
    }

    /// Add a volume unless one of that name is there already.
    pub fn volume(&mut self, v: Value) {
        let name = v.get("name").cloned();
        if !self.volumes.iter().any(|x| x.get("name") == name.as_ref()) {
            self.volumes.push(v);
        }
    }

    pub fn json(self, ctx: &Ctx<'_>) -> Result<Value, RenderError> {
        let ds = &ctx.spec.daemonsets;
        // User labels first; the ones the operator selects on always win.
        let mut labels: Map<String, Value> = ds
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        labels.extend(self.labels);
        labels.insert(names::LABEL_APP.into(), self.app.clone().into());
        labels.insert(names::LABEL_APP_PART_OF.into(), "gantry".into());
        labels.extend(ctx.base_labels());

        let mut annotations: Map<String, Value> = ds
            .annotations
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut pod_annotations = annotations.clone();
        pod_annotations.extend(self.pod_annotations);

        let mut selector = Map::new();
        selector.insert(
            format!("{}{}", names::LABEL_DEPLOY_PREFIX, self.operand),
            "true".into(),
        );
        for (k, v) in self.node_selector {
            selector.insert(k, v.into());
        }

        let tolerations = match ds.tolerations.as_ref().filter(|t| !t.is_empty()) {
            Some(t) => to_json("spec.daemonsets.tolerations", t)?,
            None => {
                json!([{ "key": names::TAINT_GPU, "operator": "Exists", "effect": "NoSchedule" }])
            }
        };

        let mut secrets: Vec<String> = Vec::new();
        for s in self
            .pull_secrets
            .iter()
            .flat_map(|i| i.image_pull_secrets.iter().flatten())
        {
            if !s.is_empty() && !secrets.contains(s) {
                secrets.push(s.clone());
            }
        }

        let mut pod = Map::new();
        pod.insert("serviceAccountName".into(), self.service_account.into());
        pod.insert("nodeSelector".into(), Value::Object(selector));
        pod.insert("tolerations".into(), tolerations);
        if let Some(p) = ds.priority_class_name.as_deref().filter(|p| !p.is_empty()) {
            pod.insert("priorityClassName".into(), p.into());
        }
        if let Some(sc) = &ds.pod_security_context {
            pod.insert(
                "securityContext".into(),
                to_json("spec.daemonsets.podSecurityContext", sc)?,
            );
        }
        if self.runtime_class && !ctx.spec.cdi_nri_plugin_enabled() {
            pod.insert("runtimeClassName".into(), ctx.spec.runtime_class().into());
        }
        if self.host_pid {
            pod.insert("hostPID".into(), true.into());
        }
        if self.host_network {
            pod.insert("hostNetwork".into(), true.into());
            pod.insert("dnsPolicy".into(), "ClusterFirstWithHostNet".into());
        }
        if !secrets.is_empty() {
            let refs: Vec<Value> = secrets.iter().map(|s| json!({ "name": s })).collect();
            pod.insert("imagePullSecrets".into(), Value::Array(refs));
        }
        if !self.init.is_empty() {
            pod.insert("initContainers".into(), Value::Array(self.init));
        }
        pod.insert("containers".into(), Value::Array(self.containers));
        if !self.volumes.is_empty() {
            pod.insert("volumes".into(), Value::Array(self.volumes));
        }
        pod.extend(self.extra_pod_spec);

        let strategy = if self.on_delete || ctx.spec.update_strategy() == UpdateStrategy::OnDelete {
            json!({ "type": "OnDelete" })
        } else {
            json!({
                "type": "RollingUpdate",
                "rollingUpdate": { "maxUnavailable": max_unavailable(ctx.spec.rolling_update_max_unavailable()) },
            })
        };

        let mut template_meta = Map::new();
        template_meta.insert("labels".into(), Value::Object(labels.clone()));
        if !pod_annotations.is_empty() {
            template_meta.insert("annotations".into(), Value::Object(pod_annotations));
        }
        let mut meta = ctx.meta(&self.name, true, &labels)?;
        if !annotations.is_empty()
            && let Some(m) = meta.as_object_mut()
        {
            m.insert(
                "annotations".into(),
                Value::Object(std::mem::take(&mut annotations)),
            );
        }
        Ok(json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": meta,
            "spec": {
                "selector": { "matchLabels": { names::LABEL_APP: self.app } },
                "updateStrategy": strategy,
                "template": { "metadata": template_meta, "spec": pod },
            },
        }))
    }
}

/// `maxUnavailable` as Kubernetes wants it: an integer, or a percent string.
fn max_unavailable(v: &str) -> Value {
    match v.trim().parse::<i64>() {
        Ok(n) => n.into(),
        Err(_) => v.trim().into(),
    }
}
