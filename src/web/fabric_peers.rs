//! The landing page's gray-failure marks: each NIC held against the NICs of its rail, as
//! `rdma-peers.rules` does for `RdmaNicPeerOutlier`, over the rates between the page's last two
//! walks. The page sees only what its walks read, so it compares the signals those carry
//! (retransmissions, CNPs handled, rx pause, FEC corrections, bytes sent); the rules add the
//! optics' receive power and the probes' RTT. The numbers are the rules' own, and a test holds
//! them to the rules file.
//!
//! A rail is the RDMA device's name (NIC n of every host of a rail-optimized cluster is on rail
//! n's leaf: the rules' fallback too). Only NICs sending over 1 % of their line rate are peers,
//! and a rail needs three of them: an idle NIC is no outlier, an idle rail no fault.

use std::collections::BTreeMap;

use serde::Serialize;

use super::fabric_json::{HostView, NicView};
use super::fabric_rates::PortRates;
use crate::direction::Direction;

/// Share of the line rate a NIC must send to count as a peer (`rdma:nic_peer_member:info`).
pub(crate) const MIN_TX_UTILIZATION: f64 = 0.01;
/// Peers a rail needs before its median means anything.
pub(crate) const MIN_PEERS: usize = 3;
/// Iglewicz and Hoaglin's outlier threshold on the modified z-score.
pub(crate) const OUTLIER_SCORE: f64 = 3.5;
/// The modified z-score's constant: the MAD of a normal distribution over its sigma.
const MAD_TO_SIGMA: f64 = 0.6745;
/// The spread is at least this share of the median (`rdma:rail_peer_signal:spread5m`).
const RELATIVE_FLOOR: f64 = 0.05;

/// Whether more or less of a signal is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Worse {
    Higher,
    Lower,
}

/// One signal the page compares: its name in the rules, which way is worse, the least
/// difference from the median that counts (`rdma:peer_signal:min_difference`), and where it
/// is in a port's rates.
pub struct Signal {
    pub name: &'static str,
    pub worse: Worse,
    pub min_difference: f64,
    read: fn(&PortRates) -> Option<f64>,
}

pub(crate) const SIGNALS: [Signal; 5] = [
    Signal {
        name: "transport_errors",
        worse: Worse::Higher,
        min_difference: 1.0,
        read: |r| r.transport_errors_per_second,
    },
    Signal {
        name: "cnp_handled",
        worse: Worse::Higher,
        min_difference: 100.0,
        read: |r| r.cnp_handled_per_second,
    },
    Signal {
        name: "pfc_paused",
        worse: Worse::Higher,
        min_difference: 0.01,
        // The switch pausing the NIC, on its most paused priority; none paused is 0.
        read: |r| Some(r.max_pause(Direction::Rx).map_or(0.0, |p| p.share)),
    },
    Signal {
        name: "fec_corrected_bits",
        worse: Worse::Higher,
        min_difference: 1000.0,
        read: |r| r.fec_corrected_bits_per_second,
    },
    Signal {
        name: "tx_bytes",
        worse: Worse::Lower,
        min_difference: 1e9,
        read: |r| r.tx_bytes_per_second,
    },
];

/// A signal on which a NIC stands out from its rail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutlierSignal {
    pub signal: &'static str,
    pub worse: Worse,
    pub value: f64,
    /// The rail peers' median (the NIC among them).
    pub peers_median: f64,
    /// Modified z-score, positive when worse.
    pub score: f64,
}

/// A NIC that stands out from its rail on one signal or more.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerOutlier {
    pub host: String,
    pub device: String,
    pub port: String,
    pub rail: String,
    pub peers: usize,
    pub signals: Vec<OutlierSignal>,
    /// The signals in words, for the page.
    pub evidence: String,
}

impl PeerOutlier {
    /// The signals in words: `cnp_handled 3000 against the peers' median 1000 (score 9.1)`.
    fn describe(&self) -> String {
        let words: Vec<String> = self
            .signals
            .iter()
            .map(|s| {
                format!(
                    "{} {} against the peers' median {} (score {:.1})",
                    s.signal,
                    short(s.value),
                    short(s.peers_median),
                    s.score
                )
            })
            .collect();
        format!(
            "stands out from the {} NICs of rail {} on {}",
            self.peers,
            self.rail,
            words.join(", ")
        )
    }
}

/// A number in three significant digits, without a unit (each signal has its own).
fn short(value: f64) -> String {
    if value != 0.0 && (value.abs() >= 1e5 || value.abs() < 1e-2) {
        format!("{value:.2e}")
    } else {
        format!("{value:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// The `q` quantile as Prometheus' `quantile` computes it (linear between ranks).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = q * (sorted.len() - 1) as f64;
    let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile(values, 0.5)
}

fn is_peer(nic: &NicView) -> bool {
    let tx = nic.rates.as_ref().and_then(|r| r.tx_bytes_per_second);
    match (tx, nic.rate_bytes_per_second) {
        (Some(tx), Some(line)) if line > 0.0 => tx / line > MIN_TX_UTILIZATION,
        _ => false,
    }
}

/// The NICs that stand out from their rail, host and device order.
pub fn outliers(hosts: &[HostView]) -> Vec<PeerOutlier> {
    // rail -> its peers, as (host, NIC).
    let mut rails: BTreeMap<&str, Vec<(&HostView, &NicView)>> = BTreeMap::new();
    for host in hosts {
        for nic in host.nics.iter().filter(|n| is_peer(n)) {
            rails
                .entry(nic.device.as_str())
                .or_default()
                .push((host, nic));
        }
    }
    let mut found: BTreeMap<(&str, &str, &str), PeerOutlier> = BTreeMap::new();
    for (rail, peers) in &rails {
        for signal in &SIGNALS {
            let values: Vec<(&HostView, &NicView, f64)> = peers
                .iter()
                .filter_map(|(h, n)| Some((*h, *n, (signal.read)(n.rates.as_ref()?)?)))
                .filter(|(_, _, v)| v.is_finite())
                .collect();
            if values.len() < MIN_PEERS {
                continue;
            }
            let mut all: Vec<f64> = values.iter().map(|(_, _, v)| *v).collect();
            let peers_median = median(&mut all);
            let mut deviations: Vec<f64> = all.iter().map(|v| (v - peers_median).abs()).collect();
            let spread = median(&mut deviations)
                .max(RELATIVE_FLOOR * peers_median.abs())
                .max(signal.min_difference / 5.0);
            for (host, nic, value) in values {
                let worse_by = match signal.worse {
                    Worse::Higher => value - peers_median,
                    Worse::Lower => peers_median - value,
                };
                let score = MAD_TO_SIGMA * worse_by / spread;
                if score < OUTLIER_SCORE || worse_by.abs() < signal.min_difference {
                    continue;
                }
                found
                    .entry((&host.name, &nic.device, &nic.port))
                    .or_insert_with(|| PeerOutlier {
                        host: host.name.clone(),
                        device: nic.device.clone(),
                        port: nic.port.clone(),
                        rail: rail.to_string(),
                        peers: peers.len(),
                        signals: Vec::new(),
                        evidence: String::new(),
                    })
                    .signals
                    .push(OutlierSignal {
                        signal: signal.name,
                        worse: signal.worse,
                        value,
                        peers_median,
                        score,
                    });
            }
        }
    }
    found
        .into_values()
        .map(|mut outlier| {
            outlier.evidence = outlier.describe();
            outlier
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::fabric_json::Status;

    const LINE: f64 = 50e9;

    fn nic(device: &str, rates: PortRates) -> NicView {
        NicView {
            device: device.into(),
            port: "1".into(),
            netdev: None,
            link_layer: None,
            state: None,
            phys_state: None,
            up: true,
            rate_bytes_per_second: Some(LINE),
            firmware: None,
            rates: Some(rates),
            rx_utilization: None,
            sampler: Vec::new(),
            switch: None,
            status: Status::Ok,
            label: String::new(),
        }
    }

    /// A busy NIC: 90 % of line rate out, `cnp` CNPs handled a second, a little wobble.
    fn busy(cnp: f64, wobble: f64) -> PortRates {
        PortRates {
            window_seconds: 5.0,
            tx_bytes_per_second: Some(0.9 * LINE * (1.0 + wobble)),
            cnp_handled_per_second: Some(cnp * (1.0 + wobble)),
            transport_errors_per_second: Some(0.0),
            ..PortRates::default()
        }
    }

    fn host(name: &str, nics: Vec<NicView>) -> HostView {
        HostView {
            name: name.into(),
            sysfs_root: "/sys".into(),
            infiniband_present: true,
            last_read_seconds_ago: None,
            rate_window_seconds: Some(5.0),
            nics,
            read_errors: Vec::new(),
        }
    }

    /// Eight hosts of two NICs; `odd` says what host `h`'s mlx5_1 does.
    fn fleet(odd: impl Fn(usize) -> PortRates) -> Vec<HostView> {
        (0..8)
            .map(|h| {
                let wobble = 0.02 * ((h as f64) * 1.7).sin();
                host(
                    &format!("gpu-node-{h:02}"),
                    vec![nic("mlx5_0", busy(1000.0, wobble)), nic("mlx5_1", odd(h))],
                )
            })
            .collect()
    }

    #[test]
    fn the_nic_worse_than_its_rail_is_marked_with_its_signals() {
        let hosts = fleet(|h| {
            let mut r = busy(1000.0, 0.01 * h as f64);
            if h == 3 {
                r.cnp_handled_per_second = Some(3000.0);
                r.transport_errors_per_second = Some(4.0);
            }
            r
        });
        let found = outliers(&hosts);
        assert_eq!(found.len(), 1, "{found:#?}");
        let gray = &found[0];
        assert_eq!(
            (gray.host.as_str(), gray.device.as_str()),
            ("gpu-node-03", "mlx5_1")
        );
        assert_eq!((gray.rail.as_str(), gray.peers), ("mlx5_1", 8));
        let names: Vec<_> = gray.signals.iter().map(|s| s.signal).collect();
        assert_eq!(names, ["transport_errors", "cnp_handled"]);
        assert!(
            gray.evidence
                .contains("cnp_handled 3000 against the peers' median 1045 (score"),
            "{}",
            gray.evidence
        );
    }

    #[test]
    fn a_whole_rail_changing_together_and_an_idle_rail_mark_nobody() {
        // Every mlx5_1 handles three times the CNPs of mlx5_0: the rail moved, no NIC did.
        assert_eq!(outliers(&fleet(|h| busy(3000.0, 0.01 * h as f64))), vec![]);
        // Every mlx5_1 idle, one of them with errors: idle NICs are no peers.
        let idle = fleet(|h| PortRates {
            window_seconds: 5.0,
            tx_bytes_per_second: Some(0.0),
            transport_errors_per_second: Some(if h == 2 { 50.0 } else { 0.0 }),
            ..PortRates::default()
        });
        assert_eq!(outliers(&idle), vec![]);
    }

    #[test]
    fn a_small_difference_on_agreeing_peers_is_noise() {
        // Peers that agree exactly (MAD 0): one NIC half an error a second above them is
        // under the least difference that counts.
        let hosts = fleet(|h| {
            let mut r = busy(1000.0, 0.0);
            r.transport_errors_per_second = Some(if h == 5 { 0.5 } else { 0.0 });
            r
        });
        assert_eq!(outliers(&hosts), vec![]);
    }

    #[test]
    fn a_rail_of_two_busy_nics_is_not_compared() {
        let hosts: Vec<HostView> = (0..2)
            .map(|h| {
                let mut r = busy(1000.0, 0.0);
                r.cnp_handled_per_second = Some(if h == 0 { 90_000.0 } else { 1000.0 });
                host(&format!("gpu-node-{h:02}"), vec![nic("mlx5_0", r)])
            })
            .collect();
        assert_eq!(outliers(&hosts), vec![]);
    }

    #[test]
    fn a_nic_sending_far_less_than_its_peers_stands_out() {
        let hosts = fleet(|h| busy(1000.0, if h == 6 { -0.5 } else { 0.0 }));
        let found = outliers(&hosts);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].host, "gpu-node-06");
        // Its CNPs handled fell with its bytes: only the bytes count as worse.
        assert_eq!(found[0].signals[0].signal, "tx_bytes");
        assert_eq!(found[0].signals.len(), 1, "{found:#?}");
    }

    /// The page's numbers are the rules': thresholds, peers, and each signal's least difference.
    #[test]
    fn the_numbers_are_the_recording_rules_numbers() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("alerts/rdma-rules.yml");
        let text = std::fs::read_to_string(path).unwrap();
        let rules: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let group = rules["groups"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "rdma-peers.rules")
            .expect("the peers group");
        let mut min_differences = BTreeMap::new();
        let mut expressions = String::new();
        for rule in group["rules"].as_sequence().unwrap() {
            let expr = rule["expr"].as_str().unwrap();
            expressions.push_str(expr);
            if rule["record"] == "rdma:peer_signal:min_difference" {
                let value: f64 = expr
                    .trim()
                    .trim_start_matches("vector(")
                    .trim_end_matches(')')
                    .parse()
                    .unwrap();
                min_differences.insert(
                    rule["labels"]["signal"].as_str().unwrap().to_string(),
                    value,
                );
            }
            if rule["record"] == "rdma:nic_peer_signal:rate5m" {
                let name = rule["labels"]["signal"].as_str().unwrap();
                if let Some(signal) = SIGNALS.iter().find(|s| s.name == name) {
                    let worse = rule["labels"]["worse"].as_str().unwrap();
                    assert_eq!(serde_json::to_value(signal.worse).unwrap(), worse, "{name}");
                }
            }
        }
        for signal in &SIGNALS {
            assert_eq!(
                min_differences.get(signal.name),
                Some(&signal.min_difference),
                "{}",
                signal.name
            );
        }
        for needle in [
            format!("> {MIN_TX_UTILIZATION}"),
            format!(">= {MIN_PEERS}"),
            format!(">= {OUTLIER_SCORE}"),
            format!("{MAD_TO_SIGMA} *"),
            format!("{RELATIVE_FLOOR} * abs"),
            "min_difference) / 5".to_string(),
        ] {
            assert!(expressions.contains(&needle), "{needle} not in the rules");
        }
    }
}
