//! Localization on a model of a fleet: precision, recall and time to verdict of the vote
//! (`src/probe/vote.rs`), critical pages on noise alone over an hour, and the vote's time and
//! memory a round at 10 000 hosts.
//!
//! `cargo bench --bench localize --no-run`, then run the binary it names. The fabric:
//! BENCH_HOSTS hosts (default 1 000) of 8 NICs, rail-optimized (NIC n on a leaf of rail n, 32
//! hosts a leaf), every leaf's uplinks spread over BENCH_SPINES spines (default 4) by ECMP, each
//! frame's member a hash of its path, direction and flow label. Every port probes what
//! `probe::targets::plan` plans at the defaults (7 intra-host paths, a rotating window of 8 on
//! its rail, 2 cross-rail ports, 1 s rounds; checked against `plan` itself at the start).
//!
//! Each trial (BENCH_TRIALS, default 100): background loss per probe drawn log-uniform in
//! [1e-5, 1e-3]; 0 to 3 concurrent faults drawn from a failing NIC (30-100 % of its frames each
//! way), an optic (1-20 %), a leaf port (5-100 % one way), a leaf that blackholes one ECMP
//! member, an uplink that drops 2-10 %, a busy host (answers 20 ms late, 20 % of its probes
//! time out) and a host that is down; a rolling restart of a tenth of the agents (each silent
//! 10-40 s, then restarted within the window; each says it is leaving first, as `serve` does on
//! SIGTERM, and a host down does not). A silent host is seen silent from the first scrape that
//! fails. The faults start 120-150 s in; the vote runs
//! on what every 15 s scrape brings over the last 120 s, and a verdict reaches the alerts as
//! the shipped deployment carries it (the localizer's 5 s rounds, Prometheus scraping it every
//! 5 s, the verdict alerts evaluated every 5 s, `for: 0s`; each clock's phase random per
//! trial). Its verdicts at 360 s are scored: right
//! when they name the injected component (a NIC, optic or leaf port fault: `nic` on that port;
//! a blackhole or lossy uplink: `leaf` or `uplink` on that leaf; busy: `responder` on that
//! host; down: `host`). Then an hour of healthy fabric at 1e-3 background with the rolling
//! restart (BENCH_HOUR=0 skips it): critical verdicts, and pages (with `for: 0s` each critical
//! verdict pages). Then one window at BENCH_SCALE_HOSTS (default 10 000) with 3 faults:
//! the vote's time on one core and the memory it holds.
//!
//! BENCH_SEED=N sets the seed (printed; by default from the clock). Prints figures; exits
//! non-zero only when the model's plan differs from `plan`'s. See BENCHMARKS.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use rdma_fabric_exporter::probe::localize::Kind;
use rdma_fabric_exporter::probe::targets::{self, PathKind, Port, Settings};
use rdma_fabric_exporter::probe::vote::{self, Outcome, PortState, Subject, Topology, Window};

mod common;
use common::proc::{env_number, load_average};

/// Counts the heap in use, and its peak since the last reset.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the system allocator's contract, passed through.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NICS: usize = 8;
const HOSTS_PER_LEAF: usize = 32;
const WINDOW_S: usize = 120;
const SCRAPE_S: usize = 15;
const BUCKETS: usize = WINDOW_S / SCRAPE_S;
/// Faults start in [FAULT_FROM, FAULT_FROM + 30) s; the trial ends at TRIAL_S.
const FAULT_FROM: usize = 120;
const TRIAL_S: usize = 360;
const BUSY_DELAY_S: f64 = 0.02;
/// The shipped path from a scrape to a page: a localizer round every 5 s, Prometheus scraping
/// it every 5 s, the verdict alerts evaluated every 5 s, `for: 0s` (the vote's own test against
/// the background is the guard: the noise hour counts every critical verdict as a page).
const LOCALIZER_S: f64 = 5.0;
const LOCALIZER_SCRAPE_S: f64 = 5.0;
const VERDICT_EVAL_S: f64 = 5.0;
const FOR_S: f64 = 0.0;

/// The first tick of a clock of `period` and `phase` at or after `t`.
fn next_tick(t: f64, period: f64, phase: f64) -> f64 {
    phase + ((t - phase) / period).ceil() * period
}

/// The phases of the localizer's rounds, of its scrape and of the alerts' evaluation, random
/// per trial as in a cluster.
struct Pipeline([f64; 3]);

impl Pipeline {
    fn draw(random: &mut Random) -> Pipeline {
        Pipeline([
            random.unit() * LOCALIZER_S,
            random.unit() * LOCALIZER_SCRAPE_S,
            random.unit() * VERDICT_EVAL_S,
        ])
    }

    /// When the localizer first serves what Prometheus scraped at `t`.
    fn served(&self, t: f64) -> f64 {
        next_tick(t, LOCALIZER_S, self.0[0])
    }

    /// When a verdict the agents' scrape at `t` first shows fires (it stands since, as the
    /// trials check; `for:` adds its wait).
    fn paged(&self, t: f64) -> f64 {
        let scraped = next_tick(self.served(t), LOCALIZER_SCRAPE_S, self.0[1]);
        next_tick(scraped + FOR_S, VERDICT_EVAL_S, self.0[2])
    }
}
const BUSY_TIMEOUTS: f64 = 0.2;
/// A busy responder's mean delay crosses 5 ms within this long.
const BUSY_SEEN_AFTER_S: usize = 5;

fn main() -> ExitCode {
    common::exit_code("localize", run())
}

/// xorshift64*: small, seedable, good enough for a model.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Probes until the next one lost at rate `p` (geometric).
    fn gap(&mut self, p: f64) -> u64 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        (u.ln() / (1.0 - p).ln()).floor() as u64
    }
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The rail-optimized fabric and its probe plan.
struct Fabric {
    hosts: usize,
    spines: u64,
    leaves_per_rail: usize,
    /// Each port's window offset, as `targets::plan` computes it.
    offset: Vec<u64>,
    topology: Topology,
}

impl Fabric {
    fn new(hosts: usize, spines: u64) -> Fabric {
        let leaves_per_rail = hosts.div_ceil(HOSTS_PER_LEAF);
        let ports = hosts * NICS;
        let host_of = (0..ports).map(|p| (p / NICS) as u32).collect();
        let leaf_of = (0..ports)
            .map(|p| Some(((p % NICS) * leaves_per_rail + (p / NICS) / HOSTS_PER_LEAF) as u32))
            .collect();
        let offset = (0..ports)
            .map(|p| {
                let mut hasher = rustc_hash::FxHasher::default();
                port(p / NICS, p % NICS).hash(&mut hasher);
                hasher.finish()
            })
            .collect();
        Fabric {
            hosts,
            spines,
            leaves_per_rail,
            offset,
            topology: Topology::new(host_of, leaf_of),
        }
    }

    fn leaf(&self, p: usize) -> usize {
        self.topology.leaf_of(p as u32).unwrap() as usize
    }

    /// Port `p`'s targets in `round`, as `plan` orders them: (target, kind, flow label).
    fn targets(&self, p: usize, round: u64, out: &mut Vec<(usize, PathKind, u32)>) {
        out.clear();
        let (h, n) = (p / NICS, p % NICS);
        let label = |i: usize| 1 + ((round + (n * 17 + i) as u64) % 8) as u32;
        for other in (0..NICS).filter(|o| *o != n) {
            out.push((h * NICS + other, PathKind::Host, label(out.len())));
        }
        let others = self.hosts - 1;
        let skip = |j: usize| if j < h { j } else { j + 1 };
        let window = |all: usize, size: usize| {
            let start =
                (self.offset[p] % all as u64 + (round * size as u64) % all as u64) % all as u64;
            (0..size.min(all)).map(move |i| ((start as usize) + i) % all)
        };
        if others == 0 {
            return;
        }
        for j in window(others, 8) {
            out.push((skip(j) * NICS + n, PathKind::Rail, label(out.len())));
        }
        for j in window(others * (NICS - 1), 2) {
            let (host, d) = (skip(j / (NICS - 1)), j % (NICS - 1));
            let device = if d < n { d } else { d + 1 };
            out.push((host * NICS + device, PathKind::CrossRail, label(out.len())));
        }
    }

    /// The ECMP member a frame from `a` to `b` takes.
    fn member(&self, a: usize, b: usize, label: u32, back: bool) -> u64 {
        mix(((a as u64) << 34) ^ ((b as u64) << 4) ^ ((label as u64) << 1) ^ back as u64)
            % self.spines
    }
}

fn port(h: usize, n: usize) -> Port {
    Port {
        host: format!("gpu-{h:05}"),
        device: format!("mlx5_{n}"),
        port: 1,
        rail: n as u32,
        leaf: None,
    }
}

/// The model's plan is `targets::plan`'s, target for target, on a small fabric.
fn check_plan() -> anyhow::Result<()> {
    let hosts = 40;
    let fabric = Fabric::new(hosts, 4);
    let all: Vec<Port> = (0..hosts * NICS)
        .map(|p| port(p / NICS, p % NICS))
        .collect();
    let mut mine = Vec::new();
    for h in [0, 7, 39] {
        let local: Vec<Port> = all[h * NICS..(h + 1) * NICS].to_vec();
        for round in [0, 1, 5, 123] {
            let planned = targets::plan(&local, &all, round, &Settings::default());
            let mut theirs: Vec<(usize, usize, PathKind, u32)> = planned
                .iter()
                .map(|t| {
                    let to = all.iter().position(|p| p == t.to).unwrap();
                    (h * NICS + t.from, to, t.kind, t.flow_label)
                })
                .collect();
            let mut ours = Vec::new();
            for n in 0..NICS {
                fabric.targets(h * NICS + n, round, &mut mine);
                ours.extend(
                    mine.iter()
                        .map(|(to, kind, label)| (h * NICS + n, *to, *kind, *label)),
                );
            }
            theirs.sort_by_key(|t| (t.0, t.1, t.3));
            ours.sort_by_key(|t| (t.0, t.1, t.3));
            if theirs != ours {
                bail!("the model's plan differs from targets::plan for host {h}, round {round}");
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum FaultKind {
    Nic,
    Optic,
    LeafPort,
    Blackhole,
    Uplink,
    Busy,
    Down,
}

const FAULT_KINDS: [FaultKind; 7] = [
    FaultKind::Nic,
    FaultKind::Optic,
    FaultKind::LeafPort,
    FaultKind::Blackhole,
    FaultKind::Uplink,
    FaultKind::Busy,
    FaultKind::Down,
];

impl FaultKind {
    fn name(self) -> &'static str {
        match self {
            FaultKind::Nic => "NIC",
            FaultKind::Optic => "optic",
            FaultKind::LeafPort => "leaf port",
            FaultKind::Blackhole => "leaf blackhole",
            FaultKind::Uplink => "uplink loss",
            FaultKind::Busy => "host busy",
            FaultKind::Down => "host down",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    kind: FaultKind,
    /// The port (NIC, optic, leaf port), host (busy, down) or leaf (blackhole, uplink).
    at: usize,
    /// Loss per frame (NIC, optic, leaf port, uplink).
    loss: f64,
    /// The ECMP member (blackhole, uplink).
    member: u64,
    start: usize,
}

impl Fault {
    /// Whether `found` names this fault's component.
    fn named_by(&self, fabric: &Fabric, found: &vote::Found) -> bool {
        match (self.kind, found.kind, found.subject) {
            (
                FaultKind::Nic | FaultKind::Optic | FaultKind::LeafPort,
                Kind::Nic,
                Subject::Port(p),
            ) => p as usize == self.at,
            (
                FaultKind::Blackhole | FaultKind::Uplink,
                Kind::Leaf | Kind::Uplink,
                Subject::Leaf(l),
            ) => l as usize == self.at,
            (FaultKind::Busy, Kind::Responder, Subject::Port(p)) => {
                fabric.topology.host_of(p) as usize == self.at
            }
            (FaultKind::Down, Kind::Host, Subject::Host(h)) => h as usize == self.at,
            _ => false,
        }
    }

    /// Whether the verdict's kind is the one expected (leaf for a blackhole, uplink for loss).
    fn kind_right(&self, found: &vote::Found) -> bool {
        match self.kind {
            FaultKind::Blackhole => found.kind == Kind::Leaf,
            FaultKind::Uplink => found.kind == Kind::Uplink,
            _ => true,
        }
    }
}

/// A restart: the host's agent silent from `at` for `down` seconds.
#[derive(Debug, Clone, Copy)]
struct Restart {
    host: usize,
    at: usize,
    down: usize,
}

/// One run of the model: faults, restarts, background, and the windows so far.
struct Run<'f> {
    fabric: &'f Fabric,
    faults: Vec<Fault>,
    restarts: Vec<Restart>,
    background: f64,
    random: Random,
    until_background: u64,
    buckets: Vec<Window>,
    scratch: Vec<(usize, PathKind, u32)>,
}

impl<'f> Run<'f> {
    fn new(
        fabric: &'f Fabric,
        faults: Vec<Fault>,
        restarts: Vec<Restart>,
        background: f64,
        seed: u64,
    ) -> Run<'f> {
        let mut random = Random(seed | 1);
        let until_background = random.gap(background);
        Run {
            fabric,
            faults,
            restarts,
            background,
            random,
            until_background,
            buckets: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// How long the localizer has seen `host` silent at scrape `t`, and whether its agent said
    /// it was leaving: a restart does, a host that goes down does not. Its series stay live
    /// until the first scrape that fails, so the silence counts from there.
    fn silence(&self, host: usize, t: usize) -> Option<(usize, bool)> {
        let since = |at: usize| t.checked_sub(at.div_ceil(SCRAPE_S) * SCRAPE_S);
        let fault = self
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::Down && f.at == host && t >= f.start)
            .filter_map(|f| Some((since(f.start)?, false)));
        let restart = self
            .restarts
            .iter()
            .filter(|r| r.host == host && t >= r.at && t < r.at + r.down)
            .filter_map(|r| Some((since(r.at)?, true)));
        fault.chain(restart).max()
    }

    /// Every port's state at second `t` (a host's ports share it).
    fn states(&self, t: usize) -> Vec<PortState> {
        (0..self.fabric.hosts)
            .flat_map(|h| std::iter::repeat_n(self.state(h, t), NICS))
            .collect()
    }

    fn state(&self, host: usize, t: usize) -> PortState {
        if let Some((seconds, left)) = self.silence(host, t) {
            return PortState::Silent {
                seconds: seconds as f64,
                left,
            };
        }
        if self
            .restarts
            .iter()
            .any(|r| r.host == host && t >= r.at + r.down && t < r.at + r.down + WINDOW_S)
        {
            return PortState::Restarted;
        }
        if self
            .faults
            .iter()
            .any(|f| f.kind == FaultKind::Busy && f.at == host && t >= f.start + BUSY_SEEN_AFTER_S)
        {
            return PortState::Busy(BUSY_DELAY_S);
        }
        PortState::Live
    }

    /// The chance one round trip from `a` to `b` (flow label `label`) at second `t` is lost to a
    /// fault (not the background).
    fn fault_loss(&self, a: usize, b: usize, label: u32, t: usize) -> f64 {
        let fabric = self.fabric;
        let mut delivered = 1.0;
        let (la, lb) = (fabric.leaf(a), fabric.leaf(b));
        for f in &self.faults {
            if t < f.start {
                continue;
            }
            match f.kind {
                FaultKind::Nic | FaultKind::Optic => {
                    if a == f.at || b == f.at {
                        delivered *= (1.0 - f.loss) * (1.0 - f.loss);
                    }
                }
                FaultKind::LeafPort => {
                    if a == f.at || b == f.at {
                        delivered *= 1.0 - f.loss;
                    }
                }
                FaultKind::Blackhole => {
                    if la != lb && (la == f.at || lb == f.at) {
                        // The frame going up from the leaf: the probe from it, the answer to it.
                        let up = if la == f.at {
                            fabric.member(a, b, label, false)
                        } else {
                            fabric.member(b, a, label, true)
                        };
                        if up == f.member {
                            return 1.0;
                        }
                    }
                }
                FaultKind::Uplink => {
                    if la != lb && (la == f.at || lb == f.at) {
                        for back in [false, true] {
                            if fabric.member(a, b, label, back) == f.member {
                                delivered *= 1.0 - f.loss;
                            }
                        }
                    }
                }
                FaultKind::Busy => {
                    if b / NICS == f.at {
                        delivered *= 1.0 - BUSY_TIMEOUTS;
                    }
                }
                FaultKind::Down => {}
            }
        }
        1.0 - delivered
    }

    /// Seconds [from, to) of probing, into 15 s buckets (the last `BUCKETS` kept).
    fn probe(&mut self, from: usize, to: usize) {
        let fabric = self.fabric;
        let ports = fabric.hosts * NICS;
        for t in from..to {
            if t % SCRAPE_S == 0 {
                self.buckets.push(Window::new(&fabric.topology));
                if self.buckets.len() > BUCKETS {
                    self.buckets.remove(0);
                }
            }
            let mut silent = vec![false; fabric.hosts];
            for r in &self.restarts {
                if t >= r.at && t < r.at + r.down {
                    silent[r.host] = true;
                }
            }
            for f in &self.faults {
                if f.kind == FaultKind::Down && t >= f.start {
                    silent[f.at] = true;
                }
            }
            let mut targets = std::mem::take(&mut self.scratch);
            let mut bucket = self.buckets.pop().unwrap();
            for a in 0..ports {
                if silent[a / NICS] {
                    continue;
                }
                fabric.targets(a, t as u64, &mut targets);
                for &(b, _, label) in &targets {
                    let mut lost = silent[b / NICS];
                    if !lost && !self.faults.is_empty() {
                        let p = self.fault_loss(a, b, label, t);
                        lost = p > 0.0 && self.random.unit() < p;
                    }
                    if self.until_background == 0 {
                        lost = true;
                        self.until_background = self.random.gap(self.background);
                    } else {
                        self.until_background -= 1;
                    }
                    bucket.add(&fabric.topology, a as u32, b as u32, 1, u64::from(lost));
                }
            }
            self.buckets.push(bucket);
            self.scratch = targets;
        }
    }

    /// The window of the last scrape at second `t` (a bucket boundary), and the vote on it.
    fn vote(&self, t: usize) -> Outcome {
        let mut window = Window::new(&self.fabric.topology);
        for bucket in &self.buckets {
            window.merge(bucket);
        }
        let states = self.states(t);
        vote::vote(&self.fabric.topology, &states, &window)
    }
}

/// One verdict as scored: responders grouped by host.
fn scored(fabric: &Fabric, outcome: &Outcome) -> Vec<vote::Found> {
    let mut seen = BTreeSet::new();
    outcome
        .verdicts
        .iter()
        .filter(|v| match (v.kind, v.subject) {
            (Kind::Responder, Subject::Port(p)) => seen.insert(fabric.topology.host_of(p)),
            _ => true,
        })
        .cloned()
        .collect()
}

fn critical(v: &vote::Found) -> bool {
    v.kind != Kind::Responder
}

fn draw_faults(
    fabric: &Fabric,
    random: &mut Random,
    count: usize,
    busy_hosts: &BTreeSet<usize>,
) -> Vec<Fault> {
    let mut faults: Vec<Fault> = Vec::new();
    let mut hosts = BTreeSet::new();
    let mut leaves = BTreeSet::new();
    while faults.len() < count {
        let kind = FAULT_KINDS[random.below(FAULT_KINDS.len())];
        let port = random.below(fabric.hosts * NICS);
        let (host, leaf) = (port / NICS, fabric.leaf(port));
        let (at, loss) = match kind {
            FaultKind::Nic => (port, random.between(0.3, 1.0)),
            FaultKind::Optic => (port, random.between(0.01, 0.2)),
            FaultKind::LeafPort => (port, random.between(0.05, 1.0)),
            FaultKind::Blackhole => (leaf, 1.0),
            FaultKind::Uplink => (leaf, random.between(0.02, 0.1)),
            FaultKind::Busy | FaultKind::Down => (host, 1.0),
        };
        // One fault a host and a leaf, none on a host that restarts: each fault has one answer.
        if busy_hosts.contains(&host) || !hosts.insert(host) || !leaves.insert(leaf) {
            continue;
        }
        faults.push(Fault {
            kind,
            at,
            loss,
            member: random.below(fabric.spines as usize) as u64,
            start: FAULT_FROM + random.below(30),
        });
    }
    faults
}

/// A tenth of the hosts restart, each at a time in [from, to), silent 10-40 s.
fn draw_restarts(fabric: &Fabric, random: &mut Random, from: usize, to: usize) -> Vec<Restart> {
    let mut hosts: Vec<usize> = (0..fabric.hosts).collect();
    for i in (1..hosts.len()).rev() {
        hosts.swap(i, random.below(i + 1));
    }
    hosts
        .into_iter()
        .take(fabric.hosts / 10)
        .map(|host| Restart {
            host,
            at: from + random.below(to - from),
            down: 10 + random.below(31),
        })
        .collect()
}

/// One fault kind's figures.
#[derive(Default)]
struct KindTally {
    injected: usize,
    named: usize,
    kind_right: usize,
    /// Seconds from the fault to the localizer serving its first verdict, and to its page.
    to_verdict: Vec<f64>,
    to_page: Vec<f64>,
}

#[derive(Default)]
struct Tallies {
    verdicts: usize,
    right: usize,
    faults: usize,
    found: usize,
    per_kind: BTreeMap<&'static str, KindTally>,
    wrong: Vec<String>,
    missed: Vec<String>,
}

fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn describe(fabric: &Fabric, v: &vote::Found) -> String {
    let what = match v.subject {
        Subject::Port(p) => format!(
            "port {} (host {} NIC {})",
            p,
            p as usize / NICS,
            p as usize % NICS
        ),
        Subject::Host(h) => format!("host {h}"),
        Subject::Leaf(l) => format!(
            "leaf {l} (rail {}, #{})",
            l as usize / fabric.leaves_per_rail,
            l as usize % fabric.leaves_per_rail
        ),
        Subject::Spine => "spine".into(),
    };
    format!(
        "{} {what}: {}/{} lost ({:.2e}) vs {:.2e}, confidence {:.3}",
        v.kind.as_str(),
        v.through.lost,
        v.through.sent,
        v.through.rate(),
        v.background,
        v.confidence
    )
}

fn trials(fabric: &Fabric, seed: u64, count: usize) -> Tallies {
    let mut random = Random(mix(seed) | 1);
    let mut tallies = Tallies::default();
    for trial in 0..count {
        let background = 10f64.powf(random.between(-5.0, -3.0));
        let restarts = draw_restarts(fabric, &mut random, 0, TRIAL_S);
        let restarting: BTreeSet<usize> = restarts.iter().map(|r| r.host).collect();
        let n = random.below(4);
        let faults = draw_faults(fabric, &mut random, n, &restarting);
        let pipeline = Pipeline::draw(&mut random);
        let mut run = Run::new(fabric, faults.clone(), restarts, background, random.next());
        run.probe(0, FAULT_FROM);
        // Per fault: when the localizer first served its verdict, and when it paged (the
        // verdict still standing at the scrapes `for:` spans).
        let mut named_at: Vec<Option<f64>> = vec![None; faults.len()];
        let mut paged_at: Vec<Option<f64>> = vec![None; faults.len()];
        let mut since: Vec<Option<usize>> = vec![None; faults.len()];
        let mut last = Outcome::default();
        for t in (FAULT_FROM + SCRAPE_S..=TRIAL_S).step_by(SCRAPE_S) {
            run.probe(t - SCRAPE_S, t);
            last = run.vote(t);
            for (i, f) in faults.iter().enumerate() {
                let now = last.verdicts.iter().any(|v| f.named_by(fabric, v));
                let start = f.start as f64;
                since[i] = if now { since[i].or(Some(t)) } else { None };
                if now && named_at[i].is_none() {
                    named_at[i] = Some(pipeline.served(t as f64) - start);
                }
                if let (Some(first), None) = (since[i], paged_at[i]) {
                    let page = pipeline.paged(first as f64);
                    // Fires only if no scrape before the page took the verdict away.
                    if page < (t + SCRAPE_S) as f64 {
                        paged_at[i] = Some(page - start);
                    }
                }
            }
        }
        let verdicts = scored(fabric, &last);
        tallies.verdicts += verdicts.len();
        for v in &verdicts {
            if faults.iter().any(|f| f.named_by(fabric, v)) {
                tallies.right += 1;
            } else {
                tallies.wrong.push(format!(
                    "trial {trial} (background {background:.1e}): {}",
                    describe(fabric, v)
                ));
            }
        }
        for (i, f) in faults.iter().enumerate() {
            tallies.faults += 1;
            let entry = tallies.per_kind.entry(f.kind.name()).or_default();
            entry.injected += 1;
            let found: Vec<&vote::Found> =
                verdicts.iter().filter(|v| f.named_by(fabric, v)).collect();
            if found.is_empty() {
                tallies.missed.push(format!(
                    "trial {trial} (background {background:.1e}): {} at {} loss {:.3}",
                    f.kind.name(),
                    f.at,
                    f.loss
                ));
                continue;
            }
            tallies.found += 1;
            entry.named += 1;
            if found.iter().any(|v| f.kind_right(v)) {
                entry.kind_right += 1;
            }
            if let Some(s) = named_at[i] {
                entry.to_verdict.push(s);
            }
            if let Some(s) = paged_at[i] {
                entry.to_page.push(s);
            }
        }
        if trial % 10 == 9 {
            println!(
                "  {} trials: {}/{} verdicts right, {}/{} faults named",
                trial + 1,
                tallies.right,
                tallies.verdicts,
                tallies.found,
                tallies.faults
            );
        }
    }
    tallies
}

fn print_tallies(t: &Tallies) {
    let share = |a: usize, b: usize| {
        if b == 0 {
            100.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    println!(
        "precision {:.1} % ({} of {} verdicts right), recall {:.1} % ({} of {} faults named)",
        share(t.right, t.verdicts),
        t.right,
        t.verdicts,
        share(t.found, t.faults),
        t.found,
        t.faults
    );
    println!("| fault | injected | named | kind right | to verdict p50 / p90 / max (s) | to page p50 / p90 / max (s) |");
    println!("|---|---|---|---|---|---|");
    for (kind, k) in &t.per_kind {
        let (verdict, page) = (&k.to_verdict, &k.to_page);
        println!(
            "| {kind} | {} | {} | {} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} |",
            k.injected,
            k.named,
            k.kind_right,
            percentile(verdict, 0.5),
            percentile(verdict, 0.9),
            percentile(verdict, 1.0),
            percentile(page, 0.5),
            percentile(page, 0.9),
            percentile(page, 1.0),
        );
    }
    for w in &t.wrong {
        println!("  wrong: {w}");
    }
    for m in &t.missed {
        println!("  missed: {m}");
    }
}

/// An hour of healthy fabric at 1e-3 background with the rolling restart: verdicts and pages.
fn noise_hour(fabric: &Fabric, seed: u64) {
    let mut random = Random(mix(seed ^ 0x5eed) | 1);
    let hour = 3_600;
    let restarts = draw_restarts(fabric, &mut random, 0, hour);
    let mut run = Run::new(fabric, Vec::new(), restarts, 1e-3, random.next());
    let started = Instant::now();
    let (mut evaluations, mut verdicts, mut pages) = (0, 0, 0);
    // A verdict pages once it has stood at the scrapes `for:` spans (one with `for: 0s`).
    let needed = 1 + (FOR_S / SCRAPE_S as f64).ceil() as usize;
    let mut streaks: Vec<(Subject, usize)> = Vec::new();
    for t in (SCRAPE_S..=hour + WINDOW_S).step_by(SCRAPE_S) {
        run.probe(t - SCRAPE_S, t);
        if t < WINDOW_S {
            continue;
        }
        let outcome = run.vote(t);
        evaluations += 1;
        let now: Vec<vote::Found> = outcome.verdicts.into_iter().filter(critical).collect();
        verdicts += now.len();
        streaks = now
            .iter()
            .map(|v| {
                let before = streaks
                    .iter()
                    .find(|(s, _)| *s == v.subject)
                    .map_or(0, |s| s.1);
                println!("  noise verdict at {t} s: {}", describe(fabric, v));
                if before + 1 == needed {
                    pages += 1;
                }
                (v.subject, before + 1)
            })
            .collect();
    }
    println!(
        "noise hour: {} hosts, background 1e-3 a probe, {} restarts: {evaluations} evaluations, {verdicts} critical verdicts, {pages} critical pages ({:.0} s)",
        fabric.hosts,
        fabric.hosts / 10,
        started.elapsed().as_secs_f64()
    );
}

fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec, a clock id the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One full window at `hosts` hosts with three faults and 1e-3 background, and the vote on it.
fn scale(hosts: usize, spines: u64, seed: u64) {
    let fabric = Fabric::new(hosts, spines);
    let mut random = Random(mix(seed ^ 0x5ca1e) | 1);
    let restarts = draw_restarts(&fabric, &mut random, 0, FAULT_FROM + WINDOW_S);
    let restarting: BTreeSet<usize> = restarts.iter().map(|r| r.host).collect();
    let mut faults = draw_faults(&fabric, &mut random, 3, &restarting);
    for f in &mut faults {
        f.start = FAULT_FROM;
    }
    let mut run = Run::new(&fabric, faults.clone(), restarts, 1e-3, random.next());
    let started = Instant::now();
    run.probe(FAULT_FROM, FAULT_FROM + WINDOW_S);
    let generated = started.elapsed().as_secs_f64();
    let t = FAULT_FROM + WINDOW_S;
    let mut window = Window::new(&fabric.topology);
    let merge_started = Instant::now();
    for bucket in &run.buckets {
        window.merge(bucket);
    }
    let merged = merge_started.elapsed().as_secs_f64();
    let states = run.states(t);
    let lossy = window.lossy_paths().len();
    let mut times = Vec::new();
    let mut peak = 0;
    let mut outcome = Outcome::default();
    for _ in 0..5 {
        let base = IN_USE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let cpu = thread_cpu_seconds();
        outcome = vote::vote(&fabric.topology, &states, &window);
        times.push(thread_cpu_seconds() - cpu);
        peak = peak.max(PEAK.load(Ordering::Relaxed) - base);
    }
    let right = scored(&fabric, &outcome)
        .iter()
        .filter(|v| faults.iter().any(|f| f.named_by(&fabric, v)))
        .count();
    println!(
        "scale: {hosts} hosts x {NICS} NICs ({} leaves, {spines} spines), one 120 s window: {} probes, {lossy} lossy paths, window held in {:.1} MiB (generated in {generated:.0} s, 8 buckets merged in {:.0} ms)",
        fabric.topology.leaves(),
        outcome.total.sent,
        window.memory_bytes() as f64 / (1 << 20) as f64,
        merged * 1e3,
    );
    println!(
        "scale: the vote on one core: {:.0} ms median of 5 (min {:.0}, max {:.0}), peak heap during it {:.1} MiB; {} verdicts, {right} naming the {} injected faults ({})",
        percentile(&times, 0.5) * 1e3,
        percentile(&times, 0.0) * 1e3,
        percentile(&times, 1.0) * 1e3,
        peak as f64 / (1 << 20) as f64,
        scored(&fabric, &outcome).len(),
        faults.len(),
        faults.iter().map(|f| f.kind.name()).collect::<Vec<_>>().join(", ")
    );
}

fn run() -> anyhow::Result<()> {
    let seed = match std::env::var("BENCH_SEED") {
        Ok(_) => env_number("BENCH_SEED", 1)?,
        Err(_) => SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64 | 1,
    };
    let hosts = env_number("BENCH_HOSTS", 1_000)? as usize;
    let spines = env_number("BENCH_SPINES", 4)?;
    let count = env_number("BENCH_TRIALS", 100)? as usize;
    let scale_hosts = env_number("BENCH_SCALE_HOSTS", 10_000)? as usize;
    let hour = std::env::var("BENCH_HOUR").map_or(true, |v| v != "0");
    println!(
        "localize: seed {seed} (BENCH_SEED), {hosts} hosts x {NICS} NICs, {spines} spines, {count} trials, load {}",
        load_average()
    );
    check_plan()?;
    println!("the model's plan is targets::plan's (checked on 40 hosts)");
    let fabric = Fabric::new(hosts, spines);
    let started = Instant::now();
    let tallies = trials(&fabric, seed, count);
    println!("trials took {:.0} s", started.elapsed().as_secs_f64());
    print_tallies(&tallies);
    if hour {
        noise_hour(&fabric, seed);
    }
    scale(scale_hosts, spines, seed);
    Ok(())
}
