//! FEC statistics (`ethtool -I --show-fec`): `ETHTOOL_MSG_FEC_GET` with `ETHTOOL_FLAG_STATS`,
//! and its reply decoded as `net/ethtool/fec.c` builds it (`fec_fill_reply`): the header nest,
//! the configured modes (a bitset, not read here), `ETHTOOL_A_FEC_AUTO`, `ETHTOOL_A_FEC_ACTIVE`
//! (the active mode's link mode bit, absent when none), and `ETHTOOL_A_FEC_STATS` (absent when
//! the driver has no `get_fec_stats`):
//!
//! - `CORRECTED`, `UNCORR`, `CORR_BITS`: arrays of u64, `[total, lane 0, lane 1, ...]`; only the
//!   total when the driver gives no lanes; empty when it does not report that counter
//!   (`fec_stats_recalc`, `fec_put_stats`). Each may follow a zero-length `PAD` attribute where
//!   the architecture needs 64-bit alignment (`nla_put_64bit`).
//! - `HIST` (kernels of late 2025): one nest per bin, in bin order: `BIN_LOW`, `BIN_HIGH` (u32,
//!   inclusive bounds of bit errors per codeword), `BIN_VAL` (`nla_put_uint`: u32 or u64), then
//!   `BIN_VAL_PER_LANE` (u64 array) when the driver gives lanes (`fec_put_hist`).
//!
//! [`encode_reply`] lays a reading out the same way (the simulator's hosts and the fixtures).

use crate::node::rdma_netlink::wire::{self, Attr, NLMSG_ERROR, NLMSG_HDRLEN};

use super::uapi::*;
use super::{AttrWriter, EthtoolNetlink, EthtoolNlError};

/// The most lanes or bins a reply may carry before it is taken as garbage: above the kernel's
/// own bounds (`ETHTOOL_MAX_LANES`, `ETHTOOL_FEC_HIST_MAX`), so a future kernel that raises them
/// a little still decodes.
const MAX_VALUES: usize = 1 + 2 * ETHTOOL_MAX_LANES;
const MAX_BINS: usize = 4 * ETHTOOL_FEC_HIST_MAX;

/// A counter's total and, where the driver counts per lane, each lane's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneCounts {
    pub total: u64,
    pub lanes: Vec<u64>,
}

/// One bin of the FEC histogram: codewords received with `low..=high` bit errors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecBin {
    pub low: u32,
    pub high: u32,
    pub codewords: u64,
    pub lanes: Vec<u64>,
}

/// The FEC counters of one netdev. `None`: the driver does not report that counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecStats {
    pub corrected_blocks: Option<LaneCounts>,
    pub uncorrectable_blocks: Option<LaneCounts>,
    pub corrected_bits: Option<LaneCounts>,
    pub histogram: Vec<FecBin>,
}

/// One FEC_GET answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecReading {
    /// The active FEC mode's link mode bit (`ETHTOOL_LINK_MODE_FEC_*_BIT`); `None` when the
    /// driver reports none.
    pub active_bit: Option<u32>,
    /// No statistics nest: the driver has no FEC counters.
    pub stats: Option<FecStats>,
}

impl FecReading {
    /// The active mode as a label: `off`, `rs`, `baser`, `llrs`, or `bit<N>` for a mode this
    /// build does not know.
    pub fn active_mode(&self) -> Option<String> {
        self.active_bit.map(mode_label)
    }
}

pub(crate) fn mode_label(bit: u32) -> String {
    match bit {
        ETHTOOL_LINK_MODE_FEC_NONE_BIT => "off".into(),
        ETHTOOL_LINK_MODE_FEC_RS_BIT => "rs".into(),
        ETHTOOL_LINK_MODE_FEC_BASER_BIT => "baser".into(),
        ETHTOOL_LINK_MODE_FEC_LLRS_BIT => "llrs".into(),
        other => format!("bit{other}"),
    }
}

fn malformed(what: impl Into<String>) -> EthtoolNlError {
    EthtoolNlError::Malformed(what.into())
}

fn attrs_of(buf: &[u8]) -> impl Iterator<Item = Result<Attr<'_>, EthtoolNlError>> {
    wire::attrs(buf).map(|a| a.map_err(|e| malformed(e.to_string())))
}

/// A u64 array attribute (`[total, lanes...]` or per-lane values).
fn u64_array(attr: &Attr<'_>, what: &str) -> Result<Vec<u64>, EthtoolNlError> {
    if !attr.value.len().is_multiple_of(8) || attr.value.len() > 8 * MAX_VALUES {
        return Err(malformed(format!(
            "{what}: {} bytes is not an array of at most {MAX_VALUES} u64",
            attr.value.len()
        )));
    }
    Ok(attr
        .value
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

fn lane_counts(attr: &Attr<'_>, what: &str) -> Result<Option<LaneCounts>, EthtoolNlError> {
    let values = u64_array(attr, what)?;
    Ok(values.split_first().map(|(total, lanes)| LaneCounts {
        total: *total,
        lanes: lanes.to_vec(),
    }))
}

/// `nla_put_uint`: 4 bytes, or 8 past `u32::MAX`.
fn uint(attr: &Attr<'_>) -> Result<u64, EthtoolNlError> {
    match attr.value.len() {
        4 => attr.u32().map(u64::from),
        _ => attr.u64(),
    }
    .map_err(|e| malformed(e.to_string()))
}

fn bin(nest: &Attr<'_>) -> Result<FecBin, EthtoolNlError> {
    let (mut low, mut high, mut codewords) = (None, None, None);
    let mut lanes = Vec::new();
    for attr in attrs_of(nest.value) {
        let attr = attr?;
        match attr.kind {
            ETHTOOL_A_FEC_HIST_PAD => {}
            ETHTOOL_A_FEC_HIST_BIN_LOW => {
                low = Some(attr.u32().map_err(|e| malformed(e.to_string()))?)
            }
            ETHTOOL_A_FEC_HIST_BIN_HIGH => {
                high = Some(attr.u32().map_err(|e| malformed(e.to_string()))?)
            }
            ETHTOOL_A_FEC_HIST_BIN_VAL => codewords = Some(uint(&attr)?),
            ETHTOOL_A_FEC_HIST_BIN_VAL_PER_LANE => lanes = u64_array(&attr, "histogram lanes")?,
            _ => {} // a newer kernel's addition
        }
    }
    match (low, high, codewords) {
        (Some(low), Some(high), Some(codewords)) if low <= high => Ok(FecBin {
            low,
            high,
            codewords,
            lanes,
        }),
        (Some(low), Some(high), Some(_)) => Err(malformed(format!(
            "histogram bin {low}..{high} is reversed"
        ))),
        _ => Err(malformed("histogram bin without its bounds or value")),
    }
}

fn stats(nest: &Attr<'_>) -> Result<FecStats, EthtoolNlError> {
    let mut stats = FecStats::default();
    for attr in attrs_of(nest.value) {
        let attr = attr?;
        match attr.kind {
            ETHTOOL_A_FEC_STAT_PAD => {}
            ETHTOOL_A_FEC_STAT_CORRECTED => {
                stats.corrected_blocks = lane_counts(&attr, "corrected blocks")?
            }
            ETHTOOL_A_FEC_STAT_UNCORR => {
                stats.uncorrectable_blocks = lane_counts(&attr, "uncorrectable blocks")?
            }
            ETHTOOL_A_FEC_STAT_CORR_BITS => {
                stats.corrected_bits = lane_counts(&attr, "corrected bits")?
            }
            ETHTOOL_A_FEC_STAT_HIST => {
                if stats.histogram.len() == MAX_BINS {
                    return Err(malformed(format!("more than {MAX_BINS} histogram bins")));
                }
                stats.histogram.push(bin(&attr)?)
            }
            _ => {}
        }
    }
    Ok(stats)
}

/// The attributes of a FEC_GET reply (after the generic netlink header).
pub(crate) fn decode_reply(attrs: &[u8]) -> Result<FecReading, EthtoolNlError> {
    let mut reading = FecReading::default();
    for attr in attrs_of(attrs) {
        let attr = attr?;
        match attr.kind {
            ETHTOOL_A_FEC_ACTIVE => {
                reading.active_bit = Some(attr.u32().map_err(|e| malformed(e.to_string()))?)
            }
            ETHTOOL_A_FEC_STATS => reading.stats = Some(stats(&attr)?),
            // The header, the configured modes and AUTO are not exported.
            _ => {}
        }
    }
    Ok(reading)
}

/// A whole answer as the kernel sends it (one datagram: `nlmsghdr`, `genlmsghdr`, the
/// attributes), or its `NLMSG_ERROR`: what the file source reads.
pub fn decode_answer(bytes: &[u8], netdev: &str) -> Result<FecReading, EthtoolNlError> {
    let message = wire::messages(bytes)
        .next()
        .ok_or_else(|| malformed("empty answer"))?
        .map_err(|e| malformed(e.to_string()))?;
    if message.header.kind == NLMSG_ERROR {
        let code = message.error_code().map_err(|e| malformed(e.to_string()))?;
        let netdev = netdev.to_string();
        return Err(match code.saturating_neg() {
            libc::EOPNOTSUPP => EthtoolNlError::NotSupported { netdev },
            libc::ENODEV => EthtoolNlError::NoDevice { netdev },
            errno => EthtoolNlError::Errno(errno),
        });
    }
    let payload = message.payload;
    match payload {
        [ETHTOOL_MSG_FEC_GET_REPLY, _, _, _, attrs @ ..] => decode_reply(attrs),
        [cmd, ..] if payload.len() >= GENL_HDRLEN => Err(malformed(format!(
            "command {cmd} where FEC_GET_REPLY is expected"
        ))),
        _ => Err(malformed("no generic netlink header")),
    }
}

/// Asks the kernel for `netdev`'s FEC mode and statistics.
pub fn read(client: &EthtoolNetlink, netdev: &str) -> Result<FecReading, EthtoolNlError> {
    let answer = client.request(
        ETHTOOL_MSG_FEC_GET,
        ETHTOOL_MSG_FEC_GET_REPLY,
        netdev,
        ETHTOOL_FLAG_STATS,
        &AttrWriter::default(),
    )?;
    decode_reply(&answer.attrs)
}

/// How [`encode_reply`] lays the 64-bit arrays out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// x86-64, arm64 (`CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS`): no pad attributes.
    None,
    /// Architectures that align 64-bit values: a zero-length PAD before each array whose
    /// value would not be 8-aligned in the message.
    Align64,
}

fn put_64bit(
    w: &mut AttrWriter,
    kind: u16,
    pad: u16,
    values: &[u64],
    offset: usize,
    padding: Padding,
) {
    // `nla_need_padding_for_64bit`: the value (after its 4-byte header) must start 8-aligned
    // in the message; `offset` is where this writer's bytes start in it.
    if padding == Padding::Align64 && !(offset + w.bytes().len() + NLA_HDRLEN_U).is_multiple_of(8) {
        w.raw(pad, &[]);
    }
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    w.raw(kind, &bytes);
}

const NLA_HDRLEN_U: usize = wire::NLA_HDRLEN;

fn lane_array(counts: &Option<LaneCounts>) -> Vec<u64> {
    counts
        .as_ref()
        .map(|c| {
            std::iter::once(c.total)
                .chain(c.lanes.iter().copied())
                .collect()
        })
        .unwrap_or_default()
}

/// A FEC_GET reply datagram as `fec_fill_reply` builds it for `netdev` (ifindex `ifindex`),
/// `seq` echoed. The configured-modes bitset is the verbose form (no `COMPACT_BITSETS` flag in
/// the request), listing the active mode only.
pub fn encode_reply(
    family: u16,
    seq: u32,
    ifindex: u32,
    netdev: &str,
    reading: &FecReading,
    padding: Padding,
) -> Vec<u8> {
    let mut w = AttrWriter::default();
    w.nested(ETHTOOL_A_FEC_HEADER, |h| {
        h.u32(ETHTOOL_A_HEADER_DEV_INDEX, ifindex);
        h.string(ETHTOOL_A_HEADER_DEV_NAME, netdev);
    });
    // ETHTOOL_A_FEC_MODES: NOMASK (flag), SIZE (u32), BITS { BIT { INDEX, NAME } }.
    w.nested(ETHTOOL_A_FEC_MODES, |b| {
        b.raw(1, &[]);
        // __ETHTOOL_LINK_MODE_MASK_NBITS of 6.18 (the last mode, 800000baseVR4, is 120).
        b.u32(2, 121);
        b.nested(3, |bits| {
            if let Some(bit) = reading.active_bit {
                bits.nested(1, |one| {
                    one.u32(1, bit);
                    one.string(2, link_mode_name(bit));
                });
            }
        });
    });
    w.u8(ETHTOOL_A_FEC_AUTO, 0);
    if let Some(bit) = reading.active_bit {
        w.u32(ETHTOOL_A_FEC_ACTIVE, bit);
    }
    if let Some(stats) = &reading.stats {
        // Where the nest's content starts in the message: header, genl header, what is written
        // so far, the nest's own header.
        let base = NLMSG_HDRLEN + GENL_HDRLEN + w.bytes().len() + NLA_HDRLEN_U;
        w.nested(ETHTOOL_A_FEC_STATS, |s| {
            for (kind, counts) in [
                (ETHTOOL_A_FEC_STAT_CORRECTED, &stats.corrected_blocks),
                (ETHTOOL_A_FEC_STAT_UNCORR, &stats.uncorrectable_blocks),
                (ETHTOOL_A_FEC_STAT_CORR_BITS, &stats.corrected_bits),
            ] {
                put_64bit(
                    s,
                    kind,
                    ETHTOOL_A_FEC_STAT_PAD,
                    &lane_array(counts),
                    base,
                    padding,
                );
            }
            for bin in &stats.histogram {
                let bin_base = base + s.bytes().len() + NLA_HDRLEN_U;
                s.nested(ETHTOOL_A_FEC_STAT_HIST, |h| {
                    h.u32(ETHTOOL_A_FEC_HIST_BIN_LOW, bin.low);
                    h.u32(ETHTOOL_A_FEC_HIST_BIN_HIGH, bin.high);
                    match u32::try_from(bin.codewords) {
                        Ok(small) => h.u32(ETHTOOL_A_FEC_HIST_BIN_VAL, small),
                        Err(_) => h.u64(ETHTOOL_A_FEC_HIST_BIN_VAL, bin.codewords),
                    };
                    if !bin.lanes.is_empty() {
                        put_64bit(
                            h,
                            ETHTOOL_A_FEC_HIST_BIN_VAL_PER_LANE,
                            ETHTOOL_A_FEC_HIST_PAD,
                            &bin.lanes,
                            bin_base,
                            padding,
                        );
                    }
                });
            }
        });
    }
    let len = NLMSG_HDRLEN + GENL_HDRLEN + w.bytes().len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&family.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[ETHTOOL_MSG_FEC_GET_REPLY, ETHTOOL_GENL_VERSION, 0, 0]);
    out.extend_from_slice(w.bytes());
    out
}

/// The `NLMSG_ERROR` the kernel sends for a refused FEC_GET (`-errno`, then the request's
/// header echoed; the extended ack's TLVs are left out).
#[cfg(test)]
pub(crate) fn encode_error(family: u16, seq: u32, errno: i32) -> Vec<u8> {
    let len = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&(-errno).to_ne_bytes());
    // The request's nlmsghdr: its length (header, genl header, a header nest naming a netdev
    // does not matter here), type, flags, seq, pid.
    out.extend_from_slice(&((NLMSG_HDRLEN + GENL_HDRLEN) as u32).to_ne_bytes());
    out.extend_from_slice(&family.to_ne_bytes());
    out.extend_from_slice(&wire::NLM_F_REQUEST.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out
}

/// `link_mode_names` of `net/ethtool/common.c` for the FEC bits.
fn link_mode_name(bit: u32) -> &'static str {
    match bit {
        ETHTOOL_LINK_MODE_FEC_NONE_BIT => "None",
        ETHTOOL_LINK_MODE_FEC_RS_BIT => "RS",
        ETHTOOL_LINK_MODE_FEC_BASER_BIT => "BASER",
        ETHTOOL_LINK_MODE_FEC_LLRS_BIT => "LLRS",
        _ => "",
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// A ConnectX-7 port at 400G in RS-FEC mode as mlx5 reports it: totals only (RS corrects
    /// across lanes), corrected bits, and a histogram of 4 bins with per-lane counts in the
    /// first (the kernel sums lanes into BIN_VAL when the driver leaves the sum unset).
    pub(crate) fn rs_fec_with_histogram() -> FecReading {
        FecReading {
            active_bit: Some(ETHTOOL_LINK_MODE_FEC_RS_BIT),
            stats: Some(FecStats {
                corrected_blocks: Some(LaneCounts {
                    total: 1_234_567,
                    lanes: vec![],
                }),
                uncorrectable_blocks: Some(LaneCounts {
                    total: 3,
                    lanes: vec![],
                }),
                corrected_bits: Some(LaneCounts {
                    total: 9_876_543_210,
                    lanes: vec![],
                }),
                histogram: vec![
                    FecBin {
                        low: 0,
                        high: 0,
                        codewords: 445,
                        lanes: vec![125, 120, 100, 100],
                    },
                    FecBin {
                        low: 1,
                        high: 3,
                        codewords: 12,
                        lanes: vec![],
                    },
                    FecBin {
                        low: 4,
                        high: 7,
                        codewords: 5_000_000_000,
                        lanes: vec![],
                    },
                    FecBin {
                        low: 8,
                        high: 15,
                        codewords: 0,
                        lanes: vec![],
                    },
                ],
            }),
        }
    }

    /// FC-FEC (BASE-R) counts per lane: totals are the lanes' sums; no bits, no histogram.
    fn baser_per_lane() -> FecReading {
        FecReading {
            active_bit: Some(ETHTOOL_LINK_MODE_FEC_BASER_BIT),
            stats: Some(FecStats {
                corrected_blocks: Some(LaneCounts {
                    total: 10,
                    lanes: vec![1, 2, 3, 4],
                }),
                uncorrectable_blocks: Some(LaneCounts {
                    total: 0,
                    lanes: vec![0, 0, 0, 0],
                }),
                corrected_bits: None,
                histogram: vec![],
            }),
        }
    }

    fn attrs_of_reply(bytes: &[u8]) -> &[u8] {
        &bytes[NLMSG_HDRLEN + GENL_HDRLEN..]
    }

    #[test]
    fn a_reply_decodes_to_exact_values_with_and_without_padding() {
        for padding in [Padding::None, Padding::Align64] {
            for reading in [rs_fec_with_histogram(), baser_per_lane()] {
                let bytes = encode_reply(27, 5, 4, "ens1f0np0", &reading, padding);
                assert_eq!(decode_answer(&bytes, "ens1f0np0"), Ok(reading.clone()));
            }
        }
        // Alignment inserts zero-length PAD attributes (type 1) inside the nests, which the
        // decoder above skipped.
        let plain = encode_reply(27, 5, 4, "e", &rs_fec_with_histogram(), Padding::None);
        let padded = encode_reply(27, 5, 4, "e", &rs_fec_with_histogram(), Padding::Align64);
        assert!(padded.len() > plain.len());
        let pads = |bytes: &[u8]| {
            let top: Vec<_> = wire::attrs(attrs_of_reply(bytes))
                .map(|a| a.unwrap())
                .collect();
            let stats = top.iter().find(|a| a.kind == ETHTOOL_A_FEC_STATS).unwrap();
            stats
                .nested()
                .filter(|a| a.as_ref().unwrap().value.is_empty())
                .count()
        };
        assert_eq!(pads(&plain), 0);
        assert!(pads(&padded) > 0);
        let r = decode_answer(
            &encode_reply(27, 5, 4, "e", &rs_fec_with_histogram(), Padding::None),
            "e",
        )
        .unwrap();
        let stats = r.stats.unwrap();
        assert_eq!(stats.corrected_bits.unwrap().total, 9_876_543_210);
        assert_eq!(stats.histogram[2].codewords, 5_000_000_000);
        assert_eq!(stats.histogram[0].lanes, [125, 120, 100, 100]);
        assert_eq!(r.active_bit.map(mode_label).as_deref(), Some("rs"));
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/fec")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn totals(total: u64, lanes: &[u64]) -> Option<LaneCounts> {
        Some(LaneCounts {
            total,
            lanes: lanes.to_vec(),
        })
    }

    fn bin(low: u32, high: u32, codewords: u64, lanes: &[u64]) -> FecBin {
        FecBin {
            low,
            high,
            codewords,
            lanes: lanes.to_vec(),
        }
    }

    /// tests/fixtures/fec/: answers written by make.py from the kernel's layout, independent of
    /// `encode_reply`.
    #[test]
    fn fixtures_decode_to_exact_values() {
        let rs = decode_answer(&fixture("rs_totals.bin"), "ens1f0np0").unwrap();
        assert_eq!(rs.active_mode().as_deref(), Some("rs"));
        assert_eq!(
            rs.stats,
            Some(FecStats {
                corrected_blocks: totals(1_234_567, &[]),
                uncorrectable_blocks: totals(3, &[]),
                corrected_bits: totals(9_876_543_210, &[]),
                histogram: vec![],
            })
        );
        let baser = decode_answer(&fixture("baser_lanes.bin"), "ens2f0np0").unwrap();
        assert_eq!(baser.active_mode().as_deref(), Some("baser"));
        assert_eq!(
            baser.stats,
            Some(FecStats {
                corrected_blocks: totals(10, &[1, 2, 3, 4]),
                uncorrectable_blocks: totals(1, &[0, 0, 1, 0]),
                corrected_bits: None,
                histogram: vec![],
            })
        );
        let nsim = FecStats {
            corrected_blocks: totals(123, &[]),
            uncorrectable_blocks: totals(4, &[]),
            corrected_bits: None,
            histogram: vec![
                bin(0, 0, 445, &[125, 120, 100, 100]),
                bin(1, 3, 12, &[]),
                bin(4, 7, 2, &[2, 0, 0, 0]),
            ],
        };
        for name in ["netdevsim_hist.bin", "netdevsim_hist_pad64.bin"] {
            let reading = decode_answer(&fixture(name), "eni0np1").unwrap();
            assert_eq!(reading.stats.as_ref(), Some(&nsim), "{name}");
        }
        // The padded layout really has pads (zero-length attributes) that were skipped.
        assert!(fixture("netdevsim_hist_pad64.bin").len() > fixture("netdevsim_hist.bin").len());
        let mode_only = decode_answer(&fixture("mode_only.bin"), "ens3f0").unwrap();
        assert_eq!(
            (mode_only.active_mode().as_deref(), mode_only.stats),
            (Some("rs"), None)
        );
        assert_eq!(
            decode_answer(&fixture("eopnotsupp.bin"), "veth0"),
            Err(EthtoolNlError::NotSupported {
                netdev: "veth0".into()
            })
        );
    }

    /// Our encoder lays a reading out as make.py does: the same bytes for the same content
    /// (netdevsim's port configures RS only, the one mode the encoder lists).
    #[test]
    fn the_encoder_agrees_with_the_fixtures_byte_for_byte() {
        for (name, padding) in [
            ("netdevsim_hist.bin", Padding::None),
            ("netdevsim_hist_pad64.bin", Padding::Align64),
        ] {
            let theirs = fixture(name);
            let reading = decode_answer(&theirs, "eni0np1").unwrap();
            assert_eq!(
                encode_reply(0x1e, 7, 3, "eni0np1", &reading, padding),
                theirs,
                "{name}"
            );
        }
    }

    #[test]
    fn the_byte_layout_is_the_kernels() {
        let bytes = encode_reply(27, 5, 4, "eth0", &baser_per_lane(), Padding::None);
        // nlmsghdr: length, type = family 27, flags 0, seq 5, pid 0; genl: cmd 30, version 1.
        assert_eq!(
            u32::from_ne_bytes(bytes[0..4].try_into().unwrap()) as usize,
            bytes.len()
        );
        assert_eq!(&bytes[4..8], &[27, 0, 0, 0]);
        assert_eq!(&bytes[16..20], &[30, 1, 0, 0]);
        let top: Vec<_> = wire::attrs(attrs_of_reply(&bytes))
            .collect::<Result<_, _>>()
            .unwrap();
        let kinds: Vec<u16> = top.iter().map(|a| a.kind).collect();
        assert_eq!(kinds, [1, 2, 3, 4, 5]);
        let stats: Vec<_> = top[4].nested().collect::<Result<_, _>>().unwrap();
        // CORRECTED = [10, 1, 2, 3, 4]: 40 bytes; CORR_BITS empty (header only).
        assert_eq!((stats[0].kind, stats[0].value.len()), (2, 40));
        assert_eq!(&stats[0].value[8..16], &1u64.to_ne_bytes());
        assert_eq!((stats[2].kind, stats[2].value.len()), (4, 0));
    }

    #[test]
    fn an_empty_array_is_a_counter_the_driver_does_not_report() {
        let reading = decode_answer(
            &encode_reply(27, 1, 4, "e", &baser_per_lane(), Padding::None),
            "e",
        )
        .unwrap();
        assert_eq!(reading.stats.unwrap().corrected_bits, None);
    }

    #[test]
    fn a_driver_without_statistics_gives_no_stats_and_no_error() {
        let reading = FecReading {
            active_bit: Some(ETHTOOL_LINK_MODE_FEC_RS_BIT),
            stats: None,
        };
        let bytes = encode_reply(27, 1, 4, "e", &reading, Padding::None);
        assert_eq!(decode_answer(&bytes, "e"), Ok(reading));
        // No active mode: no ETHTOOL_A_FEC_ACTIVE at all.
        let bytes = encode_reply(27, 1, 4, "e", &FecReading::default(), Padding::None);
        assert_eq!(decode_answer(&bytes, "e").unwrap().active_mode(), None);
    }

    #[test]
    fn refusals_are_named() {
        assert_eq!(
            decode_answer(&encode_error(27, 1, libc::EOPNOTSUPP), "veth0"),
            Err(EthtoolNlError::NotSupported {
                netdev: "veth0".into()
            })
        );
        assert_eq!(
            decode_answer(&encode_error(27, 1, libc::EBUSY), "x"),
            Err(EthtoolNlError::Errno(libc::EBUSY))
        );
    }

    #[test]
    fn garbled_answers_are_errors_never_panics() {
        let good = encode_reply(
            27,
            5,
            4,
            "ens1f0np0",
            &rs_fec_with_histogram(),
            Padding::Align64,
        );
        // Every truncation, and every single-byte corruption, decodes or fails cleanly.
        for cut in 0..good.len() {
            let mut short = good[..cut].to_vec();
            // Keep nlmsg_len honest for the cut, so the attributes themselves are cut.
            if cut >= 4 {
                short[..4].copy_from_slice(&(cut as u32).to_ne_bytes());
            }
            let _ = decode_answer(&short, "x");
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut bad = good.clone();
            let at = (state % bad.len() as u64) as usize;
            bad[at] = (state >> 32) as u8;
            let _ = decode_answer(&bad, "x");
        }
        // Specific damage gives specific errors.
        let mut odd_array = AttrWriter::default();
        odd_array.nested(ETHTOOL_A_FEC_STATS, |s| {
            s.raw(ETHTOOL_A_FEC_STAT_CORRECTED, &[0; 12]);
        });
        assert!(
            matches!(decode_reply(odd_array.bytes()), Err(EthtoolNlError::Malformed(m)) if m.contains("12 bytes"))
        );
        let mut half_bin = AttrWriter::default();
        half_bin.nested(ETHTOOL_A_FEC_STATS, |s| {
            s.nested(ETHTOOL_A_FEC_STAT_HIST, |h| {
                h.u32(ETHTOOL_A_FEC_HIST_BIN_LOW, 1);
            });
        });
        assert!(matches!(
            decode_reply(half_bin.bytes()),
            Err(EthtoolNlError::Malformed(_))
        ));
        let mut reversed = AttrWriter::default();
        reversed.nested(ETHTOOL_A_FEC_STATS, |s| {
            s.nested(ETHTOOL_A_FEC_STAT_HIST, |h| {
                h.u32(ETHTOOL_A_FEC_HIST_BIN_LOW, 7);
                h.u32(ETHTOOL_A_FEC_HIST_BIN_HIGH, 4);
                h.u32(ETHTOOL_A_FEC_HIST_BIN_VAL, 1);
            });
        });
        assert!(
            matches!(decode_reply(reversed.bytes()), Err(EthtoolNlError::Malformed(m)) if m.contains("reversed"))
        );
        assert!(matches!(
            decode_answer(&[], "x"),
            Err(EthtoolNlError::Malformed(_))
        ));
        assert!(matches!(
            decode_answer(&good[..10], "x"),
            Err(EthtoolNlError::Malformed(_))
        ));
    }
}
