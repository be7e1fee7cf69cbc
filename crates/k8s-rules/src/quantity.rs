//! Resource quantities (`resource.ParseQuantity`): an optionally signed decimal number and one
//! suffix: binary SI (`Ki` … `Ei`), decimal SI (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`,
//! `E`) or a decimal exponent (`e3`, `E-2`). Values are kept exact (digits, a power of ten
//! and a power of two) so that rounding is Kubernetes' rounding up, not a float's.

use std::fmt;

/// A quantity that cannot be parsed, naming the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: String,
}

/// The most significant digits a quantity may carry (they must fit a u128).
const MAX_DIGITS: usize = 38;

/// `(-1)^negative × digits × 10^exp10 × 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quantity {
    negative: bool,
    digits: u128,
    exp10: i32,
    exp2: u32,
}

fn decimal_suffix(s: &str) -> Option<i32> {
    Some(match s {
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "" => 0,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        _ => return None,
    })
}

fn binary_suffix(s: &str) -> Option<u32> {
    Some(match s {
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        "Ti" => 40,
        "Pi" => 50,
        "Ei" => 60,
        _ => return None,
    })
}

impl Quantity {
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let err = |reason: &str| QuantityError {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let (negative, s) = match input.as_bytes().first() {
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            _ => (false, input),
        };
        let int_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (int, rest) = s.split_at(int_len);
        let (frac, suffix) = match rest.strip_prefix('.') {
            Some(r) => r.split_at(r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len())),
            None => ("", rest),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(err("expected a number, e.g. 500m, 2Gi or 1.5"));
        }
        let mut exp10 = -i32::try_from(frac.len()).map_err(|_| err("too many digits"))?;
        let mut exp2 = 0;
        if let Some(e) = decimal_suffix(suffix) {
            exp10 += e;
        } else if let Some(e) = binary_suffix(suffix) {
            exp2 = e;
        } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
            let body = e.strip_prefix(['+', '-']).unwrap_or(e);
            if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("the exponent after e/E must be an integer"));
            }
            let e: i32 = e.parse().map_err(|_| err("exponent out of range"))?;
            exp10 = exp10
                .checked_add(e)
                .ok_or_else(|| err("exponent out of range"))?;
        } else {
            return Err(err(
                "unknown suffix (use n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or e<n>)",
            ));
        }
        let all: String = format!("{int}{frac}");
        let significant = all.trim_start_matches('0');
        // Trailing zeros move into the exponent so that long exact values still fit.
        let trimmed = significant.trim_end_matches('0');
        exp10 = exp10
            .checked_add((significant.len() - trimmed.len()) as i32)
            .ok_or_else(|| err("exponent out of range"))?;
        if trimmed.len() > MAX_DIGITS {
            return Err(err("too many significant digits"));
        }
        let digits = if trimmed.is_empty() {
            0
        } else {
            trimmed
                .parse::<u128>()
                .map_err(|_| err("too many digits"))?
        };
        Ok(Quantity {
            negative: negative && digits != 0,
            digits,
            exp10: if digits == 0 { 0 } else { exp10 },
            exp2,
        })
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    pub fn is_zero(&self) -> bool {
        self.digits == 0
    }

    /// The value times `10^scale`, rounded up (towards +∞) as Kubernetes' `ScaledValue` does;
    /// `None` when it does not fit an i128. `ceil_scaled(0)` is `Value()`, `ceil_scaled(3)`
    /// `MilliValue()`.
    pub fn ceil_scaled(&self, scale: i32) -> Option<i128> {
        let magnitude = self.digits.checked_mul(1u128.checked_shl(self.exp2)?)?;
        let e = self.exp10.checked_add(scale)?;
        // Round the magnitude up for positive values, down for negative ones.
        let up = !self.negative;
        let m = if e >= 0 {
            magnitude.checked_mul(10u128.checked_pow(e.unsigned_abs())?)?
        } else {
            match 10u128.checked_pow(e.unsigned_abs()) {
                Some(d) => {
                    let q = magnitude / d;
                    if up && magnitude % d != 0 { q + 1 } else { q }
                }
                // The divisor exceeds any magnitude: the value is in (0, 1).
                None => u128::from(up && magnitude != 0),
            }
        };
        let m = i128::try_from(m).ok()?;
        Some(if self.negative { -m } else { m })
    }

    /// `Value()`: whole units, rounded up.
    pub fn value(&self) -> Option<i128> {
        self.ceil_scaled(0)
    }

    /// `MilliValue()`: thousandths, rounded up (CPU millicores).
    pub fn milli_value(&self) -> Option<i128> {
        self.ceil_scaled(3)
    }

    /// The nearest f64 (for ratios and scores, not for accounting).
    pub fn to_f64(&self) -> f64 {
        let v = self.digits as f64 * 10f64.powi(self.exp10) * 2f64.powi(self.exp2 as i32);
        if self.negative { -v } else { v }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// Digits and a decimal exponent (`15e-1`), exact, not canonical Kubernetes form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.negative { "-" } else { "" };
        let bin = if self.exp2 > 0 {
            format!("*2^{}", self.exp2)
        } else {
            String::new()
        };
        write!(f, "{sign}{}e{}{bin}", self.digits, self.exp10)
    }
}

/// Parse and convert to the nearest f64 in one step.
pub fn parse_f64(input: &str) -> Result<f64, QuantityError> {
    Quantity::parse(input).map(|q| q.to_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect(s)
    }

    #[test]
    fn suffixes_and_rounding() {
        assert_eq!(q("500m").milli_value(), Some(500));
        assert_eq!(q("500m").value(), Some(1), "Value rounds up");
        assert_eq!(q("2Gi").value(), Some(2 << 30));
        assert_eq!(q("1.5Gi").value(), Some(3 << 29));
        assert_eq!(q("1e3").value(), Some(1000));
        assert_eq!(q("1E").value(), Some(10i128.pow(18)), "E alone is exa");
        assert_eq!(q("1.5G").value(), Some(1_500_000_000));
        assert_eq!(q("0.1").milli_value(), Some(100));
        assert_eq!(q("0.29").milli_value(), Some(290));
        assert_eq!(q("1n").milli_value(), Some(1));
        assert_eq!(q("-1n").milli_value(), Some(0));
        assert_eq!(q(".5").milli_value(), Some(500));
        assert_eq!(q("5.").value(), Some(5));
        assert_eq!(q("+2k").value(), Some(2000));
        assert_eq!(q("-2k").value(), Some(-2000));
        assert_eq!(q("128974848").value(), Some(128_974_848));
        assert_eq!(q("0").value(), Some(0));
        assert!(q("-0").value() == Some(0) && !q("-0").is_negative());
        assert_eq!(q("1e-3").milli_value(), Some(1));
        assert_eq!(q("8").to_f64(), 8.0);
        assert_eq!(
            q("100000000000000000000000000000000000000000000000").value(),
            None
        );
    }

    #[test]
    fn malformed_quantities_name_the_input() {
        for bad in [
            "", "abc", "1..2", "2gb", "1e", "Gi", "-", ".", "1 Gi", "1e3.5", "1Ki2", "e3",
        ] {
            let e = Quantity::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
