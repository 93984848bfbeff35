//! The `ib_fabric` collector: a [`FabricSource`] scanned on a thread of its own every
//! `ib_fabric.interval`, each scan bounded by `ib_fabric.timeout` (whole scan) and
//! `ib_fabric.query_timeout` (one query). A scrape encodes the last finished scan and never
//! waits on one in progress: a hung switch costs the scan its deadline, not the scrape.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::config::IbFabricConfig;
use super::detail::{DetailError, SwitchDetails};
use super::encoded::PortFamilies;
use super::metrics::{add_self, ScanReading, ScanSummary};
use super::source::{FabricSource, ScanLimits};
use crate::collector::{Collector, Outcome, Output};
use crate::exposition::Families;
use crate::periodic::Periodic;

#[derive(Debug)]
pub struct IbFabricCollector {
    config: IbFabricConfig,
    scans: Periodic<ScanReading>,
}

impl IbFabricCollector {
    /// Starts the scan thread; the first scan starts at once.
    pub fn spawn(
        source: Arc<dyn FabricSource>,
        config: IbFabricConfig,
    ) -> io::Result<IbFabricCollector> {
        let selection = config.selection();
        let (timeout, query_timeout) = (config.timeout, config.query_timeout);
        let errors_only = config.errors_only;
        let mut scans = 0u64;
        let mut failing = false;
        let periodic = Periodic::spawn(
            "ib-fabric-scan",
            config.interval,
            ScanReading::default(),
            move || {
                let started = Instant::now();
                let limits = ScanLimits {
                    deadline: started + timeout,
                    query_timeout,
                };
                let result = source.scan(limits, &selection);
                scans += 1;
                match &result {
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(source = source.name(), "InfiniBand subnet scan: {e}");
                    }
                    Err(_) => {}
                    Ok(scan) => {
                        failing = false;
                        for failure in &scan.failures {
                            tracing::debug!(
                                node = %failure.node,
                                reason = failure.reason.as_label(),
                                "InfiniBand query failed: {}",
                                failure.detail
                            );
                        }
                    }
                }
                // Encoded here, once per scan: every scrape until the next one copies it. The
                // scan itself is dropped but for what the switch details need; its counts are
                // kept.
                let (ports, details, result) = match result {
                    Ok(scan) => {
                        let ports = Arc::new(PortFamilies::encode(&scan, errors_only, &selection));
                        let summary = ScanSummary::of(&scan);
                        let details = Arc::new(SwitchDetails::keep(scan, &ports, &selection));
                        (Some(ports), Some(details), Ok(summary))
                    }
                    Err(e) => (None, None, Err(e)),
                };
                ScanReading {
                    ports,
                    details,
                    result: Some(result),
                    scans,
                    finished_unix_s: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64()),
                    duration: started.elapsed(),
                }
            },
        )?;
        Ok(IbFabricCollector {
            config,
            scans: periodic,
        })
    }

    /// Every counter of the switch `target` names (GUID or NodeDescription), from the last scan:
    /// `/ib/switch?target=`. Queries nothing.
    pub fn switch_detail(&self, target: &str) -> Result<PortFamilies, DetailError> {
        let reading = self.scans.last();
        match (&reading.result, &reading.details) {
            (None, _) => Err(DetailError::NoScan),
            (Some(Err(e)), _) => Err(DetailError::ScanFailed(e.to_string())),
            (Some(Ok(_)), None) => Err(DetailError::NoScan),
            (Some(Ok(_)), Some(details)) => details.switch(target),
        }
    }

    /// Two intervals and a scan's deadline: past this the served scan is stale.
    fn stale_after(&self) -> Duration {
        self.config
            .interval
            .saturating_mul(2)
            .saturating_add(self.config.timeout)
    }
}

/// Success is that of the last scan: the subnet discovered, recently.
impl Collector for IbFabricCollector {
    fn name(&self) -> &'static str {
        "ib_fabric"
    }

    fn retire(&self) {
        self.scans.stop();
    }

    /// The switch ports' families go as the scan thread encoded them; only the scan's own
    /// figures are encoded per scrape.
    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, std::fmt::Error> {
        let reading = self.scans.last();
        let age = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
            - reading.finished_unix_s;
        let fresh = reading.result.is_some() && age <= self.stale_after().as_secs_f64();
        if let Some(ports) = &reading.ports {
            out.append(ports.clone());
        }
        let mut families = Families::default();
        add_self(&mut families, &reading, fresh);
        out.encode(&families)?;
        Ok(Outcome {
            ok: fresh && matches!(reading.result, Some(Ok(_))),
            duration: reading.result.as_ref().map(|_| reading.duration),
        })
    }
}
