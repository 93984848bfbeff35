//! Pod attribution: which pod and container a process (and so a queue pair) belongs to, which
//! RDMA devices the kubelet assigned to which container, and each pod's RDMA cgroup. Sources
//! only: plain values, no metric types (the `pods` collector maps them).
//!
//! How they join:
//! - devices: [`pod_resources::list`] gives `(namespace, pod, container, resource, device_id)`;
//!   [`device_map::resolve`] turns a device ID into RDMA ports (SR-IOV VFs: PCI addresses).
//! - queue pairs: a QP's pid -> [`cgroup::container_of_pid`] -> pod UID and container ID;
//!   [`pod_names::read`] names the UID (namespace, pod).
//! - limits: [`rdma_cgroup::scan`] gives each pod UID's `rdma.current`/`rdma.max`.
//!
//! Shared RDMA devices (Mellanox k8s-rdma-shared-dev-plugin, `rdma/rdma_shared_device_a`) have
//! IDs `"0"`..`"<rdmaHcaMax-1>"` that name no device: every container asking for the resource
//! gets all the selected devices' `/dev/infiniband` nodes. `resolve` gives nothing for them;
//! such pods are attributed by their queue pairs (pid -> cgroup) and their RDMA cgroup.

pub mod cgroup;
pub mod collector;
pub mod config;
pub mod device_map;
mod error;
pub(crate) mod pod_names;
pub mod pod_resources;
pub(crate) mod rdma_cgroup;

pub use error::PodsError;

use std::borrow::Cow;
use std::collections::BTreeMap;

/// A container as its cgroup path names it (`/proc/<pid>/cgroup`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ContainerRef {
    /// The pod's UID with dashes (`5f1c...-...`), as the API server and kube-state-metrics'
    /// `kube_pod_info{uid}` spell it; systemd's cgroup driver writes underscores.
    pub pod_uid: String,
    /// The runtime's full container ID (64 hex digits for containerd, CRI-O and docker).
    pub container_id: String,
    pub runtime: Runtime,
}

/// The container runtime a cgroup path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Runtime {
    Containerd,
    CriO,
    Docker,
    /// A pod cgroup whose container leaf names no runtime (cgroupfs driver: the bare ID).
    Unknown,
}

impl Runtime {
    pub const ALL: [Runtime; 4] = [
        Runtime::Containerd,
        Runtime::CriO,
        Runtime::Docker,
        Runtime::Unknown,
    ];

    pub fn as_label(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
            Runtime::Unknown => "unknown",
        })
    }
}

/// A pod's name, from the kubelet's pod log directories (`<namespace>_<pod>_<uid>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PodName {
    pub namespace: String,
    pub pod: String,
}

/// One device the kubelet assigned to a container (pod-resources v1 `List`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssignedDevice {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The extended resource (`nvidia.com/rdma_vf`, `rdma/rdma_shared_device_a`, ...).
    pub resource: String,
    /// The device plugin's ID: a PCI address for SR-IOV VFs, something else for others.
    pub device_id: String,
}

/// An RDMA port an assigned device reaches, found through sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceTarget {
    pub device: String,
    pub port: u32,
    /// Empty when the port has no netdev (InfiniBand without IPoIB).
    pub netdev: String,
}

/// A pod's RDMA cgroup (`rdma.current`, `rdma.max`), by RDMA device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodRdmaCgroup {
    pub pod_uid: String,
    pub devices: BTreeMap<String, RdmaCgroupDevice>,
}

/// One device's line in `rdma.current` and `rdma.max`. `None` in a limit means `max`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RdmaCgroupDevice {
    pub hca_handle: u64,
    pub hca_object: u64,
    pub max_hca_handle: Option<u64>,
    pub max_hca_object: Option<u64>,
}
