//! [`DiagsSource`]: a scan by the infiniband-diags tools. `ibnetdiscover` (topology file
//! layout) gives the subnet's nodes, links, LIDs, widths and speeds; then `perfquery -x -l
//! <lid>` reads every port of each switch the [`Selection`] keeps (plus plain `perfquery -l`
//! when the extended set lacks the error counters, as on switches without
//! IsAllPortCountersExtended), a few switches at a time. Every run is bounded by the
//! per-query timeout and the scan deadline, and its output by a byte cap; a switch that does
//! not answer becomes a [`QueryFailure`] and the rest is served.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ibnetdiscover;
use super::perfquery::{self, PortCounters};
use super::run::{run, RunError, RunLimits};
use crate::ib::model::{FabricScan, Guid, IbPort, NodeKind, QueryFailure, QueryFailureReason};
use crate::ib::selection::Selection;
use crate::ib::source::{FabricSource, ScanError, ScanLimits};

#[derive(Debug, Clone)]
pub struct DiagsOptions {
    pub ibnetdiscover: PathBuf,
    pub perfquery: PathBuf,
    /// Given to every tool before its own arguments: `-C mlx5_0 -P 1` picks the HCA port
    /// (and so the subnet) on a host with several.
    pub port_args: Vec<String>,
    /// The most one tool may print. ibnetdiscover of 2 000 switches x 64 ports is about
    /// 10 MB; perfquery of one 64-port switch about 60 kB.
    pub max_output_bytes: usize,
    /// perfquery runs at once: each spends most of its time waiting on MADs.
    pub parallel: usize,
}

impl Default for DiagsOptions {
    fn default() -> Self {
        DiagsOptions {
            ibnetdiscover: PathBuf::from("ibnetdiscover"),
            perfquery: PathBuf::from("perfquery"),
            port_args: Vec::new(),
            max_output_bytes: 64 << 20,
            parallel: 4,
        }
    }
}

#[derive(Debug, Clone)]
pub struct DiagsSource {
    options: DiagsOptions,
}

impl DiagsSource {
    pub fn new(options: DiagsOptions) -> DiagsSource {
        DiagsSource { options }
    }

    fn limits(&self, limits: &ScanLimits, timeout: Duration) -> RunLimits {
        RunLimits {
            timeout,
            deadline: limits.deadline,
            max_output_bytes: self.options.max_output_bytes,
        }
    }

    /// All ports of the switch at `lid`, extended counters first.
    fn switch_counters(
        &self,
        lid: u16,
        limits: &ScanLimits,
    ) -> Result<Vec<PortCounters>, (QueryFailureReason, String)> {
        let query = |extended: bool| -> Result<Vec<PortCounters>, (QueryFailureReason, String)> {
            let mut args = self.options.port_args.clone();
            if extended {
                args.push("-x".into());
            }
            args.extend(["-l".to_owned(), lid.to_string()]);
            let text = run(
                &self.options.perfquery,
                &args,
                self.limits(limits, limits.query_timeout),
            )
            .map_err(|e| (reason(&e), e.to_string()))?;
            perfquery::parse(&text)
                .map(|p| p.blocks)
                .map_err(|e| (QueryFailureReason::Malformed, e.to_string()))
        };
        let mut blocks = query(true)?;
        if !blocks
            .iter()
            .any(|b| b.counters.contains("SymbolErrorCounter"))
        {
            blocks.extend(query(false)?);
        }
        Ok(blocks)
    }
}

/// The failure reason of one tool run.
fn reason(e: &RunError) -> QueryFailureReason {
    match e {
        RunError::Timeout { .. } => QueryFailureReason::Timeout,
        RunError::Deadline { .. } => QueryFailureReason::Deadline,
        RunError::TooLarge { .. } => QueryFailureReason::Malformed,
        RunError::Failed { message, .. } => {
            let m = message.to_ascii_lowercase();
            if m.contains("timeout") || m.contains("timed out") {
                QueryFailureReason::Timeout
            } else if m.contains("madrpc") || m.contains("dport") || m.contains("can't resolve") {
                QueryFailureReason::Unreachable
            } else {
                QueryFailureReason::Other
            }
        }
        RunError::Spawn { .. } => QueryFailureReason::Other,
    }
}

impl FabricSource for DiagsSource {
    fn name(&self) -> &'static str {
        "diags"
    }

    fn scan(&self, limits: ScanLimits, selection: &Selection) -> Result<FabricScan, ScanError> {
        let started = Instant::now();
        // Discovery is one run bounded by the deadline alone: ibnetdiscover times its own MADs.
        let left = limits.deadline.saturating_duration_since(started);
        let text = run(
            &self.options.ibnetdiscover,
            &self.options.port_args,
            self.limits(&limits, left),
        )
        .map_err(|e| match e {
            RunError::Timeout { .. } | RunError::Deadline { .. } => ScanError::Deadline,
            other => ScanError::Discovery(other.to_string()),
        })?;
        let mut nodes = ibnetdiscover::parse(&text)
            .map_err(|_| {
                ScanError::Discovery(format!(
                    "{} printed no topology",
                    self.options.ibnetdiscover.display()
                ))
            })?
            .nodes;

        let wanted: Vec<(Guid, Option<u16>)> = nodes
            .iter()
            .filter(|n| {
                n.kind == NodeKind::Switch && selection.keeps_switch(n.guid, &n.description)
            })
            .map(|n| (n.guid, n.ports.iter().find_map(|p| p.lid)))
            .collect();
        let next = AtomicUsize::new(0);
        type Answer = Result<Vec<PortCounters>, (QueryFailureReason, String)>;
        let answers: Mutex<Vec<(Guid, Answer)>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..self.options.parallel.clamp(1, 64) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(guid, lid)) = wanted.get(i) else {
                        break;
                    };
                    let answer = match lid {
                        _ if Instant::now() >= limits.deadline => Err((
                            QueryFailureReason::Deadline,
                            "not queried: the scan deadline had passed".to_owned(),
                        )),
                        None => Err((
                            QueryFailureReason::Unreachable,
                            "ibnetdiscover gave the switch no LID".to_owned(),
                        )),
                        Some(lid) => self.switch_counters(lid, &limits),
                    };
                    if let Ok(mut all) = answers.lock() {
                        all.push((guid, answer));
                    }
                });
            }
        });
        let mut failures = Vec::new();
        for (guid, answer) in answers.into_inner().unwrap_or_default() {
            match answer {
                Ok(blocks) => {
                    let Ok(i) = nodes.binary_search_by_key(&guid, |n| n.guid) else {
                        continue;
                    };
                    let node = &mut nodes[i];
                    for block in blocks {
                        let Some(number) = block.port.filter(|&p| p > 0) else {
                            continue;
                        };
                        let j = match node.ports.iter().position(|p| p.number == number) {
                            Some(j) => j,
                            None => {
                                node.ports.push(IbPort {
                                    number,
                                    ..IbPort::default()
                                });
                                node.ports.len() - 1
                            }
                        };
                        node.ports[j].counters.extend(block.counters);
                        node.ports[j].counters.shrink_to_fit();
                    }
                    node.ports.sort_by_key(|p| p.number);
                }
                Err((reason, detail)) => failures.push(QueryFailure {
                    node: guid,
                    port: None,
                    reason,
                    detail,
                }),
            }
        }
        failures.sort_by_key(|f| f.node);
        Ok(FabricScan {
            nodes,
            failures,
            duration: started.elapsed(),
        })
    }
}
