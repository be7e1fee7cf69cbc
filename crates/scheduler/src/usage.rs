//! Time-based fair share: each queue's historical usage, normalised to cluster capacity, as
//! KAI's usage database computes it (`pkg/scheduler/cache/usagedb`): over a window (sliding:
//! the last `windowSize`; tumbling: since the last reset at `tumblingWindowStartTime + n ×
//! windowSize`), every sample weighted by `0.5^(age / halfLifePeriod)` when a half-life is set,
//! the queue's summed allocation divided by the summed cluster capacity (10 GPUs for 10 h and a
//! queue that used 24 GPU-hours: 0.24).
//!
//! [`Tracker`] keeps that history inside the scheduler (usage client `internal`): the shell
//! records each cycle's allocation per queue and the capacity, and reads the normalised usage
//! back before the next cycle. It is plain data (serde), so the shell persists it across
//! restarts. With `clientType: prometheus` the same numbers come from PromQL instead
//! ([`prometheus_queries`]).

use crate::duration::GoDuration;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// KAI `usageDBConfig`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UsageDbConfig {
    /// `prometheus` (KAI's client) or `internal` (Gantry: the scheduler keeps the history).
    pub client_type: ClientType,
    /// Prometheus base URL (`http://prometheus-operated.kai-scheduler.svc:9090`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_string: Option<String>,
    /// Environment variable holding the URL instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_string_env_var: Option<String>,
    pub usage_params: UsageParams,
}

impl UsageDbConfig {
    /// What a running scheduler cannot use, named by key.
    pub fn validate(&self) -> Result<(), String> {
        if self.client_type == ClientType::Prometheus
            && self.connection_string.as_deref().unwrap_or("").is_empty()
            && self.connection_string_env_var.is_none()
        {
            return Err("usageDBConfig: clientType prometheus needs connectionString (or connectionStringEnvVar)".into());
        }
        if self.usage_params.window_type == WindowType::Tumbling {
            self.usage_params.tumbling_start()?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientType {
    #[default]
    Prometheus,
    Internal,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowType {
    #[default]
    Sliding,
    Tumbling,
}

/// KAI `usageParams` (defaults from `UsageParams.SetDefaults`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UsageParams {
    /// Off when absent or not positive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub half_life_period: Option<GoDuration>,
    /// Default 168h (one week).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_size: Option<GoDuration>,
    pub window_type: WindowType,
    /// RFC 3339; required for `tumbling`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tumbling_window_start_time: Option<String>,
    /// How often usage is fetched (Prometheus) or persisted (internal); default 1m.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fetch_interval: Option<GoDuration>,
    /// Prometheus data older than this is reported stale (still used); default 5m.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staleness_period: Option<GoDuration>,
    /// Metric overrides (`gpuAllocationMetric`, `gpuCapacityMetric`, ...), `queryResolution`,
    /// `usageQueryTimeout`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_params: BTreeMap<String, String>,
}

impl UsageParams {
    pub fn window_size(&self) -> GoDuration {
        self.window_size
            .filter(|w| w.0 > 0)
            .unwrap_or(GoDuration::from_secs(7 * 24 * 3600))
    }
    /// Half-life in seconds, `None` when decay is off.
    pub fn half_life(&self) -> Option<f64> {
        self.half_life_period
            .filter(|h| h.0 > 0)
            .map(GoDuration::secs_f64)
    }
    pub fn fetch_interval(&self) -> GoDuration {
        self.fetch_interval
            .filter(|d| d.0 > 0)
            .unwrap_or(GoDuration::from_secs(60))
    }
    pub fn staleness_period(&self) -> GoDuration {
        self.staleness_period
            .filter(|d| d.0 > 0)
            .unwrap_or(GoDuration::from_secs(300))
            .max(self.fetch_interval())
    }
    /// Unix seconds of the tumbling window's origin.
    pub fn tumbling_start(&self) -> Result<i64, String> {
        let s = self.tumbling_window_start_time.as_deref().ok_or(
            "usageParams.windowType is \"tumbling\" but tumblingWindowStartTime is not set",
        )?;
        parse_rfc3339(s).ok_or_else(|| {
            format!("usageParams.tumblingWindowStartTime {s:?}: not an RFC 3339 time")
        })
    }
    /// Where the window starts at `now` (Unix seconds).
    pub fn window_start(&self, now: f64) -> Result<f64, String> {
        let w = self.window_size().secs_f64();
        match self.window_type {
            WindowType::Sliding => Ok(now - w),
            WindowType::Tumbling => Ok(tumbling_reset(self.tumbling_start()? as f64, w, now)),
        }
    }
}

/// KAI `getLatestUsageResetTime_TumblingWindow`: the last `start + n·size` strictly before
/// `now` (a boundary equal to `now` belongs to the previous window); `now` itself when the
/// start lies ahead.
pub fn tumbling_reset(start: f64, size: f64, now: f64) -> f64 {
    if start > now || size <= 0.0 {
        return now;
    }
    let n = ((now - start) / size).ceil() - 1.0;
    start + n.max(0.0) * size
}

/// RFC 3339 (`2025-01-15T10:00:00Z`, offsets allowed) to Unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let (date, rest) = s.trim().split_once(['T', 't'])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, dd) = (d.next()??, d.next()??, d.next()??);
    let (time, offset) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => return None,
    };
    let mut t = time.split(':');
    let (h, mi) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec = t.next()?.split('.').next()?.parse::<i64>().ok()?;
    let off = match offset.as_bytes().first()? {
        b'Z' | b'z' => 0,
        sign => {
            let (oh, om) = offset[1..].split_once(':')?;
            let v = oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60;
            if *sign == b'-' { -v } else { v }
        }
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + dd - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + sec - off)
}

/// Buckets per window: the history is kept at `windowSize / BUCKETS` resolution.
pub const BUCKETS: usize = 120;

/// One bucket of history: resource-seconds per queue and of the cluster's capacity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Bucket index: covers `[index·width, (index+1)·width)` Unix seconds.
    pub index: i64,
    pub capacity: [f64; 3],
    pub queues: BTreeMap<String, [f64; 3]>,
}

/// The in-scheduler usage history (KAI's Prometheus history, kept by the scheduler).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tracker {
    /// Bucket width in seconds (changes with `windowSize`: the history is then restarted).
    pub width: f64,
    /// Last recorded time, Unix seconds (fractional).
    pub last: Option<f64>,
    pub buckets: Vec<Bucket>,
}

/// Longest gap between two records that is counted as usage: a scheduler that was down
/// (or a leader change) does not credit its queues with what it did not see.
pub const MAX_GAP_SECS: f64 = 30.0;

impl Tracker {
    /// Add `allocated` (per queue: GPUs, millicores, bytes, rolled up to ancestors) and the
    /// cluster `capacity` held since the last record, up to `now` (Unix seconds).
    pub fn record(
        &mut self,
        params: &UsageParams,
        now: f64,
        allocated: &BTreeMap<String, [f64; 3]>,
        capacity: [f64; 3],
    ) {
        let width = (params.window_size().secs_f64() / BUCKETS as f64).max(1e-3);
        if (self.width - width).abs() > 1e-9 {
            *self = Tracker {
                width,
                ..Default::default()
            };
        }
        let Some(last) = self.last.replace(now) else {
            return;
        };
        let dt = (now - last).clamp(0.0, MAX_GAP_SECS);
        if dt <= 0.0 {
            return;
        }
        // Credit the bucket holding the interval's midpoint.
        let index = ((now - dt / 2.0) / width).floor() as i64;
        let b = match self.buckets.iter().position(|b| b.index == index) {
            Some(i) => &mut self.buckets[i],
            None => {
                self.buckets.push(Bucket {
                    index,
                    ..Default::default()
                });
                self.buckets.sort_by_key(|b| b.index);
                let i = self
                    .buckets
                    .iter()
                    .position(|b| b.index == index)
                    .unwrap_or(0);
                &mut self.buckets[i]
            }
        };
        add_scaled(&mut b.capacity, capacity, dt);
        for (q, a) in allocated {
            add_scaled(b.queues.entry(q.clone()).or_default(), *a, dt);
        }
        // Forget what no window can reach any more.
        let keep_from = ((now - params.window_size().secs_f64()) / width).floor() as i64 - 1;
        self.buckets.retain(|b| b.index >= keep_from);
    }

    /// Per queue: its usage normalised to cluster capacity in the window at `now`, per
    /// resource (`[gpu, cpu, memory]`). Queues without history are absent (usage 0).
    pub fn usage(
        &self,
        params: &UsageParams,
        now: f64,
    ) -> Result<BTreeMap<String, [f64; 3]>, String> {
        let from = params.window_start(now)?;
        let half = params.half_life();
        let mut cap = [0.0; 3];
        let mut sums: BTreeMap<String, [f64; 3]> = BTreeMap::new();
        for b in &self.buckets {
            let (start, end) = (
                b.index as f64 * self.width,
                (b.index + 1) as f64 * self.width,
            );
            if end <= from || start > now {
                continue;
            }
            // The part of the bucket inside the window counts.
            let inside = ((end - from.max(start)) / self.width).clamp(0.0, 1.0);
            let mid = (start.max(from) + end.min(now)) / 2.0;
            let w = inside * half.map_or(1.0, |h| 0.5f64.powf((now - mid).max(0.0) / h));
            add_scaled(&mut cap, b.capacity, w);
            for (q, a) in &b.queues {
                add_scaled(sums.entry(q.clone()).or_default(), *a, w);
            }
        }
        for v in sums.values_mut() {
            for (x, c) in v.iter_mut().zip(cap) {
                *x = if c > 0.0 { *x / c } else { 0.0 };
            }
        }
        Ok(sums)
    }
}

fn add_scaled(to: &mut [f64; 3], v: [f64; 3], k: f64) {
    for (t, x) in to.iter_mut().zip(v) {
        *t += x * k;
    }
}

/// A Prometheus instant vector: each sample's labels and value.
pub type Samples = Vec<(BTreeMap<String, String>, f64)>;

/// The PromQL KAI's Prometheus client runs (`prometheus.go`): per resource, the allocation
/// metric and the capacity metric, each multiplied by the decay factor when a half-life is
/// set and summed over the window at `queryResolution` (default 1m). Returns
/// `[(allocation query, capacity query); 3]` for gpu, cpu, memory, evaluated at `now`
/// (Unix seconds) for a sliding window; a tumbling window evaluates `sum_over_time` of the
/// decayed metric over `[reset, now]` ([`UsageParams::window_start`]) instead.
pub fn prometheus_queries(params: &UsageParams, now: i64) -> [(String, String); 3] {
    let x = |k: &str, d: &str| {
        params
            .extra_params
            .get(k)
            .cloned()
            .unwrap_or_else(|| d.to_string())
    };
    let alloc = [
        x("gpuAllocationMetric", "kai_queue_allocated_gpus"),
        x("cpuAllocationMetric", "kai_queue_allocated_cpu_cores"),
        x("memoryAllocationMetric", "kai_queue_allocated_memory_bytes"),
    ];
    let cap = [
        x(
            "gpuCapacityMetric",
            "sum(kube_node_status_capacity{resource=\"nvidia_com_gpu\"})",
        ),
        x(
            "cpuCapacityMetric",
            "sum(kube_node_status_capacity{resource=\"cpu\"})",
        ),
        x(
            "memoryCapacityMetric",
            "sum(kube_node_status_capacity{resource=\"memory\"})",
        ),
    ];
    let resolution = params
        .extra_params
        .get("queryResolution")
        .and_then(|v| gantry_k8s_rules::parse_go_duration(v).ok())
        .filter(|n| *n > 0)
        .map_or(GoDuration::from_secs(60), GoDuration);
    let decay = |m: &str| match params.half_life() {
        Some(h) => format!("(({m}) * (0.5^(({now} - time()) / {h:.6})))"),
        None => m.to_string(),
    };
    let window = |m: &str| match params.window_type {
        WindowType::Sliding => format!(
            "sum_over_time(({})[{}:{resolution}])",
            decay(m),
            params.window_size()
        ),
        WindowType::Tumbling => {
            let from = params.window_start(now as f64).unwrap_or(now as f64) as i64;
            let range = (now - from).max(1);
            format!("sum_over_time(({})[{range}s:{resolution}])", decay(m))
        }
    };
    std::array::from_fn(|r| (window(&alloc[r]), window(&cap[r])))
}

/// One instant-vector answer of the Prometheus HTTP API (`/api/v1/query`), as
/// `(labels, value)` pairs; a clear error for anything else.
pub fn parse_vector(body: &str) -> Result<Samples, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("prometheus answer is not JSON: {e}"))?;
    if v["status"] != "success" {
        return Err(format!(
            "prometheus query failed: {} {}",
            v["errorType"].as_str().unwrap_or(""),
            v["error"].as_str().unwrap_or("(no error given)")
        ));
    }
    if v["data"]["resultType"] != "vector" {
        return Err(format!(
            "prometheus answered {}, expected a vector",
            v["data"]["resultType"]
        ));
    }
    let mut out = Vec::new();
    for s in v["data"]["result"].as_array().into_iter().flatten() {
        let labels = s["metric"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let value = s["value"][1]
            .as_str()
            .and_then(|x| x.parse::<f64>().ok())
            .ok_or_else(|| format!("prometheus sample without a numeric value: {s}"))?;
        out.push((labels, value));
    }
    Ok(out)
}

/// Combine the answers to [`prometheus_queries`] into usage per queue (label `queue_name`),
/// each divided by the capacity sum (KAI: a missing capacity divides by 1).
pub fn combine(alloc: [Samples; 3], capacity: [f64; 3]) -> BTreeMap<String, [f64; 3]> {
    let mut out: BTreeMap<String, [f64; 3]> = BTreeMap::new();
    for (r, samples) in alloc.into_iter().enumerate() {
        let cap = if capacity[r] > 0.0 { capacity[r] } else { 1.0 };
        for (labels, v) in samples {
            if let Some(q) = labels.get("queue_name") {
                out.entry(q.clone()).or_default()[r] = v / cap;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
