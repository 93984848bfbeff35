//! The probe's wire format: the payload of one UD send, after the 40-byte GRH the receiver
//! gets in front of it.
//!
//! ```text
//! 0      4     5      6      7   8         16                       24           28        32
//! | RFEP | ver | kind | mode | 0 | seq u64 | responder delay u64 ns | answers_on | epoch |
//! ```
//! Big-endian, fixed length. A probe carries only its sequence number. With device completion
//! timestamps the responder answers each probe twice, as R-Pingmesh does: an `Ack` at once (its
//! receive completion stamps the prober's T5), then a `Delay` that carries T4 - T3, the time
//! between its receive completion and the `Ack`'s send completion, which it only knows after the
//! `Ack` left. With the software clock the delay ends when the `Ack` is posted, so the `Ack`
//! carries it and no `Delay` follows (`rtt.rs` says why).
//!
//! An answer says which of the two its responder does (`mode`, byte 6), so that probers and
//! responders of either clock pair up right in a mixed fleet (VFs, other vendors, soft-RoCE):
//! a prober waits for a `Delay` only when one follows. Byte 6 was reserved and zero in the first
//! builds of version 1, which these decode as [`Mode::Unsaid`]: the prober then assumes the
//! responder works as it does itself, as those builds did.
//!
//! Every packet also says which start of its sender's agent sent it (`epoch`, bytes 28..32, a
//! random number drawn at each start), and a probe says where its sender's port answers probes
//! (`answers_on`, bytes 24..28: the responder's QPN, which the probe's own source QPN, the
//! prober's, is not). So a peer that restarted, or rebuilt its responder, is found at its new
//! address from its first probe or answer, not at the next refresh of the peer set
//! (`restarts.rs`). Both were reserved and zero before; zero still means "not said", and builds
//! that do not know them ignore them.

use thiserror::Error;

/// The payload's first bytes: anything else on the Q_Key is not ours.
pub(crate) const MAGIC: [u8; 4] = *b"RFEP";
/// The format version this build speaks.
pub const VERSION: u8 = 1;
/// Every packet's length. Longer payloads are refused, not truncated: a peer that pads is not
/// speaking this version.
pub const LEN: usize = 32;

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Probe = 1,
    Ack = 2,
    Delay = 3,
}

/// How a responder answers, as its answers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A build before the mode was sent (byte 6 zero), or a probe.
    #[default]
    Unsaid = 0,
    /// Software clock: the `Ack` carries the delay; nothing follows.
    DelayInAck = 1,
    /// Device timestamps: the `Ack` carries 0 and a `Delay` follows with T4 - T3.
    DelayFollows = 2,
}

/// One decoded packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub kind: Kind,
    pub seq: u64,
    /// T4 - T3 in nanoseconds: never in a `Probe`.
    pub responder_delay_ns: u64,
    /// In answers: how the responder delivers its delay.
    pub mode: Mode,
    /// In probes: the QPN the sender's port answers probes on; 0 when unsaid (and in answers,
    /// whose source QPN says it).
    pub answers_on: u32,
    /// The start of the sender's agent that sent it; 0 when unsaid (builds before it).
    pub epoch: u32,
}

/// Why a payload is not a packet of ours; `reason` is its label.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PacketError {
    #[error("{0} bytes, not {LEN}")]
    Length(usize),
    #[error("no probe magic")]
    Magic,
    #[error("format version {0}, this build speaks {VERSION}")]
    Version(u8),
    #[error("unknown packet kind {0}")]
    Kind(u8),
    #[error("a responder delay in a probe")]
    StrayDelay,
}

impl PacketError {
    /// The `reason` label of the packets refused for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            PacketError::Length(_) => "length",
            PacketError::Magic => "magic",
            PacketError::Version(_) => "version",
            PacketError::Kind(_) | PacketError::StrayDelay => "malformed",
        }
    }
}

impl Packet {
    /// A probe that says nothing of its sender (as the first builds sent them).
    pub fn probe(seq: u64) -> Packet {
        Packet::probe_from(seq, 0, 0)
    }

    /// A probe from a port that answers on QPN `answers_on`, in its agent's start `epoch`.
    pub(crate) fn probe_from(seq: u64, answers_on: u32, epoch: u32) -> Packet {
        Packet {
            kind: Kind::Probe,
            seq,
            responder_delay_ns: 0,
            mode: Mode::Unsaid,
            answers_on,
            epoch,
        }
    }

    /// An answer of `kind` to probe `seq`.
    pub fn answer(kind: Kind, seq: u64, responder_delay_ns: u64, mode: Mode, epoch: u32) -> Packet {
        Packet {
            kind,
            seq,
            responder_delay_ns,
            mode,
            answers_on: 0,
            epoch,
        }
    }

    pub fn encode(&self) -> [u8; LEN] {
        let mut bytes = [0u8; LEN];
        bytes[..4].copy_from_slice(&MAGIC);
        bytes[4] = VERSION;
        bytes[5] = self.kind as u8;
        bytes[6] = self.mode as u8;
        bytes[8..16].copy_from_slice(&self.seq.to_be_bytes());
        bytes[16..24].copy_from_slice(&self.responder_delay_ns.to_be_bytes());
        if self.kind == Kind::Probe {
            bytes[24..28].copy_from_slice(&self.answers_on.to_be_bytes());
        }
        bytes[28..32].copy_from_slice(&self.epoch.to_be_bytes());
        bytes
    }

    /// Decodes a payload (the GRH already stripped). Reserved bytes (7, and 24..28 of an
    /// answer) are ignored, so a later version may use them without breaking this one.
    pub fn decode(bytes: &[u8]) -> Result<Packet, PacketError> {
        let bytes: &[u8; LEN] = bytes
            .try_into()
            .map_err(|_| PacketError::Length(bytes.len()))?;
        if bytes[..4] != MAGIC {
            return Err(PacketError::Magic);
        }
        if bytes[4] != VERSION {
            return Err(PacketError::Version(bytes[4]));
        }
        let kind = match bytes[5] {
            1 => Kind::Probe,
            2 => Kind::Ack,
            3 => Kind::Delay,
            other => return Err(PacketError::Kind(other)),
        };
        let word = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
        let responder_delay_ns = word(16);
        if kind == Kind::Probe && responder_delay_ns != 0 {
            return Err(PacketError::StrayDelay);
        }
        // A mode this build does not know is a later version's: unsaid, not an error.
        let mode = match (kind, bytes[6]) {
            (Kind::Probe, _) => Mode::Unsaid,
            (_, 1) => Mode::DelayInAck,
            (_, 2) => Mode::DelayFollows,
            _ => Mode::Unsaid,
        };
        let half = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        Ok(Packet {
            kind,
            seq: word(8),
            responder_delay_ns,
            mode,
            answers_on: if kind == Kind::Probe { half(24) } else { 0 },
            epoch: half(28),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_round_trips() {
        for packet in [
            Packet::probe(7),
            Packet::probe_from(8, 0x00ab_cdef, u32::MAX),
            Packet::answer(Kind::Ack, u64::MAX, 0, Mode::DelayFollows, 5),
            Packet::answer(Kind::Ack, 3, 9, Mode::DelayInAck, 0),
            Packet::answer(Kind::Delay, 1, 12_345, Mode::DelayFollows, 1),
        ] {
            assert_eq!(Packet::decode(&packet.encode()), Ok(packet));
        }
    }

    #[test]
    fn the_layout_is_fixed() {
        let bytes = Packet::answer(
            Kind::Delay,
            0x0102_0304_0506_0708,
            0x1112,
            Mode::DelayFollows,
            0x2122_2324,
        )
        .encode();
        assert_eq!(&bytes[..8], b"RFEP\x01\x03\x02\x00");
        assert_eq!(&bytes[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[16..24], &[0, 0, 0, 0, 0, 0, 0x11, 0x12]);
        assert_eq!(&bytes[24..], &[0, 0, 0, 0, 0x21, 0x22, 0x23, 0x24]);
        let probe = Packet::probe_from(1, 0x0003_0201, 0x0a0b_0c0d).encode();
        assert_eq!(&probe[24..], &[0, 3, 2, 1, 0x0a, 0x0b, 0x0c, 0x0d]);
    }

    #[test]
    fn foreign_or_broken_payloads_are_refused_with_their_reason() {
        let good = Packet::probe(1).encode();
        let mut cases: Vec<(Vec<u8>, PacketError)> = vec![
            (Vec::new(), PacketError::Length(0)),
            (good[..31].to_vec(), PacketError::Length(31)),
            ([&good[..], &[0]].concat(), PacketError::Length(33)),
            (vec![0; LEN], PacketError::Magic),
        ];
        let mut edit = |at: usize, value: u8, error: PacketError| {
            let mut bytes = good;
            bytes[at] = value;
            cases.push((bytes.to_vec(), error));
        };
        edit(4, 2, PacketError::Version(2));
        edit(5, 0, PacketError::Kind(0));
        edit(5, 9, PacketError::Kind(9));
        edit(23, 1, PacketError::StrayDelay);
        for (bytes, error) in cases {
            assert_eq!(Packet::decode(&bytes), Err(error), "{bytes:?}");
        }
        assert_eq!(PacketError::Version(2).reason(), "version");
    }

    /// Reserved bytes are for later versions: set, they change nothing; nor does a mode in a
    /// probe, or one this build does not know.
    #[test]
    fn reserved_bytes_are_ignored() {
        let mut bytes = Packet::probe(9).encode();
        bytes[6] = 0xff;
        bytes[7] = 0xff;
        assert_eq!(Packet::decode(&bytes), Ok(Packet::probe(9)));
        let ack = Packet::answer(Kind::Ack, 4, 0, Mode::Unsaid, 7);
        let mut bytes = ack.encode();
        bytes[6] = 9;
        // An answer's QPN is its source's: bytes 24..28 of an answer are not read.
        bytes[25] = 0xff;
        assert_eq!(Packet::decode(&bytes), Ok(ack));
    }

    /// Builds before the epoch sent zeros in bytes 24..32: their packets say neither where
    /// they answer nor which start they are, and decode as before.
    #[test]
    fn packets_of_builds_before_the_epoch_say_neither() {
        let old = *b"RFEP\x01\x01\x00\x00\0\0\0\0\0\0\0\x07\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        let probe = Packet::decode(&old).unwrap();
        assert_eq!((probe.seq, probe.answers_on, probe.epoch), (7, 0, 0));
        assert_eq!(probe, Packet::probe(7));
    }

    /// The first builds of version 1 sent zero in byte 6: their answers decode as unsaid.
    #[test]
    fn answers_of_builds_before_the_mode_are_unsaid() {
        let mut bytes =
            *b"RFEP\x01\x02\x00\x00\0\0\0\0\0\0\0\x07\0\0\0\0\0\0\0\x05\0\0\0\0\0\0\0\0";
        assert_eq!(Packet::decode(&bytes).unwrap().mode, Mode::Unsaid);
        bytes[6] = 1;
        assert_eq!(Packet::decode(&bytes).unwrap().mode, Mode::DelayInAck);
    }
}
