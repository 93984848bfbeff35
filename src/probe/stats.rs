//! What the probing loop counted, per local port and per path kind, and per target for the
//! targets that lost probes lately. A scrape copies it (`Agent::stats`) and encodes it.
//!
//! Per-target series would grow with the fabric (every rail peer is probed in turn), so by
//! default they exist only for targets that lost a probe in the last [`LOSS_MEMORY`]: none on a
//! healthy fabric, and the evidence localization needs on a sick one. Every target probed
//! lately is kept (and served with `per_target`, for small fabrics and tests).
//!
//! Each local port keeps its targets' times in its own prober's clock, and ages them by that
//! clock alone: NIC clocks are unrelated to each other (a NIC's counts from its last reset, the
//! host's from boot), so a time of one read against another's would forget a port's series at
//! once or keep them for ever. A clock that goes back (its NIC reset) takes its port's times
//! back with it, their ages kept.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::rtt::{Clock, RoundTrip, Timestamps};
use super::targets::{PathKind, Port};
use super::transport::Address;

/// How long a target that lost a probe keeps its own series after its last loss, in ns.
pub(crate) const LOSS_MEMORY: u64 = 600_000_000_000;

/// Upper bounds of the network RTT histogram's buckets, seconds: from a path inside one leaf
/// (under 10 µs on hardware) or over the spine (under 25 µs) to a congested or software path
/// (soft-RoCE: about 1 ms; tens of ms under netem).
pub(crate) const RTT_BUCKETS: [f64; 8] = [5e-6, 10e-6, 25e-6, 100e-6, 250e-6, 1e-3, 5e-3, 25e-3];

/// How far back the mean answer delay looks: answers sent in the last 10 seconds.
pub(crate) const ANSWER_DELAY_WINDOW: Duration = Duration::from_secs(10);

/// The delays a port's responder took to answer (from a probe's arrival to its answer's post,
/// as it writes them into its answers), over the last [`ANSWER_DELAY_WINDOW`]: one slot per
/// second, each tagged with its second, so a slot from an earlier lap counts for nothing.
#[derive(Debug, Clone)]
pub struct AnswerDelays {
    epoch: Instant,
    /// (second since `epoch`, sum of delays in ns, answers).
    slots: [(u64, u64, u64); AnswerDelays::SLOTS],
}

impl AnswerDelays {
    const SLOTS: usize = ANSWER_DELAY_WINDOW.as_secs() as usize;

    pub fn new(epoch: Instant) -> AnswerDelays {
        AnswerDelays {
            epoch,
            slots: [(u64::MAX, 0, 0); AnswerDelays::SLOTS],
        }
    }

    fn second(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_secs()
    }

    /// One answer sent at `at` after holding its probe `delay_ns`.
    pub fn record(&mut self, at: Instant, delay_ns: u64) {
        let second = self.second(at);
        let slot = &mut self.slots[(second % Self::SLOTS as u64) as usize];
        if slot.0 != second {
            *slot = (second, 0, 0);
        }
        slot.1 = slot.1.saturating_add(delay_ns);
        slot.2 += 1;
    }

    /// The mean delay, in seconds, of the answers sent in the window that ends at `now`; 0
    /// when there were none.
    pub fn mean_seconds(&self, now: Instant) -> f64 {
        let now = self.second(now);
        let (sum, count) = self
            .slots
            .iter()
            .filter(|(second, _, _)| *second <= now && now - *second < Self::SLOTS as u64)
            .fold((0u64, 0u64), |(sum, count), slot| {
                (sum.saturating_add(slot.1), count + slot.2)
            });
        if count == 0 {
            0.0
        } else {
            sum as f64 / count as f64 / 1e9
        }
    }
}

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
    /// The port's network device (RoCE), empty where there is none or it is unknown.
    pub netdev: String,
    /// The GRH traffic class it probes and answers on.
    pub traffic_class: u8,
    /// Where this port answers probes.
    pub address: Address,
    pub clock: Clock,
    /// How its completion times become nanoseconds.
    pub timestamps: Timestamps,
    /// The device went away; its counts stay as they were.
    pub gone: bool,
    /// By path kind ([`KINDS`] order).
    pub sent: [u64; 3],
    pub answered: [u64; 3],
    pub lost: [u64; 3],
    pub network_rtt: Histogram,
    /// This port's responder's own delays in answering: a rising mean says a busy host, not
    /// the network.
    pub answer_delays: AnswerDelays,
    /// Answers with impossible times, by reason.
    pub bad: BTreeMap<&'static str, u64>,
    /// Packets dropped unanswered or unmatched, by reason.
    pub dropped: BTreeMap<&'static str, u64>,
    /// Verbs errors, by reason.
    pub errors: BTreeMap<&'static str, u64>,
    /// Queue pairs rebuilt, by endpoint (`responder`, `prober`) and reason.
    pub resets: BTreeMap<(&'static str, &'static str), u64>,
    /// Probes unanswered because their target's agent was restarting (or left the peer set):
    /// not lost, by path kind.
    pub restart_unanswered: [u64; 3],
    /// This port's prober clock at its last count: its targets' times are in it.
    now_ns: u64,
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
    /// By path; each target's times are in its `from` port's clock.
    pub targets: HashMap<PathKey, TargetCounts>,
}

/// What [`Stats::new`] needs of a local port.
#[derive(Debug, Clone)]
pub struct PortIdentity {
    pub port: Port,
    pub netdev: String,
    pub traffic_class: u8,
    pub address: Address,
    pub clock: Clock,
    pub timestamps: Timestamps,
}

impl Stats {
    pub fn new(ports: Vec<PortIdentity>) -> Stats {
        let epoch = Instant::now();
        Stats {
            ports: ports
                .into_iter()
                .map(|identity| PortStats {
                    port: identity.port,
                    netdev: identity.netdev,
                    traffic_class: identity.traffic_class,
                    address: identity.address,
                    clock: identity.clock,
                    timestamps: identity.timestamps,
                    gone: false,
                    sent: [0; 3],
                    answered: [0; 3],
                    lost: [0; 3],
                    network_rtt: Histogram::default(),
                    answer_delays: AnswerDelays::new(epoch),
                    bad: BTreeMap::new(),
                    dropped: BTreeMap::new(),
                    errors: BTreeMap::new(),
                    resets: BTreeMap::new(),
                    restart_unanswered: [0; 3],
                    now_ns: 0,
                })
                .collect(),
            targets: HashMap::new(),
        }
    }

    /// Local port `from`'s clock reads `now_ns`. Back from the last reading, its NIC's clock
    /// restarted: the port's target times move back as far, so each keeps its age.
    fn advance(&mut self, from: usize, now_ns: u64) {
        let Some(port) = self.ports.get_mut(from) else {
            return;
        };
        let back = port.now_ns.saturating_sub(now_ns);
        port.now_ns = now_ns;
        if back == 0 {
            return;
        }
        for (_, target) in self.targets.iter_mut().filter(|(k, _)| k.from == from) {
            target.last_sent_ns = target.last_sent_ns.saturating_sub(back);
            target.last_loss_ns = target.last_loss_ns.map(|at| at.saturating_sub(back));
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

    /// A probe on `path` left at `now_ns` (its port's clock).
    pub(super) fn sent(&mut self, path: &PathKey, now_ns: u64) {
        self.advance(path.from, now_ns);
        self.ports[path.from].sent[kind_index(path.kind)] += 1;
        let target = self.targets.entry(path.clone()).or_default();
        target.sent += 1;
        target.last_sent_ns = now_ns;
    }

    pub(super) fn answered(&mut self, path: &PathKey, rtt: RoundTrip) {
        let port = &mut self.ports[path.from];
        port.answered[kind_index(path.kind)] += 1;
        port.network_rtt.observe(rtt.network_ns as f64 / 1e9);
        let target = self.targets.entry(path.clone()).or_default();
        target.rtt_sum_ns += rtt.network_ns;
        target.answered += 1;
    }

    /// Local port `port`'s responder answered a probe it held `delay_ns`.
    pub(super) fn answer_sent(&mut self, port: usize, delay_ns: u64) {
        if let Some(port) = self.ports.get_mut(port) {
            port.answer_delays.record(Instant::now(), delay_ns);
        }
    }

    /// A probe on `path` found lost at `now_ns` (its port's clock).
    pub(super) fn lost(&mut self, path: &PathKey, now_ns: u64) {
        self.advance(path.from, now_ns);
        self.ports[path.from].lost[kind_index(path.kind)] += 1;
        let target = self.targets.entry(path.clone()).or_default();
        target.lost += 1;
        target.last_loss_ns = Some(now_ns);
    }

    /// A probe on `path` went unanswered because its target's agent was restarting.
    pub(super) fn restart_unanswered(&mut self, path: &PathKey) {
        self.ports[path.from].restart_unanswered[kind_index(path.kind)] += 1;
    }

    pub(super) fn bad(&mut self, path: &PathKey, reason: &'static str) {
        *self.ports[path.from].bad.entry(reason).or_default() += 1;
    }

    pub(super) fn dropped(&mut self, port: &Port, reason: &'static str) {
        if let Some(port) = self.port_mut(port) {
            *port.dropped.entry(reason).or_default() += 1;
        }
    }

    /// A rebuilt queue pair: counted, and the port's published address is the new one.
    pub(super) fn reset(
        &mut self,
        index: usize,
        endpoint: &'static str,
        reason: &'static str,
        address: Address,
    ) {
        let port = &mut self.ports[index];
        *port.resets.entry((endpoint, reason)).or_default() += 1;
        if endpoint == "responder" {
            port.address = address;
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

    /// Forgets local port `from`'s targets neither probed nor losing for [`LOSS_MEMORY`] of
    /// its clock, which reads `now_ns`.
    pub(super) fn forget_old_losses(&mut self, from: usize, now_ns: u64) {
        self.advance(from, now_ns);
        let now = now_ns;
        self.targets.retain(|k, t| {
            let last = t.last_loss_ns.unwrap_or(0).max(t.last_sent_ns);
            k.from != from || now.saturating_sub(last) < LOSS_MEMORY
        });
    }

    /// Every target probed or losing within [`LOSS_MEMORY`], with its counts.
    pub fn all_targets(&self) -> impl Iterator<Item = (&PathKey, &TargetCounts)> {
        self.targets.iter()
    }

    /// The targets that lost a probe within [`LOSS_MEMORY`], with their counts.
    pub fn losing_targets(&self) -> impl Iterator<Item = (&PathKey, &TargetCounts)> {
        self.targets.iter().filter(|(k, t)| {
            let now = self.ports.get(k.from).map_or(0, |p| p.now_ns);
            t.last_loss_ns
                .is_some_and(|at| now.saturating_sub(at) < LOSS_MEMORY)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(device: &str, clock: Clock) -> PortIdentity {
        PortIdentity {
            port: Port {
                host: "gpu-01".into(),
                device: device.into(),
                port: 1,
                rail: 0,
                leaf: None,
            },
            netdev: String::new(),
            traffic_class: 104,
            address: Address {
                gid: [0; 16],
                qpn: 1,
                qkey: 1,
                lid: None,
            },
            clock,
            timestamps: match clock {
                Clock::Hardware => Timestamps::Cycles,
                Clock::Software => Timestamps::Software,
            },
        }
    }

    fn path(from: usize, to: &str) -> PathKey {
        PathKey {
            from,
            kind: PathKind::Rail,
            to: Port {
                host: "gpu-02".into(),
                device: to.into(),
                port: 1,
                rail: 0,
                leaf: None,
            },
        }
    }

    fn losing(stats: &Stats) -> Vec<(usize, String)> {
        let mut losing: Vec<(usize, String)> = stats
            .losing_targets()
            .map(|(k, _)| (k.from, k.to.device.clone()))
            .collect();
        losing.sort();
        losing
    }

    const MINUTE: u64 = 60_000_000_000;

    /// Two NICs whose clocks are days apart (one with NIC timestamps, up for a week; one on
    /// the host's clock, booted an hour ago): each one's lost targets are kept by its own
    /// clock. The NIC clock that restarts keeps its series, and so does the other; both still
    /// age out after LOSS_MEMORY of their own clock.
    #[test]
    fn each_port_keeps_its_losses_by_its_own_clock_through_a_restart() {
        let mut stats = Stats::new(vec![
            identity("mlx5_0", Clock::Hardware),
            identity("mlx5_1", Clock::Software),
        ]);
        let week = 7 * 24 * 60 * MINUTE;
        let hour = 60 * MINUTE;
        stats.sent(&path(0, "a"), week);
        stats.lost(&path(0, "a"), week + 1);
        stats.sent(&path(1, "b"), hour);
        stats.lost(&path(1, "b"), hour + 1);
        let both = vec![(0, "a".to_string()), (1, "b".to_string())];
        assert_eq!(losing(&stats), both, "the hour-old clock's loss is kept");
        stats.forget_old_losses(0, week + MINUTE);
        stats.forget_old_losses(1, hour + MINUTE);
        assert_eq!(losing(&stats), both);
        // mlx5_0's NIC resets: its clock reads 2 minutes. Neither series is lost, and mlx5_0's
        // loss is still 1 minute old by its clock.
        stats.forget_old_losses(0, 2 * MINUTE);
        stats.forget_old_losses(1, hour + 2 * MINUTE);
        assert_eq!(losing(&stats), both, "through mlx5_0's clock restart");
        let a = &stats.targets[&path(0, "a")];
        assert_eq!(2 * MINUTE - a.last_loss_ns.unwrap(), MINUTE - 1);
        // It counts on: a new loss there, and 10 minutes of each clock later all is forgotten.
        stats.lost(&path(0, "a"), 3 * MINUTE);
        assert_eq!(stats.targets[&path(0, "a")].lost, 2);
        stats.forget_old_losses(0, 3 * MINUTE + LOSS_MEMORY);
        assert_eq!(losing(&stats), vec![(1, "b".to_string())]);
        stats.forget_old_losses(1, hour + 1 + LOSS_MEMORY);
        assert!(losing(&stats).is_empty());
        assert!(stats.targets.is_empty());
    }

    #[test]
    fn the_answer_delay_is_the_mean_of_the_last_ten_seconds_answers() {
        let epoch = Instant::now();
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        let mut delays = AnswerDelays::new(epoch);
        assert_eq!(delays.mean_seconds(at(0)), 0.0);
        delays.record(at(100), 10_000);
        delays.record(at(900), 30_000);
        assert!((delays.mean_seconds(at(950)) - 20e-6).abs() < 1e-12);
        // A busy second: 20 ms answers.
        for n in 0..4 {
            delays.record(at(5_000 + n), 20_000_000);
        }
        let mean = delays.mean_seconds(at(9_500));
        assert!((mean - (40_000 + 80_000_000) as f64 / 6.0 / 1e9).abs() < 1e-12);
        // Ten seconds on, the first second's answers are out of the window; past the busy
        // second's ten, nothing is left, however the slots were reused.
        assert!((delays.mean_seconds(at(10_100)) - 0.02).abs() < 1e-12);
        assert_eq!(delays.mean_seconds(at(15_000)), 0.0);
        delays.record(at(21_000), 1_000);
        assert!((delays.mean_seconds(at(21_000)) - 1e-6).abs() < 1e-12);
        assert_eq!(delays.mean_seconds(at(31_500)), 0.0);
    }
}
