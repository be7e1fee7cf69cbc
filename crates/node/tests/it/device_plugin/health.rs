//! Device health (XIDs, resets), a kubelet restart, and the withdrawn/recovered counts on
//! `/metrics`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_79_turns_every_replica_unhealthy_and_recovers_after_reset() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 2);
    let u = uuids(backend.as_ref());
    let mut kubelet = TestKubelet::start(dir.path());
    let plugin = Plugin::start(
        dir.path(),
        inline(time_sliced(4, Some("nvidia.com/gpu.shared"))),
        backend.clone(),
    );
    kubelet
        .wait("8 replicas", |s| s.healthy("nvidia.com/gpu.shared") == 8)
        .await;

    // XID 13 is an application error: nothing changes.
    health_watching(&backend).await;
    backend.inject_xid(1, 13, None, None).unwrap();
    // XID 79: every replica of GPU 1 goes Unhealthy in one message.
    backend.inject_fallen_off_bus(1).unwrap();
    let seen = kubelet
        .wait("GPU 1 unhealthy", |s| {
            s.healthy("nvidia.com/gpu.shared") == 4
        })
        .await;
    for d in &seen.devices["nvidia.com/gpu.shared"] {
        let expect = if d.id.starts_with(&u[1]) {
            pb::UNHEALTHY
        } else {
            pb::HEALTHY
        };
        assert_eq!(d.health, expect, "{}", d.id);
    }
    assert_eq!(
        seen.devices["nvidia.com/gpu.shared"].len(),
        8,
        "IDs stay advertised"
    );

    // The GPU is reset: its replicas come back.
    backend.reset_gpu(1).unwrap();
    kubelet
        .wait("GPU 1 healthy again", |s| {
            s.healthy("nvidia.com/gpu.shared") == 8
        })
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_13_is_ignored_and_dbe_recovers_on_reset() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 2);
    let mut kubelet = TestKubelet::start(dir.path());
    let mut plugin = Plugin::start(dir.path(), ConfigSource::Defaults, backend.clone());
    kubelet
        .wait("2 GPUs", |s| s.healthy("nvidia.com/gpu") == 2)
        .await;
    health_watching(&backend).await;
    backend.inject_xid(0, 13, None, None).unwrap();
    backend.inject_xid(0, 31, None, None).unwrap();
    // A double-bit ECC error is fatal; it is the marker that the XIDs above were processed.
    backend.inject_ecc_dbe(1).unwrap();
    let seen = kubelet
        .wait("GPU 1 unhealthy", |s| s.healthy("nvidia.com/gpu") == 1)
        .await;
    assert_eq!(
        seen.devices["nvidia.com/gpu"][0].health,
        pb::HEALTHY,
        "XID 13/31 ignored"
    );
    assert_eq!(
        plugin
            .wait_status("1 unhealthy", |s| s.unhealthy == 1)
            .await
            .unhealthy,
        1
    );
    backend.reset_gpu(1).unwrap();
    kubelet
        .wait("GPU 1 healthy", |s| s.healthy("nvidia.com/gpu") == 2)
        .await;
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restart_is_survived() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("L4", 4);
    let mut kubelet = TestKubelet::start(dir.path());
    let mut plugin = Plugin::start(dir.path(), ConfigSource::Defaults, backend.clone());
    kubelet
        .wait("4 GPUs", |s| s.healthy("nvidia.com/gpu") == 4)
        .await;
    let generation = plugin
        .wait_status("registered", |s| s.registered.len() == 1)
        .await
        .generation;

    kubelet.crash();
    // The plugin notices its socket is gone and restarts while the kubelet is away.
    plugin
        .wait_status("restart", |s| s.generation > generation)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut kubelet = TestKubelet::start(dir.path());
    let seen = kubelet
        .wait("re-registration", |s| s.healthy("nvidia.com/gpu") == 4)
        .await;
    assert_eq!(seen.registrations, ["nvidia.com/gpu"]);
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    // kubelet.sock re-created without our socket being touched: re-register as well.
    let before = plugin.status.borrow().generation;
    let _ = std::fs::remove_file(dir.path().join("kubelet.sock"));
    let mut kubelet2 = TestKubelet::start(dir.path());
    kubelet2
        .wait("re-registration after new kubelet.sock", |s| {
            s.healthy("nvidia.com/gpu") == 4
        })
        .await;
    plugin
        .wait_status("a new generation", |s| s.generation > before)
        .await;
    drop(kubelet);
    plugin.stop().await;
}

/// `GET path` on a plain HTTP/1.0 server; the body.
async fn http_get(address: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(address).await.unwrap();
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(out)
}

/// Issue #24: withdrawn and recovered devices on the plugin's `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawn_and_recovered_devices_are_counted_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim("H100-80GB", 2);
    let mut kubelet = TestKubelet::start(dir.path());
    let mut plugin = Plugin::start_with(
        dir.path(),
        inline(time_sliced(4, None)),
        backend.clone(),
        |o| o.metrics_address = Some("127.0.0.1:0".parse().unwrap()),
    );
    kubelet
        .wait("8 replicas", |s| s.healthy("nvidia.com/gpu") == 8)
        .await;
    let address = plugin
        .wait_status("metrics bound", |s| s.metrics_address.is_some())
        .await
        .metrics_address
        .unwrap();
    let before = http_get(address, "/metrics").await;
    assert!(
        before.contains("gpu_operator_node_device_plugin_devices_unhealthy 0"),
        "{before}"
    );
    assert_eq!(http_get(address, "/healthz").await, "ok");

    health_watching(&backend).await;
    backend.inject_fallen_off_bus(1).unwrap();
    kubelet
        .wait("GPU 1 unhealthy", |s| s.healthy("nvidia.com/gpu") == 4)
        .await;
    gantry_testkit::eventually_secs("withdrawn devices on /metrics", 60, || async {
        let t = http_get(address, "/metrics").await;
        if t.contains(
            r#"gpu_operator_node_device_plugin_devices_withdrawn_total{reason="lost",xid="79"} 4"#,
        ) && t.contains("gpu_operator_node_device_plugin_devices_unhealthy 4")
        {
            gantry_testkit::Look::Done(())
        } else {
            gantry_testkit::Look::Seen(t)
        }
    })
    .await
    .unwrap();

    backend.reset_gpu(1).unwrap();
    kubelet
        .wait("GPU 1 healthy again", |s| s.healthy("nvidia.com/gpu") == 8)
        .await;
    gantry_testkit::eventually_secs("recovered devices on /metrics", 60, || async {
        let t = http_get(address, "/metrics").await;
        if t.contains(
            r#"gpu_operator_node_device_plugin_devices_recovered_total{reason="lost",xid="79"} 4"#,
        ) && t.contains("gpu_operator_node_device_plugin_devices_unhealthy 0")
        {
            gantry_testkit::Look::Done(())
        } else {
            gantry_testkit::Look::Seen(t)
        }
    })
    .await
    .unwrap();
    plugin.stop().await;
}
