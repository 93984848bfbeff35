//! From failing probe paths to the component to blame (docs/localization.md), for the landing
//! page: the recording rules of `alerts/rdma-rules.yml` (group `rdma-probe-localization`)
//! written once more, over counts the caller took between two snapshots. Pure: no clock, no
//! I/O, no probe state.
//!
//! 007's idea (NSDI 2018) on what an exporter knows: which ports lose probes to which, and which
//! leaf port each NIC is cabled to. ECMP hides which spine a flow took, so a leaf's uplinks are
//! named together, and one fault at a time is assumed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

/// Nothing is named while fewer paths fail.
pub const MIN_FAILING_PATHS: usize = 3;
/// The share of the failing paths a `nic`, `leaf`, `uplink` or `spine` candidate must explain.
pub const MIN_EXPLAINED: f64 = 0.8;
/// A host's port that loses at least this share of its probes counts toward `host`.
pub const HOST_PORT_LOSS: f64 = 0.8;
/// ... and at least this many of its ports must.
pub const HOST_MIN_PORTS: usize = 2;
/// Failing paths across a leaf's uplinks that lose at least this share (their mean) make it
/// `leaf` (an ECMP member that delivers nothing), less `uplink` (a link that drops some).
pub const LEAF_LOSS: f64 = 0.2;
/// A responder slower than this on average (seconds) is `responder`: a busy host.
pub const SLOW_RESPONDER_SECONDS: f64 = 5e-3;

/// A probing port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PortId {
    pub host: String,
    pub device: String,
    pub port: u32,
}

/// The leaf a port is cabled to, as LLDP names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub switch: String,
    pub switch_port: Option<String>,
}

/// A live port (its exporter answers and it still probes) and its counts over the window.
#[derive(Debug, Clone)]
pub struct LivePort {
    pub id: PortId,
    /// `None`: no switch names it over LLDP; it takes part in the `nic` and `host` verdicts only.
    pub leaf: Option<Leaf>,
    /// Every probe it sent.
    pub sent: u64,
    /// Those lost toward live targets (the caller leaves out probes to ports that are not live).
    pub lost: u64,
    /// Its responder's mean delay in answering, seconds, when known.
    pub answer_delay_seconds: Option<f64>,
}

impl LivePort {
    /// Lost toward live targets over all it sent; `None` when it sent nothing.
    pub fn loss_ratio(&self) -> Option<f64> {
        (self.sent > 0).then(|| (self.lost as f64 / self.sent as f64).min(1.0))
    }
}

/// One path's counts over the window.
#[derive(Debug, Clone)]
pub struct PathCounts {
    pub from: PortId,
    pub to: PortId,
    pub sent: u64,
    pub lost: u64,
}

/// What a verdict blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A port: the NIC, its cable or its leaf port.
    Nic,
    /// A whole host.
    Host,
    /// A leaf that forwards into an ECMP member that delivers nothing.
    Leaf,
    /// A leaf's uplinks: a link that drops part of what it carries.
    Uplink,
    /// The spine layer.
    Spine,
    /// A port's responder is slow: a busy host, not the network.
    Responder,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Nic,
        Kind::Host,
        Kind::Leaf,
        Kind::Uplink,
        Kind::Spine,
        Kind::Responder,
    ];

    /// The `kind` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Nic => "nic",
            Kind::Host => "host",
            Kind::Leaf => "leaf",
            Kind::Uplink => "uplink",
            Kind::Spine => "spine",
            Kind::Responder => "responder",
        }
    }
}

/// One verdict, labelled as the rules label `rdma:probe_suspect:*` (`None` where the rules
/// leave a label empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub kind: Kind,
    pub host: Option<String>,
    pub device: Option<String>,
    pub port: Option<u32>,
    pub switch: Option<String>,
    pub switch_port: Option<String>,
    /// The failing paths that agree (through the candidate); 0 for `responder`.
    pub failing_paths: usize,
    /// `failing_paths` over all failing paths (at most 1); 0 for `responder`.
    pub explained_ratio: f64,
    /// The mean loss ratio of the agreeing paths (`leaf`, `uplink`, `spine`, `nic`).
    pub mean_path_loss: Option<f64>,
    /// `host`: its live ports, and those losing at least [`HOST_PORT_LOSS`].
    pub host_ports: Option<(usize, usize)>,
    /// `responder`: its mean answer delay, seconds.
    pub answer_delay_seconds: Option<f64>,
}

impl Verdict {
    fn new(kind: Kind) -> Verdict {
        Verdict {
            kind,
            host: None,
            device: None,
            port: None,
            switch: None,
            switch_port: None,
            failing_paths: 0,
            explained_ratio: 0.0,
            mean_path_loss: None,
            host_ports: None,
            answer_delay_seconds: None,
        }
    }
}

/// A path between two live ports that lost probes in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct FailingPath {
    pub from: PortId,
    pub to: PortId,
    pub sent: u64,
    pub lost: u64,
    /// Lost over sent (1 when it lost probes sent before the window and sent none in it).
    pub loss_ratio: f64,
}

/// The outcome: the verdicts (the most specific loss verdict, and any `responder`) and every
/// failing path, worst first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Localization {
    pub verdicts: Vec<Verdict>,
    pub failing: Vec<FailingPath>,
    /// Paths between live ports that sent or lost in the window.
    pub paths: usize,
}

/// The verdicts of docs/localization.md over one window. Paths with an end that is not live are
/// left out (a host that is down is not the network's fault), and so are paths toward a slow
/// responder (its probes time out because its host is busy); the same path given twice (one
/// entry per path kind) counts once, with its counts summed.
pub fn localize(ports: &[LivePort], paths: &[PathCounts]) -> Localization {
    let live: HashMap<&PortId, &LivePort> = ports.iter().map(|p| (&p.id, p)).collect();
    let mut summed: BTreeMap<(&PortId, &PortId), (u64, u64)> = BTreeMap::new();
    for path in paths {
        if path.from == path.to || !live.contains_key(&path.from) || !live.contains_key(&path.to) {
            continue;
        }
        // A busy responder's timeouts are its host's doing, not the network's.
        if live[&path.to]
            .answer_delay_seconds
            .is_some_and(|d| d > SLOW_RESPONDER_SECONDS)
        {
            continue;
        }
        if path.sent == 0 && path.lost == 0 {
            continue;
        }
        let entry = summed.entry((&path.from, &path.to)).or_default();
        entry.0 += path.sent;
        entry.1 += path.lost;
    }
    let mut failing: Vec<FailingPath> = summed
        .iter()
        .filter(|(_, (_, lost))| *lost > 0)
        .map(|((from, to), (sent, lost))| FailingPath {
            from: (*from).clone(),
            to: (*to).clone(),
            sent: *sent,
            lost: *lost,
            loss_ratio: *lost as f64 / (*sent).max(*lost) as f64,
        })
        .collect();
    let mut verdicts = loss_verdicts(&live, ports, &failing);
    verdicts.extend(responders(ports));
    failing.sort_by(|a, b| {
        b.loss_ratio
            .total_cmp(&a.loss_ratio)
            .then(b.lost.cmp(&a.lost))
            .then_with(|| (&a.from, &a.to).cmp(&(&b.from, &b.to)))
    });
    Localization {
        verdicts,
        failing,
        paths: summed.len(),
    }
}

fn share(part: usize, all: usize) -> f64 {
    if all == 0 {
        0.0
    } else {
        (part as f64 / all as f64).min(1.0)
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// `nic`, else `host`, else `leaf`, else `uplink`, else `spine`; none while F < 3.
fn loss_verdicts(
    live: &HashMap<&PortId, &LivePort>,
    ports: &[LivePort],
    failing: &[FailingPath],
) -> Vec<Verdict> {
    let f = failing.len();
    if f < MIN_FAILING_PATHS {
        return Vec::new();
    }

    // nic: the failing paths from or to one port.
    let mut nics = Vec::new();
    for port in ports {
        let agree: Vec<&FailingPath> = failing
            .iter()
            .filter(|p| p.from == port.id || p.to == port.id)
            .collect();
        if share(agree.len(), f) >= MIN_EXPLAINED {
            let mut verdict = Verdict::new(Kind::Nic);
            verdict.host = Some(port.id.host.clone());
            verdict.device = Some(port.id.device.clone());
            verdict.port = Some(port.id.port);
            verdict.switch = port.leaf.as_ref().map(|l| l.switch.clone());
            verdict.switch_port = port.leaf.as_ref().and_then(|l| l.switch_port.clone());
            verdict.failing_paths = agree.len();
            verdict.explained_ratio = share(agree.len(), f);
            verdict.mean_path_loss = mean(agree.iter().map(|p| p.loss_ratio));
            nics.push(verdict);
        }
    }
    if !nics.is_empty() {
        return nics;
    }

    // host: two or more of its live ports lose 80 % of their probes.
    let hosts: BTreeSet<&str> = ports.iter().map(|p| p.id.host.as_str()).collect();
    let mut host_verdicts = Vec::new();
    for host in hosts {
        let own: Vec<&LivePort> = ports.iter().filter(|p| p.id.host == host).collect();
        let losing = own
            .iter()
            .filter(|p| p.loss_ratio().is_some_and(|r| r >= HOST_PORT_LOSS))
            .count();
        if losing < HOST_MIN_PORTS {
            continue;
        }
        let agree = failing
            .iter()
            .filter(|p| p.from.host == host || p.to.host == host)
            .count();
        let mut verdict = Verdict::new(Kind::Host);
        verdict.host = Some(host.to_string());
        verdict.failing_paths = agree;
        verdict.explained_ratio = share(agree, f);
        verdict.host_ports = Some((own.len(), losing));
        host_verdicts.push(verdict);
    }
    if !host_verdicts.is_empty() {
        return host_verdicts;
    }

    // The failing paths between two leaves (both ends' leaves known, and different).
    let leaf_of = |id: &PortId| {
        live.get(id)
            .and_then(|p| p.leaf.as_ref())
            .map(|l| l.switch.as_str())
    };
    let crossing: Vec<(&str, &str, f64)> = failing
        .iter()
        .filter_map(|p| {
            let (a, b) = (leaf_of(&p.from)?, leaf_of(&p.to)?);
            (a != b).then_some((a, b, p.loss_ratio))
        })
        .collect();

    // leaf or uplink: the failing paths with exactly one end under one leaf.
    let leaves: BTreeSet<&str> = crossing.iter().flat_map(|(a, b, _)| [*a, *b]).collect();
    let mut leaf_verdicts = Vec::new();
    for leaf in leaves {
        let agree: Vec<f64> = crossing
            .iter()
            .filter(|(a, b, _)| *a == leaf || *b == leaf)
            .map(|(_, _, loss)| *loss)
            .collect();
        if share(agree.len(), f) < MIN_EXPLAINED {
            continue;
        }
        let loss = mean(agree.iter().copied()).unwrap_or(0.0);
        let kind = if loss >= LEAF_LOSS {
            Kind::Leaf
        } else {
            Kind::Uplink
        };
        let mut verdict = Verdict::new(kind);
        verdict.switch = Some(leaf.to_string());
        verdict.failing_paths = agree.len();
        verdict.explained_ratio = share(agree.len(), f);
        verdict.mean_path_loss = Some(loss);
        leaf_verdicts.push(verdict);
    }
    // A `leaf` is more specific than an `uplink`: when both stand, the leaves alone are named.
    if leaf_verdicts.iter().any(|v| v.kind == Kind::Leaf) {
        leaf_verdicts.retain(|v| v.kind == Kind::Leaf);
    }
    if !leaf_verdicts.is_empty() {
        return leaf_verdicts;
    }

    // spine: most failing paths cross between leaves, and no leaf explains them.
    if share(crossing.len(), f) >= MIN_EXPLAINED {
        let mut verdict = Verdict::new(Kind::Spine);
        verdict.failing_paths = crossing.len();
        verdict.explained_ratio = share(crossing.len(), f);
        verdict.mean_path_loss = mean(crossing.iter().map(|(_, _, loss)| *loss));
        return vec![verdict];
    }
    Vec::new()
}

/// `responder`: each live port whose responder took more than 5 ms on average. No failing path
/// agrees or disagrees: it says the host is busy, whatever else is named.
fn responders(ports: &[LivePort]) -> Vec<Verdict> {
    ports
        .iter()
        .filter_map(|port| {
            let delay = port
                .answer_delay_seconds
                .filter(|d| *d > SLOW_RESPONDER_SECONDS)?;
            let mut verdict = Verdict::new(Kind::Responder);
            verdict.host = Some(port.id.host.clone());
            verdict.device = Some(port.id.device.clone());
            verdict.port = Some(port.id.port);
            verdict.answer_delay_seconds = Some(delay);
            Some(verdict)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic rail-optimized fabric: `hosts` hosts of 8 NICs, NIC n on leaf n % `leaves`,
    /// every port probing every other port `SENT` times in the window.
    struct Fabric {
        hosts: usize,
        leaves: usize,
        /// (host, nic) pairs that are not live (their host is down).
        down: Vec<usize>,
        /// Ports whose leaf no switch names.
        unwired: bool,
        delay: HashMap<(usize, usize), f64>,
    }

    const NICS: usize = 8;
    const SENT: u64 = 120;

    fn id(host: usize, nic: usize) -> PortId {
        PortId {
            host: format!("gpu-node-{:02}", host + 1),
            device: format!("mlx5_{nic}"),
            port: 1,
        }
    }

    fn leaf_name(leaf: usize) -> String {
        format!("leaf{}", leaf + 1)
    }

    impl Fabric {
        fn new(hosts: usize, leaves: usize) -> Fabric {
            Fabric {
                hosts,
                leaves,
                down: Vec::new(),
                unwired: false,
                delay: HashMap::new(),
            }
        }

        fn leaf(&self, nic: usize) -> usize {
            nic % self.leaves
        }

        /// Every port's and path's counts, `lost(from, to)` of `SENT` lost on each path.
        fn run(&self, lost: impl Fn((usize, usize), (usize, usize)) -> u64) -> Localization {
            let all: Vec<(usize, usize)> = (0..self.hosts)
                .flat_map(|h| (0..NICS).map(move |n| (h, n)))
                .collect();
            let mut paths = Vec::new();
            let mut ports = Vec::new();
            for &a in &all {
                let mut port_lost = 0;
                for &b in &all {
                    if a == b {
                        continue;
                    }
                    let l = lost(a, b).min(SENT);
                    if !self.down.contains(&b.0) {
                        port_lost += l;
                    }
                    paths.push(PathCounts {
                        from: id(a.0, a.1),
                        to: id(b.0, b.1),
                        sent: SENT,
                        lost: l,
                    });
                }
                if self.down.contains(&a.0) {
                    continue;
                }
                ports.push(LivePort {
                    id: id(a.0, a.1),
                    leaf: (!self.unwired).then(|| Leaf {
                        switch: leaf_name(self.leaf(a.1)),
                        switch_port: Some(format!("Ethernet{}/{}", a.1 / self.leaves + 1, a.0 + 1)),
                    }),
                    sent: SENT * (all.len() as u64 - 1),
                    lost: port_lost,
                    answer_delay_seconds: Some(*self.delay.get(&a).unwrap_or(&40e-6)),
                });
            }
            localize(&ports, &paths)
        }

        /// Whether a path between `a` and `b` crosses `leaf`'s uplinks.
        fn crosses(&self, leaf: usize, a: (usize, usize), b: (usize, usize)) -> bool {
            (self.leaf(a.1) == leaf) != (self.leaf(b.1) == leaf)
        }
    }

    /// A deterministic spread of losses: about `ratio` of `SENT`, 0 on some paths.
    fn some(a: (usize, usize), b: (usize, usize), ratio: f64) -> u64 {
        let hash = (a.0 * 31 + a.1 * 7 + b.0 * 13 + b.1 * 3) % 4;
        let base = (SENT as f64 * ratio).round() as u64;
        match hash {
            0 => 0,
            1 => base,
            2 => base + 1,
            _ => base.saturating_sub(1).max(1),
        }
    }

    fn kinds(l: &Localization) -> Vec<(Kind, Option<&str>)> {
        l.verdicts
            .iter()
            .map(|v| (v.kind, v.switch.as_deref().or(v.host.as_deref())))
            .collect()
    }

    #[test]
    fn a_nic_fault_names_only_that_nic_and_its_leaf_port() {
        let fabric = Fabric::new(4, 2);
        let bad = (1, 3);
        let l = fabric.run(|a, b| {
            if a == bad || b == bad {
                some(a, b, 0.3)
            } else {
                0
            }
        });
        assert_eq!(l.verdicts.len(), 1, "{:?}", l.verdicts);
        let v = &l.verdicts[0];
        assert_eq!(v.kind, Kind::Nic);
        assert_eq!(v.host.as_deref(), Some("gpu-node-02"));
        assert_eq!(v.device.as_deref(), Some("mlx5_3"));
        assert_eq!(v.port, Some(1));
        assert_eq!(v.switch.as_deref(), Some("leaf2"));
        assert_eq!(v.switch_port.as_deref(), Some("Ethernet2/2"));
        assert_eq!(v.explained_ratio, 1.0);
        assert_eq!(v.failing_paths, l.failing.len());
        assert!(l
            .failing
            .iter()
            .all(|p| p.from == id(1, 3) || p.to == id(1, 3)));
    }

    #[test]
    fn a_lossy_uplink_on_one_of_three_leaves_names_uplink_on_that_leaf() {
        let fabric = Fabric::new(4, 3);
        let l = fabric.run(|a, b| {
            if fabric.crosses(0, a, b) {
                some(a, b, 0.02)
            } else {
                0
            }
        });
        assert_eq!(
            kinds(&l),
            [(Kind::Uplink, Some("leaf1"))],
            "{:?}",
            l.verdicts
        );
        let v = &l.verdicts[0];
        assert_eq!(v.explained_ratio, 1.0);
        assert!(v.mean_path_loss.unwrap() < 0.05, "{v:?}");
        assert_eq!((&v.host, &v.device, &v.switch_port), (&None, &None, &None));
        // Paths that stay under leaf2 and leaf3, or cross between them, do not fail.
        let nic = |id: &PortId| (0, id.device["mlx5_".len()..].parse::<usize>().unwrap());
        assert!(l
            .failing
            .iter()
            .all(|p| fabric.crosses(0, nic(&p.from), nic(&p.to))));
    }

    #[test]
    fn an_ecmp_member_that_delivers_nothing_names_the_leaf() {
        // Half the flows across leaf1's uplinks hash onto a member that drops them all.
        let fabric = Fabric::new(4, 3);
        let l = fabric.run(|a, b| if fabric.crosses(0, a, b) { SENT / 2 } else { 0 });
        assert_eq!(kinds(&l), [(Kind::Leaf, Some("leaf1"))], "{:?}", l.verdicts);
        assert!((l.verdicts[0].mean_path_loss.unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn with_two_leaves_a_lossy_uplink_names_both() {
        // Every path between the leaves has an end under each: they cannot be told apart.
        let fabric = Fabric::new(4, 2);
        let l = fabric.run(|a, b| {
            if fabric.crosses(0, a, b) {
                some(a, b, 0.02)
            } else {
                0
            }
        });
        assert_eq!(
            kinds(&l),
            [(Kind::Uplink, Some("leaf1")), (Kind::Uplink, Some("leaf2"))],
            "{:?}",
            l.verdicts
        );
    }

    #[test]
    fn a_spine_fault_seen_from_every_leaf_names_the_spine() {
        let fabric = Fabric::new(4, 4);
        let l = fabric.run(|a, b| {
            if fabric.leaf(a.1) != fabric.leaf(b.1) {
                some(a, b, 0.05)
            } else {
                0
            }
        });
        assert_eq!(kinds(&l), [(Kind::Spine, None)], "{:?}", l.verdicts);
        assert_eq!(l.verdicts[0].explained_ratio, 1.0);
    }

    #[test]
    fn a_host_that_loses_everything_names_the_host_and_no_nic() {
        let fabric = Fabric::new(4, 2);
        let l = fabric.run(|a, b| if a.0 == 2 || b.0 == 2 { SENT } else { 0 });
        assert_eq!(
            kinds(&l),
            [(Kind::Host, Some("gpu-node-03"))],
            "{:?}",
            l.verdicts
        );
        let v = &l.verdicts[0];
        assert_eq!(v.host_ports, Some((8, 8)));
        assert_eq!(v.explained_ratio, 1.0);
        assert_eq!(v.failing_paths, l.failing.len());
        assert_eq!((&v.device, &v.switch), (&None, &None));
    }

    #[test]
    fn fewer_than_three_failing_paths_name_nothing() {
        let fabric = Fabric::new(4, 2);
        let l =
            fabric.run(|a, b| u64::from((a, b) == ((0, 0), (1, 1)) || (a, b) == ((2, 3), (3, 5))));
        assert!(l.verdicts.is_empty(), "{:?}", l.verdicts);
        assert_eq!(l.failing.len(), 2);
    }

    #[test]
    fn a_host_that_is_down_names_nothing() {
        // Its ports are not live: the paths toward it are left out, whatever they lost.
        let mut fabric = Fabric::new(4, 2);
        fabric.down = vec![2];
        let l = fabric.run(|a, b| if a.0 == 2 || b.0 == 2 { SENT } else { 0 });
        assert!(l.verdicts.is_empty(), "{:?}", l.verdicts);
        assert!(l.failing.is_empty());
        assert_eq!(l.paths, 24 * 23);
    }

    #[test]
    fn a_slow_responder_names_responder_and_nothing_else() {
        let mut fabric = Fabric::new(4, 2);
        fabric.delay.insert((3, 6), 0.02);
        // Probes to it time out now and then: its host's doing, so no path fails.
        let l = fabric.run(|_, b| if b == (3, 6) { 2 } else { 0 });
        assert_eq!(l.verdicts.len(), 1, "{:?}", l.verdicts);
        let v = &l.verdicts[0];
        assert_eq!(v.kind, Kind::Responder);
        assert_eq!(
            (v.host.as_deref(), v.device.as_deref(), v.port),
            (Some("gpu-node-04"), Some("mlx5_6"), Some(1))
        );
        assert_eq!(v.answer_delay_seconds, Some(0.02));
        assert_eq!((v.failing_paths, v.explained_ratio), (0, 0.0));
        assert!(l.failing.is_empty());
    }

    #[test]
    fn ports_without_a_leaf_take_part_in_nic_and_host_verdicts_only() {
        let mut fabric = Fabric::new(4, 3);
        fabric.unwired = true;
        let crossing = |a: (usize, usize), b: (usize, usize)| fabric.crosses(0, a, b);
        let l = fabric.run(|a, b| if crossing(a, b) { some(a, b, 0.02) } else { 0 });
        assert!(l.verdicts.is_empty(), "{:?}", l.verdicts);
        assert!(l.failing.len() > 100);
        let bad = (0, 5);
        let l = fabric.run(|a, b| if a == bad || b == bad { 3 } else { 0 });
        assert_eq!(kinds(&l), [(Kind::Nic, Some("gpu-node-01"))]);
        assert_eq!(l.verdicts[0].switch, None);
    }

    #[test]
    fn the_failing_paths_come_worst_first_and_a_path_given_per_kind_counts_once() {
        let port = |host: &str, device: &str| LivePort {
            id: PortId {
                host: host.into(),
                device: device.into(),
                port: 1,
            },
            leaf: None,
            sent: 100,
            lost: 0,
            answer_delay_seconds: None,
        };
        let ports = [port("a", "x"), port("b", "y"), port("c", "z")];
        let path = |from: usize, to: usize, sent, lost| PathCounts {
            from: ports[from].id.clone(),
            to: ports[to].id.clone(),
            sent,
            lost,
        };
        let l = localize(
            &ports,
            &[
                path(0, 1, 10, 1),
                path(0, 1, 10, 1),
                path(1, 2, 10, 5),
                path(2, 0, 0, 2),
                path(2, 1, 10, 0),
            ],
        );
        let order: Vec<(&str, &str, u64, u64)> = l
            .failing
            .iter()
            .map(|p| (p.from.host.as_str(), p.to.host.as_str(), p.sent, p.lost))
            .collect();
        assert_eq!(
            order,
            [("c", "a", 0, 2), ("b", "c", 10, 5), ("a", "b", 20, 2)]
        );
        assert_eq!(l.failing[0].loss_ratio, 1.0);
        assert_eq!(l.paths, 4);
        // Three failing paths, each port on two of them: 67 %, no `nic`; no leaf known.
        assert!(l.verdicts.is_empty(), "{:?}", l.verdicts);
    }
}
