//! `scripts/image.sh`: Gantry's OCI image built without a container daemon (buildah, vfs
//! storage, chroot isolation), its in-image smoke test, and the archive loaded back and run.
//! Uses the test build's binary; docs/install.md has the release image's size.

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the workspace root")
}

fn buildah(args: &[&str]) -> std::process::Output {
    Command::new("buildah")
        .arg("--storage-driver")
        .arg("vfs")
        .args(args)
        .output()
        .expect("buildah runs")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_image_builds_passes_its_smoke_test_and_loads_back() {
    let have_buildah = Command::new("buildah").arg("--version").output().is_ok();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !have_buildah || !root {
        eprintln!(
            "skipping the image test: buildah {} and this test needs root for vfs storage \
             (scripts/test.sh installs Debian's buildah when run as root)",
            if have_buildah {
                "is installed"
            } else {
                "is missing"
            }
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("gantry.oci.tar");
    let out = Command::new(repo().join("scripts/image.sh"))
        .current_dir(repo())
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_gantry"),
            "--smoke",
            "--output",
        ])
        .arg(&archive)
        .output()
        .expect("scripts/image.sh runs");
    let log = text(&out);
    assert!(out.status.success(), "image.sh failed:\n{log}");
    let version = env!("CARGO_PKG_VERSION");
    let tag = format!("ghcr.io/gantry-dev/gantry:{version}");
    assert!(log.contains(&format!("image: {tag}")), "{log}");
    assert!(
        log.contains("/home/gantry/queues.yaml: ok"),
        "validate ran inside: {log}"
    );
    assert!(
        log.contains(&format!("gantry {version}")),
        "--version ran inside: {log}"
    );

    // The chart's default image is the one this builds.
    let chart = std::fs::read_to_string(repo().join("deploy/helm/gantry/Chart.yaml")).unwrap();
    assert!(
        chart.contains(&format!("appVersion: \"{version}\"")),
        "{chart}"
    );
    let values = std::fs::read_to_string(repo().join("deploy/helm/gantry/values.yaml")).unwrap();
    assert!(values.contains("repository: ghcr.io/gantry-dev/gantry"));

    // The archive is an OCI layout that loads back and runs, as the non-root user.
    let listing = Command::new("tar")
        .arg("tf")
        .arg(&archive)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains("oci-layout") && listing.contains("index.json"),
        "{listing}"
    );
    let name = format!("gantry-image-test-{}", std::process::id());
    let from = buildah(&[
        "from",
        "--name",
        &name,
        &format!("oci-archive:{}", archive.display()),
    ]);
    assert!(from.status.success(), "{}", text(&from));
    let run = buildah(&[
        "run",
        "--isolation",
        "chroot",
        &name,
        "--",
        "/usr/local/bin/gantry",
        "--version",
    ]);
    let inspect = buildah(&[
        "inspect",
        "--format",
        "{{.OCIv1.Config.User}} {{index .OCIv1.Config.Labels \"org.opencontainers.image.version\"}} {{.OCIv1.Config.Entrypoint}}",
        &name,
    ]);
    let packages = buildah(&[
        "inspect",
        "--format",
        "{{index .OCIv1.Config.Labels \"dev.gantry.debian-packages\"}}",
        &name,
    ]);
    // The smoke test's input stays out of the shipped image.
    let leftover = buildah(&[
        "run",
        "--isolation",
        "chroot",
        &name,
        "--",
        "/usr/local/bin/gantry",
        "validate",
        "-f",
        "/home/gantry/queues.yaml",
    ]);
    let _ = buildah(&["rm", &name]);
    let packages = text(&packages);
    assert!(
        packages.split(',').any(|p| p.starts_with("libc6=")),
        "the debian-packages label names glibc's package: {packages:?}"
    );
    assert!(
        !leftover.status.success() && text(&leftover).contains("cannot read"),
        "{}",
        text(&leftover)
    );
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(text(&run).trim(), format!("gantry {version}"));
    assert_eq!(
        text(&inspect).trim(),
        format!("65532:65532 {version} [/usr/local/bin/gantry]")
    );
}

/// `gantry operator --image` defaults to the tag `scripts/image.sh` gives the image.
#[test]
fn the_operators_default_image_is_the_tag_the_image_gets() {
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["operator", "--help"])
        .env_remove("GANTRY_IMAGE")
        .output()
        .expect("gantry runs");
    let help = text(&out);
    let tag = format!("ghcr.io/gantry-dev/gantry:{}", env!("CARGO_PKG_VERSION"));
    assert!(help.contains(&format!("[default: {tag}]")), "{help}");
}
