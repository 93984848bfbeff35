//! The probes of `/api/v1/fabric`: which paths lose probes and which component they share
//! (`probe::localize`, docs/localization.md), in words. In the demo every simulated host's
//! probe counts are seen, so every host's ports are live; under `serve`, this node's own ports
//! and the paths between them.
//!
//! The localizer reads 2-minute counts; the page keeps each host's counts as it reads them
//! ([`ProbeMemory`], one copy every 5 s at most, as [`super::fabric_json::RateMemory`] keeps
//! walks) and localizes between the newest copy at least [`WINDOW`] old and now, or since the
//! probing began when that is more recent. Under [`MIN_WINDOW`], it names nothing: a path that
//! lost one probe of the three it sent is not yet a third lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::probe::collector::ProbeCollector;
use crate::probe::localize::{self, Kind, Leaf, LivePort, PathCounts, PortId, Verdict};
use crate::probe::stats::Stats;

/// The window the rules use.
pub const WINDOW: Duration = Duration::from_secs(120);
/// Nothing is named over a shorter window.
pub const MIN_WINDOW: Duration = Duration::from_secs(30);
/// A host's counts are kept at most this often.
const KEEP_EVERY: Duration = Duration::from_secs(5);
/// At most this many failing paths are listed (worst first); the count says how many fail.
pub(crate) const MAX_PATHS_SHOWN: usize = 100;

/// One probing host the page reads.
pub(crate) struct ProbeFeed<'a> {
    /// The host's name on the page (its node agent's).
    pub host: &'a str,
    pub collector: &'a ProbeCollector,
}

/// One port's and one path's counts at one instant.
#[derive(Debug, Default)]
struct Counts {
    /// Sent by each port, and whether its device is gone.
    ports: HashMap<PortId, (u64, bool)>,
    /// Sent and lost on each path (summed over path kinds).
    paths: HashMap<(PortId, PortId), (u64, u64)>,
}

impl Counts {
    fn of(stats: &Stats) -> Counts {
        let id = |p: &crate::probe::targets::Port| PortId {
            host: p.host.clone(),
            device: p.device.clone(),
            port: p.port,
        };
        let mut counts = Counts::default();
        for port in &stats.ports {
            counts
                .ports
                .insert(id(&port.port), (port.sent.iter().sum(), port.gone));
        }
        for (key, target) in stats.all_targets() {
            let Some(from) = stats.ports.get(key.from) else {
                continue;
            };
            let entry = counts
                .paths
                .entry((id(&from.port), id(&key.to)))
                .or_default();
            entry.0 += target.sent;
            entry.1 += target.lost;
        }
        counts
    }
}

/// A counter's increase: a counter that went back (forgotten and counted afresh) counts from 0.
fn increase(now: u64, before: u64) -> u64 {
    if now >= before {
        now - before
    } else {
        now
    }
}

/// The counts of each probing host as the page saw them.
#[derive(Default)]
pub(crate) struct ProbeMemory {
    hosts: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    started: Instant,
    copies: VecDeque<(Instant, Arc<Counts>)>,
}

impl Kept {
    /// Keeps `counts` (seen at `now`) when the last copy is old enough, forgets copies too old
    /// to serve, and returns the baseline: the newest copy at least [`WINDOW`] old, else the
    /// oldest (the start of probing, all zero, is one while recent enough).
    fn baseline(&mut self, now: Instant, counts: &Arc<Counts>) -> (Instant, Arc<Counts>) {
        let age = |at: Instant| now.saturating_duration_since(at);
        if self
            .copies
            .back()
            .is_none_or(|(at, _)| age(*at) >= KEEP_EVERY)
        {
            self.copies.push_back((now, counts.clone()));
        }
        while self
            .copies
            .front()
            .is_some_and(|(at, _)| age(*at) > 2 * WINDOW)
        {
            self.copies.pop_front();
        }
        // The newest copy at least WINDOW old; older copies are of no more use.
        while self.copies.get(1).is_some_and(|(at, _)| age(*at) >= WINDOW) {
            self.copies.pop_front();
        }
        let oldest = self.copies.front().cloned();
        let start =
            (age(self.started) <= 2 * WINDOW).then(|| (self.started, Arc::new(Counts::default())));
        match (oldest, start) {
            (Some(copy), _) if age(copy.0) >= WINDOW => copy,
            // Not watched for WINDOW yet: since the probing began, when that is more recent
            // than twice the window.
            (Some(copy), Some(start)) if start.0 < copy.0 => start,
            (Some(copy), _) => copy,
            (None, Some(start)) => start,
            (None, None) => (now, counts.clone()),
        }
    }
}

/// A port on the page.
pub(crate) type PortRef = PortId;

#[derive(Debug, Clone, Serialize)]
pub struct ProbesView {
    /// Seconds the counts cover (the shortest of the hosts').
    pub window_seconds: f64,
    /// Whether the window is long enough to name anything ([`MIN_WINDOW`]).
    pub localized: bool,
    pub live_ports: usize,
    /// Paths between live ports that sent probes in the window.
    pub paths: usize,
    /// `F`: the paths that lost probes in the window.
    pub failing_path_count: usize,
    /// The failing paths, worst first, at most [`MAX_PATHS_SHOWN`].
    pub failing_paths: Vec<FailingPathView>,
    pub verdicts: Vec<VerdictView>,
    /// What the probes say, in one sentence.
    pub summary: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailingPathView {
    pub from: PortRef,
    pub to: PortRef,
    pub sent: u64,
    pub lost: u64,
    /// Lost over sent in the window.
    pub loss_share: f64,
}

/// A verdict labelled as `rdma_localization_verdict`, with its evidence in words.
#[derive(Debug, Clone, Serialize)]
pub struct VerdictView {
    pub kind: Kind,
    pub host: Option<String>,
    pub device: Option<String>,
    pub port: Option<u32>,
    pub switch: Option<String>,
    pub switch_port: Option<String>,
    pub failing_paths: usize,
    pub explained_ratio: f64,
    /// The loss share of the probes through it.
    pub mean_path_loss: Option<f64>,
    /// The loss share of the paths that avoid it.
    pub background_loss: f64,
    /// 1 less the chance that background loss alone explains it.
    pub confidence: f64,
    pub answer_delay_seconds: Option<f64>,
    pub evidence: String,
    /// The NICs at its end of the failing paths it explains: its blast radius.
    pub hurts: Vec<PortId>,
}

/// The probes of `feeds` over the window; `leaves` is where LLDP puts each port (keyed by the
/// page's host name, device and port). `None` when no host probes.
pub fn view(
    memory: &ProbeMemory,
    feeds: &[ProbeFeed<'_>],
    leaves: &HashMap<PortId, Leaf>,
    now: Instant,
) -> Option<ProbesView> {
    if feeds.is_empty() {
        return None;
    }
    let mut window: Option<Duration> = None;
    let mut ports: Vec<LivePort> = Vec::new();
    let mut paths: Vec<PathCounts> = Vec::new();
    {
        let mut hosts = memory.hosts.lock().unwrap_or_else(|p| p.into_inner());
        for feed in feeds {
            let Some(stats) = feed.collector.stats() else {
                continue;
            };
            let started = feed.collector.started();
            let counts = Arc::new(Counts::of(&stats));
            let kept = hosts.entry(feed.host.to_string()).or_insert_with(|| Kept {
                started,
                copies: VecDeque::new(),
            });
            if kept.started != started {
                // A new probing loop (a reload): its counts start again.
                *kept = Kept {
                    started,
                    copies: VecDeque::new(),
                };
            }
            let (at, before) = kept.baseline(now, &counts);
            let covers = now.saturating_duration_since(at);
            window = Some(window.map_or(covers, |w| w.min(covers)));
            for (id, (sent, gone)) in &counts.ports {
                if *gone {
                    continue;
                }
                let before = before.ports.get(id).map_or(0, |p| p.0);
                // The leaf is found by the page's host name: the probe's may be configured.
                let page_id = PortId {
                    host: feed.host.to_string(),
                    ..id.clone()
                };
                ports.push(LivePort {
                    id: id.clone(),
                    leaf: leaves.get(&page_id).cloned(),
                    sent: increase(*sent, before),
                    lost: 0,
                    answer_delay_seconds: answer_delay(&stats, id, now),
                });
            }
            for ((from, to), (sent, lost)) in &counts.paths {
                let (sent_before, lost_before) = before
                    .paths
                    .get(&(from.clone(), to.clone()))
                    .copied()
                    .unwrap_or_default();
                paths.push(PathCounts {
                    from: from.clone(),
                    to: to.clone(),
                    sent: increase(*sent, sent_before),
                    lost: increase(*lost, lost_before),
                });
            }
        }
        // Hosts no longer fed are forgotten.
        let fed: HashSet<&str> = feeds.iter().map(|f| f.host).collect();
        hosts.retain(|host, _| fed.contains(host.as_str()));
    }
    let window = window?;
    // A port's loss counts only probes toward live targets.
    let live: HashSet<PortId> = ports.iter().map(|p| p.id.clone()).collect();
    let mut lost: HashMap<&PortId, u64> = HashMap::new();
    for path in paths.iter().filter(|p| live.contains(&p.to)) {
        *lost.entry(&path.from).or_default() += path.lost;
    }
    for port in &mut ports {
        port.lost = lost.get(&port.id).copied().unwrap_or(0);
    }
    ports.sort_by(|a, b| a.id.cmp(&b.id));
    let localized = window >= MIN_WINDOW;
    let mut found = localize::localize(&ports, &paths);
    if !localized {
        found.verdicts.clear();
    }
    let f = found.failing.len();
    let several_leaves = found
        .verdicts
        .iter()
        .filter(|v| matches!(v.kind, Kind::Leaf | Kind::Uplink))
        .count()
        > 1;
    let verdicts = found
        .verdicts
        .iter()
        .map(|v| VerdictView {
            kind: v.kind,
            host: v.host.clone(),
            device: v.device.clone(),
            port: v.port,
            switch: v.switch.clone(),
            switch_port: v.switch_port.clone(),
            failing_paths: v.failing_paths,
            explained_ratio: v.explained_ratio,
            mean_path_loss: v.mean_path_loss,
            background_loss: v.background_loss,
            confidence: v.confidence,
            answer_delay_seconds: v.answer_delay_seconds,
            evidence: evidence(v, several_leaves),
            hurts: v.hurts.clone(),
        })
        .collect();
    let summary = summary(
        window,
        localized,
        ports.len(),
        found.paths,
        f,
        found.background_loss,
    );
    Some(ProbesView {
        window_seconds: window.as_secs_f64(),
        localized,
        live_ports: ports.len(),
        paths: found.paths,
        failing_path_count: f,
        failing_paths: found
            .failing
            .into_iter()
            .take(MAX_PATHS_SHOWN)
            .map(|p| FailingPathView {
                from: p.from,
                to: p.to,
                sent: p.sent,
                lost: p.lost,
                loss_share: p.loss_ratio,
            })
            .collect(),
        verdicts,
        summary,
    })
}

/// A port's responder's mean answer delay over its last answers (what
/// `rdma_probe_answer_delay_seconds` serves); `None` when it answered none lately.
fn answer_delay(stats: &Stats, port: &PortId, now: Instant) -> Option<f64> {
    stats
        .ports
        .iter()
        .find(|p| {
            p.port.host == port.host && p.port.device == port.device && p.port.port == port.port
        })
        .map(|p| p.answer_delays.mean_seconds(now))
        .filter(|delay| *delay > 0.0)
}

fn percent(share: f64) -> String {
    if share > 0.0 && share < 1e-5 {
        "<0.001%".into()
    } else if share > 0.0 && share < 1e-3 {
        format!("{:.3}%", share * 100.0)
    } else if share > 0.0 && share < 0.01 {
        format!("{:.1}%", share * 100.0)
    } else {
        format!("{:.0}%", share * 100.0)
    }
}

fn port_words(v: &Verdict) -> String {
    format!(
        "{} {} port {}",
        v.host.as_deref().unwrap_or("?"),
        v.device.as_deref().unwrap_or("?"),
        v.port.map_or("?".into(), |p| p.to_string())
    )
}

/// Why the verdict stands, in the words of docs/localization.md.
/// A verdict's evidence in words, then what it hurts.
fn evidence(v: &Verdict, several_leaves: bool) -> String {
    let mut words = why(v, several_leaves);
    words.push_str(&hurts_words(&v.hurts));
    words
}

/// At most this many of the NICs a verdict hurts are named in its evidence.
const HURTS_NAMED: usize = 6;

/// " It hurts 3 NICs on 2 hosts: a mlx5_0, …": the blast radius, empty when none.
fn hurts_words(hurts: &[PortId]) -> String {
    if hurts.is_empty() {
        return String::new();
    }
    let hosts: HashSet<&str> = hurts.iter().map(|p| p.host.as_str()).collect();
    let named: Vec<String> = hurts
        .iter()
        .take(HURTS_NAMED)
        .map(|p| format!("{} {}", p.host, p.device))
        .collect();
    let more = hurts.len().saturating_sub(HURTS_NAMED);
    format!(
        " It hurts {} NIC{} on {} host{}: {}{}.",
        hurts.len(),
        if hurts.len() == 1 { "" } else { "s" },
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// Why a verdict names what it names, in words.
fn why(v: &Verdict, several_leaves: bool) -> String {
    let loss = v.mean_path_loss.map_or("?".into(), percent);
    let weighed = format!(
        "{} of the {} probes through it were lost ({loss}), against {} on the paths that avoid \
         it; {} paths through it lost probes, {} of the window's lost probes (confidence {})",
        v.lost,
        v.sent,
        percent(v.background_loss),
        v.failing_paths,
        percent(v.explained_ratio),
        percent(v.confidence),
    );
    let leaf = v.switch.as_deref().unwrap_or("?");
    let both = if several_leaves {
        " With two leaves every path between them has an end under each: each is named."
    } else {
        ""
    };
    match v.kind {
        Kind::Nic => {
            let wired = match (&v.switch, &v.switch_port) {
                (Some(switch), Some(port)) => format!("it hangs off {switch} port {port} (LLDP)"),
                (Some(switch), None) => format!("it hangs off {switch} (LLDP)"),
                _ => "no switch port names it over LLDP".into(),
            };
            format!(
                "{}: {weighed}; {wired}. The NIC, its cable or that switch port: probes cannot \
                 tell the two ends of one link apart.",
                port_words(v)
            )
        }
        Kind::Host => {
            let ports = v.host_ports.map_or(String::new(), |(all, losing)| {
                format!(
                    " {losing} of its {all} ports lose at least {}.",
                    percent(localize::HOST_PORT_LOSS)
                )
            });
            format!(
                "{}: {weighed}. Its loss is spread over its ports, not one NIC's: the host \
                 itself (its PCIe, driver or network setup).{ports}",
                v.host.as_deref().unwrap_or("?"),
            )
        }
        Kind::Leaf => format!(
            "Paths that cross {leaf}'s uplinks (one end under {leaf}): {weighed}. One direction \
             loses {} or more: {leaf} forwards part of its flows into an ECMP member that \
             delivers nothing (a dead uplink it did not withdraw, a wrong forwarding entry).\
             {both}",
            percent(localize::LEAF_LOSS)
        ),
        Kind::Uplink => format!(
            "Paths that cross {leaf}'s uplinks (one end under {leaf}): {weighed}. Each direction \
             loses less than {}: a link between {leaf} and the spine drops part of what it \
             carries (an optic, a cable). ECMP hides which one: look at {leaf}'s uplink ports' \
             errors and discards.{both}",
            percent(localize::LEAF_LOSS)
        ),
        Kind::Spine => format!(
            "The paths between leaves: {weighed}. The loss is spread over many leaves and ports, \
             and no few of them explain it: the spine layer."
        ),
        Kind::Responder => format!(
            "{} took {:.1} ms on average to answer probes (more than {:.0} ms): the host is \
             busy, not the network; the network RTT, the responder's delay taken out, stays \
             where it was.",
            port_words(v),
            v.answer_delay_seconds.unwrap_or(0.0) * 1e3,
            localize::SLOW_RESPONDER_SECONDS * 1e3
        ),
    }
}

fn summary(
    window: Duration,
    localized: bool,
    ports: usize,
    paths: usize,
    f: usize,
    background: f64,
) -> String {
    let seconds = window.as_secs_f64();
    if !localized {
        return format!(
            "Gathering: the counts cover {seconds:.0} s of probing; verdicts need {} s (then \
             the last {} s).",
            MIN_WINDOW.as_secs(),
            WINDOW.as_secs()
        );
    }
    let over = format!("over the last {seconds:.0} s, between {ports} live ports");
    let background = if background > 1e-6 {
        format!(
            "; the background loss, no verdict's, is {}",
            percent(background)
        )
    } else {
        String::new()
    };
    match f {
        0 => format!("✓ No path's loss stands out {over} ({paths} paths){background}."),
        f => format!("{f} of {paths} paths lose more than the background {over}{background}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(sent: u64) -> Arc<Counts> {
        let mut counts = Counts::default();
        counts.ports.insert(
            PortId {
                host: "a".into(),
                device: "mlx5_0".into(),
                port: 1,
            },
            (sent, false),
        );
        Arc::new(counts)
    }

    fn sent(c: &Arc<Counts>) -> u64 {
        c.ports.values().next().map_or(0, |p| p.0)
    }

    /// Since the probing began while it began less than the window ago; then the newest copy
    /// at least the window old; a page opened long after the start gathers first.
    #[test]
    fn the_baseline_is_the_start_then_the_copy_a_window_old() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut kept = Kept {
            started: t0,
            copies: VecDeque::new(),
        };
        let (base, c) = kept.baseline(at(3), &counts(3));
        assert_eq!((base, sent(&c)), (t0, 0));
        for s in (5..=130).step_by(2) {
            let (base, c) = kept.baseline(at(s), &counts(s));
            if s < 123 {
                assert_eq!(base, t0, "{s}");
            } else {
                // The newest copy 120 s old or more: kept every 5 s at most.
                let age = at(s).duration_since(base).as_secs();
                assert!((120..126).contains(&age), "{s}: {age}");
                assert_eq!(sent(&c), s - age);
            }
        }
        assert!(kept.copies.len() <= 27, "{}", kept.copies.len());

        // Probing began an hour ago: the window starts with the page.
        let mut late = Kept {
            started: t0,
            copies: VecDeque::new(),
        };
        let (base, _) = late.baseline(at(3_600), &counts(3_600));
        assert_eq!(base, at(3_600));
        let (base, c) = late.baseline(at(3_640), &counts(3_640));
        assert_eq!((base, sent(&c)), (at(3_600), 3_600));
        // Unwatched for longer than twice the window: it starts again.
        let (base, _) = late.baseline(at(4_000), &counts(4_000));
        assert_eq!(base, at(4_000));
    }

    #[test]
    fn a_counter_that_went_back_counts_from_zero() {
        assert_eq!(increase(10, 4), 6);
        assert_eq!(increase(3, 40), 3);
    }

    #[test]
    fn the_evidence_says_why() {
        let mut v = Verdict {
            kind: Kind::Uplink,
            host: None,
            device: None,
            port: None,
            switch: Some("leaf1".into()),
            switch_port: None,
            failing_paths: 40,
            explained_ratio: 1.0,
            mean_path_loss: Some(0.021),
            sent: 4_000,
            lost: 84,
            background_loss: 2e-5,
            confidence: 0.999_999_9,
            host_ports: None,
            answer_delay_seconds: None,
            hurts: Vec::new(),
        };
        let words = evidence(&v, false);
        assert!(
            words.starts_with(
                "Paths that cross leaf1's uplinks (one end under leaf1): 84 of \
                 the 4000 probes through it were lost (2%), against 0.002% on the paths that \
                 avoid it; 40 paths through it lost probes, 100% of the window's lost probes \
                 (confidence 100%)"
            ),
            "{words}"
        );
        assert!(words.contains("less than 20%"), "{words}");
        v.kind = Kind::Nic;
        v.host = Some("gpu-node-02".into());
        v.device = Some("mlx5_3".into());
        v.port = Some(1);
        v.switch_port = Some("Ethernet2/1".into());
        let words = evidence(&v, false);
        assert!(
            words.starts_with("gpu-node-02 mlx5_3 port 1: 84 of the 4000 probes")
                && words.contains("it hangs off leaf1 port Ethernet2/1 (LLDP)"),
            "{words}"
        );
        v.kind = Kind::Responder;
        v.answer_delay_seconds = Some(0.0042);
        let words = evidence(&v, false);
        assert!(words.contains("took 4.2 ms on average"), "{words}");
        // The blast radius closes the evidence.
        let port = |host: &str, device: &str| PortId {
            host: host.into(),
            device: device.into(),
            port: 1,
        };
        v.kind = Kind::Uplink;
        v.hurts = (0..8)
            .map(|h| port(&format!("gpu-node-{h:02}"), "mlx5_0"))
            .collect();
        v.hurts.push(port("gpu-node-00", "mlx5_4"));
        let words = evidence(&v, false);
        assert!(
            words.ends_with(
                " It hurts 9 NICs on 8 hosts: gpu-node-00 mlx5_0, gpu-node-01 mlx5_0, \
                 gpu-node-02 mlx5_0, gpu-node-03 mlx5_0, gpu-node-04 mlx5_0, gpu-node-05 mlx5_0 \
                 and 3 more."
            ),
            "{words}"
        );
        v.hurts.truncate(1);
        assert!(words_end(
            &evidence(&v, false),
            " It hurts 1 NIC on 1 host: gpu-node-00 mlx5_0."
        ));
    }

    fn words_end(words: &str, end: &str) -> bool {
        words.ends_with(end) || panic!("{words:?} does not end with {end:?}")
    }

    #[test]
    fn the_summary_names_the_background() {
        let window = Duration::from_secs(120);
        assert_eq!(
            summary(window, true, 32, 992, 0, 0.0),
            "✓ No path's loss stands out over the last 120 s, between 32 live ports (992 paths)."
        );
        assert_eq!(
            summary(window, true, 32, 992, 12, 2e-4),
            "12 of 992 paths lose more than the background over the last 120 s, between 32 live \
             ports; the background loss, no verdict's, is 0.020%."
        );
    }
}
