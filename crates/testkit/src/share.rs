//! Fractional-GPU pods that print the share they were given, for the end-to-end tests of
//! every default path (`gantry up`, `gantry demo`, the chart): a `gpu-fraction: "0.5"` pod
//! `half` and a `gpu-memory: "20000"` pod `mem`, whose container runs `nvidia-smi -L` and
//! prints `GPU_PORTION`, `GPU_MEMORY_LIMIT` and `NVIDIA_VISIBLE_DEVICES` (the sim's container
//! prints what those commands would, from the environment the kubelet built).

/// The two pods (namespace `default`, queue `queue`, scheduler `kai-scheduler`) as YAML.
pub fn fraction_pods_yaml(queue: &str) -> String {
    let pod = |name: &str, annotation: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  \
             labels: {{kai.scheduler/queue: {queue}}}\n  annotations: {{{annotation}}}\n\
             spec:\n  schedulerName: kai-scheduler\n  containers:\n  - name: main\n    \
             image: nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04\n    command: [sh, -c, \
             \"nvidia-smi -L; printenv GPU_PORTION GPU_MEMORY_LIMIT NVIDIA_VISIBLE_DEVICES; sleep infinity\"]\n"
        )
    };
    format!(
        "{}---\n{}",
        pod("half", "gpu-fraction: \"0.5\""),
        pod("mem", "gpu-memory: \"20000\"")
    )
}

/// What one of those pods printed.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// `NVIDIA_VISIBLE_DEVICES`: the one GPU's UUID.
    pub uuid: String,
    /// `GPU_PORTION`, e.g. `0.50`.
    pub portion: String,
    /// `GPU_MEMORY_LIMIT` in MiB.
    pub memory_mib: u64,
}

/// The share in the pod's log lines, or what is wrong with them: exactly one GPU listed, the
/// one `NVIDIA_VISIBLE_DEVICES` names, then the portion and a memory limit in `Mi`.
pub fn parse_share(lines: &[String]) -> Result<Share, String> {
    let [gpu, portion, memory, uuid] = lines else {
        return Err(format!("one GPU line and three values expected: {lines:?}"));
    };
    if !uuid.starts_with("GPU-") {
        return Err(format!("NVIDIA_VISIBLE_DEVICES is no GPU UUID: {lines:?}"));
    }
    if !(gpu.starts_with("GPU 0: ") && gpu.ends_with(&format!("(UUID: {uuid})"))) {
        return Err(format!(
            "the container does not see exactly its GPU: {lines:?}"
        ));
    }
    let memory_mib = memory
        .strip_suffix("Mi")
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("GPU_MEMORY_LIMIT is not `<n>Mi`: {lines:?}"))?;
    Ok(Share {
        uuid: uuid.clone(),
        portion: portion.clone(),
        memory_mib,
    })
}

/// The node GPU memory the binder divides (MiB), from GFD's `nvidia.com/gpu.memory` label.
pub fn node_gpu_mib(label: &str) -> Option<u64> {
    label.trim().parse::<u64>().ok().filter(|m| *m > 0)
}

/// Checks `half` got half the node's GPU memory and `mem` at least its 20000 MiB (rounded up
/// to the next thousandth of the GPU), each with its own portion.
pub fn check_shares(half: &Share, mem: &Share, node_mib: u64) -> Result<(), String> {
    if half.portion != "0.50" || half.memory_mib != node_mib / 2 {
        return Err(format!("half of a {node_mib} MiB GPU: {half:?}"));
    }
    let slack = node_mib / 1000 + 1;
    if !(20000..20000 + slack).contains(&mem.memory_mib) {
        return Err(format!("gpu-memory 20000 of a {node_mib} MiB GPU: {mem:?}"));
    }
    let milli = (20000_u64 * 1000).div_ceil(node_mib);
    if mem.portion != format!("{:.2}", milli as f64 / 1000.0) {
        return Err(format!("gpu-memory 20000 of a {node_mib} MiB GPU: {mem:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_parse_and_check() {
        let lines = |p: &str, m: &str| -> Vec<String> {
            vec![
                "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)".into(),
                p.into(),
                m.into(),
                "GPU-1".into(),
            ]
        };
        let half = parse_share(&lines("0.50", "40779Mi")).expect("half");
        let mem = parse_share(&lines("0.25", "20063Mi")).expect("mem");
        assert_eq!(check_shares(&half, &mem, 81559), Ok(()));
        assert!(check_shares(&mem, &half, 81559).is_err());
        assert!(parse_share(&lines("0.50", "40750")).is_err());
        let mut two = lines("0.5", "1Mi");
        two.insert(1, "GPU 1: x (UUID: GPU-2)".into());
        assert!(parse_share(&two).is_err());
        assert_eq!(node_gpu_mib("81559"), Some(81559));
    }
}
