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
pub const NFD_OS_RELEASE_VERSION_ID: &str = "feature.node.kubernetes.io/system-os_release.VERSION_ID";

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

// ---- Gantry's own -------------------------------------------------------------------------

/// Namespace of the GPU reservation pods that hold shared GPUs.
pub const DEFAULT_RESERVATION_NAMESPACE: &str = "gantry-reservation";
/// Finalizer the operator puts on objects whose deletion needs cleanup.
pub const FINALIZER_OPERATOR: &str = "gantry.nvidia.com/operator";
/// Sim: the pod annotation that sets how long a simulated container runs (Go duration, e.g. `30s`).
pub const ANNOTATION_SIM_RUN_TIME: &str = "sim.gantry.dev/run-time";
/// Sim: the pod annotation where the sim kubelet records allocated device IDs per container.
pub const ANNOTATION_SIM_ALLOCATED: &str = "sim.gantry.dev/allocated-devices";
