//! Well-known names: every label, annotation, taint, resource name, finalizer and
//! field manager the parts of Gantry read or write. Upstream spellings are kept
//! exactly (NVIDIA GPU Operator, device plugin / GFD, mig-parted, KAI Scheduler).

// ---- Groups, API versions, field managers -------------------------------------------------

pub const NVIDIA_GROUP: &str = "nvidia.com";
pub const KAI_GROUP: &str = "scheduling.run.ai";
pub const FIELD_MANAGER_OPERATOR: &str = "gantry-operator";
pub const FIELD_MANAGER_SCHEDULER: &str = "gantry-scheduler";
pub const FIELD_MANAGER_DISCOVERY: &str = "gantry-discovery";
pub const FIELD_MANAGER_MIG_MANAGER: &str = "gantry-mig-manager";
pub const FIELD_MANAGER_DEVICE_PLUGIN: &str = "gantry-device-plugin";
pub const FIELD_MANAGER_VALIDATOR: &str = "gantry-validator";

// ---- Extended resources -------------------------------------------------------------------

/// Whole GPUs (and MIG devices under the `single` strategy).
pub const RESOURCE_GPU: &str = "nvidia.com/gpu";
/// Time-sliced / MPS replicas under `renameByDefault: true`.
pub const RESOURCE_GPU_SHARED: &str = "nvidia.com/gpu.shared";
/// Prefix of MIG resources under the `mixed` strategy: `nvidia.com/mig-1g.10gb`.
pub const RESOURCE_MIG_PREFIX: &str = "nvidia.com/mig-";

// ---- Node labels: NFD ---------------------------------------------------------------------

pub const NFD_LABEL_PREFIX: &str = "feature.node.kubernetes.io/";
/// Any of these set to `"true"` makes a node a GPU node.
pub const NFD_GPU_LABELS: [&str; 3] = [
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
];
pub const NFD_KERNEL_VERSION_FULL: &str = "feature.node.kubernetes.io/kernel-version.full";
pub const NFD_OS_RELEASE_ID: &str = "feature.node.kubernetes.io/system-os_release.ID";
pub const NFD_OS_RELEASE_VERSION_ID: &str =
    "feature.node.kubernetes.io/system-os_release.VERSION_ID";

// ---- Node labels: operator ----------------------------------------------------------------

pub const LABEL_GPU_PRESENT: &str = "nvidia.com/gpu.present";
/// Prefix of per-operand deploy labels: `nvidia.com/gpu.deploy.device-plugin`.
pub const LABEL_DEPLOY_PREFIX: &str = "nvidia.com/gpu.deploy.";
/// `=false` on a node removes all deploy labels (node opt-out).
pub const LABEL_DEPLOY_OPERANDS: &str = "nvidia.com/gpu.deploy.operands";
pub const LABEL_WORKLOAD_CONFIG: &str = "nvidia.com/gpu.workload.config";
pub const LABEL_DEVICE_PLUGIN_CONFIG: &str = "nvidia.com/device-plugin.config";
pub const LABEL_MIG_CONFIG: &str = "nvidia.com/mig.config";
pub const LABEL_MIG_CONFIG_STATE: &str = "nvidia.com/mig.config.state";
pub const LABEL_MPS_CAPABLE: &str = "nvidia.com/mps.capable";
pub const LABEL_CC_CAPABLE: &str = "nvidia.com/cc.capable";
pub const LABEL_VGPU_HOST_DRIVER_VERSION: &str = "nvidia.com/vgpu.host-driver-version";
pub const LABEL_DRIVER_OWNER: &str = "nvidia.com/gpu-operator.driver.owner";
/// Values a paused operand's deploy label carries.
pub const DEPLOY_PAUSED_FOR_MIG_CHANGE: &str = "paused-for-mig-change";
pub const DEPLOY_PAUSED_FOR_DRIVER_UPGRADE: &str = "paused-for-driver-upgrade";

/// Operand names as they appear after `nvidia.com/gpu.deploy.`.
pub mod operand {
    pub const DRIVER: &str = "driver";
    pub const CONTAINER_TOOLKIT: &str = "container-toolkit";
    pub const OPERATOR_VALIDATOR: &str = "operator-validator";
    pub const DEVICE_PLUGIN: &str = "device-plugin";
    pub const GPU_FEATURE_DISCOVERY: &str = "gpu-feature-discovery";
    pub const DCGM: &str = "dcgm";
    pub const DCGM_EXPORTER: &str = "dcgm-exporter";
    pub const MIG_MANAGER: &str = "mig-manager";
    pub const NODE_STATUS_EXPORTER: &str = "node-status-exporter";
    pub const CLIENT: &str = "client";
    pub const SANDBOX_DEVICE_PLUGIN: &str = "sandbox-device-plugin";
    pub const KATA_SANDBOX_DEVICE_PLUGIN: &str = "kata-sandbox-device-plugin";
    pub const SANDBOX_VALIDATOR: &str = "sandbox-validator";
    pub const VFIO_MANAGER: &str = "vfio-manager";
    pub const KATA_MANAGER: &str = "kata-manager";
    pub const CC_MANAGER: &str = "cc-manager";
    pub const VGPU_MANAGER: &str = "vgpu-manager";
    pub const VGPU_DEVICE_MANAGER: &str = "vgpu-device-manager";
}

// ---- Node labels: GPU feature discovery (all under `nvidia.com/`) -------------------------

pub const GFD_PREFIX: &str = "nvidia.com/";
pub const LABEL_GFD_TIMESTAMP: &str = "nvidia.com/gfd.timestamp";
pub const LABEL_GPU_COUNT: &str = "nvidia.com/gpu.count";
pub const LABEL_GPU_PRODUCT: &str = "nvidia.com/gpu.product";
pub const LABEL_GPU_MEMORY: &str = "nvidia.com/gpu.memory";
pub const LABEL_GPU_FAMILY: &str = "nvidia.com/gpu.family";
pub const LABEL_GPU_REPLICAS: &str = "nvidia.com/gpu.replicas";
pub const LABEL_GPU_SHARING_STRATEGY: &str = "nvidia.com/gpu.sharing-strategy";
pub const LABEL_GPU_COMPUTE_MAJOR: &str = "nvidia.com/gpu.compute.major";
pub const LABEL_GPU_COMPUTE_MINOR: &str = "nvidia.com/gpu.compute.minor";
pub const LABEL_GPU_MACHINE: &str = "nvidia.com/gpu.machine";
pub const LABEL_GPU_MODE: &str = "nvidia.com/gpu.mode";
pub const LABEL_MIG_CAPABLE: &str = "nvidia.com/mig.capable";
pub const LABEL_MIG_STRATEGY: &str = "nvidia.com/mig.strategy";
pub const LABEL_VGPU_PRESENT: &str = "nvidia.com/vgpu.present";

// ---- Node labels / annotations: driver upgrade (driver name `gpu`) ------------------------

pub const LABEL_UPGRADE_STATE: &str = "nvidia.com/gpu-driver-upgrade-state";
pub const LABEL_UPGRADE_SKIP: &str = "nvidia.com/gpu-driver-upgrade.skip";
pub const LABEL_UPGRADE_DRAIN_SKIP: &str = "nvidia.com/gpu-driver-upgrade-drain.skip";
pub const ANNOTATION_UPGRADE_ENABLED: &str = "nvidia.com/gpu-driver-upgrade-enabled";
pub const ANNOTATION_UPGRADE_REQUESTED: &str = "nvidia.com/gpu-driver-upgrade-requested";
pub const ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD: &str =
    "nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load";
pub const ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE: &str =
    "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable";
pub const ANNOTATION_UPGRADE_WAIT_FOR_POD_COMPLETION_START: &str =
    "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time";
pub const ANNOTATION_UPGRADE_VALIDATION_START: &str =
    "nvidia.com/gpu-driver-upgrade-validation-start-time";
pub const ANNOTATION_UPGRADE_REQUESTOR_MODE: &str = "nvidia.com/gpu-driver-upgrade-requestor-mode";
/// Gantry's own: when GPU pod deletion / the drain of an upgrading node began (Unix seconds), so
/// their `timeoutSeconds` hold across reconciles (upstream keeps these in a goroutine).
pub const ANNOTATION_UPGRADE_POD_DELETION_START: &str =
    "gantry.dev/gpu-driver-upgrade-pod-deletion-start-time";
pub const ANNOTATION_UPGRADE_DRAIN_START: &str = "gantry.dev/gpu-driver-upgrade-drain-start-time";

// ---- Taints -------------------------------------------------------------------------------

/// The taint GPU node pools commonly carry; operands tolerate it by default.
pub const TAINT_GPU: &str = "nvidia.com/gpu";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

// ---- KAI scheduler: labels and annotations ------------------------------------------------

pub const DEFAULT_SCHEDULER_NAME: &str = "kai-scheduler";
pub const LABEL_QUEUE: &str = "kai.scheduler/queue";
pub const LABEL_PROJECT: &str = "project";
pub const LABEL_SUBGROUP_NAME: &str = "kai.scheduler/subgroup-name";
pub const LABEL_PRIORITY_CLASS_NAME: &str = "priorityClassName";
pub const LABEL_PREEMPTIBILITY: &str = "kai.scheduler/preemptibility";
pub const LABEL_TASK_PRIORITY: &str = "kai.scheduler/task-priority";
pub const LABEL_NODE_POOL: &str = "kai.scheduler/node-pool";
pub const LABEL_GPU_GROUP: &str = "runai-gpu-group";
pub const ANNOTATION_POD_GROUP_NAME: &str = "pod-group-name";
pub const ANNOTATION_SKIP_PODGROUPER: &str = "kai.scheduler/skip-podgrouper";
pub const ANNOTATION_BATCH_MIN_MEMBER: &str = "kai.scheduler/batch-min-member";
pub const ANNOTATION_PREEMPTION_DELAY: &str = "kai.scheduler/preemption-delay";
pub const ANNOTATION_STALENESS_GRACE_PERIOD: &str = "kai.scheduler/staleness-grace-period";
pub const ANNOTATION_TOP_OWNER_METADATA: &str = "kai.scheduler/top-owner-metadata";
pub const ANNOTATION_STALE_PODGROUP_TIMESTAMP: &str = "kai.scheduler/stale-podgroup-timestamp";
pub const ANNOTATION_LAST_START_TIMESTAMP: &str = "kai.scheduler/last-start-timestamp";
pub const ANNOTATION_LAST_EVICTION_TIMESTAMP: &str = "kai.scheduler/last-eviction-timestamp";
pub const ANNOTATION_GPU_FRACTION: &str = "gpu-fraction";
pub const ANNOTATION_GPU_MEMORY: &str = "gpu-memory";
pub const ANNOTATION_GPU_FRACTION_NUM_DEVICES: &str = "gpu-fraction-num-devices";
pub const ANNOTATION_GPU_FRACTION_CONTAINER_NAME: &str = "gpu-fraction-container-name";
pub const ANNOTATION_MPS: &str = "mps";
pub const ANNOTATION_RECEIVED_RESOURCE_TYPE: &str = "received-resource-type";
pub const ANNOTATION_SHARED_GPU_CONFIGMAP: &str = "runai/shared-gpu-configmap";
pub const ANNOTATION_RESERVE_FOR_GPU_INDEX: &str = "run.ai/reserve_for_gpu_index";
pub const PREEMPTIBLE: &str = "preemptible";
pub const NON_PREEMPTIBLE: &str = "non-preemptible";
pub const DEFAULT_PARENT_QUEUE: &str = "default-parent-queue";
pub const DEFAULT_QUEUE: &str = "default-queue";
/// PodGroup priority when no PriorityClass resolves (`train`).
pub const DEFAULT_POD_GROUP_PRIORITY: i32 = 50;
/// Priority at or above which a workload is non-preemptible unless it says otherwise.
pub const NON_PREEMPTIBLE_PRIORITY_THRESHOLD: i32 = 100;
/// The PriorityClasses KAI's chart installs (name, value), lowest first: `train` and
/// `build-preemptible` are preemptible, `build` and `inference` (>= 100) are not.
pub const KAI_PRIORITY_CLASSES: [(&str, i32); 4] = [
    ("train", 50),
    ("build-preemptible", 75),
    ("build", 100),
    ("inference", 125),
];

// ---- Gantry's own -------------------------------------------------------------------------

/// Namespace of the GPU reservation pods that hold shared GPUs.
pub const DEFAULT_RESERVATION_NAMESPACE: &str = "gantry-reservation";
/// `app` label value of GPU reservation pods (as KAI's binder sets it).
pub const RESERVATION_APP: &str = "kai-resource-reservation";
/// Scheduler bookkeeping on a bound pod: the node's GPU indices it was given (comma list).
pub const ANNOTATION_SCHEDULER_GPU_INDICES: &str = "scheduler.gantry.dev/gpu-indices";
/// Node agents on a Node: its physical GPUs behind `nvidia.com/gpu`, by NVML index, and
/// whether the device plugin advertises each Healthy (format: [`crate::gpu_devices`]).
pub const ANNOTATION_GPU_DEVICES: &str = "node.gantry.dev/gpu-devices";
/// Scheduler Lease name (leader election).
pub const SCHEDULER_LEASE: &str = "gantry-scheduler";
/// Finalizer the operator puts on objects whose deletion needs cleanup.
pub const FINALIZER_OPERATOR: &str = "gantry.nvidia.com/operator";
/// Sim: the pod annotation that sets how long a simulated container runs (Go duration, e.g. `30s`).
pub const ANNOTATION_SIM_RUN_TIME: &str = "sim.gantry.dev/run-time";
/// Sim: the pod annotation where the sim kubelet records allocated device IDs per container.
pub const ANNOTATION_SIM_ALLOCATED: &str = "sim.gantry.dev/allocated-devices";
/// Sim: the pod annotation that sets a simulated container's exit code when its run time ends
/// (default 0).
pub const ANNOTATION_SIM_EXIT_CODE: &str = "sim.gantry.dev/exit-code";
/// Sim: where an in-process operand (exporter, validator metrics) serves its metrics on this
/// host (`127.0.0.1:PORT`); the sim kubelet's runner publishes it on the operand's pod.
pub const ANNOTATION_SIM_METRICS_ADDRESS: &str = "sim.gantry.dev/metrics-address";
/// Sim: the Node label naming the process of simulated kubelets that runs the node, on the
/// nodes of a cluster split over processes (`gantry sim kubelets --share I/N`: `I-of-N`). Each
/// process watches the Nodes that carry its value, so the server sends it its own.
pub const LABEL_SIM_KUBELETS: &str = "sim.gantry.dev/kubelets";
/// Sim: prefix of the pod annotations that say where an in-process component serves one of
/// its container ports on this host: `sim.gantry.dev/port-9443: 127.0.0.1:40123`. Service
/// routing (the API server calling a webhook's Service) reads them as the pod's endpoints.
pub const ANNOTATION_SIM_PORT_PREFIX: &str = "sim.gantry.dev/port-";

// ---- GFD labels: CUDA, per-resource helpers ------------------------------------------------

pub const LABEL_CUDA_DRIVER_VERSION_MAJOR: &str = "nvidia.com/cuda.driver-version.major";
pub const LABEL_CUDA_DRIVER_VERSION_MINOR: &str = "nvidia.com/cuda.driver-version.minor";
pub const LABEL_CUDA_DRIVER_VERSION_REVISION: &str = "nvidia.com/cuda.driver-version.revision";
pub const LABEL_CUDA_DRIVER_VERSION_FULL: &str = "nvidia.com/cuda.driver-version.full";
pub const LABEL_CUDA_RUNTIME_VERSION_MAJOR: &str = "nvidia.com/cuda.runtime-version.major";
pub const LABEL_CUDA_RUNTIME_VERSION_MINOR: &str = "nvidia.com/cuda.runtime-version.minor";
pub const LABEL_CUDA_RUNTIME_VERSION_FULL: &str = "nvidia.com/cuda.runtime-version.full";
/// Deprecated duplicates GFD still writes.
pub const LABEL_CUDA_DRIVER_MAJOR: &str = "nvidia.com/cuda.driver.major";
pub const LABEL_CUDA_DRIVER_MINOR: &str = "nvidia.com/cuda.driver.minor";
pub const LABEL_CUDA_DRIVER_REV: &str = "nvidia.com/cuda.driver.rev";
pub const LABEL_CUDA_RUNTIME_MAJOR: &str = "nvidia.com/cuda.runtime.major";
pub const LABEL_CUDA_RUNTIME_MINOR: &str = "nvidia.com/cuda.runtime.minor";
pub const LABEL_GPU_CLIQUE: &str = "nvidia.com/gpu.clique";
pub const LABEL_VGPU_HOST_DRIVER_BRANCH: &str = "nvidia.com/vgpu.host-driver-branch";

/// Suffixes of per-resource GFD labels: `<resource>.<suffix>`, e.g. `nvidia.com/gpu.count`,
/// `nvidia.com/mig-1g.10gb.memory`. Use [`resource_label`].
pub mod gfd_suffix {
    pub const COUNT: &str = "count";
    pub const PRODUCT: &str = "product";
    pub const REPLICAS: &str = "replicas";
    pub const SHARING_STRATEGY: &str = "sharing-strategy";
    pub const MEMORY: &str = "memory";
    pub const FAMILY: &str = "family";
    pub const COMPUTE_MAJOR: &str = "compute.major";
    pub const COMPUTE_MINOR: &str = "compute.minor";
    pub const MULTIPROCESSORS: &str = "multiprocessors";
    pub const SLICES_GI: &str = "slices.gi";
    pub const SLICES_CI: &str = "slices.ci";
    pub const ENGINES_COPY: &str = "engines.copy";
    pub const ENGINES_DECODER: &str = "engines.decoder";
    pub const ENGINES_ENCODER: &str = "engines.encoder";
    pub const ENGINES_JPEG: &str = "engines.jpeg";
    pub const ENGINES_OFA: &str = "engines.ofa";
}

/// Per-resource GFD label: `resource_label("nvidia.com/mig-1g.10gb", gfd_suffix::COUNT)` =
/// `nvidia.com/mig-1g.10gb.count`.
pub fn resource_label(resource: &str, suffix: &str) -> String {
    format!("{resource}.{suffix}")
}

/// MIG resource name under the mixed strategy for a profile (`+` becomes `.`):
/// `1g.5gb+me` → `nvidia.com/mig-1g.5gb.me`.
pub fn mig_resource_name(profile: &str) -> String {
    format!("{RESOURCE_MIG_PREFIX}{}", profile.replace('+', "."))
}

/// Product suffix GFD appends to shared (replicated, not renamed) resources.
pub const PRODUCT_SHARED_SUFFIX: &str = "-SHARED";
/// `gpu.product` value under the single strategy for an invalid MIG layout: `<model>-MIG-INVALID`.
pub const PRODUCT_MIG_INVALID_SUFFIX: &str = "-MIG-INVALID";

/// `nvidia.com/gpu.sharing-strategy` values.
pub mod sharing_strategy {
    pub const NONE: &str = "none";
    pub const TIME_SLICING: &str = "time-slicing";
    pub const MPS: &str = "mps";
}

// ---- MIG ----------------------------------------------------------------------------------

/// `nvidia.com/mig.config.state` values.
pub mod mig_config_state {
    pub const PENDING: &str = "pending";
    pub const REBOOTING: &str = "rebooting";
    pub const SUCCESS: &str = "success";
    pub const FAILED: &str = "failed";
}
pub const MIG_CONFIG_ALL_DISABLED: &str = "all-disabled";
pub const MIG_CONFIG_ALL_ENABLED: &str = "all-enabled";
pub const MIG_CONFIG_ALL_BALANCED: &str = "all-balanced";
/// Operands the MIG manager pauses (deploy label → `paused-for-mig-change`) during a change.
pub const MIG_PAUSED_OPERANDS: [&str; 6] = [
    "device-plugin",
    "gpu-feature-discovery",
    "dcgm-exporter",
    "dcgm",
    "nvsm",
    "client",
];
/// ConfigMaps the operator ships for the MIG manager.
pub const CONFIG_MAP_DEFAULT_MIG_PARTED: &str = "default-mig-parted-config";
pub const CONFIG_MAP_DEFAULT_GPU_CLIENTS: &str = "default-gpu-clients";
/// Key of the mig-parted file inside its ConfigMap.
pub const MIG_PARTED_CONFIG_KEY: &str = "config.yaml";
/// `nvidia.com/mig.config` value prefix for a MigClusterPolicy's inline layout:
/// `gantry-mcp-<policy name>`.
pub const MIG_CLUSTER_POLICY_CONFIG_PREFIX: &str = "gantry-mcp-";
/// Gantry-owned ConfigMap (operator namespace, key `config.yaml`) holding the inline layouts of
/// MigClusterPolicies as named mig-parted configs; the MIG manager merges it into its config.
pub const CONFIG_MAP_MIG_CUSTOM_LAYOUTS: &str = "gantry-mig-custom-layouts";
/// Node annotation the MIG manager sets to the error of a `failed` MIG config (removed on success).
pub const ANNOTATION_MIG_CONFIG_ERROR: &str = "gantry.dev/mig-config-error";
/// Finalizer a MigClusterPolicy with `resetOnDelete` carries until its nodes are reset.
pub const FINALIZER_MIG_CLUSTER_POLICY: &str = "gantry.dev/mig-cluster-policy";
/// Label on the per-node generated mig-parted ConfigMap (`<node>-mig-config`).
pub const LABEL_NODE_NAME: &str = "nvidia.com/node-name";
/// KAI's node role label marking MIG-enabled nodes.
pub const LABEL_NODE_ROLE_MIG_ENABLED: &str = "node-role.kubernetes.io/mig-enabled";
pub const LABEL_NODE_ROLE_GPU_WORKER: &str = "node-role.kubernetes.io/gpu-worker";
pub const LABEL_NODE_ROLE_CPU_WORKER: &str = "node-role.kubernetes.io/cpu-worker";

// ---- Validation files (host dir shared by the operands) ----------------------------------

/// Directory of the per-component ready files.
pub const VALIDATIONS_DIR: &str = "/run/nvidia/validations";
/// Where the driver container exposes the driver root.
pub const DRIVER_ROOT_DIR: &str = "/run/nvidia/driver";
pub mod ready_file {
    pub const DRIVER: &str = "driver-ready";
    /// Written by the driver container's startup probe.
    pub const DRIVER_CTR: &str = ".driver-ctr-ready";
    pub const TOOLKIT: &str = "toolkit-ready";
    pub const CUDA: &str = "cuda-ready";
    pub const PLUGIN: &str = "plugin-ready";
    pub const MOFED: &str = "mofed-ready";
    pub const NVIDIA_PEERMEM: &str = "nvidia-peermem-ready";
    pub const NVIDIA_FS: &str = "nvidia-fs-ready";
    pub const GDRCOPY: &str = "gdrcopy-ready";
    pub const VFIO_PCI: &str = "vfio-pci-ready";
    pub const VGPU_MANAGER: &str = "vgpu-manager-ready";
    pub const HOST_VGPU_MANAGER: &str = "host-vgpu-manager-ready";
    pub const VGPU_DEVICES: &str = "vgpu-devices-ready";
    pub const CC_MANAGER: &str = "cc-manager-ready";
    /// Holds the node's workload config (`container`, `vm-passthrough`, `vm-vgpu`).
    pub const WORKLOAD_TYPE: &str = "workload-type";
}
/// Keys of the `driver-ready` file (`KEY=VALUE` lines).
pub mod driver_ready_key {
    pub const IS_HOST_DRIVER: &str = "IS_HOST_DRIVER";
    pub const NVIDIA_DRIVER_ROOT: &str = "NVIDIA_DRIVER_ROOT";
    pub const DRIVER_ROOT_CTR_PATH: &str = "DRIVER_ROOT_CTR_PATH";
    pub const NVIDIA_DEV_ROOT: &str = "NVIDIA_DEV_ROOT";
    pub const DEV_ROOT_CTR_PATH: &str = "DEV_ROOT_CTR_PATH";
}
/// Validator components (`COMPONENT` env / `-c`).
pub mod validator_component {
    pub const DRIVER: &str = "driver";
    pub const TOOLKIT: &str = "toolkit";
    pub const CUDA: &str = "cuda";
    pub const PLUGIN: &str = "plugin";
    pub const METRICS: &str = "metrics";
    pub const MOFED: &str = "mofed";
    pub const VFIO_PCI: &str = "vfio-pci";
    pub const VGPU_MANAGER: &str = "vgpu-manager";
    pub const VGPU_DEVICES: &str = "vgpu-devices";
    pub const CC_MANAGER: &str = "cc-manager";
    pub const NVIDIA_FS: &str = "nvidia-fs";
    pub const GDRCOPY: &str = "gdrcopy";
    pub const NVIDIA_PEERMEM: &str = "nvidia-peermem";
}

// ---- Operand pod labels, annotations and RuntimeClasses -----------------------------------

/// `app=` labels external tools select operand pods by.
pub mod app {
    pub const DRIVER: &str = "nvidia-driver-daemonset";
    pub const OPERATOR_VALIDATOR: &str = "nvidia-operator-validator";
    pub const DEVICE_PLUGIN: &str = "nvidia-device-plugin-daemonset";
    pub const GPU_FEATURE_DISCOVERY: &str = "gpu-feature-discovery";
    pub const DCGM_EXPORTER: &str = "nvidia-dcgm-exporter";
    pub const DCGM: &str = "nvidia-dcgm";
    pub const CUDA_VALIDATOR: &str = "nvidia-cuda-validator";
    pub const DEVICE_PLUGIN_VALIDATOR: &str = "nvidia-device-plugin-validator";
    pub const MIG_MANAGER: &str = "nvidia-mig-manager";
}
pub const LABEL_APP: &str = "app";
pub const LABEL_APP_COMPONENT: &str = "app.kubernetes.io/component";
pub const LABEL_APP_PART_OF: &str = "app.kubernetes.io/part-of";
/// `app.kubernetes.io/component` value of driver DaemonSets.
pub const COMPONENT_NVIDIA_DRIVER: &str = "nvidia-driver";
/// Hash of the rendered object, compared before updating a DaemonSet.
pub const ANNOTATION_LAST_APPLIED_HASH: &str = "nvidia.com/last-applied-hash";
pub const RUNTIME_CLASS_NVIDIA: &str = "nvidia";
pub const RUNTIME_CLASS_NVIDIA_CDI: &str = "nvidia-cdi";
pub const RUNTIME_CLASS_NVIDIA_LEGACY: &str = "nvidia-legacy";
/// Pod Security Admission labels the operator sets on its namespace when `psa.enabled`.
pub const PSA_LABELS: [&str; 3] = [
    "pod-security.kubernetes.io/enforce",
    "pod-security.kubernetes.io/audit",
    "pod-security.kubernetes.io/warn",
];
/// Name the Helm chart gives the ClusterPolicy.
pub const DEFAULT_CLUSTER_POLICY_NAME: &str = "cluster-policy";

// ---- KAI: more well-known keys -------------------------------------------------------------

pub const DEFAULT_KAI_NAMESPACE: &str = "kai-scheduler";
pub const ANNOTATION_TOPOLOGY: &str = "kai.scheduler/topology";
pub const ANNOTATION_TOPOLOGY_REQUIRED_PLACEMENT: &str =
    "kai.scheduler/topology-required-placement";
pub const ANNOTATION_TOPOLOGY_PREFERRED_PLACEMENT: &str =
    "kai.scheduler/topology-preferred-placement";
pub const LABEL_ACCOUNTING: &str = "kai.scheduler/accounting";
/// Default subgroup of pods without `kai.scheduler/subgroup-name`.
pub const DEFAULT_SUBGROUP: &str = "default";
/// `received-resource-type` values.
pub mod received_resource_type {
    pub const REGULAR: &str = "Regular";
    pub const FRACTION: &str = "Fraction";
    pub const MIG_INSTANCE: &str = "MigInstance";
}
