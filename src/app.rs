//! Wiring: from a resolved [`Config`] to the collectors, the switch poller and the HTTP state.
//! `serve` goes `main` -> `cli` (flags onto a `Config`) -> here -> `server::router`; `demo`
//! builds one state per simulated host through [`app_state`] too.

use std::sync::Arc;

use crate::collector::{Collector, Collectors};
use crate::config::{Config, Origin};
use crate::nccl::collector::{LogDir, NcclCollector};
use crate::node::config::EthtoolSourceKind;
use crate::node::ethtool::{EthtoolSource, FileSource, IoctlSource};
use crate::node::hw_netlink::{HwCountersSource, NetlinkHwCounters};
use crate::node::netlink_collector::NetlinkCollector;
use crate::node::rdma_netlink::KernelNetlink;
use crate::node::rdma_netlink::NetlinkSource;
use crate::node::storm::StormDetector;
use crate::node::{NodeCollector, NodeCollectorConfig};
use crate::pods::collector::PodsCollector;
use crate::process_metrics::ProcessCollector;
use crate::server::AppState;
use crate::switch::metrics::SwitchCollector;
use crate::switch::poller::{Poller, DEFAULT_CONCURRENCY};
use crate::yaml::ConfigErrors;

/// Builds the node collector a config asks for, reading driver statistics from `ethtool`.
fn node_collector(
    config: &Config,
    ethtool: Option<Arc<dyn EthtoolSource>>,
) -> Option<NodeCollector> {
    let node = &config.node;
    if !node.enabled {
        return None;
    }
    Some(NodeCollector::new(NodeCollectorConfig {
        sysfs_root: node.sysfs_path.clone(),
        devices: node.devices.clone(),
        device_read_timeout: node.device_read_timeout,
        ethtool,
        ethtool_include: node.ethtool.include.clone(),
        hw_counters: Arc::new(node.hw_counters.clone()),
        hw_netlink: hw_netlink(node),
        ecn_parameters: node.ecn_settings.parameters,
        pcie_detail: node.pcie.detail,
    }))
}

/// The scrape-time netlink reader of port `hw_counters`, when `node.hw_counters_source` picks
/// it: `auto` only on the real `/sys` (fixture trees, the bench and the demo read their files)
/// of a kernel with NETLINK_RDMA. Its requests get half the device read timeout, so that a
/// device whose request times out is still read from sysfs within the scrape.
fn hw_netlink(node: &crate::node::config::NodeConfig) -> Option<Arc<NetlinkHwCounters>> {
    let wanted = match node.hw_counters_source {
        HwCountersSource::Sysfs => false,
        HwCountersSource::Netlink => true,
        HwCountersSource::Auto => {
            node.sysfs_path == std::path::Path::new("/sys") && NetlinkHwCounters::kernel_answers()
        }
    };
    wanted.then(|| Arc::new(NetlinkHwCounters::kernel(node.device_read_timeout / 2)))
}

/// Where driver statistics come from, when they are read.
fn ethtool_source(config: &Config) -> Option<Arc<dyn EthtoolSource>> {
    let ethtool = &config.node.ethtool;
    match ethtool.source {
        EthtoolSourceKind::Ioctl => Some(Arc::new(IoctlSource)),
        EthtoolSourceKind::Files => ethtool
            .stats_dir
            .as_ref()
            .map(|dir| Arc::new(FileSource::new(dir)) as Arc<dyn EthtoolSource>),
        EthtoolSourceKind::None => None,
    }
}

/// Starts the fast PFC storm sampler on the driver statistics, when they are read: it samples
/// the pause counters on its own thread and each scrape serves its findings.
fn storm_detector(
    config: &Config,
    ethtool: Option<Arc<dyn EthtoolSource>>,
) -> Option<Arc<StormDetector>> {
    let node = &config.node;
    if !node.enabled || !node.pfc_storm.enabled {
        return None;
    }
    let source = ethtool?;
    let detector = Arc::new(StormDetector::new(node.pfc_storm));
    match detector.spawn(node.sysfs_path.clone(), node.devices.clone(), source) {
        Ok(_) => Some(detector),
        Err(e) => {
            // Scrapes still carry the cumulative pause counters.
            tracing::error!("the PFC storm sampler did not start: {e}");
            None
        }
    }
}

/// The one validation of `check-config`, `serve` and a reload: every problem of the config at
/// once (its own sections, then each switch's profile and secrets), each at its line and
/// column. On success, the switch poller the config asks for (not started).
pub fn check(origin: &Origin, config: &Config) -> Result<Option<Arc<Poller>>, ConfigErrors> {
    let mut problems = crate::config::problems(config);
    let (targets, switch_problems) =
        crate::switch::targets::build(&config.switches, config.switch_profiles_dir.as_deref());
    problems.extend(switch_problems);
    if !problems.is_empty() {
        return Err(origin.errors(problems));
    }
    if targets.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(match config.switch_shard {
        Some(shard) => Poller::sharded(targets, DEFAULT_CONCURRENCY, shard),
        None => Poller::new(targets, DEFAULT_CONCURRENCY),
    })))
}

/// The NCCL log collector, when `nccl.log_dir` is set: its scan thread starts here, and each
/// scrape serves the last finished scan.
fn nccl_collector(config: &Config) -> Option<NcclCollector> {
    let nccl = &config.nccl;
    let source = Arc::new(LogDir(nccl.log_dir.clone()?));
    match NcclCollector::spawn(source, nccl.clone()) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the NCCL log scan thread did not start: {e}");
            None
        }
    }
}

/// The `netlink` collector, when enabled: its reading thread starts here. `source` replaces the
/// kernel (the demo's simulated hosts).
fn netlink_collector(
    config: &Config,
    source: Option<Arc<dyn NetlinkSource>>,
) -> Option<NetlinkCollector> {
    let netlink = &config.node.netlink;
    if !netlink.enabled {
        return None;
    }
    let source = source.unwrap_or_else(|| {
        Arc::new(KernelNetlink::new(config.node.proc_path.clone())) as Arc<dyn NetlinkSource>
    });
    // Pod names come from the kubelet's log directories only where pod attribution is on.
    let pod_logs = config
        .pods
        .enabled
        .then(|| config.pods.pod_logs_dir.clone());
    let owners = crate::pods::collector::owner_resolver(config.node.proc_path.clone(), pod_logs);
    match NetlinkCollector::spawn(
        source,
        netlink.clone(),
        config.node.sysfs_path.clone(),
        owners,
    ) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the RDMA netlink thread did not start: {e}");
            None
        }
    }
}

/// The `transceiver` collector, when `node.transceiver.enabled`: its reading thread starts here.
fn transceiver_collector(
    config: &Config,
) -> Option<crate::node::optics::collector::TransceiverCollector> {
    let node = &config.node;
    if !node.enabled || !node.transceiver.enabled {
        return None;
    }
    match crate::node::optics::collector::TransceiverCollector::spawn(
        node.transceiver.pages(),
        node.transceiver.clone(),
        node.sysfs_path.clone(),
        node.devices.clone(),
    ) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the transceiver thread did not start: {e}");
            None
        }
    }
}

/// The `fec` collector, when `node.fec.enabled` and driver statistics are read: its reading
/// thread starts here. It reads where the statistics come from: the kernel over ethtool netlink
/// beside the SIOCETHTOOL source, `<netdev>.fec` files beside the `files` source (fixtures, the
/// demo's hosts); nothing with `node.ethtool.source: none`.
fn fec_collector(config: &Config) -> Option<crate::node::fec_collector::FecCollector> {
    use crate::node::fec_collector::{FecCollector, FecSource, FileFec, KernelFec};
    let node = &config.node;
    if !node.enabled || !node.fec.enabled {
        return None;
    }
    let source: Arc<dyn FecSource> = match (node.ethtool.source, &node.ethtool.stats_dir) {
        (EthtoolSourceKind::Files, Some(dir)) => Arc::new(FileFec::new(dir)),
        (EthtoolSourceKind::Ioctl, _) => Arc::new(KernelFec::new(node.fec.timeout)),
        _ => return None,
    };
    match FecCollector::spawn(
        source,
        node.fec.clone(),
        node.sysfs_path.clone(),
        node.devices.clone(),
    ) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the FEC thread did not start: {e}");
            None
        }
    }
}

/// The `pods` collector, when `pods.enabled`: its reading thread starts here.
fn pods_collector(config: &Config) -> Option<PodsCollector> {
    if !config.pods.enabled {
        return None;
    }
    match PodsCollector::spawn(config.pods.clone(), config.node.sysfs_path.clone()) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the pods thread did not start: {e}");
            None
        }
    }
}

/// The `ib_fabric` collector, when `ib_fabric.enabled`: its scan thread starts here. On a real
/// host the infiniband-diags tools on `PATH` scan the subnet; `source` replaces them (the demo).
fn ib_fabric_collector(
    config: &Config,
    source: Option<Arc<dyn crate::ib::source::FabricSource>>,
) -> Option<crate::ib::collector::IbFabricCollector> {
    use crate::ib::diags::source::{DiagsOptions, DiagsSource};
    if !config.ib_fabric.enabled {
        return None;
    }
    let ib = &config.ib_fabric;
    let source = source.unwrap_or_else(|| {
        Arc::new(DiagsSource::new(DiagsOptions {
            ibnetdiscover: ib.ibnetdiscover.clone(),
            perfquery: ib.perfquery.clone(),
            port_args: ib.port_args(),
            parallel: ib.parallel.max(1),
            ..DiagsOptions::default()
        })) as Arc<_>
    });
    match crate::ib::collector::IbFabricCollector::spawn(source, config.ib_fabric.clone()) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the InfiniBand fabric scan thread did not start: {e}");
            None
        }
    }
}

/// The `probe` collector, when `probe.enabled`: its loop starts here on the host's RDMA ports
/// (`ports` replaces them: the demo's simulated hosts).
fn probe_collector(
    config: &Config,
    ports: Option<Vec<crate::probe::agent::LocalPort>>,
) -> Option<crate::probe::collector::ProbeCollector> {
    use crate::probe::collector::ProbeCollector;
    if !config.probe.enabled {
        return None;
    }
    match ports {
        None => ProbeCollector::spawn_verbs(&config.probe, &config.node.sysfs_path),
        Some(ports) => {
            let host = config.probe.host.clone().unwrap_or_default();
            match ProbeCollector::start(&config.probe, host, ports) {
                Ok(collector) => Some(collector),
                Err(e) => {
                    tracing::error!("the probe thread did not start: {e}");
                    None
                }
            }
        }
    }
}

/// Sources that a config file cannot name: the demo's simulated hosts.
#[derive(Debug, Default)]
pub struct Simulated {
    pub netlink: Option<Arc<dyn NetlinkSource>>,
    /// The subnet the `ib_fabric` collector scans (the demo's simulated IB fabric).
    pub ib_fabric: Option<Arc<dyn crate::ib::source::FabricSource>>,
    /// The ports the `probe` collector probes from (the demo's simulated NICs).
    pub probe_ports: Option<Vec<crate::probe::agent::LocalPort>>,
}

/// Threads of `serve`'s async runtime: `flag` (`--runtime.worker-threads`) when given, else 1
/// where no switch is polled and one per CPU where switches are. A node agent's runtime only
/// serves HTTP (its devices are read on threads of their own): on a 2-CPU VM its second thread
/// cost about 8 % of a scrape's CPU in wake-ups (BENCHMARKS.md). Switch polls decode on the
/// runtime, so a poller keeps every CPU.
pub fn runtime_worker_threads(flag: Option<u16>, polls_switches: bool) -> usize {
    match (flag, polls_switches) {
        (Some(threads), _) => usize::from(threads),
        (None, false) => 1,
        (None, true) => std::thread::available_parallelism().map_or(1, usize::from),
    }
}

/// The HTTP state for a resolved config: every collector it enables, in the framework's order.
/// `process` is the process's own figures, for the one state that stands for the process.
pub fn app_state(
    config: &Config,
    switches: Option<Arc<Poller>>,
    process: Option<ProcessCollector>,
) -> AppState {
    app_state_with(config, switches, process, Simulated::default())
}

/// [`app_state`] with simulated sources in place of the kernel's.
pub fn app_state_with(
    config: &Config,
    switches: Option<Arc<Poller>>,
    process: Option<ProcessCollector>,
    simulated: Simulated,
) -> AppState {
    // One statistics source for the walk and the storm sampler.
    let ethtool = ethtool_source(config);
    let node = node_collector(config, ethtool.clone()).map(Arc::new);
    let mut collectors: Vec<Arc<dyn Collector>> = Vec::new();
    if let Some(node) = &node {
        collectors.push(node.clone());
    }
    let storm = storm_detector(config, ethtool);
    if let Some(storm) = &storm {
        collectors.push(storm.clone());
    }
    if let Some(netlink) = netlink_collector(config, simulated.netlink) {
        collectors.push(Arc::new(netlink));
    }
    if let Some(fec) = fec_collector(config) {
        collectors.push(Arc::new(fec));
    }
    if let Some(transceiver) = transceiver_collector(config) {
        collectors.push(Arc::new(transceiver));
    }
    if let Some(pods) = pods_collector(config) {
        collectors.push(Arc::new(pods));
    }
    if let Some(nccl) = nccl_collector(config) {
        collectors.push(Arc::new(nccl));
    }
    if let Some(poller) = &switches {
        collectors.push(Arc::new(SwitchCollector {
            poller: poller.clone(),
            only: None,
        }));
    }
    let ib_fabric = ib_fabric_collector(config, simulated.ib_fabric).map(Arc::new);
    if let Some(ib_fabric) = &ib_fabric {
        collectors.push(ib_fabric.clone());
    }
    let probe = probe_collector(config, simulated.probe_ports).map(Arc::new);
    if let Some(probe) = &probe {
        collectors.push(probe.clone());
    }
    if let Some(process) = process.filter(|_| config.process.enabled) {
        collectors.push(Arc::new(process));
    }
    let mut state = AppState::new(
        Collectors::new(collectors),
        node,
        switches,
        config
            .web
            .telemetry_path
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_TELEMETRY_PATH.to_string()),
    );
    state.storm = storm;
    state.ib_fabric = ib_fabric;
    state.probe = probe;
    state
}

#[cfg(test)]
mod tests {
    use super::runtime_worker_threads;

    #[test]
    fn a_node_agent_gets_one_runtime_thread_a_switch_poller_every_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(runtime_worker_threads(None, false), 1);
        assert_eq!(runtime_worker_threads(None, true), cpus);
        assert_eq!(runtime_worker_threads(Some(3), false), 3);
        assert_eq!(runtime_worker_threads(Some(1), true), 1);
    }
}
