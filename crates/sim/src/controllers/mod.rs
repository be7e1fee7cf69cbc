//! Controllers a real cluster's kube-controller-manager (and kube-scheduler) runs that Gantry
//! needs: DaemonSet, Job, Deployment, ReplicaSet, node lifecycle (taint-based eviction and the
//! pod GC of deleted nodes), and a default scheduler for pods no other scheduler claims. Each is a pure core (desired state from plain values) plus a thin
//! reconcile shell.

mod apps;
mod apps_runner;
pub mod cache;
pub mod daemonset;
pub mod default_scheduler;
pub mod deployment;
pub mod job;
pub mod node_lifecycle;
mod node_lifecycle_runner;
pub mod replicaset;
pub mod runner;
mod writes;

pub use runner::{Controllers, Options, start, start_with};

/// A stable short hash (FNV-1a) in Kubernetes' SafeEncodeString alphabet (no vowels, no
/// look-alikes), as the revision and pod-template hashes are.
pub fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::new();
    for _ in 0..10 {
        out.push(ALPHABET[(h % ALPHABET.len() as u64) as usize] as char);
        h /= ALPHABET.len() as u64;
    }
    out
}
