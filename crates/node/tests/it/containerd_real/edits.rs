//! The user's edits after install survive uninstall; configs the toolkit refuses stay as
//! they were.

use super::*;

#[tokio::test]
async fn containerd_keeps_user_edits_made_after_install() {
    if containerd().is_none() {
        return;
    }
    let host = Host::new();
    let original = existing_runtimes(&host);
    host.write("etc/containerd/config.toml", &original);
    let cfg = host.runtime_config(false, true);
    host.toolkit(&cfg, false).expect("install");
    // The admin raises a limit after the install: uninstall removes only our entries.
    let edited = std::fs::read_to_string(&cfg.config)
        .expect("config")
        .replace(
            "sandbox_image = \"registry.k8s.io/pause:3.9\"",
            "sandbox_image = \"registry.k8s.io/pause:3.10\"",
        );
    std::fs::write(&cfg.config, &edited).expect("edit");
    let report = host.toolkit(&cfg, true).expect("uninstall");
    assert_eq!(report.files, [(cfg.config.clone(), Outcome::Updated)]);
    check_gone(&cfg.config);
    let doc = dump(&cfg.config).expect("dump");
    let cri = ["plugins", CRI_V2];
    assert_eq!(
        str_at(doc.as_item(), &[&cri[..], &["sandbox_image"]].concat()),
        Some("registry.k8s.io/pause:3.10")
    );
    assert_eq!(
        str_at(
            doc.as_item(),
            &[&cri[..], &["containerd", "default_runtime_name"]].concat()
        ),
        Some("runc"),
        "no default of ours left, containerd's own default applies:\n{doc}"
    );
    let run = tempfile::tempdir().expect("tempdir");
    let mut daemon = Daemon::start(&cfg.config, run.path());
    let cri = daemon.cri_config().await;
    assert_eq!(cri["sandboxImage"], "registry.k8s.io/pause:3.10", "{cri:#}");
    assert!(
        cri["containerd"]["runtimes"].get("nvidia").is_none(),
        "{cri:#}"
    );
    assert_eq!(
        cri["containerd"]["runtimes"]["kata"]["runtimeType"],
        "io.containerd.kata.v2"
    );
}

#[tokio::test]
async fn containerd_configs_the_toolkit_refuses_stay_as_they_were() {
    if containerd().is_none() {
        return;
    }
    // (config, what the error says, whether containerd itself loads it)
    let cases: [(&str, &str, Option<bool>); 3] = [
        // A version 1 config (no `version`): containerd 1.x still reads it; the toolkit
        // asks for `containerd config migrate` instead of guessing.
        (
            "[plugins.cri.containerd]\n  snapshotter = \"overlayfs\"\n",
            "version 1",
            Some(true),
        ),
        (
            "version = 2\n[plugins\nbroken = \n",
            "config.toml",
            Some(false),
        ),
        // A value where a table belongs.
        (
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  containerd = \"runc\"\n",
            "must be a table",
            None,
        ),
    ];
    for (text, names, loads) in cases {
        let host = Host::new();
        host.write("etc/containerd/config.toml", text);
        for drop_in in [false, true] {
            let cfg = host.runtime_config(drop_in, true);
            let err = host.toolkit(&cfg, false).expect_err(text);
            assert!(err.contains(names), "{err}");
            assert_eq!(std::fs::read_to_string(&cfg.config).expect("config"), text);
            assert!(!host.path("etc/containerd/conf.d").exists());
        }
        if let Some(loads) = loads {
            assert_eq!(dump(&host.config()).is_ok(), loads, "{text}");
        }
    }
}
