use super::*;

fn parse(y: &str) -> DevicePluginConfig {
    serde_yaml::from_str(y).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn time_slicing_semantics() {
    let c = parse(
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
    );
    assert_eq!(c.sharing_strategy(), SharingStrategy::TimeSlicing);
    assert_eq!(c.replicas_for(names::RESOURCE_GPU), 4);
    assert_eq!(
        c.advertised_name(names::RESOURCE_GPU),
        names::RESOURCE_GPU_SHARED
    );
    assert!(!c.fail_requests_greater_than_one());
    assert_eq!(c.device_list_strategies(), vec![DeviceListStrategy::Envvar]);
    assert!(c.validate().is_empty());
}

#[test]
fn mps_semantics() {
    let c = parse(
        "flags: {mpsRoot: /run/nvidia/mps}\nsharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n",
    );
    assert_eq!(c.sharing_strategy(), SharingStrategy::Mps);
    assert!(c.fail_requests_greater_than_one());
    assert_eq!(c.replicas_for("nvidia.com/gpu"), 2);
    assert!(c.validate().is_empty(), "{:?}", c.validate());
}

#[test]
fn validation_messages() {
    let c = parse(
        "version: v2\nflags: {migStrategy: mixed}\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n  mps:\n    resources:\n    - {name: nvidia.com/mig-1g.10gb, replicas: 2, devices: [\"x\"]}\nimex: {channelIDs: [1]}\n",
    );
    let msgs: Vec<String> = c.validate().iter().map(ToString::to_string).collect();
    for want in [
        "version: must be \"v1\", got \"v2\"",
        "sharing.timeSlicing.resources[0].replicas: must be >= 2, got 1",
        "sharing.mps.resources[0].name: MPS sharing is not supported on MIG devices",
        "sharing.mps: MPS sharing cannot be combined with flags.migStrategy: mixed",
        "flags.mpsRoot: is required for MPS sharing (e.g. /run/nvidia/mps)",
        "imex.channelIDs: only [] or [0] are supported, got [1]",
    ] {
        assert!(
            msgs.iter().any(|m| m == want),
            "missing {want:?} in {msgs:?}"
        );
    }
    assert!(
        msgs.iter()
            .any(|m| m.starts_with("sharing.mps.resources[0].devices[0]:"))
    );
}
