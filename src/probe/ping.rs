//! On-demand probes (`/probe-ping`, `rdma-fabric-exporter ping`): N probes from one local port
//! to one target, asked for by an operator during an incident. The probing loop sends them
//! beside its rounds, from the same prober endpoint and with the same matching, and hands each
//! outcome to the asker, never to [`super::stats::Stats`]: an operator's ping must not move the
//! series that the alerts and the localization vote read.
//!
//! The loop never waits on the asker: a session's outcomes go into a table of its own and the
//! whole report leaves through a one-shot channel (its `send` never blocks); a session whose
//! asker went away is dropped at the loop's next pass.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::oneshot;

use super::agent::Peer;
use super::rtt::{RoundTrip, RttError};
use super::stats::PathKey;
use super::targets::{PathKind, Port};
use super::transport::gid_text;

/// Where every agent (and each of the demo's hosts, below `/hosts/<host>`) takes pings.
pub const PATH: &str = "/probe-ping";

/// The most probes one ask may send.
pub(crate) const MAX_COUNT: u32 = 1_000;
/// The shortest time between two probes of one ask: 100 a second, half a responder's
/// per-source allowance (`responder::Limits::per_source`), so the rounds' probes from the same
/// port are still answered.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// The longest one ask may take to send (count x interval).
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(60);
/// Asks an agent runs at once; more are refused (503), not queued.
pub(crate) const MAX_SESSIONS: usize = 4;

/// What became of one probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Answered: the network's share of the round trip and the responder's own delay apart.
    Answered {
        network_rtt_ns: u64,
        responder_delay_ns: u64,
    },
    /// No answer within the probe timeout.
    Lost,
    /// Answered with times that give no round trip (`reason` as in `rdma_probe_bad_total`).
    Bad { reason: String },
    /// Never sent (`reason` as in `rdma_probe_errors_total`: `address_pending`, `gone`, ...).
    NotSent { reason: String },
}

impl Outcome {
    pub fn of(result: Result<RoundTrip, RttError>) -> Outcome {
        match result {
            Ok(rtt) => Outcome::Answered {
                network_rtt_ns: rtt.network_ns,
                responder_delay_ns: rtt.responder_delay_ns,
            },
            Err(e) => Outcome::Bad {
                reason: e.reason().to_string(),
            },
        }
    }
}

/// One probe of an ask: its place (from 1), its flow label and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub n: u32,
    pub flow_label: u32,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// One end of the path, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortView {
    pub host: String,
    pub device: String,
    pub port: u32,
    pub rail: u32,
    pub gid: String,
    pub qpn: u32,
}

impl PortView {
    pub fn of(peer: &Peer) -> PortView {
        PortView {
            host: peer.port.host.clone(),
            device: peer.port.device.clone(),
            port: peer.port.port,
            rail: peer.port.rail,
            gid: gid_text::format(&peer.address.gid),
            qpn: peer.address.qpn,
        }
    }

    /// `host/device port N`, or the GID where the target has no name (outside the peer set).
    pub fn name(&self) -> String {
        if self.host.is_empty() {
            format!("GID {} QPN {}", self.gid, self.qpn)
        } else {
            format!("{}/{} port {}", self.host, self.device, self.port)
        }
    }
}

/// What `/probe-ping` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub from: PortView,
    pub to: PortView,
    /// The path's kind as the rounds would class it: `host`, `rail` or `cross_rail`.
    pub path: String,
    /// The target is in the agent's peer set (else the operator allowed any, `probe.ping_unlisted`).
    pub listed: bool,
    pub count: u32,
    pub interval_ns: u64,
    /// A probe without its answer after this long is lost.
    pub timeout_ns: u64,
    /// The GRH traffic class the probes rode.
    pub traffic_class: u8,
    pub probes: Vec<ProbeResult>,
}

/// Why an ask was refused or did not finish; the HTTP front maps each to a status.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PingError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    UnknownTarget(String),
    #[error("{0}")]
    Unlisted(String),
    #[error(
        "{MAX_SESSIONS} on-demand pings are running on this agent already; try again when one ends"
    )]
    Busy,
    #[error("the probe collector is not running here (--collector.probe)")]
    Off,
    #[error("the probe loop did not report within {0:?}")]
    Timeout(Duration),
}

/// Probes an ask sends when it names no count, and their spacing.
pub const DEFAULT_COUNT: u32 = 10;
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// An ask as `/probe-ping` takes it: `to` (a host, `host/device[/port]` or a GID), `from` (a
/// local device, `device/port` or GID), `count`, `interval` (`100ms`), `flow_label`, and `qpn`
/// (a GID outside the peer set only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub to: String,
    pub from: Option<String>,
    pub count: u32,
    pub interval: Duration,
    pub flow_label: Option<u32>,
    pub qpn: Option<u32>,
}

impl Query {
    /// The URL's parameters; an unknown or repeated one is refused, as a typo would be.
    pub fn from_params(params: &[(String, String)]) -> Result<Query, PingError> {
        let bad = |m: String| PingError::BadRequest(m);
        let mut query = Query {
            to: String::new(),
            from: None,
            count: DEFAULT_COUNT,
            interval: DEFAULT_INTERVAL,
            flow_label: None,
            qpn: None,
        };
        let mut seen = std::collections::HashSet::new();
        for (key, value) in params {
            if !seen.insert(key.as_str()) {
                return Err(bad(format!("parameter {key} given twice")));
            }
            let number = |what: &str| {
                value
                    .parse::<u32>()
                    .map_err(|_| bad(format!("{what}: {value:?} is not a whole number")))
            };
            match key.as_str() {
                "to" => query.to = value.trim().to_string(),
                "from" => query.from = Some(value.trim().to_string()).filter(|f| !f.is_empty()),
                "count" => query.count = number("count")?,
                "interval" => {
                    query.interval = crate::yaml::parse_duration(value)
                        .map_err(|e| bad(format!("interval: {e}")))?
                }
                "flow_label" => query.flow_label = Some(number("flow_label")?),
                "qpn" => query.qpn = Some(number("qpn")?),
                other => {
                    return Err(bad(format!(
                        "unknown parameter {other:?}; known: to, from, count, interval, \
                         flow_label, qpn"
                    )))
                }
            }
        }
        if query.to.is_empty() {
            return Err(bad(
                "missing parameter: to (a peer's host, host/device[/port] or GID)".into(),
            ));
        }
        Ok(query)
    }
}

/// An ask the loop is to run: from local port `from` (its index) to `to`.
pub struct Request {
    pub from: usize,
    pub from_port: Port,
    pub to: Peer,
    pub count: u32,
    pub interval: Duration,
    /// One flow label for every probe; `None` rotates over the configured set, as rounds do.
    pub flow_label: Option<u32>,
    /// `to` is in the peer set: its address handle may be made on the loop.
    pub listed: bool,
}

impl Request {
    /// Within the bounds of an ask.
    pub fn check(&self) -> Result<(), PingError> {
        let bad = |m: String| Err(PingError::BadRequest(m));
        if self.count == 0 || self.count > MAX_COUNT {
            return bad(format!(
                "count must be 1 to {MAX_COUNT}, not {}",
                self.count
            ));
        }
        if self.interval < MIN_INTERVAL {
            return bad(format!(
                "interval must be at least {MIN_INTERVAL:?}, not {:?}",
                self.interval
            ));
        }
        if self.interval.saturating_mul(self.count) > MAX_DURATION {
            return bad(format!(
                "count x interval must be at most {MAX_DURATION:?}, not {:?}",
                self.interval.saturating_mul(self.count)
            ));
        }
        if self.flow_label.is_some_and(|l| l == 0 || l > 0xF_FFFF) {
            return bad("a flow label is 1 to 1048575 (20 bits; 0 lets the kernel pick)".into());
        }
        Ok(())
    }

    /// The path as the rounds class it.
    pub fn kind(&self) -> PathKind {
        if self.to.port.host == self.from_port.host {
            PathKind::Host
        } else if self.to.port.rail == self.from_port.rail {
            PathKind::Rail
        } else {
            PathKind::CrossRail
        }
    }
}

/// The outcomes of one session so far, and where the report goes once they are all in.
struct Results {
    probes: Vec<Option<ProbeResult>>,
    reply: Option<oneshot::Sender<Vec<ProbeResult>>>,
}

/// One outcome owed to a session: held by the probe in flight, or used at once when it could
/// not be sent.
pub struct Ticket {
    results: Arc<Mutex<Results>>,
    n: u32,
    flow_label: u32,
}

impl Ticket {
    /// Records the outcome; the last one sends the report.
    pub fn record(self, outcome: Outcome) {
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = results.probes.get_mut(self.n as usize - 1) {
            *slot = Some(ProbeResult {
                n: self.n,
                flow_label: self.flow_label,
                outcome,
            });
        }
        if results.probes.iter().all(Option::is_some) {
            if let Some(reply) = results.reply.take() {
                let probes = results.probes.iter_mut().filter_map(Option::take).collect();
                // The asker may have gone: nobody to tell.
                let _ = reply.send(probes);
            }
        }
    }
}

/// A probe due now: where it goes, with which flow label, and its ticket.
pub struct Due {
    pub flow_label: u32,
    pub ticket: Ticket,
}

/// A running ask, as the loop keeps it.
pub struct Session {
    pub from: usize,
    pub to: Peer,
    pub listed: bool,
    pub path: PathKey,
    count: u32,
    interval: Duration,
    flow_label: Option<u32>,
    sent: u32,
    next: Instant,
    results: Arc<Mutex<Results>>,
    /// Closed when the asker went away.
    asker_gone: Box<dyn Fn() -> bool + Send>,
}

impl Session {
    /// A session for `request`, its first probe due at once, and where its outcomes will come.
    pub fn new(request: Request) -> (Session, oneshot::Receiver<Vec<ProbeResult>>) {
        let (reply, outcomes) = oneshot::channel();
        let results = Arc::new(Mutex::new(Results {
            probes: vec![None; request.count as usize],
            reply: Some(reply),
        }));
        let watch = results.clone();
        let path = PathKey {
            from: request.from,
            kind: request.kind(),
            to: request.to.port.clone(),
        };
        let session = Session {
            from: request.from,
            to: request.to,
            listed: request.listed,
            path,
            count: request.count,
            interval: request.interval,
            flow_label: request.flow_label,
            sent: 0,
            next: Instant::now(),
            results,
            asker_gone: Box::new(move || {
                let results = watch.lock().unwrap_or_else(|p| p.into_inner());
                results.reply.as_ref().is_none_or(|r| r.is_closed())
            }),
        };
        (session, outcomes)
    }

    /// The next probe if it is due at `now` (rotating over `flow_labels` labels when the ask
    /// named none); `None` when none is, or the asker went away.
    pub fn due(&mut self, now: Instant, flow_labels: u32) -> Option<Due> {
        if self.sent >= self.count || now < self.next || (self.asker_gone)() {
            return None;
        }
        self.sent += 1;
        self.next += self.interval;
        let flow_label = self
            .flow_label
            .unwrap_or_else(|| 1 + (self.sent - 1) % flow_labels.max(1));
        Some(Due {
            flow_label,
            ticket: Ticket {
                results: self.results.clone(),
                n: self.sent,
                flow_label,
            },
        })
    }

    /// When the next probe is due; `None` when none will be.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        (self.sent < self.count).then_some(self.next)
    }

    /// Nothing more to send: every probe went, or the asker went away.
    pub fn done(&self) -> bool {
        self.sent >= self.count || (self.asker_gone)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::transport::Address;

    fn peer(host: &str, rail: u32) -> Peer {
        Peer {
            port: Port {
                host: host.into(),
                device: format!("mlx5_{rail}"),
                port: 1,
                rail,
                leaf: None,
            },
            address: Address {
                gid: [1; 16],
                qpn: 7,
                qkey: 9,
                lid: None,
            },
        }
    }

    fn request(count: u32, interval_ms: u64) -> Request {
        Request {
            from: 0,
            from_port: peer("a", 0).port,
            to: peer("b", 0),
            count,
            interval: Duration::from_millis(interval_ms),
            flow_label: None,
            listed: true,
        }
    }

    #[test]
    fn an_ask_is_bounded_in_count_rate_and_length() {
        assert_eq!(request(10, 100).check(), Ok(()));
        assert_eq!(request(1_000, 10).check(), Ok(()));
        for (count, interval_ms) in [(0, 100), (1_001, 10), (10, 9), (1_000, 100)] {
            assert!(
                matches!(
                    request(count, interval_ms).check(),
                    Err(PingError::BadRequest(_))
                ),
                "{count} every {interval_ms} ms"
            );
        }
        assert_eq!(request(1, 100).kind(), PathKind::Rail);
    }

    /// Probes come one interval apart, their labels rotate, and the report leaves with the last
    /// outcome, whatever order they came in.
    #[test]
    fn the_report_leaves_with_the_last_outcome() {
        let (mut session, mut outcomes) = Session::new(request(3, 100));
        let start = Instant::now();
        let first = session.due(start, 8).unwrap();
        assert!(session.due(start, 8).is_none(), "one interval between two");
        let second = session.due(start + Duration::from_millis(100), 8).unwrap();
        let third = session.due(start + Duration::from_millis(200), 8).unwrap();
        assert!(session.done());
        assert_eq!(
            [first.flow_label, second.flow_label, third.flow_label],
            [1, 2, 3]
        );
        third.ticket.record(Outcome::Lost);
        first.ticket.record(Outcome::Answered {
            network_rtt_ns: 10,
            responder_delay_ns: 2,
        });
        assert!(outcomes.try_recv().is_err(), "one outcome is still owed");
        second.ticket.record(Outcome::NotSent {
            reason: "gone".into(),
        });
        let probes = outcomes.try_recv().unwrap();
        assert_eq!(probes.iter().map(|p| p.n).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(probes[2].outcome, Outcome::Lost);
    }

    #[test]
    fn a_session_whose_asker_went_away_sends_nothing_more() {
        let (mut session, outcomes) = Session::new(request(5, 10));
        assert!(session.due(Instant::now(), 8).is_some());
        drop(outcomes);
        assert!(session.done());
        assert!(session
            .due(Instant::now() + Duration::from_secs(1), 8)
            .is_none());
    }

    /// Through the real loop on the memory fabric: a ping to a live port is answered with the
    /// fabric's round trip, one to a port nobody answers on is lost probe by probe, and
    /// neither moves the loop's own counts (a host alone, without peers, sends no rounds).
    #[test]
    fn the_loop_sends_on_demand_probes_and_reports_them_apart() {
        use crate::probe::agent::{Agent, Settings};
        // 1 ms one way.
        let fabric = crate::probe::memory::MemoryFabric::new(Box::new(|_, _, _| Some(1_000_000)));
        let far = Agent::spawn(
            crate::testutil::lone_port(&fabric, "far", 2, 9),
            Settings::default(),
        )
        .unwrap();
        let settings = Settings {
            timeout: Duration::from_millis(200),
            ..Settings::default()
        };
        let near =
            Agent::spawn(crate::testutil::lone_port(&fabric, "near", 1, 9), settings).unwrap();
        let (_, from) = near.local_ports().remove(0);
        let (_, to) = far.local_ports().remove(0);
        let ask = |to: Peer| {
            let (session, outcomes) = Session::new(Request {
                from: 0,
                from_port: from.port.clone(),
                to,
                count: 4,
                interval: MIN_INTERVAL,
                flow_label: None,
                listed: true,
            });
            assert!(near.ping(session));
            outcomes.blocking_recv().unwrap()
        };
        let probes = ask(to.clone());
        assert_eq!(probes.len(), 4);
        for probe in &probes {
            let Outcome::Answered { network_rtt_ns, .. } = probe.outcome else {
                panic!("{probe:?}");
            };
            assert!(
                (2_000_000..2_500_000).contains(&network_rtt_ns),
                "{probe:?}"
            );
        }
        assert_eq!(
            probes.iter().map(|p| p.flow_label).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        // Nobody answers on QPN 555.
        let mut silent = to;
        silent.address.qpn = 555;
        let probes = ask(silent);
        assert!(
            probes.iter().all(|p| p.outcome == Outcome::Lost),
            "{probes:?}"
        );
        let stats = near.stats();
        assert_eq!(stats.ports[0].sent, [0; 3]);
        assert_eq!(stats.ports[0].lost, [0; 3]);
        assert_eq!(stats.all_targets().count(), 0);
    }

    #[test]
    fn a_query_takes_its_parameters_and_refuses_typos() {
        let params = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let query = Query::from_params(&params(&[
            ("to", "gpu-2/mlx5_1"),
            ("count", "5"),
            ("interval", "20ms"),
        ]))
        .unwrap();
        assert_eq!(
            (query.to.as_str(), query.count, query.interval, query.from),
            ("gpu-2/mlx5_1", 5, Duration::from_millis(20), None)
        );
        for wrong in [
            params(&[("count", "5")]),
            params(&[("to", "a"), ("cuont", "5")]),
            params(&[("to", "a"), ("count", "-1")]),
            params(&[("to", "a"), ("to", "b")]),
            params(&[("to", "a"), ("interval", "fast")]),
        ] {
            assert!(
                matches!(Query::from_params(&wrong), Err(PingError::BadRequest(_))),
                "{wrong:?}"
            );
        }
    }

    #[test]
    fn reports_read_back_as_they_were_written() {
        let probe = ProbeResult {
            n: 1,
            flow_label: 3,
            outcome: Outcome::Answered {
                network_rtt_ns: 12_000,
                responder_delay_ns: 3_000,
            },
        };
        let json = serde_json::to_string(&probe).unwrap();
        assert_eq!(
            json,
            r#"{"n":1,"flow_label":3,"outcome":"answered","network_rtt_ns":12000,"responder_delay_ns":3000}"#
        );
        assert_eq!(serde_json::from_str::<ProbeResult>(&json).unwrap(), probe);
    }
}
