//! Config reloads: a bad config keeps the last good one, named configs from a directory.

use super::*;

const TS4_RENAMED: &str = "version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_keeps_the_last_good_one_and_good_changes_reload() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, TS4_RENAMED).unwrap();
    let backend = sim("A100-80GB", 2);
    let mut kubelet = TestKubelet::start(&plugin_dir);
    let mut plugin = Plugin::start(
        &plugin_dir,
        ConfigSource::File(config.clone()),
        backend.clone(),
    );
    kubelet
        .wait("time-sliced", |s| s.healthy("nvidia.com/gpu.shared") == 8)
        .await;
    let generation = plugin
        .wait_status("registered", |s| s.registered.len() == 1)
        .await
        .generation;

    // Invalid (replicas < 2), then unparseable: reported, still serving the time-sliced config.
    std::fs::write(&config, TS4_RENAMED.replace("replicas: 4", "replicas: 1")).unwrap();
    let status = plugin
        .wait_status("config error", |s| s.config_error.is_some())
        .await;
    let error = status.config_error.unwrap();
    assert!(
        error.contains("config.yaml") && error.contains("replicas"),
        "{error}"
    );
    std::fs::write(&config, "sharing: [").unwrap();
    plugin
        .wait_status("syntax error", |s| {
            s.config_error.as_deref().is_some_and(|e| e != error)
        })
        .await;
    // A file caught truncated (being rewritten in place) is not "the defaults".
    std::fs::write(&config, "").unwrap();
    plugin
        .wait_status("empty file reported", |s| {
            s.config_error
                .as_deref()
                .is_some_and(|e| e.contains("is empty"))
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        plugin.status.borrow().generation,
        generation,
        "no restart on a bad config"
    );
    assert_eq!(
        plugin
            .status
            .borrow()
            .resources
            .get("nvidia.com/gpu.shared"),
        Some(&8)
    );
    assert!(
        dir.path()
            .join("device-plugins/nvidia-gpu.shared.sock")
            .exists()
    );

    // A valid config that cannot apply on this node (there is no GPU 5)...
    std::fs::write(
        &config,
        TS4_RENAMED.replace("replicas: 4", "replicas: 2\n        devices: [\"5\"]"),
    )
    .unwrap();
    plugin
        .wait_status("apply error", |s| {
            s.config_error
                .as_deref()
                .is_some_and(|e| e.contains("\"5\""))
        })
        .await;
    assert_eq!(plugin.status.borrow().generation, generation);
    // ...then a plain config reloads without a kubelet restart.
    std::fs::write(&config, "version: v1\nflags:\n  migStrategy: none\n").unwrap();
    let seen = kubelet
        .wait("whole GPUs again", |s| s.healthy("nvidia.com/gpu") == 2)
        .await;
    assert!(seen.registrations.contains(&"nvidia.com/gpu".to_string()));
    plugin
        .wait_status("error cleared, only whole GPUs served", |s| {
            s.config_error.is_none() && s.resources.keys().eq(["nvidia.com/gpu"])
        })
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_configs_from_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    let configs = dir.path().join("available-configs");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    std::fs::create_dir_all(&configs).unwrap();
    std::fs::write(configs.join("ts4"), TS4_RENAMED).unwrap();
    std::fs::write(configs.join("plain"), "version: v1\n").unwrap();
    // ConfigMap volumes carry `..data` links; they are not configs.
    std::fs::write(configs.join("..data"), "garbage: [").unwrap();
    let backend = sim("H100-80GB", 1);
    let mut kubelet = TestKubelet::start(&plugin_dir);
    let source = ConfigSource::Named {
        dir: configs.clone(),
        default: Some("ts4".into()),
        fallbacks: device_plugin::named::DEFAULT_FALLBACKS.to_vec(),
    };
    let plugin = Plugin::start(&plugin_dir, source, backend.clone());
    kubelet
        .wait("default named config", |s| {
            s.healthy("nvidia.com/gpu.shared") == 4
        })
        .await;
    // Editing the selected config reloads.
    std::fs::write(
        configs.join("ts4"),
        TS4_RENAMED.replace("replicas: 4", "replicas: 3"),
    )
    .unwrap();
    kubelet
        .wait("edited config", |s| {
            s.devices
                .get("nvidia.com/gpu.shared")
                .is_some_and(|d| d.len() == 3)
        })
        .await;
    plugin.stop().await;
}
