//! Maps mlx5 driver statistic names (`ethtool -S`) to the typed RoCE metrics of the design:
//! per-priority PFC, ECN marks, discards and PHY errors. Names follow the kernel's
//! `drivers/net/ethernet/mellanox/mlx5/core/en_stats.c` and `counters.rst`.

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

/// Returns the typed meaning of a driver statistic name, if it has one.
pub fn classify(name: &str) -> Option<TypedStat> {
    use Direction::{Rx, Tx};
    let fixed = match name {
        "tx_pause_storm_warning_events" => Some(TypedStat::PauseStormEvents {
            severity: StormSeverity::Warning,
        }),
        "tx_pause_storm_error_events" => Some(TypedStat::PauseStormEvents {
            severity: StormSeverity::Error,
        }),
        "rx_global_pause" => Some(TypedStat::GlobalPauseFrames { direction: Rx }),
        "tx_global_pause" => Some(TypedStat::GlobalPauseFrames { direction: Tx }),
        "rx_global_pause_duration" => Some(TypedStat::GlobalPauseDurationMicros { direction: Rx }),
        "tx_global_pause_duration" => Some(TypedStat::GlobalPauseDurationMicros { direction: Tx }),
        "rx_discards_phy" => Some(TypedStat::PhyDiscards { direction: Rx }),
        "tx_discards_phy" => Some(TypedStat::PhyDiscards { direction: Tx }),
        "rx_out_of_buffer" => Some(TypedStat::RxOutOfBuffer),
        "link_down_events_phy" => Some(TypedStat::LinkDownEvents),
        "rx_symbol_err_phy" => Some(TypedStat::PhySymbolErrors),
        "rx_pcs_symbol_err_phy" => Some(TypedStat::PcsSymbolErrors),
        "rx_corrected_bits_phy" => Some(TypedStat::FecCorrectedBits),
        "rx_bits_phy" => Some(TypedStat::PhyReceivedBits),
        "rx_crc_errors_phy" => Some(TypedStat::PhyCrcErrors),
        _ => None,
    };
    fixed.or_else(|| per_priority(name))
}

/// `{rx,tx}_prio<p>_<what>` names.
fn per_priority(name: &str) -> Option<TypedStat> {
    let (direction, rest) = if let Some(rest) = name.strip_prefix("rx_prio") {
        (Direction::Rx, rest)
    } else if let Some(rest) = name.strip_prefix("tx_prio") {
        (Direction::Tx, rest)
    } else {
        return None;
    };
    let (digit, what) = rest.split_at_checked(1)?;
    let priority: u8 = digit.parse().ok().filter(|p| *p < 8)?;
    let what = what.strip_prefix('_')?;
    let stat = match (direction, what) {
        (_, "pause") => TypedStat::PfcPauseFrames {
            priority,
            direction,
        },
        (_, "pause_duration") => TypedStat::PfcPauseDurationMicros {
            priority,
            direction,
        },
        (_, "pause_transition") => TypedStat::PfcPauseTransitions {
            priority,
            direction,
        },
        (Direction::Rx, "discards") => TypedStat::PriorityDiscards { priority },
        (Direction::Rx, "buf_discard") => TypedStat::PriorityBufferDiscards { priority },
        (Direction::Rx, "cong_discard") => TypedStat::PriorityCongestionDiscards { priority },
        (Direction::Rx, "marked") => TypedStat::PriorityEcnMarked { priority },
        _ => return None,
    };
    Some(stat)
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
            "rx_prio3_bytes",
            "rx_prio3_packets",
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
}
