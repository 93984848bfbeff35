//! What a scan of an InfiniBand subnet found: nodes (switches, HCAs, routers), their ports with
//! link state, width and speed (active and enabled), the node and port at the other end of each
//! link, and each switch port's PortCounters/PortCountersExtended values as read.
//!
//! Counters are kept by their IBTA field name as `perfquery` prints it (`PortXmitWait`,
//! `SymbolErrorCounter`), raw: `PortXmitData`/`PortRcvData` in 4-octet words as on the wire.
//! The metric layer converts names and units ([`counter_metric_stem`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use super::counters::CounterValues;

/// A node or port GUID. Displayed as the kernel prints `node_guid` in sysfs
/// (`b83f:d203:0029:1a46`), so that `rdma_ib_link_info{remote_guid}` joins a host's
/// `rdma_port_info{node_guid}`; parsed from that form or from the `0x…` form of the
/// infiniband-diags tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    }
}

/// A GUID that is neither `0x` plus up to 16 hex digits nor four colon-separated groups of 4.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a GUID: {0:?}")]
pub struct GuidParseError(pub String);

impl FromStr for Guid {
    type Err = GuidParseError;

    fn from_str(s: &str) -> Result<Guid, GuidParseError> {
        let err = || GuidParseError(s.chars().take(40).collect());
        let hex = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            if h.is_empty() || h.len() > 16 {
                return Err(err());
            }
            h.to_owned()
        } else {
            let groups: Vec<&str> = s.split(':').collect();
            if groups.len() != 4 || groups.iter().any(|g| g.len() != 4) {
                return Err(err());
            }
            groups.concat()
        };
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err());
        }
        u64::from_str_radix(&hex, 16).map(Guid).map_err(|_| err())
    }
}

/// What kind of node a GUID belongs to (ibnetdiscover's `Switch`, `Ca`, `Rt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    Switch,
    Hca,
    Router,
}

impl NodeKind {
    /// The `kind` label value.
    pub fn as_label(self) -> &'static str {
        match self {
            NodeKind::Switch => "switch",
            NodeKind::Hca => "hca",
            NodeKind::Router => "router",
        }
    }
}

/// IBTA PortInfo:PortState. The numbers are the ones sysfs `ports/N/state` and
/// `rdma_port_state` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortState {
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
}

/// IBTA PortInfo:PortPhysicalState, numbered as sysfs `ports/N/phys_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PhysState {
    Sleep = 1,
    Polling = 2,
    Disabled = 3,
    PortConfigurationTraining = 4,
    LinkUp = 5,
    LinkErrorRecovery = 6,
    PhyTest = 7,
}

/// Link width in lanes: 1X, 2X, 4X, 8X, 12X.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkWidth(pub u8);

impl fmt::Display for LinkWidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}X", self.0)
    }
}

/// Per-lane link speed generation. Ordered from slowest to fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkSpeed {
    Sdr,
    Ddr,
    Qdr,
    Fdr10,
    Fdr,
    Edr,
    Hdr,
    Ndr,
    Xdr,
}

impl LinkSpeed {
    /// Data rate of one lane in bits per second, after line encoding (as `ports/N/rate`
    /// counts it: 4X NDR = 400 Gb/s).
    pub fn lane_bits_per_second(self) -> f64 {
        let gbps = match self {
            LinkSpeed::Sdr => 2.0,
            LinkSpeed::Ddr => 4.0,
            LinkSpeed::Qdr => 8.0,
            LinkSpeed::Fdr10 => 10.0,
            LinkSpeed::Fdr => 13.64,
            LinkSpeed::Edr => 25.0,
            LinkSpeed::Hdr => 50.0,
            LinkSpeed::Ndr => 100.0,
            LinkSpeed::Xdr => 200.0,
        };
        gbps * 1e9
    }

    /// The name the tools and the `speed` label use: `SDR` … `XDR`.
    pub fn as_label(self) -> &'static str {
        match self {
            LinkSpeed::Sdr => "SDR",
            LinkSpeed::Ddr => "DDR",
            LinkSpeed::Qdr => "QDR",
            LinkSpeed::Fdr10 => "FDR10",
            LinkSpeed::Fdr => "FDR",
            LinkSpeed::Edr => "EDR",
            LinkSpeed::Hdr => "HDR",
            LinkSpeed::Ndr => "NDR",
            LinkSpeed::Xdr => "XDR",
        }
    }
}

/// The node and port at the far end of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEnd {
    pub guid: Guid,
    pub port: u8,
    /// The remote node's description (NodeDescription), as discovered.
    pub description: String,
    pub kind: NodeKind,
}

/// The far end of a link known only by its LID: iblinkinfo's default layout names the far end
/// by LID, and a partial scan (`iblinkinfo -S <guid>`) prints no header of the far node to
/// learn its GUID from.
#[derive(Debug, Clone, PartialEq)]
pub struct LidOnlyRemote {
    pub lid: u16,
    pub port: u8,
    /// The far node's description, as the near end's line printed it.
    pub description: String,
}

/// One port of a node. Fields a source could not learn are `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IbPort {
    pub number: u8,
    pub state: Option<PortState>,
    pub phys_state: Option<PhysState>,
    pub active_width: Option<LinkWidth>,
    /// The widest width enabled on the port (LinkWidthEnabled is a set; its maximum is what
    /// the link should train at).
    pub enabled_width: Option<LinkWidth>,
    pub active_speed: Option<LinkSpeed>,
    /// The fastest speed enabled (LinkSpeedEnabled / LinkSpeedExtEnabled, maximum).
    pub enabled_speed: Option<LinkSpeed>,
    pub lid: Option<u16>,
    pub remote: Option<RemoteEnd>,
    /// The far end where only its LID is known (then `remote` is `None`).
    pub remote_lid_only: Option<LidOnlyRemote>,
    /// PortCounters and PortCountersExtended fields by IBTA name as `perfquery` prints them,
    /// raw values. Empty when the counters were not read (see [`FabricScan::failures`]).
    pub counters: CounterValues,
}

/// One node of the subnet.
#[derive(Debug, Clone, PartialEq)]
pub struct IbNode {
    pub guid: Guid,
    pub kind: NodeKind,
    /// NodeDescription (`MF0;leaf-01:MQM9700/U1`, `gpu-07 mlx5_0`).
    pub description: String,
    /// Ports in ascending order of number; for switches, the external ports (1..N).
    pub ports: Vec<IbPort>,
}

/// Why one query of a scan failed: the `reason` label of the failed-query metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueryFailureReason {
    /// No answer within the per-query timeout.
    Timeout,
    /// The scan's deadline came before this query ran or finished.
    Deadline,
    /// The node or port could not be reached (no route, MAD error status).
    Unreachable,
    /// An answer that could not be parsed or decoded.
    Malformed,
    /// Anything else (a tool exiting non-zero with no other explanation).
    Other,
}

impl QueryFailureReason {
    pub const ALL: [QueryFailureReason; 5] = [
        QueryFailureReason::Timeout,
        QueryFailureReason::Deadline,
        QueryFailureReason::Unreachable,
        QueryFailureReason::Malformed,
        QueryFailureReason::Other,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            QueryFailureReason::Timeout => "timeout",
            QueryFailureReason::Deadline => "deadline",
            QueryFailureReason::Unreachable => "unreachable",
            QueryFailureReason::Malformed => "malformed",
            QueryFailureReason::Other => "other",
        }
    }
}

/// One query that failed. `port: None` when the whole node failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryFailure {
    pub node: Guid,
    pub port: Option<u8>,
    pub reason: QueryFailureReason,
    /// For logs and `ib-report`, never a metric label.
    pub detail: String,
}

/// Everything one scan found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FabricScan {
    /// Sorted by GUID.
    pub nodes: Vec<IbNode>,
    pub failures: Vec<QueryFailure>,
    pub duration: Duration,
}

impl FabricScan {
    pub fn switches(&self) -> impl Iterator<Item = &IbNode> {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Switch)
    }

    pub fn node(&self, guid: Guid) -> Option<&IbNode> {
        self.nodes
            .binary_search_by_key(&guid, |n| n.guid)
            .ok()
            .map(|i| &self.nodes[i])
    }
}

/// The stem of the metric a counter becomes, `rdma_ib_switch_port_<stem>_total`, and the factor
/// its raw value is multiplied by. The stems are those of the host side's
/// `rdma_port_<stem>_total` for the same IBTA field (the kernel's `counters/` file names):
/// `SymbolErrorCounter` -> `symbol_error`, `PortXmitWait` -> `xmit_wait`,
/// `PortXmitData` -> `xmit_data_bytes` x4. Names not in the table: snake case of the IBTA name,
/// a leading `port_` and a trailing `_counter` dropped, `pkts` spelled `packets`.
pub(crate) fn counter_metric_stem(ibta_name: &str) -> (String, u64) {
    let known: Option<(&str, u64)> = match ibta_name {
        "SymbolErrorCounter" => Some(("symbol_error", 1)),
        "LinkErrorRecoveryCounter" => Some(("link_error_recovery", 1)),
        "LinkDownedCounter" => Some(("link_downed", 1)),
        "PortXmitData" => Some(("xmit_data_bytes", 4)),
        "PortRcvData" => Some(("rcv_data_bytes", 4)),
        "PortXmitPkts" => Some(("xmit_packets", 1)),
        "PortRcvPkts" => Some(("rcv_packets", 1)),
        "VL15Dropped" => Some(("vl15_dropped", 1)),
        _ => None,
    };
    if let Some((stem, factor)) = known {
        return (stem.to_owned(), factor);
    }
    let mut snake = String::with_capacity(ibta_name.len() + 8);
    let chars: Vec<char> = ibta_name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            snake.push(c);
        } else {
            snake.push('_');
        }
    }
    let mut stem = snake.strip_prefix("port_").unwrap_or(&snake).to_owned();
    if let Some(s) = stem.strip_suffix("_counter") {
        stem = s.to_owned();
    }
    let stem = stem
        .split('_')
        .map(|w| if w == "pkts" { "packets" } else { w })
        .collect::<Vec<_>>()
        .join("_");
    (stem, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_parse_in_both_forms_and_print_as_sysfs_does() {
        let a: Guid = "0x0002c90300a1b2c3".parse().unwrap();
        let b: Guid = "0002:c903:00a1:b2c3".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "0002:c903:00a1:b2c3");
        for bad in [
            "",
            "0x",
            "0x12345678901234567",
            "b83f:d203:0029",
            "zz3f:d203:0029:1a46",
            "0xg1",
        ] {
            assert!(bad.parse::<Guid>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn counter_stems_match_the_host_side_names() {
        let cases = [
            ("SymbolErrorCounter", "symbol_error", 1),
            ("LinkDownedCounter", "link_downed", 1),
            ("PortXmitWait", "xmit_wait", 1),
            ("PortXmitData", "xmit_data_bytes", 4),
            ("PortRcvErrors", "rcv_errors", 1),
            (
                "PortRcvRemotePhysicalErrors",
                "rcv_remote_physical_errors",
                1,
            ),
            ("LocalLinkIntegrityErrors", "local_link_integrity_errors", 1),
            (
                "ExcessiveBufferOverrunErrors",
                "excessive_buffer_overrun_errors",
                1,
            ),
            ("VL15Dropped", "vl15_dropped", 1),
            ("PortUnicastXmitPkts", "unicast_xmit_packets", 1),
            ("PortMulticastRcvPkts", "multicast_rcv_packets", 1),
            ("PortXmitDiscards", "xmit_discards", 1),
        ];
        for (name, stem, factor) in cases {
            assert_eq!(
                counter_metric_stem(name),
                (stem.to_owned(), factor),
                "{name}"
            );
        }
    }

    #[test]
    fn speeds_order_from_slow_to_fast() {
        assert!(LinkSpeed::Hdr < LinkSpeed::Ndr);
        assert_eq!(LinkSpeed::Ndr.lane_bits_per_second() * 4.0, 400e9);
    }
}
