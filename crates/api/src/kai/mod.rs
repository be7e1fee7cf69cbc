//! KAI Scheduler objects: `Queue` (scheduling.run.ai/v2) and `PodGroup`
//! (scheduling.run.ai/v2alpha2), with accessors returning the effective values.

pub mod gpu_sharing;
pub mod pod_group;
pub mod queue;

pub use gpu_sharing::{
    GpuSharingRequest, SharePortion, SharingError, parse_gpu_sharing, pod_gpu_sharing,
    pod_has_whole_gpu_limit,
};
pub use pod_group::*;
pub use queue::*;

/// RFC 1123 DNS label: lowercase alphanumerics and `-`, starting and ending alphanumeric, ≤ 63.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 DNS subdomain: dot-separated labels, ≤ 253.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A bad duration field's message: what the field takes, the value, and what is wrong.
pub(crate) fn go_duration_problem(e: &gantry_k8s_rules::DurationError) -> String {
    format!(
        "must be a Go duration like \"90s\" or \"1h30m\", got {:?}: {}",
        e.input, e.reason
    )
}
