//! Driver statistic names (`ethtool -S`) with a typed meaning: per-priority PFC, ECN marks,
//! discards and PHY errors. Each NIC family's names are data, one table per driver
//! ([`DRIVERS`]): adding a driver is a table, not code. Names of drivers without a table pass
//! through untyped.
//!
//! Sources: mlx5 `drivers/net/ethernet/mellanox/mlx5/core/en_stats.c` and `counters.rst`;
//! bnxt_en/bng_en `bnxt_ethtool.c` (`BNXT_RX_STATS_EXT_PFC_ENTRY`, `tx_pfc_ena_frames_pri*`);
//! ice and i40e `*_ethtool.c` (`rx_priority_%u_xoff`, `.nic` and `port.` prefixes); ionic as
//! AMD's device-metrics-exporter shows it (`rx_pripause_<p>_1us_count`, and `frames_rx_pri_<p>`
//! as the PFC pause frames of priority `p`: AMD's SDK corrects the all-priority
//! `frames_rx_pripause` by summing them). Per-priority traffic: mlx5
//! `pport_per_prio_traffic_stats_desc` (`rx_prio%d_bytes`).

use std::collections::HashMap;
use std::sync::LazyLock;

use rustc_hash::FxHashMap;

pub use crate::direction::Direction;

/// A driver statistic with a typed meaning. `priority` is the 802.1p priority 0-7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TypedStat {
    PfcPauseFrames {
        priority: u8,
        direction: Direction,
    },
    /// Driver unit: microseconds.
    PfcPauseDurationMicros {
        priority: u8,
        direction: Direction,
    },
    PfcPauseTransitions {
        priority: u8,
        direction: Direction,
    },
    GlobalPauseFrames {
        direction: Direction,
    },
    GlobalPauseDurationMicros {
        direction: Direction,
    },
    PauseStormEvents {
        severity: StormSeverity,
    },
    PriorityDiscards {
        priority: u8,
    },
    PriorityBufferDiscards {
        priority: u8,
    },
    PriorityCongestionDiscards {
        priority: u8,
    },
    PriorityEcnMarked {
        priority: u8,
    },
    /// Octets of the frames of one priority on the wire.
    PriorityBytes {
        priority: u8,
        direction: Direction,
    },
    /// Frames of one priority on the wire.
    PriorityPackets {
        priority: u8,
        direction: Direction,
    },
    PhyDiscards {
        direction: Direction,
    },
    RxOutOfBuffer,
    LinkDownEvents,
    PhySymbolErrors,
    PcsSymbolErrors,
    FecCorrectedBits,
    PhyReceivedBits,
    PhyCrcErrors,
}

/// The `severity` label of NIC pause storm events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StormSeverity {
    /// The NIC has sent pause for a long period.
    Warning,
    /// The pause storm timeout was reached and the NIC stopped sending pause.
    Error,
}

impl StormSeverity {
    /// Every value of the label, for the docs check.
    pub const ALL: &[StormSeverity] = &[StormSeverity::Warning, StormSeverity::Error];

    pub fn as_label(self) -> &'static str {
        match self {
            StormSeverity::Warning => "warning",
            StormSeverity::Error => "error",
        }
    }
}

/// What a name means before its priority is known: a [`TypedStat`] without the priority.
#[derive(Debug, Clone, Copy)]
enum Meaning {
    PfcPauseFrames(Direction),
    PfcPauseDurationMicros(Direction),
    PfcPauseTransitions(Direction),
    GlobalPauseFrames(Direction),
    GlobalPauseDurationMicros(Direction),
    PauseStormEvents(StormSeverity),
    PriorityDiscards,
    PriorityBufferDiscards,
    PriorityCongestionDiscards,
    PriorityEcnMarked,
    PriorityBytes(Direction),
    PriorityPackets(Direction),
    PhyDiscards(Direction),
    RxOutOfBuffer,
    LinkDownEvents,
    PhySymbolErrors,
    PcsSymbolErrors,
    FecCorrectedBits,
    PhyReceivedBits,
    PhyCrcErrors,
}

impl Meaning {
    /// The typed statistic; `None` when the meaning needs a priority and has none.
    fn with_priority(self, priority: Option<u8>) -> Option<TypedStat> {
        use Meaning as M;
        let p = || priority;
        Some(match self {
            M::PfcPauseFrames(direction) => TypedStat::PfcPauseFrames {
                priority: p()?,
                direction,
            },
            M::PfcPauseDurationMicros(direction) => TypedStat::PfcPauseDurationMicros {
                priority: p()?,
                direction,
            },
            M::PfcPauseTransitions(direction) => TypedStat::PfcPauseTransitions {
                priority: p()?,
                direction,
            },
            M::GlobalPauseFrames(direction) => TypedStat::GlobalPauseFrames { direction },
            M::GlobalPauseDurationMicros(direction) => {
                TypedStat::GlobalPauseDurationMicros { direction }
            }
            M::PauseStormEvents(severity) => TypedStat::PauseStormEvents { severity },
            M::PriorityDiscards => TypedStat::PriorityDiscards { priority: p()? },
            M::PriorityBufferDiscards => TypedStat::PriorityBufferDiscards { priority: p()? },
            M::PriorityCongestionDiscards => {
                TypedStat::PriorityCongestionDiscards { priority: p()? }
            }
            M::PriorityEcnMarked => TypedStat::PriorityEcnMarked { priority: p()? },
            M::PriorityBytes(direction) => TypedStat::PriorityBytes {
                priority: p()?,
                direction,
            },
            M::PriorityPackets(direction) => TypedStat::PriorityPackets {
                priority: p()?,
                direction,
            },
            M::PhyDiscards(direction) => TypedStat::PhyDiscards { direction },
            M::RxOutOfBuffer => TypedStat::RxOutOfBuffer,
            M::LinkDownEvents => TypedStat::LinkDownEvents,
            M::PhySymbolErrors => TypedStat::PhySymbolErrors,
            M::PcsSymbolErrors => TypedStat::PcsSymbolErrors,
            M::FecCorrectedBits => TypedStat::FecCorrectedBits,
            M::PhyReceivedBits => TypedStat::PhyReceivedBits,
            M::PhyCrcErrors => TypedStat::PhyCrcErrors,
        })
    }
}

/// One NIC family: the kernel driver names it goes by, and its statistic names. `{p}` in a name
/// stands for the 802.1p priority 0-7.
pub(crate) struct DriverStats {
    pub drivers: &'static [&'static str],
    names: &'static [(&'static str, Meaning)],
    /// The driver lists per-priority pause statistics only for priorities with PFC enabled, so
    /// their presence tells which priorities have PFC. mlx5 does (`mlx5e_query_pfc_combined`:
    /// enabled for rx or tx); the others list all eight priorities whatever PFC does.
    pause_names_show_pfc: bool,
}

use Direction::{Rx, Tx};
use Meaning as M;

const MLX5: DriverStats = DriverStats {
    drivers: &["mlx5_core"],
    pause_names_show_pfc: true,
    names: &[
        ("rx_prio{p}_bytes", M::PriorityBytes(Rx)),
        ("tx_prio{p}_bytes", M::PriorityBytes(Tx)),
        ("rx_prio{p}_packets", M::PriorityPackets(Rx)),
        ("tx_prio{p}_packets", M::PriorityPackets(Tx)),
        ("rx_prio{p}_pause", M::PfcPauseFrames(Rx)),
        ("tx_prio{p}_pause", M::PfcPauseFrames(Tx)),
        ("rx_prio{p}_pause_duration", M::PfcPauseDurationMicros(Rx)),
        ("tx_prio{p}_pause_duration", M::PfcPauseDurationMicros(Tx)),
        ("rx_prio{p}_pause_transition", M::PfcPauseTransitions(Rx)),
        ("tx_prio{p}_pause_transition", M::PfcPauseTransitions(Tx)),
        ("rx_prio{p}_discards", M::PriorityDiscards),
        ("rx_prio{p}_buf_discard", M::PriorityBufferDiscards),
        ("rx_prio{p}_cong_discard", M::PriorityCongestionDiscards),
        ("rx_prio{p}_marked", M::PriorityEcnMarked),
        (
            "tx_pause_storm_warning_events",
            M::PauseStormEvents(StormSeverity::Warning),
        ),
        (
            "tx_pause_storm_error_events",
            M::PauseStormEvents(StormSeverity::Error),
        ),
        ("rx_global_pause", M::GlobalPauseFrames(Rx)),
        ("tx_global_pause", M::GlobalPauseFrames(Tx)),
        ("rx_global_pause_duration", M::GlobalPauseDurationMicros(Rx)),
        ("tx_global_pause_duration", M::GlobalPauseDurationMicros(Tx)),
        ("rx_discards_phy", M::PhyDiscards(Rx)),
        ("tx_discards_phy", M::PhyDiscards(Tx)),
        ("rx_out_of_buffer", M::RxOutOfBuffer),
        ("link_down_events_phy", M::LinkDownEvents),
        ("rx_symbol_err_phy", M::PhySymbolErrors),
        ("rx_pcs_symbol_err_phy", M::PcsSymbolErrors),
        ("rx_corrected_bits_phy", M::FecCorrectedBits),
        ("rx_bits_phy", M::PhyReceivedBits),
        ("rx_crc_errors_phy", M::PhyCrcErrors),
    ],
};

/// Broadcom NetXtreme-C/E and its successor (Thor, Thor2). Its `{rx,tx}_{bytes,packets}_pri<p>`
/// are not per-priority traffic: each is the counter of the CoS queue the priority maps to
/// (`pri2cos_idx`), so priorities sharing a queue repeat one value; they stay untyped.
const BNXT: DriverStats = DriverStats {
    drivers: &["bnxt_en", "bng_en"],
    pause_names_show_pfc: false,
    names: &[
        ("rx_pfc_ena_frames_pri{p}", M::PfcPauseFrames(Rx)),
        ("tx_pfc_ena_frames_pri{p}", M::PfcPauseFrames(Tx)),
        ("pfc_pri{p}_rx_duration_us", M::PfcPauseDurationMicros(Rx)),
        ("pfc_pri{p}_tx_duration_us", M::PfcPauseDurationMicros(Tx)),
        ("pfc_pri{p}_rx_transitions", M::PfcPauseTransitions(Rx)),
        ("pfc_pri{p}_tx_transitions", M::PfcPauseTransitions(Tx)),
        ("rx_pause_frames", M::GlobalPauseFrames(Rx)),
        ("tx_pause_frames", M::GlobalPauseFrames(Tx)),
    ],
};

/// Intel E810 (ice, RDMA through irdma). XOFF frames are the pauses; XON frames end them.
const ICE: DriverStats = DriverStats {
    drivers: &["ice"],
    pause_names_show_pfc: false,
    names: &[
        ("rx_priority_{p}_xoff.nic", M::PfcPauseFrames(Rx)),
        ("tx_priority_{p}_xoff.nic", M::PfcPauseFrames(Tx)),
        ("link_xoff_rx.nic", M::GlobalPauseFrames(Rx)),
        ("link_xoff_tx.nic", M::GlobalPauseFrames(Tx)),
        ("rx_crc_errors.nic", M::PhyCrcErrors),
    ],
};

/// Intel X710/XL710 (i40e).
const I40E: DriverStats = DriverStats {
    drivers: &["i40e"],
    pause_names_show_pfc: false,
    names: &[
        ("port.rx_priority_{p}_xoff", M::PfcPauseFrames(Rx)),
        ("port.tx_priority_{p}_xoff", M::PfcPauseFrames(Tx)),
        ("port.link_xoff_rx", M::GlobalPauseFrames(Rx)),
        ("port.link_xoff_tx", M::GlobalPauseFrames(Tx)),
        ("port.rx_crc_errors", M::PhyCrcErrors),
    ],
};

/// AMD Pensando (ionic): per priority, the PFC pause frames (`frames_*_pri_<p>`, whose sum is
/// the port's `frames_*_pripause`) and the pause time in microseconds. No per-priority traffic.
const IONIC: DriverStats = DriverStats {
    drivers: &["ionic"],
    pause_names_show_pfc: false,
    names: &[
        ("frames_rx_pri_{p}", M::PfcPauseFrames(Rx)),
        ("frames_tx_pri_{p}", M::PfcPauseFrames(Tx)),
        ("rx_pripause_{p}_1us_count", M::PfcPauseDurationMicros(Rx)),
        ("tx_pripause_{p}_1us_count", M::PfcPauseDurationMicros(Tx)),
        ("rx_pause_1us_count", M::GlobalPauseDurationMicros(Rx)),
        ("tx_pause_1us_count", M::GlobalPauseDurationMicros(Tx)),
    ],
};

/// Every driver with typed statistics.
pub(crate) const DRIVERS: &[DriverStats] = &[MLX5, BNXT, ICE, I40E, IONIC];

/// Each table's names with `{p}` expanded; `None` stands for "driver unknown": every table.
static BY_DRIVER: LazyLock<HashMap<Option<&'static str>, FxHashMap<String, TypedStat>>> =
    LazyLock::new(|| {
        let mut all = FxHashMap::default();
        let mut by_driver = HashMap::new();
        for table in DRIVERS {
            let names = expand(table);
            for (name, stat) in &names {
                all.entry(name.clone()).or_insert(*stat);
            }
            for driver in table.drivers {
                by_driver.insert(Some(*driver), names.clone());
            }
        }
        by_driver.insert(None, all);
        by_driver
    });

fn expand(table: &DriverStats) -> FxHashMap<String, TypedStat> {
    // Looked up once per driver statistic per scrape, by the driver's own names: Fx hash.
    let mut names = FxHashMap::default();
    for (pattern, meaning) in table.names {
        if pattern.contains("{p}") {
            for priority in 0..8u8 {
                if let Some(stat) = meaning.with_priority(Some(priority)) {
                    names.insert(pattern.replace("{p}", &priority.to_string()), stat);
                }
            }
        } else if let Some(stat) = meaning.with_priority(None) {
            names.insert((*pattern).to_string(), stat);
        }
    }
    names
}

/// Whether the statistics of the netdev's `driver` tell which priorities have PFC enabled (by
/// listing pause statistics only for those). An unknown driver tells nothing.
pub(crate) fn pause_names_show_pfc(driver: Option<&str>) -> bool {
    driver.is_some_and(|d| {
        DRIVERS
            .iter()
            .any(|table| table.pause_names_show_pfc && table.drivers.contains(&d))
    })
}

/// The typed meaning of a statistic name, whatever the driver (names of different families do
/// not overlap).
pub fn classify(name: &str) -> Option<TypedStat> {
    classify_for(None, name)
}

/// The typed meaning of a statistic of the netdev's `driver`; a driver without a table (or
/// unknown: `None`) is looked up in every table.
pub fn classify_for(driver: Option<&str>, name: &str) -> Option<TypedStat> {
    TypedNames::of(driver).classify(name)
}

/// The typed meaning of each statistic of a name list, by position: classified once for a
/// netdev's list and shared, like the list, by the reads that find it unchanged.
pub(crate) type StatTypes = std::sync::Arc<[Option<TypedStat>]>;

/// Classifies every name of `names` as `driver`'s statistics.
pub(crate) fn types_of(driver: Option<&str>, names: &[Box<str>]) -> StatTypes {
    let typed = TypedNames::of(driver);
    names.iter().map(|name| typed.classify(name)).collect()
}

/// The typed names of one driver's table (or of every table), found once per netdev and
/// then asked once per statistic.
#[derive(Clone, Copy)]
pub(crate) struct TypedNames(&'static FxHashMap<String, TypedStat>);

impl TypedNames {
    /// The table of `driver`; a driver without a table (or unknown: `None`) gets every table.
    pub fn of(driver: Option<&str>) -> TypedNames {
        let by_driver: &'static HashMap<_, _> = &BY_DRIVER;
        // A handful of drivers: a scan, which also keeps the result `'static`.
        let find = |key: Option<&str>| {
            by_driver
                .iter()
                .find_map(|(k, table)| (*k == key).then_some(table))
        };
        let table = driver
            .and_then(|d| find(Some(d)))
            .or_else(|| find(None))
            .expect("BY_DRIVER has the every-table entry");
        TypedNames(table)
    }

    pub fn classify(self, name: &str) -> Option<TypedStat> {
        self.0.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_priority_pfc() {
        assert_eq!(
            classify("rx_prio3_pause"),
            Some(TypedStat::PfcPauseFrames {
                priority: 3,
                direction: Direction::Rx
            })
        );
        assert_eq!(
            classify("tx_prio7_pause_duration"),
            Some(TypedStat::PfcPauseDurationMicros {
                priority: 7,
                direction: Direction::Tx
            })
        );
        assert_eq!(
            classify("rx_prio0_pause_transition"),
            Some(TypedStat::PfcPauseTransitions {
                priority: 0,
                direction: Direction::Rx
            })
        );
        assert_eq!(
            classify("rx_prio5_marked"),
            Some(TypedStat::PriorityEcnMarked { priority: 5 })
        );
    }

    #[test]
    fn not_typed() {
        for name in [
            "rx_prio8_bytes",
            "rx_prio3_bytes_phy",
            "rx_prio8_pause",
            "rx_prio33_pause",
            "tx_prio3_discards",
            "rx0_packets",
            "rx_prio",
            "",
        ] {
            assert_eq!(classify(name), None, "{name}");
        }
    }

    #[test]
    fn phy_and_storm() {
        assert_eq!(
            classify("tx_pause_storm_error_events"),
            Some(TypedStat::PauseStormEvents {
                severity: StormSeverity::Error
            })
        );
        assert_eq!(
            classify("rx_corrected_bits_phy"),
            Some(TypedStat::FecCorrectedBits)
        );
        assert_eq!(
            classify("link_down_events_phy"),
            Some(TypedStat::LinkDownEvents)
        );
    }

    #[test]
    fn other_drivers_by_their_names() {
        let pfc = |priority, direction| {
            Some(TypedStat::PfcPauseFrames {
                priority,
                direction,
            })
        };
        assert_eq!(
            classify_for(Some("bnxt_en"), "rx_pfc_ena_frames_pri3"),
            pfc(3, Direction::Rx)
        );
        assert_eq!(
            classify_for(Some("bnxt_en"), "tx_pfc_ena_frames_pri7"),
            pfc(7, Direction::Tx)
        );
        assert_eq!(
            classify_for(Some("bnxt_en"), "pfc_pri3_rx_duration_us"),
            Some(TypedStat::PfcPauseDurationMicros {
                priority: 3,
                direction: Direction::Rx
            })
        );
        assert_eq!(
            classify_for(Some("ice"), "rx_priority_3_xoff.nic"),
            pfc(3, Direction::Rx)
        );
        assert_eq!(classify_for(Some("ice"), "rx_priority_3_xon.nic"), None);
        assert_eq!(
            classify_for(Some("i40e"), "port.tx_priority_0_xoff"),
            pfc(0, Direction::Tx)
        );
        assert_eq!(
            classify_for(Some("ionic"), "tx_pripause_5_1us_count"),
            Some(TypedStat::PfcPauseDurationMicros {
                priority: 5,
                direction: Direction::Tx
            })
        );
        // A known driver reads only its own table; an unknown one every table.
        assert_eq!(classify_for(Some("bnxt_en"), "rx_prio3_pause"), None);
        assert_eq!(
            classify_for(Some("acme"), "rx_pfc_ena_frames_pri3"),
            pfc(3, Direction::Rx)
        );
        assert_eq!(classify_for(None, "rx_prio3_pause"), pfc(3, Direction::Rx));
        assert_eq!(classify("rx_pfc_ena_frames_pri8"), None);
    }

    #[test]
    fn per_priority_traffic_of_mlx5() {
        let mlx5 = |name| classify_for(Some("mlx5_core"), name);
        assert_eq!(
            mlx5("rx_prio3_bytes"),
            Some(TypedStat::PriorityBytes {
                priority: 3,
                direction: Direction::Rx
            })
        );
        assert_eq!(
            mlx5("tx_prio0_bytes"),
            Some(TypedStat::PriorityBytes {
                priority: 0,
                direction: Direction::Tx
            })
        );
        assert_eq!(
            mlx5("rx_prio7_packets"),
            Some(TypedStat::PriorityPackets {
                priority: 7,
                direction: Direction::Rx
            })
        );
        assert_eq!(
            mlx5("tx_prio6_packets"),
            Some(TypedStat::PriorityPackets {
                priority: 6,
                direction: Direction::Tx
            })
        );
        // The port totals and the vport (RDMA-only) counters are not per priority.
        for name in [
            "rx_bytes_phy",
            "tx_vport_rdma_unicast_bytes",
            "rx_prio_bytes",
        ] {
            assert_eq!(mlx5(name), None, "{name}");
        }
    }

    #[test]
    fn per_priority_frames_of_ionic_are_pfc_pause_frames() {
        assert_eq!(
            classify_for(Some("ionic"), "frames_rx_pri_3"),
            Some(TypedStat::PfcPauseFrames {
                priority: 3,
                direction: Direction::Rx
            })
        );
        assert_eq!(
            classify_for(Some("ionic"), "frames_tx_pri_0"),
            Some(TypedStat::PfcPauseFrames {
                priority: 0,
                direction: Direction::Tx
            })
        );
        // ionic counts no traffic per priority, and its all-priority pause frames (the sum of
        // the eight) are not typed: they would count every pause twice.
        assert_eq!(classify_for(Some("ionic"), "rx_prio3_bytes"), None);
        assert_eq!(classify_for(Some("ionic"), "frames_rx_pripause"), None);
        assert_eq!(classify_for(Some("ionic"), "frames_rx_pri_8"), None);
    }

    #[test]
    fn per_cos_counters_of_bnxt_are_not_per_priority_traffic() {
        for name in [
            "rx_bytes_pri3",
            "tx_bytes_pri3",
            "rx_packets_pri0",
            "tx_packets_pri7",
            "rx_bytes_cos0",
        ] {
            assert_eq!(classify_for(Some("bnxt_en"), name), None, "{name}");
        }
        // Intel's drivers count no traffic per priority, only XON/XOFF frames.
        assert_eq!(classify_for(Some("ice"), "rx_bytes.nic"), None);
        assert_eq!(classify_for(Some("i40e"), "port.rx_bytes"), None);
    }

    #[test]
    fn only_mlx5_tells_pfc_by_its_pause_names() {
        assert!(pause_names_show_pfc(Some("mlx5_core")));
        for driver in ["bnxt_en", "bng_en", "ice", "i40e", "ionic", "acme"] {
            assert!(!pause_names_show_pfc(Some(driver)), "{driver}");
        }
        assert!(!pause_names_show_pfc(None));
    }
}
