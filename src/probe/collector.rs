//! The `probe` collector: starts the probing loop on this host's RDMA ports, refreshes its
//! peers in the background, and serves the loop's counts at each scrape (never probing on the
//! scrape path). Where libibverbs or the kernel's RDMA support is missing, it says so once in
//! the log and stays off; every other collector runs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::collector::{Collector, Outcome, Output};
use crate::exposition::Families;

use super::agent::{Agent, LocalPort};
use super::config::ProbeConfig;
use super::peer_book::{self, PeerBook, Silence};
use super::peers::{self, Published};
use super::ping::{self, PingError, PortView, Report};
use super::ping_target::{self, Known};
use super::targets::{self, Port};
use super::transport::TransportError;

/// How long one peer agent has to answer for its addresses.
const PEER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the kernel has to answer for one netdev's DCB settings, at startup.
const DCB_TIMEOUT: Duration = Duration::from_secs(2);

pub struct ProbeCollector {
    agent: Mutex<Option<Arc<Agent>>>,
    host: String,
    per_target: bool,
    /// What an on-demand ping needs of the config.
    ping: PingSettings,
    /// On-demand pings running now.
    pings_running: Arc<AtomicUsize>,
    /// When the loop started: its counts are zero then.
    started: Instant,
    /// Dropping it ends the peers thread at its next wake-up.
    _refresh: Option<mpsc::Sender<()>>,
    /// Set by [`ProbeCollector::leave`]: scrapes serve `rdma_probe_leaving` 1 from then on.
    leaving: AtomicBool,
    /// True once a scrape has carried `rdma_probe_leaving` 1. A watch keeps the value, so a
    /// waiter that subscribes after the scrape still sees it.
    left: tokio::sync::watch::Sender<bool>,
    /// `probe.leave_wait`.
    leave_wait: Duration,
}

impl std::fmt::Debug for ProbeCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeCollector")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl ProbeCollector {
    /// Starts probing on `ports` (their endpoints opened by the caller) and, where the config
    /// names peers, the thread that refreshes them.
    pub fn start(
        config: &ProbeConfig,
        host: String,
        ports: Vec<LocalPort>,
    ) -> std::io::Result<ProbeCollector> {
        let started = Instant::now();
        let agent = Arc::new(Agent::spawn(ports, config.settings())?);
        let refresh =
            if config.peers.is_empty() && config.peers_file.is_none() && config.peers_dns.is_none()
            {
                None
            } else {
                let (stop, stopped) = mpsc::channel();
                let (weak, config, own) = (Arc::downgrade(&agent), config.clone(), host.clone());
                std::thread::Builder::new()
                    .name("rfe-probe-peers".into())
                    .spawn(move || refresh_peers(&weak, &config, &own, &stopped))?;
                Some(stop)
            };
        let settings = config.settings();
        Ok(ProbeCollector {
            agent: Mutex::new(Some(agent)),
            host,
            per_target: config.per_target,
            ping: PingSettings {
                qkey: config.qkey,
                unlisted_allowed: config.ping_unlisted,
                timeout: settings.timeout,
            },
            pings_running: Arc::default(),
            started,
            _refresh: refresh,
            leaving: AtomicBool::new(false),
            left: tokio::sync::watch::Sender::new(false),
            leave_wait: config.leave_wait,
        })
    }

    /// Opens a responder and a prober endpoint on every port of this host's RDMA devices (as
    /// `sysfs` lists them) and starts. `None`, said once in the log, where verbs are unavailable
    /// or no port opens.
    pub fn spawn_verbs(config: &ProbeConfig, sysfs: &Path) -> Option<ProbeCollector> {
        let host = config.host.clone().unwrap_or_else(crate::host::name);
        if let Err(e) = super::verbs::devices() {
            tracing::warn!("probing is off: {e}");
            return None;
        }
        let ports = match local_ports(config, sysfs, &host) {
            Ok(ports) if !ports.is_empty() => ports,
            Ok(_) => {
                tracing::warn!("probing is off: no RDMA port to probe from");
                return None;
            }
            Err(e) => {
                tracing::warn!("probing is off: {e}");
                return None;
            }
        };
        match ProbeCollector::start(config, host, ports) {
            Ok(collector) => Some(collector),
            Err(e) => {
                tracing::error!("the probe thread did not start: {e}");
                None
            }
        }
    }

    /// Replaces the peers the loop probes (the simulator, which knows them all).
    pub fn set_peers(&self, peers: Vec<super::agent::Peer>) {
        if let Some(agent) = self.agent.lock().unwrap().as_ref() {
            agent.set_peers(peers);
        }
    }

    /// This host's ports and where they answer, for `/probe-address`.
    pub fn published(&self) -> Published {
        let addresses = self
            .agent
            .lock()
            .unwrap()
            .as_ref()
            .map(|a| a.addresses())
            .unwrap_or_default();
        Published::new(&addresses, &self.host)
    }

    /// A copy of the loop's counts so far (the landing page's localization); `None` once
    /// retired.
    pub fn stats(&self) -> Option<super::stats::Stats> {
        self.agent.lock().unwrap().as_ref().map(|a| a.stats())
    }

    /// When the loop started, its counts all zero.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Says in every scrape from now on that this agent was asked to stop
    /// (`rdma_probe_leaving` 1): the silence that follows is a restart's, not a dead host's.
    /// The loop keeps probing and answering until the process ends.
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::Release);
    }

    /// Completes once a scrape has carried `rdma_probe_leaving` 1 (at once if one has); never
    /// before [`ProbeCollector::leave`].
    pub async fn left(&self) {
        let mut left = self.left.subscribe();
        // The sender lives as long as `self`, so this only ends when the value is true.
        let _ = left.wait_for(|&left| left).await;
    }

    /// [`ProbeCollector::leave`], then waits until a scrape has carried it or `wait` has
    /// passed; whether one did.
    pub async fn leave_and_wait(&self, wait: Duration) -> bool {
        self.leave();
        tokio::time::timeout(wait, self.left()).await.is_ok()
    }

    /// `probe.leave_wait`: how long `serve` waits, on SIGTERM, for a scrape to carry the leave.
    pub fn leave_wait(&self) -> Duration {
        self.leave_wait
    }

    /// Starts an on-demand ping (`/probe-ping`): `query`'s ports resolved against this agent's
    /// own and its peers', its bounds checked, a slot of [`ping::MAX_SESSIONS`] taken; the loop
    /// sends its probes. Await [`RunningPing::report`] for the outcome.
    pub fn ping(&self, query: &ping::Query) -> Result<RunningPing, PingError> {
        let agent = self.agent.lock().unwrap().clone().ok_or(PingError::Off)?;
        let (local, peers) = (agent.local_ports(), agent.peers());
        let known = Known {
            local: &local,
            peers: &peers,
            qkey: self.ping.qkey,
            unlisted_allowed: self.ping.unlisted_allowed,
        };
        let path = ping_target::resolve(&known, &query.to, query.from.as_deref(), query.qpn)?;
        let request = ping::Request {
            from: path.from,
            from_port: path.from_port.clone(),
            to: path.to.clone(),
            count: query.count,
            interval: query.interval,
            flow_label: query.flow_label,
            listed: path.listed,
        };
        request.check()?;
        let slot = Slot::take(&self.pings_running).ok_or(PingError::Busy)?;
        let from = local
            .iter()
            .find(|(index, _)| *index == path.from)
            .map(|(_, peer)| PortView::of(peer))
            .ok_or(PingError::Off)?;
        let header = Report {
            from,
            to: PortView::of(&path.to),
            path: request.kind().as_str().to_string(),
            listed: path.listed,
            count: request.count,
            interval_ns: request.interval.as_nanos() as u64,
            timeout_ns: self.ping.timeout.as_nanos() as u64,
            traffic_class: agent
                .stats()
                .ports
                .get(path.from)
                .map_or(0, |p| p.traffic_class),
            probes: Vec::new(),
        };
        // The last probe's answer may come a timeout after it was sent, and the loop's pass
        // that notices it later still on a loaded host.
        let wait = request.interval.saturating_mul(request.count)
            + self.ping.timeout * 2
            + Duration::from_secs(5);
        let (session, outcomes) = ping::Session::new(request);
        if !agent.ping(session) {
            return Err(PingError::Off);
        }
        Ok(RunningPing {
            header,
            outcomes,
            wait,
            _slot: slot,
        })
    }
}

/// What an on-demand ping takes from the config.
#[derive(Debug, Clone, Copy)]
struct PingSettings {
    qkey: u32,
    unlisted_allowed: bool,
    timeout: Duration,
}

/// One of [`ping::MAX_SESSIONS`] places, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(running: &Arc<AtomicUsize>) -> Option<Slot> {
        running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < ping::MAX_SESSIONS).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(running.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An on-demand ping the loop is sending; dropping it (the asker went away) stops it.
pub struct RunningPing {
    header: Report,
    outcomes: tokio::sync::oneshot::Receiver<Vec<ping::ProbeResult>>,
    wait: Duration,
    _slot: Slot,
}

impl RunningPing {
    /// The report, once every probe is answered or lost.
    pub async fn report(self) -> Result<Report, PingError> {
        match tokio::time::timeout(self.wait, self.outcomes).await {
            Ok(Ok(probes)) => Ok(Report {
                probes,
                ..self.header
            }),
            // The loop ended (the collector retired) with the session in it.
            Ok(Err(_)) => Err(PingError::Off),
            Err(_) => Err(PingError::Timeout(self.wait)),
        }
    }
}

impl Collector for ProbeCollector {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, std::fmt::Error> {
        let Some(stats) = self.agent.lock().unwrap().as_ref().map(|a| a.stats()) else {
            return Ok(Outcome::ok(false));
        };
        // Read once: what this scrape encodes is what `left` reports.
        let leaving = self.leaving.load(Ordering::Acquire);
        let mut families = Families::default();
        super::metrics::encode(&stats, self.per_target, leaving, &mut families);
        out.encode(&families)?;
        if leaving {
            self.left.send_replace(true);
        }
        Ok(Outcome::ok(stats.ports.iter().any(|p| !p.gone)))
    }

    fn retire(&self) {
        self.agent.lock().unwrap().take();
    }
}

/// Every port of the devices `sysfs` lists (those `device_include` matches), each with a
/// responder and a prober endpoint. A port that does not open is left out with a log line.
fn local_ports(
    config: &ProbeConfig,
    sysfs: &Path,
    host: &str,
) -> Result<Vec<LocalPort>, TransportError> {
    let include = config
        .device_include
        .as_ref()
        .and_then(|p| regex::Regex::new(&format!("^(?:{p})$")).ok());
    let class = sysfs.join("class/infiniband");
    let mut devices: Vec<String> = std::fs::read_dir(&class)
        .map_err(|e| TransportError::Unavailable(format!("{}: {e}", class.display())))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| include.as_ref().is_none_or(|re| re.is_match(name)))
        .collect();
    devices.sort();
    let rails = device_rails(config, sysfs, &devices);
    let leaves = config.leaves_of(host).unwrap_or_else(|e| {
        tracing::warn!("{e}: the plan takes no leaves from it");
        config.leaves.clone()
    });
    if !leaves.is_empty() {
        tracing::info!("probe leaves: {leaves:?}");
    }
    let dcb = crate::node::dcb::KernelDcb::new(DCB_TIMEOUT);
    let mut ports = Vec::new();
    for device in &devices {
        let rail = rails.get(device).map_or(0, |(rail, _)| *rail);
        let mut numbers: Vec<u8> = std::fs::read_dir(class.join(device).join("ports"))
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        numbers.sort();
        for number in numbers {
            let open = || super::verbs::open(device, number, config.qkey);
            match (open(), open()) {
                (Ok(responder), Ok(prober)) => {
                    let netdev = gid_netdev(&class, device, number, responder.gid_index());
                    let chosen = super::class::of_port(
                        config.traffic_class,
                        &class,
                        device,
                        number,
                        &netdev,
                        &dcb,
                    );
                    tracing::info!(
                        "probes on {device} port {number} ride traffic class {} (DSCP {}): {}",
                        chosen.traffic_class,
                        chosen.traffic_class >> 2,
                        chosen.source.as_str()
                    );
                    ports.push(LocalPort {
                        port: Port {
                            host: host.to_string(),
                            device: device.clone(),
                            port: u32::from(number),
                            rail,
                            leaf: leaves.get(device).cloned(),
                        },
                        netdev,
                        traffic_class: chosen.traffic_class,
                        responder: Box::new(responder),
                        prober: Box::new(prober),
                    });
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!("no probing on {device} port {number}: {e}");
                }
            }
        }
    }
    Ok(ports)
}

/// Each device's rail ([`super::rails`]), said once in the log. The node agent has no LLDP of
/// its own (the switches' neighbour tables are the switch poller's, in Prometheus), so the
/// config and the PCI placement decide.
fn device_rails(
    config: &ProbeConfig,
    sysfs: &Path,
    devices: &[String],
) -> std::collections::BTreeMap<String, (u32, super::rails::Source)> {
    use super::rails;
    let nics: Vec<rails::Nic> = devices
        .iter()
        .map(|device| rails::Nic {
            device: device.clone(),
            lldp_leaf: None,
            pci_path: rails::nic_pci_path(sysfs, device),
        })
        .collect();
    let assigned = rails::assign(&nics, &config.rails, &rails::accelerators(sysfs));
    for (device, (rail, source)) in &assigned {
        tracing::info!("probe rail of {device}: {rail} ({source:?})");
    }
    assigned
}

/// The network device of GID `gid_index` of `device`'s port `port`, as the kernel binds it
/// (`<class>/<device>/ports/<port>/gid_attrs/ndevs/<gid_index>`): the netdev a RoCE port
/// probes through, which LLDP names on the switch side. Empty where there is none (an
/// InfiniBand port: the kernel refuses the read) or it cannot be read.
fn gid_netdev(class: &Path, device: &str, port: u8, gid_index: u8) -> String {
    let path = class
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("gid_attrs/ndevs")
        .join(gid_index.to_string());
    crate::bounded_read::read_to_string(&path, 256)
        .map(|text| text.trim().to_string())
        .unwrap_or_default()
}

/// About every `peers_refresh` (jittered, so that a fleet started at once does not ask at one
/// second): the agents the config names, the ones due asked ([`PeerBook::asks`]), every known
/// port handed to the loop. Ends when the collector is dropped or the loop retired.
fn refresh_peers(
    agent: &Weak<Agent>,
    config: &ProbeConfig,
    own_host: &str,
    stopped: &mpsc::Receiver<()>,
) {
    let period = config.peers_refresh;
    let mut book = PeerBook::for_refresh_period(period);
    let mut silence = Silence::default();
    let settings = config.settings().targets;
    let mut failing = false;
    loop {
        let (agents, mut problems) = named_agents(config);
        book.set_agents(&agents);
        let Some(live) = agent.upgrade() else {
            return;
        };
        let silent = silence.look(&live.stats());
        let local: Vec<Port> = live
            .local_ports()
            .into_iter()
            .map(|(_, p)| p.port)
            .collect();
        let round = live.round();
        drop(live);
        let ports = book.ports();
        let rounds = peer_book::rounds_ahead(period, &settings);
        let reached = targets::hosts_reached(&local, &ports, round..round + rounds, &settings);
        let (asks, _) = book.asks(Instant::now(), &reached, &silent);
        let mut errors = 0;
        for (asked, answer) in peers::fetch(&asks, PEER_TIMEOUT) {
            if let Err(e) = &answer {
                errors += 1;
                problems.push(e.to_string());
            }
            book.record(&asked, answer, Instant::now());
        }
        let Some(live) = agent.upgrade() else {
            return;
        };
        live.set_peers(book.peers(own_host));
        drop(live);
        // Said once until the peers all answer again, not at every refresh.
        if !problems.is_empty() && !failing {
            tracing::warn!(
                "probe peers: {errors} of {} agents asked did not answer: {}",
                asks.len(),
                problems.join("; ")
            );
        }
        failing = !problems.is_empty();
        match stopped.recv_timeout(jittered(period)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// The agents the config names: `peers`, the file's and the DNS name's, each once; and what
/// could not be read.
fn named_agents(config: &ProbeConfig) -> (Vec<String>, Vec<String>) {
    let mut agents = config.peers.clone();
    let mut problems = Vec::new();
    if let Some(file) = &config.peers_file {
        match peers::read_agents_file(file) {
            Ok(found) => agents.extend(found),
            Err(e) => problems.push(e.to_string()),
        }
    }
    if let Some(name) = &config.peers_dns {
        match peers::resolve_agents(name) {
            Ok(found) => agents.extend(found),
            Err(e) => problems.push(e.to_string()),
        }
    }
    agents.sort();
    agents.dedup();
    (agents, problems)
}

/// `period` times a random factor in [0.5, 1.5): the agents' refreshes drift apart.
fn jittered(period: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // RandomState's keys are random per process; the clock makes each draw differ.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let factor = 0.5 + (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    period.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A collector probing from one port of the memory fabric, without peers.
    fn lone_collector() -> Arc<ProbeCollector> {
        let config = ProbeConfig::default();
        let fabric = crate::probe::memory::MemoryFabric::new(Box::new(|_, _, _| Some(1_000)));
        let ports = crate::testutil::lone_port(&fabric, "gpu-01", 7, config.qkey);
        Arc::new(ProbeCollector::start(&config, "gpu-01".into(), ports).unwrap())
    }

    /// `rdma_probe_leaving`'s sample in one scrape of `collector`.
    fn leaving_sample(collector: &Arc<ProbeCollector>) -> String {
        let text = crate::testutil::scrape(collector);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("rdma_probe_leaving{"))
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        lines[0].to_string()
    }

    /// Once a scrape has carried the leave, and only then, `left` completes; leave_wait is the
    /// config's.
    #[tokio::test]
    async fn left_completes_once_a_scrape_has_carried_the_leave() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let collector = lone_collector();
        assert_eq!(collector.leave_wait(), Duration::from_secs(20));
        assert_eq!(
            leaving_sample(&collector),
            r#"rdma_probe_leaving{device="rxe0",port="1"} 0"#
        );
        let mut cx = Context::from_waker(Waker::noop());
        let mut left = std::pin::pin!(collector.left());
        // A scrape before the leave carries 0: it does not count.
        assert!(left.as_mut().poll(&mut cx).is_pending());
        collector.leave();
        assert!(left.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            leaving_sample(&collector),
            r#"rdma_probe_leaving{device="rxe0",port="1"} 1"#
        );
        assert_eq!(left.as_mut().poll(&mut cx), Poll::Ready(()));
        // A waiter that comes after the scrape is not left waiting.
        tokio::time::timeout(Duration::from_secs(5), collector.left())
            .await
            .expect("left() after the scrape");
    }

    /// Without a scrape the wait ends at its bound and says so; with one it ends at the scrape.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_leave_wait_ends_at_the_scrape_or_at_its_bound() {
        let collector = lone_collector();
        let started = Instant::now();
        assert!(!collector.leave_and_wait(Duration::from_millis(50)).await);
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(leaving_sample(&collector).ends_with(" 1"));

        let collector = lone_collector();
        let scraper = collector.clone();
        let scrape = tokio::task::spawn_blocking(move || {
            // The scrape comes once the leave is said.
            crate::testutil::wait_for("the leave", Duration::from_secs(10), || {
                scraper.leaving.load(Ordering::Acquire)
            });
            leaving_sample(&scraper)
        });
        let started = Instant::now();
        assert!(collector.leave_and_wait(Duration::from_secs(30)).await);
        assert!(started.elapsed() < Duration::from_secs(20));
        assert!(scrape.await.unwrap().ends_with(" 1"));
    }

    /// The netdev is the one the kernel binds to the GID the port probes on; none is empty.
    #[test]
    fn refreshes_are_spread_over_half_to_one_and_a_half_periods() {
        let period = Duration::from_secs(60);
        let waits: Vec<Duration> = (0..64).map(|_| jittered(period)).collect();
        assert!(waits
            .iter()
            .all(|w| *w >= period / 2 && *w < period * 3 / 2));
        let distinct: std::collections::HashSet<&Duration> = waits.iter().collect();
        assert!(distinct.len() > 32, "{waits:?}");
    }

    #[test]
    fn a_ports_netdev_is_its_probe_gids() {
        let sys = tempfile::tempdir().unwrap();
        let class = sys.path().join("class/infiniband");
        let ndevs = class.join("rxe0/ports/1/gid_attrs/ndevs");
        std::fs::create_dir_all(&ndevs).unwrap();
        std::fs::write(ndevs.join("0"), "eth0\n").unwrap();
        std::fs::write(ndevs.join("1"), "veth-rxe0\n").unwrap();
        assert_eq!(gid_netdev(&class, "rxe0", 1, 1), "veth-rxe0");
        assert_eq!(gid_netdev(&class, "rxe0", 1, 0), "eth0");
        assert_eq!(gid_netdev(&class, "rxe0", 1, 2), "");
        assert_eq!(gid_netdev(&class, "mlx5_0", 1, 0), "");
    }
}
