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
//! Each probe of a path carries a flow label from a rotating set: RoCEv2 derives the UDP source
//! port from it, so successive rounds take different ECMP members.

use std::collections::BTreeSet;
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
    /// Same-rail ports on other hosts probed per round, per local port.
    pub rail_sample: usize,
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
    let mut sorted: Vec<&Port> = peers.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut targets = Vec::new();
    for (from, me) in local.iter().enumerate() {
        let mut add = |to: &'p Port, kind: PathKind| {
            let n = targets.len() as u64;
            targets.push(Target {
                from,
                to,
                kind,
                flow_label: flow_label(round.wrapping_add(n), settings.flow_labels),
            });
        };
        for other in local.iter().filter(|other| *other != me) {
            add(other, PathKind::Host);
        }
        let away = |same_rail: bool| -> Vec<&'p Port> {
            sorted
                .iter()
                .copied()
                .filter(|p| p.host != me.host && (p.rail == me.rail) == same_rail)
                .collect()
        };
        let offset = spread(me);
        for to in window(&away(true), settings.rail_sample, round, offset) {
            add(to, PathKind::Rail);
        }
        for to in window(&away(false), settings.cross_sample, round, offset) {
            add(to, PathKind::CrossRail);
        }
    }
    targets
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
    let mut sorted: Vec<&Port> = peers.iter().collect();
    sorted.sort();
    sorted.dedup();
    let count = rounds.end.saturating_sub(rounds.start);
    let mut reached = BTreeSet::new();
    for me in local {
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

/// A stable number of a port (FxHash has no random seed: the same on every agent and run).
fn spread(port: &Port) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    port.hash(&mut hasher);
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
