//! The starting point of the loop: Kmin, Kmax and Pmax to begin with, from the switch's buffer,
//! its port count and the line rate, with the assumptions printed beside them.
//!
//! Two constraints, and the tighter one wins:
//!
//! 1. **Line rate.** Thresholds grow with the rate a queue drains at. The DCQCN settings of the
//!    HPCC evaluation (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019; its
//!    simulator `alibaba-edu/High-Precision-Congestion-Control`, `simulation/run.py`, commit
//!    08d4ba0b) scale Kmin = 100 KB and Kmax = 400 KB per 25 Gb/s, with Pmax = 0.2: 4 KB and
//!    16 KB per Gb/s.
//! 2. **Buffer.** ECN must act before PFC does (Zhu et al., "Congestion Control for Large-Scale
//!    RDMA Deployments", SIGCOMM 2015, which introduced DCQCN: PFC is the last resort, ECN marks
//!    first; Intel's Ethernet 800 Series RDMA flow control guide, doc. 635330: "Ensure the PFC
//!    does not trigger early, precluding the ECN"). The PFC pause threshold (xoff) of a lossless
//!    ingress queue can be no more than its share of the buffer when every lossless queue of
//!    every port is congested at once, less the headroom it keeps for the bytes still arriving
//!    after it sent PAUSE. Kmax is held at or below that xoff so marking reaches Pmax before
//!    pause; Kmin keeps the 1:4 ratio of the line-rate rule below it.
//!
//! Everything here is a start, not an answer: the loop (`ecn-tune` over an nccl-tests run)
//! moves it.

use serde::Serialize;

/// Kmin and Kmax per Gb/s of line rate (HPCC's DCQCN settings: 100 KB and 400 KB at 25 Gb/s).
pub(crate) const KMIN_BYTES_PER_GBPS: f64 = 4_000.0;
pub(crate) const KMAX_BYTES_PER_GBPS: f64 = 16_000.0;
/// Marking probability at Kmax (HPCC's DCQCN settings).
pub(crate) const PMAX: f64 = 0.2;
/// Signal speed in copper and fibre, about two thirds of c.
const SIGNAL_METRES_PER_SECOND: f64 = 2.0e8;
/// Time both ends of a link take to act on PAUSE (MAC and PHY, assumed).
const PFC_REACTION_SECONDS: f64 = 1.0e-6;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Inputs {
    /// The switch's buffer available to lossless traffic, bytes.
    pub buffer_bytes: u64,
    /// Ports that carry lossless traffic.
    pub ports: u32,
    /// Lossless priorities (PFC-enabled queues) per port.
    pub lossless_priorities: u32,
    pub line_rate_gbps: f64,
    /// Largest frame on the wire, bytes (4096-byte RoCE MTU plus headers).
    pub mtu_bytes: u32,
    /// Longest cable to a neighbour, metres.
    pub cable_metres: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suggestion {
    pub inputs: Inputs,
    /// Buffer per lossless queue when every one is congested at once.
    pub share_bytes: f64,
    /// Bytes a paused queue still receives: what PFC must keep in reserve.
    pub headroom_bytes: f64,
    /// The highest PFC xoff the share leaves room for.
    pub xoff_bytes: f64,
    pub kmin_bytes: f64,
    pub kmax_bytes: f64,
    pub pmax: f64,
    /// `line_rate` or `buffer`: which constraint set the thresholds.
    pub bound_by: &'static str,
    pub assumptions: Vec<String>,
    pub sources: Vec<&'static str>,
    /// Why these numbers should not be used as they are, if so.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ThresholdError {
    #[error("--ports must be at least 1")]
    NoPorts,
    #[error("--lossless-priorities must be between 1 and 8")]
    Priorities,
    #[error("the line rate must be a positive number of Gb/s")]
    LineRate,
}

pub const SOURCES: [&str; 3] = [
    "Zhu et al., Congestion Control for Large-Scale RDMA Deployments (DCQCN), SIGCOMM 2015: ECN marking (Kmin, Kmax, Pmax) must act before PFC",
    "Li et al., HPCC, SIGCOMM 2019, simulator github.com/alibaba-edu/High-Precision-Congestion-Control simulation/run.py: DCQCN Kmin 100 KB, Kmax 400 KB per 25 Gb/s, Pmax 0.2",
    "Intel Ethernet 800 Series Linux Flow Control Configuration Guide for RDMA Use Cases (635330), DCQCN: PFC must not trigger early (precluding ECN) nor late (drops)",
];

pub(crate) fn suggest(inputs: Inputs) -> Result<Suggestion, ThresholdError> {
    if inputs.ports == 0 {
        return Err(ThresholdError::NoPorts);
    }
    if !(1..=8).contains(&inputs.lossless_priorities) {
        return Err(ThresholdError::Priorities);
    }
    if !(inputs.line_rate_gbps.is_finite() && inputs.line_rate_gbps > 0.0) {
        return Err(ThresholdError::LineRate);
    }
    let rate_bytes = inputs.line_rate_gbps * 1e9 / 8.0;
    let queues = f64::from(inputs.ports) * f64::from(inputs.lossless_priorities);
    let share = inputs.buffer_bytes as f64 / queues;
    let round_trip = 2.0 * inputs.cable_metres / SIGNAL_METRES_PER_SECOND + PFC_REACTION_SECONDS;
    let headroom = 2.0 * f64::from(inputs.mtu_bytes) + rate_bytes * round_trip;
    let xoff = share - headroom;
    let kmax_rate = KMAX_BYTES_PER_GBPS * inputs.line_rate_gbps;
    let kmin_rate = KMIN_BYTES_PER_GBPS * inputs.line_rate_gbps;
    let (kmin, kmax, bound_by) = if kmax_rate <= xoff {
        (kmin_rate, kmax_rate, "line_rate")
    } else {
        let kmax = xoff.max(0.0);
        (kmax / 4.0, kmax, "buffer")
    };
    let mut warnings = Vec::new();
    if xoff <= 0.0 {
        warnings.push(format!(
            "the buffer cannot hold the PFC headroom of {queues} lossless queues ({headroom:.0} bytes each, {share:.0} available): fewer lossless queues or ports, or a larger buffer, before any ECN setting"
        ));
    } else if kmin < 10.0 * f64::from(inputs.mtu_bytes) {
        warnings.push(format!(
            "Kmin is under ten frames ({kmin:.0} bytes): marking that early brakes on every burst; the buffer is small for {} ports at {} Gb/s",
            inputs.ports, inputs.line_rate_gbps
        ));
    }
    Ok(Suggestion {
        inputs,
        share_bytes: share,
        headroom_bytes: headroom,
        xoff_bytes: xoff,
        kmin_bytes: kmin,
        kmax_bytes: kmax,
        pmax: PMAX,
        bound_by,
        assumptions: vec![
            format!(
                "worst case: all {queues} lossless queues ({} ports x {} priorities) congested at once, the buffer split evenly (a switch with dynamic thresholds gives one busy queue more, so these are conservative)",
                inputs.ports, inputs.lossless_priorities
            ),
            format!(
                "headroom = 2 frames of {} bytes + line rate x ({} m cable there and back at 2e8 m/s + 1 µs to act on PAUSE)",
                inputs.mtu_bytes, inputs.cable_metres
            ),
            "Kmax at or below xoff, so marking reaches Pmax before PFC pauses; Kmin = Kmax / 4 when the buffer binds".into(),
            format!(
                "line-rate rule: Kmin {KMIN_BYTES_PER_GBPS:.0} and Kmax {KMAX_BYTES_PER_GBPS:.0} bytes per Gb/s, Pmax {PMAX}"
            ),
            "ECN marks the egress queue and PFC pauses an ingress queue: one egress queue fed by many ingress ports can exceed Kmax before any ingress pauses, so confirm with the loop (PFC near zero, marks steady) rather than trust the arithmetic".into(),
        ],
        sources: SOURCES.to_vec(),
        warnings,
    })
}

/// `64MB`, `64MiB`, `67108864`: decimal (KB, MB, GB) and binary (KiB, MiB, GiB) units.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let factor: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "kB" | "K" => 1e3,
        "MB" | "M" => 1e6,
        "GB" | "G" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "{text:?}: unit must be B, KB, MB, GB, KiB, MiB or GiB"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 64MB, 32MiB)"))?;
    let bytes = value * factor;
    if !(1.0..1e15).contains(&bytes) {
        return Err(format!("{text:?} is not a plausible switch buffer size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(buffer_bytes: u64, ports: u32, line_rate_gbps: f64) -> Inputs {
        Inputs {
            buffer_bytes,
            ports,
            lossless_priorities: 1,
            line_rate_gbps,
            mtu_bytes: 4200,
            cable_metres: 100.0,
        }
    }

    #[test]
    fn a_deep_buffer_leaves_the_line_rate_rule_in_force() {
        // 25 Gb/s, 32 ports, 64 MB: the HPCC settings themselves.
        let s = suggest(inputs(64_000_000, 32, 25.0)).unwrap();
        assert_eq!(s.bound_by, "line_rate");
        assert_eq!((s.kmin_bytes, s.kmax_bytes), (100_000.0, 400_000.0));
        assert_eq!(s.pmax, 0.2);
        assert!(s.kmax_bytes < s.xoff_bytes);
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn a_shallow_buffer_binds_kmax_below_xoff() {
        // 64 x 400G ports sharing 64 MB: 1 MB per queue, far below the 6.4 MB of the rate rule.
        let s = suggest(inputs(64_000_000, 64, 400.0)).unwrap();
        assert_eq!(s.bound_by, "buffer");
        assert!((s.share_bytes - 1_000_000.0).abs() < 1e-6);
        // headroom: 2 x 4200 + 50e9 B/s x (1 µs + 1 µs) = 108 400 bytes.
        assert!(
            (s.headroom_bytes - 108_400.0).abs() < 1e-6,
            "{}",
            s.headroom_bytes
        );
        assert!((s.kmax_bytes - s.xoff_bytes).abs() < 1e-6);
        assert!((s.kmin_bytes - s.kmax_bytes / 4.0).abs() < 1e-6);
        assert!(s.kmax_bytes < KMAX_BYTES_PER_GBPS * 400.0);
    }

    #[test]
    fn more_ports_or_priorities_lower_the_thresholds() {
        let few = suggest(inputs(32_000_000, 32, 100.0)).unwrap();
        let many = suggest(inputs(32_000_000, 128, 100.0)).unwrap();
        assert!(many.kmax_bytes < few.kmax_bytes);
        let two_priorities = suggest(Inputs {
            lossless_priorities: 2,
            ..inputs(32_000_000, 32, 100.0)
        })
        .unwrap();
        assert!((two_priorities.share_bytes - few.share_bytes / 2.0).abs() < 1e-6);
    }

    #[test]
    fn a_buffer_too_small_for_the_headroom_says_so() {
        let s = suggest(inputs(1_000_000, 64, 400.0)).unwrap();
        assert!(s.xoff_bytes < 0.0);
        assert_eq!(s.kmax_bytes, 0.0);
        assert!(
            s.warnings[0].contains("cannot hold the PFC headroom"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn bad_inputs() {
        assert_eq!(suggest(inputs(1, 0, 100.0)), Err(ThresholdError::NoPorts));
        assert_eq!(suggest(inputs(1, 1, 0.0)), Err(ThresholdError::LineRate));
        assert_eq!(
            suggest(inputs(1, 1, f64::NAN)),
            Err(ThresholdError::LineRate)
        );
        assert_eq!(
            suggest(Inputs {
                lossless_priorities: 9,
                ..inputs(1, 1, 1.0)
            }),
            Err(ThresholdError::Priorities)
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MB"), Ok(64_000_000));
        assert_eq!(parse_bytes("32MiB"), Ok(32 << 20));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("12345"), Ok(12_345));
        for bad in ["", "MB", "64XB", "-5MB", "0", "1e30", "1.2.3MB"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
