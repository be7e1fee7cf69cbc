//! deploy/crds/ must hold exactly what the code generates. Regenerate with
//! `cargo run -p gantry -- crds --output-dir deploy/crds` (or run this test with
//! GANTRY_UPDATE_CRDS=1).

use std::path::PathBuf;

use gantry_api::crds::{crd_files, structural_problems};

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

#[test]
fn deploy_crds_match_the_code() {
    let files = crd_files().unwrap_or_else(|e| panic!("{e}"));
    let dir = deploy_dir();
    if std::env::var_os("GANTRY_UPDATE_CRDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for (name, body) in &files {
            std::fs::write(dir.join(name), body).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    for (name, body) in &files {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        assert!(
            &on_disk == body,
            "deploy/crds/{name} is out of date with the code; regenerate with `cargo run -p gantry -- crds --output-dir deploy/crds` (or GANTRY_UPDATE_CRDS=1 cargo test -p gantry-api --test crds_drift)"
        );
    }
    let mut extra: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    extra.retain(|n| n.ends_with(".yaml") && !files.iter().any(|(f, _)| f == n));
    assert!(
        extra.is_empty(),
        "deploy/crds has files the code does not generate: {extra:?}"
    );
}

#[test]
fn generated_yaml_parses_back_as_structural_crds() {
    let all = gantry_api::crds::all_crds_yaml().unwrap_or_else(|e| panic!("{e}"));
    let mut n = 0;
    for doc in serde_yaml::Deserializer::from_str(&all) {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(v["kind"], "CustomResourceDefinition");
        for ver in v["spec"]["versions"].as_array().into_iter().flatten() {
            let p = structural_problems(&ver["schema"]["openAPIV3Schema"]);
            assert!(p.is_empty(), "{}: {p:#?}", v["metadata"]["name"]);
        }
        n += 1;
    }
    assert_eq!(n, 6);
}

/// A placeholder: no description, a bare path or word (`spec.mig.`, `Deprecated.`), or a
/// sentence cut at an abbreviation (`Image name, e.g.`).
fn placeholder(description: &str) -> bool {
    let d = description.trim();
    d.is_empty() || !d.contains(' ') || d.ends_with("e.g.") || d.ends_with("i.e.")
}

fn undescribed(schema: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
        for (name, child) in props {
            let p = format!("{path}.{name}");
            let d = child
                .get("description")
                .and_then(|d| d.as_str())
                .unwrap_or("");
            if placeholder(d) {
                out.push(format!("{p}: {d:?}"));
            }
            undescribed(child, &p, out);
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(child) = schema.get(key).filter(|c| c.is_object()) {
            undescribed(child, &format!("{path}{suffix}"), out);
        }
    }
}

/// `kubectl explain` has something to say about every field of every CRD.
#[test]
fn every_crd_field_has_a_description() {
    let mut out = Vec::new();
    let mut fields = 0usize;
    for crd in gantry_api::crds::all_crds().unwrap_or_else(|e| panic!("{e}")) {
        let kind = crd.spec.names.kind.to_ascii_lowercase();
        for v in &crd.spec.versions {
            let schema = serde_json::to_value(
                v.schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .unwrap_or_else(|| panic!("{kind} {}: no schema", v.name)),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            undescribed(&schema, &kind, &mut out);
            fields += count(&schema);
        }
    }
    assert!(fields > 500, "walked only {fields} fields");
    assert!(
        out.is_empty(),
        "{} CRD fields without a real description:\n{}",
        out.len(),
        out.join("\n")
    );
}

fn count(schema: &serde_json::Value) -> usize {
    let props = schema.get("properties").and_then(|p| p.as_object());
    let own = props.map_or(0, |p| p.len() + p.values().map(count).sum::<usize>());
    own + ["items", "additionalProperties"]
        .iter()
        .filter_map(|k| schema.get(*k).filter(|c| c.is_object()))
        .map(count)
        .sum::<usize>()
}

#[test]
fn placeholders_are_recognised() {
    for bad in ["", "spec.mig.", "Deprecated.", "Image name, e.g.", "  "] {
        assert!(placeholder(bad), "{bad:?}");
    }
    assert!(!placeholder("Image name; alone it is used verbatim."));
}
