//! Each kind of config the toolkit edits (default, other runtimes and `imports`, missing, v3),
//! in place and as a drop-in: containerd loads the result and gets the original back.

use super::*;

#[tokio::test]
async fn containerd_default_config_in_place() {
    if containerd().is_none() {
        return;
    }
    let out = Command::new("containerd")
        .args(["config", "default"])
        .output()
        .expect("containerd config default");
    assert!(out.status.success());
    for set_as_default in [false, true] {
        let host = Host::new();
        host.write(
            "etc/containerd/config.toml",
            &String::from_utf8_lossy(&out.stdout),
        );
        let want = Want {
            default_runtime: if set_as_default { "nvidia" } else { "runc" },
            others: &[("runc", "io.containerd.runc.v2")],
            systemd_cgroup: Some(false),
        };
        let cfg = host.runtime_config(false, set_as_default);
        round_trip(&host, &cfg, Some(&out.stdout), &want).await;
    }
}

#[tokio::test]
async fn containerd_existing_runtimes_and_imports_in_place() {
    if containerd().is_none() {
        return;
    }
    let host = Host::new();
    let original = existing_runtimes(&host);
    host.write("etc/containerd/config.toml", &original);
    let cfg = host.runtime_config(false, false);
    round_trip(&host, &cfg, Some(original.as_bytes()), &EXISTING).await;
}

#[tokio::test]
async fn containerd_existing_runtimes_and_imports_drop_in() {
    if containerd().is_none() {
        return;
    }
    let host = Host::new();
    let original = existing_runtimes(&host);
    host.write("etc/containerd/config.toml", &original);
    let cfg = host.runtime_config(true, true);
    let want = Want {
        default_runtime: "nvidia",
        ..EXISTING
    };
    round_trip(&host, &cfg, Some(original.as_bytes()), &want).await;
}

#[tokio::test]
async fn containerd_missing_config_file() {
    if containerd().is_none() {
        return;
    }
    for drop_in in [false, true] {
        let host = Host::new();
        let cfg = host.runtime_config(drop_in, true);
        let want = Want {
            default_runtime: "nvidia",
            others: &[],
            systemd_cgroup: None,
        };
        round_trip(&host, &cfg, None, &want).await;
    }
}

#[tokio::test]
async fn containerd_v3_config_on_containerd_2() {
    let Some((major, minor)) = containerd() else {
        return;
    };
    if major < 2 {
        eprintln!(
            "skipping: containerd {major}.{minor} reads config version 2 only (version 3, \
             plugin io.containerd.cri.v1.runtime, came with containerd 2.0)"
        );
        return;
    }
    let host = Host::new();
    let original = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'io.containerd.runc.v2'\n  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n    SystemdCgroup = true\n";
    host.write("etc/containerd/config.toml", original);
    let cfg = host.runtime_config(false, false);
    host.toolkit(&cfg, false).expect("install");
    let doc = dump(&cfg.config).unwrap_or_else(|e| panic!("{e}"));
    let nvidia = [
        "plugins",
        "io.containerd.cri.v1.runtime",
        "containerd",
        "runtimes",
        "nvidia",
    ];
    let opt = |k: &str| at(doc.as_item(), &[&nvidia[..], &["options", k]].concat());
    assert_eq!(
        opt("BinaryName").and_then(|i| i.as_str()),
        Some(BINARY),
        "{doc}"
    );
    assert_eq!(
        opt("SystemdCgroup").and_then(|i| i.as_bool()),
        Some(true),
        "{doc}"
    );
    let run = tempfile::tempdir().expect("tempdir");
    let mut daemon = Daemon::start(&cfg.config, run.path());
    let cri = daemon.cri_config().await;
    assert_eq!(
        cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"],
        BINARY
    );
    drop(daemon);
    host.toolkit(&cfg, true).expect("uninstall");
    assert_eq!(
        std::fs::read_to_string(&cfg.config).expect("config"),
        original
    );
}
