//! The localization vote on indexes (docs/localization.md): from one window of probe counts to
//! the components to blame. Pure: no clock, no I/O, no names. [`super::localize`] feeds it the
//! landing page's counts by name; the localization bench feeds it a 10 000-host fabric.
//!
//! What it answers, and how (007, NSDI 2018, with network tomography's test):
//! - **Background.** Probes are lost now and then on any path. A candidate (a port: NIC, cable
//!   and leaf port; a host; a leaf's uplinks; the spine layer) is blamed only when the probes
//!   *through* it are lost far more often than the probes of the paths that *avoid* it: at least
//!   [`MIN_RATIO`] times, [`MIN_LOST`] probes or more, and with a log-likelihood ratio that
//!   background loss would reach with a chance under [`ALPHA`] per window among all candidates.
//!   A path given one probe a window that lost it proves nothing alone; its port's, leaf's or
//!   host's sum of such paths does.
//! - **Several faults.** Explain-away: the candidate that explains the loss best is named, the
//!   lossy paths through it are taken out, and the vote runs again on the rest, so two bad NICs
//!   are both named and a third fault does not make them "the spine".
//! - **Specific before broad.** A host, a leaf or the spine stands only when its loss is spread:
//!   taking out its [`MAX_CHILD_FAULTS`] worst ports (and for the spine its worst leaves too)
//!   leaves a loss that is still anomalous (and for the spine, at least a [`MIN_RATIO`]-th of its
//!   whole rate: a spine's loss reaches every leaf alike). Else those ports (or leaves) are the
//!   faults, and they are named one by one.
//! - **Not the network.** Paths toward a port whose agent restarted within the window, toward a
//!   busy responder, or toward a port whose agent is silent are left out: their probes were
//!   missing, not lost. A whole host silent for [`HOST_DOWN_SECONDS`] whose probes are all lost is
//!   named `host` (down); one whose agent said it was leaving (a rolling restart, Serf's "leave"
//!   rather than "fail") only after [`LEFT_DOWN_SECONDS`]. A busy responder is `responder`.

use super::localize::Kind;

/// A candidate needs at least this many lost probes through it.
pub(crate) const MIN_LOST: u64 = 3;
/// ... a loss rate through it at least this many times that of the paths avoiding it ...
pub(crate) const MIN_RATIO: f64 = 4.0;
/// ... and evidence that background loss reaches with at most this chance in a window, over all
/// candidates together (Bonferroni; the tail is Chernoff's bound, so it errs toward silence).
pub(crate) const ALPHA: f64 = 1e-6;
/// A host, leaf or the spine stands only when its loss is not explained by this many of its
/// worst ports (or leaves).
pub(crate) const MAX_CHILD_FAULTS: usize = 3;
/// A leaf whose uplinks lose at least this share of the probes in one direction sends into an
/// ECMP member that delivers nothing (`leaf`); less, a link drops part of what it carries
/// (`uplink`).
pub const LEAF_LOSS: f64 = 0.2;
/// A host whose every port has been silent this long (seconds) and whose probes are lost is
/// `host` (down). Its agent did not say it was leaving: it crashed, or the host did. Two missed
/// 15 s scrapes; the page then comes within a minute of the fault.
pub(crate) const HOST_DOWN_SECONDS: f64 = 30.0;
/// ... and this long when its agent said it was leaving (`rdma_probe_leaving`): a restart, which
/// pulls an image and starts in well under this, is not a host down.
pub(crate) const LEFT_DOWN_SECONDS: f64 = 300.0;
/// ... and this share of the probes sent toward it in the window must have been lost.
pub(crate) const DOWN_LOSS: f64 = 0.9;
/// A path fails when it lost at least this many probes ...
pub(crate) const PATH_MIN_LOST: u64 = 2;
/// ... and background loss gives that many with a chance under this.
pub(crate) const PATH_ALPHA: f64 = 1e-4;
/// At most this many loss verdicts a window (the loop's bound).
pub(crate) const MAX_VERDICTS: usize = 32;
/// The chance that the background of the paths avoiding the spine is above the rate it is
/// weighed against ([`background_bound`]).
pub(crate) const P_BOUND_ALPHA: f64 = 1e-3;
/// The lowest background rate the vote assumes (a path set that lost nothing).
const P_FLOOR: f64 = 1e-7;

/// Which ports are on which host and leaf. Ports, hosts and leaves are numbered from 0.
#[derive(Debug, Clone)]
pub struct Topology {
    host_of: Vec<u32>,
    leaf_of: Vec<Option<u32>>,
    host_ports: Vec<Vec<u32>>,
    leaf_ports: Vec<Vec<u32>>,
}

impl Topology {
    /// Port `i` is on host `host_of[i]` and under leaf `leaf_of[i]` (`None`: LLDP does not say;
    /// it takes part in the port and host candidates only).
    pub fn new(host_of: Vec<u32>, leaf_of: Vec<Option<u32>>) -> Topology {
        assert_eq!(host_of.len(), leaf_of.len());
        let hosts = host_of.iter().map(|h| *h as usize + 1).max().unwrap_or(0);
        let leaves = leaf_of
            .iter()
            .flatten()
            .map(|l| *l as usize + 1)
            .max()
            .unwrap_or(0);
        let mut host_ports = vec![Vec::new(); hosts];
        let mut leaf_ports = vec![Vec::new(); leaves];
        for (i, (h, l)) in host_of.iter().zip(&leaf_of).enumerate() {
            host_ports[*h as usize].push(i as u32);
            if let Some(l) = l {
                leaf_ports[*l as usize].push(i as u32);
            }
        }
        Topology {
            host_of,
            leaf_of,
            host_ports,
            leaf_ports,
        }
    }

    pub fn ports(&self) -> usize {
        self.host_of.len()
    }

    pub fn hosts(&self) -> usize {
        self.host_ports.len()
    }

    pub fn leaves(&self) -> usize {
        self.leaf_ports.len()
    }

    pub fn host_of(&self, port: u32) -> u32 {
        self.host_of[port as usize]
    }

    pub fn leaf_of(&self, port: u32) -> Option<u32> {
        self.leaf_of[port as usize]
    }

    pub fn host_ports(&self, host: u32) -> &[u32] {
        &self.host_ports[host as usize]
    }

    fn class(&self, a: u32, b: u32) -> usize {
        match (self.leaf_of(a), self.leaf_of(b)) {
            (Some(x), Some(y)) if x == y => SAME,
            (Some(_), Some(_)) => CROSS,
            _ => UNKNOWN,
        }
    }

    fn crosses(&self, path: &LossyPath, leaf: u32) -> bool {
        match (self.leaf_of(path.from), self.leaf_of(path.to)) {
            (Some(a), Some(b)) => (a == leaf) != (b == leaf),
            _ => false,
        }
    }
}

/// Path classes by leaves: both ends under one leaf, under two, or not known.
const SAME: usize = 0;
const CROSS: usize = 1;
const UNKNOWN: usize = 2;

/// Probes sent and, of those, lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub lost: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.sent += other.sent;
        self.lost += other.lost;
    }

    fn plus(self, other: Counts) -> Counts {
        Counts {
            sent: self.sent + other.sent,
            lost: self.lost + other.lost,
        }
    }

    fn minus(self, other: Counts) -> Counts {
        Counts {
            sent: self.sent.saturating_sub(other.sent),
            lost: self.lost.saturating_sub(other.lost),
        }
    }

    /// Lost over sent; 0 when nothing was sent.
    pub fn rate(self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            (self.lost as f64 / self.sent as f64).min(1.0)
        }
    }
}

/// One port's counts: the paths from it and to it by class, and those to its own host's ports.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    from: [Counts; 3],
    to: [Counts; 3],
    from_intra: Counts,
    to_intra: Counts,
}

impl Tally {
    /// Every path with an end on the port.
    fn all(&self) -> Counts {
        self.from
            .iter()
            .chain(&self.to)
            .fold(Counts::default(), |a, c| a.plus(*c))
    }

    /// Those with the other end on another host.
    fn inter_host(&self) -> Counts {
        self.all().minus(self.from_intra).minus(self.to_intra)
    }

    /// Those across its leaf's uplinks.
    fn crossing(&self) -> Counts {
        self.from[CROSS].plus(self.to[CROSS])
    }

    fn change(&mut self, from_side: bool, class: usize, intra: bool, c: Counts, add: bool) {
        let (by_class, intra_counts) = if from_side {
            (&mut self.from[class], &mut self.from_intra)
        } else {
            (&mut self.to[class], &mut self.to_intra)
        };
        if add {
            by_class.add(c);
            if intra {
                intra_counts.add(c);
            }
        } else {
            *by_class = by_class.minus(c);
            if intra {
                *intra_counts = intra_counts.minus(c);
            }
        }
    }
}

/// A path that lost probes in the window, with all it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossyPath {
    pub from: u32,
    pub to: u32,
    pub sent: u64,
    pub lost: u64,
}

impl LossyPath {
    fn counts(&self) -> Counts {
        Counts {
            sent: self.sent,
            lost: self.lost,
        }
    }

    /// Lost over sent (1 when it lost probes sent before the window).
    pub fn loss_ratio(&self) -> f64 {
        self.counts().rate()
    }
}

/// One window's counts: per port, by path class, and every path that lost a probe. Paths that
/// lost nothing are only summed: the vote needs their probes, not their names (at 10 000
/// hosts a window has about 10^8 paths and 10^5 lossy ones).
#[derive(Debug, Clone)]
pub struct Window {
    tallies: Vec<Tally>,
    lossy: Vec<LossyPath>,
}

impl Window {
    pub fn new(topology: &Topology) -> Window {
        Window {
            tallies: vec![Tally::default(); topology.ports()],
            lossy: Vec::new(),
        }
    }

    /// Adds a path's counts (a path given again adds up). `lost` more than `sent` counts as
    /// sent too: probes sent before the window and lost in it.
    pub fn add(&mut self, topology: &Topology, from: u32, to: u32, sent: u64, lost: u64) {
        if from == to || (sent == 0 && lost == 0) {
            return;
        }
        let path = LossyPath {
            from,
            to,
            sent: sent.max(lost),
            lost,
        };
        self.count(topology, &path, true);
        if lost > 0 {
            self.lossy.push(path);
        }
    }

    /// Adds another window's counts (a window is the sum of shorter ones).
    pub fn merge(&mut self, other: &Window) {
        for (mine, theirs) in self.tallies.iter_mut().zip(&other.tallies) {
            for class in 0..3 {
                mine.from[class].add(theirs.from[class]);
                mine.to[class].add(theirs.to[class]);
            }
            mine.from_intra.add(theirs.from_intra);
            mine.to_intra.add(theirs.to_intra);
        }
        self.lossy.extend_from_slice(&other.lossy);
    }

    /// The lossy paths, each once (the same path given twice summed).
    pub fn lossy_paths(&self) -> Vec<LossyPath> {
        let mut lossy = self.lossy.clone();
        lossy.sort_unstable_by_key(|p| (p.from, p.to));
        lossy.dedup_by(|later, kept| {
            if (later.from, later.to) == (kept.from, kept.to) {
                kept.sent += later.sent;
                kept.lost += later.lost;
                true
            } else {
                false
            }
        });
        lossy
    }

    /// Bytes held (the counts and the lossy paths).
    pub fn memory_bytes(&self) -> usize {
        self.tallies.capacity() * std::mem::size_of::<Tally>()
            + self.lossy.capacity() * std::mem::size_of::<LossyPath>()
    }

    fn count(&mut self, topology: &Topology, path: &LossyPath, add: bool) {
        let class = topology.class(path.from, path.to);
        let intra = topology.host_of(path.from) == topology.host_of(path.to);
        let c = path.counts();
        self.tallies[path.from as usize].change(true, class, intra, c, add);
        self.tallies[path.to as usize].change(false, class, intra, c, add);
    }
}

/// What the cluster knows of a port's agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PortState {
    /// Scraped, probing, answering.
    Live,
    /// Its agent started within the window: probes toward it were missing for a while (a
    /// rolling restart), not lost to the network. Paths toward it are left out.
    Restarted,
    /// Its responder answers late (this mean delay, seconds): a busy host. Paths toward it are
    /// left out; `responder`.
    Busy(f64),
    /// Its agent has not reported for `seconds`; `left`: its last word was that it was leaving
    /// (a restart). Paths toward it are left out.
    Silent { seconds: f64, left: bool },
}

impl PortState {
    fn source(self) -> bool {
        !matches!(self, PortState::Silent { .. })
    }

    fn target(self) -> bool {
        self == PortState::Live
    }
}

/// What a verdict names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Port(u32),
    Host(u32),
    Leaf(u32),
    Spine,
}

/// One verdict and its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: Kind,
    pub subject: Subject,
    /// The lossy paths through it (those earlier verdicts explained left out).
    pub lossy_paths: usize,
    /// Probes sent and lost through it; for `host` (down), toward it.
    pub through: Counts,
    /// The loss rate of the paths that avoid it.
    pub background: f64,
    /// Its lost probes over all lost in the window (at most 1).
    pub share: f64,
    /// 1 less the chance that background loss alone gives this much through it (Chernoff's
    /// bound, over all candidates), split between candidates no probe can tell apart.
    pub confidence: f64,
    /// `responder`: the mean answer delay, seconds.
    pub answer_delay_seconds: Option<f64>,
    /// `host` (down): how long its agent has been silent, seconds.
    pub silent_seconds: Option<f64>,
}

/// The vote's outcome over one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Loss verdicts in the order named (best explanation first), then `host` (down), then
    /// `responder`.
    pub verdicts: Vec<Found>,
    /// The failing paths, in path order: those through a verdict that lost probes, and those
    /// whose loss stands out from the background alone.
    pub failing: Vec<LossyPath>,
    /// The probes of the paths taken into account.
    pub total: Counts,
    /// The loss rate left once the verdicts' lossy paths are taken out: the background.
    pub background: f64,
}

/// The background rate of `out` (a path set), with half a loss added so that a small set that
/// lost nothing is not taken for a perfect one.
fn background(out: Counts) -> f64 {
    ((out.lost as f64 + 0.5) / (out.sent as f64 + 1.0)).clamp(P_FLOOR, 0.5)
}

/// The highest loss rate of the paths `out` counts that their probes leave plausible (a chance
/// of [`P_BOUND_ALPHA`] that it is higher): `lambda = k + L + sqrt(L^2 + 2kL)` solves the
/// Poisson Chernoff bound's quadratic form `(lambda - k)^2 / (2 lambda) = L`, which is the
/// smaller side, so the bound errs high. The spine is weighed against it, not against the
/// estimate: few paths avoid the spine of a rail-optimized fabric (those inside one leaf), and
/// their estimate alone can read the background several times too low. Every other candidate
/// has most of the fabric around it, where the bound would only cost sensitivity (a 2 % uplink
/// on a small, quiet fabric needs most of its window as it is).
fn background_bound(out: Counts) -> f64 {
    let (k, l) = (out.lost as f64, -P_BOUND_ALPHA.ln());
    ((k + l + (l * l + 2.0 * k * l).sqrt()) / (out.sent as f64 + 1.0)).clamp(P_FLOOR, 0.5)
}

/// Kullback-Leibler divergence of Bernoulli(r) from Bernoulli(p).
fn kl(r: f64, p: f64) -> f64 {
    let term = |a: f64, b: f64| if a <= 0.0 { 0.0 } else { a * (a / b).ln() };
    term(r, p) + term(1.0 - r, 1.0 - p)
}

/// The evidence against background rate `p` in `c`: `n * KL(rate || p)`, the log of one over
/// Chernoff's bound on the chance of this much loss; `None` when too small or too few.
fn score(c: Counts, p: f64) -> Option<f64> {
    if c.lost < MIN_LOST || c.sent == 0 {
        return None;
    }
    let r = c.rate();
    if r < MIN_RATIO * p {
        return None;
    }
    Some(c.sent as f64 * kl(r, p))
}

/// `ln P(X >= k)` for X ~ Binomial(n, p), summed term by term from k (k > n p).
fn log_tail(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 || (k as f64) <= n as f64 * p {
        return 0.0;
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_choose = 0.0;
    for i in 0..k {
        log_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let first = log_choose + k as f64 * lp + (n - k) as f64 * lq;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for j in k..n {
        term *= (n - j) as f64 / (j + 1) as f64 * p / (1.0 - p);
        sum += term;
        if term < sum * 1e-12 {
            break;
        }
    }
    first + sum.ln()
}

/// A candidate in one round of the vote.
#[derive(Clone, Copy)]
struct Candidate {
    subject: Subject,
    counts: Counts,
    p: f64,
    g: f64,
}

/// The state of one vote: the counts left once explained paths are taken out.
struct Ballot<'t> {
    topology: &'t Topology,
    states: &'t [PortState],
    window: Window,
    lossy: Vec<LossyPath>,
    explained: Vec<bool>,
    total: Counts,
    g_min: f64,
    candidates: usize,
}

impl Ballot<'_> {
    fn through(&self, subject: Subject, path: &LossyPath) -> bool {
        let t = self.topology;
        match subject {
            Subject::Port(i) => path.from == i || path.to == i,
            Subject::Host(h) => t.host_of(path.from) == h || t.host_of(path.to) == h,
            Subject::Leaf(l) => t.crosses(path, l),
            Subject::Spine => t.class(path.from, path.to) == CROSS,
        }
    }

    fn leaf_counts(&self, leaf: u32) -> Counts {
        self.topology.leaf_ports[leaf as usize]
            .iter()
            .fold(Counts::default(), |a, i| {
                a.plus(self.window.tallies[*i as usize].crossing())
            })
    }

    /// Every candidate that stands out this round, best first.
    fn candidates(&self) -> Vec<Candidate> {
        let t = self.topology;
        let tallies = &self.window.tallies;
        let mut out = Vec::new();
        let mut consider = |subject: Subject, counts: Counts| {
            // The spine is weighed against the bound of what avoids it, every other candidate
            // against the estimate: only the spine has few paths around it.
            let around = self.total.minus(counts);
            let p = if subject == Subject::Spine {
                background_bound(around)
            } else {
                background(around)
            };
            if let Some(g) = score(counts, p).filter(|g| *g >= self.g_min) {
                out.push(Candidate {
                    subject,
                    counts,
                    p,
                    g,
                });
            }
        };
        for (i, tally) in tallies.iter().enumerate() {
            if self.states[i].source() {
                consider(Subject::Port(i as u32), tally.all());
            }
        }
        for (h, ports) in t.host_ports.iter().enumerate() {
            let speaking = ports
                .iter()
                .filter(|i| self.states[**i as usize].source())
                .count();
            if speaking < 2 {
                continue;
            }
            // Paths between two of its ports are counted at both ends: once is taken off.
            let counts = ports.iter().fold(Counts::default(), |a, i| {
                let tally = &tallies[*i as usize];
                a.plus(tally.all()).minus(tally.from_intra)
            });
            consider(Subject::Host(h as u32), counts);
        }
        for l in 0..t.leaves() {
            consider(Subject::Leaf(l as u32), self.leaf_counts(l as u32));
        }
        // With two leaves the spine's paths are each leaf's: the leaves are named, both.
        if t.leaves() >= 3 {
            let spine = tallies
                .iter()
                .fold(Counts::default(), |a, tally| a.plus(tally.from[CROSS]));
            consider(Subject::Spine, spine);
        }
        out.sort_by(|a, b| b.g.total_cmp(&a.g));
        out
    }

    /// Whether `counts` stays anomalous against `p` once the `m` worst of `children` are taken
    /// out (children disjoint in paths, or nearly).
    fn residual_stands(&self, counts: Counts, children: &[Counts], p: f64, m: usize) -> bool {
        let mut scored: Vec<(f64, Counts)> = children
            .iter()
            .map(|c| (score(*c, p).unwrap_or(0.0), *c))
            .collect();
        let m = m.min(scored.len());
        if m > 0 {
            scored.select_nth_unstable_by(m - 1, |a, b| b.0.total_cmp(&a.0));
        }
        let residual = scored[..m]
            .iter()
            .fold(counts, |left, (_, c)| left.minus(*c));
        score(residual, p).is_some_and(|g| g >= self.g_min)
    }

    /// A host, leaf or the spine stands only when its loss is spread (module doc).
    fn spread(&self, candidate: &Candidate) -> bool {
        let t = self.topology;
        let tallies = &self.window.tallies;
        let most = |n: usize| MAX_CHILD_FAULTS.min(n.saturating_sub(2));
        match candidate.subject {
            Subject::Port(_) => true,
            Subject::Host(h) => {
                let children: Vec<Counts> = t.host_ports[h as usize]
                    .iter()
                    .map(|i| tallies[*i as usize].inter_host())
                    .collect();
                let inter = children.iter().fold(Counts::default(), |a, c| a.plus(*c));
                self.residual_stands(inter, &children, candidate.p, most(children.len()))
            }
            Subject::Leaf(l) => {
                let children: Vec<Counts> = t.leaf_ports[l as usize]
                    .iter()
                    .map(|i| tallies[*i as usize].crossing())
                    .collect();
                self.residual_stands(
                    candidate.counts,
                    &children,
                    candidate.p,
                    most(children.len()),
                )
            }
            Subject::Spine => {
                let ports: Vec<Counts> = tallies.iter().map(Tally::crossing).collect();
                if !self.residual_stands(candidate.counts, &ports, candidate.p, MAX_CHILD_FAULTS) {
                    return false;
                }
                self.spine_without_worst_leaves(candidate, most(t.leaves()))
            }
        }
    }

    /// The spine's loss once its `m` worst leaves' paths are taken out: lost probes counted
    /// exactly from the lossy paths, sent estimated (a path between two of the leaves taken
    /// out is added back in the proportion of their shares).
    fn spine_without_worst_leaves(&self, spine: &Candidate, m: usize) -> bool {
        let t = self.topology;
        let mut leaves: Vec<(f64, u32, Counts)> = (0..t.leaves() as u32)
            .map(|l| {
                let c = self.leaf_counts(l);
                (score(c, spine.p).unwrap_or(0.0), l, c)
            })
            .collect();
        let m = m.min(leaves.len());
        if m == 0 {
            return true;
        }
        leaves.select_nth_unstable_by(m - 1, |a, b| b.0.total_cmp(&a.0));
        let worst = &leaves[..m];
        let n = spine.counts.sent as f64;
        let mut sent = n;
        for (i, (_, _, a)) in worst.iter().enumerate() {
            sent -= a.sent as f64;
            for (_, _, b) in &worst[i + 1..] {
                sent += a.sent as f64 * b.sent as f64 / (2.0 * n - a.sent as f64).max(1.0);
            }
        }
        let out = |leaf: Option<u32>| leaf.is_some_and(|l| worst.iter().all(|w| w.1 != l));
        let lost: u64 = self
            .lossy
            .iter()
            .zip(&self.explained)
            .filter(|(p, done)| {
                !**done
                    && t.class(p.from, p.to) == CROSS
                    && out(t.leaf_of(p.from))
                    && out(t.leaf_of(p.to))
            })
            .map(|(p, _)| p.lost)
            .sum();
        let residual = Counts {
            sent: sent.max(0.0) as u64,
            lost,
        };
        // Loss at the spine reaches every leaf alike: where the worst leaves carry most of it
        // (the rest's rate under a MIN_RATIO-th of the whole), those leaves are the faults. The
        // test against `spine.p` alone is not enough: few paths avoid the spine in a
        // rail-optimized fabric, so at low background `p` can read several times too low.
        residual.rate() * MIN_RATIO >= spine.counts.rate()
            && score(residual, spine.p).is_some_and(|g| g >= self.g_min)
    }

    /// Takes out the lossy paths through `subject`.
    fn explain(&mut self, subject: Subject) {
        for k in 0..self.lossy.len() {
            if self.explained[k] || !self.through(subject, &self.lossy[k]) {
                continue;
            }
            self.explained[k] = true;
            let path = self.lossy[k];
            self.window.count(self.topology, &path, false);
            self.total = self.total.minus(path.counts());
        }
    }

    fn kind(&self, subject: Subject, counts: Counts) -> Kind {
        match subject {
            Subject::Port(_) => Kind::Nic,
            Subject::Host(_) => Kind::Host,
            Subject::Spine => Kind::Spine,
            Subject::Leaf(l) => {
                let (up, down) = self.topology.leaf_ports[l as usize].iter().fold(
                    (Counts::default(), Counts::default()),
                    |(up, down), i| {
                        let tally = &self.window.tallies[*i as usize];
                        (up.plus(tally.from[CROSS]), down.plus(tally.to[CROSS]))
                    },
                );
                if up.rate().max(down.rate()).max(counts.rate()) >= LEAF_LOSS {
                    Kind::Leaf
                } else {
                    Kind::Uplink
                }
            }
        }
    }

    fn confidence(&self, g: f64, ties: usize) -> f64 {
        let chance = (self.candidates as f64 * (-g).exp()).min(1.0);
        (1.0 - chance) / ties as f64
    }
}

/// The vote over one window: `states[i]` is port `i`'s (module doc).
pub fn vote(topology: &Topology, states: &[PortState], window: &Window) -> Outcome {
    assert_eq!(states.len(), topology.ports());
    let mut kept = window.clone();
    kept.lossy.clear();
    let mut lossy = Vec::new();
    // Probes toward silent ports, per port: a host that is down.
    let mut toward_silent = vec![Counts::default(); topology.ports()];
    let mut paths_toward_silent = vec![0usize; topology.ports()];
    for path in window.lossy_paths() {
        let (from, to) = (states[path.from as usize], states[path.to as usize]);
        if from.source() && to.target() {
            lossy.push(path);
            continue;
        }
        // Missing, not lost: out of every count.
        kept.count(topology, &path, false);
        if from.source() && matches!(to, PortState::Silent { .. }) {
            toward_silent[path.to as usize].add(path.counts());
            paths_toward_silent[path.to as usize] += 1;
        }
    }
    let total = kept
        .tallies
        .iter()
        .flat_map(|t| t.from)
        .fold(Counts::default(), |a, c| a.plus(c));
    let candidates = topology.ports()
        + topology.hosts()
        + topology.leaves()
        + usize::from(topology.leaves() >= 3);
    let mut ballot = Ballot {
        topology,
        states,
        window: kept,
        explained: vec![false; lossy.len()],
        lossy,
        total,
        g_min: (candidates.max(1) as f64 / ALPHA).ln(),
        candidates: candidates.max(1),
    };
    let all_lost = total.lost.max(1) as f64;
    let mut verdicts = Vec::new();
    while verdicts.len() < MAX_VERDICTS {
        let standing = ballot.candidates();
        let Some(best) = standing.iter().find(|c| ballot.spread(c)).copied() else {
            break;
        };
        // Leaves no probe can tell apart (two leaves: every crossing path has an end on each)
        // are named together.
        let twins: Vec<Candidate> = match best.subject {
            Subject::Leaf(_) => standing
                .iter()
                .filter(|c| matches!(c.subject, Subject::Leaf(_)) && c.counts == best.counts)
                .copied()
                .collect(),
            _ => vec![best],
        };
        let kind = ballot.kind(best.subject, best.counts);
        let through: Vec<usize> = twins
            .iter()
            .map(|twin| {
                (0..ballot.lossy.len())
                    .filter(|k| {
                        !ballot.explained[*k] && ballot.through(twin.subject, &ballot.lossy[*k])
                    })
                    .count()
            })
            .collect();
        for (twin, lossy_paths) in twins.iter().zip(through) {
            ballot.explain(twin.subject);
            verdicts.push(Found {
                kind,
                subject: twin.subject,
                lossy_paths,
                through: twin.counts,
                background: twin.p,
                share: (twin.counts.lost as f64 / all_lost).min(1.0),
                confidence: ballot.confidence(twin.g, twins.len()),
                answer_delay_seconds: None,
                silent_seconds: None,
            });
        }
    }
    let residual = background(ballot.total);
    // Hosts that are down: every port silent long enough, the probes toward them lost.
    for (h, ports) in topology.host_ports.iter().enumerate() {
        let silent = ports.iter().map(|i| match states[*i as usize] {
            PortState::Silent { seconds, left } => Some((seconds, left)),
            _ => None,
        });
        // The ports share one agent: its word of leaving on any of them is the host's.
        let Some((least, left)) = silent
            .collect::<Option<Vec<(f64, bool)>>>()
            .and_then(|s| s.into_iter().reduce(|a, b| (a.0.min(b.0), a.1 || b.1)))
        else {
            continue;
        };
        let toward = ports
            .iter()
            .fold(Counts::default(), |a, i| a.plus(toward_silent[*i as usize]));
        let down_after = if left {
            LEFT_DOWN_SECONDS
        } else {
            HOST_DOWN_SECONDS
        };
        if least < down_after || toward.lost < MIN_LOST || toward.rate() < DOWN_LOSS {
            continue;
        }
        verdicts.push(Found {
            kind: Kind::Host,
            subject: Subject::Host(h as u32),
            lossy_paths: ports.iter().map(|i| paths_toward_silent[*i as usize]).sum(),
            through: toward,
            background: residual,
            share: 0.0,
            confidence: ballot.confidence(toward.sent as f64 * kl(toward.rate(), residual), 1),
            answer_delay_seconds: None,
            silent_seconds: Some(least),
        });
    }
    for (i, state) in states.iter().enumerate() {
        if let PortState::Busy(delay) = state {
            verdicts.push(Found {
                kind: Kind::Responder,
                subject: Subject::Port(i as u32),
                lossy_paths: 0,
                through: Counts::default(),
                background: residual,
                share: 0.0,
                confidence: 1.0,
                answer_delay_seconds: Some(*delay),
                silent_seconds: None,
            });
        }
    }
    // A path fails when a verdict explains its loss, or when its loss stands out alone.
    let failing = ballot
        .lossy
        .iter()
        .zip(&ballot.explained)
        .filter(|(p, explained)| {
            **explained
                || (p.lost >= PATH_MIN_LOST
                    && log_tail(p.lost, p.sent, residual) <= PATH_ALPHA.ln())
        })
        .map(|(p, _)| *p)
        .collect();
    Outcome {
        verdicts,
        failing,
        total,
        background: residual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binomial_tail_matches_a_direct_sum() {
        // P(X >= 2) for Binomial(120, 1e-3) = 1 - q^120 - 120 p q^119.
        let (p, q) = (1e-3f64, 1.0 - 1e-3f64);
        let direct = 1.0 - q.powi(120) - 120.0 * p * q.powi(119);
        assert!((log_tail(2, 120, p).exp() / direct - 1.0).abs() < 1e-6);
        assert_eq!(log_tail(1, 1000, 0.01), 0.0, "at or under the mean");
        assert!((log_tail(5, 5, 0.5).exp() - 1.0 / 32.0).abs() < 1e-12);
    }

    /// Four hosts of two ports, no leaves known, each port probing every other 30 times; the
    /// last host silent in `state` with every probe toward it lost.
    fn one_host_silent(state: PortState) -> Outcome {
        let topology = Topology::new(vec![0, 0, 1, 1, 2, 2, 3, 3], vec![None; 8]);
        let mut window = Window::new(&topology);
        for from in 0..6 {
            for to in 0..8 {
                window.add(&topology, from, to, 30, if to >= 6 { 30 } else { 0 });
            }
        }
        let mut states = vec![PortState::Live; 8];
        states[6] = state;
        states[7] = state;
        vote(&topology, &states, &window)
    }

    #[test]
    fn a_silent_host_is_down_sooner_when_its_agent_did_not_say_it_was_leaving() {
        let named = |seconds, left| {
            let outcome = one_host_silent(PortState::Silent { seconds, left });
            assert!(outcome
                .verdicts
                .iter()
                .all(|v| v.subject == Subject::Host(3)));
            !outcome.verdicts.is_empty()
        };
        assert!(
            !named(HOST_DOWN_SECONDS - 1.0, false),
            "a missed scrape or two"
        );
        assert!(named(HOST_DOWN_SECONDS, false), "crashed, or the host did");
        assert!(!named(HOST_DOWN_SECONDS * 2.0, true), "restarting");
        assert!(!named(LEFT_DOWN_SECONDS - 1.0, true), "a slow restart");
        assert!(named(LEFT_DOWN_SECONDS, true), "left and never came back");
        let down = one_host_silent(PortState::Silent {
            seconds: 45.0,
            left: false,
        });
        assert_eq!(down.verdicts[0].kind, Kind::Host);
        assert_eq!(down.verdicts[0].silent_seconds, Some(45.0));
        assert_eq!(down.verdicts[0].through.lost, 6 * 2 * 30);
        assert_eq!(down.verdicts[0].lossy_paths, 6 * 2);
        // Missing, not lost: the live hosts are not blamed for the silent one.
        assert_eq!(down.total.lost, 0);
    }

    #[test]
    fn the_background_bound_is_above_the_estimate_most_where_few_probes_say_it() {
        let c = |sent, lost| Counts { sent, lost };
        let l = -P_BOUND_ALPHA.ln();
        // Nothing lost in 250 000: up to 2L / n, not the estimate's 0.5 / n.
        assert!((background_bound(c(250_000, 0)) - 2.0 * l / 250_001.0).abs() < 1e-12);
        assert!(background_bound(c(250_000, 0)) > 20.0 * background(c(250_000, 0)));
        // 160 lost in 16 million: a third above the estimate; 16 000: a few percent.
        let ratio = |sent, lost| background_bound(c(sent, lost)) / background(c(sent, lost));
        assert!((1.2..1.5).contains(&ratio(16_000_000, 160)));
        assert!((1.0..1.05).contains(&ratio(16_000_000, 16_000)));
        // P(Poisson(lambda) <= 3) at the bound for 3 lost is under the alpha.
        let lambda = background_bound(c(1_000_000, 3)) * 1_000_001.0;
        let cdf: f64 = (0..=3)
            .map(|i| {
                (-lambda + i as f64 * lambda.ln() - (1..=i).map(|j| (j as f64).ln()).sum::<f64>())
                    .exp()
            })
            .sum();
        assert!(cdf < P_BOUND_ALPHA, "{cdf}");
    }

    #[test]
    fn the_score_wants_enough_loss_at_enough_times_the_background() {
        let c = |sent, lost| Counts { sent, lost };
        assert_eq!(score(c(1_000, 2), 1e-5), None, "fewer than MIN_LOST");
        assert_eq!(score(c(1_000, 3), 1e-3), None, "3e-3 is under 4 x 1e-3");
        let g = score(c(1_000, 10), 1e-3).unwrap();
        // n KL(0.01 || 0.001) = 10 ln 10 + 990 ln(0.99 / 0.999).
        assert!((g - (10.0 * 10f64.ln() + 990.0 * (0.99f64 / 0.999).ln())).abs() < 1e-9);
    }
}
