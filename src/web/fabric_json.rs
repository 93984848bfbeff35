//! `/api/v1/fabric`: what the landing page draws, as JSON. Hosts (the demo's simulated ones, or
//! this node alone), their RDMA ports with state and rates, the leaf switches and the LLDP
//! wiring between them, the storm sources with their evidence in words, the demo's scenario,
//! and what the probes between NICs say (`fabric_probes.rs`): the failing paths and the
//! component they share.
//!
//! Cheap by construction: it reads each node's last walk (a scrape's, or its own when the last
//! one is older than `STALE_AFTER`, at most one at a time) and the storm sampler's latest
//! interval; rates come from the previous walk it saw, kept in [`RateMemory`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::fabric_peers::{outliers, PeerOutlier};
use super::fabric_probes::{ProbeFeed, ProbeMemory, ProbesView};
use super::fabric_rates::{port_rates, PortRates};
use crate::direction::Direction;
use crate::node::storm::StormDetector;
use crate::node::sysfs::NodeSnapshot;
use crate::node::NodeCollector;
use crate::probe::collector::ProbeCollector;
use crate::probe::localize::{Leaf, PortId};
use crate::switch::poller::Poller;
use crate::switch::profile::{Metric, SampleValue};

/// The route of the endpoint.
pub const PATH: &str = "/api/v1/fabric";
/// A walk younger than this is reused as it is; an older one is refreshed by one walk, shared
/// by every request that arrives meanwhile.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(5);

/// A tx pause share above this while receiving less than `SOURCE_MAX_RX_UTILIZATION` of the
/// line rate makes a NIC the storm source: the thresholds of `RdmaPfcStormSource`.
pub(crate) const SOURCE_MIN_TX_PAUSED: f64 = 0.9;
pub(crate) const SOURCE_MAX_RX_UTILIZATION: f64 = 0.1;
/// A link paused more than this share of the time (either way) is drawn as paused.
pub(crate) const PAUSED_SHARE: f64 = 0.05;
/// ECN-marked share of received packets above which marking is heavy (healthy DCQCN marks
/// about 2e-4 in the demo).
pub(crate) const ECN_HEAVY_SHARE: f64 = 1e-3;

/// One node whose walks the page reads.
pub struct HostFeed {
    pub name: String,
    pub node: Arc<NodeCollector>,
    pub storm: Option<Arc<StormDetector>>,
    /// Its probe collector, when it probes.
    pub probe: Option<Arc<ProbeCollector>>,
}

/// The demo's scenario and where in its cycle the fabric is.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioView {
    pub name: &'static str,
    /// `healthy lead-in`, `fault`, `recovery`.
    pub phase: &'static str,
    pub seconds_into_cycle: f64,
    pub cycle_seconds: f64,
    /// What an operator should see during the fault.
    pub signature: &'static str,
}

/// The two last walks of each host the endpoint saw: rates need two.
#[derive(Default)]
pub struct RateMemory {
    seen: Mutex<HashMap<String, Seen>>,
    /// One refresh walk at a time: requests that arrive during one take its result.
    refreshing: tokio::sync::Mutex<()>,
    /// The probe counts the page saw, for its window.
    probes: ProbeMemory,
}

struct Seen {
    current: (SystemTime, NodeSnapshot),
    previous: Option<(SystemTime, NodeSnapshot)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FabricView {
    pub version: &'static str,
    /// `demo` (the simulated fabric) or `node` (this node and its configured switches).
    pub mode: &'static str,
    pub scenario: Option<ScenarioView>,
    pub hosts: Vec<HostView>,
    pub switches: Vec<SwitchView>,
    pub storm_sources: Vec<StormSource>,
    /// NICs far worse than the other NICs of their rail (`fabric_peers.rs`): gray failures.
    pub peer_outliers: Vec<PeerOutlier>,
    /// The probes between NICs: failing paths and verdicts; `None` where no host probes.
    pub probes: Option<ProbesView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostView {
    pub name: String,
    pub sysfs_root: String,
    pub infiniband_present: bool,
    pub last_read_seconds_ago: Option<f64>,
    /// Seconds between the two walks the rates come from; `None`: no rate yet.
    pub rate_window_seconds: Option<f64>,
    pub nics: Vec<NicView>,
    pub read_errors: Vec<ReadErrorView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NicView {
    pub device: String,
    pub port: String,
    pub netdev: Option<String>,
    pub link_layer: Option<String>,
    /// `4: ACTIVE`, as the kernel writes it.
    pub state: Option<String>,
    pub phys_state: Option<String>,
    pub up: bool,
    pub rate_bytes_per_second: Option<f64>,
    pub firmware: Option<String>,
    pub rates: Option<PortRates>,
    /// Share of the line rate received.
    pub rx_utilization: Option<f64>,
    /// The storm sampler's latest 200 ms interval, per priority and direction that paused.
    pub sampler: Vec<SamplerPause>,
    /// The switch port LLDP names at the other end.
    pub switch: Option<SwitchEnd>,
    pub status: Status,
    /// The status in words, short enough to draw beside the link.
    pub label: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SamplerPause {
    pub priority: u8,
    pub direction: &'static str,
    pub paused_share: f64,
    pub in_storm: bool,
    pub storms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchEnd {
    pub switch: String,
    pub port: String,
    pub up: Option<bool>,
}

/// A link's state, worst first: what the drawing colours and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Down,
    StormSource,
    Paused,
    Errors,
    CnpIgnored,
    EcnHeavy,
    NoRate,
    Ok,
}

impl Status {
    pub const ALL: [Status; 8] = [
        Status::Down,
        Status::StormSource,
        Status::Paused,
        Status::Errors,
        Status::CnpIgnored,
        Status::EcnHeavy,
        Status::NoRate,
        Status::Ok,
    ];

    /// The class and legend key of the status (the JSON's value).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Down => "down",
            Status::StormSource => "storm-source",
            Status::Paused => "paused",
            Status::Errors => "errors",
            Status::CnpIgnored => "cnp-ignored",
            Status::EcnHeavy => "ecn-heavy",
            Status::NoRate => "no-rate",
            Status::Ok => "ok",
        }
    }

    /// What the legend says of it (its colour is never the only sign: each has a symbol).
    pub fn legend(self) -> &'static str {
        match self {
            Status::Down => "✕ down: the port or its switch port is not up",
            Status::StormSource => "⚠ storm source: pauses its switch port (tx) almost all the time while receiving almost nothing",
            Status::Paused => "‖ paused: PFC pauses the link more than 5% of the time (rx: the switch pauses the NIC, tx: the NIC pauses the switch)",
            Status::Errors => "! errors: link, receive or transport error counters rise",
            Status::CnpIgnored => "↯ CNPs ignored: the sender does not slow down when told (DCQCN off)",
            Status::EcnHeavy => "≈ heavy ECN marking: more than 0.1% of received packets marked",
            Status::NoRate => "… no rate yet: one walk seen, rates need two",
            Status::Ok => "✓ ok",
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Status::Down => "✕",
            Status::StormSource => "⚠",
            Status::Paused => "‖",
            Status::Errors => "!",
            Status::CnpIgnored => "↯",
            Status::EcnHeavy => "≈",
            Status::NoRate => "…",
            Status::Ok => "✓",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReadErrorView {
    pub seconds_ago: f64,
    pub device: String,
    pub reason: &'static str,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchView {
    pub name: String,
    pub up: bool,
    /// Why the last poll failed (`rdma_switch_poll_errors_total`'s reason), when it did.
    pub reason: Option<&'static str>,
    pub last_success_seconds_ago: Option<f64>,
    pub ports: Vec<SwitchPortView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchPortView {
    pub name: String,
    pub up: Option<bool>,
    pub neighbor_host: Option<String>,
    pub neighbor_port: Option<String>,
}

/// A NIC that pauses its switch port while receiving almost nothing.
#[derive(Debug, Clone, Serialize)]
pub struct StormSource {
    pub host: String,
    pub device: String,
    pub port: String,
    pub netdev: Option<String>,
    pub priority: u8,
    pub tx_paused_share: f64,
    pub rx_utilization: f64,
    pub switch: Option<String>,
    pub switch_port: Option<String>,
    pub evidence: String,
}

fn seconds_since(at: SystemTime) -> f64 {
    SystemTime::now()
        .duration_since(at)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Walks `node` when its last walk is older than `STALE_AFTER` (or there is none), so that a
/// page nobody else scrapes still moves; otherwise nothing is read.
pub async fn refresh(memory: &RateMemory, node: &Arc<NodeCollector>) {
    let stale = |node: &NodeCollector| {
        node.last_scrape()
            .at
            .is_none_or(|at| seconds_since(at) >= STALE_AFTER.as_secs_f64())
    };
    if !stale(node) {
        return;
    }
    let _one = memory.refreshing.lock().await;
    if !stale(node) {
        return;
    }
    let node = node.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || node.scrape(|_, _| ())).await {
        tracing::error!("the landing page's walk failed: {e}");
    }
}

/// The fabric as the page draws it. `hosts` are walked only when stale (see [`refresh`]).
pub async fn build(
    mode: &'static str,
    hosts: &[HostFeed],
    switches: Option<&Poller>,
    scenario: Option<ScenarioView>,
    memory: &RateMemory,
) -> FabricView {
    for host in hosts {
        refresh(memory, &host.node).await;
    }
    let switch_views = switches.map(switch_views).unwrap_or_default();
    // (host, netdev) -> the switch port LLDP finds it on.
    let mut wiring: HashMap<(&str, &str), SwitchEnd> = HashMap::new();
    for switch in &switch_views {
        for port in &switch.ports {
            if let (Some(host), Some(netdev)) = (&port.neighbor_host, &port.neighbor_port) {
                wiring.insert(
                    (host.as_str(), netdev.as_str()),
                    SwitchEnd {
                        switch: switch.name.clone(),
                        port: port.name.clone(),
                        up: port.up,
                    },
                );
            }
        }
    }
    let mut host_views = Vec::with_capacity(hosts.len());
    let mut storm_sources = Vec::new();
    for feed in hosts {
        let view = host_view(feed, memory, &wiring);
        storm_sources.extend(sources_of(&view));
        host_views.push(view);
    }
    let probes = probes_view(hosts, &host_views, memory);
    let peer_outliers = outliers(&host_views);
    FabricView {
        version: crate::build::VERSION,
        mode,
        scenario,
        hosts: host_views,
        switches: switch_views,
        storm_sources,
        peer_outliers,
        probes,
    }
}

/// The probes of the hosts that probe, each port's leaf where LLDP names it.
fn probes_view(hosts: &[HostFeed], views: &[HostView], memory: &RateMemory) -> Option<ProbesView> {
    let mut leaves = HashMap::new();
    for view in views {
        for nic in &view.nics {
            let (Some(end), Ok(port)) = (&nic.switch, nic.port.parse()) else {
                continue;
            };
            leaves.insert(
                PortId {
                    host: view.name.clone(),
                    device: nic.device.clone(),
                    port,
                },
                Leaf {
                    switch: end.switch.clone(),
                    switch_port: Some(end.port.clone()),
                },
            );
        }
    }
    let feeds: Vec<ProbeFeed<'_>> = hosts
        .iter()
        .filter_map(|h| {
            Some(ProbeFeed {
                host: &h.name,
                collector: h.probe.as_deref()?,
            })
        })
        .collect();
    super::fabric_probes::view(&memory.probes, &feeds, &leaves, std::time::Instant::now())
}

fn host_view(
    feed: &HostFeed,
    memory: &RateMemory,
    wiring: &HashMap<(&str, &str), SwitchEnd>,
) -> HostView {
    let last = feed.node.last_scrape();
    // Shift the memory when a newer walk is there; rates are between the last two.
    let (previous, window) = {
        let mut seen = memory.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = last.at {
            match seen.get_mut(&feed.name) {
                Some(s) if s.current.0 == at => {}
                Some(s) => {
                    let current = std::mem::replace(&mut s.current, (at, last.snapshot.clone()));
                    s.previous = Some(current);
                }
                None => {
                    seen.insert(
                        feed.name.clone(),
                        Seen {
                            current: (at, last.snapshot.clone()),
                            previous: None,
                        },
                    );
                }
            }
        }
        match (seen.get(&feed.name), last.at) {
            (Some(s), Some(at)) => match &s.previous {
                Some((before, snapshot)) => (
                    Some(snapshot.clone()),
                    at.duration_since(*before).ok().map(|d| d.as_secs_f64()),
                ),
                None => (None, None),
            },
            _ => (None, None),
        }
    };
    let sampler = feed.storm.as_ref().map(|s| s.current()).unwrap_or_default();
    let mut nics = Vec::new();
    for device in &last.snapshot.devices {
        for port in &device.ports {
            let before = previous
                .as_ref()
                .and_then(|p| p.devices.iter().find(|d| d.name == device.name))
                .and_then(|d| d.ports.iter().find(|p| p.number == port.number));
            let rates = before
                .zip(window)
                .and_then(|(before, seconds)| port_rates(before, port, seconds));
            let state_text =
                |s: &Option<(u32, String)>| s.as_ref().map(|(id, n)| format!("{id}: {n}"));
            // ACTIVE and LinkUp: anything else is what an operator looks for first.
            let up = port.state.as_ref().is_some_and(|(id, _)| *id == 4)
                && port.phys_state.as_ref().is_some_and(|(id, _)| *id == 5);
            let rx_utilization = rates
                .as_ref()
                .and_then(|r| r.rx_bytes_per_second)
                .zip(port.rate_bytes_per_second)
                .and_then(|(rx, line)| (line > 0.0).then(|| (rx / line).min(1.0)));
            let sampler: Vec<SamplerPause> = sampler
                .iter()
                .filter(|s| s.key.device == device.name && s.key.port == port.number_text)
                // Only what paused is worth a line: eight priorities both ways are mostly 0.
                .filter(|s| s.paused_ratio > 0.0 || s.in_storm || s.storms > 0)
                .map(|s| SamplerPause {
                    priority: s.key.priority,
                    direction: s.key.direction.as_label(),
                    paused_share: s.paused_ratio,
                    in_storm: s.in_storm,
                    storms: s.storms,
                })
                .collect();
            let switch = port
                .netdev
                .as_deref()
                .and_then(|netdev| wiring.get(&(feed.name.as_str(), netdev)))
                .cloned();
            let mut nic = NicView {
                device: device.name.clone(),
                port: port.number_text.clone(),
                netdev: port.netdev.clone(),
                link_layer: port.link_layer.clone(),
                state: state_text(&port.state),
                phys_state: state_text(&port.phys_state),
                up,
                rate_bytes_per_second: port.rate_bytes_per_second,
                firmware: device.fw_ver.clone(),
                rates,
                rx_utilization,
                sampler,
                switch,
                status: Status::Ok,
                label: String::new(),
            };
            (nic.status, nic.label) = status_of(&nic);
            nics.push(nic);
        }
    }
    HostView {
        name: feed.name.clone(),
        sysfs_root: feed.node.config().sysfs_root.display().to_string(),
        infiniband_present: last.infiniband_present,
        last_read_seconds_ago: last.at.map(seconds_since),
        rate_window_seconds: window,
        nics,
        read_errors: last
            .recent_errors
            .iter()
            .rev()
            .map(|e| ReadErrorView {
                seconds_ago: seconds_since(e.at),
                device: e.device.clone(),
                reason: e.reason,
                detail: e.detail.clone(),
            })
            .collect(),
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// The tx pause share the source rule reads: the rate between walks (the alert's rate), else
/// the sampler's latest interval.
fn tx_paused(nic: &NicView) -> Option<(u8, f64)> {
    nic.rates
        .as_ref()
        .and_then(|r| r.max_pause(Direction::Tx))
        .map(|p| (p.priority, p.share))
        .or_else(|| {
            nic.sampler
                .iter()
                .filter(|s| s.direction == "tx")
                .max_by(|a, b| a.paused_share.total_cmp(&b.paused_share))
                .map(|s| (s.priority, s.paused_share))
        })
}

fn is_storm_source(nic: &NicView) -> Option<(u8, f64, f64)> {
    let (priority, share) = tx_paused(nic)?;
    let rx = nic.rx_utilization?;
    (share > SOURCE_MIN_TX_PAUSED && rx <= SOURCE_MAX_RX_UTILIZATION)
        .then_some((priority, share, rx))
}

fn status_of(nic: &NicView) -> (Status, String) {
    if !nic.up || nic.switch.as_ref().is_some_and(|s| s.up == Some(false)) {
        let state = nic.state.as_deref().unwrap_or("state unknown");
        return (Status::Down, format!("✕ DOWN ({state})"));
    }
    if let Some((priority, share, _)) = is_storm_source(nic) {
        return (
            Status::StormSource,
            format!("⚠ STORM SOURCE tx {} p{priority}", percent(share)),
        );
    }
    let Some(rates) = &nic.rates else {
        return (Status::NoRate, "… no rate yet".into());
    };
    if let Some(p) = rates.pause.first().filter(|p| p.share > PAUSED_SHARE) {
        return (
            Status::Paused,
            format!(
                "‖ PAUSED {} {} p{}",
                p.direction,
                percent(p.share),
                p.priority
            ),
        );
    }
    if let Some(errors) = rates.errors_per_second.filter(|e| *e > 0.0) {
        return (Status::Errors, format!("! ERRORS {errors:.0}/s"));
    }
    if let Some(ignored) = rates.cnp_ignored_per_second.filter(|c| *c > 0.0) {
        return (Status::CnpIgnored, format!("↯ CNP IGNORED {ignored:.0}/s"));
    }
    if let Some(share) = rates.ecn_marked_share.filter(|s| *s > ECN_HEAVY_SHARE) {
        return (Status::EcnHeavy, format!("≈ ECN {:.1}%", share * 100.0));
    }
    let rx = nic.rx_utilization.map_or("?".into(), percent);
    (Status::Ok, format!("✓ ok rx {rx}"))
}

/// The storm sources among a host's NICs, each with the reasoning of `RdmaPfcStormSource`.
fn sources_of(host: &HostView) -> Vec<StormSource> {
    host.nics
        .iter()
        .filter_map(|nic| {
            let (priority, share, rx) = is_storm_source(nic)?;
            let netdev = nic.netdev.as_deref().unwrap_or("no netdev");
            let wired = match &nic.switch {
                Some(end) => format!("it hangs off {} port {} (LLDP)", end.switch, end.port),
                None => "no switch port names it over LLDP".into(),
            };
            let sampler = nic
                .sampler
                .iter()
                .find(|s| s.direction == "tx" && s.priority == priority)
                .map(|s| {
                    format!(
                        "; the storm sampler {} ({} storm{} so far)",
                        if s.in_storm { "sees a storm now" } else { "sees no storm now" },
                        s.storms,
                        if s.storms == 1 { "" } else { "s" }
                    )
                })
                .unwrap_or_default();
            Some(StormSource {
                host: host.name.clone(),
                device: nic.device.clone(),
                port: nic.port.clone(),
                netdev: nic.netdev.clone(),
                priority,
                tx_paused_share: share,
                rx_utilization: rx,
                switch: nic.switch.as_ref().map(|s| s.switch.clone()),
                switch_port: nic.switch.as_ref().map(|s| s.port.clone()),
                evidence: format!(
                    "{} {} ({netdev}) pauses priority {priority} {} of the time (tx) while receiving {} of its line rate; {wired}{sampler}. Take that host (or port) out of the fabric.",
                    host.name,
                    nic.device,
                    percent(share),
                    percent(rx),
                ),
            })
        })
        .collect()
}

/// Every configured switch: up (a snapshot fresh enough to serve), why not, and its ports with
/// their LLDP neighbours (a port of a switch that is down is not known to be up).
fn switch_views(poller: &Poller) -> Vec<SwitchView> {
    poller
        .targets
        .iter()
        .map(|(target, state)| {
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            let up = state.fresh_snapshot(target.interval).is_some();
            let mut ports: BTreeMap<u32, SwitchPortView> = BTreeMap::new();
            // The wiring of the last poll that answered, even a stale one: a switch that stops
            // answering is drawn down where it was, not unplugged.
            if let Some(snapshot) = &state.snapshot {
                for sample in &snapshot.samples {
                    let entry = ports
                        .entry(sample.key.ifindex)
                        .or_insert_with(|| SwitchPortView {
                            name: sample.key.ifindex.to_string(),
                            up: None,
                            neighbor_host: None,
                            neighbor_port: None,
                        });
                    match (sample.metric, &sample.value) {
                        (Metric::IfName, SampleValue::Text(t)) => entry.name = t.clone(),
                        (Metric::LldpRemoteSystemName, SampleValue::Text(t)) => {
                            entry.neighbor_host = Some(t.clone())
                        }
                        (Metric::LldpRemotePortId, SampleValue::Text(t)) => {
                            entry.neighbor_port = Some(t.clone())
                        }
                        (Metric::OperStatus, SampleValue::Gauge(v)) => {
                            entry.up = up.then_some(*v == 1)
                        }
                        _ => {}
                    }
                }
            }
            SwitchView {
                name: target.name.clone(),
                up,
                reason: state.last_error.as_ref().map(|e| e.reason.as_label()),
                last_success_seconds_ago: state.last_success.map(seconds_since),
                // Only ports that carry something to draw.
                ports: ports
                    .into_values()
                    .filter(|p| p.neighbor_host.is_some() || p.up.is_some())
                    .collect(),
            }
        })
        .collect()
}

/// The JSON body: serde_json escapes every string (names may be hostile).
pub fn to_json(view: &FabricView) -> Vec<u8> {
    serde_json::to_vec(view).unwrap_or_else(|e| {
        tracing::error!("encoding the fabric view failed: {e}");
        b"{}".to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(up: bool, rates: Option<PortRates>, rx: Option<f64>) -> NicView {
        NicView {
            device: "mlx5_2".into(),
            port: "1".into(),
            netdev: Some("ens3f0np0".into()),
            link_layer: Some("Ethernet".into()),
            state: Some(if up { "4: ACTIVE" } else { "1: DOWN" }.into()),
            phys_state: None,
            up,
            rate_bytes_per_second: Some(50e9),
            firmware: None,
            rates,
            rx_utilization: rx,
            sampler: Vec::new(),
            switch: Some(SwitchEnd {
                switch: "leaf1".into(),
                port: "Ethernet3/1".into(),
                up: Some(true),
            }),
            status: Status::Ok,
            label: String::new(),
        }
    }

    fn pausing(direction: &'static str, share: f64) -> PortRates {
        PortRates {
            window_seconds: 5.0,
            pause: vec![super::super::fabric_rates::PauseShare {
                priority: 3,
                direction,
                share,
            }],
            ..PortRates::default()
        }
    }

    #[test]
    fn the_source_pauses_tx_while_receiving_nothing_its_victims_are_paused() {
        let source = nic(true, Some(pausing("tx", 1.0)), Some(0.0));
        let (status, label) = status_of(&source);
        assert_eq!(status, Status::StormSource);
        assert!(label.contains("tx 100% p3"), "{label}");
        // Receiving at line rate: pausing, but not the source of a storm.
        let busy = nic(true, Some(pausing("tx", 1.0)), Some(0.9));
        assert_eq!(status_of(&busy).0, Status::Paused);
        let victim = nic(true, Some(pausing("rx", 0.97)), Some(0.03));
        let (status, label) = status_of(&victim);
        assert_eq!(status, Status::Paused);
        assert!(label.contains("rx 97% p3"), "{label}");
        assert_eq!(status_of(&nic(false, None, None)).0, Status::Down);
        assert_eq!(status_of(&nic(true, None, None)).0, Status::NoRate);

        let host = HostView {
            name: "gpu-node-01".into(),
            sysfs_root: "/sys".into(),
            infiniband_present: true,
            last_read_seconds_ago: Some(0.0),
            rate_window_seconds: Some(5.0),
            nics: vec![source, busy],
            read_errors: Vec::new(),
        };
        let sources = sources_of(&host);
        assert_eq!(sources.len(), 1);
        assert!(
            sources[0].evidence.starts_with(
                "gpu-node-01 mlx5_2 (ens3f0np0) pauses priority 3 100% of the time (tx) while receiving 0% of its line rate; it hangs off leaf1 port Ethernet3/1 (LLDP)"
            ),
            "{}",
            sources[0].evidence
        );
    }

    #[test]
    fn every_status_has_a_symbol_in_its_legend() {
        for status in Status::ALL {
            assert!(status.legend().starts_with(status.symbol()), "{status:?}");
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
        }
    }
}
