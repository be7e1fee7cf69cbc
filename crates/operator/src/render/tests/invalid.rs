//! Invalid specs name their field; arbitrary input never panics and renders deterministically.

use super::*;

#[test]
fn invalid_specs_name_the_field() {
    type Mutate = fn(&mut ClusterPolicySpec);
    let cases: Vec<(Mutate, &str)> = vec![
        (
            |s| {
                s.daemonsets
                    .rolling_update
                    .as_mut()
                    .unwrap()
                    .max_unavailable = Some("abc".into())
            },
            "spec.daemonsets.rollingUpdate.maxUnavailable",
        ),
        (
            |s| {
                s.daemonsets
                    .rolling_update
                    .as_mut()
                    .unwrap()
                    .max_unavailable = Some("0".into())
            },
            "spec.daemonsets.rollingUpdate.maxUnavailable",
        ),
        (
            |s| s.driver.image.version = Some("595 91".into()),
            "spec.driver.version",
        ),
        (|s| s.toolkit.image.version = None, "spec.toolkit.version"),
        (
            |s| s.gfd.image.image = Some("k8s/device plugin".into()),
            "spec.gfd.image",
        ),
        (
            |s| {
                let r = s
                    .driver
                    .container
                    .resources
                    .get_or_insert_with(Default::default);
                r.limits = Some(
                    [(
                        "memory".to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity("-2Gi".into()),
                    )]
                    .into(),
                );
            },
            "spec.driver.resources.limits.memory",
        ),
        (
            |s| s.driver.startup_probe.as_mut().unwrap().period_seconds = Some(0),
            "spec.driver.startupProbe.periodSeconds",
        ),
        (
            |s| s.device_plugin.config.as_mut().unwrap().name = None,
            "spec.devicePlugin.config.default",
        ),
        (
            |s| {
                s.driver
                    .upgrade_policy
                    .as_mut()
                    .unwrap()
                    .max_parallel_upgrades = Some(-1)
            },
            "spec.driver.upgradePolicy.maxParallelUpgrades",
        ),
        (|s| s.dcgm.host_port = Some(70000), "spec.dcgm.hostPort"),
        (
            |s| s.dcgm_exporter.service.as_mut().unwrap().type_ = Some("Headless".into()),
            "spec.dcgmExporter.service.type",
        ),
        (
            |s| s.operator.runtime_class = Some("Nvidia_RC".into()),
            "spec.operator.runtimeClass",
        ),
        (
            |s| {
                s.daemonsets.labels = Some([("team".to_string(), "-bad-".to_string())].into());
            },
            "spec.daemonsets.labels.team",
        ),
        (
            |s| {
                s.cdi.as_mut().unwrap().nri_plugin_enabled = Some(true);
                s.toolkit.enabled = Some(false);
            },
            "spec.cdi.nriPluginEnabled",
        ),
    ];
    for (mutate, path) in cases {
        let mut p = policy(HELM);
        mutate(&mut p.spec);
        let e = render(&p, &facts(ubuntu_nodes())).expect_err(path);
        assert_eq!(e.path, path, "{e}");
        assert!(!e.message.is_empty());
        assert!(
            e.to_string()
                .starts_with(&format!("ClusterPolicy {path}: "))
        );
    }
}
/// DNS-1123 subdomain.
fn valid_object_name(n: &str) -> bool {
    n.len() <= 253
        && n.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && seg.starts_with(|c: char| c.is_ascii_alphanumeric())
                && seg.ends_with(|c: char| c.is_ascii_alphanumeric())
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever the spec strings and node labels, render answers (never panics), answers the
    /// same twice, and every DaemonSet it renders has a valid name and `app` label.
    #[test]
    fn arbitrary_input_never_panics_and_is_deterministic(
        max in ".{0,6}",
        version in ".{0,12}",
        runtime_class in ".{0,8}",
        precompiled in proptest::bool::ANY,
        os in "[a-z]{1,6}",
        os_version in "[0-9]{1,2}(\\.[0-9]{1,2})?",
        kernel in "[a-z0-9]([a-zA-Z0-9._-]{0,60}[a-z0-9])?",
    ) {
        let mut p = policy(HELM);
        if let Some(r) = p.spec.daemonsets.rolling_update.as_mut() {
            r.max_unavailable = Some(max);
        }
        p.spec.driver.image.version = Some(version);
        p.spec.driver.use_precompiled = Some(precompiled);
        p.spec.operator.runtime_class = Some(runtime_class);
        let f = facts(vec![node("n", &os, &os_version, &kernel), node("m", "ubuntu", "22.04", "k")]);
        let first = render(&p, &f);
        proptest::prop_assert_eq!(&first, &render(&p, &f));
        if let Ok(out) = first {
            for d in daemonsets(&out) {
                let name = d["metadata"]["name"].as_str().unwrap_or("");
                proptest::prop_assert!(valid_object_name(name), "{}", name);
                let app = d["spec"]["selector"]["matchLabels"]["app"].as_str().unwrap_or("");
                proptest::prop_assert!(app.len() <= 63 && !app.is_empty(), "{}", app);
            }
        }
    }
}
