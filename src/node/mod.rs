//! The per-node agent: RDMA devices from sysfs plus driver statistics of their netdevs.

pub mod config;
pub mod ethtool;
pub mod ethtool_ioctl;
pub mod ethtool_map;
pub mod metrics;
pub mod parse;
pub mod reason;
pub mod saturation;
pub mod storm;
pub mod sysfs;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use regex::Regex;

use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Value};
use ethtool::EthtoolSource;
use sysfs::{DeviceFilter, NodeSnapshot};

/// How many recent errors the landing page keeps.
const RECENT_ERRORS: usize = 50;

#[derive(Debug)]
pub struct NodeCollectorConfig {
    /// Root of sysfs, normally `/sys`.
    pub sysfs_root: PathBuf,
    pub devices: DeviceFilter,
    /// `None` disables the ethtool collector.
    pub ethtool: Option<std::sync::Arc<dyn EthtoolSource>>,
    /// Untyped driver statistics to export as `rdma_ethtool_stat`.
    pub ethtool_include: Option<Regex>,
}

/// One failure seen during a scrape, as the landing page shows it.
#[derive(Debug, Clone)]
pub struct RecentError {
    pub at: SystemTime,
    pub device: String,
    pub reason: &'static str,
    pub detail: String,
}

/// What the landing page shows about the last scrape.
#[derive(Debug, Clone, Default)]
pub struct LastScrape {
    pub at: Option<SystemTime>,
    pub infiniband_present: bool,
    pub snapshot: NodeSnapshot,
    pub recent_errors: VecDeque<RecentError>,
}

#[derive(Debug, Default)]
struct State {
    /// `rdma_exporter_read_errors_total` by (device, reason).
    read_errors: BTreeMap<(String, &'static str), u64>,
    /// (device, reason) pairs already logged at warn level.
    warned: HashSet<(String, &'static str)>,
    warned_no_infiniband: bool,
    last: LastScrape,
}

/// Reads the node at every scrape and encodes it: the `sysfs` collector, and the `ethtool`
/// collector whose reads run on the same walk's workers. Walks are serialized (whoever asks:
/// a scrape or the landing page) so that concurrent callers cannot multiply sysfs and firmware
/// load.
#[derive(Debug)]
pub struct NodeCollector {
    config: NodeCollectorConfig,
    state: Mutex<State>,
    /// Held for the whole walk.
    walking: Mutex<()>,
}

/// Timing and outcome of one collection.
#[derive(Debug)]
pub struct Collection {
    pub snapshot: NodeSnapshot,
    pub sysfs_ok: bool,
    pub ethtool: Option<(bool, Duration)>,
    pub ethtool_errors: Vec<(String, ethtool::EthtoolError)>,
}

impl NodeCollector {
    pub fn new(config: NodeCollectorConfig) -> Self {
        NodeCollector {
            config,
            state: Mutex::new(State::default()),
            walking: Mutex::new(()),
        }
    }

    pub fn config(&self) -> &NodeCollectorConfig {
        &self.config
    }

    /// Reads sysfs and, for RoCE ports with a netdev, the driver statistics (on the same worker
    /// threads as the walk).
    pub fn collect(&self) -> Collection {
        let _walking = self.walking.lock().unwrap_or_else(|p| p.into_inner());
        let ethtool_errors = Mutex::new(Vec::new());
        let ethtool_nanos = AtomicU64::new(0);
        let read_stats = |device: &str, port: &mut sysfs::Port| {
            let Some(source) = &self.config.ethtool else {
                return;
            };
            // Only RoCE ports have the mlx5 Ethernet PFC/ECN statistics.
            let Some(netdev) = port.netdev.as_ref().filter(|_| port.is_ethernet()) else {
                return;
            };
            let started = Instant::now();
            match source.stats(netdev) {
                Ok(stats) => port.ethtool = stats,
                Err(e) => ethtool_errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((device.to_string(), e)),
            }
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            ethtool_nanos.fetch_add(nanos, Ordering::Relaxed);
        };
        let snapshot =
            sysfs::read_node_with(&self.config.sysfs_root, &self.config.devices, &read_stats);
        let sysfs_ok = !snapshot
            .errors
            .iter()
            .any(|e| e.device.is_empty() && e.reason != reason::ReadErrorReason::MissingDir);
        let ethtool_errors = ethtool_errors
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        // The ethtool time is summed over the workers: it is the cost, not the wall time.
        let ethtool_duration = Duration::from_nanos(ethtool_nanos.load(Ordering::Relaxed));
        // The walk's own wall time is measured by the collector framework.
        Collection {
            ethtool: self
                .config
                .ethtool
                .as_ref()
                .map(|_| (ethtool_errors.is_empty(), ethtool_duration)),
            snapshot,
            sysfs_ok,
            ethtool_errors,
        }
    }

    /// Collects, then hands every family of this collector to `use_families` (encoding, or
    /// nothing when only the landing page wants fresh data). The snapshot then moves into the
    /// last-scrape state without a copy.
    pub fn scrape<R>(&self, use_families: impl FnOnce(&Families<'_>, &Collection) -> R) -> R {
        let collection = self.collect();
        let mut families = Families::default();
        let issues = metrics::add_node_metrics(
            &mut families,
            &collection.snapshot,
            self.config.ethtool_include.as_ref(),
        );
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.record(&self.config.sysfs_root, &collection, &issues);
        add_read_errors(&mut families, &state);
        let result = use_families(&families, &collection);
        drop(families);
        state.last.snapshot = collection.snapshot;
        result
    }

    pub fn last_scrape(&self) -> LastScrape {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last
            .clone()
    }
}

impl State {
    fn record(
        &mut self,
        sysfs_root: &std::path::Path,
        collection: &Collection,
        issues: &[metrics::EncodeIssue],
    ) {
        let now = SystemTime::now();
        let snapshot = &collection.snapshot;
        if !snapshot.infiniband_present && !self.warned_no_infiniband {
            tracing::warn!(
                "{} does not exist: no RDMA driver is loaded here; serving self-metrics and rdma_devices 0",
                sysfs_root.join("class/infiniband").display()
            );
            self.warned_no_infiniband = true;
        }
        let sysfs = snapshot.errors.iter().map(|e| {
            let detail = format!("{}: {}", e.path.display(), e.detail);
            (e.device.clone(), e.reason.as_label(), detail)
        });
        let ethtool = collection
            .ethtool_errors
            .iter()
            .map(|(device, e)| (device.clone(), e.reason().as_label(), e.to_string()));
        let encode = issues
            .iter()
            .map(|i| (i.device.clone(), i.reason.as_label(), i.detail.clone()));
        // One warning per new (device, reason): a device whose PMA is missing would otherwise
        // log every counter file. Repeats go to debug level.
        let mut first_of_kind: BTreeMap<(String, &'static str), (u64, String)> = BTreeMap::new();
        for (device, reason, detail) in sysfs.chain(ethtool).chain(encode) {
            *self
                .read_errors
                .entry((device.clone(), reason))
                .or_default() += 1;
            tracing::debug!(device = %device, reason, "{detail}");
            let entry = first_of_kind
                .entry((device.clone(), reason))
                .or_insert_with(|| (0, detail.clone()));
            entry.0 += 1;
            if self.last.recent_errors.len() == RECENT_ERRORS {
                self.last.recent_errors.pop_front();
            }
            self.last.recent_errors.push_back(RecentError {
                at: now,
                device,
                reason,
                detail,
            });
        }
        for ((device, reason), (count, example)) in first_of_kind {
            if self.warned.insert((device.clone(), reason)) {
                tracing::warn!(
                    device = %device,
                    reason,
                    count,
                    "values skipped, e.g. {example}; later occurrences are logged at debug level"
                );
            }
        }
        self.last.at = Some(now);
        self.last.infiniband_present = snapshot.infiniband_present;
    }
}

fn add_read_errors(families: &mut Families<'_>, state: &State) {
    for ((device, reason), count) in &state.read_errors {
        families.counter(
            "rdma_exporter_read_errors_total",
            "Values that could not be read or exported, by device and reason; the rest of the scrape is unaffected.",
            // Owned: the state these come from is locked for less time than the families live.
            vec![
                ("device", Cow::Owned(device.clone())),
                ("reason", Cow::Borrowed(*reason)),
            ],
            Value::U64(*count),
        );
    }
}

impl Collector for NodeCollector {
    fn name(&self) -> &'static str {
        "sysfs"
    }

    fn companions(&self) -> &'static [&'static str] {
        match self.config.ethtool {
            Some(_) => &["ethtool"],
            None => &[],
        }
    }

    fn collect(&self, out: &mut Output<'_, '_>) -> Result<Outcome, std::fmt::Error> {
        self.scrape(|families, collection| {
            if let Some((ok, duration)) = collection.ethtool {
                out.report("ethtool", ok, duration);
            }
            out.encode(families)?;
            Ok(Outcome::ok(collection.sysfs_ok))
        })
    }
}
