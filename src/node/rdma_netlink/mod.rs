//! RDMA netlink (NETLINK_RDMA, the `nldev` family of `include/uapi/rdma/rdma_netlink.h`): what
//! `rdma resource show`, `rdma resource show qp` and `rdma statistic show` print, read without
//! any C library. The source turns the kernel's answers into a plain [`NetlinkSnapshot`].

pub mod decode;
pub mod nldev;
mod owner;
mod session;
mod socket;
pub mod wire;

pub use socket::KernelNetlink;
// Generic netlink plumbing, shared with the rtnetlink DCB reader (`node::dcb`).
pub(crate) use session::{Session, Transport};
pub(crate) use socket::{is_unavailable, NetlinkSocket};

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One read of the node over RDMA netlink.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetlinkSnapshot {
    /// `CMD_RES_GET`: each device's resource summary.
    pub devices: Vec<DeviceResources>,
    /// `CMD_RES_QP_GET`: every queue pair visible to this process (see docs/rdma-netlink.md
    /// for which pid namespaces that covers).
    pub qps: Vec<QueuePair>,
    /// The QP dump stopped at [`NetlinkLimits::max_dump_bytes`]: `qps` is a prefix.
    pub qps_truncated: bool,
    /// `CMD_STAT_GET` per port: the hardware counters, optional ones included where enabled.
    pub port_stats: Vec<PortStatistics>,
    /// Requests that failed while others succeeded; the snapshot holds what did answer.
    pub failures: Vec<NetlinkError>,
}

/// A device's resource summary (`rdma resource show`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceResources {
    pub index: u32,
    pub name: String,
    /// Resource name as the kernel gives it (`pd`, `cq`, `qp`, `cm_id`, `mr`, `ctx`, `srq`, and
    /// whatever a newer kernel adds) to its current count.
    pub summary: BTreeMap<String, u64>,
}

/// One queue pair (`rdma resource show qp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePair {
    pub device: String,
    /// Absent while the QP is not yet bound to a port (RESET).
    pub port: Option<u32>,
    pub lqpn: u32,
    pub qp_type: QpType,
    pub state: QpState,
    /// The owning process, as seen from this process' pid namespace; `None` for kernel QPs,
    /// and for user QPs whose process is not visible from this pid namespace (no `hostPID`).
    pub pid: Option<u32>,
    /// The process' command name, or the kernel owner's name (`ib_core`, `ib_srpt`, ...);
    /// empty when neither is known (pid not visible, or the process exited meanwhile).
    pub owner: String,
}

/// `enum ib_qp_type` of `include/rdma/ib_verbs.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpType {
    Smi,
    Gsi,
    Rc,
    Uc,
    Ud,
    RawIpv6,
    RawEthertype,
    RawPacket,
    XrcIni,
    XrcTgt,
    Driver,
    /// A value this build does not know (a newer kernel).
    Unknown(u8),
}

impl QpType {
    /// Every known value, for the label vocabulary in docs/metrics.md.
    pub const ALL: [QpType; 11] = [
        QpType::Smi,
        QpType::Gsi,
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::RawIpv6,
        QpType::RawEthertype,
        QpType::RawPacket,
        QpType::XrcIni,
        QpType::XrcTgt,
        QpType::Driver,
    ];

    pub fn from_kernel(value: u8) -> QpType {
        match value {
            0 => QpType::Smi,
            1 => QpType::Gsi,
            2 => QpType::Rc,
            3 => QpType::Uc,
            4 => QpType::Ud,
            5 => QpType::RawIpv6,
            6 => QpType::RawEthertype,
            8 => QpType::RawPacket,
            9 => QpType::XrcIni,
            10 => QpType::XrcTgt,
            0xff => QpType::Driver,
            other => QpType::Unknown(other),
        }
    }

    /// The name `rdma resource show qp` prints.
    pub fn as_label(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            QpType::Smi => "SMI",
            QpType::Gsi => "GSI",
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::RawIpv6 => "RAW_IPV6",
            QpType::RawEthertype => "RAW_ETHERTYPE",
            QpType::RawPacket => "RAW_PACKET",
            QpType::XrcIni => "XRC_INI",
            QpType::XrcTgt => "XRC_TGT",
            QpType::Driver => "DRIVER",
            QpType::Unknown(value) => return Cow::Owned(format!("UNKNOWN_{value}")),
        })
    }
}

/// `enum ib_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
    Unknown(u8),
}

impl QpState {
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    pub fn from_kernel(value: u8) -> QpState {
        match value {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            other => QpState::Unknown(other),
        }
    }

    pub fn as_label(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
            QpState::Unknown(value) => return Cow::Owned(format!("UNKNOWN_{value}")),
        })
    }
}

/// One port's hardware counters (`rdma statistic show link DEV/PORT`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortStatistics {
    pub device: String,
    pub port: u32,
    /// Counter name as the kernel gives it, and its value.
    pub counters: Vec<(String, u64)>,
}

/// Bounds of one read.
#[derive(Debug, Clone, PartialEq)]
pub struct NetlinkLimits {
    /// Each request's answer (all parts of a dump) must arrive within this.
    pub timeout: Duration,
    /// A dump stops (truncated) past this many bytes of answer.
    pub max_dump_bytes: usize,
    /// Whether to dump queue pairs (`CMD_RES_QP_GET`).
    pub qps: bool,
    /// Whether to read port statistics (`CMD_STAT_GET`).
    pub port_stats: bool,
}

impl Default for NetlinkLimits {
    fn default() -> NetlinkLimits {
        NetlinkLimits {
            timeout: Duration::from_secs(2),
            max_dump_bytes: 16 << 20,
            qps: true,
            port_stats: true,
        }
    }
}

/// Where RDMA netlink answers come from: the kernel, or the demo's simulated hosts.
pub trait NetlinkSource: Send + Sync + fmt::Debug {
    /// `Err` only when nothing can be asked at all (no NETLINK_RDMA in this kernel); a request
    /// that fails is recorded in [`NetlinkSnapshot::failures`] and the others still answer.
    fn read(&self, limits: &NetlinkLimits) -> Result<NetlinkSnapshot, NetlinkError>;
}

/// Why a request (or the socket) failed. I/O errors are shared so snapshots can be cloned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NetlinkError {
    #[error("this kernel has no RDMA netlink (NETLINK_RDMA): {0}")]
    Unavailable(Arc<std::io::Error>),
    #[error("{command}: permission denied")]
    PermissionDenied { command: &'static str },
    #[error("{command}: not supported by this kernel")]
    NotSupported { command: &'static str },
    #[error("{command}: no complete answer within {timeout:?}")]
    Timeout {
        command: &'static str,
        timeout: Duration,
    },
    #[error("{command}: malformed answer: {detail}")]
    Malformed {
        command: &'static str,
        detail: String,
    },
    #[error("{command}: {source}")]
    Io {
        command: &'static str,
        source: Arc<std::io::Error>,
    },
}

impl NetlinkError {
    /// The `reason` label of `rdma_exporter_netlink_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            NetlinkError::Unavailable(_) => "unavailable",
            NetlinkError::PermissionDenied { .. } => "permission",
            NetlinkError::NotSupported { .. } => "unsupported",
            NetlinkError::Timeout { .. } => "timeout",
            NetlinkError::Malformed { .. } => "malformed",
            NetlinkError::Io { .. } => "io",
        }
    }

    pub const REASONS: [&'static str; 6] = [
        "unavailable",
        "permission",
        "unsupported",
        "timeout",
        "malformed",
        "io",
    ];
}

impl PartialEq for NetlinkError {
    fn eq(&self, other: &NetlinkError) -> bool {
        self.to_string() == other.to_string()
    }
}
