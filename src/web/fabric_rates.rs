//! Rates of one RDMA port between two walks, for the landing page: data, PFC pause share per
//! priority and direction, ECN marks, CNPs and errors. Counters only: a counter that went back
//! (a driver reload) gives no rate rather than a negative or invented one.

use crate::direction::Direction;
use crate::node::counters::Counters;
use crate::node::ethtool_map::{classify_for, TypedStat};
use crate::node::sysfs::Port;

/// `hw_counters/` that count retransmissions and sequence errors: the peer comparison's
/// `transport_errors` signal (`rdma:nic_peer_signal:rate5m` sums the same four).
const RETRANSMISSION_HW_COUNTERS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "implied_nak_seq_err",
];

/// Port counters that count link or receive errors (kernel names, `counters/`).
const ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_errors",
    "port_xmit_discards",
];

/// `hw_counters/` that count transport errors (what `transport-errors` raises).
const ERROR_HW_COUNTERS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "req_transport_retries_exceeded",
    "rnr_nak_retry_err",
];

/// Paused share of one priority in one direction over the window.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PauseShare {
    pub priority: u8,
    pub direction: &'static str,
    /// 0..1.
    pub share: f64,
}

/// What moved on a port between two walks, per second.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PortRates {
    pub window_seconds: f64,
    pub rx_bytes_per_second: Option<f64>,
    pub tx_bytes_per_second: Option<f64>,
    /// ECN-marked RoCE packets this port received (`np_ecn_marked_roce_packets`).
    pub ecn_marked_per_second: Option<f64>,
    /// Share of received packets that were ECN-marked.
    pub ecn_marked_share: Option<f64>,
    pub cnp_sent_per_second: Option<f64>,
    pub cnp_handled_per_second: Option<f64>,
    /// CNPs the sender did not react to (DCQCN off).
    pub cnp_ignored_per_second: Option<f64>,
    /// Link, receive and transport errors summed.
    pub errors_per_second: Option<f64>,
    /// Retransmissions and sequence errors (`RETRANSMISSION_HW_COUNTERS` summed).
    pub transport_errors_per_second: Option<f64>,
    /// Bits the PHY's FEC corrected (`rx_corrected_bits_phy`).
    pub fec_corrected_bits_per_second: Option<f64>,
    /// Only priorities and directions that paused at all, highest share first.
    pub pause: Vec<PauseShare>,
}

fn counter(list: &Counters, name: &str) -> Option<u64> {
    list.get(name)
}

/// A classic counter, from `counters/` or its legacy `counters_ext/<name>_64`.
fn port_counter(port: &Port, name: &str) -> Option<u64> {
    counter(&port.counters, name).or_else(|| counter(&port.counters_ext, &format!("{name}_64")))
}

/// Growth per second; `None` when either side lacks it or it went back.
fn per_second(before: Option<u64>, after: Option<u64>, seconds: f64) -> Option<f64> {
    let grown = after?.checked_sub(before?)?;
    Some(grown as f64 / seconds)
}

fn sum_per_second(
    before: &Counters,
    after: &Counters,
    names: &[&str],
    seconds: f64,
) -> Option<f64> {
    let rates: Vec<f64> = names
        .iter()
        .filter_map(|n| per_second(counter(before, n), counter(after, n), seconds))
        .collect();
    (!rates.is_empty()).then(|| rates.iter().sum())
}

/// The rates of `after` against `before`, `seconds` apart.
pub(crate) fn port_rates(before: &Port, after: &Port, seconds: f64) -> Option<PortRates> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        return None;
    }
    let port_rate = |name: &str| {
        per_second(
            port_counter(before, name),
            port_counter(after, name),
            seconds,
        )
    };
    let hw_rate = |name: &str| {
        per_second(
            counter(&before.hw_counters, name),
            counter(&after.hw_counters, name),
            seconds,
        )
    };
    // Data counters count 4-octet words.
    let rx_bytes = port_rate("port_rcv_data").map(|w| w * 4.0);
    let tx_bytes = port_rate("port_xmit_data").map(|w| w * 4.0);
    let ecn = hw_rate("np_ecn_marked_roce_packets");
    let rx_packets = port_rate("port_rcv_packets");
    let errors = [
        sum_per_second(&before.counters, &after.counters, ERROR_COUNTERS, seconds),
        sum_per_second(
            &before.hw_counters,
            &after.hw_counters,
            ERROR_HW_COUNTERS,
            seconds,
        ),
    ];
    let errors = (errors.iter().any(Option::is_some)).then(|| errors.iter().flatten().sum());
    let transport_errors = sum_per_second(
        &before.hw_counters,
        &after.hw_counters,
        RETRANSMISSION_HW_COUNTERS,
        seconds,
    );
    let fec_rates: Vec<f64> = after
        .ethtool
        .iter()
        .filter(|(name, _)| {
            classify_for(after.netdev_driver.as_deref(), name) == Some(TypedStat::FecCorrectedBits)
        })
        .filter_map(|(name, value)| per_second(before.ethtool.get(name), Some(value), seconds))
        .collect();
    let fec_corrected = (!fec_rates.is_empty()).then(|| fec_rates.iter().sum());
    let mut pause: Vec<PauseShare> = after
        .ethtool
        .iter()
        .filter_map(|(name, value)| {
            let TypedStat::PfcPauseDurationMicros {
                priority,
                direction,
            } = classify_for(after.netdev_driver.as_deref(), name)?
            else {
                return None;
            };
            let micros = per_second(before.ethtool.get(name), Some(value), seconds)?;
            let share = (micros / 1e6).clamp(0.0, 1.0);
            (share > 0.0).then_some(PauseShare {
                priority,
                direction: direction.as_label(),
                share,
            })
        })
        .collect();
    pause.sort_by(|a, b| b.share.total_cmp(&a.share));
    Some(PortRates {
        window_seconds: seconds,
        rx_bytes_per_second: rx_bytes,
        tx_bytes_per_second: tx_bytes,
        ecn_marked_per_second: ecn,
        ecn_marked_share: ecn
            .zip(rx_packets)
            .and_then(|(marks, packets)| (packets > 0.0).then(|| (marks / packets).min(1.0))),
        cnp_sent_per_second: hw_rate("np_cnp_sent"),
        cnp_handled_per_second: hw_rate("rp_cnp_handled"),
        cnp_ignored_per_second: hw_rate("rp_cnp_ignored"),
        errors_per_second: errors,
        transport_errors_per_second: transport_errors,
        fec_corrected_bits_per_second: fec_corrected,
        pause,
    })
}

impl PortRates {
    /// The highest paused share in `direction`, with its priority.
    pub(crate) fn max_pause(&self, direction: Direction) -> Option<PauseShare> {
        self.pause
            .iter()
            .filter(|p| p.direction == direction.as_label())
            .copied()
            .max_by(|a, b| a.share.total_cmp(&b.share))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(counters: &[(&str, u64)], hw: &[(&str, u64)], ethtool: &[(&str, u64)]) -> Port {
        let list = |l: &[(&str, u64)]| l.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        Port {
            netdev: Some("ens1f0np0".into()),
            netdev_driver: Some("mlx5_core".into()),
            counters: list(counters),
            hw_counters: list(hw),
            ethtool: list(ethtool),
            ..Port::default()
        }
    }

    #[test]
    fn rates_per_second_with_words_to_bytes_and_pause_share() {
        let before = port(
            &[
                ("port_rcv_data", 100),
                ("port_rcv_packets", 1000),
                ("symbol_error", 1),
            ],
            &[("np_ecn_marked_roce_packets", 10), ("rp_cnp_ignored", 0)],
            &[
                ("tx_prio3_pause_duration", 1_000_000),
                ("rx_prio3_pause_duration", 0),
            ],
        );
        let after = port(
            &[
                ("port_rcv_data", 300),
                ("port_rcv_packets", 3000),
                ("symbol_error", 5),
            ],
            &[("np_ecn_marked_roce_packets", 30), ("rp_cnp_ignored", 8)],
            &[
                ("tx_prio3_pause_duration", 2_900_000),
                ("rx_prio3_pause_duration", 0),
            ],
        );
        let rates = port_rates(&before, &after, 2.0).unwrap();
        assert_eq!(rates.rx_bytes_per_second, Some(400.0));
        assert_eq!(rates.tx_bytes_per_second, None);
        assert_eq!(rates.ecn_marked_per_second, Some(10.0));
        assert_eq!(rates.ecn_marked_share, Some(0.01));
        assert_eq!(rates.cnp_ignored_per_second, Some(4.0));
        assert_eq!(rates.errors_per_second, Some(2.0));
        // Only what paused: 1.9 s of 2 s on priority 3, tx.
        assert_eq!(rates.pause.len(), 1);
        let tx = rates.max_pause(Direction::Tx).unwrap();
        assert_eq!((tx.priority, tx.direction), (3, "tx"));
        assert!((tx.share - 0.95).abs() < 1e-9, "{tx:?}");
        assert!(rates.max_pause(Direction::Rx).is_none());
    }

    #[test]
    fn retransmissions_and_fec_corrections_per_second() {
        let before = port(
            &[],
            &[("out_of_sequence", 10), ("local_ack_timeout_err", 1)],
            &[("rx_corrected_bits_phy", 1_000)],
        );
        let after = port(
            &[],
            &[("out_of_sequence", 18), ("local_ack_timeout_err", 3)],
            &[("rx_corrected_bits_phy", 9_000)],
        );
        let rates = port_rates(&before, &after, 2.0).unwrap();
        assert_eq!(rates.transport_errors_per_second, Some(5.0));
        assert_eq!(rates.fec_corrected_bits_per_second, Some(4_000.0));
        // Neither counter on a port: no rate, not 0.
        let bare = port(&[], &[], &[]);
        let rates = port_rates(&bare, &bare, 2.0).unwrap();
        assert_eq!(rates.transport_errors_per_second, None);
        assert_eq!(rates.fec_corrected_bits_per_second, None);
    }

    #[test]
    fn a_counter_that_went_back_gives_no_rate() {
        let before = port(&[("port_rcv_data", 500)], &[], &[]);
        let after = port(&[("port_rcv_data", 10)], &[], &[]);
        let rates = port_rates(&before, &after, 1.0).unwrap();
        assert_eq!(rates.rx_bytes_per_second, None);
        assert!(port_rates(&before, &after, 0.0).is_none());
        assert!(port_rates(&before, &after, f64::NAN).is_none());
    }
}
