//! The chart's CRDs, `helm lint`, values.schema.json and `gantry validate` on the render.

use super::*;

#[test]
fn chart_crds_are_the_generated_crds() -> Result {
    let generated: BTreeMap<String, String> = gantry_api::crds::crd_files()?.into_iter().collect();
    for dir in [chart().join("crds"), repo().join("deploy/crds")] {
        let mut on_disk = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            on_disk.insert(name, std::fs::read_to_string(&path)?);
        }
        assert_eq!(
            on_disk.keys().collect::<Vec<_>>(),
            generated.keys().collect::<Vec<_>>(),
            "{}: CRD files differ from `gantry crds`",
            dir.display()
        );
        for (name, body) in &generated {
            assert!(
                on_disk.get(name) == Some(body),
                "{}/{name} is stale: run `gantry crds --output-dir {}`",
                dir.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

#[test]
fn helm_lint_passes() -> Result {
    let helm = helm_or_skip!();
    let chart = chart();
    let out = run_helm(helm, &["lint", "--strict", &chart.to_string_lossy()], &[])?;
    assert!(out.contains("0 chart(s) failed"), "{out}");
    Ok(())
}

/// A hash cut to hex digits can read as a YAML number (`5335529282753e42` is a float), and
/// the API server then refuses the object; so every templated hash is quoted. The render
/// itself is checked too: labels and annotations come out as strings.
#[test]
fn templated_hashes_are_quoted_and_labels_and_annotations_are_strings() -> Result {
    for entry in std::fs::read_dir(chart().join("templates"))? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        for (i, line) in text.lines().enumerate() {
            let hashed = [
                "sha256sum",
                "sha1sum",
                "adler32sum",
                "randNumeric",
                "randAlphaNum",
            ]
            .iter()
            .any(|f| line.contains(f));
            if hashed && line.contains("{{") && !line.trim_start().starts_with("{{") {
                assert!(
                    line.contains("| quote"),
                    "{}:{}: a templated hash without `| quote`: {}",
                    path.display(),
                    i + 1,
                    line.trim()
                );
            }
        }
    }
    let helm = helm_or_skip!();
    for doc in render(helm, "gantry", "gantry", &[])? {
        let mut maps = vec![("", &doc["metadata"])];
        maps.push(("template ", &doc["spec"]["template"]["metadata"]));
        for (at, meta) in maps {
            for field in ["labels", "annotations"] {
                for (k, v) in meta[field].as_object().into_iter().flatten() {
                    assert!(
                        v.is_string(),
                        "{:?} {at}{field}.{k} is not a string: {v}",
                        kind_name(&doc)
                    );
                }
            }
        }
    }
    Ok(())
}

/// `helm template deploy/helm/gantry | gantry validate -f -`: every document is valid or
/// skipped with a note (ServiceAccount, Role, Service …), the workloads' pod templates are
/// checked.
#[test]
fn helm_template_piped_into_gantry_validate_exits_zero() -> Result {
    use std::io::Write;
    let helm = helm_or_skip!();
    let chart = chart();
    let chart = chart.to_string_lossy();
    let text = run_helm(
        helm,
        &["template", "gantry", chart.as_ref(), "-n", "gantry"],
        &[],
    )?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["validate", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("note: document"), "{stdout}");
    assert!(stdout.contains("ServiceAccount v1 skipped"), "{stdout}");
    assert!(stdout.trim_end().ends_with("<stdin>: ok"), "{stdout}");
    Ok(())
}

/// `helm template` failing: its stderr (run_helm turns a failure into an error with it).
fn render_error(helm: &Path, extra: &[&str]) -> String {
    match render(helm, "gantry", "gantry", extra) {
        Ok(_) => String::new(),
        Err(e) => format!("{e:#}"),
    }
}

/// values.schema.json: a misspelled key is refused by name, at the top level and inside a
/// ClusterPolicy section; a wrong type too.
#[test]
fn misspelled_values_fail_with_the_schema_error() -> Result {
    let helm = helm_or_skip!();
    for (set, key, parent) in [
        ("operator.replicass=2", "replicass", "operator"),
        ("devicePlugin.verison=v1", "verison", "devicePlugin"),
        ("migManger.enabled=false", "migManger", ""),
    ] {
        let err = render_error(helm, &["--set", set]);
        assert!(
            err.contains(&format!("Additional property {key} is not allowed"))
                && err.contains("values don't meet the specifications of the schema"),
            "{set}: {err}"
        );
        if !parent.is_empty() {
            assert!(err.contains(&format!("- {parent}:")), "{set}: {err}");
        }
    }
    let err = render_error(helm, &["--set", "mig.strategy=halves"]);
    assert!(err.contains("mig.strategy"), "{err}");
    // Upstream keys Gantry accepts without acting on them pass the schema (the notes name them).
    render(
        helm,
        "gantry",
        "gantry",
        &[
            "--set",
            "operator.cleanupCRD=true",
            "--set",
            "psp.enabled=true",
            "--set",
            "node-feature-discovery.worker.config.sources.pci.deviceClassWhitelist={0300}",
        ],
    )?;
    Ok(())
}

/// The schema's ClusterPolicy sections are the CRD's: every CRD field is accepted, and the only
/// extra keys are the chart's own (config.create/data, nvidiaDriverCRD, gpuPodDeletion).
#[test]
fn values_schema_tracks_the_cluster_policy_crd() -> Result {
    fn names(s: &Value, at: &str, out: &mut BTreeSet<String>) {
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{at}.{k}");
                out.insert(p.clone());
                names(v, &p, out);
            }
        }
        if let Some(items) = s.get("items") {
            names(items, &format!("{at}[]"), out);
        }
    }
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(
        chart().join("values.schema.json"),
    )?)?;
    assert_eq!(schema["additionalProperties"], false);
    let crd = gantry_api::crds::schema_for("nvidia.com/v1", "ClusterPolicy")
        .ok_or_else(|| anyhow::anyhow!("no ClusterPolicy schema"))?;
    let sections = crd["properties"]["spec"]["properties"]
        .as_object()
        .ok_or_else(|| anyhow::anyhow!("no spec"))?;
    let chart_only: BTreeSet<String> = [
        ".devicePlugin.config.create",
        ".devicePlugin.config.data",
        ".migManager.config.create",
        ".migManager.config.data",
        ".dcgmExporter.config.create",
        ".dcgmExporter.config.data",
        ".driver.nvidiaDriverCRD",
        ".driver.nvidiaDriverCRD.enabled",
        ".driver.nvidiaDriverCRD.deployDefaultCR",
        ".driver.nvidiaDriverCRD.driverType",
        ".driver.nvidiaDriverCRD.nodeSelector",
        ".driver.upgradePolicy.gpuPodDeletion",
        ".driver.upgradePolicy.gpuPodDeletion.force",
        ".driver.upgradePolicy.gpuPodDeletion.timeoutSeconds",
        ".driver.upgradePolicy.gpuPodDeletion.deleteEmptyDir",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for (section, crd_schema) in sections {
        if section == "operator" {
            continue; // the chart's operator.* configure the Deployment, not spec.operator
        }
        let ours = &schema["properties"][section];
        assert!(ours.is_object(), "values.schema.json lacks {section}");
        let (mut want, mut have) = (BTreeSet::new(), BTreeSet::new());
        names(crd_schema, "", &mut want);
        names(ours, "", &mut have);
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have
            .difference(&want)
            .filter(|k| !chart_only.contains(&format!(".{section}{k}")))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{section}: missing {missing:?}, extra {extra:?}"
        );
    }
    Ok(())
}
