//! Containers of Gantry's own image that run a control-plane component (`gantry operator …`,
//! `gantry scheduler …`, as the Helm chart's Deployments do) are run in-process, as a pod's
//! container would run on a real node:
//! - the component talks to the API server as the pod's ServiceAccount, with a token the
//!   kubelet gets from the TokenRequest API bound to the pod (so RBAC applies to it); a pod
//!   with `automountServiceAccountToken: false` gets no client;
//! - its args and env are the container's (downward-API env resolved);
//! - ConfigMap and Secret volumes it mounts are written under the node's host directory, and
//!   paths under a mount point in its args and env are mapped there;
//! - a container port it serves is a loopback port of its own, published on the pod
//!   ([`Ports`]) so a Service reaches it (see `apiserver::services`).
//!
//! The sim does not know how to parse a component's flags: whoever owns them (the `gantry`
//! binary) registers a [`ComponentRunner`] per subcommand with [`register`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gantry_api::names;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use super::in_process::{AgentContext, AgentFuture, AgentRegistry};

/// Agent registry key of a component's runner: `component:<subcommand>`.
pub const KEY_PREFIX: &str = "component:";
/// How long a component's token lasts (the sim's kubelet does not rotate tokens).
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

/// What a component gets instead of a container.
pub struct ComponentContext {
    /// Authenticated as the pod's ServiceAccount; default namespace: the pod's. `None` when
    /// the pod mounts no token (`automountServiceAccountToken: false`).
    pub client: Option<kube::Client>,
    /// Everything after `gantry <subcommand>`, with mounted paths mapped to the host.
    pub args: Vec<String>,
    /// The container's env (downward API resolved), with mounted paths mapped.
    pub env: BTreeMap<String, String>,
    pub pod_name: String,
    pub pod_namespace: String,
    pub node_name: String,
    /// Flips to `true` when the pod stops (SIGTERM).
    pub shutdown: watch::Receiver<bool>,
    /// Where the component says which loopback address serves a container port.
    pub ports: Ports,
}

impl ComponentContext {
    /// The API client, or why `gantry <what>` cannot have one.
    pub fn client(&self, what: &str) -> Result<kube::Client, String> {
        self.client.clone().ok_or_else(|| {
            format!("gantry {what} needs the API: the pod sets automountServiceAccountToken: false")
        })
    }
}

/// Publishes, on the component's pod, the loopback address that serves one of its container
/// ports (`sim.gantry.dev/port-<containerPort>`), as the kubelet's own write.
#[derive(Clone)]
pub struct Ports {
    kubelet: kube::Client,
    namespace: String,
    pod: String,
}

impl Ports {
    pub async fn publish(&self, container_port: u16, address: SocketAddr) -> Result<(), String> {
        let key = format!("{}{container_port}", names::ANNOTATION_SIM_PORT_PREFIX);
        let mut annotations = serde_json::Map::new();
        annotations.insert(key.clone(), json!(address.to_string()));
        let patch = json!({"metadata": {"annotations": annotations}});
        Api::<Pod>::namespaced(self.kubelet.clone(), &self.namespace)
            .patch(&self.pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "publishing {key} on pod {}/{}: {e}",
                    self.namespace, self.pod
                )
            })
    }
}

/// Runs one component until it ends or `ctx.shutdown` flips; `Err` fails the container.
pub type ComponentRunner = Arc<dyn Fn(ComponentContext) -> AgentFuture + Send + Sync>;

/// Whether `image` is Gantry's (any registry and tag: the last path segment is `gantry`).
pub fn is_gantry_image(image: &str) -> bool {
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    last.split(':').next() == Some("gantry")
}

/// `(subcommand, args)` when the container runs Gantry's image with `gantry <subcommand> …`.
pub fn component_command(c: &Container) -> Option<(String, Vec<String>)> {
    if !is_gantry_image(c.image.as_deref().unwrap_or_default()) {
        return None;
    }
    let words: Vec<&String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .collect();
    let (first, rest) = words.split_first()?;
    // The image's entrypoint is `gantry`: without a command the args are its arguments.
    let rest = if first.rsplit('/').next() == Some("gantry") {
        rest
    } else if c.command.is_none() {
        &words[..]
    } else {
        return None;
    };
    let (sub, args) = rest.split_first()?;
    Some((
        sub.to_string(),
        args.iter().map(|s| s.to_string()).collect(),
    ))
}

/// The registry key for a container, if it runs a component.
pub fn key(c: &Container) -> Option<(String, Vec<String>)> {
    component_command(c).map(|(sub, args)| (format!("{KEY_PREFIX}{sub}"), args))
}

/// Register `runners` (by subcommand) into the kubelet's agent registry. `base` is how a pod
/// reaches the API server (URL and CA); its credentials are replaced by the pod's token.
pub fn register(
    registry: &mut AgentRegistry,
    base: kube::Config,
    runners: BTreeMap<String, ComponentRunner>,
) {
    let base = Arc::new(base);
    for (sub, runner) in runners {
        let base = base.clone();
        registry.register(
            &format!("{KEY_PREFIX}{sub}"),
            Arc::new(move |ctx: AgentContext| -> AgentFuture {
                let (base, runner, sub) = (base.clone(), runner.clone(), sub.clone());
                Box::pin(async move {
                    let cctx = prepare(&base, &sub, ctx).await?;
                    runner(cctx).await
                })
            }),
        );
    }
}

/// Map `value` through the mounts: a path under a mount point is moved to its host dir.
fn map_path(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, host) in mounts {
        let m = mount.trim_end_matches('/');
        if value == m {
            return host.display().to_string();
        }
        if let Some(rest) = value.strip_prefix(&format!("{m}/")) {
            return host.join(rest).display().to_string();
        }
    }
    value.to_string()
}

/// `--flag=PATH` and bare `PATH` arguments, mapped.
pub fn map_args(args: &[String], mounts: &[(String, PathBuf)]) -> Vec<String> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((flag, v)) if flag.starts_with('-') => format!("{flag}={}", map_path(v, mounts)),
            _ => map_path(a, mounts),
        })
        .collect()
}

async fn prepare(
    base: &kube::Config,
    sub: &str,
    ctx: AgentContext,
) -> Result<ComponentContext, String> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.pod_namespace);
    let pod = pods
        .get(&ctx.pod_name)
        .await
        .map_err(|e| format!("reading pod {}/{}: {e}", ctx.pod_namespace, ctx.pod_name))?;
    let spec = pod.spec.clone().unwrap_or_default();
    let client = if spec.automount_service_account_token == Some(false) {
        None
    } else {
        let sa = spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let token = request_token(&ctx.client, &pod, &sa).await?;
        let mut cfg = base.clone();
        cfg.auth_info = Default::default();
        cfg.auth_info.token = Some(token.into());
        cfg.default_namespace = ctx.pod_namespace.clone();
        Some(kube::Client::try_from(cfg).map_err(|e| format!("API client: {e}"))?)
    };
    let container = spec
        .containers
        .iter()
        .find(|c| key(c).is_some_and(|(k, a)| k == format!("{KEY_PREFIX}{sub}") && a == ctx.args));
    let mounts = match container {
        Some(c) => mount_volumes(&ctx, &pod, c).await?,
        None => Vec::new(),
    };
    let ports = Ports {
        kubelet: ctx.client.clone(),
        namespace: ctx.pod_namespace.clone(),
        pod: ctx.pod_name.clone(),
    };
    Ok(ComponentContext {
        client,
        args: map_args(&ctx.args, &mounts),
        env: ctx
            .env
            .iter()
            .map(|(k, v)| (k.clone(), map_path(v, &mounts)))
            .collect(),
        pod_name: ctx.pod_name,
        pod_namespace: ctx.pod_namespace,
        node_name: ctx.node_name,
        shutdown: ctx.shutdown,
        ports,
    })
}

/// The pod's ServiceAccount token, bound to the pod, as the kubelet requests it.
async fn request_token(client: &kube::Client, pod: &Pod, sa: &str) -> Result<String, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                     "name": pod.metadata.name, "uid": pod.metadata.uid}}});
    let r: serde_json::Value = api
        .create_subresource("token", sa, &PostParams::default(), &body)
        .await
        .map_err(|e| format!("token for serviceaccount {ns}/{sa}: {e}"))?;
    r.pointer("/status/token")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            format!("token for serviceaccount {ns}/{sa}: the answer has no status.token")
        })
}

/// The files of a ConfigMap or Secret volume: every key, or only the listed `items`.
fn volume_files(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
) -> Vec<(String, Vec<u8>)> {
    match items {
        Some(items) => items
            .iter()
            .filter_map(|i| data.get(&i.key).map(|v| (i.path.clone(), v.clone())))
            .collect(),
        None => data.into_iter().collect(),
    }
}

/// The data of the ConfigMap or Secret volume `v` names (`None`: not a ConfigMap or Secret
/// volume), as the kubelet reads it: a missing optional source is empty.
async fn volume_data(
    ctx: &AgentContext,
    v: &k8s_openapi::api::core::v1::Volume,
) -> Result<Option<(String, Vec<(String, Vec<u8>)>)>, String> {
    let ns = &ctx.pod_namespace;
    if let Some(src) = &v.config_map {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
        let data = match api.get_opt(&src.name).await {
            Ok(Some(cm)) => cm.data.unwrap_or_default(),
            Ok(None) if src.optional == Some(true) => Default::default(),
            Ok(None) => {
                return Err(format!(
                    "configmap {:?} (volume {:?}) not found",
                    src.name, v.name
                ));
            }
            Err(e) => return Err(format!("reading configmap {:?}: {e}", src.name)),
        };
        let data = data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
        let files = volume_files(data, src.items.as_ref());
        return Ok(Some(("kubernetes.io~configmap".into(), files)));
    }
    if let Some(src) = &v.secret {
        let name = src.secret_name.clone().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
        let data = match api.get_opt(&name).await {
            Ok(Some(s)) => s.data.unwrap_or_default(),
            Ok(None) if src.optional == Some(true) => Default::default(),
            Ok(None) => return Err(format!("secret {name:?} (volume {:?}) not found", v.name)),
            Err(e) => return Err(format!("reading secret {name:?}: {e}")),
        };
        let data = data.into_iter().map(|(k, v)| (k, v.0)).collect();
        let files = volume_files(data, src.items.as_ref());
        return Ok(Some(("kubernetes.io~secret".into(), files)));
    }
    Ok(None)
}

/// Writes the ConfigMap and Secret volumes `c` mounts under
/// `<host>/var/lib/kubelet/pods/<uid>/volumes/<plugin>/<volume>` (keys, or the listed `items`,
/// as files) and returns (mount path, host dir), longest first.
async fn mount_volumes(
    ctx: &AgentContext,
    pod: &Pod,
    c: &Container,
) -> Result<Vec<(String, PathBuf)>, String> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let dir = ctx
        .host_root
        .join("var/lib/kubelet/pods")
        .join(&uid)
        .join("volumes");
    let mut out = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            continue;
        };
        let Some((plugin, files)) = volume_data(ctx, v).await? else {
            continue;
        };
        let vdir = dir.join(plugin).join(&m.name);
        write_files(&vdir, &files).map_err(|e| format!("volume {:?}: {e}", m.name))?;
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => vdir.join(sub),
            None => vdir,
        };
        out.push((m.mount_path.clone(), host));
    }
    out.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    Ok(out)
}

fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, content) in files {
        // Keys are file names; `items[].path` may not climb out of the volume.
        if Path::new(name)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            continue;
        }
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, content)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(image: &str, command: Option<&[&str]>, args: &[&str]) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            command: command.map(|c| c.iter().map(|s| s.to_string()).collect()),
            args: Some(args.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn gantry_images_and_commands() {
        assert!(is_gantry_image("ghcr.io/gantry-dev/gantry:0.1.0"));
        assert!(is_gantry_image("registry.local:5000/team/gantry@sha256:ab"));
        assert!(!is_gantry_image("nvcr.io/nvidia/gantry-other:1"));
        assert!(!is_gantry_image("busybox"));
        let img = "ghcr.io/gantry-dev/gantry:0.1.0";
        assert_eq!(
            key(&c(
                img,
                Some(&["gantry"]),
                &["operator", "--leader-elect=false"]
            )),
            Some((
                "component:operator".into(),
                vec!["--leader-elect=false".into()]
            ))
        );
        assert_eq!(
            key(&c(img, Some(&["/usr/local/bin/gantry", "scheduler"]), &[])),
            Some(("component:scheduler".into(), vec![]))
        );
        // The entrypoint is gantry: args alone name the subcommand.
        assert_eq!(
            key(&c(img, None, &["scheduler"])).map(|k| k.0),
            Some("component:scheduler".into())
        );
        assert_eq!(
            key(&c(img, Some(&["sh"]), &["-c", "gantry operator"])),
            None
        );
        assert_eq!(key(&c("busybox", Some(&["gantry"]), &["operator"])), None);
    }

    #[test]
    fn mounted_paths_map_to_the_host() {
        let mounts = vec![
            ("/etc/gantry/extra".to_string(), PathBuf::from("/h/extra")),
            ("/etc/gantry".to_string(), PathBuf::from("/h/cfg")),
        ];
        assert_eq!(
            map_args(
                &[
                    "--config=/etc/gantry/config.yaml".into(),
                    "/etc/gantry/extra/x".into(),
                    "--n=1".into(),
                    "/etc/other".into()
                ],
                &mounts
            ),
            [
                "--config=/h/cfg/config.yaml",
                "/h/extra/x",
                "--n=1",
                "/etc/other"
            ]
        );
    }

    #[test]
    fn volume_files_stay_inside() {
        let d = tempfile::tempdir().unwrap();
        write_files(
            d.path(),
            &[
                ("a.yaml".into(), b"x".to_vec()),
                ("../evil".into(), b"y".to_vec()),
            ],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("a.yaml")).unwrap(),
            "x"
        );
        assert!(!d.path().parent().unwrap().join("evil").exists());
    }
}
