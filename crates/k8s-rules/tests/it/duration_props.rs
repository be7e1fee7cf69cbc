//! Go durations: a sequence of `<n><unit>` parts is the sum of its parts; the sign applies
//! to the whole; whatever Go rejects without a unit is rejected.

use gantry_k8s_rules::parse_go_duration;
use proptest::prelude::*;

const UNITS: [(&str, i64); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

proptest! {
    #[test]
    fn parts_add_up(parts in proptest::collection::vec((0i64..10_000, 0usize..7), 1..5), neg: bool) {
        let text: String = parts.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)).collect();
        let sum: i64 = parts.iter().map(|(n, u)| n * UNITS[*u].1).sum();
        let text = if neg { format!("-{text}") } else { text };
        prop_assert_eq!(parse_go_duration(&text), Ok(if neg { -sum } else { sum }));
    }

    #[test]
    fn half_units_are_exact(n in 0i64..10_000, u in 3usize..7) {
        prop_assert_eq!(
            parse_go_duration(&format!("{n}.5{}", UNITS[u].0)),
            Ok(n * UNITS[u].1 + UNITS[u].1 / 2)
        );
    }

    #[test]
    fn bare_numbers_need_a_unit(n in 1u64..1_000_000) {
        prop_assert!(parse_go_duration(&n.to_string()).is_err());
    }
}
