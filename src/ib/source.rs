//! The trait every way of scanning a subnet implements: the infiniband-diags tools run with
//! bounded time, or the simulated fabric. The collector calls [`FabricSource::scan`] on its own
//! thread, on its own interval; a scrape only ever serves the last scan.

use std::time::{Duration, Instant};

use super::model::FabricScan;
use super::selection::Selection;

/// The bounds of one scan.
#[derive(Debug, Clone, Copy)]
pub struct ScanLimits {
    /// The whole scan ends by then: what is not read by the deadline is reported as failed
    /// queries (`QueryFailureReason::Deadline`) and the rest is returned.
    pub deadline: Instant,
    /// The longest one query (one tool run, one MAD) may take.
    pub query_timeout: Duration,
}

/// Why a scan produced nothing at all. A scan that reached some nodes and not others is not an
/// error: it returns what it read with the failures listed in [`FabricScan::failures`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// The discovery step (the subnet's topology) failed, e.g. `ibnetdiscover` missing, no
    /// umad device, `mad_rpc_open_port` failing on a RoCE-only host.
    #[error("subnet discovery failed: {0}")]
    Discovery(String),
    /// Discovery did not finish before the deadline.
    #[error("subnet discovery did not finish within the scan deadline")]
    Deadline,
}

/// A way of scanning one subnet.
pub trait FabricSource: Send + Sync + std::fmt::Debug {
    /// A short name for logs and the `source` label of the scan self-metrics: `diags`, `sim`.
    fn name(&self) -> &'static str;

    /// Discovers the subnet and reads the counters of every port of each switch `selection`
    /// keeps, within `limits`. Switches not kept still appear in the scan (the links need both
    /// ends) with empty counters and no failures.
    fn scan(&self, limits: ScanLimits, selection: &Selection) -> Result<FabricScan, ScanError>;
}
