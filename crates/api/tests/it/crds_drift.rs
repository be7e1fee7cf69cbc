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
    assert_eq!(n, 5);
}
