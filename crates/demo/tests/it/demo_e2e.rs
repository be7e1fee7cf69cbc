//! The whole demo, non-interactive, then: every figure of its summary checked against the
//! cluster's own objects, and the web view loaded in headless Chromium (screenshot kept under
//! the cargo target's tmp dir as `demo-web-view.png`).

use std::collections::BTreeMap;
use std::process::Command;

use gantry_api::names;
use gantry_demo::frames::{self, Frame};
use gantry_demo::view;
use gantry_sim::cluster::Fault;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.metadata.deletion_timestamp.is_none()
}

fn gpu_limit(p: &Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get(names::RESOURCE_GPU)
        })
        .filter_map(|q| q.0.parse::<i64>().ok())
        .sum()
}

/// Every frame the plain output printed shows what its sentence claims, counted off the
/// frame's own text.
fn frames_match_their_sentences(frames: &[Frame]) {
    let frame = |caption: &str| -> (&Frame, Vec<String>) {
        let f = frames
            .iter()
            .find(|f| f.caption.starts_with(caption))
            .unwrap_or_else(|| panic!("a frame {caption:?}: {:?}", captions(frames)));
        (f, view::frame_lines(&f.snapshot))
    };
    let cells = |lines: &[String], prefix: &str, cell: &str| -> usize {
        lines
            .iter()
            .filter(|l| l.starts_with(prefix))
            .map(|l| l.matches(cell).count())
            .sum()
    };
    // Team B borrows 24 whole H100s: 24 full cells on the H100 rows, all team B's.
    let (f, lines) = frame("done: team B");
    assert_eq!(cells(&lines, "h100", "██"), 24, "{lines:#?}");
    assert_eq!(frames::held(&f.snapshot, "team-b", "whole"), 24);
    assert_eq!(frames::held(&f.snapshot, "team-b", "mig"), 4);
    assert!(
        frames::queue_allocated(&f.snapshot, "team-b") >= 24.0,
        "the queue line agrees: {lines:#?}"
    );
    // Team A's fractions share H100s; its three L4 pods share one time-sliced L4.
    let (f, lines) = frame("done: team A inference");
    assert_eq!(frames::held(&f.snapshot, "team-a", "fraction"), 4);
    assert_eq!(frames::held(&f.snapshot, "team-a", "replica"), 3);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("l4-") && l.contains("▒3")),
        "{lines:#?}"
    );
    // The gang holds 8 whole H100s; the whole cells are the gang's plus team B's.
    let (f, lines) = frame("done: gang + reclaim");
    assert_eq!(frames::held(&f.snapshot, "team-a", "whole"), 8);
    assert_eq!(
        cells(&lines, "h100", "██"),
        8 + frames::held(&f.snapshot, "team-b", "whole"),
        "{lines:#?}"
    );
    // After the re-slice every A100 GPU is seven 1g.10gb slices.
    let (f, _) = frame("done: MIG re-slice");
    for n in f
        .snapshot
        .nodes
        .iter()
        .filter(|n| n.name.starts_with("a100"))
    {
        for g in &n.gpus {
            assert_eq!(
                g.mig,
                vec!["1g.10gb".to_string(); 7],
                "{} GPU {}",
                n.name,
                g.index
            );
        }
    }
    // After "8/8 nodes done" no node is drawn cordoned or NotReady.
    let (_, lines) = frame("done: driver upgrade");
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("(cordoned)") && !l.contains("(NotReady)")),
        "{lines:#?}"
    );
    // The fault: the withdrawn GPU is drawn XX, and the next frame shows it back.
    let (_, lines) = frame("h100-80gb-0 GPU 0 withdrawn");
    let row = lines
        .iter()
        .find(|l| l.starts_with("h100-80gb-0"))
        .expect("h100-80gb-0 row");
    assert!(row.contains("XX"), "{row}");
    let (_, lines) = frame("done: GPU fault");
    assert!(lines.iter().all(|l| !l.contains("XX")), "{lines:#?}");
}

/// The printed summary has a number in the fair share column of every queue line, and the
/// frames printed at the end of each phase show one for every queue too.
fn fair_share_is_printed(text: &str, queues: &[String], frames: &[Frame]) {
    for q in queues {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(q.as_str()))
            .unwrap_or_else(|| panic!("queue {q} in the summary:\n{text}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        let fair = cols.get(2).copied().unwrap_or("-");
        assert!(
            fair.parse::<f64>().is_ok(),
            "queue {q}: fair share {fair:?} is a number: {line:?}"
        );
    }
    let last = frames
        .iter()
        .rev()
        .find(|f| f.caption.starts_with("done:"))
        .expect("a phase's closing frame");
    for l in view::frame_lines(&last.snapshot)
        .iter()
        .filter(|l| l.trim_start().starts_with("queue "))
    {
        let fair = l
            .split("fair share")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("-");
        assert!(fair.parse::<f64>().is_ok(), "{l}");
    }
}

fn captions(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.caption.as_str()).collect()
}

/// The web view's operator, health and MIG panels, namespaced pod names, and legends whose
/// items never overlap.
fn web_view_panels(dom: &str) {
    let around = |key: &str| {
        dom.find(key)
            .map(|i| dom[i..(i + 300).min(dom.len())].to_string())
            .unwrap_or_else(|| format!("{key} not in the page"))
    };
    assert!(
        dom.contains("id=\"policy\" data-state=\"ready\""),
        "the ClusterPolicy state is shown: {}",
        around("id=\"policy\"")
    );
    assert!(
        dom.contains("data-operand=\"device-plugin\" data-status=\"Running\""),
        "per-node operand state"
    );
    assert!(dom.contains("data-mig=\"1g.10gb×7\""), "MIG layout per GPU");
    assert!(
        dom.contains("data-healthy=\"false\""),
        "the faulted GPU is shown"
    );
    assert!(dom.contains("XX unhealthy"), "…and says so");
    assert!(
        dom.contains("id=\"upgrade\" data-done=\"8\" data-total=\"8\""),
        "upgrade progress: {}",
        dom.find("id=\"upgrade\"")
            .map(|i| &dom[i..(i + 200).min(dom.len())])
            .unwrap_or("none")
    );
    assert!(
        dom.contains(">team-a/train-a-"),
        "holders carry their namespace"
    );
    for legend in ["grid-legend", "chart-legend"] {
        let at = dom
            .find(&format!("id=\"{legend}\""))
            .unwrap_or_else(|| panic!("{legend} drawn"));
        let rest = &dom[at..];
        let boxes = rest
            .split("data-boxes=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("{legend} has its item boxes"))
            .replace("&quot;", "\"");
        let boxes: Vec<[f64; 4]> = serde_json::from_str(&boxes).expect("boxes are JSON");
        assert!(boxes.len() >= 4, "{legend}: {boxes:?}");
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                let apart = a[0] + a[2] <= b[0] + 0.5
                    || b[0] + b[2] <= a[0] + 0.5
                    || a[1] + a[3] <= b[1] + 0.5
                    || b[1] + b[3] <= a[1] + 0.5;
                assert!(apart, "{legend}: {a:?} overlaps {b:?}");
            }
        }
    }
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

fn chromium_args(profile: &std::path::Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=4000",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn demo_summary_matches_the_cluster_and_the_web_view_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let opts = gantry_demo::DemoOptions {
        kubeconfig: dir.path().join("demo.kubeconfig"),
        ..Default::default()
    };
    let (demo, summary) = gantry_demo::run(opts)
        .await
        .expect("the demo runs to the end");
    println!("{summary}");
    let client = demo.client.clone();
    frames_match_their_sentences(&demo.frames);
    let names: Vec<String> = summary.queues.iter().map(|q| q.name.clone()).collect();
    assert!(names.len() >= 2, "{names:?}");
    fair_share_is_printed(&summary.to_string(), &names, &demo.frames);

    // Nodes and GPUs.
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(summary.nodes, nodes.len());
    let gpu_nodes = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::LABEL_GPU_PRESENT))
                .map(String::as_str)
                == Some("true")
        })
        .count();
    assert_eq!(
        summary.gpu_nodes, gpu_nodes,
        "GPU nodes = nodes the operator labelled gpu.present"
    );
    let physical: u32 = demo
        .plan
        .iter()
        .map(|p| if p.gpu.is_some() { p.gpus } else { 0 })
        .sum();
    assert_eq!(summary.gpus_total, physical);
    assert!(summary.time_to_gpu_ready.as_secs_f64() > 0.0);
    assert!(summary.phases.len() >= 9, "{:?}", summary.phases);

    // Allocation: at least the whole GPUs Running pods hold on the H100s, at most everything.
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let whole_on_h100: i64 = pods
        .iter()
        .filter(|p| running(p))
        .filter(|p| p.metadata.namespace.as_deref() != Some(names::DEFAULT_RESERVATION_NAMESPACE))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| n.starts_with("h100"))
        })
        .map(gpu_limit)
        .sum();
    assert!(
        whole_on_h100 >= 8 + 16,
        "train-a (8) and batch-b (at least 16) hold H100s: {whole_on_h100}"
    );
    assert!(
        summary.gpus_allocated >= whole_on_h100 as f64,
        "{} < {whole_on_h100}",
        summary.gpus_allocated
    );
    assert!(summary.gpus_allocated <= summary.gpus_total as f64 + 1e-9);

    // Queues: the summary's allocation is the scheduler's Queue status.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.run.ai", "v2", "Queue"),
        "queues",
    );
    let queues = Api::<DynamicObject>::all_with(client.clone(), &ar)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let status: BTreeMap<String, serde_json::Value> = queues
        .iter()
        .map(|q| {
            (
                q.metadata.name.clone().unwrap_or_default(),
                q.data["status"].clone(),
            )
        })
        .collect();
    for q in &summary.queues {
        assert!(
            status.contains_key(&q.name),
            "queue {} in the summary exists",
            q.name
        );
    }
    assert!(
        summary
            .queues
            .iter()
            .any(|q| q.name == "team-a" && q.allocated > 0.0)
    );
    assert!(
        summary
            .queues
            .iter()
            .any(|q| q.name == "team-b" && q.allocated > 0.0)
    );

    // Reclaim happened, and every pod named as evicted or waiting is real.
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    // The summary is a snapshot taken when the story ended; the scheduler keeps running, so
    // the live list may hold later events too. Every reclaim the summary names is a live
    // Reclaimed event on that pod, and there is at least one.
    let reclaimed_pods: std::collections::BTreeMap<String, usize> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Reclaimed"))
        .filter_map(|e| {
            Some(format!(
                "{}/{}",
                e.involved_object.namespace.clone()?,
                e.involved_object.name.clone()?
            ))
        })
        .fold(Default::default(), |mut m, k| {
            *m.entry(k).or_default() += 1;
            m
        });
    let summary_reclaims: Vec<&str> = summary
        .evicted
        .iter()
        .filter(|e| e.reason.starts_with("Reclaimed"))
        .map(|e| e.pod.as_str())
        .collect();
    assert!(
        !summary_reclaims.is_empty(),
        "team A's gang reclaimed GPUs from team B: {:?}",
        summary.evicted
    );
    for pod in &summary_reclaims {
        let named = summary_reclaims.iter().filter(|p| *p == pod).count();
        assert!(
            reclaimed_pods.get(*pod).is_some_and(|n| *n >= named),
            "the summary's reclaim of {pod} is a Reclaimed event in the cluster: {reclaimed_pods:?}"
        );
    }
    let names: std::collections::BTreeSet<String> = events
        .iter()
        .filter_map(|e| {
            Some(format!(
                "{}/{}",
                e.involved_object.namespace.clone()?,
                e.involved_object.name.clone()?
            ))
        })
        .chain(pods.iter().map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default()
            )
        }))
        .collect();
    for w in summary.waited.iter().chain(summary.evicted.iter()) {
        assert!(
            names.contains(&w.pod),
            "{} is a pod the cluster knows",
            w.pod
        );
    }

    // The web view, in a real browser, with a GPU faulted so the health panel has something
    // to show.
    demo.up
        .cluster
        .fault("h100-80gb-1", &Fault::OffBus { gpu: 3 })
        .await
        .expect("fault injected");
    gantry_testkit::eventually_secs(
        "the picture to show h100-80gb-1 GPU 3 unhealthy and the ClusterPolicy ready",
        60,
        || {
            // …with the ClusterPolicy's state read back (it is polled apart from the GPUs).
            let s = demo.collector.latest();
            let faulted = s
                .nodes
                .iter()
                .find(|n| n.name == "h100-80gb-1")
                .and_then(|n| n.gpus.get(3))
                .is_some_and(|g| !g.healthy);
            let policy = s.cluster_policy.map(|p| p.state).unwrap_or_default();
            std::future::ready(if faulted && policy == "ready" {
                Ok(true)
            } else {
                Err(format!(
                    "GPU 3 faulted: {faulted}, ClusterPolicy {policy:?}"
                ))
            })
        },
    )
    .await
    .unwrap();
    let url = demo
        .ui
        .as_ref()
        .expect("the demo serves its web view")
        .url();
    match chromium() {
        None => eprintln!(
            "skipping the web view check: no chromium on PATH (scripts/test.sh installs Debian's)"
        ),
        Some(browser) => {
            let profile = tempfile::tempdir().unwrap();
            let out = tokio::process::Command::new(&browser)
                .args(chromium_args(profile.path()))
                .arg("--dump-dom")
                .arg(&url)
                .output()
                .await
                .expect("chromium runs");
            let dom = String::from_utf8_lossy(&out.stdout);
            assert!(
                dom.contains("data-loaded=\"true\""),
                "the page loaded its snapshot: {dom:.2000}"
            );
            for node in ["h100-80gb-0", "a100-80gb-0", "l4-0"] {
                assert!(
                    dom.contains(&format!("data-node=\"{node}\"")),
                    "grid row for {node}"
                );
            }
            assert!(
                dom.contains("data-pod=\"team-a/train-a-"),
                "the gang's pods are in the grid"
            );
            assert!(dom.contains("k-fraction"), "fractional holders are drawn");
            assert!(dom.contains("data-queue=\"team-b\""));
            assert!(
                !dom.contains("data-fair-share=\"\""),
                "every queue row has a fair share"
            );
            assert!(
                dom.contains("id=\"x-title\""),
                "the chart's axes are titled"
            );
            assert!(
                dom.contains("id=\"queue-total\""),
                "the queues' total is shown"
            );
            web_view_panels(&dom);
            let shot =
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo-web-view.png");
            let profile = tempfile::tempdir().unwrap();
            let status = tokio::process::Command::new(&browser)
                .args(chromium_args(profile.path()))
                .arg(format!("--screenshot={}", shot.display()))
                .arg("--window-size=1400,1100")
                .arg(&url)
                .status()
                .await
                .expect("chromium screenshot");
            assert!(status.success());
            assert!(
                std::fs::metadata(&shot)
                    .map(|m| m.len() > 10_000)
                    .unwrap_or(false),
                "screenshot at {}",
                shot.display()
            );
            println!("web view screenshot: {}", shot.display());
        }
    }
    demo.up
        .cluster
        .fault("h100-80gb-1", &Fault::Clear { gpu: 3 })
        .await
        .expect("fault cleared");
    demo.shutdown().await;
}
