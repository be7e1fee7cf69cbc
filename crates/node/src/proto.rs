//! Generated kubelet gRPC types: the device plugin API v1beta1 (both sides) and the
//! PodResources API v1. The sim kubelet serves the kubelet side of both.

/// `v1beta1.Registration` (kubelet) and `v1beta1.DevicePlugin` (plugin).
pub mod deviceplugin {
    #![allow(clippy::all, missing_docs, rust_2018_idioms)]
    tonic::include_proto!("v1beta1");

    pub const VERSION: &str = "v1beta1";
    pub const HEALTHY: &str = "Healthy";
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins/";
    pub const KUBELET_SOCKET_NAME: &str = "kubelet.sock";
}

/// `v1.PodResourcesLister`.
pub mod podresources {
    #![allow(clippy::all, missing_docs, rust_2018_idioms)]
    tonic::include_proto!("v1");

    pub const POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
}
