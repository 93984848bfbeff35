//! The probing loop of one host: every local port answers probes on its responder endpoint and
//! sends its own from its prober endpoint to the round's targets ([`super::targets::plan`]).
//! One thread runs all ports: every verbs call it makes returns at once (completion queues are
//! polled, never waited on; address handles for GIDs not met lately are made off the loop), so
//! a wedged or vanished device costs only its own probes. Between passes it sleeps on the
//! ports' completion channels until a completion or its next send or timeout
//! ([`super::sleep`]), so an idle host's loop wakes for work only. The loop writes [`Stats`]; a scrape
//! copies them and never sends a probe.
//!
//! What the fabric sends cannot fool or silence it: an answer counts only when it comes from the
//! GID and QPN the probe went to, with a sequence number in flight (they start at a random point
//! each start, so a blind forger cannot guess them); a send that fails costs that one answer,
//! not the rest of the batch; a queue pair rebuilt by its endpoint is counted, logged once and
//! published with its new QPN; sources outside the peer set are answered at a small shared rate.
//!
//! A peer that restarts is not a fault ([`super::restarts`]): its first probe or answer moves
//! the probes to its new address, and the probes it missed while restarting are counted apart.
//! Timeouts and restarts are timed with the host's monotonic clock; a round trip, and each
//! port's counts, with that port's own clock (NIC clocks are unrelated to each other).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::packet::{Kind, Mode, Packet};
use super::ping;
use super::responder::{KnownSources, Limits, Responder, Verdict};
use super::restarts::{Fate, Restarts};
use super::rtt::{round_trip, Clock, ProberTimes};
use super::sleep::Sleeper;
use super::stats::{PathKey, PortIdentity, Stats};
use super::targets::{self, PathKind, Port};
use super::transport::{Address, Endpoint, Event, SendOptions, TransportError};

/// A port another agent (or this one) answers probes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub port: Port,
    pub address: Address,
}

/// How the loop probes.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub targets: targets::Settings,
    /// A probe without its answer after this long is lost.
    pub timeout: Duration,
    /// Traffic class and service level of every probe and answer.
    pub send: SendOptions,
    pub responder: Limits,
    /// How long probes to a peer whose agent went wholly silent wait to be told a restart's
    /// (it comes back as a new start) or lost (it does not, or was up all along).
    pub restart_grace: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            targets: targets::Settings::default(),
            timeout: Duration::from_millis(500),
            send: SendOptions::default(),
            responder: Limits::default(),
            restart_grace: Duration::from_secs(30),
        }
    }
}

/// One local port's two endpoints.
pub struct LocalPort {
    pub port: Port,
    /// The port's network device (RoCE: the netdev its probe GID belongs to); empty where
    /// there is none or it is unknown.
    pub netdev: String,
    /// The GRH traffic class its probes and answers ride ([`super::class`]).
    pub traffic_class: u8,
    pub responder: Box<dyn Endpoint>,
    pub prober: Box<dyn Endpoint>,
}

impl std::fmt::Debug for LocalPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalPort")
            .field("port", &self.port)
            .field("netdev", &self.netdev)
            .field("traffic_class", &self.traffic_class)
            .field("responder", &self.responder.address())
            .field("prober", &self.prober.address())
            .finish()
    }
}

/// A probe in flight.
struct Pending {
    path: PathKey,
    /// Where it went: only an answer from there counts.
    to: Address,
    /// When it left, by the host's clock (timeouts, restarts), and the start of the target's
    /// agent then.
    sent: Instant,
    epoch: u32,
    t1: u64,
    /// The send completion (device clock), awaited with hardware timestamps only.
    t2: Option<u64>,
    /// The `Ack`'s arrival, and the responder's delay once known.
    t5: Option<u64>,
    delay: Option<u64>,
    /// An operator's on-demand probe: its outcome goes to the asker, not to the stats.
    ping: Option<ping::Ticket>,
}

/// An answer whose `Delay` follows the `Ack`'s send completion (hardware clock).
struct Answered {
    to: Address,
    /// The prober is in the peer set.
    peer: bool,
    seq: u64,
    t3: u64,
}

/// What the loop keeps per local port.
struct PortState {
    /// Its place in [`Stats::ports`].
    index: usize,
    local: LocalPort,
    policy: Responder,
    pending: HashMap<u64, Pending>,
    /// Answers awaiting their `Ack`'s send completion, by work request.
    answered: HashMap<u64, Answered>,
    next_wr: u64,
    /// Set once the device is gone: nothing more is sent or polled on it.
    gone: bool,
    /// A rebuild of this port's queue pairs was logged (later ones go to the debug log).
    reset_logged: bool,
    /// The prober's clock at its last reading, and when that was: a gone port's clock is
    /// not read again, but its counts still age.
    clock_read: (u64, Instant),
    /// Whether this pass polls the responder and the prober: they may have completions.
    ready: [bool; 2],
}

/// What the loop knows of this host and its peers, beyond each port.
struct Probing {
    /// This start of the agent, sent in every packet (never 0: 0 is "not said").
    epoch: u32,
    /// The peers' current addresses, and probes held while their agent was silent.
    restarts: Restarts,
    /// The peer set as last handed to `restarts`.
    peers: Vec<Peer>,
    settled: Vec<(PathKey, Fate)>,
    next_settle: Instant,
}

/// The probing loop: spawn it, hand it peers, read its stats, stop it.
pub struct Agent {
    stats: Arc<Mutex<Stats>>,
    peers: Arc<Mutex<Vec<Peer>>>,
    /// The round the loop plans now: a peer refresh asks for the addresses the next rounds need.
    round: Arc<AtomicU64>,
    /// On-demand pings for the loop to take up at its next pass.
    pings: Mutex<std::sync::mpsc::Sender<ping::Session>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Agent {
    /// Starts the loop on thread `rfe-probe` over `ports`.
    pub fn spawn(ports: Vec<LocalPort>, settings: Settings) -> std::io::Result<Agent> {
        let stats = Arc::new(Mutex::new(Stats::new(
            ports
                .iter()
                .map(|p| PortIdentity {
                    port: p.port.clone(),
                    netdev: p.netdev.clone(),
                    traffic_class: p.traffic_class,
                    address: p.responder.address(),
                    clock: p.prober.clock(),
                    timestamps: p.prober.timestamps(),
                })
                .collect(),
        )));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let round = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (pings, asked) = std::sync::mpsc::channel();
        let thread = {
            let (stats, peers, round, stop) =
                (stats.clone(), peers.clone(), round.clone(), stop.clone());
            std::thread::Builder::new()
                .name("rfe-probe".into())
                .spawn(move || run(ports, settings, &stats, &peers, &round, &asked, &stop))?
        };
        Ok(Agent {
            stats,
            peers,
            round,
            pings: Mutex::new(pings),
            stop,
            thread: Some(thread),
        })
    }

    /// The ports other agents may probe (their responders), as this host publishes them.
    pub fn addresses(&self) -> Vec<Peer> {
        self.stats.lock().unwrap().addresses()
    }

    /// Replaces the peers; the next round plans with them. This host's own ports are added by
    /// the loop itself.
    pub fn set_peers(&self, peers: Vec<Peer>) {
        *self.peers.lock().unwrap() = peers;
    }

    /// The round the loop plans now.
    pub fn round(&self) -> u64 {
        self.round.load(Ordering::Relaxed)
    }

    /// A copy of the counts so far.
    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap().clone()
    }

    /// The peers the loop probes (other hosts' ports).
    pub fn peers(&self) -> Vec<Peer> {
        self.peers.lock().unwrap().clone()
    }

    /// This host's ports that still probe, each with its index in the loop.
    pub fn local_ports(&self) -> Vec<(usize, Peer)> {
        let stats = self.stats.lock().unwrap();
        stats
            .ports
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.gone)
            .map(|(index, p)| {
                let peer = Peer {
                    port: p.port.clone(),
                    address: p.address,
                };
                (index, peer)
            })
            .collect()
    }

    /// Hands an on-demand ping to the loop; its report comes through the session's receiver.
    /// False when the loop has ended.
    pub fn ping(&self, session: ping::Session) -> bool {
        self.pings.lock().unwrap().send(session).is_ok()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    ports: Vec<LocalPort>,
    settings: Settings,
    stats: &Mutex<Stats>,
    peers: &Mutex<Vec<Peer>>,
    round_now: &AtomicU64,
    asked: &std::sync::mpsc::Receiver<ping::Session>,
    stop: &AtomicBool,
) {
    // Each responder's buckets in its own clock: another port's may be days ahead.
    let mut states: Vec<PortState> = ports
        .into_iter()
        .enumerate()
        .map(|(index, local)| PortState {
            index,
            policy: Responder::new(settings.responder, local.responder.now_ns()),
            clock_read: (local.prober.now_ns(), Instant::now()),
            local,
            pending: HashMap::new(),
            answered: HashMap::new(),
            next_wr: 1,
            gone: false,
            reset_logged: false,
            ready: [true; 2],
        })
        .collect();
    let mut next_seq: u64 = random_start();
    let mut probing = Probing {
        // Drawn apart from the sequence numbers, which it must not give away.
        epoch: random_start() as u32 | 1,
        restarts: Restarts::new(settings.restart_grace),
        peers: Vec::new(),
        settled: Vec::new(),
        next_settle: Instant::now(),
    };
    let mut round: u64 = 0;
    let mut events = Vec::new();
    let mut pings: Vec<ping::Session> = Vec::new();
    let mut sleeper = Sleeper::default();
    while !stop.load(Ordering::Relaxed) {
        // One round: the plan, its sends spread evenly over the round's length.
        let mut known: Vec<Peer> = peers.lock().unwrap().clone();
        if known != probing.peers {
            probing.restarts.set_peers(&known);
            probing.peers = known.clone();
        }
        for state in states.iter().filter(|s| !s.gone) {
            known.push(Peer {
                port: state.local.port.clone(),
                address: state.local.responder.address(),
            });
        }
        let known_sources = KnownSources::new(known.iter().map(|p| &p.address));
        let local: Vec<Port> = states.iter().map(|s| s.local.port.clone()).collect();
        let all: Vec<Port> = known.iter().map(|p| p.port.clone()).collect();
        round_now.store(round, Ordering::Relaxed);
        let planned = targets::plan(&local, &all, round, &settings.targets);
        let length = targets::round_length(&planned, &settings.targets);
        let plan: Vec<(usize, PathKind, Port, Address, u32)> = planned
            .into_iter()
            .filter_map(|t| {
                let peer = known.iter().find(|p| &p.port == t.to)?;
                Some((t.from, t.kind, t.to.clone(), peer.address, t.flow_label))
            })
            .collect();
        let round_start = std::time::Instant::now();
        let mut sent = 0;
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            // Armed before the polls below: a completion after them wakes the sleep.
            arm(&mut states, &mut sleeper, stats);
            let elapsed = round_start.elapsed();
            // Sends due soon go now, while the loop is awake anyway.
            let ahead = (elapsed + SEND_EARLY).as_secs_f64();
            let due = if plan.is_empty() {
                0
            } else {
                ((ahead / length.as_secs_f64()) * plan.len() as f64).ceil() as usize
            };
            while sent < due.min(plan.len()) {
                let (from, kind, ref to, planned, flow_label) = plan[sent];
                sent += 1;
                // Where the target answers now: its own packets may have said since the plan.
                let address = probing.restarts.address(planned);
                let state = &mut states[from];
                if state.gone {
                    continue;
                }
                let seq = next_seq;
                next_seq += 1;
                let path = PathKey {
                    from,
                    kind,
                    to: to.clone(),
                };
                let options = SendOptions {
                    flow_label,
                    traffic_class: state.local.traffic_class,
                    peer: true,
                    ..settings.send
                };
                let answers_on = state.local.responder.address().qpn;
                let payload = Packet::probe_from(seq, answers_on, probing.epoch).encode();
                match state.local.prober.send(address, options, &payload, seq) {
                    Ok(t1) => {
                        stats.lock().unwrap().sent(&path, t1);
                        state.pending.insert(
                            seq,
                            Pending {
                                path,
                                to: address,
                                sent: Instant::now(),
                                epoch: probing.restarts.epoch(&address),
                                t1,
                                t2: None,
                                t5: None,
                                delay: None,
                                ping: None,
                            },
                        );
                    }
                    Err(e) => fail(state, stats, &e),
                }
            }
            pings.extend(asked.try_iter());
            send_pings(
                &mut states,
                &mut pings,
                &mut next_seq,
                &settings,
                stats,
                &probing,
            );
            for state in states.iter_mut().filter(|s| !s.gone) {
                serve(
                    state,
                    &settings,
                    &known_sources,
                    stats,
                    &mut probing,
                    &mut events,
                );
                collect(state, stats, &mut probing, &mut events);
                expire(state, &settings, stats, &mut probing);
            }
            settle(&mut states, stats, &mut probing);
            if elapsed >= length {
                break;
            }
            let mut until = wake_at(&states, &settings, &pings, &probing);
            until = until.min(round_start + next_send(plan.len(), sent, length));
            if states.iter().any(|s| !s.gone && !s.waitable()) {
                let polled = pause(&states, &plan, sent, length, round_start.elapsed());
                until = until.min(Instant::now() + polled);
            }
            let fds = states.iter().filter(|s| !s.gone).flat_map(|s| {
                let responder = (2 * s.index, s.local.responder.wait_fd());
                [responder, (2 * s.index + 1, s.local.prober.wait_fd())]
            });
            sleeper.sleep(fds, until);
        }
        round += 1;
        for state in &mut states {
            // Each by its own clocks; a gone port's are not read again, its counts age by the
            // host's.
            let now = if state.gone {
                state.clock_read.0 + state.clock_read.1.elapsed().as_nanos() as u64
            } else {
                state.clock_read = (state.local.prober.now_ns(), Instant::now());
                let responder_now = state.local.responder.now_ns();
                state.policy.forget_idle(responder_now, 60_000_000_000);
                state.clock_read.0
            };
            stats.lock().unwrap().forget_old_losses(state.index, now);
        }
    }
}

/// A send due within this long goes out now, while the loop is awake: a probe's exact time
/// within its round does not matter, and a wake-up costs more CPU than the rest of the loop's
/// work. At the default rate (a send every 10 ms) the sends go two at a time and the loop
/// wakes half as often (`benches/probe_idle.rs`: 0.6 % of a core a host at 5 ms, 0.43 % here).
const SEND_EARLY: Duration = Duration::from_millis(20);

/// The longest the loop sleeps: it looks at its stop flag, its on-demand pings and the peers'
/// held probes at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(100);

impl PortState {
    /// Both endpoints give a descriptor to sleep on.
    fn waitable(&self) -> bool {
        self.local.responder.wait_fd().is_some() && self.local.prober.wait_fd().is_some()
    }
}

/// Marks which endpoints this pass polls (those the sleeper finds ready) and arms them,
/// taking the wake-ups they gave.
fn arm(states: &mut [PortState], sleeper: &mut Sleeper, stats: &Mutex<Stats>) {
    let now = Instant::now();
    for state in states.iter_mut().filter(|s| !s.gone) {
        let (responder, prober) = (2 * state.index, 2 * state.index + 1);
        state.ready = [sleeper.ready(responder, now), sleeper.ready(prober, now)];
        let mut armed = Ok(());
        if state.ready[0] {
            armed = sleeper.arm(responder, state.local.responder.as_mut(), now);
        }
        if state.ready[1] && armed.is_ok() {
            armed = sleeper.arm(prober, state.local.prober.as_mut(), now);
        }
        if let Err(e) = armed {
            fail(state, stats, &e);
        }
    }
}

/// When the round's send number `sent` of `planned` is due, from the round's start (the sends
/// are spread evenly; the last is followed by the round's end).
fn next_send(planned: usize, sent: usize, length: Duration) -> Duration {
    if sent >= planned {
        return length;
    }
    // A microsecond past the instant, where the due count's `ceil` takes it in.
    length.mul_f64(sent as f64 / planned as f64) + Duration::from_micros(1)
}

/// When the loop must wake at the latest for what it keeps: a probe's timeout, an on-demand
/// ping's next probe, and [`MAX_SLEEP`] (the endpoints' own times are the sleeper's).
fn wake_at(
    states: &[PortState],
    settings: &Settings,
    pings: &[ping::Session],
    probing: &Probing,
) -> Instant {
    let now = Instant::now();
    let mut until = now + MAX_SLEEP;
    if probing.restarts.held() > 0 {
        until = until.min(probing.next_settle);
    }
    for state in states.iter().filter(|s| !s.gone) {
        for pending in state.pending.values() {
            // `expire` takes a probe strictly past its timeout.
            until = until.min(pending.sent + settings.timeout + Duration::from_micros(1));
        }
    }
    for session in pings {
        if let Some(at) = session.next_at() {
            until = until.min(at);
        }
    }
    until
}

/// The probes held for silent peers that are settled by now: lost, or a restart's. Looked at
/// every 10 ms at most: the loop wakes far more often, and thousands may be held.
fn settle(states: &mut [PortState], stats: &Mutex<Stats>, probing: &mut Probing) {
    let now = Instant::now();
    if now < probing.next_settle {
        return;
    }
    probing.next_settle = now + Duration::from_millis(10);
    probing.restarts.settle(now, &mut probing.settled);
    if probing.settled.is_empty() {
        return;
    }
    let mut stats = stats.lock().unwrap();
    for (path, fate) in probing.settled.drain(..) {
        match fate {
            Fate::Lost => {
                let state = &states[path.from];
                let now = if state.gone {
                    state.clock_read.0
                } else {
                    state.local.prober.now_ns()
                };
                stats.lost(&path, now);
            }
            Fate::Restart => stats.restart_unanswered(&path),
        }
    }
}

/// Polled this often while a probe of a software-clock port is young: its answer is stamped
/// when it is polled, so the prober's lag adds to the RTT. (A port with NIC timestamps needs
/// no haste.)
const FINE_POLL: Duration = Duration::from_micros(100);
/// How long a probe counts as young: most answers come within it (soft-RoCE under TCG: 1 ms
/// at the median; hardware: tens of µs).
const YOUNG: Duration = Duration::from_millis(1);
/// Polled at least this often otherwise, for the responders' sake (their lag is measured and
/// taken out, but it delays the peers' answers).
const COARSE_POLL: Duration = Duration::from_millis(2);

/// How long the loop may sleep while a port has no descriptor to sleep on (a device without
/// completion channels): briefly while a probe of its own is young, else until the next send
/// is due, at most [`COARSE_POLL`]. A loop that woke every 0.5 ms whatever the state cost an
/// 8-port host 5 % of a core in the demo (debug build).
fn pause<T>(
    states: &[PortState],
    plan: &[T],
    sent: usize,
    length: Duration,
    elapsed: Duration,
) -> Duration {
    let young_ns = YOUNG.as_nanos() as u64;
    let waiting = states.iter().any(|state| {
        if state.gone || state.local.prober.clock() != Clock::Software {
            return false;
        }
        let now = state.local.prober.now_ns();
        state
            .pending
            .values()
            .any(|p| now.saturating_sub(p.t1) < young_ns)
    });
    if waiting {
        return FINE_POLL;
    }
    let next_send = if plan.is_empty() {
        length
    } else {
        length.mul_f64(sent as f64 / plan.len() as f64)
    };
    next_send
        .saturating_sub(elapsed)
        .clamp(FINE_POLL, COARSE_POLL)
}

/// Where a run's sequence numbers start: a random point below 2^62 (the hasher's keys are
/// random per process), so answers left from an earlier run, or forged by someone who did not
/// see the probes, match none in flight.
fn random_start() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() >> 2).max(1)
}

/// An endpoint rebuilt its queue pair: counted, the responder's new address published, logged
/// once a port.
fn reset(
    state: &mut PortState,
    stats: &Mutex<Stats>,
    endpoint: &'static str,
    reason: &'static str,
) {
    let address = state.local.responder.address();
    stats
        .lock()
        .unwrap()
        .reset(state.index, endpoint, reason, address);
    let (device, port) = (&state.local.port.device, state.local.port.port);
    if state.reset_logged {
        tracing::debug!("probe {endpoint} on {device} port {port} rebuilt ({reason})");
    } else {
        state.reset_logged = true;
        tracing::warn!(
            "probe {endpoint} on {device} port {port} rebuilt its queue pair ({reason}); now \
             answering on QPN {}; later rebuilds are counted in rdma_probe_resets_total",
            address.qpn
        );
    }
}

/// Marks a port's device gone on [`TransportError::Gone`]; counts every error.
fn fail(state: &mut PortState, stats: &Mutex<Stats>, error: &TransportError) {
    let mut stats = stats.lock().unwrap();
    stats.error(&state.local.port, error.reason());
    if matches!(error, TransportError::Gone) && !state.gone {
        state.gone = true;
        state.local.responder.close();
        state.local.prober.close();
        stats.gone(&state.local.port);
        tracing::warn!(
            "probing stops on {} port {}: the device is gone",
            state.local.port.device,
            state.local.port.port
        );
    }
}

/// The responder side: answers the probes that arrived.
fn serve(
    state: &mut PortState,
    settings: &Settings,
    known: &KnownSources,
    stats: &Mutex<Stats>,
    probing: &mut Probing,
    events: &mut Vec<Event>,
) {
    events.clear();
    if !state.ready[0] {
        return;
    }
    if let Err(e) = state.local.responder.poll(events, Duration::ZERO) {
        return fail(state, stats, &e);
    }
    let clock = state.local.responder.clock();
    for event in events.drain(..) {
        match event {
            Event::Received {
                payload,
                source,
                at_ns,
            } => {
                // A peer's by its GID, or on InfiniBand without a GRH by its LID.
                let local_gid = state.local.responder.address().gid;
                let (source, from_peer) = match known.identify(source, &local_gid) {
                    Some(peer) => (peer, true),
                    None => (source, false),
                };
                if from_peer {
                    // A peer's probe says where its port answers and which start it is: a
                    // restarted peer is probed at its new address from now on.
                    if let Ok(probe) = Packet::decode(&payload) {
                        if probe.kind == Kind::Probe {
                            let alive = Instant::now()
                                .checked_sub(settings.timeout)
                                .unwrap_or_else(Instant::now);
                            probing.restarts.heard_probe(
                                source.gid,
                                probe.answers_on,
                                probe.epoch,
                                alive,
                            );
                        }
                    }
                }
                let seq = match state.policy.receive(&payload, source, at_ns, from_peer) {
                    Verdict::Answer(seq) => seq,
                    Verdict::Drop(reason) => {
                        stats.lock().unwrap().dropped(&state.local.port, reason);
                        continue;
                    }
                };
                let to = source.address(state.local.responder.address().qkey);
                // Software clock: the delay ends now, at the answer's post, and rides in it.
                let delay = match clock {
                    Clock::Software => state.local.responder.now_ns().saturating_sub(at_ns),
                    Clock::Hardware => 0,
                };
                let mode = match clock {
                    Clock::Software => Mode::DelayInAck,
                    Clock::Hardware => Mode::DelayFollows,
                };
                let ack = Packet::answer(Kind::Ack, seq, delay, mode, probing.epoch);
                let wr = state.next_wr;
                state.next_wr += 1;
                let options = SendOptions {
                    traffic_class: state.local.traffic_class,
                    peer: from_peer,
                    ..settings.send
                };
                match state.local.responder.send(to, options, &ack.encode(), wr) {
                    Ok(_) if clock == Clock::Software => {
                        stats.lock().unwrap().answer_sent(state.index, delay);
                    }
                    Ok(_) => {
                        // Bounded: an answer whose completion never comes is dropped with the
                        // oldest when the table is full.
                        if state.answered.len() >= 1_024 {
                            let oldest = state.answered.keys().min().copied();
                            oldest.map(|k| state.answered.remove(&k));
                        }
                        state.answered.insert(
                            wr,
                            Answered {
                                to,
                                peer: from_peer,
                                seq,
                                t3: at_ns,
                            },
                        );
                    }
                    Err(e) => {
                        // One answer that cannot go (its address pending, a full send queue)
                        // costs that answer, not the rest of the batch.
                        if answer_failed(state, stats, &e) {
                            return;
                        }
                    }
                }
            }
            Event::Reset { reason } => reset(state, stats, "responder", reason),
            Event::Sent { wr_id, ok, at_ns } => {
                let Some(answer) = state.answered.remove(&wr_id) else {
                    continue;
                };
                if !ok {
                    continue;
                }
                let held = at_ns.saturating_sub(answer.t3);
                let delay = Packet::answer(
                    Kind::Delay,
                    answer.seq,
                    held,
                    Mode::DelayFollows,
                    probing.epoch,
                );
                let wr = state.next_wr;
                state.next_wr += 1;
                let options = SendOptions {
                    traffic_class: state.local.traffic_class,
                    peer: answer.peer,
                    ..settings.send
                };
                if let Err(e) = state
                    .local
                    .responder
                    .send(answer.to, options, &delay.encode(), wr)
                {
                    if answer_failed(state, stats, &e) {
                        return;
                    }
                    continue;
                }
                stats.lock().unwrap().answer_sent(state.index, held);
            }
        }
    }
}

/// Counts an answer that could not be sent; true when the device is gone (stop serving it).
fn answer_failed(state: &mut PortState, stats: &Mutex<Stats>, error: &TransportError) -> bool {
    match error {
        TransportError::Gone => {
            fail(state, stats, error);
            true
        }
        TransportError::AddressPending => {
            stats
                .lock()
                .unwrap()
                .dropped(&state.local.port, "address_pending");
            false
        }
        _ => {
            fail(state, stats, error);
            false
        }
    }
}

/// The prober side: matches answers to probes in flight and records their round trips.
fn collect(
    state: &mut PortState,
    stats: &Mutex<Stats>,
    probing: &mut Probing,
    events: &mut Vec<Event>,
) {
    events.clear();
    if !state.ready[1] {
        return;
    }
    if let Err(e) = state.local.prober.poll(events, Duration::ZERO) {
        return fail(state, stats, &e);
    }
    let clock = state.local.prober.clock();
    for event in events.drain(..) {
        let seq = match event {
            Event::Sent { wr_id, ok, at_ns } => {
                if let Some(pending) = state.pending.get_mut(&wr_id) {
                    if ok {
                        pending.t2 = Some(at_ns);
                    }
                }
                wr_id
            }
            Event::Reset { reason } => {
                reset(state, stats, "prober", reason);
                continue;
            }
            Event::Received {
                payload,
                at_ns,
                source,
            } => match Packet::decode(&payload) {
                Ok(packet) => {
                    let Some(pending) = state.pending.get_mut(&packet.seq) else {
                        // Late (already counted lost), or not ours.
                        stats
                            .lock()
                            .unwrap()
                            .dropped(&state.local.port, "unexpected");
                        continue;
                    };
                    if !source.is(&pending.to) {
                        // Someone else answering for the target: it would hide loss or invent
                        // round trips.
                        stats
                            .lock()
                            .unwrap()
                            .dropped(&state.local.port, "wrong_source");
                        continue;
                    }
                    probing
                        .restarts
                        .heard_answer(pending.to.gid, packet.epoch, pending.sent);
                    match packet.kind {
                        Kind::Ack => {
                            pending.t5 = Some(at_ns);
                            // The responder says whether its delay rides here or follows; a
                            // build that does not say works as this one's clock does.
                            let in_ack = match packet.mode {
                                Mode::DelayInAck => true,
                                Mode::DelayFollows => false,
                                Mode::Unsaid => clock == Clock::Software,
                            };
                            if in_ack {
                                pending.delay = Some(packet.responder_delay_ns);
                            }
                        }
                        Kind::Delay => pending.delay = Some(packet.responder_delay_ns),
                        Kind::Probe => {
                            stats
                                .lock()
                                .unwrap()
                                .dropped(&state.local.port, "not_an_answer");
                        }
                    }
                    packet.seq
                }
                Err(e) => {
                    stats.lock().unwrap().dropped(&state.local.port, e.reason());
                    continue;
                }
            },
        };
        let Some(pending) = state.pending.get(&seq) else {
            continue;
        };
        let times = match (clock, pending.t2, pending.t5, pending.delay) {
            (Clock::Software, _, Some(t5), Some(delay)) => Some((
                ProberTimes::posted(pending.t1, t5, state.local.prober.now_ns()),
                delay,
            )),
            // Device clock: T1 and T6 are the host's, so only the NIC's span is measured.
            (Clock::Hardware, Some(t2), Some(t5), Some(delay)) => Some((
                ProberTimes {
                    t1: t2,
                    t2,
                    t5,
                    t6: t5,
                },
                delay,
            )),
            _ => None,
        };
        if let Some((times, delay)) = times {
            let pending = state.pending.remove(&seq).unwrap();
            if let Some(ticket) = pending.ping {
                ticket.record(ping::Outcome::of(round_trip(times, delay)));
                continue;
            }
            let mut stats = stats.lock().unwrap();
            match round_trip(times, delay) {
                Ok(rtt) => stats.answered(&pending.path, rtt),
                Err(e) => stats.bad(&pending.path, e.reason()),
            }
        }
    }
}

/// Probes past the timeout (by the host's clock: a NIC's may restart under them) are lost,
/// or held for a silent peer, or a restarting peer's.
fn expire(state: &mut PortState, settings: &Settings, stats: &Mutex<Stats>, probing: &mut Probing) {
    let now = Instant::now();
    let expired: Vec<u64> = state
        .pending
        .iter()
        .filter(|(_, p)| now.saturating_duration_since(p.sent) > settings.timeout)
        .map(|(seq, _)| *seq)
        .collect();
    if expired.is_empty() {
        return;
    }
    let now_ns = state.local.prober.now_ns();
    let mut stats = stats.lock().unwrap();
    for seq in expired {
        let pending = state.pending.remove(&seq).unwrap();
        if let Some(ticket) = pending.ping {
            // The asker is told at once: a ping is not held for a silent peer.
            ticket.record(ping::Outcome::Lost);
            continue;
        }
        let fate = probing
            .restarts
            .expired(pending.path, pending.to, pending.sent, pending.epoch);
        match fate {
            Some((path, Fate::Lost)) => stats.lost(&path, now_ns),
            Some((path, Fate::Restart)) => stats.restart_unanswered(&path),
            None => {}
        }
    }
}

/// Sends the on-demand probes that are due, from the same prober endpoints as the rounds (so
/// they are matched and timed the same way); forgets the sessions with nothing more to send.
fn send_pings(
    states: &mut [PortState],
    sessions: &mut Vec<ping::Session>,
    next_seq: &mut u64,
    settings: &Settings,
    stats: &Mutex<Stats>,
    probing: &Probing,
) {
    let now = Instant::now();
    for session in sessions.iter_mut() {
        while let Some(due) = session.due(now, settings.targets.flow_labels) {
            let Some(state) = states.get_mut(session.from).filter(|s| !s.gone) else {
                due.ticket.record(ping::Outcome::NotSent {
                    reason: TransportError::Gone.reason().to_string(),
                });
                continue;
            };
            let seq = *next_seq;
            *next_seq += 1;
            let options = SendOptions {
                flow_label: due.flow_label,
                traffic_class: state.local.traffic_class,
                peer: session.listed,
                ..settings.send
            };
            // Where the target answers now: a restarted peer's own packets may have said.
            let to = probing.restarts.address(session.to.address);
            let answers_on = state.local.responder.address().qpn;
            let payload = Packet::probe_from(seq, answers_on, probing.epoch).encode();
            match state.local.prober.send(to, options, &payload, seq) {
                Ok(t1) => {
                    state.pending.insert(
                        seq,
                        Pending {
                            path: session.path.clone(),
                            to,
                            sent: Instant::now(),
                            epoch: probing.restarts.epoch(&to),
                            t1,
                            t2: None,
                            t5: None,
                            delay: None,
                            ping: Some(due.ticket),
                        },
                    );
                }
                Err(e) => {
                    due.ticket.record(ping::Outcome::NotSent {
                        reason: e.reason().to_string(),
                    });
                    fail(state, stats, &e);
                }
            }
        }
    }
    sessions.retain(|s| !s.done());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::memory::MemoryFabric;

    const QKEY: u32 = 0x1111_1111;

    fn gid(n: u8) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12] = 10;
        gid[15] = n;
        gid
    }

    /// Host `host`'s `ports` ports on `fabric`, device n on rail n, answering at GID (host,n),
    /// its endpoints the demo's model.
    fn host(fabric: &MemoryFabric, host: u8, ports: u8) -> Vec<LocalPort> {
        host_with(host, ports, |gid, qpn| fabric.endpoint(gid, qpn, QKEY))
    }

    /// [`host`], each endpoint made by `endpoint(gid, qpn)` (responders on QPN 100, probers on
    /// 200).
    fn host_with(
        host: u8,
        ports: u8,
        endpoint: impl Fn([u8; 16], u32) -> crate::probe::memory::MemoryEndpoint,
    ) -> Vec<LocalPort> {
        (0..ports)
            .map(|n| LocalPort {
                port: Port {
                    host: format!("host-{host}"),
                    device: format!("rxe{n}"),
                    port: 1,
                    rail: u32::from(n),
                    leaf: None,
                },
                netdev: format!("veth{n}"),
                traffic_class: 104,
                responder: Box::new(endpoint(gid(host * 16 + n), 100)),
                prober: Box::new(endpoint(gid(host * 16 + n), 200)),
            })
            .collect()
    }

    fn fast() -> Settings {
        Settings {
            targets: targets::Settings {
                min_round: Duration::from_millis(20),
                ..targets::Settings::default()
            },
            timeout: Duration::from_millis(100),
            // A peer silent as a whole is lost soon (tests of restarts set their own).
            restart_grace: Duration::from_millis(300),
            ..Settings::default()
        }
    }

    /// Waits until `done` holds for the agent's stats, for at most 10 s.
    fn until(agent: &Agent, done: impl Fn(&Stats) -> bool) -> Stats {
        crate::testutil::poll_until(Duration::from_secs(10), || agent.stats(), done)
    }

    fn answered(stats: &Stats) -> u64 {
        stats
            .ports
            .iter()
            .map(|p| p.answered.iter().sum::<u64>())
            .sum()
    }

    #[test]
    fn a_hosts_ports_probe_each_other_and_measure_the_fabrics_delay() {
        // 2 ms one way through the fabric.
        let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(2_000_000)));
        let agent = Agent::spawn(host(&fabric, 1, 4), fast()).unwrap();
        let stats = until(&agent, |s| s.ports.iter().all(|p| p.answered[0] >= 6));
        for port in &stats.ports {
            assert!(port.answered[0] >= 6, "{port:?}");
            assert_eq!(port.lost, [0; 3], "{port:?}");
            assert_eq!(port.clock, Clock::Software);
            let mean = port.network_rtt.sum / port.network_rtt.count as f64;
            // Two 2 ms legs: the loop's own lag is the responder's delay, taken out, but for
            // the instant between stamping that delay and posting the answer.
            assert!((0.004..0.0042).contains(&mean), "mean RTT {mean} s");
            // Each responder held its probes a little (the loop's own lag, its polls 2 ms apart
            // on an idle machine, tens of ms on a loaded one), and says so.
            let held = port.answer_delays.mean_seconds(Instant::now());
            assert!(held > 0.0 && held < 0.05, "answer delay {held} s");
        }
        // Every port probed each of the three others.
        let paths: std::collections::HashSet<(usize, String)> = stats
            .all_targets()
            .map(|(k, _)| (k.from, k.to.device.clone()))
            .collect();
        assert_eq!(paths.len(), 12, "{paths:?}");
        assert_eq!(stats.losing_targets().count(), 0);
    }

    /// A responder that sees its probes 20 ms after they arrived (a busy CPU polling late)
    /// says so in its answer delay; the probers' network RTT stays the fabric's, and nothing
    /// is lost.
    #[test]
    fn a_slow_responder_raises_its_answer_delay_not_the_network_rtt() {
        let slow = gid(16 + 2);
        let fabric =
            MemoryFabric::new(Box::new(|_, _, _| Some(100_000))).with_lag(Box::new(move |to| {
                if to.gid == slow && to.qpn == 100 {
                    20_000_000
                } else {
                    0
                }
            }));
        let agent = Agent::spawn(host(&fabric, 1, 3), fast()).unwrap();
        let stats = until(&agent, |s| s.ports.iter().all(|p| p.answered[0] >= 6));
        let now = Instant::now();
        for (n, port) in stats.ports.iter().enumerate() {
            assert!(port.answered[0] >= 6, "{port:?}");
            assert_eq!(port.lost, [0; 3], "{port:?}");
            let mean = port.network_rtt.sum / port.network_rtt.count as f64;
            assert!(
                (0.0002..0.0003).contains(&mean),
                "port {n}: mean RTT {mean} s"
            );
            let held = port.answer_delays.mean_seconds(now);
            if n == 2 {
                assert!((0.02..0.025).contains(&held), "answer delay {held} s");
            } else {
                assert!(held < 0.01, "port {n}: answer delay {held} s");
            }
        }
    }

    #[test]
    fn a_silent_port_loses_only_the_paths_to_it() {
        // Nothing reaches rxe3's responder.
        let silent = gid(16 + 3);
        let fabric = MemoryFabric::new(Box::new(move |_, to, _| {
            (!(to.gid == silent && to.qpn == 100)).then_some(100_000)
        }));
        let agent = Agent::spawn(host(&fabric, 1, 4), fast()).unwrap();
        let stats = until(&agent, |s| {
            s.losing_targets().count() == 3 && answered(s) > 30
        });
        let losing: Vec<(usize, &str)> = stats
            .losing_targets()
            .map(|(k, _)| (k.from, k.to.device.as_str()))
            .collect();
        assert_eq!(losing.len(), 3, "{losing:?}");
        assert!(losing.iter().all(|(_, to)| *to == "rxe3"), "{losing:?}");
        // rxe3's own probes to the others are answered.
        assert!(stats.ports[3].answered[0] > 0 && stats.ports[3].lost[0] == 0);
    }

    #[test]
    fn probes_reach_peers_of_other_hosts_on_the_same_and_other_rails() {
        let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(50_000)));
        let far = Agent::spawn(host(&fabric, 2, 2), fast()).unwrap();
        let near = Agent::spawn(host(&fabric, 1, 2), fast()).unwrap();
        near.set_peers(far.addresses());
        let stats = until(&near, |s| {
            s.ports.iter().all(|p| p.answered.iter().all(|n| *n > 2))
        });
        for port in &stats.ports {
            assert!(port.answered.iter().all(|n| *n > 2), "{port:?}");
        }
        // The far host answered without probing back (it knows no peers).
        assert_eq!(far.stats().ports[0].sent[1], 0);
    }

    #[test]
    fn a_removed_device_stops_its_own_probes_and_nothing_else() {
        let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(100_000)));
        let agent = Agent::spawn(host(&fabric, 1, 3), fast()).unwrap();
        until(&agent, |s| answered(s) > 10);
        fabric.remove(gid(16 + 2));
        let before = until(&agent, |s| s.ports[2].gone);
        assert!(before.ports[2].gone);
        assert!(before.ports[2].errors.contains_key("gone"));
        let after = until(&agent, |s| {
            s.ports[0].answered[0] > before.ports[0].answered[0] + 5
        });
        assert!(after.ports[0].answered[0] > before.ports[0].answered[0] + 5);
        assert_eq!(after.ports[2].sent, before.ports[2].sent);
        drop(agent);
    }

    /// A device that the responder's endpoint finds gone first: the prober's endpoint is closed
    /// too, at once, not left holding the device (a removal waits for every user).
    #[test]
    fn a_port_found_gone_by_one_endpoint_closes_both() {
        let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(100_000)));
        let agent = Agent::spawn(host(&fabric, 1, 2), fast()).unwrap();
        until(&agent, |s| answered(s) > 4);
        fabric.remove_endpoint(gid(16 + 1), 100);
        let stats = until(&agent, |s| s.ports[1].gone);
        assert!(stats.ports[1].gone);
        assert!(fabric.closed(gid(16 + 1), 100) && fabric.closed(gid(16 + 1), 200));
        assert!(!fabric.closed(gid(16), 100) && !fabric.closed(gid(16), 200));
    }

    /// A responder whose queue pair was rebuilt (a verbs endpoint does so when a packet put it
    /// in the error state) answers again at its new QPN: the loop counts the rebuild, publishes
    /// the new address and probes it from the next round on.
    #[test]
    fn a_rebuilt_responder_is_probed_again_at_its_new_qpn() {
        let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(100_000)));
        let agent = Agent::spawn(host(&fabric, 1, 3), fast()).unwrap();
        let to_rxe2 = |s: &Stats| -> u64 {
            s.all_targets()
                .filter(|(k, _)| k.to.device == "rxe2")
                .map(|(_, t)| t.answered)
                .sum()
        };
        let before = until(&agent, |s| to_rxe2(s) > 6);
        fabric.reset(gid(16 + 2), 100, 101);
        let after = until(&agent, |s| {
            s.ports[2].address.qpn == 101 && to_rxe2(s) > to_rxe2(&before) + 10
        });
        assert_eq!(after.ports[2].address.qpn, 101, "{:?}", after.ports[2]);
        assert_eq!(
            after.ports[2].resets.get(&("responder", "qp_error")),
            Some(&1)
        );
        assert!(to_rxe2(&after) > to_rxe2(&before) + 10);
        assert!(agent
            .addresses()
            .iter()
            .any(|p| p.port.device == "rxe2" && p.address.qpn == 101));
        // Only what was in flight to the old QPN, and what the rest of that round sent to it,
        // was lost: a few rounds' worth at most.
        let lost: u64 = after.ports.iter().map(|p| p.lost.iter().sum::<u64>()).sum();
        assert!(lost <= 8, "{lost} lost");
    }

    /// An answer from anyone but the target (another QP, another GID) counts for nothing: the
    /// probe to that target is lost, and the answer dropped as `wrong_source`.
    #[test]
    fn answers_from_anyone_but_the_target_do_not_count() {
        let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(50_000)));
        let local = host(&fabric, 1, 1);
        // The target receives probes on QPN 300; whoever answers does so from QPN 301.
        let target_gid = gid(9 * 16);
        let mut target = fabric.endpoint(target_gid, 300, QKEY);
        let mut forger = fabric.endpoint(target_gid, 301, QKEY);
        let stop = Arc::new(AtomicBool::new(false));
        let relay = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut events = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    events.clear();
                    let _ = target.poll(&mut events, Duration::from_millis(5));
                    for event in events.drain(..) {
                        if let Event::Received {
                            payload, source, ..
                        } = event
                        {
                            let Ok(probe) = Packet::decode(&payload) else {
                                continue;
                            };
                            let ack = Packet::answer(Kind::Ack, probe.seq, 0, Mode::DelayInAck, 0);
                            let to = source.address(QKEY);
                            let _ = forger.send(to, SendOptions::default(), &ack.encode(), 1);
                        }
                    }
                }
            })
        };
        let agent = Agent::spawn(local, fast()).unwrap();
        agent.set_peers(vec![Peer {
            port: Port {
                host: "host-9".into(),
                device: "rxe0".into(),
                port: 1,
                rail: 0,
                leaf: None,
            },
            address: Address {
                gid: target_gid,
                qpn: 300,
                qkey: QKEY,
                lid: None,
            },
        }]);
        let stats = until(&agent, |s| {
            s.ports[0].dropped.get("wrong_source").copied().unwrap_or(0) >= 5
                && s.ports[0].lost.iter().sum::<u64>() >= 5
        });
        stop.store(true, Ordering::Relaxed);
        relay.join().unwrap();
        assert!(
            stats.ports[0]
                .dropped
                .get("wrong_source")
                .copied()
                .unwrap_or(0)
                >= 5
        );
        let to_target: Vec<_> = stats
            .all_targets()
            .filter(|(k, _)| k.to.host == "host-9")
            .collect();
        assert!(!to_target.is_empty());
        for (_, counts) in to_target {
            assert_eq!(counts.answered, 0, "{counts:?}");
            assert!(counts.lost > 0, "{counts:?}");
        }
    }

    /// Every pairing of prober and responder clocks measures right, each responder polling
    /// 200 ms late (far above what a loaded machine adds to the loop's own polls, so the
    /// figures tell the cases apart on a busy test machine too): no probe is lost (a prober with NIC timestamps no longer waits for a
    /// `Delay` a software responder never sends); a responder with NIC timestamps has its 20 ms
    /// taken out of the network RTT whatever the prober's clock (a software prober no longer
    /// takes the `Ack`'s 0 for the delay, which put all 200 ms into the RTT); a software
    /// responder cannot know how long a probe waited in its queue, so its lateness is in the
    /// RTT, as on real verbs.
    #[test]
    fn every_pairing_of_prober_and_responder_clocks_measures_right() {
        let pairings = [
            (Clock::Software, Clock::Software),
            (Clock::Software, Clock::Hardware),
            (Clock::Hardware, Clock::Software),
            (Clock::Hardware, Clock::Hardware),
        ];
        for (host_n, (prober_clock, responder_clock)) in pairings.into_iter().enumerate() {
            let fabric = MemoryFabric::new(Box::new(|_, _, _| Some(100_000)))
                .with_lag(Box::new(|to| if to.qpn == 100 { 200_000_000 } else { 0 }));
            let host_n = host_n as u8 + 1;
            let ports = host_with(host_n, 2, |gid, qpn| {
                let clock = if qpn == 100 {
                    responder_clock
                } else {
                    prober_clock
                };
                fabric.endpoint_with_clock(gid, qpn, QKEY, clock)
            });
            let settings = Settings {
                timeout: Duration::from_secs(2),
                ..fast()
            };
            let agent = Agent::spawn(ports, settings).unwrap();
            let stats = until(&agent, |s| s.ports.iter().all(|p| p.answered[0] >= 4));
            let pairing = format!("{prober_clock:?} prober, {responder_clock:?} responder");
            for port in &stats.ports {
                assert!(port.answered[0] >= 4, "{pairing}: {port:?}");
                assert_eq!(port.lost, [0; 3], "{pairing}: {port:?}");
                let mean = port.network_rtt.sum / port.network_rtt.count as f64;
                match responder_clock {
                    Clock::Hardware => {
                        assert!((0.0002..0.1).contains(&mean), "{pairing}: RTT {mean} s");
                        let held = port.answer_delays.mean_seconds(Instant::now());
                        assert!((0.2..1.0).contains(&held), "{pairing}: held {held} s");
                    }
                    Clock::Software => {
                        assert!((0.2..1.0).contains(&mean), "{pairing}: RTT {mean} s");
                    }
                }
            }
        }
    }
}
