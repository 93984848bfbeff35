//! The scan as the collector serves it ([`ScanReading`]) and the scan's own figures
//! (`rdma_ib_fabric_*`; names and units in docs/metrics.md). The switch ports' families are
//! encoded once per scan by [`super::encoded`].

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::detail::SwitchDetails;
use super::encoded::PortFamilies;
use super::model::{FabricScan, NodeKind, QueryFailureReason};
use super::source::ScanError;
use crate::exposition::{Families, Value};

/// What the collector keeps of a scan besides its encoded ports: the counts its own figures
/// need. The scan itself (every port's counters: hundreds of MB on a large subnet) is dropped
/// once encoded.
#[derive(Debug, Default)]
pub(crate) struct ScanSummary {
    /// Nodes by kind, in [`NodeKind`] order: switches, HCAs, routers.
    pub nodes: [u64; 3],
    pub switch_ports: u64,
    /// Failed queries by reason, in [`QueryFailureReason::ALL`] order.
    pub failures: Vec<u64>,
}

const KINDS: [NodeKind; 3] = [NodeKind::Switch, NodeKind::Hca, NodeKind::Router];

impl ScanSummary {
    pub fn of(scan: &FabricScan) -> ScanSummary {
        ScanSummary {
            nodes: KINDS.map(|kind| scan.nodes.iter().filter(|n| n.kind == kind).count() as u64),
            switch_ports: scan.switches().map(|s| s.ports.len() as u64).sum(),
            failures: QueryFailureReason::ALL
                .iter()
                .map(|reason| scan.failures.iter().filter(|f| f.reason == *reason).count() as u64)
                .collect(),
        }
    }
}

/// One finished scan as the collector serves it.
#[derive(Debug, Default)]
pub(crate) struct ScanReading {
    /// `None` until the first scan ends.
    pub result: Option<Result<ScanSummary, ScanError>>,
    /// Scans finished since the start, this one included.
    pub scans: u64,
    /// When this scan ended, seconds since the Unix epoch.
    pub finished_unix_s: f64,
    pub duration: Duration,
    /// The switch ports' families of this scan, encoded when it ended.
    pub ports: Option<Arc<PortFamilies>>,
    /// What `/ib/switch?target=` serves of this scan.
    pub details: Option<Arc<SwitchDetails>>,
}

/// The scan's own figures; `fresh` is false when the served scan is older than it should be.
pub(crate) fn add_self(families: &mut Families<'_>, reading: &ScanReading, fresh: bool) {
    let Some(result) = &reading.result else {
        families.gauge(
            "rdma_ib_fabric_scan_success",
            "1 if the last subnet scan discovered the subnet (failed queries of single switches are in rdma_ib_fabric_query_failures) and is recent.",
            Vec::new(),
            Value::U64(0),
        );
        return;
    };
    families.gauge(
        "rdma_ib_fabric_scan_success",
        "1 if the last subnet scan discovered the subnet (failed queries of single switches are in rdma_ib_fabric_query_failures) and is recent.",
        Vec::new(),
        Value::U64(u64::from(result.is_ok() && fresh)),
    );
    families.gauge(
        "rdma_ib_fabric_scan_duration_seconds",
        "Duration of the last subnet scan in seconds.",
        Vec::new(),
        Value::F64(reading.duration.as_secs_f64()),
    );
    families.counter(
        "rdma_ib_fabric_scans_total",
        "Subnet scans finished since the start, failed ones included.",
        Vec::new(),
        Value::U64(reading.scans),
    );
    families.gauge(
        "rdma_ib_fabric_last_scan_timestamp_seconds",
        "When the last subnet scan ended, in seconds since the Unix epoch.",
        Vec::new(),
        Value::F64(reading.finished_unix_s),
    );
    let Ok(scan) = result else {
        return;
    };
    for (kind, count) in KINDS.iter().zip(scan.nodes) {
        families.gauge(
            "rdma_ib_fabric_nodes",
            "Nodes the last subnet scan found, by kind.",
            vec![("kind", Cow::Borrowed(kind.as_label()))],
            Value::U64(count),
        );
    }
    families.gauge(
        "rdma_ib_fabric_ports",
        "Switch ports the last subnet scan found.",
        Vec::new(),
        Value::U64(scan.switch_ports),
    );
    for (reason, count) in QueryFailureReason::ALL.iter().zip(&scan.failures) {
        families.gauge(
            "rdma_ib_fabric_query_failures",
            "Queries of the last subnet scan that failed, by reason (a switch that did not answer is one; the other switches are served).",
            vec![("reason", Cow::Borrowed(reason.as_label()))],
            Value::U64(*count),
        );
    }
}
