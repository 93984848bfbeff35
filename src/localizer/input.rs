//! What a round reads from Prometheus, and the vote's input made of it, per `cluster`.
//!
//! The agents' per-target series exist only for targets that lost a probe lately (a 10 000-host
//! fleet cannot serve 10^8 paths), but the vote weighs every candidate against all it carries.
//! So the paths with series are taken as they are, and each port's other probes (its
//! `rdma_probe_sent_total` by path kind, less those) are spread evenly over the live ports that
//! kind of path reaches, as `probe::targets` plans them: they lost nothing, only their number
//! matters.
//!
//! The queries that change with each scrape (liveness, what was sent and lost) read the agents'
//! own series, not the recording rules made of them (`alerts/rdma-rules.yml`, group
//! `rdma-probe-localization`, which `RdmaProbePathLoss` reads): a rule's evaluation would be one
//! more interval between a lost probe and its page. Paths toward busy responders are left out
//! by the vote, which knows each port's answer delay; so are paths toward ports gone silent
//! (kept here, so that the vote can tell a host that is down: [`super::liveness`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::probe::localize::{Leaf, LivePort, PathCounts, PortId, Silence, SLOW_RESPONDER_SECONDS};
use crate::prom_query::{self, Labels, QueryError, Sample};

/// The window a round reads: that of the recording rules the other alerts read.
pub const WINDOW: &str = "2m";

/// Answers instant queries: Prometheus' client, or a fixture in tests.
pub trait Source {
    fn query(&self, expr: &str, time: f64) -> Result<Vec<Sample>, QueryError>;
}

impl Source for prom_query::Client {
    fn query(&self, expr: &str, time: f64) -> Result<Vec<Sample>, QueryError> {
        prom_query::Client::query(self, expr, time)
    }
}

/// The queries of one round, each with the user's matchers.
#[derive(Debug, Clone)]
pub struct Queries {
    live: String,
    leaving: String,
    wiring: String,
    rail: String,
    port_sent: String,
    path_sent: String,
    path_lost: String,
    delay: String,
}

/// `instance`'s host part as `host`, as the rules and `target_host` name a host.
fn with_host(expr: &str) -> String {
    format!(r#"label_replace({expr}, "host", "$1", "instance", "([^:]+).*")"#)
}

/// A per-target series appears with the loss that made its agent serve it, which `increase()`
/// cannot see (it starts at that value): a series younger than the window that began above
/// zero counts that first loss as one more. (With `per_target`, series begin at zero.)
fn young_counted(series: &str) -> String {
    format!(
        "(increase({series}[{WINDOW}]) and {series} offset {WINDOW}) \
         or ((increase({series}[{WINDOW}]) + 1) and min_over_time({series}[{WINDOW}]) > 0) \
         or increase({series}[{WINDOW}]) \
         or clamp_max({series}, 1)"
    )
}

/// What names a path.
const PATH_LABELS: &str =
    "cluster, host, device, port, path, target_host, target_device, target_port";

/// `per_path`, summed per path. Paths toward ports that are not live are kept: the vote leaves
/// them out of the network's counts, and reads them to tell a host that is down.
fn per_path_sum(per_path: &str) -> String {
    format!("sum by ({PATH_LABELS}) ({})", with_host(per_path))
}

impl Queries {
    /// `matchers`: label matchers without braces (`cluster="a"`), or empty.
    pub fn new(matchers: &str) -> Queries {
        let s = prom_query::selector("", matchers);
        // Only the paths that lost in the window: a per-target series lives 10 minutes after
        // its last loss, and those quiet since are counted with the port's other probes.
        let path_lost = format!(
            "({}) > 0",
            per_path_sum(&young_counted(&format!("rdma_probe_target_lost_total{s}")))
        );
        Queries {
            live: format!(
                "max by (cluster, host, device, port) ({})",
                with_host(&format!("rdma_probe_up{s} == 1"))
            ),
            // A minute back: the last scrape before an agent stops carries it, and a round
            // may fall after the next, failed one.
            leaving: format!(
                "max by (cluster, host, device, port) ({}) == 1",
                with_host(&format!("last_over_time(rdma_probe_leaving{s}[1m])"))
            ),
            wiring: format!("rdma:probe_port_switch:info{s}"),
            rail: format!(
                "max by (cluster, host, device, port, rail) ({})",
                with_host(&format!("rdma_probe_port_info{s}"))
            ),
            port_sent: format!(
                "sum by (cluster, host, device, port, path) ({})",
                with_host(&format!("increase(rdma_probe_sent_total{s}[{WINDOW}])"))
            ),
            path_sent: format!(
                "{} and on ({PATH_LABELS}) ({path_lost})",
                per_path_sum(&format!(
                    "increase(rdma_probe_target_sent_total{s}[{WINDOW}])"
                )),
            ),
            path_lost,
            // Only busy responders: the vote needs no other delay.
            delay: format!(
                "max by (cluster, host, device, port) ({}) > {SLOW_RESPONDER_SECONDS}",
                with_host(&format!(
                    "max_over_time(rdma_probe_answer_delay_seconds{s}[{WINDOW}])"
                ))
            ),
        }
    }

    /// Every query, in the order a round asks them.
    pub fn all(&self) -> [&str; 8] {
        [
            &self.live,
            &self.leaving,
            &self.wiring,
            &self.rail,
            &self.port_sent,
            &self.path_sent,
            &self.path_lost,
            &self.delay,
        ]
    }

    /// Asks every query at `time`, the wiring and rails only when `kept` is older than
    /// [`LABELS_EVERY`]; the first error ends the round (a half-read cluster would be voted on
    /// wrong counts).
    pub fn read(
        &self,
        source: &dyn Source,
        time: f64,
        kept: &mut KeptLabels,
    ) -> Result<Answers, QueryError> {
        let live = source.query(&self.live, time)?;
        let leaving = source.query(&self.leaving, time)?;
        let labels_read = kept.read_at.is_none_or(|at| at.elapsed() >= LABELS_EVERY)
            || keyed(&live)
                .iter()
                .any(|(key, _)| !kept.known.contains(key));
        if labels_read {
            kept.wiring = Arc::new(source.query(&self.wiring, time)?);
            kept.rail = Arc::new(source.query(&self.rail, time)?);
            let with_rail: HashSet<(String, PortId)> =
                keyed(&kept.rail).into_iter().map(|(key, _)| key).collect();
            kept.known = keyed(&kept.wiring)
                .into_iter()
                .map(|(key, _)| key)
                .filter(|key| with_rail.contains(key))
                .collect();
            kept.read_at = Some(Instant::now());
        }
        Ok(Answers {
            live,
            leaving,
            wiring: kept.wiring.clone(),
            rail: kept.rail.clone(),
            labels_read,
            port_sent: source.query(&self.port_sent, time)?,
            path_sent: source.query(&self.path_sent, time)?,
            path_lost: source.query(&self.path_lost, time)?,
            delay: source.query(&self.delay, time)?,
        })
    }
}

/// How often the wiring and rails are read again when every live port has them: they change
/// with recabling or configuration, not with each scrape, and are a third of what a round
/// reads at scale.
pub(crate) const LABELS_EVERY: Duration = Duration::from_secs(60);

/// The wiring and rails last read, kept between rounds. A live port that neither names (new,
/// or its LLDP not in yet when they were read) has them read again at the next round.
#[derive(Debug, Default)]
pub struct KeptLabels {
    wiring: Arc<Vec<Sample>>,
    rail: Arc<Vec<Sample>>,
    /// The ports both name.
    known: HashSet<(String, PortId)>,
    read_at: Option<Instant>,
}

/// The answers of one round.
#[derive(Debug, Clone, Default)]
pub struct Answers {
    pub live: Vec<Sample>,
    /// Ports whose agent said it is leaving, within the last minute.
    pub leaving: Vec<Sample>,
    /// Shared with the rounds until they are read again ([`KeptLabels`]).
    pub wiring: Arc<Vec<Sample>>,
    pub rail: Arc<Vec<Sample>>,
    /// Whether this round read the wiring and rails.
    pub labels_read: bool,
    pub port_sent: Vec<Sample>,
    pub path_sent: Vec<Sample>,
    pub path_lost: Vec<Sample>,
    pub delay: Vec<Sample>,
}

impl Answers {
    /// Samples read in all: what a round costs Prometheus and the localizer.
    pub fn samples(&self) -> usize {
        let labels = if self.labels_read {
            self.wiring.len() + self.rail.len()
        } else {
            0
        };
        labels
            + [
                &self.live,
                &self.leaving,
                &self.port_sent,
                &self.path_sent,
                &self.path_lost,
                &self.delay,
            ]
            .iter()
            .map(|a| a.len())
            .sum::<usize>()
    }
}

/// The vote's input for one cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterInput {
    pub ports: Vec<LivePort>,
    /// Ports seen live in an earlier round and silent now.
    pub silent: Vec<(PortId, Silence)>,
    pub paths: Vec<PathCounts>,
}

/// The path kinds of `rdma_probe_sent_total`.
const HOST: &str = "host";
const RAIL: &str = "rail";
const CROSS_RAIL: &str = "cross_rail";

fn label<'l>(labels: &'l Labels, name: &str) -> &'l str {
    labels.get(name).map_or("", String::as_str)
}

fn cluster(labels: &Labels) -> String {
    label(labels, "cluster").to_string()
}

fn port_id(labels: &Labels, prefix: &str) -> Option<PortId> {
    let get = |name: &str| labels.get(&format!("{prefix}{name}"));
    Some(PortId {
        host: get("host")?.clone(),
        device: get("device")?.clone(),
        port: get("port")?.parse().ok()?,
    })
}

/// A count from an extrapolated `increase()`: whole probes, never negative.
fn count(value: Option<f64>) -> u64 {
    value.filter(|v| *v > 0.0).map_or(0, |v| v.round() as u64)
}

/// One cluster's ports and what is known of each.
#[derive(Default)]
struct Cluster {
    live: Vec<PortId>,
    /// Ports seen live in an earlier round, silent now.
    silent: Vec<(PortId, Silence)>,
    /// (from, to, kind) -> (sent, lost) of the paths with per-target series.
    paths: BTreeMap<(PortId, PortId, String), (u64, u64)>,
}

/// Samples keyed by their cluster and port (those without a port left out).
pub(crate) fn keyed(samples: &[Sample]) -> Vec<((String, PortId), &Sample)> {
    samples
        .iter()
        .filter_map(|s| Some(((cluster(&s.labels), port_id(&s.labels, "")?), s)))
        .collect()
}

/// Per cluster, the vote's input (clusters without a live port left out); `silent`: the ports
/// [`Liveness`](super::liveness::Liveness) saw live before and not now.
pub fn assemble(
    answers: &Answers,
    silent: &HashMap<(String, PortId), Silence>,
) -> BTreeMap<String, ClusterInput> {
    type Keyed<T> = HashMap<(String, PortId), T>;
    let mut clusters: BTreeMap<String, Cluster> = BTreeMap::new();
    let mut seen: HashSet<(String, PortId)> = HashSet::new();
    for (key, _) in keyed(&answers.live) {
        if seen.insert(key.clone()) {
            clusters.entry(key.0).or_default().live.push(key.1);
        }
    }
    for ((cluster, id), silence) in silent {
        if let Some(c) = clusters.get_mut(cluster) {
            c.silent.push((id.clone(), *silence));
        }
    }
    for c in clusters.values_mut() {
        c.silent.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let leaves: Keyed<Leaf> = keyed(&answers.wiring)
        .into_iter()
        .filter_map(|(key, s)| {
            let switch = s.labels.get("switch").filter(|v| !v.is_empty())?;
            Some((
                key,
                Leaf {
                    switch: switch.clone(),
                    switch_port: s.labels.get("switch_port").cloned(),
                },
            ))
        })
        .collect();
    let rails: Keyed<String> = keyed(&answers.rail)
        .into_iter()
        .map(|(key, s)| (key, label(&s.labels, "rail").to_string()))
        .collect();
    let delays: Keyed<f64> = keyed(&answers.delay)
        .into_iter()
        .filter_map(|(key, s)| Some((key, s.value?)))
        .collect();
    let mut port_sent: HashMap<(String, PortId, String), u64> = HashMap::new();
    for (key, s) in keyed(&answers.port_sent) {
        *port_sent
            .entry((key.0, key.1, label(&s.labels, "path").to_string()))
            .or_default() += count(s.value);
    }
    for (samples, lost) in [(&answers.path_sent, false), (&answers.path_lost, true)] {
        for s in samples {
            let (Some(from), Some(to)) = (port_id(&s.labels, ""), port_id(&s.labels, "target_"))
            else {
                continue;
            };
            let Some(c) = clusters.get_mut(label(&s.labels, "cluster")) else {
                continue;
            };
            let kind = label(&s.labels, "path").to_string();
            let entry = c.paths.entry((from, to, kind)).or_default();
            if lost {
                entry.1 += count(s.value);
            } else {
                entry.0 += count(s.value);
            }
        }
    }
    clusters
        .into_iter()
        .map(|(name, c)| {
            let at = |id: &PortId| (name.clone(), id.clone());
            let rail = |id: &PortId| rails.get(&at(id)).map_or("", String::as_str);
            let input = spread(&c, rail, |id, kind| {
                port_sent
                    .get(&(name.clone(), id.clone(), kind.to_string()))
                    .copied()
                    .unwrap_or(0)
            });
            let ports = c
                .live
                .iter()
                .map(|id| {
                    let sent: u64 = [HOST, RAIL, CROSS_RAIL]
                        .iter()
                        .map(|kind| {
                            port_sent
                                .get(&(name.clone(), id.clone(), kind.to_string()))
                                .copied()
                                .unwrap_or(0)
                        })
                        .sum();
                    let lost = input.lost_from.get(id).copied().unwrap_or(0);
                    LivePort {
                        id: id.clone(),
                        leaf: leaves.get(&at(id)).cloned(),
                        sent: sent.max(input.sent_from.get(id).copied().unwrap_or(0)),
                        lost,
                        answer_delay_seconds: delays.get(&at(id)).copied(),
                    }
                })
                .collect();
            (
                name,
                ClusterInput {
                    ports,
                    silent: c.silent.clone(),
                    paths: input.paths,
                },
            )
        })
        .collect()
}

/// The paths of one cluster: those with series, and each port's other probes spread.
struct Spread {
    paths: Vec<PathCounts>,
    sent_from: HashMap<PortId, u64>,
    lost_from: HashMap<PortId, u64>,
}

fn spread<'r>(
    c: &Cluster,
    rail: impl Fn(&PortId) -> &'r str,
    port_sent: impl Fn(&PortId, &str) -> u64,
) -> Spread {
    let live: HashSet<&PortId> = c.live.iter().collect();
    let silent: HashSet<&PortId> = c.silent.iter().map(|(id, _)| id).collect();
    let mut out = Spread {
        paths: Vec::new(),
        sent_from: HashMap::new(),
        lost_from: HashMap::new(),
    };
    // Per source and kind: the probes the named paths account for, and their targets.
    let mut named: HashMap<(&PortId, &str), u64> = HashMap::new();
    let mut named_targets: HashSet<(&PortId, &PortId)> = HashSet::new();
    for ((from, to, kind), (sent, lost)) in &c.paths {
        let toward_silent = silent.contains(to);
        if !live.contains(from) || !(live.contains(to) || toward_silent) {
            continue;
        }
        *named.entry((from, kind.as_str())).or_default() += sent;
        named_targets.insert((from, to));
        *out.sent_from.entry(from.clone()).or_default() += sent;
        // A port's loss is toward live targets: a silent one's probes were missing, not lost.
        if !toward_silent {
            *out.lost_from.entry(from.clone()).or_default() += lost;
        }
        out.paths.push(PathCounts {
            from: from.clone(),
            to: to.clone(),
            sent: *sent,
            lost: *lost,
        });
    }
    for from in &c.live {
        for kind in [HOST, RAIL, CROSS_RAIL] {
            let rest = port_sent(from, kind)
                .saturating_sub(named.get(&(from, kind)).copied().unwrap_or(0));
            if rest == 0 {
                continue;
            }
            let reaches = |to: &PortId| match kind {
                HOST => to.host == from.host,
                RAIL => to.host != from.host && rail(to) == rail(from),
                _ => to.host != from.host && rail(to) != rail(from),
            };
            let targets: Vec<&PortId> = c
                .live
                .iter()
                .filter(|to| *to != from && reaches(to) && !named_targets.contains(&(from, *to)))
                .collect();
            if targets.is_empty() {
                continue;
            }
            let n = targets.len() as u64;
            for (i, to) in targets.into_iter().enumerate() {
                let sent = rest / n + u64::from((i as u64) < rest % n);
                if sent > 0 {
                    out.paths.push(PathCounts {
                        from: from.clone(),
                        to: to.clone(),
                        sent,
                        lost: 0,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pairs: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: Some(value),
        }
    }

    fn port(host: &str, device: &str) -> Vec<(&'static str, String)> {
        vec![
            ("cluster", "c".to_string()),
            ("host", host.to_string()),
            ("device", device.to_string()),
            ("port", "1".to_string()),
        ]
    }

    fn s(pairs: Vec<(&'static str, String)>, value: f64) -> Sample {
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        sample(&borrowed, value)
    }

    /// Two hosts of two NICs, rail n on leaf n; h1 mlx5_0 lost 6 of 30 probes toward h2 mlx5_0.
    fn answers() -> Answers {
        let mut a = Answers::default();
        for h in ["h1", "h2"] {
            for (d, rail) in [("mlx5_0", "0"), ("mlx5_1", "1")] {
                a.live.push(s(port(h, d), 1.0));
                let mut w = port(h, d);
                w.push(("switch", format!("leaf{rail}")));
                w.push(("switch_port", format!("Ethernet{h}")));
                Arc::make_mut(&mut a.wiring).push(s(w, 1.0));
                let mut r = port(h, d);
                r.push(("rail", rail.to_string()));
                Arc::make_mut(&mut a.rail).push(s(r, 1.0));
                for (kind, sent) in [(HOST, 30.0), (RAIL, 30.0), (CROSS_RAIL, 30.0)] {
                    let mut p = port(h, d);
                    p.push(("path", kind.to_string()));
                    a.port_sent.push(s(p, sent));
                }
                a.delay.push(s(port(h, d), 4e-5));
            }
        }
        let mut path = port("h1", "mlx5_0");
        path.extend([
            ("path", RAIL.to_string()),
            ("target_host", "h2".to_string()),
            ("target_device", "mlx5_0".to_string()),
            ("target_port", "1".to_string()),
        ]);
        a.path_sent.push(s(path.clone(), 29.6));
        a.path_lost.push(s(path, 6.0));
        a
    }

    #[test]
    fn named_paths_are_kept_and_the_other_probes_spread_over_the_kind_s_targets() {
        let inputs = assemble(&answers(), &HashMap::new());
        let input = &inputs["c"];
        assert_eq!(input.ports.len(), 4);
        let id = |h: &str, d: &str| PortId {
            host: h.to_string(),
            device: d.to_string(),
            port: 1,
        };
        let from = id("h1", "mlx5_0");
        let of = |to: &PortId| -> Vec<(u64, u64)> {
            input
                .paths
                .iter()
                .filter(|p| p.from == from && &p.to == to)
                .map(|p| (p.sent, p.lost))
                .collect()
        };
        // The named rail path as it is; the rail had no other target, so nothing spreads.
        assert_eq!(of(&id("h2", "mlx5_0")), vec![(30, 6)]);
        // Its host's other port and the other rail's port on h2 get the other kinds.
        assert_eq!(of(&id("h1", "mlx5_1")), vec![(30, 0)]);
        assert_eq!(of(&id("h2", "mlx5_1")), vec![(30, 0)]);
        let p = input.ports.iter().find(|p| p.id == from).unwrap();
        assert_eq!((p.sent, p.lost), (90, 6));
        assert_eq!(p.leaf.as_ref().unwrap().switch, "leaf0");
        assert_eq!(p.answer_delay_seconds, Some(4e-5));
    }

    #[test]
    fn paths_toward_ports_that_are_not_live_are_left_out() {
        let mut a = answers();
        a.live
            .retain(|s| !(s.labels["host"] == "h2" && s.labels["device"] == "mlx5_0"));
        let input = &assemble(&a, &HashMap::new())["c"];
        assert_eq!(input.ports.len(), 3);
        assert!(input.paths.iter().all(|p| p.lost == 0));
        assert!(input
            .paths
            .iter()
            .all(|p| p.to.host != "h2" || p.to.device != "mlx5_0"));
    }

    #[test]
    fn paths_toward_ports_gone_silent_are_kept_for_the_vote_but_not_as_loss() {
        let mut a = answers();
        a.live
            .retain(|s| !(s.labels["host"] == "h2" && s.labels["device"] == "mlx5_0"));
        let gone = PortId {
            host: "h2".into(),
            device: "mlx5_0".into(),
            port: 1,
        };
        let silence = Silence {
            seconds: 40.0,
            left: false,
        };
        let silent = HashMap::from([(("c".to_string(), gone.clone()), silence)]);
        let input = &assemble(&a, &silent)["c"];
        assert_eq!(input.ports.len(), 3);
        assert_eq!(input.silent, [(gone.clone(), silence)]);
        let toward: Vec<(u64, u64)> = input
            .paths
            .iter()
            .filter(|p| p.to == gone)
            .map(|p| (p.sent, p.lost))
            .collect();
        assert_eq!(toward, [(30, 6)]);
        // The source's own loss is toward live targets only.
        let source = input
            .ports
            .iter()
            .find(|p| p.id.host == "h1" && p.id.device == "mlx5_0");
        assert_eq!(source.unwrap().lost, 0);
        // A silent port of a cluster with no live port left is not voted on.
        let other = HashMap::from([(("elsewhere".to_string(), gone), silence)]);
        assert!(!assemble(&a, &other).contains_key("elsewhere"));
    }

    /// Counts the queries it answers, each with nothing.
    #[derive(Default)]
    struct Counting(std::cell::RefCell<Vec<String>>);

    impl Source for Counting {
        fn query(&self, expr: &str, _time: f64) -> Result<Vec<Sample>, QueryError> {
            self.0.borrow_mut().push(expr.to_string());
            Ok(Vec::new())
        }
    }

    #[test]
    fn the_wiring_and_rails_are_read_again_only_when_they_are_old() {
        let q = Queries::new("");
        let source = Counting::default();
        let mut kept = KeptLabels::default();
        assert!(q.read(&source, 0.0, &mut kept).unwrap().labels_read);
        assert!(!q.read(&source, 5.0, &mut kept).unwrap().labels_read);
        let asked = source.0.borrow().clone();
        assert_eq!(asked.len(), 8 + 6, "{asked:#?}");
        assert_eq!(asked.iter().filter(|e| **e == q.wiring).count(), 1);
        assert_eq!(asked.iter().filter(|e| **e == q.rail).count(), 1);
        kept.read_at = Instant::now().checked_sub(LABELS_EVERY);
        assert!(q.read(&source, 65.0, &mut kept).unwrap().labels_read);
        assert_eq!(
            source.0.borrow().iter().filter(|e| **e == q.rail).count(),
            2
        );
    }

    /// Answers the live query with one port, whose wiring comes only from the second read on.
    struct LateWiring {
        queries: Queries,
        wiring_reads: std::cell::Cell<usize>,
    }

    impl Source for LateWiring {
        fn query(&self, expr: &str, _time: f64) -> Result<Vec<Sample>, QueryError> {
            let one = || s(port("h1", "mlx5_0"), 1.0);
            if expr == self.queries.live || expr == self.queries.rail {
                return Ok(vec![one()]);
            }
            if expr == self.queries.wiring {
                self.wiring_reads.set(self.wiring_reads.get() + 1);
                if self.wiring_reads.get() > 1 {
                    let mut w = port("h1", "mlx5_0");
                    w.push(("switch", "leaf0".to_string()));
                    return Ok(vec![s(w, 1.0)]);
                }
            }
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_live_port_without_wiring_has_it_read_again_at_once() {
        let source = LateWiring {
            queries: Queries::new(""),
            wiring_reads: Default::default(),
        };
        let mut kept = KeptLabels::default();
        let q = &source.queries;
        assert!(q.read(&source, 0.0, &mut kept).unwrap().labels_read);
        // Its LLDP was not in: read again, and kept from then on.
        let second = q.read(&source, 5.0, &mut kept).unwrap();
        assert!(second.labels_read);
        assert_eq!(second.wiring.len(), 1);
        assert!(!q.read(&source, 10.0, &mut kept).unwrap().labels_read);
        assert_eq!(source.wiring_reads.get(), 2);
    }

    #[test]
    fn queries_carry_the_selector() {
        let q = Queries::new(r#"cluster="a""#);
        for expr in q.all() {
            assert!(expr.contains(r#"{cluster="a"}"#), "{expr}");
        }
        assert!(Queries::new("").all().iter().all(|e| !e.contains('{')));
    }
}
