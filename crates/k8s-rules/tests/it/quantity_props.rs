//! Quantities: every suffix scales exactly, and rounding is up, as `resource.Quantity` does.

use gantry_k8s_rules::Quantity;
use proptest::prelude::*;

const DECIMAL: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

/// ceil(n × 10^e) for the reference.
fn ceil_pow10(n: i128, e: i32) -> i128 {
    if e >= 0 {
        n * 10i128.pow(e as u32)
    } else {
        let d = 10i128.pow((-e) as u32);
        n.div_euclid(d) + i128::from(n.rem_euclid(d) != 0)
    }
}

proptest! {
    #[test]
    fn decimal_suffixes_scale_exactly(n in -1_000_000i64..1_000_000, i in 0usize..10) {
        let (suffix, e) = DECIMAL[i];
        let q = Quantity::parse(&format!("{n}{suffix}")).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(q.milli_value(), Some(ceil_pow10(n.into(), e + 3)));
        prop_assert_eq!(q.value(), Some(ceil_pow10(n.into(), e)));
        prop_assert_eq!(Quantity::parse(&format!("{n}e{e}")).ok(), Some(q));
    }

    #[test]
    fn binary_suffixes_scale_exactly(n in 0i64..1_000_000, i in 0usize..6) {
        let (suffix, shift) = BINARY[i];
        let q = Quantity::parse(&format!("{n}{suffix}")).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(q.value(), Some(i128::from(n) << shift));
    }

    #[test]
    fn fractions_round_up_to_the_next_milli(whole in 0u32..1000, frac in "[0-9]{1,6}") {
        let q = Quantity::parse(&format!("{whole}.{frac}")).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let digits: i128 = format!("{whole}{frac}").parse().unwrap_or_default();
        prop_assert_eq!(q.milli_value(), Some(ceil_pow10(digits, 3 - frac.len() as i32)));
    }

    #[test]
    fn the_parser_never_panics(s in "[-+0-9.eEKMGTPinum ]{0,10}") {
        let _ = Quantity::parse(&s).map(|q| (q.value(), q.milli_value(), q.to_f64()));
    }
}
