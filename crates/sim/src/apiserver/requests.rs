//! Requests served, by verb and resource: kube-apiserver's `apiserver_request_total` (without
//! its code and scope labels), served at `/metrics` and read by the benchmarks to say where an
//! API server's time goes; and the CPU the writes took on their worker thread
//! (`gantry_sim_apiserver_write_cpu_seconds_total`, the sim's own), which is what the writes
//! of a busy benchmark are limited by.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// (verb, resource, subresource).
pub type RequestKey = (&'static str, String, String);

/// Requests and their CPU, by key.
#[derive(Default, Clone, Copy)]
struct Tally {
    count: u64,
    cpu_ns: u64,
}

#[derive(Default)]
pub struct RequestCounts(Mutex<HashMap<RequestKey, Tally>>);

impl RequestCounts {
    /// Count one request: its method, whether it names an object, whether it watches.
    pub fn record(
        &self,
        method: &http::Method,
        named: bool,
        watch: bool,
        resource: &str,
        sub: &str,
    ) {
        self.add(verb(method, named, watch), resource, sub);
    }

    fn add(&self, verb: &'static str, resource: &str, sub: &str) {
        self.tally(verb, resource, sub, |t| t.count += 1);
    }

    /// Add the CPU one write of this method took (see [`thread_cpu_ns`]).
    pub fn record_cpu(
        &self,
        method: &http::Method,
        named: bool,
        resource: &str,
        sub: &str,
        ns: u64,
    ) {
        self.tally(verb(method, named, false), resource, sub, |t| {
            t.cpu_ns += ns
        });
    }

    fn tally(&self, verb: &'static str, resource: &str, sub: &str, f: impl FnOnce(&mut Tally)) {
        if let Ok(mut m) = self.0.lock() {
            f(m.entry((verb, resource.to_string(), sub.to_string()))
                .or_default());
        }
    }

    /// Every count, the largest first (ties by key, so the order is stable).
    pub fn sorted(&self) -> Vec<(RequestKey, u64)> {
        self.sorted_with_cpu()
            .into_iter()
            .map(|(k, n, _)| (k, n))
            .collect()
    }

    /// Every count with the seconds of CPU its writes took, the largest count first.
    pub fn sorted_with_cpu(&self) -> Vec<(RequestKey, u64, f64)> {
        let mut v: Vec<_> = self
            .0
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(k, t)| (k.clone(), t.count, t.cpu_ns as f64 / 1e9))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The Prometheus text exposition.
    pub fn exposition(&self) -> String {
        let name = "apiserver_request_total";
        let mut out = format!(
            "# HELP {name} Counter of apiserver requests broken out for each verb, resource and subresource.\n# TYPE {name} counter\n"
        );
        let mut v = self.sorted_with_cpu();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        for ((verb, resource, sub), n, _) in &v {
            let verb = verb.to_ascii_uppercase();
            let _ = writeln!(
                out,
                "{name}{{verb=\"{verb}\",resource=\"{resource}\",subresource=\"{sub}\"}} {n}"
            );
        }
        let cpu = "gantry_sim_apiserver_write_cpu_seconds_total";
        let _ = write!(
            out,
            "# HELP {cpu} CPU the simulated API server's writes took on their worker thread, by verb, resource and subresource.\n# TYPE {cpu} counter\n"
        );
        for ((verb, resource, sub), _, secs) in v.iter().filter(|r| r.2 > 0.0) {
            let verb = verb.to_ascii_uppercase();
            let _ = writeln!(
                out,
                "{cpu}{{verb=\"{verb}\",resource=\"{resource}\",subresource=\"{sub}\"}} {secs}"
            );
        }
        out
    }
}

/// The CPU this thread has used, in nanoseconds (0 where the clock cannot be read).
pub fn thread_cpu_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The verb kube-apiserver reports for a request.
pub fn verb(method: &http::Method, named: bool, watch: bool) -> &'static str {
    match (method.as_str(), named, watch) {
        (_, _, true) => "watch",
        ("GET", true, _) => "get",
        ("GET", false, _) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sort_largest_first_and_render_as_upstream_names_them() {
        let c = RequestCounts::default();
        c.add("get", "nodes", "");
        c.record(&http::Method::GET, false, false, "pods", "");
        c.add("list", "pods", "");
        c.add("patch", "pods", "status");
        let s = c.sorted();
        assert_eq!(s[0], (("list", "pods".into(), String::new()), 2));
        assert_eq!(s.len(), 3);
        let text = c.exposition();
        assert!(text.contains(
            "apiserver_request_total{verb=\"PATCH\",resource=\"pods\",subresource=\"status\"} 1\n"
        ));
        assert!(text.contains("# TYPE apiserver_request_total counter"));
        assert!(!text.contains("gantry_sim_apiserver_write_cpu_seconds_total{"));
        c.record_cpu(&http::Method::PATCH, true, "pods", "status", 1_500_000_000);
        assert_eq!(
            c.sorted_with_cpu()
                .into_iter()
                .find(|r| r.0.1 == "pods" && r.0.2 == "status")
                .map(|r| (r.1, r.2)),
            Some((1, 1.5))
        );
        assert!(c.exposition().contains(
            "gantry_sim_apiserver_write_cpu_seconds_total{verb=\"PATCH\",resource=\"pods\",subresource=\"status\"} 1.5\n"
        ));
    }

    #[test]
    fn the_thread_clock_moves_with_work() {
        let t0 = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_ns() > t0, "{x}");
    }

    #[test]
    fn verbs() {
        use http::Method;
        assert_eq!(verb(&Method::GET, false, false), "list");
        assert_eq!(verb(&Method::GET, true, false), "get");
        assert_eq!(verb(&Method::GET, false, true), "watch");
        assert_eq!(verb(&Method::DELETE, false, false), "deletecollection");
    }
}
