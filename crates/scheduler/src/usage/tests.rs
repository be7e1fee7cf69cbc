use super::*;

fn params(window: i64, half: Option<i64>) -> UsageParams {
    UsageParams {
        window_size: Some(GoDuration::from_secs(window)),
        half_life_period: half.map(GoDuration::from_secs),
        ..Default::default()
    }
}

fn alloc(v: &[(&str, f64)]) -> BTreeMap<String, [f64; 3]> {
    v.iter()
        .map(|(q, g)| (q.to_string(), [*g, 0.0, 0.0]))
        .collect()
}

/// KAI docs/time-based-fairshare: 10 GPUs over 10 hours, a queue that used 24 GPU-hours
/// (8 GPUs for 3 h) has usage 0.24.
#[test]
fn normalised_to_cluster_capacity() {
    let p = params(10 * 3600, None);
    let mut t = Tracker::default();
    let cap = [10.0, 0.0, 0.0];
    let mut now = 1_000_000.0;
    t.record(&p, now, &alloc(&[]), cap);
    for step in 0..(10 * 3600 / 10) {
        now += 10.0;
        let a = if step < 3 * 360 { 8.0 } else { 0.0 };
        t.record(&p, now, &alloc(&[("a", a), ("b", 0.0)]), cap);
    }
    let u = t.usage(&p, now).unwrap();
    assert!((u["a"][0] - 0.24).abs() < 0.01, "{u:?}");
    assert_eq!(u["b"][0], 0.0);
}

#[test]
fn half_life_halves_old_usage() {
    let p = params(3600, Some(60));
    let mut t = Tracker::default();
    let cap = [4.0, 0.0, 0.0];
    let mut now = 0.0;
    t.record(&p, now, &alloc(&[]), cap);
    // 60 s of full use by "a", then 60 s of full use by "b".
    for _ in 0..60 {
        now += 1.0;
        t.record(&p, now, &alloc(&[("a", 4.0), ("b", 0.0)]), cap);
    }
    for _ in 0..60 {
        now += 1.0;
        t.record(&p, now, &alloc(&[("a", 0.0), ("b", 4.0)]), cap);
    }
    let u = t.usage(&p, now).unwrap();
    // a's use is one half-life older: it weighs about half of b's.
    let ratio = u["a"][0] / u["b"][0];
    assert!((ratio - 0.5).abs() < 0.05, "{u:?}");
    // Later, with nothing running, both decay but their shares of the decayed capacity stay.
    let before = u["b"][0];
    for _ in 0..120 {
        now += 1.0;
        t.record(&p, now, &alloc(&[("a", 0.0), ("b", 0.0)]), cap);
    }
    let after = t.usage(&p, now).unwrap()["b"][0];
    assert!(after < before, "{before} -> {after}");
}

#[test]
fn sliding_window_forgets_old_usage() {
    let p = params(120, None);
    let mut t = Tracker::default();
    let cap = [1.0, 0.0, 0.0];
    let mut now = 0.0;
    t.record(&p, now, &alloc(&[]), cap);
    for _ in 0..60 {
        now += 1.0;
        t.record(&p, now, &alloc(&[("a", 1.0)]), cap);
    }
    assert!(t.usage(&p, now).unwrap()["a"][0] > 0.99);
    for _ in 0..200 {
        now += 1.0;
        t.record(&p, now, &alloc(&[("a", 0.0)]), cap);
    }
    assert!(t.usage(&p, now).unwrap()["a"][0] < 0.02);
    assert!(t.buckets.len() <= BUCKETS + 2, "old buckets dropped");
}

#[test]
fn a_gap_is_not_counted() {
    let p = params(3600, None);
    let mut t = Tracker::default();
    t.record(&p, 0.0, &alloc(&[]), [1.0, 0.0, 0.0]);
    t.record(&p, 1000.0, &alloc(&[("a", 1.0)]), [1.0, 0.0, 0.0]);
    let total: f64 = t.buckets.iter().map(|b| b.capacity[0]).sum();
    assert_eq!(total, MAX_GAP_SECS);
}

#[test]
fn survives_a_json_round_trip() {
    let p = params(600, Some(60));
    let mut t = Tracker::default();
    for i in 0..30 {
        t.record(&p, f64::from(i), &alloc(&[("a", 2.0)]), [4.0, 1.0, 1.0]);
    }
    let back: Tracker = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
    assert_eq!(back.usage(&p, 30.0), t.usage(&p, 30.0));
}

/// KAI prometheus_test.go `TestGetLatestUsageResetTime_TumblingWindow`.
#[test]
fn tumbling_reset_matches_kai() {
    let t = |s: &str| parse_rfc3339(s).unwrap() as f64;
    let h = 3600.0;
    let cases = [
        (
            "2025-01-15T10:00:00Z",
            h,
            "2025-01-15T12:30:00Z",
            "2025-01-15T12:00:00Z",
        ),
        (
            "2025-01-15T10:00:00Z",
            h,
            "2025-01-15T13:00:00Z",
            "2025-01-15T12:00:00Z",
        ),
        (
            "2025-01-15T10:00:00Z",
            h,
            "2025-01-15T13:00:01Z",
            "2025-01-15T13:00:00Z",
        ),
        (
            "2025-01-15T14:00:00Z",
            900.0,
            "2025-01-15T14:37:00Z",
            "2025-01-15T14:30:00Z",
        ),
        (
            "2025-01-01T00:00:00Z",
            7.0 * 24.0 * h,
            "2025-01-18T12:00:00Z",
            "2025-01-15T00:00:00Z",
        ),
        (
            "2025-01-15T10:00:00Z",
            h,
            "2025-01-15T10:00:00Z",
            "2025-01-15T10:00:00Z",
        ),
        (
            "2025-01-15T10:15:30Z",
            h,
            "2025-01-15T12:45:30Z",
            "2025-01-15T12:15:30Z",
        ),
    ];
    for (start, size, now, want) in cases {
        assert_eq!(
            tumbling_reset(t(start), size, t(now)),
            t(want),
            "{start} {now}"
        );
    }
    // A start in the future: an empty window.
    assert_eq!(tumbling_reset(t("2030-01-01T00:00:00Z"), h, 5.0), 5.0);
    assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
    assert_eq!(parse_rfc3339("yesterday"), None);
}

/// KAI `prometheus.go`: the decayed, windowed queries, and extra-param metric overrides
/// (prometheus_test.go `TestNewPrometheusClient_ExtraParams`).
#[test]
fn prometheus_queries_match_kai() {
    let mut p = params(7 * 24 * 3600, Some(600));
    let q = prometheus_queries(&p, 1762777987);
    assert_eq!(
        q[0].1,
        "sum_over_time((((sum(kube_node_status_capacity{resource=\"nvidia_com_gpu\"})) * \
         (0.5^((1762777987 - time()) / 600.000000))))[168h0m0s:1m0s])"
    );
    assert!(q[1].0.contains("kai_queue_allocated_cpu_cores"));
    p.half_life_period = None;
    p.extra_params
        .insert("gpuAllocationMetric".into(), "my_gpu_alloc".into());
    p.extra_params.insert("someOtherParam".into(), "x".into());
    let q = prometheus_queries(&p, 0);
    assert_eq!(q[0].0, "sum_over_time((my_gpu_alloc)[168h0m0s:1m0s])");
    assert!(q[2].0.contains("kai_queue_allocated_memory_bytes"));
}

#[test]
fn prometheus_answers_parse_or_say_why() {
    let ok = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"queue_name":"a"},"value":[1,"30"]},
        {"metric":{"queue_name":"b"},"value":[1,"10"]}]}}"#;
    let v = parse_vector(ok).unwrap();
    let u = combine([v, Vec::new(), Vec::new()], [100.0, 0.0, 0.0]);
    assert_eq!(u["a"], [0.3, 0.0, 0.0]);
    assert_eq!(u["b"][0], 0.1);
    let bad = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
    assert!(
        parse_vector(bad)
            .unwrap_err()
            .contains("bad_data parse error")
    );
    assert!(parse_vector("<html>").unwrap_err().contains("not JSON"));
    let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
    assert!(
        parse_vector(matrix)
            .unwrap_err()
            .contains("expected a vector")
    );
}

#[test]
fn tumbling_without_start_is_an_error() {
    let p = UsageParams {
        window_type: WindowType::Tumbling,
        ..Default::default()
    };
    let e = Tracker::default().usage(&p, 0.0).unwrap_err();
    assert!(e.contains("tumblingWindowStartTime"), "{e}");
}
