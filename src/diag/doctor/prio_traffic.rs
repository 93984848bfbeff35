//! Where the port's bytes really went: mlx5's per-priority byte counters (`rx/tx_prio<p>_bytes`)
//! against its RDMA byte counters (`rx/tx_vport_rdma_{unicast,multicast}_bytes`) and the PFC
//! set. RDMA bytes that exceed what the PFC priorities carried went over a lossy priority: the
//! signature of RoCE on priority 0 when the traffic class, trust mode or DSCP map is wrong.
//! The counters run since the driver started, so this is the port's history, not this minute.

use crate::node::ethtool::RawStat;

use super::qos::PfcView;
use super::report::{Finding, Severity};
use super::trust::priorities;

/// Below this many bytes on all priorities, shares say nothing.
const MIN_BYTES: u64 = 64 << 20;
/// The PFC priorities must have carried at least this share of the RDMA bytes. Priority counters
/// include the Ethernet framing that RDMA byte counters do not, so a healthy port is above 1.
const MIN_COVERED_SHARE: f64 = 0.5;

/// Bytes per priority, both directions.
pub(crate) fn priority_bytes(stats: &[RawStat]) -> Option<[u64; 8]> {
    let get = |name: String| stats.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    if get("rx_prio0_bytes".into()).is_none() && get("tx_prio0_bytes".into()).is_none() {
        return None;
    }
    let mut bytes = [0u64; 8];
    for (p, total) in bytes.iter_mut().enumerate() {
        let rx = get(format!("rx_prio{p}_bytes")).unwrap_or(0);
        let tx = get(format!("tx_prio{p}_bytes")).unwrap_or(0);
        *total = rx.saturating_add(tx);
    }
    Some(bytes)
}

/// RDMA bytes, both directions; `None` when the driver does not count them apart.
pub(crate) fn rdma_bytes(stats: &[RawStat]) -> Option<u64> {
    let names = [
        "rx_vport_rdma_unicast_bytes",
        "tx_vport_rdma_unicast_bytes",
        "rx_vport_rdma_multicast_bytes",
        "tx_vport_rdma_multicast_bytes",
    ];
    let found: Vec<u64> = stats
        .iter()
        .filter(|(n, _)| names.contains(&n.as_str()))
        .map(|(_, v)| *v)
        .collect();
    (!found.is_empty()).then(|| found.iter().fold(0u64, |a, b| a.saturating_add(*b)))
}

/// What the counters say.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No `rx/tx_prio<p>_bytes` at all.
    NoCounters,
    /// Fewer than [`MIN_BYTES`] on all priorities.
    NoTraffic { total: u64 },
    /// PFC is enabled on no priority: everything is lossy.
    NoPfc { busiest: u8, share: f64 },
    /// The PFC priorities carried at least [`MIN_COVERED_SHARE`] of the RDMA bytes.
    Covered { lossless_share_of_all: f64 },
    /// RDMA bytes beyond what the PFC priorities carried: `missing` of them went lossy.
    Uncovered {
        missing: f64,
        busiest_lossy: u8,
        busiest_share: f64,
        lossless_share_of_all: f64,
    },
    /// The driver does not count RDMA bytes apart: the shares alone.
    SharesOnly {
        busiest: u8,
        share: f64,
        lossless_share_of_all: f64,
    },
}

#[cfg(test)]
impl Verdict {
    /// A word for each case (the corpus' expected files name them).
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::NoCounters => "no-counters",
            Verdict::NoTraffic { .. } => "no-traffic",
            Verdict::NoPfc { .. } => "no-pfc",
            Verdict::Covered { .. } => "covered",
            Verdict::Uncovered { .. } => "uncovered",
            Verdict::SharesOnly { .. } => "shares-only",
        }
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The busiest priority among those selected by `mask`, with its bytes.
fn busiest(bytes: &[u64; 8], mask: u8) -> (u8, u64) {
    (0..8u8)
        .filter(|p| mask & (1 << p) != 0)
        .map(|p| (p, bytes[usize::from(p)]))
        .fold(
            (0, 0),
            |best, (p, b)| if b > best.1 { (p, b) } else { best },
        )
}

/// Pure: the verdict from the counters and the PFC set (bit `p`: PFC on priority `p`).
pub fn classify(stats: &[RawStat], pfc_enabled: u8) -> Verdict {
    let Some(bytes) = priority_bytes(stats) else {
        return Verdict::NoCounters;
    };
    let total = bytes.iter().fold(0u64, |a, b| a.saturating_add(*b));
    if total < MIN_BYTES {
        return Verdict::NoTraffic { total };
    }
    if pfc_enabled == 0 {
        let (p, b) = busiest(&bytes, 0xff);
        return Verdict::NoPfc {
            busiest: p,
            share: share(b, total),
        };
    }
    let lossless = (0..8)
        .filter(|p| pfc_enabled & (1 << p) != 0)
        .fold(0u64, |a, p| a.saturating_add(bytes[p]));
    let lossless_share_of_all = share(lossless, total);
    let (lossy_p, lossy_b) = busiest(&bytes, !pfc_enabled);
    match rdma_bytes(stats) {
        Some(rdma) if rdma > 0 => {
            if lossless as f64 >= MIN_COVERED_SHARE * rdma as f64 {
                Verdict::Covered {
                    lossless_share_of_all,
                }
            } else {
                Verdict::Uncovered {
                    missing: 1.0 - share(lossless, rdma),
                    busiest_lossy: lossy_p,
                    busiest_share: share(lossy_b, total),
                    lossless_share_of_all,
                }
            }
        }
        _ => Verdict::SharesOnly {
            busiest: lossy_p,
            share: share(lossy_b, total),
            lossless_share_of_all,
        },
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

const SOURCE: &str = "ethtool statistics rx/tx_prio<p>_bytes since the counters started";

/// The finding for one port; `pfc` is the PFC set the PFC check used.
pub fn check(
    stats: &[RawStat],
    pfc: &Result<PfcView, String>,
    device: &str,
    port: u32,
    netdev: &str,
) -> Finding {
    let finding =
        |severity, message: String| Finding::port("prio-traffic", device, port, severity, message);
    let Ok(view) = pfc else {
        return finding(
            Severity::Info,
            "where RDMA bytes go is not checked: the PFC set is unknown".into(),
        );
    };
    let lossless = priorities(view.enabled);
    match classify(stats, view.enabled) {
        Verdict::NoCounters => finding(
            Severity::Info,
            format!("{netdev}'s driver has no per-priority byte counters (rx/tx_prio<p>_bytes)"),
        ),
        Verdict::NoTraffic { total } => finding(
            Severity::Info,
            format!("too little traffic to tell where RDMA goes ({total} bytes on all priorities; {SOURCE})"),
        ),
        Verdict::NoPfc { busiest, share } => finding(
            Severity::Info,
            format!(
                "all traffic is lossy: no priority has PFC, priority {busiest} carries {} of the \
                 bytes ({SOURCE})",
                percent(share)
            ),
        ),
        Verdict::Covered {
            lossless_share_of_all,
        } => finding(
            Severity::Ok,
            format!(
                "RDMA bytes fit in what the PFC priority {lossless} carried ({} of all bytes; \
                 {SOURCE}, against rx/tx_vport_rdma_*_bytes)",
                percent(lossless_share_of_all)
            ),
        ),
        Verdict::Uncovered {
            missing,
            busiest_lossy,
            busiest_share,
            lossless_share_of_all,
        } => finding(
            Severity::Warn,
            format!(
                "{} of the RDMA bytes went over priorities without PFC: priority \
                 {busiest_lossy} carries {} of all bytes, the PFC priority {lossless} {} ({SOURCE}, \
                 against rx/tx_vport_rdma_*_bytes; PFC from {})",
                if missing >= 0.995 {
                    "all".to_string()
                } else {
                    format!("at least {}", percent(missing))
                },
                percent(busiest_share),
                percent(lossless_share_of_all),
                view.source
            ),
        )
        .with_fix(format!(
            "RoCE is not marked for the lossless priority: check the traffic class the \
             application sets (NCCL_IB_TC, e.g. 106 for DSCP 26), MLNX_OFED's \
             tc/<port>/traffic_class, the trust mode (mlnx_qos -i {netdev} --trust dscp) and the \
             DSCP map (dcb app show dev {netdev})"
        )),
        Verdict::SharesOnly {
            busiest,
            share,
            lossless_share_of_all,
        } => finding(
            Severity::Info,
            format!(
                "the PFC priority {lossless} carries {} of all bytes, priority {busiest} (no PFC) \
                 {}; the driver does not count RDMA bytes apart, so RoCE cannot be told from TCP \
                 ({SOURCE})",
                percent(lossless_share_of_all),
                percent(share)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::doctor::qos::inferred_pfc;

    fn stats(pairs: &[(&str, u64)]) -> Vec<RawStat> {
        pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn rdma_on_the_pfc_priority_is_covered() {
        let s = stats(&[
            ("rx_prio0_bytes", 5 * GIB),
            ("tx_prio0_bytes", 5 * GIB),
            ("rx_prio3_bytes", 400 * GIB),
            ("tx_prio3_bytes", 420 * GIB),
            ("rx_vport_rdma_unicast_bytes", 390 * GIB),
            ("tx_vport_rdma_unicast_bytes", 410 * GIB),
        ]);
        assert_eq!(classify(&s, 0b1000).label(), "covered");
    }

    #[test]
    fn rdma_on_priority_zero_is_uncovered() {
        let s = stats(&[
            ("rx_prio0_bytes", 400 * GIB),
            ("tx_prio0_bytes", 420 * GIB),
            ("rx_prio3_bytes", GIB),
            ("tx_prio3_bytes", GIB),
            ("rx_vport_rdma_unicast_bytes", 390 * GIB),
            ("tx_vport_rdma_unicast_bytes", 410 * GIB),
        ]);
        match classify(&s, 0b1000) {
            Verdict::Uncovered {
                missing,
                busiest_lossy,
                ..
            } => {
                assert_eq!(busiest_lossy, 0);
                assert!(missing > 0.99, "{missing}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn little_traffic_no_pfc_and_no_rdma_counters() {
        let idle = stats(&[("rx_prio0_bytes", 1000), ("tx_prio0_bytes", 1000)]);
        assert_eq!(classify(&idle, 0b1000).label(), "no-traffic");
        let lossy = stats(&[("rx_prio0_bytes", 9 * GIB), ("tx_prio5_bytes", GIB)]);
        assert_eq!(
            classify(&lossy, 0),
            Verdict::NoPfc {
                busiest: 0,
                share: 0.9
            }
        );
        assert_eq!(classify(&lossy, 0b10_0000).label(), "shares-only");
        assert_eq!(
            classify(&stats(&[("rx_bytes", 1)]), 0).label(),
            "no-counters"
        );
    }

    /// Real `ethtool -S` outputs (corpus kind `mlx5-prio-traffic`): each sample's expectation
    /// holds the PFC set inferred from it, its RDMA bytes and the verdict; a sample without
    /// one, or one the parser cannot read, fails.
    #[test]
    fn real_samples_give_their_expected_verdicts() {
        for (path, expected) in crate::corpus::corpus("mlx5-prio-traffic").with_expected_files() {
            let bytes = std::fs::read(&path).unwrap();
            let stats = crate::node::ethtool::parse_ethtool_text(&path, &bytes)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let pfc = inferred_pfc(&stats);
            let verdict = classify(&stats, pfc.unwrap_or(0));
            let busiest = match &verdict {
                Verdict::NoPfc { busiest, share } => format!("{busiest} {}", percent(*share)),
                Verdict::Uncovered {
                    busiest_lossy,
                    busiest_share,
                    ..
                } => format!("{busiest_lossy} {}", percent(*busiest_share)),
                Verdict::SharesOnly { busiest, share, .. } => {
                    format!("{busiest} {}", percent(*share))
                }
                _ => "-".into(),
            };
            let got = format!(
                "pfc: {}\nrdma_bytes: {}\nbusiest: {busiest}\nverdict: {}\n",
                pfc.map(|m| if m == 0 {
                    "none".to_string()
                } else {
                    priorities(m)
                })
                .unwrap_or_else(|| "unknown".into()),
                rdma_bytes(&stats).map_or("absent".to_string(), |b| b.to_string()),
                verdict.label()
            );
            assert_eq!(got, expected, "{}", path.display());
        }
    }
}
