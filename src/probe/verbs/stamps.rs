//! How one port's completion stamps, and its "now", become nanoseconds of one time base
//! (issue 60, item 10). Chosen when the completion queue is made, from what the device takes:
//!
//! - `Wallclock` first: `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`, read with
//!   `ibv_wc_read_completion_wallclock_ns`. libibverbs hands nanoseconds of the NIC's wall
//!   clock: mlx5 in real-time clock mode (`MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS`) stamps CQEs in
//!   that form itself, and there the plain completion timestamp is no cycle count, so the
//!   `hca_core_clock` conversion would give nonsense; elsewhere mlx5 converts the cycles through
//!   the kernel's clock-info page. The flag is asked alone (with the cycles flag too, mlx5 keeps
//!   the CQ free-running and converts). A provider without it refuses the CQ.
//! - `Cycles`: `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, the free-running counter at
//!   `hca_core_clock` kHz; "now" is the same counter, `ibv_query_rt_values_ex`'s raw clock.
//! - `Software`: no device stamps; the host's monotonic clock at each poll.
//!
//! "Now" with wall-clock stamps is CLOCK_REALTIME. No verbs call reads the NIC's wall clock
//! (`ibv_query_rt_values_ex` knows only `IBV_VALUES_MASK_RAW_CLOCK`; rdma-core has no time of
//! day mask), and the PTP clock device behind it (`/dev/ptpN`) is root's. Where the NIC's clock
//! is disciplined (ptp4l, phc2sys), CLOCK_REALTIME follows it within microseconds, give or take
//! a constant TAI-UTC offset of seconds; nothing compares a port's stamps with its "now" more
//! finely than the seconds of aging and idle sources, so that is the same base for our use.
//! Round trips are stamp minus stamp, both the NIC's.
#![forbid(unsafe_code)]

use super::ffi;
use crate::probe::rtt::Timestamps;

/// One port's conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conversion {
    /// The device's cycles, at `khz`.
    Cycles { khz: u64 },
    /// Nanoseconds of the NIC's wall clock, as libibverbs reads them.
    Wallclock,
    /// No device stamps.
    Software,
}

/// The clocks a port's "now" may be read from: the endpoint's own, fixed readings in the tests.
pub(super) trait Clocks {
    /// The device's free-running counter (`IBV_VALUES_MASK_RAW_CLOCK`), in cycles.
    fn device_cycles(&self) -> Option<u64>;
    /// CLOCK_REALTIME, ns since the epoch.
    fn realtime_ns(&self) -> u64;
    /// CLOCK_MONOTONIC, ns.
    fn monotonic_ns(&self) -> u64;
}

impl Conversion {
    /// The completion queues to try, best first, for a device that says it stamps completions
    /// (`completion_timestamp_mask`), runs its clock at `khz` (`hca_core_clock`) and reads its
    /// raw clock (`cycles_read`). Software is what is left when none is made.
    pub(super) fn candidates(timestamp_mask: u64, khz: u64, cycles_read: bool) -> Vec<Conversion> {
        if timestamp_mask == 0 {
            return Vec::new();
        }
        let mut candidates = vec![Conversion::Wallclock];
        if khz != 0 && cycles_read {
            candidates.push(Conversion::Cycles { khz });
        }
        candidates
    }

    /// The `wc_flags` bit that asks the CQ for this conversion's stamps.
    pub(super) fn wc_flag(self) -> Option<u64> {
        match self {
            Conversion::Cycles { .. } => Some(ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
            Conversion::Wallclock => Some(ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK),
            Conversion::Software => None,
        }
    }

    /// The `timestamps` label.
    pub(super) fn timestamps(self) -> Timestamps {
        match self {
            Conversion::Cycles { .. } => Timestamps::Cycles,
            Conversion::Wallclock => Timestamps::Wallclock,
            Conversion::Software => Timestamps::Software,
        }
    }

    /// A completion's stamp, as its reader returned it, in ns; `None` without stamps (the
    /// poll's time stands for it).
    pub(super) fn completion_ns(self, raw: u64) -> Option<u64> {
        match self {
            Conversion::Cycles { khz } => Some(device_ns(raw, khz)),
            Conversion::Wallclock => Some(raw),
            Conversion::Software => None,
        }
    }

    /// "Now" in the time base of this conversion's stamps; `None` when the device clock could
    /// not be read.
    pub(super) fn now_ns(self, clocks: &impl Clocks) -> Option<u64> {
        match self {
            Conversion::Cycles { khz } => clocks.device_cycles().map(|c| device_ns(c, khz)),
            Conversion::Wallclock => Some(clocks.realtime_ns()),
            Conversion::Software => Some(clocks.monotonic_ns()),
        }
    }
}

/// A device clock value in nanoseconds.
pub(super) fn device_ns(ticks: u64, khz: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000 / u128::from(khz.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three clocks far apart, so a reading from the wrong one shows.
    struct Fixed;

    impl Clocks for Fixed {
        fn device_cycles(&self) -> Option<u64> {
            Some(156_250_000) // one second at 156.25 MHz
        }
        fn realtime_ns(&self) -> u64 {
            1_760_000_000_000_000_000
        }
        fn monotonic_ns(&self) -> u64 {
            3_600_000_000_000
        }
    }

    #[test]
    fn device_ticks_become_nanoseconds() {
        // 156.25 MHz: 156 250 kHz, 6.4 ns a tick.
        assert_eq!(device_ns(1_000, 156_250), 6_400);
        assert_eq!(device_ns(u64::MAX, 1_000_000), u64::MAX);
        assert_eq!(device_ns(u64::MAX, 1_000), u64::MAX);
    }

    /// Cycles: stamps and "now" both through `hca_core_clock`.
    #[test]
    fn cycles_are_converted_by_the_core_clock_and_now_is_the_raw_clock() {
        let cycles = Conversion::Cycles { khz: 156_250 };
        assert_eq!(cycles.completion_ns(1_000), Some(6_400));
        assert_eq!(cycles.now_ns(&Fixed), Some(1_000_000_000));
        assert_eq!(cycles.timestamps(), Timestamps::Cycles);
        assert_eq!(
            cycles.wc_flag(),
            Some(ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
        );
    }

    /// Wall clock (mlx5 in real-time mode): the stamp is already ns since the epoch, taken as
    /// it is (through the cycles' rate it would be off by a factor of 6.4), and "now" is the
    /// host's real-time clock, not the raw cycles or the monotonic clock.
    #[test]
    fn wall_clock_stamps_are_nanoseconds_and_now_is_real_time() {
        let stamp = 1_760_000_000_123_456_789;
        let wall = Conversion::Wallclock;
        assert_eq!(wall.completion_ns(stamp), Some(stamp));
        assert_eq!(wall.now_ns(&Fixed), Some(1_760_000_000_000_000_000));
        assert_eq!(wall.timestamps(), Timestamps::Wallclock);
        assert_eq!(
            wall.wc_flag(),
            Some(ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
        );
        assert_eq!(ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, 1 << 11);
    }

    /// Software: no stamp, the monotonic clock.
    #[test]
    fn software_has_no_stamps_and_reads_the_monotonic_clock() {
        let software = Conversion::Software;
        assert_eq!(software.completion_ns(42), None);
        assert_eq!(software.now_ns(&Fixed), Some(3_600_000_000_000));
        assert_eq!(software.timestamps(), Timestamps::Software);
        assert_eq!(software.wc_flag(), None);
    }

    /// The wall-clock flag is tried first wherever the device stamps completions; cycles only
    /// where the core clock and the raw clock read; nothing without stamps.
    #[test]
    fn the_wall_clock_is_preferred_where_the_device_stamps() {
        assert_eq!(
            Conversion::candidates(u64::MAX, 156_250, true),
            [Conversion::Wallclock, Conversion::Cycles { khz: 156_250 }]
        );
        assert_eq!(
            Conversion::candidates(u64::MAX, 0, true),
            [Conversion::Wallclock]
        );
        assert_eq!(
            Conversion::candidates(u64::MAX, 156_250, false),
            [Conversion::Wallclock]
        );
        assert_eq!(Conversion::candidates(0, 156_250, true), []);
    }
}
