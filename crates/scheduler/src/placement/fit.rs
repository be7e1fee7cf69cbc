//! Whether a pod fits a node now (the filter every placement scorer starts from).

use crate::decisions::NodeReason;
use crate::sharing::can_fit_gpu;
use crate::snapshot::{CPU, MEM, NodeId, PodId, Snapshot};
use crate::state::State;

/// Whether the pod fits the node now, without choosing devices.
pub(super) fn can_fit(
    s: &Snapshot<'_>,
    st: &State,
    node: NodeId,
    pod: PodId,
) -> Result<(), NodeReason> {
    let p = &s.pods[pod as usize];
    let n = node as usize;
    if st.free_pods[n] < 1 {
        return Err(NodeReason::TooManyPods);
    }
    if st.free_cpu[n] < p.res.0[CPU] {
        return Err(NodeReason::InsufficientCpu);
    }
    if st.free_mem[n] < p.res.0[MEM] {
        return Err(NodeReason::InsufficientMemory);
    }
    can_fit_gpu(s, st, node, &p.gpu)
}
