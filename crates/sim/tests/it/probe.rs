//! The test kubelet (`gantry sim kubelet-probe`) against the real device plugin on simulated
//! GPUs: registration, options, the advertised UUIDs, GetPreferredAllocation and Allocate's
//! `NVIDIA_VISIBLE_DEVICES`, and the errors a person sees when something is off.

use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::{Backend, SimBackend, SimConfig};
use gantry_node::device_plugin;
use gantry_sim::kubelet::probe::{self, ProbeError, ProbeOptions};
use gantry_testkit::{Look, eventually_secs};
use tokio::sync::oneshot;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Plugin {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), device_plugin::DevicePluginError>>,
    uuids: Vec<String>,
}

/// The real device plugin on `gpus` simulated H200s, sockets in `dir`, no API access.
fn start_plugin(dir: &std::path::Path, gpus: u32) -> Res<Plugin> {
    let backend = Arc::new(SimBackend::new(SimConfig::for_model("H200", gpus, 7)?));
    let uuids = (0..gpus)
        .map(|i| backend.device_info(i).map(|d| d.uuid))
        .collect::<Result<Vec<_>, _>>()?;
    let mut opts = device_plugin::Options::new(dir);
    opts.kubelet_socket = Some(dir.join("kubelet.sock"));
    opts.poll_interval = Duration::from_millis(50);
    opts.mig_minors_file = None;
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(device_plugin::run(opts, backend, async move {
        let _ = rx.await;
    }));
    Ok(Plugin {
        stop: Some(tx),
        task,
        uuids,
    })
}

impl Plugin {
    async fn stop(mut self) -> Res<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await??;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_lists_uuids_and_allocates_through_the_real_plugin() -> Res<()> {
    let tmp = tempfile::Builder::new().prefix("gp").tempdir_in("/tmp")?;
    let plugin = start_plugin(tmp.path(), 4)?;
    let mut opts = ProbeOptions::new(tmp.path());
    opts.allocate = 2;
    opts.timeout = Duration::from_secs(30);
    let report = probe::run(&opts).await?;

    assert_eq!(report.registration.resource_name, "nvidia.com/gpu");
    assert_eq!(report.registration.version, "v1beta1");
    assert!(
        tmp.path().join(&report.registration.endpoint).exists(),
        "endpoint {} is a socket in the directory",
        report.registration.endpoint
    );
    let mut ids: Vec<String> = report.devices.iter().map(|d| d.id.clone()).collect();
    ids.sort();
    let mut want = plugin.uuids.clone();
    want.sort();
    assert_eq!(ids, want, "the plugin advertises the GPUs by UUID");
    assert!(report.devices.iter().all(|d| d.health == "Healthy"));

    let alloc = report
        .allocate
        .as_ref()
        .ok_or("no Allocate in the report")?;
    assert_eq!(alloc.device_ids.len(), 2);
    assert!(alloc.device_ids.iter().all(|id| plugin.uuids.contains(id)));
    if report.options.get_preferred_allocation_available {
        assert_eq!(report.preferred.as_ref().map(Vec::len), Some(2));
    } else {
        assert!(report.preferred.is_none());
    }
    assert_eq!(alloc.containers.len(), 1);
    let visible = alloc.containers[0]
        .envs
        .get("NVIDIA_VISIBLE_DEVICES")
        .ok_or("no NVIDIA_VISIBLE_DEVICES in the Allocate response")?;
    assert_eq!(*visible, alloc.device_ids.join(","));

    // The JSON form carries the same facts.
    let json = serde_json::to_value(&report)?;
    assert_eq!(
        json["allocate"]["containers"][0]["envs"]["NVIDIA_VISIBLE_DEVICES"],
        serde_json::Value::String(visible.clone())
    );
    assert_eq!(json["devices"].as_array().map(Vec::len), Some(4));
    let text = probe::render_text(&report);
    assert!(text.contains(&format!("env NVIDIA_VISIBLE_DEVICES={visible}")));

    // A second probe on the same directory (a kubelet restart): the plugin registers again.
    let mut again = ProbeOptions::new(tmp.path());
    again.timeout = Duration::from_secs(30);
    let second = probe::run(&again).await?;
    assert_eq!(second.devices.len(), 4);
    assert!(second.allocate.is_none());
    plugin.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_errors_name_what_is_missing() -> Res<()> {
    let tmp = tempfile::Builder::new().prefix("gp").tempdir_in("/tmp")?;
    let plugin = start_plugin(tmp.path(), 2)?;

    // More devices than the plugin has.
    let mut opts = ProbeOptions::new(tmp.path());
    opts.allocate = 3;
    opts.timeout = Duration::from_secs(30);
    match probe::run(&opts).await {
        Err(ProbeError::NotEnough {
            requested, healthy, ..
        }) => assert_eq!((requested, healthy), (3, 2)),
        other => return Err(format!("expected NotEnough, got {other:?}").into()),
    }

    // A resource nobody serves: a timeout that says what did register. The plugin must
    // re-register with each probe's kubelet socket within the probe's 2 s; on a busy machine it
    // may not, so probe again until it has.
    let mut opts = ProbeOptions::new(tmp.path());
    opts.resource = "example.com/fpga".into();
    opts.timeout = Duration::from_secs(2);
    let msg = eventually_secs("a probe timeout naming what registered", 60, || async {
        match probe::run(&opts).await {
            Err(err @ ProbeError::Timeout { .. }) => {
                let msg = err.to_string();
                if msg.contains("registered instead: nvidia.com/gpu") {
                    Look::Done(msg)
                } else {
                    Look::Seen(msg)
                }
            }
            other => Look::Seen(format!("not a timeout: {other:?}")),
        }
    })
    .await?;
    assert!(msg.contains("example.com/fpga"), "{msg}");
    plugin.stop().await
}
