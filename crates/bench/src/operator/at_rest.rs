//! The cluster at rest once the policy is ready (`gantry bench operator --at-rest`): the CPU
//! each side spent in a window and the API requests made in it, from counters read before
//! and after.

use std::time::Duration;

use gantry_sim::apiserver::requests::RequestKey;

/// The cluster at rest once ready: CPU by side and the API requests made in a window.
pub(super) struct AtRest {
    window: Duration,
    /// CPU seconds in the window: the bench process (API server, controllers, in-process
    /// kubelets), the kubelet processes, the operator.
    spent: [f64; 3],
    /// Requests in the window: (verb, resource, count, write CPU seconds), most first.
    requests: Vec<(String, String, u64, f64)>,
}

impl AtRest {
    pub(super) fn new(
        window: Duration,
        spent: [f64; 3],
        before: &[(RequestKey, u64, f64)],
        after: Vec<(RequestKey, u64, f64)>,
    ) -> Self {
        let mut requests: Vec<_> = after
            .into_iter()
            .filter_map(|(key, n, cpu)| {
                let (n0, cpu0) = before
                    .iter()
                    .find(|(k, _, _)| *k == key)
                    .map_or((0, 0.0), |(_, n, c)| (*n, *c));
                let (verb, res, sub) = key;
                let res = if sub.is_empty() {
                    res
                } else {
                    format!("{res}/{sub}")
                };
                (n > n0).then(|| (verb.to_string(), res, n - n0, cpu - cpu0))
            })
            .collect();
        requests.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
        AtRest {
            window,
            spent,
            requests,
        }
    }

    pub(super) fn table(&self, nodes: f64) -> String {
        let secs = self.window.as_secs_f64().max(0.001);
        let mut out = format!(
            "| at rest, {secs:.0} s after ready | CPU, s | share of one core | per node per minute |\n|---|---|---|---|\n"
        );
        let names = [
            "bench process (API server, controllers)",
            "kubelet processes",
            "operator",
        ];
        for (name, cpu) in names.iter().zip(&self.spent) {
            out.push_str(&format!(
                "| {name} | {cpu:.1} | {:.0} % | {:.2} ms |\n",
                cpu / secs * 100.0,
                cpu * 1000.0 * 60.0 / secs / nodes
            ));
        }
        out.push_str(
            "\n| API requests at rest (top 10) | count | per second | CPU in the write, s |\n|---|---|---|---|\n",
        );
        for (verb, res, n, cpu) in self.requests.iter().take(10) {
            let cpu = if *cpu > 0.0 {
                format!("{cpu:.2}")
            } else {
                "-".into()
            };
            out.push_str(&format!(
                "| {verb} {res} | {n} | {:.1} | {cpu} |\n",
                *n as f64 / secs
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_counts_only_what_it_added() {
        let key = |v: &'static str, r: &str, s: &str| (v, r.to_string(), s.to_string());
        let before = [
            (key("patch", "leases", ""), 100, 1.0),
            (key("patch", "nodes", ""), 7, 0.5),
        ];
        let after = vec![
            (key("patch", "leases", ""), 600, 1.5),
            (key("patch", "nodes", ""), 7, 0.5),
            (key("get", "nodes", "status"), 20, 0.0),
        ];
        let r = AtRest::new(Duration::from_secs(10), [1.0, 2.0, 0.0], &before, after);
        assert_eq!(
            r.requests,
            vec![
                ("patch".to_string(), "leases".to_string(), 500, 0.5),
                ("get".to_string(), "nodes/status".to_string(), 20, 0.0),
            ],
            "requests not made in the window are left out"
        );
        let t = r.table(100.0);
        // 2 s of CPU in 10 s: 20 % of a core; per node per minute 2 s × 6 / 100 nodes.
        assert!(
            t.contains("| kubelet processes | 2.0 | 20 % | 120.00 ms |"),
            "{t}"
        );
        assert!(t.contains("| patch leases | 500 | 50.0 | 0.50 |"), "{t}");
        assert!(t.contains("| get nodes/status | 20 | 2.0 | - |"), "{t}");
    }
}
