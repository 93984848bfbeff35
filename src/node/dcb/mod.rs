//! A netdev's DCB (Data Center Bridging) settings over rtnetlink: `RTM_GETDCB` with
//! `DCB_CMD_IEEE_GET`, what `dcb pfc show`, `dcb app show` and `mlnx_qos` print. It needs no RDMA
//! in the kernel and no privilege (`dcb_doit` asks CAP_NET_ADMIN for `RTM_SETDCB` only). The
//! source turns the kernel's answer into a plain [`DcbAnswer`]; `doctor` reads it.
//!
//! `decode.rs` is pure (tested on answers built in the tests, since veth and loopback have no
//! DCB operations); `kernel.rs` asks the kernel; `uapi.rs` holds the numbers and their sources.

pub mod decode;
mod kernel;
pub mod uapi;

/// The tests' own builder of kernel answers, with its own table of numbers (shared with
/// tests/it/doctor.rs), so that a wrong number in `uapi.rs` fails the decoder tests.
#[cfg(test)]
#[path = "../../../tests/common/dcb_answer.rs"]
pub(crate) mod test_answers;

pub use kernel::{encode_request, KernelDcb};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One `DCB_CMD_IEEE_GET` answer: what the driver and the kernel's APP table say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DcbAnswer {
    /// `DCB_ATTR_IFNAME`: the netdev the kernel answered for.
    pub ifname: Option<String>,
    /// `DCB_ATTR_IEEE_PFC`; absent when the driver has no `ieee_getpfc`.
    pub pfc: Option<IeeePfc>,
    /// `prio_tc` of `DCB_ATTR_IEEE_ETS`: the traffic class of each priority.
    pub prio_tc: Option<[u8; uapi::PRIORITIES]>,
    /// `DCB_ATTR_IEEE_APP_TABLE`, in the kernel's order.
    pub apps: Vec<DcbApp>,
    /// `DCB_ATTR_DCB_APP_TRUST_TABLE`: the trusted selectors, most trusted first; only drivers
    /// with `dcbnl_getapptrust` send it (mlx5 does not).
    pub trust_table: Option<Vec<u8>>,
    /// `DCB_ATTR_DCBX`: the DCBX mode flags (`DCB_CAP_DCBX_*`).
    pub dcbx: Option<u8>,
}

/// `struct ieee_pfc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IeeePfc {
    pub pfc_cap: u8,
    /// Bit `p` set: PFC enabled on priority `p`.
    pub pfc_en: u8,
    pub mbc: u8,
    pub delay: u16,
    /// PFC frames sent, per priority (mlx5: the `tx_prio<p>_pause` counters).
    pub requests: [u64; uapi::PRIORITIES],
    /// PFC frames received, per priority (mlx5: `rx_prio<p>_pause`).
    pub indications: [u64; uapi::PRIORITIES],
}

/// `struct dcb_app`: traffic matching (`selector`, `protocol`) goes to `priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcbApp {
    pub selector: u8,
    pub priority: u8,
    pub protocol: u16,
}

/// Which field of a received frame the NIC takes its priority from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The IP header's DSCP, through the DSCP -> priority map.
    Dscp,
    /// The VLAN tag's PCP; untagged frames have none and go to priority 0.
    Pcp,
}

/// How the trust mode was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustEvidence {
    /// The driver's trust table (`DCB_ATTR_DCB_APP_TRUST_TABLE`).
    TrustTable,
    /// `n` DSCP entries in the APP table: mlx5 adds its 64 exactly when trust is DSCP and drops
    /// them when it goes back to PCP (`mlx5e_dcbnl_dscp_app`, `mlx5e_dcbnl_ieee_delapp`).
    DscpEntries(usize),
    /// No DSCP entry in the APP table: trust PCP on mlx5 (a VF, or a driver that keeps its
    /// DSCP map elsewhere, shows the same).
    NoDscpEntries,
}

/// What the APP table says of one DSCP value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DscpLookup {
    Priority(u8),
    /// Entries to more than one priority (bit `p` set for each); `dcb_ieee_setapp` allows it.
    Several(u8),
    Unmapped,
}

impl DcbAnswer {
    /// The trust mode and how it was told.
    pub fn trust(&self) -> (Trust, TrustEvidence) {
        if let Some(table) = &self.trust_table {
            let trust = if table.contains(&uapi::APP_SEL_DSCP) {
                Trust::Dscp
            } else {
                Trust::Pcp
            };
            return (trust, TrustEvidence::TrustTable);
        }
        match self.dscp_entries() {
            0 => (Trust::Pcp, TrustEvidence::NoDscpEntries),
            n => (Trust::Dscp, TrustEvidence::DscpEntries(n)),
        }
    }

    /// The number of DSCP entries in the APP table.
    pub fn dscp_entries(&self) -> usize {
        self.apps
            .iter()
            .filter(|a| a.selector == uapi::APP_SEL_DSCP)
            .count()
    }

    /// The priority the APP table gives `dscp` (`dcb_ieee_getapp_dscp_prio_mask_map`'s view).
    pub fn dscp_priority(&self, dscp: u8) -> DscpLookup {
        let mask = self
            .apps
            .iter()
            .filter(|a| a.selector == uapi::APP_SEL_DSCP && a.protocol == u16::from(dscp))
            .filter(|a| usize::from(a.priority) < uapi::PRIORITIES)
            .fold(0u8, |mask, a| mask | 1 << a.priority);
        match mask.count_ones() {
            0 => DscpLookup::Unmapped,
            1 => DscpLookup::Priority(mask.trailing_zeros() as u8),
            _ => DscpLookup::Several(mask),
        }
    }
}

/// Why no answer could be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DcbError {
    #[error("invalid interface name {netdev:?}")]
    BadName { netdev: String },
    #[error("no netdev {netdev} in this network namespace")]
    NoDevice { netdev: String },
    /// EOPNOTSUPP: the netdev has no DCB operations (veth, loopback, most virtual devices), or
    /// the kernel was built without CONFIG_DCB.
    #[error("{netdev} has no DCB support (EOPNOTSUPP: no DCB operations in its driver, or a kernel without CONFIG_DCB)")]
    NotSupported { netdev: String },
    #[error("DCB netlink refused the request: permission denied")]
    PermissionDenied,
    #[error("no netlink route socket: {0}")]
    Unavailable(#[source] Arc<std::io::Error>),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("malformed answer: {0}")]
    Malformed(String),
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
}

/// Where DCB answers come from.
pub trait DcbSource: Send + Sync + std::fmt::Debug {
    /// The IEEE DCB settings of `netdev`.
    fn ieee(&self, netdev: &str) -> Result<DcbAnswer, DcbError>;
}

/// Answers recorded as `<dir>/<netdev>.bin` (the bytes of one netlink datagram, as the kernel
/// sends them); a missing file is a netdev without DCB, as veth is. For tests.
#[derive(Debug)]
pub struct AnswerFiles {
    dir: PathBuf,
}

/// A DCB answer is some hundred bytes; 64 KiB is the receive buffer of the kernel source.
const MAX_ANSWER_FILE_BYTES: u64 = 64 << 10;

impl AnswerFiles {
    pub fn new(dir: impl Into<PathBuf>) -> AnswerFiles {
        AnswerFiles { dir: dir.into() }
    }
}

impl DcbSource for AnswerFiles {
    fn ieee(&self, netdev: &str) -> Result<DcbAnswer, DcbError> {
        kernel::check_name(netdev)?;
        let path = self.dir.join(format!("{netdev}.bin"));
        let bytes = crate::bounded_read::read(&path, MAX_ANSWER_FILE_BYTES).map_err(|e| match e
            .kind()
        {
            std::io::ErrorKind::NotFound => DcbError::NotSupported {
                netdev: netdev.to_string(),
            },
            _ => DcbError::File {
                path: path.clone(),
                source: Arc::new(e),
            },
        })?;
        decode::answer(&bytes, None, netdev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(selector: u8, protocol: u16, priority: u8) -> DcbApp {
        DcbApp {
            selector,
            priority,
            protocol,
        }
    }

    #[test]
    fn trust_follows_the_trust_table_then_the_dscp_entries() {
        let mut answer = DcbAnswer::default();
        assert_eq!(answer.trust(), (Trust::Pcp, TrustEvidence::NoDscpEntries));
        answer.apps = vec![app(5, 26, 3), app(1, 0x8915, 3)];
        assert_eq!(answer.trust(), (Trust::Dscp, TrustEvidence::DscpEntries(1)));
        answer.trust_table = Some(vec![255]);
        assert_eq!(answer.trust(), (Trust::Pcp, TrustEvidence::TrustTable));
        answer.trust_table = Some(vec![255, 5]);
        assert_eq!(answer.trust(), (Trust::Dscp, TrustEvidence::TrustTable));
    }

    #[test]
    fn dscp_lookup_reports_one_several_or_none() {
        let answer = DcbAnswer {
            apps: vec![app(5, 26, 3), app(5, 46, 5), app(5, 46, 6), app(1, 26, 7)],
            ..DcbAnswer::default()
        };
        assert_eq!(answer.dscp_priority(26), DscpLookup::Priority(3));
        assert_eq!(answer.dscp_priority(46), DscpLookup::Several(0b0110_0000));
        assert_eq!(answer.dscp_priority(0), DscpLookup::Unmapped);
    }

    #[test]
    fn answer_files_refuse_path_like_names_and_missing_files_are_no_dcb() {
        let dir = tempfile::tempdir().unwrap();
        let files = AnswerFiles::new(dir.path());
        assert!(matches!(
            files.ieee("../etc/passwd"),
            Err(DcbError::BadName { .. })
        ));
        assert!(matches!(
            files.ieee("ens1f0np0"),
            Err(DcbError::NotSupported { .. })
        ));
        std::fs::write(
            dir.path().join("ens1f0np0.bin"),
            test_answers::Answer::mlx5_trust_dscp(8).bytes(),
        )
        .unwrap();
        assert_eq!(files.ieee("ens1f0np0").unwrap().pfc.unwrap().pfc_en, 8);
        std::fs::write(dir.path().join("ens2f0np0.bin"), b"garbage").unwrap();
        assert!(matches!(
            files.ieee("ens2f0np0"),
            Err(DcbError::Malformed(_))
        ));
    }
}
