//! Which ports a local port probes in one round, and how fast rounds may come.
//!
//! Three sets, as R-Pingmesh and Hostmesh choose them, with no central service: every agent
//! computes its own from the same peer list.
//! - `host`: every other local port of the same host. In a rail-optimized fabric the rails meet
//!   only above the leaves, so these paths cross the spine (Hostmesh).
//! - `rail`: a sample of the same rail's ports on other hosts, a window that moves each round,
//!   so that in `ceil(n / rail_sample)` rounds every one is probed (R-Pingmesh's ToR mesh).
//! - `cross_rail`: a few ports of other rails on other hosts (inter-ToR), rotating too.
//!
//! Where a port knows its leaf switch (`probe.leaves`, published with its address), the leaf
//! decides instead of the rail alone:
//! - the leaf mesh: `leaf_sample` other hosts' ports under the same leaf each round, a window
//!   that moves (R-Pingmesh's ToR mesh);
//! - leaf pairs: `rail_sample` other leaves of its rail and `cross_sample` leaves of other
//!   rails, one port of each. The ports under one leaf take consecutive, disjoint windows of
//!   the leaf list (by their place under the leaf), so that `m` ports with `s` a round cover
//!   `m * s` leaves a round: every leaf pair in `ceil(leaves / (m * s))` rounds, where a window
//!   per port would take `ceil(ports / s)`. The port probed in a leaf rotates over its hosts.
//!
//! The kind (`rail` or `cross_rail`) still says whether the two ends share a rail.
//!
//! Each probe of a path carries a flow label from a rotating set: RoCEv2 derives the UDP source
//! port from it, so successive rounds take different ECMP members.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::time::Duration;

/// One RDMA port that probes or answers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Port {
    pub host: String,
    pub device: String,
    pub port: u32,
    /// The rail (the leaf group the port is cabled to); ports of one rail share their leaves.
    pub rail: u32,
    /// The leaf switch the port is cabled to, where the config names it (`probe.leaves`):
    /// the plan covers leaves and leaf pairs. `None`: the rail stands for it.
    pub leaf: Option<String>,
}

/// Which set a path belongs to; its label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathKind {
    Host,
    Rail,
    CrossRail,
}

impl PathKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PathKind::Host => "host",
            PathKind::Rail => "rail",
            PathKind::CrossRail => "cross_rail",
        }
    }
}

/// How many targets a port probes and how fast.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Same-rail ports on other hosts probed per round, per local port (with leaves known:
    /// other leaves of the rail).
    pub rail_sample: usize,
    /// With leaves known: other hosts' ports under the port's own leaf probed per round.
    pub leaf_sample: usize,
    /// Other-rail ports probed per round, per local port.
    pub cross_sample: usize,
    /// Flow labels rotated over (each a distinct UDP source port).
    pub flow_labels: u32,
    /// Probes a second one local port may send.
    pub per_port_rate: u32,
    /// Probes a second the whole host may send.
    pub total_rate: u32,
    /// The shortest round: a path is probed at most once a round.
    pub min_round: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rail_sample: 8,
            leaf_sample: 4,
            cross_sample: 2,
            flow_labels: 8,
            per_port_rate: 100,
            total_rate: 400,
            min_round: Duration::from_secs(1),
        }
    }
}

/// One probe of a round: from a local port (its index) to a peer port, with a flow label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'p> {
    pub from: usize,
    pub to: &'p Port,
    pub kind: PathKind,
    pub flow_label: u32,
}

/// The probes of round `round` from `local` (this host's ports) to `peers` (every known port,
/// this host's included or not). Deterministic: the same inputs give the same plan.
pub fn plan<'p>(
    local: &'p [Port],
    peers: &'p [Port],
    round: u64,
    settings: &Settings,
) -> Vec<Target<'p>> {
    Planner::new(peers).plan(local, round, settings)
}

/// The peer list sorted once, and each leaf's ports: what the plans of many rounds (or many
/// hosts, in a benchmark) share.
pub struct Planner<'p> {
    sorted: Vec<&'p Port>,
    /// Each leaf's ports, sorted; the leaves by name.
    leaves: BTreeMap<&'p str, Vec<&'p Port>>,
    /// By rail: the leaves with a port of that rail, and those with a port of another (by name).
    leaves_of_rail: HashMap<u32, Vec<&'p str>>,
    leaves_off_rail: HashMap<u32, Vec<&'p str>>,
}

impl<'p> Planner<'p> {
    pub fn new(peers: &'p [Port]) -> Planner<'p> {
        let mut sorted: Vec<&Port> = peers.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut leaves: BTreeMap<&str, Vec<&Port>> = BTreeMap::new();
        for port in &sorted {
            if let Some(leaf) = &port.leaf {
                leaves.entry(leaf.as_str()).or_default().push(port);
            }
        }
        let rails: BTreeSet<u32> = leaves.values().flatten().map(|p| p.rail).collect();
        let mut leaves_of_rail: HashMap<u32, Vec<&str>> = HashMap::new();
        let mut leaves_off_rail: HashMap<u32, Vec<&str>> = HashMap::new();
        for (leaf, ports) in &leaves {
            for rail in &rails {
                if ports.iter().any(|p| p.rail == *rail) {
                    leaves_of_rail.entry(*rail).or_default().push(leaf);
                }
                if ports.iter().any(|p| p.rail != *rail) {
                    leaves_off_rail.entry(*rail).or_default().push(leaf);
                }
            }
        }
        Planner {
            sorted,
            leaves,
            leaves_of_rail,
            leaves_off_rail,
        }
    }

    /// The probes of round `round` from `local` (this host's ports).
    pub fn plan(&self, local: &'p [Port], round: u64, settings: &Settings) -> Vec<Target<'p>> {
        let mut targets = Vec::new();
        for (from, me) in local.iter().enumerate() {
            let mut add = |to: &'p Port, kind: PathKind, label: Option<u32>| {
                let n = targets.len() as u64;
                targets.push(Target {
                    from,
                    to,
                    kind,
                    flow_label: label
                        .unwrap_or_else(|| flow_label(round.wrapping_add(n), settings.flow_labels)),
                });
            };
            for other in local.iter().filter(|other| *other != me) {
                add(other, PathKind::Host, None);
            }
            self.away(me, round, settings, &mut add);
        }
        targets
    }

    /// The targets of `me` on other hosts in round `round`.
    fn away(
        &self,
        me: &Port,
        round: u64,
        settings: &Settings,
        add: &mut impl FnMut(&'p Port, PathKind, Option<u32>),
    ) {
        let kind = |to: &Port| match to.rail == me.rail {
            true => PathKind::Rail,
            false => PathKind::CrossRail,
        };
        let offset = spread(me);
        let under = me.leaf.as_deref().and_then(|leaf| self.leaves.get(leaf));
        let Some(mates) = under else {
            let away = |same_rail: bool| -> Vec<&'p Port> {
                self.sorted
                    .iter()
                    .copied()
                    .filter(|p| p.host != me.host && (p.rail == me.rail) == same_rail)
                    .collect()
            };
            for to in window(&away(true), settings.rail_sample, round, offset) {
                add(to, PathKind::Rail, None);
            }
            for to in window(&away(false), settings.cross_sample, round, offset) {
                add(to, PathKind::CrossRail, None);
            }
            return;
        };
        let own_leaf = me.leaf.as_deref().unwrap_or_default();
        let others: Vec<&'p Port> = mates
            .iter()
            .copied()
            .filter(|p| p.host != me.host)
            .collect();
        for to in window(&others, settings.leaf_sample, round, offset) {
            add(to, kind(to), None);
        }
        // This port's place under its leaf, and how many share the leaf's windows (the list
        // may or may not hold this host's own ports: every agent counts alike).
        let place = mates.iter().filter(|p| **p < me).count() as u64;
        let sharing = (mates.len() + usize::from(!mates.contains(&me))) as u64;
        let leaf_offset = spread(own_leaf);
        for (same_rail, size) in [(true, settings.rail_sample), (false, settings.cross_sample)] {
            // The other leaves with a port of this rail (or, for `cross_rail`, of another).
            let lists = match same_rail {
                true => &self.leaves_of_rail,
                false => &self.leaves_off_rail,
            };
            let all = lists.get(&me.rail).map_or(&[][..], Vec::as_slice);
            // The list without this port's own leaf, by index (sorted: a binary search).
            let own = all.binary_search(&own_leaf).ok();
            let count = all.len() - usize::from(own.is_some());
            let choice = |i: usize| all[i + usize::from(own.is_some_and(|o| i >= o))];
            if count == 0 || size == 0 {
                continue;
            }
            let n = count as u128;
            // The leaf's ports take disjoint, consecutive windows: `sharing * size` a round.
            let first = u128::from(leaf_offset)
                + (u128::from(round) * u128::from(sharing) + u128::from(place)) * size as u128;
            for k in 0..size.min(count) as u128 {
                let at = first + k;
                let leaf = choice((at % n) as usize);
                // Each lap of the leaf list meets a leaf once, with the next flow label: every
                // ECMP member the labels reach in `flow_labels` laps (a label per round would
                // alias with a lap whose length shares a factor with the label count).
                let label = flow_label((at / n) as u64, settings.flow_labels);
                let ports: Vec<&'p Port> = self.leaves[leaf]
                    .iter()
                    .copied()
                    .filter(|p| p.host != me.host && (p.rail == me.rail) == same_rail)
                    .collect();
                if ports.is_empty() {
                    continue;
                }
                let pick = (u128::from(offset) + u128::from(round)) % ports.len() as u128;
                let to = ports[pick as usize];
                add(to, kind(to), Some(label));
            }
        }
    }
}

/// The other hosts that the plans of `rounds` reach from `local`: the same windows as [`plan`]
/// over the same sorted list, made once. The hosts whose addresses a peer refresh makes sure
/// of ([`super::peer_book`]).
pub fn hosts_reached<'p>(
    local: &[Port],
    peers: &'p [Port],
    rounds: Range<u64>,
    settings: &Settings,
) -> BTreeSet<&'p str> {
    let planner = Planner::new(peers);
    let sorted = &planner.sorted;
    let count = rounds.end.saturating_sub(rounds.start);
    let mut reached = BTreeSet::new();
    for me in local {
        if me
            .leaf
            .as_deref()
            .is_some_and(|leaf| planner.leaves.contains_key(leaf))
        {
            for round in rounds.clone() {
                planner.away(me, round, settings, &mut |to, _, _| {
                    reached.insert(to.host.as_str());
                });
            }
            continue;
        }
        let offset = spread(me);
        for (same_rail, size) in [(true, settings.rail_sample), (false, settings.cross_sample)] {
            let away: Vec<&Port> = sorted
                .iter()
                .copied()
                .filter(|p| p.host != me.host && (p.rail == me.rail) == same_rail)
                .collect();
            // Windows that cover the list wholly: no need to walk them.
            if u128::from(count) * size as u128 >= away.len() as u128 && size > 0 {
                reached.extend(away.iter().map(|p| p.host.as_str()));
                continue;
            }
            for round in rounds.clone() {
                reached.extend(
                    window(&away, size, round, offset)
                        .into_iter()
                        .map(|p| p.host.as_str()),
                );
            }
        }
    }
    reached
}

/// `size` consecutive items of `all`, the window moving by `size` each round and starting at a
/// place of this port's own, so that agents do not all probe the same ports at once.
fn window<'p>(all: &[&'p Port], size: usize, round: u64, offset: u64) -> Vec<&'p Port> {
    if all.is_empty() || size == 0 {
        return Vec::new();
    }
    let n = all.len() as u64;
    // In u128: a port's offset is a hash anywhere in u64, and rounds only grow.
    let start = ((u128::from(offset) + u128::from(round) * size as u128) % u128::from(n)) as u64;
    (0..size.min(all.len()) as u64)
        .map(|i| all[((start + i) % n) as usize])
        .collect()
}

/// A stable number of a port, or of a leaf where its ports' windows start (FxHash has no
/// random seed: the same on every agent and run).
fn spread(value: &(impl Hash + ?Sized)) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

/// The `n`th flow label of a set of `count`: 1..=count (0 means "no label" to the kernel,
/// which then picks the source port itself).
fn flow_label(n: u64, count: u32) -> u32 {
    1 + (n % u64::from(count.max(1))) as u32
}

/// The length of a round that keeps the plan within the rates: every port sends one probe per
/// target a round.
pub(crate) fn round_length(targets: &[Target<'_>], settings: &Settings) -> Duration {
    let mut per_from: Vec<usize> = Vec::new();
    for target in targets {
        if per_from.len() <= target.from {
            per_from.resize(target.from + 1, 0);
        }
        per_from[target.from] += 1;
    }
    let busiest = per_from.into_iter().max().unwrap_or(0);
    let per_port = busiest as f64 / f64::from(settings.per_port_rate.max(1));
    let total = targets.len() as f64 / f64::from(settings.total_rate.max(1));
    settings
        .min_round
        .max(Duration::from_secs_f64(per_port.max(total)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_window_moves_on_past_any_offset_and_round() {
        let ports: Vec<Port> = (0..5u32)
            .map(|n| Port {
                host: format!("h{n}"),
                device: "mlx5_0".into(),
                port: 1,
                rail: 0,
                leaf: None,
            })
            .collect();
        let all: Vec<&Port> = ports.iter().collect();
        let hosts = |w: Vec<&Port>| w.iter().map(|p| p.host.clone()).collect::<Vec<_>>();
        // A hash near the top of u64 and a late round: no overflow, the same window as the
        // arithmetic in integers says (u64::MAX % 5 = 0, and (0 + 2 * 2) % 5 = 4).
        assert_eq!(hosts(window(&all, 2, 2, u64::MAX)), ["h4", "h0"]);
        let late = window(&all, 2, u64::MAX, u64::MAX);
        assert_eq!(late.len(), 2);
        // Consecutive rounds move by the window's size.
        assert_eq!(hosts(window(&all, 2, 3, u64::MAX)), ["h1", "h2"]);
    }

    use std::collections::HashSet;

    use super::*;

    /// `hosts` hosts with one port per rail, `rails` rails.
    fn fabric(hosts: usize, rails: u32) -> Vec<Port> {
        (0..hosts)
            .flat_map(|h| {
                (0..rails).map(move |r| Port {
                    host: format!("gpu-{h:02}"),
                    device: format!("mlx5_{r}"),
                    port: 1,
                    rail: r,
                    leaf: None,
                })
            })
            .collect()
    }

    fn local(all: &[Port], host: &str) -> Vec<Port> {
        all.iter().filter(|p| p.host == host).cloned().collect()
    }

    #[test]
    fn a_round_has_the_intra_host_mesh_a_rail_sample_and_a_few_cross_rail_paths() {
        let all = fabric(32, 8);
        let me = local(&all, "gpu-03");
        let settings = Settings::default();
        let targets = plan(&me, &all, 0, &settings);
        for (from, port) in me.iter().enumerate() {
            let mine: Vec<&Target> = targets.iter().filter(|t| t.from == from).collect();
            let of = |kind| mine.iter().filter(|t| t.kind == kind).count();
            assert_eq!(of(PathKind::Host), 7);
            assert_eq!(of(PathKind::Rail), 8);
            assert_eq!(of(PathKind::CrossRail), 2);
            for t in &mine {
                assert_ne!(t.to, port, "a port never probes itself");
                match t.kind {
                    PathKind::Host => assert_eq!(t.to.host, port.host),
                    PathKind::Rail => {
                        assert_ne!(t.to.host, port.host);
                        assert_eq!(t.to.rail, port.rail);
                    }
                    PathKind::CrossRail => {
                        assert_ne!(t.to.host, port.host);
                        assert_ne!(t.to.rail, port.rail);
                    }
                }
            }
        }
    }

    /// In ceil(31 / 8) = 4 rounds a port has probed every other host's port of its rail.
    #[test]
    fn the_rail_sample_covers_the_whole_rail_in_turn() {
        let all = fabric(32, 8);
        let me = local(&all, "gpu-10");
        let settings = Settings::default();
        let mut seen = HashSet::new();
        for round in 0..4 {
            for t in plan(&me, &all, round, &settings) {
                if t.from == 2 && t.kind == PathKind::Rail {
                    seen.insert(t.to.host.clone());
                }
            }
        }
        assert_eq!(seen.len(), 31);
    }

    /// Two hosts start their windows at different places: not every agent probes the same
    /// few ports in the same round.
    #[test]
    fn agents_spread_their_samples() {
        let all = fabric(64, 1);
        let settings = Settings::default();
        let firsts: HashSet<String> = (0..16)
            .map(|h| {
                let me = local(&all, &format!("gpu-{h:02}"));
                plan(&me, &all, 0, &settings)[0].to.host.clone()
            })
            .collect();
        assert!(firsts.len() > 8, "{firsts:?}");
    }

    #[test]
    fn a_path_rotates_its_flow_label_over_the_set() {
        let all = fabric(4, 2);
        let me = local(&all, "gpu-00");
        let settings = Settings::default();
        let labels: HashSet<u32> = (0..8)
            .map(|round| plan(&me, &all, round, &settings)[0].flow_label)
            .collect();
        assert_eq!(labels, (1..=8).collect());
    }

    /// The hosts a refresh makes sure of are those the rounds' plans probe, no more, no fewer.
    #[test]
    fn the_hosts_reached_are_the_plans_other_hosts() {
        let all = fabric(200, 8);
        let me = local(&all, "gpu-07");
        let settings = Settings::default();
        for rounds in [5..7, 1000..1002, 3..3] {
            let planned: BTreeSet<&str> = rounds
                .clone()
                .flat_map(|round| plan(&me, &all, round, &settings))
                .filter(|t| t.to.host != "gpu-07")
                .map(|t| t.to.host.as_str())
                .collect();
            let reached = hosts_reached(&me, &all, rounds.clone(), &settings);
            assert_eq!(reached, planned, "rounds {rounds:?}");
            assert!(reached.len() < 199, "{rounds:?}: {}", reached.len());
        }
        // Enough rounds to cover every rail: every other host, walked or not.
        assert_eq!(hosts_reached(&me, &all, 0..25, &settings).len(), 199);
    }

    /// `hosts` hosts with one port per rail, `per_leaf` hosts to a scalable unit: rail `r` of
    /// unit `u` is cabled to leaf `su<u>-leaf<r>`, as rail-optimized clusters are.
    fn leafy(hosts: usize, rails: u32, per_leaf: usize) -> Vec<Port> {
        let mut all = fabric(hosts, rails);
        for (i, port) in all.iter_mut().enumerate() {
            let host = i / rails as usize;
            port.leaf = Some(format!("su{}-leaf{}", host / per_leaf, port.rail));
        }
        all
    }

    /// With leaves known, a round has the host mesh, `leaf_sample` ports under the port's own
    /// leaf, one port in each of `rail_sample` other leaves of its rail and `cross_sample`
    /// leaves of other rails: no two targets under one other leaf.
    #[test]
    fn a_port_that_knows_its_leaf_probes_its_leaf_and_other_leaves() {
        let all = leafy(64, 8, 16);
        let me = local(&all, "gpu-21");
        let settings = Settings::default();
        for round in [0, 1, 77] {
            let targets = plan(&me, &all, round, &settings);
            for (from, port) in me.iter().enumerate() {
                let mine: Vec<&Target> = targets.iter().filter(|t| t.from == from).collect();
                let own = port.leaf.as_deref();
                let under = |t: &&&Target| t.to.leaf.as_deref() == own && t.to.host != port.host;
                assert_eq!(mine.iter().filter(under).count(), settings.leaf_sample);
                let away: Vec<&&Target> = mine
                    .iter()
                    .filter(|t| t.to.host != port.host && t.to.leaf.as_deref() != own)
                    .collect();
                let same_rail = away.iter().filter(|t| t.kind == PathKind::Rail).count();
                // Three other units: three other leaves of the rail, fewer than rail_sample.
                assert_eq!(same_rail, 3, "round {round}");
                assert_eq!(away.len() - same_rail, settings.cross_sample);
                let leaves: HashSet<&str> =
                    away.iter().filter_map(|t| t.to.leaf.as_deref()).collect();
                assert_eq!(leaves.len(), away.len(), "one port a leaf");
                for t in &mine {
                    let same = t.to.rail == port.rail;
                    assert_eq!(t.kind == PathKind::Rail, same && t.to.host != port.host);
                }
            }
        }
    }

    /// The ports under one leaf share out the other leaves. 16 units x 4 rails, 4 hosts a leaf:
    /// a leaf's 4 ports cover the 15 other leaves of their rail in one round (4 x 8) and the 48
    /// of other rails in ceil(48 / (4 x 2)) = 6, every ordered leaf pair; the rail's windows
    /// (no leaves known) have not in 6. Each lap of the leaves takes the next flow label.
    #[test]
    fn the_ports_of_a_leaf_cover_every_leaf_pair_in_leaves_over_their_windows_rounds() {
        let rails = 4;
        let with = leafy(64, rails, 4);
        let leaf_of: HashMap<(String, String), String> = with
            .iter()
            .map(|p| ((p.host.clone(), p.device.clone()), p.leaf.clone().unwrap()))
            .collect();
        let leaves: BTreeSet<&String> = leaf_of.values().collect();
        // The ordered leaf pairs probed, and those probed with every flow label.
        let pairs_after = |all: &[Port], rounds: u64| -> (usize, usize) {
            let planner = Planner::new(all);
            let mut pairs: HashMap<(String, String), HashSet<u32>> = HashMap::new();
            for h in 0..64 {
                let me = local(all, &format!("gpu-{h:02}"));
                for round in 0..rounds {
                    for t in planner.plan(&me, round, &Settings::default()) {
                        let a = &leaf_of[&(me[t.from].host.clone(), me[t.from].device.clone())];
                        let b = &leaf_of[&(t.to.host.clone(), t.to.device.clone())];
                        if a != b {
                            let labels = pairs.entry((a.clone(), b.clone())).or_default();
                            labels.insert(t.flow_label);
                        }
                    }
                }
            }
            let labelled = pairs.values().filter(|l| l.len() == 8).count();
            (pairs.len(), labelled)
        };
        let every = leaves.len() * (leaves.len() - 1);
        assert_eq!(pairs_after(&with, 6).0, every);
        assert!(pairs_after(&with, 5).0 < every);
        let without = fabric(64, rails);
        assert!(pairs_after(&without, 6).0 < every, "the rail windows alone");
        // A lap of the 48 other-rail leaves takes 6 rounds, and each lap brings the next
        // label: every pair has had all 8 within 9 laps (the first may be partial).
        assert_eq!(pairs_after(&with, 54).1, every);
    }

    /// A leaf-aware plan's hosts are what `hosts_reached` says, and ports without a leaf in a
    /// fabric of leafy ports keep the rail's windows.
    #[test]
    fn the_hosts_reached_follow_the_leaf_plan() {
        let mut all = leafy(96, 8, 8);
        for port in all.iter_mut().filter(|p| p.host == "gpu-95") {
            port.leaf = None;
        }
        let settings = Settings::default();
        for host in ["gpu-07", "gpu-95"] {
            let me = local(&all, host);
            for rounds in [5..7, 1000..1003] {
                let planned: BTreeSet<&str> = rounds
                    .clone()
                    .flat_map(|round| plan(&me, &all, round, &settings))
                    .filter(|t| t.to.host != host)
                    .map(|t| t.to.host.as_str())
                    .collect();
                let reached = hosts_reached(&me, &all, rounds.clone(), &settings);
                assert_eq!(reached, planned, "{host} rounds {rounds:?}");
            }
        }
    }

    #[test]
    fn small_fabrics_and_lone_hosts_probe_what_there_is() {
        let all = fabric(2, 1);
        let me = local(&all, "gpu-00");
        let targets = plan(&me, &all, 5, &Settings::default());
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0].to.host, "gpu-01");
        assert!(plan(&me, &me, 0, &Settings::default()).is_empty());
    }

    #[test]
    fn the_round_stretches_to_keep_both_rates() {
        let all = fabric(32, 8);
        let me = local(&all, "gpu-00");
        let settings = Settings::default();
        let targets = plan(&me, &all, 0, &settings);
        // 8 ports x 17 targets: 136 probes a round, 400/s in total: the 1 s floor holds.
        assert_eq!(round_length(&targets, &settings), Duration::from_secs(1));
        let tight = Settings {
            total_rate: 68,
            ..settings
        };
        assert_eq!(round_length(&targets, &tight), Duration::from_secs(2));
        let slow_port = Settings {
            per_port_rate: 4,
            ..settings
        };
        assert_eq!(
            round_length(&targets, &slow_port),
            Duration::from_secs_f64(17.0 / 4.0)
        );
    }
}
