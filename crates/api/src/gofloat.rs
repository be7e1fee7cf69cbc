//! Serialize floats as Go's encoding/json does: an integral value has no fraction (`1`, not
//! `1.0`), so a round trip of an upstream manifest gives back the same JSON.

use serde::Serializer;

/// Largest magnitude at which every integer is exactly representable as f64.
const EXACT: f64 = 9_007_199_254_740_992.0;

pub fn serialize_f64<S: Serializer>(v: f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() <= EXACT {
        s.serialize_i64(v as i64)
    } else {
        s.serialize_f64(v)
    }
}

pub mod opt {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => serialize_f64(*v, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct T {
        #[serde(serialize_with = "super::opt::serialize")]
        v: Option<f64>,
    }

    #[test]
    fn integral_floats_have_no_fraction() {
        let j = |v| serde_json::to_string(&T { v: Some(v) }).unwrap_or_default();
        assert_eq!(j(1.0), r#"{"v":1}"#);
        assert_eq!(j(-1.0), r#"{"v":-1}"#);
        assert_eq!(j(0.5), r#"{"v":0.5}"#);
    }
}
