//! Checks of the spec the render relies on. The first problem found is returned, naming the
//! field and what is allowed, so the reconciler can put it in a condition as is.

use std::collections::BTreeMap;

use gantry_api::cluster_policy::ClusterPolicySpec;
use gantry_api::common::{ContainerProbeSpec, ContainerSettings, ImageSpec};

use super::RenderError;

fn err(path: impl Into<String>, message: impl Into<String>) -> RenderError {
    RenderError {
        path: path.into(),
        message: message.into(),
    }
}

/// Every check, in spec order.
pub(crate) fn validate(spec: &ClusterPolicySpec) -> Result<(), RenderError> {
    if let Some((path, message)) = spec.validate().into_iter().next() {
        return Err(err(path, message));
    }
    let ds = &spec.daemonsets;
    if let Some(m) = ds
        .rolling_update
        .as_ref()
        .and_then(|r| r.max_unavailable.as_deref())
    {
        let t = m.trim();
        if t == "0" || t == "0%" {
            return Err(err(
                "spec.daemonsets.rollingUpdate.maxUnavailable",
                "must be at least 1 (or a percentage above 0%) for a RollingUpdate, got \"0\"",
            ));
        }
    }
    if let Some(p) = ds.priority_class_name.as_deref().filter(|p| !p.is_empty()) {
        dns_name("spec.daemonsets.priorityClassName", p)?;
    }
    labels("spec.daemonsets.labels", ds.labels.as_ref())?;
    labels_keys("spec.daemonsets.annotations", ds.annotations.as_ref())?;
    if let Some(rc) = spec
        .operator
        .runtime_class
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        dns_name("spec.operator.runtimeClass", rc)?;
    }

    image("spec.driver", &spec.driver.image)?;
    settings("spec.driver", &spec.driver.container)?;
    for (name, p) in [
        ("startupProbe", &spec.driver.startup_probe),
        ("livenessProbe", &spec.driver.liveness_probe),
        ("readinessProbe", &spec.driver.readiness_probe),
    ] {
        if let Some(p) = p {
            probe(&format!("spec.driver.{name}"), p)?;
        }
    }
    if let Some(m) = &spec.driver.manager {
        image("spec.driver.manager", &m.image)?;
    }
    if spec.driver_use_precompiled()
        && spec
            .driver
            .image
            .version
            .as_deref()
            .is_some_and(|v| v.starts_with("sha256:"))
    {
        return Err(err(
            "spec.driver.version",
            "a sha256 digest cannot be used with usePrecompiled: the tag carries the kernel version",
        ));
    }
    for (path, name) in [
        (
            "spec.driver.repoConfig.configMapName",
            spec.driver
                .repo_config
                .as_ref()
                .and_then(|c| c.config_map_name.as_deref()),
        ),
        (
            "spec.driver.certConfig.name",
            spec.driver
                .cert_config
                .as_ref()
                .and_then(|c| c.name.as_deref()),
        ),
        (
            "spec.driver.licensingConfig.secretName",
            spec.driver
                .licensing_config
                .as_ref()
                .and_then(|c| c.secret_name.as_deref()),
        ),
        (
            "spec.driver.licensingConfig.configMapName",
            spec.driver
                .licensing_config
                .as_ref()
                .and_then(|c| c.config_map_name.as_deref()),
        ),
        (
            "spec.driver.kernelModuleConfig.name",
            spec.driver
                .kernel_module_config
                .as_ref()
                .and_then(|c| c.name.as_deref()),
        ),
        (
            "spec.driver.virtualTopology.config",
            spec.driver
                .virtual_topology
                .as_ref()
                .and_then(|c| c.config.as_deref()),
        ),
        ("spec.driver.secretEnv", spec.driver.secret_env.as_deref()),
        (
            "spec.devicePlugin.config.name",
            spec.device_plugin
                .config
                .as_ref()
                .and_then(|c| c.name.as_deref()),
        ),
        (
            "spec.dcgmExporter.config.name",
            spec.dcgm_exporter
                .config
                .as_ref()
                .and_then(|c| c.name.as_deref()),
        ),
        (
            "spec.migManager.config.name",
            spec.mig_manager
                .as_ref()
                .and_then(|m| m.config.as_ref())
                .and_then(|c| c.name.as_deref()),
        ),
        (
            "spec.migManager.gpuClientsConfig.name",
            spec.mig_manager
                .as_ref()
                .and_then(|m| m.gpu_clients_config.as_ref())
                .and_then(|c| c.name.as_deref()),
        ),
    ] {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            dns_name(path, n)?;
        }
    }
    if spec.device_plugin_config_default().is_some() && spec.device_plugin_config_name().is_none() {
        return Err(err(
            "spec.devicePlugin.config.default",
            "needs spec.devicePlugin.config.name: the default names a key of that ConfigMap",
        ));
    }
    if let Some(policy) = &spec.driver.upgrade_policy
        && let Some(n) = policy.max_parallel_upgrades
        && n < 0
    {
        return Err(err(
            "spec.driver.upgradePolicy.maxParallelUpgrades",
            format!("must be >= 0 (0 = unlimited), got {n}"),
        ));
    }

    for (path, img, s) in [
        ("spec.toolkit", &spec.toolkit.image, &spec.toolkit.container),
        (
            "spec.devicePlugin",
            &spec.device_plugin.image,
            &spec.device_plugin.container,
        ),
        ("spec.dcgm", &spec.dcgm.image, &spec.dcgm.container),
        (
            "spec.dcgmExporter",
            &spec.dcgm_exporter.image,
            &spec.dcgm_exporter.container,
        ),
        ("spec.gfd", &spec.gfd.image, &spec.gfd.container),
        (
            "spec.nodeStatusExporter",
            &spec.node_status_exporter.image,
            &spec.node_status_exporter.container,
        ),
    ] {
        image(path, img)?;
        settings(path, s)?;
    }
    if let Some(svc) = &spec.dcgm_exporter.service {
        if let Some(t) = svc.type_.as_deref().filter(|t| !t.is_empty())
            && !["ClusterIP", "NodePort", "LoadBalancer"].contains(&t)
        {
            return Err(err(
                "spec.dcgmExporter.service.type",
                format!("must be ClusterIP, NodePort or LoadBalancer, got {t:?}"),
            ));
        }
        if let Some(p) = svc
            .internal_traffic_policy
            .as_deref()
            .filter(|p| !p.is_empty())
            && !["Cluster", "Local"].contains(&p)
        {
            return Err(err(
                "spec.dcgmExporter.service.internalTrafficPolicy",
                format!("must be Cluster or Local, got {p:?}"),
            ));
        }
    }
    if let Some(p) = spec.dcgm.host_port
        && !(1..=65535).contains(&p)
    {
        return Err(err(
            "spec.dcgm.hostPort",
            format!("must be a port 1-65535, got {p}"),
        ));
    }
    let optional: [(&str, Option<(&ImageSpec, &ContainerSettings)>); 10] = [
        (
            "spec.migManager",
            spec.mig_manager.as_ref().map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.validator",
            spec.validator.as_ref().map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.gds",
            spec.gds.as_ref().map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.gdrcopy",
            spec.gdrcopy.as_ref().map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.vgpuManager",
            spec.vgpu_manager.as_ref().map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.vgpuDeviceManager",
            spec.vgpu_device_manager
                .as_ref()
                .map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.vfioManager",
            spec.vfio_manager.as_ref().map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.sandboxDevicePlugin",
            spec.sandbox_device_plugin
                .as_ref()
                .map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.kataSandboxDevicePlugin",
            spec.kata_sandbox_device_plugin
                .as_ref()
                .map(|c| (&c.image, &c.container)),
        ),
        (
            "spec.ccManager",
            spec.cc_manager.as_ref().map(|c| (&c.image, &c.container)),
        ),
    ];
    for (path, section) in optional {
        if let Some((img, s)) = section {
            image(path, img)?;
            settings(path, s)?;
        }
    }
    Ok(())
}

/// Image block: well-formed strings, and either all of repository/image/version or image
/// alone (as a full reference).
pub(crate) fn image(path: &str, i: &ImageSpec) -> Result<(), RenderError> {
    fn set(s: &Option<String>) -> Option<&str> {
        s.as_deref().filter(|v| !v.is_empty())
    }
    let (repo, img, version) = (set(&i.repository), set(&i.image), set(&i.version));
    if let Some(r) = repo
        && (r.chars().any(|c| c.is_whitespace() || c == '@') || r.ends_with('/'))
    {
        return Err(err(
            format!("{path}.repository"),
            format!(
                "must be a registry path like \"nvcr.io/nvidia\" (no spaces, '@' or trailing '/'), got {r:?}"
            ),
        ));
    }
    if let Some(name) = img {
        let alone = repo.is_none() && version.is_none();
        let ok = if alone {
            !name.chars().any(char::is_whitespace)
        } else {
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        if !ok {
            return Err(err(
                format!("{path}.image"),
                format!(
                    "must be an image name of letters, digits and '-' (or, alone, a whole reference without spaces), got {name:?}"
                ),
            ));
        }
    }
    if let Some(v) = version {
        let ok = match v.strip_prefix("sha256:") {
            Some(hex) => hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()),
            None => {
                v.len() <= 128
                    && v.chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            }
        };
        if !ok {
            return Err(err(
                format!("{path}.version"),
                format!(
                    "must be an image tag ([A-Za-z0-9_.-], up to 128 characters) or a digest \"sha256:<64 hex digits>\", got {v:?}"
                ),
            ));
        }
    }
    let missing: Vec<&str> = [("repository", repo), ("image", img), ("version", version)]
        .into_iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k)
        .collect();
    if (repo.is_some() || version.is_some()) && !missing.is_empty() {
        return Err(err(
            format!("{path}.{}", missing[0]),
            "missing: set repository, image and version together, or image alone as a full reference",
        ));
    }
    Ok(())
}

/// Resources must be quantities (no negatives).
fn settings(path: &str, s: &ContainerSettings) -> Result<(), RenderError> {
    let Some(r) = &s.resources else { return Ok(()) };
    for (kind, list) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in list.iter().flatten() {
            if !quantity(&q.0) {
                return Err(err(
                    format!("{path}.resources.{kind}.{name}"),
                    format!(
                        "must be a non-negative quantity like \"100m\", \"2Gi\" or \"1\", got {:?}",
                        q.0
                    ),
                ));
            }
        }
    }
    for (i, e) in s.env.iter().flatten().enumerate() {
        if e.name.is_empty() {
            return Err(err(format!("{path}.env[{i}].name"), "must not be empty"));
        }
    }
    Ok(())
}

/// A Kubernetes quantity (the shared parser) that is not negative.
fn quantity(q: &str) -> bool {
    gantry_k8s_rules::Quantity::parse(q).is_ok_and(|q| !q.is_negative())
}

fn probe(path: &str, p: &ContainerProbeSpec) -> Result<(), RenderError> {
    if let Some(v) = p.initial_delay_seconds
        && v < 0
    {
        return Err(err(
            format!("{path}.initialDelaySeconds"),
            format!("must be >= 0, got {v}"),
        ));
    }
    for (name, v) in [
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if let Some(v) = v
            && v < 1
        {
            return Err(err(
                format!("{path}.{name}"),
                format!("must be >= 1, got {v}"),
            ));
        }
    }
    Ok(())
}

/// DNS-1123 subdomain (object names).
fn dns_name(path: &str, n: &str) -> Result<(), RenderError> {
    let ok = n.len() <= 253
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(err(
            path,
            format!(
                "must be a Kubernetes object name (lowercase letters, digits, '-' and '.'), got {n:?}"
            ),
        ))
    }
}

fn label_key_ok(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    }) && label_value_ok(name)
        && !name.is_empty()
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn labels_keys(path: &str, m: Option<&BTreeMap<String, String>>) -> Result<(), RenderError> {
    for k in m.into_iter().flatten().map(|(k, _)| k) {
        if !label_key_ok(k) {
            return Err(err(
                format!("{path}.{k}"),
                "is not a valid key: [prefix/]name, name up to 63 of [A-Za-z0-9-_.]",
            ));
        }
    }
    Ok(())
}

fn labels(path: &str, m: Option<&BTreeMap<String, String>>) -> Result<(), RenderError> {
    labels_keys(path, m)?;
    for (k, v) in m.into_iter().flatten() {
        if !label_value_ok(v) {
            return Err(err(
                format!("{path}.{k}"),
                format!(
                    "is not a valid label value (up to 63 of [A-Za-z0-9-_.], alphanumeric at both ends), got {v:?}"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for ok in ["1", "100m", "2Gi", "0.5", "1e3", "128974848", "1.5G"] {
            assert!(quantity(ok), "{ok}");
        }
        for bad in ["-1", "", "abc", "1..2", "2gb", "1e", "Gi"] {
            assert!(!quantity(bad), "{bad}");
        }
    }

    #[test]
    fn image_blocks() {
        let full = ImageSpec {
            repository: Some("nvcr.io/nvidia".into()),
            image: Some("driver".into()),
            version: Some("595.91.07".into()),
            ..Default::default()
        };
        assert!(image("p", &full).is_ok());
        let mut partial = full.clone();
        partial.version = None;
        assert_eq!(image("p", &partial).unwrap_err().path, "p.version");
        let mut bad = full.clone();
        bad.version = Some("bad tag".into());
        assert_eq!(image("p", &bad).unwrap_err().path, "p.version");
        bad.version = Some("sha256:abc".into());
        assert_eq!(image("p", &bad).unwrap_err().path, "p.version");
        let alone = ImageSpec {
            image: Some("reg.example/x/driver:1@sha256:00".into()),
            ..Default::default()
        };
        assert!(image("p", &alone).is_ok());
    }
}
