//! The verdict on one port from its window's evidence: ECN threshold too high, too low, healthy,
//! not enough traffic to tell, or no clear pattern. A pure function over four numbers, so that
//! the rules are the alerts' and the ECN tuning dashboard's, and a table of cases proves them.
//!
//! The rules, in the order the dashboard's "Diagnosis per path" applies them:
//!
//! | class | condition | alert it agrees with |
//! |---|---|---|
//! | `too_high` | paused > 5 % and ECN feedback on the port's own traffic < 1e-5 per packet | `RdmaEcnThresholdTooHigh` |
//! | `too_low` | paused < 0.1 %, ECN feedback > 1e-3 per packet, 5 % < throughput < 50 % of line rate | `RdmaEcnThresholdPossiblyTooLow` |
//! | `insufficient_traffic` | throughput ≤ 5 % of line rate | (the dashboard's "Idle") |
//! | `healthy` | paused < 0.1 % and throughput ≥ 50 % of line rate | (the dashboard's "Healthy") |
//! | `no_clear_pattern` | anything else, or a number missing | |

use serde::Serialize;

/// Paused more than this share of the window: PFC, not ECN, is controlling congestion
/// (`RdmaEcnThresholdTooHigh`: `rdma:nic_pfc_rx_paused_ratio:max_rate5m > 0.05`).
pub(crate) const PFC_SIGNIFICANT: f64 = 0.05;
/// Paused less than this share: no PFC to speak of (`RdmaEcnThresholdPossiblyTooLow`:
/// `rdma:nic_pfc_rx_paused_ratio:max_rate5m < 0.001`).
pub(crate) const PFC_NEAR_ZERO: f64 = 0.001;
/// Fewer ECN signals per packet than this: ECN is not acting on this port's traffic
/// (`RdmaEcnThresholdTooHigh`: `rdma:nic_cnp_handled_per_packet:ratio_rate5m < 1e-5`).
pub(crate) const ECN_FEEDBACK_LOW: f64 = 1e-5;
/// More ECN signals per packet than this: congestion control brakes hard
/// (`RdmaEcnThresholdPossiblyTooLow`: `rdma:nic_cnp_sent_per_packet:ratio_rate5m > 1e-3`).
pub(crate) const ECN_FEEDBACK_HIGH: f64 = 1e-3;
/// Throughput below this share of line rate is "far below line rate"; at or above it,
/// "near line rate" for the healthy verdict (both the alert's and the dashboard's 0.5).
pub(crate) const FAR_BELOW_LINE_RATE: f64 = 0.5;
/// Throughput at or below this share of line rate is too little traffic to judge ECN by (the
/// alert's lower bound `> 0.05`, the dashboard's "Idle").
pub(crate) const TRAFFIC_FLOOR: f64 = 0.05;

/// What the window says about one port, each number averaged over the window. `None` when
/// Prometheus had no series (or only NaN: 0/0 on an idle port) for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Signals {
    /// Share of the time the port was paused by PFC on its most paused priority (a NIC: rx
    /// pause, the switch paused it; a switch port: pause it sent to its neighbour).
    pub paused: Option<f64>,
    /// ECN feedback on the traffic the port sends, per packet (a NIC: CNPs handled per packet
    /// sent; a switch port: packets marked per packet its queues transmitted).
    pub feedback_on_sent: Option<f64>,
    /// ECN feedback on the traffic the port receives, per packet (a NIC: CNPs sent per packet
    /// received; a switch port: the same marks per packet as above).
    pub feedback_on_received: Option<f64>,
    /// Throughput against the port's line rate.
    pub utilization: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    TooHigh,
    TooLow,
    NoClearPattern,
    InsufficientTraffic,
    Healthy,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::TooHigh,
        Class::TooLow,
        Class::NoClearPattern,
        Class::InsufficientTraffic,
        Class::Healthy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::TooHigh => "too_high",
            Class::TooLow => "too_low",
            Class::NoClearPattern => "no_clear_pattern",
            Class::InsufficientTraffic => "insufficient_traffic",
            Class::Healthy => "healthy",
        }
    }

    /// Which way to move the switch's ECN marking thresholds.
    pub fn direction(self) -> &'static str {
        match self {
            Class::TooHigh => "lower Kmin/Kmax (or raise Pmax) on the lossless queue, keeping them below the PFC xoff",
            Class::TooLow => "raise Kmin/Kmax (or lower Pmax) on the lossless queue, keeping Kmax below the PFC xoff",
            Class::Healthy => "keep Kmin/Kmax",
            Class::InsufficientTraffic => "none: run a longer, larger all_reduce_perf (e.g. -b 1G -e 8G) and ask again",
            Class::NoClearPattern => "none yet: read the evidence; ECN thresholds are not the obvious cause",
        }
    }

    /// A misconfiguration the command exits 1 for.
    pub(crate) fn is_misconfiguration(self) -> bool {
        matches!(self, Class::TooHigh | Class::TooLow)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub class: Class,
    /// The rule that decided, with the numbers that met it.
    pub reason: String,
    /// Which way to move Kmin/Kmax ([`Class::direction`]).
    pub direction: &'static str,
}

fn percent(share: f64) -> String {
    format!("{:.2} %", share * 100.0)
}

/// The verdict of the first rule that holds, in the dashboard's order.
pub fn classify(s: &Signals) -> Verdict {
    let verdict = |class: Class, reason: String| Verdict {
        class,
        reason,
        direction: class.direction(),
    };
    if let (Some(paused), Some(feedback)) = (s.paused, s.feedback_on_sent) {
        if paused > PFC_SIGNIFICANT && feedback < ECN_FEEDBACK_LOW {
            return verdict(
                Class::TooHigh,
                format!(
                    "paused {} of the time (> {}) while ECN feedback on its traffic is {feedback:.2e} per packet (< {ECN_FEEDBACK_LOW:.0e}): the queue reaches the PFC threshold before the ECN one",
                    percent(paused),
                    percent(PFC_SIGNIFICANT)
                ),
            );
        }
    }
    if let (Some(paused), Some(feedback), Some(utilization)) =
        (s.paused, s.feedback_on_received, s.utilization)
    {
        if paused < PFC_NEAR_ZERO
            && feedback > ECN_FEEDBACK_HIGH
            && utilization < FAR_BELOW_LINE_RATE
            && utilization > TRAFFIC_FLOOR
        {
            return verdict(
                Class::TooLow,
                format!(
                    "no PFC (paused {}), ECN feedback {feedback:.2e} per packet (> {ECN_FEEDBACK_HIGH:.0e}) and throughput {} of line rate (< {}): senders slow down long before any queue nears PFC",
                    percent(paused),
                    percent(utilization),
                    percent(FAR_BELOW_LINE_RATE)
                ),
            );
        }
    }
    let Some(utilization) = s.utilization else {
        return verdict(
            Class::NoClearPattern,
            "no throughput series for this port in the window".into(),
        );
    };
    if utilization <= TRAFFIC_FLOOR {
        return verdict(
            Class::InsufficientTraffic,
            format!(
                "throughput {} of line rate (≤ {}): too little traffic to judge ECN by",
                percent(utilization),
                percent(TRAFFIC_FLOOR)
            ),
        );
    }
    let Some(paused) = s.paused else {
        return verdict(
            Class::NoClearPattern,
            "no PFC pause series for this port in the window".into(),
        );
    };
    if paused < PFC_NEAR_ZERO && utilization >= FAR_BELOW_LINE_RATE {
        return verdict(
            Class::Healthy,
            format!(
                "no PFC (paused {}) and throughput {} of line rate (≥ {})",
                percent(paused),
                percent(utilization),
                percent(FAR_BELOW_LINE_RATE)
            ),
        );
    }
    let why = if paused > PFC_SIGNIFICANT {
        match s.feedback_on_sent {
            Some(f) => format!(
                "paused {} of the time but ECN feedback flows ({f:.2e} per packet): PFC fires although ECN marks; look for a PFC storm (a receiver that pauses its switch) or a marking probability too low",
                percent(paused)
            ),
            None => format!(
                "paused {} of the time, and no ECN feedback series to tell whether ECN acts on this traffic",
                percent(paused)
            ),
        }
    } else if paused >= PFC_NEAR_ZERO {
        format!(
            "some PFC (paused {}, between {} and {}) and throughput {} of line rate",
            percent(paused),
            percent(PFC_NEAR_ZERO),
            percent(PFC_SIGNIFICANT),
            percent(utilization)
        )
    } else {
        format!(
            "no PFC, throughput {} of line rate (< {}) with ECN feedback {}: the job is not network-bound, or the bottleneck is elsewhere",
            percent(utilization),
            percent(FAR_BELOW_LINE_RATE),
            s.feedback_on_received
                .map_or("unknown".into(), |f| format!("{f:.2e} per packet (≤ {ECN_FEEDBACK_HIGH:.0e})"))
        )
    };
    verdict(Class::NoClearPattern, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals(
        paused: Option<f64>,
        sent: Option<f64>,
        received: Option<f64>,
        utilization: Option<f64>,
    ) -> Signals {
        Signals {
            paused,
            feedback_on_sent: sent,
            feedback_on_received: received,
            utilization,
        }
    }

    /// One row per rule and per boundary of each threshold, with the class expected.
    #[test]
    fn each_rule_and_each_threshold_boundary() {
        use Class::*;
        let cases: &[(&str, Signals, Class)] = &[
            // The demo's three scenarios, as their counters make them.
            (
                "healthy",
                signals(Some(0.0), Some(1e-4), Some(1e-4), Some(0.92)),
                Healthy,
            ),
            (
                "ecn-too-high",
                signals(Some(0.15), Some(5e-8), Some(5e-8), Some(0.7)),
                TooHigh,
            ),
            (
                "ecn-too-low",
                signals(Some(0.0), Some(4e-3), Some(4e-3), Some(0.35)),
                TooLow,
            ),
            // Too high: both conditions, each just on the wrong side.
            (
                "pause at the bound",
                signals(Some(0.05), Some(0.0), Some(0.0), Some(0.7)),
                NoClearPattern,
            ),
            (
                "feedback at the bound",
                signals(Some(0.2), Some(1e-5), Some(1e-5), Some(0.7)),
                NoClearPattern,
            ),
            (
                "too high whatever the throughput",
                signals(Some(0.9), Some(0.0), Some(0.0), Some(0.01)),
                TooHigh,
            ),
            (
                "too high without a throughput series",
                signals(Some(0.3), Some(0.0), None, None),
                TooHigh,
            ),
            // Too low: each of its four conditions just failing.
            (
                "some pause",
                signals(Some(0.001), Some(4e-3), Some(4e-3), Some(0.35)),
                NoClearPattern,
            ),
            (
                "feedback at the bound",
                signals(Some(0.0), Some(1e-3), Some(1e-3), Some(0.35)),
                NoClearPattern,
            ),
            (
                "throughput at half",
                signals(Some(0.0), Some(4e-3), Some(4e-3), Some(0.5)),
                Healthy,
            ),
            (
                "throughput at the floor",
                signals(Some(0.0), Some(4e-3), Some(4e-3), Some(0.05)),
                InsufficientTraffic,
            ),
            // Idle and healthy.
            (
                "idle",
                signals(Some(0.0), None, None, Some(0.0)),
                InsufficientTraffic,
            ),
            (
                "idle without a pause series",
                signals(None, None, None, Some(0.01)),
                InsufficientTraffic,
            ),
            (
                "healthy without marks",
                signals(Some(0.0), Some(0.0), Some(0.0), Some(0.95)),
                Healthy,
            ),
            (
                "healthy at the pause bound",
                signals(Some(0.000_999), Some(1e-4), Some(1e-4), Some(0.9)),
                Healthy,
            ),
            // What none of the rules covers.
            (
                "pause despite ECN",
                signals(Some(0.3), Some(1e-3), Some(1e-3), Some(0.6)),
                NoClearPattern,
            ),
            (
                "slow without congestion",
                signals(Some(0.0), Some(1e-4), Some(1e-4), Some(0.3)),
                NoClearPattern,
            ),
            (
                "no throughput series",
                signals(Some(0.0), Some(1e-4), Some(1e-4), None),
                NoClearPattern,
            ),
            (
                "no pause series",
                signals(None, Some(1e-4), Some(1e-4), Some(0.9)),
                NoClearPattern,
            ),
        ];
        for (name, s, expected) in cases {
            let verdict = classify(s);
            assert_eq!(
                verdict.class, *expected,
                "{name}: {s:?} -> {}",
                verdict.reason
            );
            assert!(!verdict.reason.is_empty(), "{name}");
        }
    }

    #[test]
    fn reasons_name_the_numbers_that_decided() {
        let v = classify(&signals(Some(0.15), Some(5e-8), Some(5e-8), Some(0.7)));
        assert!(v.reason.contains("15.00 %"), "{}", v.reason);
        assert!(v.reason.contains("5.00e-8"), "{}", v.reason);
        let v = classify(&signals(Some(0.0), Some(4e-3), Some(4e-3), Some(0.35)));
        assert!(v.reason.contains("35.00 %"), "{}", v.reason);
    }

    #[test]
    fn only_the_two_threshold_classes_are_misconfigurations() {
        let bad: Vec<Class> = Class::ALL
            .into_iter()
            .filter(|c| c.is_misconfiguration())
            .collect();
        assert_eq!(bad, [Class::TooHigh, Class::TooLow]);
        assert!(Class::TooHigh.direction().starts_with("lower"));
        assert!(Class::TooLow.direction().starts_with("raise"));
    }

    #[test]
    fn nan_free_inputs_never_panic_and_always_give_a_reason() {
        let values = [
            None,
            Some(0.0),
            Some(1e-9),
            Some(0.5),
            Some(1.0),
            Some(f64::MAX),
        ];
        for p in values {
            for f in values {
                for u in values {
                    let v = classify(&signals(p, f, f, u));
                    assert!(!v.reason.is_empty());
                }
            }
        }
    }
}
