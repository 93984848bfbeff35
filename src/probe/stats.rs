//! What the probing loop counted, per local port and per path kind, and per target for the
//! targets that lost probes lately. A scrape copies it (`Agent::stats`) and encodes it.
//!
//! Per-target series would grow with the fabric (every rail peer is probed in turn), so by
//! default they exist only for targets that lost a probe in the last [`LOSS_MEMORY`]: none on a
//! healthy fabric, and the evidence localization needs on a sick one. Every target probed
//! lately is kept (and served with `per_target`, for small fabrics and tests).

use std::collections::{BTreeMap, HashMap};

use super::rtt::{Clock, RoundTrip};
use super::targets::{PathKind, Port};
use super::transport::Address;

/// How long a target that lost a probe keeps its own series after its last loss, in ns.
pub const LOSS_MEMORY: u64 = 600_000_000_000;

/// Upper bounds of the network RTT histogram's buckets, seconds: from a path inside one leaf
/// (under 10 µs on hardware) or over the spine (under 25 µs) to a congested or software path
/// (soft-RoCE: about 1 ms; tens of ms under netem).
pub const RTT_BUCKETS: [f64; 8] = [5e-6, 10e-6, 25e-6, 100e-6, 250e-6, 1e-3, 5e-3, 25e-3];

/// A path: from a local port (its index) to a target, in one of the three sets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathKey {
    pub from: usize,
    pub kind: PathKind,
    pub to: Port,
}

/// The path kinds in their order in [`PortStats`]' arrays.
pub const KINDS: [PathKind; 3] = [PathKind::Host, PathKind::Rail, PathKind::CrossRail];

fn kind_index(kind: PathKind) -> usize {
    match kind {
        PathKind::Host => 0,
        PathKind::Rail => 1,
        PathKind::CrossRail => 2,
    }
}

/// A histogram's per-bucket counts (the last is +Inf), sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: [u64; RTT_BUCKETS.len() + 1],
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        let bucket = RTT_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(RTT_BUCKETS.len());
        self.buckets[bucket] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

/// One local port's counts.
#[derive(Debug, Clone)]
pub struct PortStats {
    pub port: Port,
    /// Where this port answers probes.
    pub address: Address,
    pub clock: Clock,
    /// The device went away; its counts stay as they were.
    pub gone: bool,
    /// By path kind ([`KINDS`] order).
    pub sent: [u64; 3],
    pub answered: [u64; 3],
    pub lost: [u64; 3],
    pub network_rtt: Histogram,
    /// Sum (seconds) and count of the responders' delays: a rising mean says "not the network".
    pub responder_delay_sum: f64,
    pub responder_delay_count: u64,
    /// Answers with impossible times, by reason.
    pub bad: BTreeMap<&'static str, u64>,
    /// Packets dropped unanswered or unmatched, by reason.
    pub dropped: BTreeMap<&'static str, u64>,
    /// Verbs errors, by reason.
    pub errors: BTreeMap<&'static str, u64>,
}

/// One target's counts, kept while it is probed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetCounts {
    pub sent: u64,
    pub lost: u64,
    /// Answered probes' network RTT: sum in nanoseconds and count.
    pub rtt_sum_ns: u64,
    pub answered: u64,
    pub last_sent_ns: u64,
    pub last_loss_ns: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Stats {
    pub ports: Vec<PortStats>,
    pub targets: HashMap<PathKey, TargetCounts>,
    /// The loop's clock at the last count, for the loss memory.
    now_ns: u64,
}

impl Stats {
    pub fn new(ports: Vec<(Port, Address, Clock)>) -> Stats {
        Stats {
            ports: ports
                .into_iter()
                .map(|(port, address, clock)| PortStats {
                    port,
                    address,
                    clock,
                    gone: false,
                    sent: [0; 3],
                    answered: [0; 3],
                    lost: [0; 3],
                    network_rtt: Histogram::default(),
                    responder_delay_sum: 0.0,
                    responder_delay_count: 0,
                    bad: BTreeMap::new(),
                    dropped: BTreeMap::new(),
                    errors: BTreeMap::new(),
                })
                .collect(),
            targets: HashMap::new(),
            now_ns: 0,
        }
    }

    pub(super) fn addresses(&self) -> Vec<super::agent::Peer> {
        self.ports
            .iter()
            .filter(|p| !p.gone)
            .map(|p| super::agent::Peer {
                port: p.port.clone(),
                address: p.address,
            })
            .collect()
    }

    fn port_mut(&mut self, port: &Port) -> Option<&mut PortStats> {
        self.ports.iter_mut().find(|p| &p.port == port)
    }

    pub(super) fn sent(&mut self, path: &PathKey) {
        self.ports[path.from].sent[kind_index(path.kind)] += 1;
        let target = self.targets.entry(path.clone()).or_default();
        target.sent += 1;
        target.last_sent_ns = self.now_ns;
    }

    pub(super) fn answered(&mut self, path: &PathKey, rtt: RoundTrip) {
        let port = &mut self.ports[path.from];
        port.answered[kind_index(path.kind)] += 1;
        port.network_rtt.observe(rtt.network_ns as f64 / 1e9);
        port.responder_delay_sum += rtt.responder_delay_ns as f64 / 1e9;
        port.responder_delay_count += 1;
        let target = self.targets.entry(path.clone()).or_default();
        target.rtt_sum_ns += rtt.network_ns;
        target.answered += 1;
    }

    pub(super) fn lost(&mut self, path: &PathKey, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        self.ports[path.from].lost[kind_index(path.kind)] += 1;
        let target = self.targets.entry(path.clone()).or_default();
        target.lost += 1;
        target.last_loss_ns = Some(now_ns);
    }

    pub(super) fn bad(&mut self, path: &PathKey, reason: &'static str) {
        *self.ports[path.from].bad.entry(reason).or_default() += 1;
    }

    pub(super) fn dropped(&mut self, port: &Port, reason: &'static str) {
        if let Some(port) = self.port_mut(port) {
            *port.dropped.entry(reason).or_default() += 1;
        }
    }

    pub(super) fn error(&mut self, port: &Port, reason: &'static str) {
        if let Some(port) = self.port_mut(port) {
            *port.errors.entry(reason).or_default() += 1;
        }
    }

    pub(super) fn gone(&mut self, port: &Port) {
        if let Some(port) = self.port_mut(port) {
            port.gone = true;
        }
    }

    /// Forgets targets neither probed nor losing for [`LOSS_MEMORY`].
    pub(super) fn forget_old_losses(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        let now = self.now_ns;
        self.targets.retain(|_, t| {
            let last = t.last_loss_ns.unwrap_or(0).max(t.last_sent_ns);
            now.saturating_sub(last) < LOSS_MEMORY
        });
    }

    /// Every target probed or losing within [`LOSS_MEMORY`], with its counts.
    pub fn all_targets(&self) -> impl Iterator<Item = (&PathKey, &TargetCounts)> {
        self.targets.iter()
    }

    /// The targets that lost a probe within [`LOSS_MEMORY`], with their counts.
    pub fn losing_targets(&self) -> impl Iterator<Item = (&PathKey, &TargetCounts)> {
        self.targets.iter().filter(|(_, t)| {
            t.last_loss_ns
                .is_some_and(|at| self.now_ns.saturating_sub(at) < LOSS_MEMORY)
        })
    }
}
