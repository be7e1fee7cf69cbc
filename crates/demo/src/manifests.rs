//! The demo's manifests: plain upstream-shaped YAML under `deploy/examples/demo/`, so a user
//! can apply the same files with `kubectl` against `gantry up`.

macro_rules! manifest {
    ($file:literal) => {
        (
            $file,
            include_str!(concat!("../../../deploy/examples/demo/", $file)),
        )
    };
}

pub const TIME_SLICING: (&str, &str) = manifest!("01-time-slicing-config.yaml");
pub const CLUSTER_POLICY: (&str, &str) = manifest!("02-clusterpolicy.yaml");
pub const QUEUES: (&str, &str) = manifest!("03-queues.yaml");
pub const TEAM_B: (&str, &str) = manifest!("04-team-b-batch.yaml");
pub const TEAM_A_INFERENCE: (&str, &str) = manifest!("05-team-a-inference.yaml");
pub const TEAM_A_TRAINING: (&str, &str) = manifest!("06-team-a-training.yaml");
pub const MIG_POLICY: (&str, &str) = manifest!("07-migclusterpolicy.yaml");

pub const ALL: [(&str, &str); 7] = [
    TIME_SLICING,
    CLUSTER_POLICY,
    QUEUES,
    TEAM_B,
    TEAM_A_INFERENCE,
    TEAM_A_TRAINING,
    MIG_POLICY,
];

/// The driver version the demo upgrades to.
pub const UPGRADED_DRIVER: &str = "580.105.08";
