//! One ping's figures: loss, and the network RTT and the responder's delay apart, as
//! percentiles of the answered probes.

use serde::Serialize;

use crate::probe::ping::{Outcome, ProbeResult};

/// Percentiles of one series, in nanoseconds (nearest rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Spread {
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl Spread {
    /// `None` for no values.
    pub fn of(mut values: Vec<u64>) -> Option<Spread> {
        values.sort_unstable();
        let rank = |p: f64| {
            let index = (p / 100.0 * values.len() as f64).ceil() as usize;
            values[index.clamp(1, values.len()) - 1]
        };
        Some(Spread {
            min: *values.first()?,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: *values.last()?,
        })
    }
}

/// What became of a ping's probes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Probes that left (those that could not be sent are `not_sent`).
    pub sent: u32,
    pub answered: u32,
    pub lost: u32,
    /// Answered with times that give no round trip.
    pub bad: u32,
    pub not_sent: u32,
    /// `lost / sent`, 0 to 1; 1 when nothing could be sent.
    pub loss: f64,
    pub network_rtt_ns: Option<Spread>,
    pub responder_delay_ns: Option<Spread>,
}

impl Summary {
    pub fn of(probes: &[ProbeResult]) -> Summary {
        let mut summary = Summary {
            sent: 0,
            answered: 0,
            lost: 0,
            bad: 0,
            not_sent: 0,
            loss: 0.0,
            network_rtt_ns: None,
            responder_delay_ns: None,
        };
        let (mut network, mut responder) = (Vec::new(), Vec::new());
        for probe in probes {
            match &probe.outcome {
                Outcome::Answered {
                    network_rtt_ns,
                    responder_delay_ns,
                } => {
                    summary.answered += 1;
                    network.push(*network_rtt_ns);
                    responder.push(*responder_delay_ns);
                }
                Outcome::Lost => summary.lost += 1,
                Outcome::Bad { .. } => summary.bad += 1,
                Outcome::NotSent { .. } => summary.not_sent += 1,
            }
        }
        summary.sent = summary.answered + summary.lost + summary.bad;
        summary.loss = if summary.sent == 0 {
            1.0
        } else {
            f64::from(summary.lost) / f64::from(summary.sent)
        };
        summary.network_rtt_ns = Spread::of(network);
        summary.responder_delay_ns = Spread::of(responder);
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(n: u32, network_rtt_ns: u64) -> ProbeResult {
        ProbeResult {
            n,
            flow_label: 1,
            outcome: Outcome::Answered {
                network_rtt_ns,
                responder_delay_ns: 1_000 * u64::from(n),
            },
        }
    }

    #[test]
    fn loss_counts_what_left_and_percentiles_take_the_nearest_rank() {
        let mut probes: Vec<ProbeResult> = (1..=8)
            .map(|n| answered(n, 10_000 * u64::from(n)))
            .collect();
        probes.push(ProbeResult {
            n: 9,
            flow_label: 1,
            outcome: Outcome::Lost,
        });
        probes.push(ProbeResult {
            n: 10,
            flow_label: 1,
            outcome: Outcome::NotSent {
                reason: "address_pending".into(),
            },
        });
        let summary = Summary::of(&probes);
        assert_eq!((summary.sent, summary.answered, summary.lost), (9, 8, 1));
        assert_eq!(summary.not_sent, 1);
        assert!((summary.loss - 1.0 / 9.0).abs() < 1e-12);
        let rtt = summary.network_rtt_ns.unwrap();
        assert_eq!(
            (rtt.min, rtt.p50, rtt.p90, rtt.p99, rtt.max),
            (10_000, 40_000, 80_000, 80_000, 80_000)
        );
        assert_eq!(summary.responder_delay_ns.unwrap().p50, 4_000);
    }

    #[test]
    fn nothing_answered_or_sent_is_all_loss() {
        let lost: Vec<ProbeResult> = (1..=3)
            .map(|n| ProbeResult {
                n,
                flow_label: 1,
                outcome: Outcome::Lost,
            })
            .collect();
        let summary = Summary::of(&lost);
        assert_eq!((summary.loss, summary.network_rtt_ns), (1.0, None));
        assert_eq!(Summary::of(&[]).loss, 1.0);
    }
}
