//! Property tests: no parser panics on arbitrary bytes or on mutations of valid files, and
//! MIG profile strings round-trip through their printed form.

use std::path::PathBuf;

use gantry_api::cluster_policy::ClusterPolicy;
use gantry_api::device_plugin_config::DevicePluginConfig;
use gantry_api::kai::{PodGroup, Queue};
use gantry_api::mig_cluster_policy::MigClusterPolicy;
use gantry_api::mig_parted::{MigPartedConfig, MigProfile, parse_known_profile};
use gantry_api::nvidia_driver::NVIDIADriver;
use gantry_api::validate::validate_text;
use gantry_k8s_rules::parse_go_duration;
use proptest::prelude::*;

fn fixtures() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v.iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect()
}

/// Feed text to every parser; results are ignored, only panics matter.
fn all_parsers(text: &str) {
    let _ = validate_text(text);
    let _ = serde_yaml::from_str::<ClusterPolicy>(text);
    let _ = serde_yaml::from_str::<NVIDIADriver>(text);
    let _ = serde_yaml::from_str::<MigClusterPolicy>(text);
    let _ = serde_yaml::from_str::<Queue>(text);
    let _ = serde_yaml::from_str::<PodGroup>(text);
    if let Ok(c) = serde_yaml::from_str::<DevicePluginConfig>(text) {
        let _ = c.validate();
        let _ = c.replicas_for("nvidia.com/gpu");
    }
    if let Ok(c) = serde_yaml::from_str::<MigPartedConfig>(text) {
        let _ = c.validate();
    }
    let _ = text.parse::<MigProfile>();
    let _ = parse_go_duration(text);
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(usize, u8),
    Delete(usize, usize),
    Insert(usize, String),
    DuplicateLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        (any::<usize>(), 1usize..40).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (
            any::<usize>(),
            prop::sample::select(vec![
                "-1",
                "0",
                "2.5",
                "null",
                "[]",
                "{}",
                ": ",
                "\n- ",
                "\t",
                "\"",
                "true",
                "all",
                "1g.99gb",
                "-9e99",
                "~",
                "&a",
                "*a",
                "!!binary x",
            ])
        )
            .prop_map(|(i, s)| Mutation::Insert(i, s.to_string())),
        any::<usize>().prop_map(Mutation::DuplicateLine),
    ]
}

fn apply(text: &str, muts: &[Mutation]) -> String {
    let mut b = text.as_bytes().to_vec();
    for m in muts {
        let len = b.len().max(1);
        match m {
            Mutation::Replace(i, x) => {
                if !b.is_empty() {
                    let i = i % b.len();
                    b[i] = *x;
                }
            }
            Mutation::Delete(i, n) => {
                let i = i % len;
                let end = (i + n).min(b.len());
                if i < end {
                    b.drain(i..end);
                }
            }
            Mutation::Insert(i, s) => {
                let i = i % (b.len() + 1);
                b.splice(i..i, s.bytes());
            }
            Mutation::DuplicateLine(i) => {
                let t = String::from_utf8_lossy(&b).into_owned();
                let lines: Vec<&str> = t.lines().collect();
                if !lines.is_empty() {
                    let k = i % lines.len();
                    let mut out: Vec<&str> = lines.clone();
                    out.insert(k, lines[k]);
                    b = out.join("\n").into_bytes();
                }
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        all_parsers(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn yamlish_text_never_panics(s in "[a-zA-Z0-9:{}\\[\\],.\\- \n\"'#&*!|>%@]{0,300}") {
        all_parsers(&s);
    }

    #[test]
    fn mutated_fixtures_never_panic(which in any::<usize>(), muts in prop::collection::vec(mutation(), 1..6)) {
        let fx = fixtures();
        prop_assume!(!fx.is_empty());
        let text = apply(&fx[which % fx.len()], &muts);
        all_parsers(&text);
    }

    #[test]
    fn profile_strings_round_trip(c in 0u32..9, g in prop::sample::select(vec![1u32, 2, 3, 4, 6, 7, 8]), gb in 1u32..300,
                                  attr in prop::sample::select(vec!["", "+me", "+me.all", "+gfx", "-me", "+me,gfx"])) {
        let s = if c == 0 || c >= g { format!("{g}g.{gb}gb{attr}") } else { format!("{c}c.{g}g.{gb}gb{attr}") };
        let p: MigProfile = s.parse().map_err(TestCaseError::fail)?;
        prop_assert_eq!(p.to_string(), s.clone());
        // Known-ness never panics and agrees with the grammar.
        let _ = parse_known_profile(&s);
    }
}
