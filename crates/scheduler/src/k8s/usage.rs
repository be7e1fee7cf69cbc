//! Time-based fair share on a cluster: where each queue's historical usage comes from
//! (`usageDBConfig`), fed into the core's input every cycle.
//!
//! - `clientType: prometheus` (KAI's): a task runs KAI's PromQL against the configured URL
//!   every `fetchInterval`; the loop uses the latest answer (older than `stalenessPeriod`:
//!   still used, with a warning, as KAI does). Only plain `http://` URLs.
//! - `clientType: internal` (Gantry's): the loop records each cycle's allocation per queue into
//!   a [`Tracker`], and persists it every `fetchInterval` in ConfigMap
//!   `gantry-scheduler-usage` (key `usage.json`) in the scheduler's namespace, read back at
//!   start: KAI keeps this history outside the scheduler (Prometheus), so it survives a
//!   restart or a leader change, and so does Gantry's.
//! - no `usageDBConfig`: usage stays 0 (KAI without a usage database).

use crate::decisions::QueueReport;
use crate::input::ClusterInput;
use crate::usage::{self, ClientType, Tracker, UsageDbConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// ConfigMap holding the internal tracker.
pub const USAGE_CONFIGMAP: &str = "gantry-scheduler-usage";
const KEY: &str = "usage.json";

type Usage = BTreeMap<String, [f64; 3]>;

enum Source {
    Off,
    Internal {
        tracker: Tracker,
        saved: Instant,
    },
    Prometheus {
        rx: watch::Receiver<Option<(Instant, Usage)>>,
        warned_stale: bool,
    },
}

/// The loop's usage source.
pub struct UsageState {
    cfg: Option<UsageDbConfig>,
    client: kube::Client,
    namespace: String,
    source: Source,
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl UsageState {
    /// Load the persisted history or start the Prometheus task (into `tasks`, so it ends
    /// with the loop).
    pub async fn start(
        client: &kube::Client,
        cfg: Option<UsageDbConfig>,
        namespace: &str,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> UsageState {
        let source = match &cfg {
            None => Source::Off,
            Some(c) if c.client_type == ClientType::Internal => Source::Internal {
                tracker: load(client, namespace).await,
                saved: Instant::now(),
            },
            Some(c) => match connection(c) {
                Ok(url) => {
                    let (tx, rx) = watch::channel(None);
                    tasks.spawn(fetch_loop(url, c.usage_params.clone(), tx));
                    Source::Prometheus {
                        rx,
                        warned_stale: false,
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "usageDBConfig: time-based fair share is off");
                    Source::Off
                }
            },
        };
        UsageState {
            cfg,
            client: client.clone(),
            namespace: namespace.to_string(),
            source,
        }
    }

    /// Set every queue's `usage` for the coming cycle.
    pub fn apply(&mut self, input: &mut ClusterInput) {
        let Some(cfg) = &self.cfg else { return };
        let usage: Usage = match &mut self.source {
            Source::Off => return,
            Source::Internal { tracker, .. } => {
                match tracker.usage(&cfg.usage_params, now_secs()) {
                    Ok(u) => u,
                    Err(e) => {
                        tracing::warn!(error = %e, "usageDBConfig");
                        return;
                    }
                }
            }
            Source::Prometheus { rx, warned_stale } => {
                let Some((at, u)) = rx.borrow().clone() else {
                    return;
                };
                let stale =
                    Duration::from_nanos(cfg.usage_params.staleness_period().0.max(0) as u64);
                if at.elapsed() > stale && !*warned_stale {
                    tracing::warn!(age = ?at.elapsed(), "usage data is stale; using the last answer");
                }
                *warned_stale = at.elapsed() > stale;
                u
            }
        };
        for q in &mut input.queues {
            q.usage = usage.get(&q.name).copied().unwrap_or([0.0; 3]);
        }
    }

    /// Internal source: add this cycle's allocation (`queues`, rolled up) and the cluster's
    /// capacity; persist every `fetchInterval`.
    pub fn record(&mut self, input: &ClusterInput, queues: &[QueueReport]) {
        let (Some(cfg), Source::Internal { tracker, saved }) = (&self.cfg, &mut self.source) else {
            return;
        };
        let alloc: Usage = queues
            .iter()
            .map(|q| (q.name.clone(), q.allocated))
            .collect();
        tracker.record(&cfg.usage_params, now_secs(), &alloc, capacity(input));
        let every = Duration::from_nanos(cfg.usage_params.fetch_interval().0.max(0) as u64);
        if saved.elapsed() >= every {
            *saved = Instant::now();
            let (client, ns) = (self.client.clone(), self.namespace.clone());
            match serde_json::to_string(tracker) {
                Ok(json) => {
                    tokio::spawn(async move { save(client, ns, json).await });
                }
                Err(e) => tracing::warn!(error = %e, "usage history does not serialise"),
            }
        }
    }
}

/// Schedulable capacity in the core's natural units (GPUs incl. MIG slices, millicores,
/// bytes), as the proportion plugin counts it.
pub fn capacity(input: &ClusterInput) -> [f64; 3] {
    let mut c = [0.0; 3];
    for n in input.nodes.iter().filter(|n| n.schedulable) {
        let mig: u32 = n.mig.iter().map(|(k, v)| mig_slices(k) * v).sum();
        c[0] += f64::from(n.gpus + mig);
        c[1] += n.cpu_milli.max(0) as f64;
        c[2] += n.memory_bytes.max(0) as f64;
    }
    c
}

/// `nvidia.com/mig-3g.40gb` -> 3 GPU slices.
fn mig_slices(resource: &str) -> u32 {
    let p = resource.rsplit('-').next().unwrap_or(resource);
    p.split('g')
        .next()
        .and_then(|g| g.parse().ok())
        .unwrap_or(1)
}

fn connection(c: &UsageDbConfig) -> Result<String, String> {
    let url = match (&c.connection_string, &c.connection_string_env_var) {
        (Some(u), _) if !u.is_empty() => u.clone(),
        (_, Some(var)) => std::env::var(var).map_err(|_| {
            format!("usageDBConfig.connectionStringEnvVar: environment variable {var} is not set")
        })?,
        _ => {
            return Err(
                "usageDBConfig.clientType is prometheus but no connectionString is set".into(),
            );
        }
    };
    if !url.starts_with("http://") {
        return Err(format!(
            "usageDBConfig.connectionString {url:?}: only http:// URLs are supported"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

async fn load(client: &kube::Client, ns: &str) -> Tracker {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match api.get_opt(USAGE_CONFIGMAP).await {
        Ok(Some(cm)) => {
            let json = cm
                .data
                .and_then(|d| d.get(KEY).cloned())
                .unwrap_or_default();
            serde_json::from_str(&json).unwrap_or_else(|e| {
                tracing::warn!(configmap = USAGE_CONFIGMAP, error = %e, "usage history unreadable; starting empty");
                Tracker::default()
            })
        }
        Ok(None) => Tracker::default(),
        Err(e) => {
            tracing::warn!(configmap = USAGE_CONFIGMAP, error = %e, "reading usage history failed; starting empty");
            Tracker::default()
        }
    }
}

async fn save(client: kube::Client, ns: String, json: String) {
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let patch = serde_json::json!({"data": {KEY: json}});
    match api
        .patch(
            USAGE_CONFIGMAP,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let cm: ConfigMap = match serde_json::from_value(serde_json::json!({
                "metadata": {"name": USAGE_CONFIGMAP, "namespace": ns},
                "data": {KEY: json},
            })) {
                Ok(cm) => cm,
                Err(_) => return,
            };
            if let Err(e) = api.create(&PostParams::default(), &cm).await {
                tracing::warn!(configmap = USAGE_CONFIGMAP, error = %e, "saving usage history failed");
            }
        }
        Err(e) => {
            tracing::warn!(configmap = USAGE_CONFIGMAP, error = %e, "saving usage history failed")
        }
    }
}

/// Query Prometheus every `fetchInterval`; publish each complete answer.
async fn fetch_loop(
    url: String,
    params: usage::UsageParams,
    tx: watch::Sender<Option<(Instant, Usage)>>,
) {
    let timeout = params
        .extra_params
        .get("usageQueryTimeout")
        .and_then(|v| gantry_k8s_rules::duration::parse_std_duration(v).ok())
        .unwrap_or(Duration::from_secs(10));
    let every = Duration::from_nanos(params.fetch_interval().0.max(0) as u64);
    loop {
        match tokio::time::timeout(timeout, fetch(&url, &params)).await {
            Ok(Ok(u)) => {
                let _ = tx.send(Some((Instant::now(), u)));
            }
            Ok(Err(e)) => tracing::warn!(url = %url, error = %e, "failed to fetch usage data"),
            Err(_) => tracing::warn!(url = %url, "usage query timed out after {timeout:?}"),
        }
        tokio::time::sleep(every).await;
    }
}

async fn fetch(url: &str, params: &usage::UsageParams) -> Result<Usage, String> {
    let now = now_secs() as i64;
    let queries = usage::prometheus_queries(params, now);
    let mut cap = [0.0; 3];
    let mut alloc: [Vec<_>; 3] = Default::default();
    for (r, (a, c)) in queries.iter().enumerate() {
        let capv = usage::parse_vector(&query(url, c).await?)
            .map_err(|e| format!("capacity query {c}: {e}"))?;
        cap[r] = capv
            .first()
            .map(|s| s.1)
            .ok_or_else(|| format!("no data for capacity query {c}"))?;
        alloc[r] =
            usage::parse_vector(&query(url, a).await?).map_err(|e| format!("query {a}: {e}"))?;
    }
    Ok(usage::combine(alloc, cap))
}

/// `GET <url>/api/v1/query?query=<q>` over HTTP/1.0 (the answer ends with the connection, so
/// no chunked bodies); the body of any answer (Prometheus explains errors in JSON).
async fn query(url: &str, q: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, base) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let addr = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let path = format!("/{}api/v1/query?query={}", prefixed(base), encode(q));
    let req = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with('2') && !body.trim_start().starts_with('{') {
        return Err(format!("{addr}: HTTP {status}"));
    }
    Ok(body.to_string())
}

fn prefixed(base: &str) -> String {
    let b = base.trim_matches('/');
    if b.is_empty() {
        String::new()
    } else {
        format!("{b}/")
    }
}

/// Percent-encoding for a query-string value (RFC 3986 unreserved characters kept).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            encode("sum(a{b=\"c\"})[1h:1m]"),
            "sum%28a%7Bb%3D%22c%22%7D%29%5B1h%3A1m%5D"
        );
    }

    /// A tiny server answering the Prometheus HTTP API: capacity queries 10 (GPU), usage
    /// queries one sample per queue; it records the queries it got.
    async fn fake_prometheus() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let q = req.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(q.clone());
                let body = if q.contains("kube_node_status_capacity") {
                    r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"10"]}]}}"#
                } else if q.contains("allocated_gpus") {
                    r#"{"status":"success","data":{"resultType":"vector","result":[
                        {"metric":{"queue_name":"heavy"},"value":[1,"8"]},
                        {"metric":{"queue_name":"light"},"value":[1,"1"]}]}}"#
                } else {
                    r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#
                };
                let resp =
                    format!("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{body}");
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn usage_comes_from_prometheus_normalised_to_capacity() {
        let (url, seen) = fake_prometheus().await;
        let params = usage::UsageParams {
            half_life_period: Some(crate::config::GoDuration::from_secs(600)),
            ..Default::default()
        };
        let u = fetch(&url, &params).await.unwrap();
        assert_eq!(u["heavy"][0], 0.8);
        assert_eq!(u["light"][0], 0.1);
        assert_eq!(u["heavy"][1], 0.0, "no CPU samples");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 6, "capacity and allocation for 3 resources");
        assert!(
            seen.iter()
                .all(|q| q.starts_with("/api/v1/query?query=sum_over_time"))
        );
        assert!(seen.iter().any(|q| q.contains("kai_queue_allocated_gpus")));
    }

    #[tokio::test]
    async fn prometheus_errors_name_the_query() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = vec![0u8; 8192];
                let _ = s.read(&mut buf).await;
                let body = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
                let _ = s
                    .write_all(format!("HTTP/1.0 400 Bad Request\r\n\r\n{body}").as_bytes())
                    .await;
            }
        });
        let e = fetch(&url, &usage::UsageParams::default())
            .await
            .unwrap_err();
        assert!(
            e.contains("kube_node_status_capacity") && e.contains("bad_data"),
            "{e}"
        );
        let down = fetch("http://127.0.0.1:1", &usage::UsageParams::default()).await;
        assert!(down.unwrap_err().contains("connecting to 127.0.0.1:1"));
    }

    #[test]
    fn connection_needs_an_http_url() {
        let mut c = UsageDbConfig::default();
        assert!(connection(&c).unwrap_err().contains("no connectionString"));
        c.connection_string = Some("https://prom:9090".into());
        assert!(connection(&c).unwrap_err().contains("only http://"));
        c.connection_string = Some("http://prom:9090/".into());
        assert_eq!(connection(&c).unwrap(), "http://prom:9090");
    }
}
