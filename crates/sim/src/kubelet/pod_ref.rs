//! Identity of a pod the kubelet runs.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}
