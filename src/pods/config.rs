//! The `pods:` section of the config file.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The kubelet's pod-resources socket.
pub(crate) const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// `pods:`: the `pods` collector.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PodsConfig {
    pub enabled: bool,
    /// The kubelet's pod-resources API (gRPC v1 `List`).
    pub pod_resources_socket: PathBuf,
    /// The kubelet's pod log directories (`<namespace>_<pod>_<uid>`): pod names by UID.
    pub pod_logs_dir: PathBuf,
    /// The cgroup v2 mount (or the v1 hierarchy root holding `rdma/`); by default
    /// `<node.sysfs_path>/fs/cgroup`, so the host's /sys mounted at /host/sys serves both.
    pub cgroup_path: Option<PathBuf>,
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub interval: Duration,
    /// Bounds each kubelet call.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub timeout: Duration,
}

impl Default for PodsConfig {
    fn default() -> Self {
        PodsConfig {
            enabled: false,
            pod_resources_socket: PathBuf::from(DEFAULT_POD_RESOURCES_SOCKET),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            cgroup_path: None,
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
        }
    }
}
