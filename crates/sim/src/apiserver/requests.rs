//! Requests served, by verb and resource: kube-apiserver's `apiserver_request_total` (without
//! its code and scope labels), served at `/metrics` and read by the benchmarks to say where an
//! API server's time goes.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// (verb, resource, subresource).
pub type RequestKey = (&'static str, String, String);

#[derive(Default)]
pub struct RequestCounts(Mutex<HashMap<RequestKey, u64>>);

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
        if let Ok(mut m) = self.0.lock() {
            *m.entry((verb, resource.to_string(), sub.to_string()))
                .or_default() += 1;
        }
    }

    /// Every count, the largest first (ties by key, so the order is stable).
    pub fn sorted(&self) -> Vec<(RequestKey, u64)> {
        let mut v: Vec<_> = self
            .0
            .lock()
            .map(|m| m.iter().map(|(k, n)| (k.clone(), *n)).collect())
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
        let mut v = self.sorted();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        for ((verb, resource, sub), n) in v {
            let verb = verb.to_ascii_uppercase();
            let _ = writeln!(
                out,
                "{name}{{verb=\"{verb}\",resource=\"{resource}\",subresource=\"{sub}\"}} {n}"
            );
        }
        out
    }
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
