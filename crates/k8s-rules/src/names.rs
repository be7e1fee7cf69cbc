//! Label keys and values as apimachinery's `validation.IsQualifiedName` and
//! `IsValidLabelValue` accept them. Each check returns what is wrong, or `None`.

const NAME_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, the shape of a label value and a key's name part.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A lowercase RFC 1123 subdomain (`example.com`), as a label key's prefix must be.
pub fn dns_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > SUBDOMAIN_MAX {
        return Some(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && !b.iter().any(u8::is_ascii_uppercase)
    };
    if s.split('.').all(label_ok) {
        None
    } else {
        Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character"
                .into(),
        )
    }
}

/// A lowercase RFC 1123 label (`my-name`), as namespace names must be.
pub fn dns_label_problem(s: &str) -> Option<String> {
    if s.len() > NAME_MAX {
        return Some(format!("must be no more than {NAME_MAX} characters"));
    }
    if s.contains('.') || dns_subdomain_problem(s).is_some() {
        return Some(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character"
                .into(),
        );
    }
    None
}

/// What is wrong with a label key (`[prefix/]name`), or `None` when it is valid.
pub fn label_key_problem(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return Some("prefix part must be non-empty".into());
            }
            if let Some(p) = dns_subdomain_problem(prefix) {
                return Some(format!("prefix part {p}"));
            }
            *name
        }
        _ => {
            return Some(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', \
                 and must start and end with an alphanumeric character, with an optional \
                 DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
                    .into(),
            );
        }
    };
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > NAME_MAX {
        return Some(format!(
            "name part must be no more than {NAME_MAX} characters"
        ));
    }
    if !is_name_part(name) {
        return Some(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character"
                .into(),
        );
    }
    None
}

/// What is wrong with a label value (empty is valid), or `None` when it is valid.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > NAME_MAX {
        return Some(format!("must be no more than {NAME_MAX} characters"));
    }
    if !value.is_empty() && !is_name_part(value) {
        return Some(
            "a valid label must be an empty string or consist of alphanumeric characters, \
             '-', '_' or '.', and must start and end with an alphanumeric character"
                .into(),
        );
    }
    None
}

/// What is wrong with a ConfigMap or Secret data key (apimachinery's `IsConfigMapKey`): one
/// message per broken rule, in upstream's order and words.
pub fn config_key_problems(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if key.len() > SUBDOMAIN_MAX {
        out.push(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    let shape_ok = !key.is_empty()
        && key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !shape_ok {
        out.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
             (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
             '[-._a-zA-Z0-9]+')"
                .into(),
        );
    }
    match key {
        "." => out.push("must not be '.'".into()),
        ".." => out.push("must not be '..'".into()),
        k if k.starts_with("..") => out.push("must not start with '..'".into()),
        _ => {}
    }
    out
}

pub fn is_label_key(key: &str) -> bool {
    label_key_problem(key).is_none()
}

pub fn is_label_value(value: &str) -> bool {
    label_value_problem(value).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys() {
        for ok in ["a", "key.name", "KEY_NAME", "key-name", ".hidden", "a..b"] {
            assert!(config_key_problems(ok).is_empty(), "{ok}");
        }
        assert_eq!(config_key_problems(".."), vec!["must not be '..'"]);
        assert_eq!(config_key_problems("."), vec!["must not be '.'"]);
        assert_eq!(config_key_problems("..x"), vec!["must not start with '..'"]);
        let p = config_key_problems("ключ");
        assert_eq!(p.len(), 1);
        assert!(p[0].starts_with("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or"), "{}", p[0]);
        assert_eq!(config_key_problems("").len(), 1);
        assert_eq!(config_key_problems(&"a".repeat(254)).len(), 1);
    }

    #[test]
    fn keys() {
        for ok in [
            "app",
            "a",
            "nvidia.com/gpu.product",
            "kubernetes.io/hostname",
            "A_b-c.D",
            "x/y",
        ] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in [
            "",
            "bad key",
            "/x",
            "x/",
            "a/b/c",
            "-a",
            "a-",
            "Upper.com/x",
            &"a".repeat(64),
        ] {
            assert!(!is_label_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn dns_names() {
        assert!(dns_subdomain_problem("a.b-c.d").is_none());
        for bad in ["dots..dots", ".a", "a.", "A", "a_b", ""] {
            assert!(dns_subdomain_problem(bad).is_some(), "{bad:?}");
        }
        assert!(dns_label_problem("kube-system").is_none());
        for bad in ["a.b", "-a", &"a".repeat(64)] {
            assert!(dns_label_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn values() {
        for ok in ["", "v", "1.2-3_x", &"a".repeat(63)] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in ["-v", "v-", "a b", "a/b", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
    }
}
