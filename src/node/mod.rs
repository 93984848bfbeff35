//! The per-node agent: RDMA devices from sysfs plus driver statistics of their netdevs.

pub mod config;
pub mod counter_filter;
pub(crate) mod counter_names;
pub mod counters;
pub mod dcb;
pub(crate) mod device_reads;
pub mod ecn_settings;
pub mod ethtool;
pub mod ethtool_ioctl;
pub mod ethtool_map;
pub mod ethtool_netlink;
pub mod fec_collector;
pub mod hw_netlink;
pub mod metrics;
pub mod netlink_collector;
pub mod optics;
pub mod parse;
pub mod pcie;
pub(crate) mod pcie_metrics;
pub(crate) mod priority_traffic;
pub mod rdma_netlink;
pub(crate) mod reader_pool;
pub mod reason;
pub(crate) mod saturation;
pub mod storm;
pub mod sys_dir;
pub mod sysfs;
pub mod tree_cache;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use regex::Regex;
use rustc_hash::FxHashMap;

use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Value};
use device_reads::DeviceReads;
use ethtool::EthtoolSource;
use sysfs::{DeviceFilter, NodeSnapshot};

/// How many recent errors the landing page keeps.
const RECENT_ERRORS: usize = 50;

/// A walk still running this long after its device read timeout is wedged somewhere no
/// deadline covers (`/healthz` then says so): the walk itself only lists a directory and waits.
const WALK_OVERDUE_AFTER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct NodeCollectorConfig {
    /// Root of sysfs, normally `/sys`.
    pub sysfs_root: PathBuf,
    pub devices: DeviceFilter,
    /// How long a scrape waits for a device's read (sysfs and driver statistics).
    pub device_read_timeout: Duration,
    /// `None` disables the ethtool collector.
    pub ethtool: Option<Arc<dyn EthtoolSource>>,
    /// Untyped driver statistics to export as `rdma_ethtool_stat`.
    pub ethtool_include: Option<Regex>,
    /// Port and device `hw_counters` to read (all by default).
    pub hw_counters: Arc<counter_filter::CounterFilter>,
    /// Port `hw_counters` over RDMA netlink (`node.hw_counters_source`); `None`: sysfs files.
    pub hw_netlink: Option<Arc<hw_netlink::NetlinkHwCounters>>,
    /// Export the DCQCN parameters of `ecn/` besides the per-priority enables.
    pub ecn_parameters: bool,
    /// `node.pcie.detail`: the PCIe families beyond the default 6 series a device.
    pub pcie_detail: bool,
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
    /// When the running walk started, if one runs.
    walk_started: Mutex<Option<Instant>>,
    /// The device reads, with those still out from earlier walks.
    reads: DeviceReads,
    /// Walks started since the process began (whoever asked): proves that the landing page's
    /// JSON reuses the last walk instead of adding its own per request.
    walks: AtomicU64,
    /// Each netdev's statistic names from the last walk that read them, for the next walk's
    /// reads to share (a netdev that is gone drops out at the next walk).
    stat_names: Mutex<Arc<StatNamesByNetdev>>,
    /// The last scrape's families, emptied: the next scrape fills them again.
    kept_families: Mutex<Families<'static>>,
    /// What the counters of each kept directory listing are exported as.
    counter_names: Mutex<counter_names::CounterNames>,
    /// Each netdev's last ECN settings, shared with the readers.
    ecn_kept: Arc<ecn_settings::KeptEcnReads>,
}

type StatNamesByNetdev = FxHashMap<String, KnownStats>;

/// A netdev's statistic names from a walk, and their types for the driver it had then.
#[derive(Debug)]
struct KnownStats {
    names: ethtool::StatNames,
    driver: Option<String>,
    types: ethtool_map::StatTypes,
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
        let reads = DeviceReads::default().with_hw_netlink(config.hw_netlink.clone());
        NodeCollector {
            config,
            state: Mutex::new(State::default()),
            walking: Mutex::new(()),
            walk_started: Mutex::new(None),
            reads,
            walks: AtomicU64::new(0),
            stat_names: Mutex::default(),
            kept_families: Mutex::default(),
            counter_names: Mutex::default(),
            ecn_kept: Arc::default(),
        }
    }

    /// Walks started so far.
    pub fn walks(&self) -> u64 {
        self.walks.load(Ordering::Relaxed)
    }

    pub fn config(&self) -> &NodeCollectorConfig {
        &self.config
    }

    /// Reads sysfs and, for RoCE ports with a netdev, the driver statistics (on the reader
    /// thread of their device), each device within the device read timeout.
    pub fn collect(&self) -> Collection {
        let _walking = self.walking.lock().unwrap_or_else(|p| p.into_inner());
        let _running = RunningWalk::start(&self.walk_started);
        self.walks.fetch_add(1, Ordering::Relaxed);
        // Shared with the readers: one that returns after the deadline writes into a tally
        // nobody reads any more.
        let tally = Arc::new(EthtoolTally {
            class_net: self.config.sysfs_root.join("class/net"),
            previous: self
                .stat_names
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            ..EthtoolTally::default()
        });
        let read_stats: Arc<device_reads::PortHook> = {
            let source = self.config.ethtool.clone();
            let tally = tally.clone();
            let ecn_parameters = self.config.ecn_parameters;
            let ecn_kept = self.ecn_kept.clone();
            Arc::new(move |device: &str, port: &mut sysfs::Port| {
                if let Some(source) = &source {
                    tally.read(source.as_ref(), device, port);
                }
                // The ECN settings of the priorities the statistics show in use.
                ecn_settings::read_port(&tally.class_net, port, ecn_parameters, &ecn_kept);
            })
        };
        let snapshot = self.reads.read_node(
            &self.config.sysfs_root,
            &self.config.devices,
            &self.config.hw_counters,
            self.config.device_read_timeout,
            read_stats,
        );
        let sysfs_ok = !snapshot.errors.iter().any(|e| e.device.is_empty());
        let ethtool_errors =
            std::mem::take(&mut *tally.errors.lock().unwrap_or_else(|p| p.into_inner()));
        let names = std::mem::take(&mut *tally.names.lock().unwrap_or_else(|p| p.into_inner()));
        *self.stat_names.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(names);
        // The ethtool time is summed over the readers: it is the cost, not the wall time.
        let ethtool_duration = Duration::from_nanos(tally.nanos.load(Ordering::Relaxed));
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

    /// How long the running walk has run, when that is well past its device read timeout: the
    /// walk is wedged where no deadline reaches, and the exporter cannot serve the node.
    pub fn walk_overdue(&self) -> Option<Duration> {
        let started = (*self.walk_started.lock().unwrap_or_else(|p| p.into_inner()))?;
        let running = started.elapsed();
        (running > self.config.device_read_timeout + WALK_OVERDUE_AFTER_TIMEOUT).then_some(running)
    }

    /// Collects, then hands every family of this collector to `use_families` (encoding, or
    /// nothing when only the landing page wants fresh data). The snapshot then moves into the
    /// last-scrape state without a copy.
    pub fn scrape<R>(&self, use_families: impl FnOnce(&Families<'_>, &Collection) -> R) -> R {
        let collection = self.collect();
        let kept =
            std::mem::take(&mut *self.kept_families.lock().unwrap_or_else(|p| p.into_inner()));
        let mut families = kept.recycle();
        let issues = metrics::add_node_metrics(
            &mut families,
            &collection.snapshot,
            self.config.ethtool_include.as_ref(),
            &mut self.counter_names.lock().unwrap_or_else(|p| p.into_inner()),
        );
        pcie_metrics::add_node_pcie(&mut families, &collection.snapshot, self.config.pcie_detail);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.record(&self.config.sysfs_root, &collection, &issues);
        add_read_errors(&mut families, &state);
        let result = use_families(&families, &collection);
        *self.kept_families.lock().unwrap_or_else(|p| p.into_inner()) = families.recycle();
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

/// Sets when the walk started, and clears it when dropped (the walk ended, however it ended).
struct RunningWalk<'a>(&'a Mutex<Option<Instant>>);

impl<'a> RunningWalk<'a> {
    fn start(started: &'a Mutex<Option<Instant>>) -> RunningWalk<'a> {
        *started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        RunningWalk(started)
    }
}

impl Drop for RunningWalk<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The driver statistics reads of one walk: their failures and the time they took.
#[derive(Default)]
struct EthtoolTally {
    errors: Mutex<Vec<(String, ethtool::EthtoolError)>>,
    /// `<sysfs>/class/net`: the netdevs of the namespace the host's sysfs shows.
    class_net: PathBuf,
    nanos: AtomicU64,
    /// The names each netdev's previous read found, shared by this walk's reads.
    previous: Arc<StatNamesByNetdev>,
    /// The names this walk's reads found.
    names: Mutex<StatNamesByNetdev>,
}

impl EthtoolTally {
    /// Reads the statistics of a RoCE port's netdev into the port (only RoCE ports have the
    /// mlx5 Ethernet PFC/ECN statistics).
    fn read(&self, source: &dyn EthtoolSource, device: &str, port: &mut sysfs::Port) {
        let Some(netdev) = port.netdev.as_ref().filter(|_| port.is_ethernet()) else {
            return;
        };
        let started = Instant::now();
        let previous = self.previous.get(netdev.as_str());
        match source.read(netdev, previous.map(|p| &p.names)) {
            Ok(stats) => {
                let names = stats.names().clone();
                let driver = port.netdev_driver.clone();
                // The same list from the same driver: the same types.
                let types = match previous {
                    Some(p) if Arc::ptr_eq(&p.names, &names) && p.driver == driver => {
                        p.types.clone()
                    }
                    _ => ethtool_map::types_of(driver.as_deref(), &names),
                };
                port.ethtool_typed = Some((names.clone(), types.clone()));
                let known = KnownStats {
                    names,
                    driver,
                    types,
                };
                self.names
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(netdev.clone(), known);
                port.ethtool = stats;
            }
            Err(ethtool::EthtoolError::NoDevice { .. })
                if netdev_in_other_namespace(&self.class_net, netdev) =>
            {
                port.netdev_in_other_netns = true;
            }
            Err(e) => self
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((device.to_string(), e)),
        }
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// A RoCE port's netdev that this network namespace does not have and the host's sysfs does
/// not list either lives in another namespace: an SR-IOV VF moved into a pod, its RDMA device
/// still visible here (the kernel's shared RDMA netns mode). Its driver statistics are the
/// pod's to read; that is no error. Asked only after `ENODEV`, so a scrape costs nothing more.
/// A sysfs without `class/net` (a fixture) says nothing, nor does one that lists the netdev:
/// then the exporter is the one in the wrong namespace (no `hostNetwork`), an error.
fn netdev_in_other_namespace(class_net: &std::path::Path, netdev: &str) -> bool {
    class_net.is_dir() && std::fs::symlink_metadata(class_net.join(netdev)).is_err()
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

    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, std::fmt::Error> {
        self.scrape(|families, collection| {
            if let Some((ok, duration)) = collection.ethtool {
                out.report("ethtool", ok, duration);
            }
            out.encode(families)?;
            Ok(Outcome::ok(collection.sysfs_ok))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ethtool_map::{types_of, TypedStat};

    fn fixture_collector() -> NodeCollector {
        let fixture =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cx7-roce");
        NodeCollector::new(NodeCollectorConfig {
            sysfs_root: fixture.join("sys"),
            devices: DeviceFilter::default(),
            device_read_timeout: Duration::from_secs(30),
            ethtool: Some(Arc::new(ethtool::FileSource::new(fixture.join("ethtool")))),
            ethtool_include: None,
            hw_counters: Arc::default(),
            hw_netlink: None,
            ecn_parameters: false,
            pcie_detail: false,
        })
    }

    /// The second scrape fills the first one's families again: the same text, every family in
    /// it, none left over.
    #[test]
    fn a_scrape_on_recycled_families_writes_what_a_fresh_one_does() {
        use crate::exposition::Format;
        let collector = fixture_collector();
        let text = |c: &NodeCollector| c.scrape(|f, _| f.text(Format::PrometheusText));
        let first = text(&collector);
        assert!(first.contains("rdma_pfc_pause_frames_total{"), "{first}");
        assert_eq!(text(&collector), first);
        assert_eq!(text(&fixture_collector()), first);
    }

    /// Each port's driver statistics are classified once per netdev's name list: the next walk
    /// that finds the same list shares the types, which are what classifying anew gives.
    #[test]
    fn statistic_types_are_shared_across_walks_of_the_same_names() {
        let collector = fixture_collector();
        let first = collector.collect().snapshot;
        let second = collector.collect().snapshot;
        let ports = |s: &NodeSnapshot| -> Vec<sysfs::Port> {
            s.devices
                .iter()
                .flat_map(|d| d.ports.clone())
                .filter(|p| !p.ethtool.is_empty())
                .collect()
        };
        let (first, second) = (ports(&first), ports(&second));
        assert_eq!(first.len(), 9, "the fixture's RoCE ports");
        for (a, b) in first.iter().zip(&second) {
            let (a_types, b_types) = (a.ethtool_types(), b.ethtool_types());
            assert!(Arc::ptr_eq(&a_types, &b_types), "{:?}", b.netdev);
            let fresh = types_of(b.netdev_driver.as_deref(), b.ethtool.names());
            assert_eq!(&*b_types, &*fresh);
            assert!(fresh
                .iter()
                .any(|t| matches!(t, Some(TypedStat::PfcPauseFrames { .. }))));
        }
        // Types made for another list are not used for this one.
        let mut other = second[0].clone();
        other.ethtool = vec![("rx_prio3_pause".to_string(), 5)].into();
        assert_eq!(
            &*other.ethtool_types(),
            &[ethtool_map::classify("rx_prio3_pause")]
        );
        assert!(other.ethtool_types()[0].is_some());
    }
}
