//! The round trip of one probe, as R-Pingmesh measures it. Six times, two clocks:
//!
//! - the prober's: T1 when it posts the probe, T2 the probe's send completion, T5 the `Ack`'s
//!   receive completion, T6 when it polled that completion;
//! - the responder's: T3 the probe's receive completion, T4 the `Ack`'s send completion. Only
//!   their difference crosses the wire (the `Delay` packet), so the two clocks need no sync.
//!
//! network RTT = (T5 - T2) - (T4 - T3): the time on the wire and in the switches, without the
//! responder's processing. A host under CPU load shows a rising responder delay, not a rising
//! network RTT. prober delay = (T6 - T1) - (T5 - T2): this agent's own lag.
//!
//! Completion times come from the NIC's clock where the device stamps completions, else from
//! the monotonic clock ([`Clock`]). Without device stamps, send completions are no measure: on
//! soft-RoCE (rxe, Debian 12's 6.1 kernel, measured in the VM) a probe's send completion was
//! polled after the answer had arrived, giving (T5 - T2) - (T4 - T3) a median of -0.38 ms. With
//! the software clock the times are taken when each packet is posted instead: T2 is T1 (the
//! probe's post, [`ProberTimes::posted`]) and the responder's delay ends when it posts its
//! answer, so it travels in the `Ack` itself.

use thiserror::Error;

/// Where the completion times come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The device's completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
    Hardware,
    /// The host's monotonic clock when a completion is polled: includes polling lag.
    Software,
}

impl Clock {
    /// The `clock` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Hardware => "hardware",
            Clock::Software => "software",
        }
    }
}

/// How a port's completion times become nanoseconds: the `timestamps` label. A device with
/// completion stamps gives them in one of two forms, and a port's "now" is read in the same
/// form's time base, so that stamps and readings of one port compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timestamps {
    /// The device's free-running cycle counter (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`), in ns
    /// by `hca_core_clock`; "now" is the same counter (`ibv_query_rt_values_ex`).
    Cycles,
    /// Wall-clock ns from the device (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`): mlx5 in
    /// real-time clock mode, where the stamps are not cycles at all; "now" is CLOCK_REALTIME.
    Wallclock,
    /// No device stamps: the host's monotonic clock when a completion is polled.
    Software,
}

impl Timestamps {
    pub const ALL: &'static [Timestamps] = &[
        Timestamps::Cycles,
        Timestamps::Wallclock,
        Timestamps::Software,
    ];

    /// The `timestamps` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Timestamps::Cycles => "cycles",
            Timestamps::Wallclock => "wallclock",
            Timestamps::Software => "software",
        }
    }

    /// The clock the loop works with: either device form is the NIC's.
    pub fn clock(self) -> Clock {
        match self {
            Timestamps::Cycles | Timestamps::Wallclock => Clock::Hardware,
            Timestamps::Software => Clock::Software,
        }
    }
}

/// The prober's four times, in nanoseconds of one clock.
#[derive(Debug, Clone, Copy)]
pub struct ProberTimes {
    pub t1: u64,
    pub t2: u64,
    pub t5: u64,
    pub t6: u64,
}

impl ProberTimes {
    /// The software clock's times: the probe's send completion is not waited for, its post
    /// time stands for it (T2 = T1).
    pub fn posted(t1: u64, t5: u64, t6: u64) -> ProberTimes {
        ProberTimes { t1, t2: t1, t5, t6 }
    }
}

/// One probe's figures, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTrip {
    pub network_ns: u64,
    pub responder_delay_ns: u64,
    pub prober_delay_ns: u64,
}

/// Why a probe's times give no round trip; the probe counts under `reason`, not as an RTT.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RttError {
    #[error("the prober's times are out of order")]
    ProberOrder,
    #[error("the responder says it held the probe {responder_ns} ns, longer than the {round_ns} ns round trip")]
    ResponderDelay { responder_ns: u64, round_ns: u64 },
}

impl RttError {
    pub fn reason(&self) -> &'static str {
        match self {
            RttError::ProberOrder => "prober_clock",
            RttError::ResponderDelay { .. } => "responder_delay",
        }
    }
}

/// The round trip of one answered probe. A responder delay longer than the whole round trip
/// (a broken peer, or one that lies) is refused rather than giving a negative or zero RTT.
pub fn round_trip(prober: ProberTimes, responder_delay_ns: u64) -> Result<RoundTrip, RttError> {
    let ProberTimes { t1, t2, t5, t6 } = prober;
    if !(t1 <= t2 && t2 <= t5 && t5 <= t6) {
        return Err(RttError::ProberOrder);
    }
    let round_ns = t5 - t2;
    if responder_delay_ns > round_ns {
        return Err(RttError::ResponderDelay {
            responder_ns: responder_delay_ns,
            round_ns,
        });
    }
    Ok(RoundTrip {
        network_ns: round_ns - responder_delay_ns,
        responder_delay_ns,
        prober_delay_ns: (t6 - t1) - round_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_responders_delay_is_taken_out_of_the_round_trip() {
        // Posted at 1 000, on the wire at 1 300; the responder held it 40 µs; the Ack back at
        // 58 300, polled at 58 500.
        let times = ProberTimes {
            t1: 1_000,
            t2: 1_300,
            t5: 58_300,
            t6: 58_500,
        };
        let rtt = round_trip(times, 40_000).unwrap();
        assert_eq!(
            rtt,
            RoundTrip {
                network_ns: 17_000,
                responder_delay_ns: 40_000,
                prober_delay_ns: 500,
            }
        );
        // A slow responder moves only its own delay.
        let slow = ProberTimes {
            t5: 1_058_300,
            t6: 1_058_500,
            ..times
        };
        assert_eq!(round_trip(slow, 1_040_000).unwrap().network_ns, 17_000);
    }

    /// The software clock's round trip runs from post to answer: the prober's own delay is
    /// only its polling lag after the answer arrived.
    #[test]
    fn posted_times_measure_from_the_probes_post() {
        let rtt = round_trip(ProberTimes::posted(1_000, 700_000, 700_400), 150_000).unwrap();
        assert_eq!(rtt.network_ns, 549_000);
        assert_eq!(rtt.prober_delay_ns, 400);
    }

    #[test]
    fn impossible_times_are_refused_with_a_reason() {
        let times = ProberTimes {
            t1: 0,
            t2: 10,
            t5: 110,
            t6: 120,
        };
        let lie = round_trip(times, 101).unwrap_err();
        assert_eq!(lie.reason(), "responder_delay");
        assert_eq!(round_trip(times, 100).unwrap().network_ns, 0);
        let backwards = ProberTimes { t5: 5, ..times };
        assert_eq!(round_trip(backwards, 0), Err(RttError::ProberOrder));
        assert_eq!(RttError::ProberOrder.reason(), "prober_clock");
    }
}
