//! Clients that never read and sockets that never speak (issue #44): watchers that leave
//! their events unread are closed and cost a bounded amount each, and idle connections that
//! show no token cannot take the slots everyone else needs.

use gantry_sim::{ApiServer, ControlPlane};
use gantry_testkit::{Cluster, eventually_secs};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Result<T = ()> = anyhow::Result<T>;

/// A TLS client trusting the control plane's CA (HTTP/1.1: no ALPN offered).
fn connector(cp: &ControlPlane) -> Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut cp.ca_pem().as_bytes()) {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn tls(cp: &ControlPlane, c: &tokio_rustls::TlsConnector) -> Result<Tls> {
    let tcp = tokio::net::TcpStream::connect(cp.addr()).await?;
    let name = rustls::pki_types::ServerName::IpAddress(cp.addr().ip().into());
    Ok(c.connect(name, tcp).await?)
}

/// The process's resident memory in bytes (`VmRSS`); the server runs in this process.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

async fn readyz(client: &kube::Client) -> Result<Duration> {
    let t = Instant::now();
    let req = http::Request::get("/readyz").body(Vec::new())?;
    let text = tokio::time::timeout(Duration::from_secs(10), client.request_text(req)).await??;
    anyhow::ensure!(text == "ok", "/readyz said {text}");
    Ok(t.elapsed())
}

const OBJECTS: usize = 20_000;
const WATCHERS: usize = 300;
const UPDATE_FOR: Duration = Duration::from_secs(60);
/// The stated bound on the whole process (server and test) while the watchers hang.
const RSS_BOUND: u64 = 1 << 30;

fn configmap(i: usize, round: usize) -> serde_json::Value {
    json!({"metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "scale"}},
           "data": {"round": round.to_string(), "payload": "x".repeat(512)}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_watches_stay_bounded_at_scale() -> Result {
    let env = Cluster::builder().start().await?;
    let (cp, client) = (env.cp(), env.client().clone());
    let api: Arc<ApiServer> = cp.api().clone();
    let Some(t) = api.target("", "v1", "configmaps", "default") else {
        anyhow::bail!("configmaps are not served");
    };
    let creator = {
        let (api, t) = (api.clone(), t.clone());
        tokio::task::spawn_blocking(move || -> Result {
            for i in 0..OBJECTS {
                api.create(&t, configmap(i, 0), "scale-test")?;
            }
            Ok(())
        })
    };
    creator.await??;
    let before = rss();
    // 300 watchers from resourceVersion 0 (every object as ADDED first) that never read.
    let tls_client = connector(cp)?;
    let request = format!(
        "GET /api/v1/configmaps?watch=1&resourceVersion=0 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        cp.addr(),
        cp.token()
    );
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut s = tls(cp, &tls_client).await?;
        s.write_all(request.as_bytes()).await?;
        s.flush().await?;
        watchers.push(s);
    }
    eventually_secs("the watches are registered", 60, || async {
        anyhow::Ok(api.watches.open() + api.watches.terminated() as i64 >= WATCHERS as i64)
    })
    .await?;
    // An update loop for 60 s (about 500 updates a second), sampling memory and /readyz.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let updater = {
        let (api, t, stop) = (api.clone(), t.clone(), stop.clone());
        tokio::task::spawn_blocking(move || -> Result<usize> {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..10 {
                    let i = n % OBJECTS;
                    let name = format!("cm-{i:05}");
                    api.update(&t, &name, "", configmap(i, n / OBJECTS + 1), "scale-test")?;
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(n)
        })
    };
    let started = Instant::now();
    let (mut peak, mut ready) = (rss(), Vec::new());
    while started.elapsed() < UPDATE_FOR {
        ready.push(readyz(&client).await?);
        peak = peak.max(rss());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let updates = updater.await??;
    peak = peak.max(rss());
    ready.sort();
    let (median, p99, slowest) = (
        ready[ready.len() / 2],
        ready[ready.len() * 99 / 100],
        ready[ready.len() - 1],
    );
    let terminated = api.watches.terminated();
    println!(
        "{OBJECTS} ConfigMaps, {WATCHERS} unread watches, {updates} updates in {:?}: RSS {} MiB before the watches, peak {} MiB; /readyz median {median:?}, p99 {p99:?}, slowest {slowest:?}; {terminated} watchers closed, {} open",
        UPDATE_FOR,
        before >> 20,
        peak >> 20,
        api.watches.open()
    );
    assert!(
        peak < RSS_BOUND,
        "RSS peaked at {} MiB (bound {} MiB)",
        peak >> 20,
        RSS_BOUND >> 20
    );
    assert!(
        slowest < Duration::from_secs(1),
        "/readyz took {slowest:?} (median {median:?})"
    );
    // Every unread watcher was closed, and its client sees the stream end.
    assert!(
        terminated >= WATCHERS as u64,
        "only {terminated} of {WATCHERS} unread watchers were closed"
    );
    for mut s in watchers.drain(..10) {
        let ended = tokio::time::timeout(Duration::from_secs(60), async {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "a closed watcher's connection still delivers data after 60 s"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_without_a_token_do_not_starve_others() -> Result {
    // A server serving 64 connections at once, and three times that many idle ones: the
    // issue's 871 idle connections against a 1024-file limit, scaled down so the test
    // process (which holds both ends) stays within its own.
    let limit = 64;
    let env = Cluster::builder()
        .options(gantry_sim::ControlPlaneOptions {
            max_connections: Some(limit),
            ..Default::default()
        })
        .start()
        .await?;
    let cp = env.cp();
    let tls_client = connector(cp)?;
    // Half never start TLS, half finish the handshake and send nothing.
    let (mut idle_tcp, mut idle_tls) = (Vec::new(), Vec::new());
    for i in 0..3 * limit {
        if i % 2 == 0 {
            idle_tcp.push(tokio::net::TcpStream::connect(cp.addr()).await?);
        } else if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(5), tls(cp, &tls_client)).await
        {
            idle_tls.push(s);
        }
    }
    // A client with a token still gets answers, each on a new connection.
    for _ in 0..5 {
        let fresh = cp.client()?;
        readyz(&fresh).await?;
        let req = http::Request::get("/api/v1/namespaces/default/configmaps").body(Vec::new())?;
        let list = tokio::time::timeout(Duration::from_secs(10), fresh.request_text(req)).await??;
        assert!(list.contains("ConfigMapList"), "{list}");
    }
    // The server closed idle connections to make room: the oldest TLS ones see the end.
    let mut closed = 0;
    for s in &mut idle_tls {
        let mut b = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), s.read(&mut b)).await
        {
            closed += 1;
        }
    }
    println!(
        "{} idle TCP and {} idle TLS connections opened against a limit of {limit}; {closed} TLS ones closed by the server; new clients answered",
        idle_tcp.len(),
        idle_tls.len()
    );
    assert!(closed > 0, "no idle connection was closed to make room");
    Ok(())
}
