//! The chart with the GPU Operator chart's own value keys (issue #19): values in the shape of
//! upstream's values.yaml (`fixtures/upstream/chart/gpu-operator-values.yaml`) render the
//! ClusterPolicy upstream's chart renders from them — `driver.upgradePolicy.gpuPodDeletion` as
//! `podDeletion`, `driver.nvidiaDriverCRD` as `useNvidiaDriverCRD` and the NVIDIADriver
//! `default`, every section's image keys, `extraObjects` — and `platform`, `nfd` and the NFD
//! sub-chart's values are accepted.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::chart::{chart, find, get, helm, render, run_helm};

type Result<T = ()> = anyhow::Result<T>;

fn upstream_values() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream/chart/gpu-operator-values.yaml")
}

macro_rules! helm_or_skip {
    () => {
        match helm() {
            Ok(p) => p,
            Err(why) => {
                eprintln!("skipping: {why}");
                return Ok(());
            }
        }
    };
}

fn assert_valid(doc: &Value) {
    let problems = gantry_api::validate::validate_value(doc);
    assert!(problems.is_empty(), "{problems:?}\n{doc:#}");
}

#[test]
fn upstream_values_render_as_upstreams_chart_would() -> Result {
    let helm = helm_or_skip!();
    let values = upstream_values();
    let values = values.to_string_lossy();
    let docs = render(helm, "g", "gpu-operator", &["-f", values.as_ref()])?;

    let cp = get(&docs, "ClusterPolicy", "cluster-policy")?;
    // Valid with unknown fields reported: no chart-only key (nvidiaDriverCRD, gpuPodDeletion,
    // config.create/data) leaks into the policy.
    assert_valid(cp);
    let driver = &cp["spec"]["driver"];
    assert_eq!(driver["useNvidiaDriverCRD"], true);
    assert!(driver.get("nvidiaDriverCRD").is_none(), "{driver}");
    let policy = &driver["upgradePolicy"];
    assert_eq!(
        policy["podDeletion"],
        json!({"force": true, "timeoutSeconds": 120, "deleteEmptyDir": true})
    );
    assert!(policy.get("gpuPodDeletion").is_none(), "{policy}");
    assert_eq!(policy["drain"]["timeoutSeconds"], 300);
    assert_eq!(policy["autoUpgrade"], true);

    // Each section's image keys land in the section, as upstream's template writes them.
    for (section, repository, image, version) in [
        ("driver", "nvcr.io/nvidia", "driver", "580.95.05"),
        (
            "toolkit",
            "nvcr.io/nvidia/k8s",
            "container-toolkit",
            "v1.18.0",
        ),
        (
            "devicePlugin",
            "nvcr.io/nvidia",
            "k8s-device-plugin",
            "v0.18.0",
        ),
        (
            "dcgmExporter",
            "nvcr.io/nvidia/k8s",
            "dcgm-exporter",
            "4.4.1-4.6.0-distroless",
        ),
        ("gfd", "nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
        (
            "migManager",
            "nvcr.io/nvidia/cloud-native",
            "k8s-mig-manager",
            "v0.13.0",
        ),
        ("validator", "nvcr.io/nvidia", "gpu-operator", "v25.10.1"),
        (
            "nodeStatusExporter",
            "nvcr.io/nvidia/cloud-native",
            "gpu-operator-validator",
            "v25.10.1",
        ),
        (
            "dcgm",
            "nvcr.io/nvidia/cloud-native",
            "dcgm",
            "4.4.1-2-ubuntu22.04",
        ),
        ("gds", "nvcr.io/nvidia/cloud-native", "nvidia-fs", "2.26.6"),
        ("gdrcopy", "nvcr.io/nvidia/cloud-native", "gdrdrv", "v2.5.1"),
        (
            "vgpuDeviceManager",
            "nvcr.io/nvidia/cloud-native",
            "vgpu-device-manager",
            "v0.4.1",
        ),
        ("vfioManager", "nvcr.io/nvidia", "cuda", "13.0.1-base-ubi9"),
        (
            "sandboxDevicePlugin",
            "nvcr.io/nvidia",
            "kubevirt-gpu-device-plugin",
            "v1.4.0",
        ),
        (
            "ccManager",
            "nvcr.io/nvidia/cloud-native",
            "k8s-cc-manager",
            "v0.1.1",
        ),
    ] {
        let s = &cp["spec"][section];
        assert_eq!(
            (&s["repository"], &s["image"], &s["version"]),
            (&json!(repository), &json!(image), &json!(version)),
            "{section}: {s}"
        );
    }
    assert_eq!(cp["spec"]["driver"]["manager"]["version"], "v0.9.0");

    // nvidiaDriverCRD.enabled + deployDefaultCR: the NVIDIADriver `default` from driver.*.
    let nvd = get(&docs, "NVIDIADriver", "default")?;
    assert_valid(nvd);
    let spec = &nvd["spec"];
    assert_eq!(
        (
            &spec["default"],
            &spec["driverType"],
            &spec["repository"],
            &spec["image"],
            &spec["version"]
        ),
        (
            &json!(true),
            &json!("gpu"),
            &json!("nvcr.io/nvidia"),
            &json!("driver"),
            &json!("580.95.05")
        )
    );
    assert_eq!(spec["upgradePolicy"]["podDeletion"]["force"], true);
    assert_eq!(spec["licensingConfig"], json!({"nlsEnabled": true}));
    assert!(spec.get("nodeSelector").is_none(), "{spec}");

    // extraObjects: rendered, templated.
    let extra = get(&docs, "ConfigMap", "g-site-notes")?;
    assert_eq!(extra["metadata"]["namespace"], "gpu-operator");
    assert_eq!(extra["data"]["owner"], "gpu-platform-team");

    // NFD is not a sub-chart here: nothing of it is rendered.
    assert!(
        docs.iter().all(|d| !d["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .contains("feature-discovery")),
        "an NFD object was rendered"
    );

    // helm lint with upstream's values, and the render through `gantry validate`.
    let out = run_helm(
        helm,
        &[
            "lint",
            "--strict",
            &chart().to_string_lossy(),
            "-f",
            values.as_ref(),
        ],
        &[],
    )?;
    assert!(out.contains("0 chart(s) failed"), "{out}");
    let text = run_helm(
        helm,
        &[
            "template",
            "g",
            &chart().to_string_lossy(),
            "-n",
            "gpu-operator",
            "-f",
            values.as_ref(),
        ],
        &[],
    )?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["validate", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(
        &mut child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?,
        text.as_bytes(),
    )?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.trim_end().ends_with("<stdin>: ok"), "{stdout}");
    Ok(())
}

#[test]
fn nvidia_driver_crd_and_pod_deletion_follow_values() -> Result {
    let helm = helm_or_skip!();
    // Off (the default): no NVIDIADriver, the policy's driver stays with the ClusterPolicy.
    let docs = render(helm, "g", "gpu", &[])?;
    assert!(find(&docs, "NVIDIADriver", "default").is_none());
    let driver = &get(&docs, "ClusterPolicy", "cluster-policy")?["spec"]["driver"];
    assert_eq!(driver["useNvidiaDriverCRD"], false);
    // The chart's own gpuPodDeletion defaults, as upstream's values.
    assert_eq!(
        driver["upgradePolicy"]["podDeletion"],
        json!({"force": false, "timeoutSeconds": 300, "deleteEmptyDir": false})
    );

    // With a nodeSelector the CR is not the default one (the CRD forbids both).
    let docs = render(
        helm,
        "g",
        "gpu",
        &[
            "--set",
            "driver.nvidiaDriverCRD.enabled=true",
            "--set",
            "driver.nvidiaDriverCRD.driverType=vgpu",
            "--set",
            "driver.nvidiaDriverCRD.nodeSelector.pool=a100",
            // The ClusterPolicy's own key is accepted as an alias and wins key by key.
            "--set",
            "driver.upgradePolicy.podDeletion.force=true",
        ],
    )?;
    let nvd = get(&docs, "NVIDIADriver", "default")?;
    assert_valid(nvd);
    assert_eq!(nvd["spec"]["default"], false);
    assert_eq!(nvd["spec"]["driverType"], "vgpu");
    assert_eq!(nvd["spec"]["nodeSelector"], json!({"pool": "a100"}));
    let cp = get(&docs, "ClusterPolicy", "cluster-policy")?;
    assert_valid(cp);
    assert_eq!(cp["spec"]["driver"]["useNvidiaDriverCRD"], true);
    assert_eq!(
        cp["spec"]["driver"]["upgradePolicy"]["podDeletion"],
        json!({"force": true, "timeoutSeconds": 300, "deleteEmptyDir": false})
    );

    // deployDefaultCR=false: the policy hands drivers to NVIDIADriver objects, none rendered.
    let docs = render(
        helm,
        "g",
        "gpu",
        &[
            "--set",
            "driver.nvidiaDriverCRD.enabled=true",
            "--set",
            "driver.nvidiaDriverCRD.deployDefaultCR=false",
        ],
    )?;
    assert!(find(&docs, "NVIDIADriver", "default").is_none());
    Ok(())
}
