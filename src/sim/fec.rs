//! The simulated NICs' FEC statistics, as ethtool netlink's FEC_GET would answer them, written
//! beside their `ethtool -S` files as `<netdev>.fec` (the kernel's reply bytes, built by
//! `ethtool_netlink::fec::encode_reply`), so the `fec` collector's file source reads them
//! through the same decoder as the kernel's answers.
//!
//! Derived from the NIC's PHY statistics, so the two stay consistent as the fabric steps:
//! corrected bits are mlx5's `rx_corrected_bits_phy` (the driver fills FEC_GET's corrected bits
//! from the same PPCNT field), uncorrectable blocks follow `rx_symbol_err_phy` (a codeword FEC
//! cannot correct reaches the PCS as symbol errors), and the 400G links run RS-FEC(544,514):
//! 5440-bit codewords, up to 15 correctable symbol errors. RS-FEC corrects across lanes, so like
//! mlx5 in RS mode only totals are given. A healthy link corrects a few blocks a second.

use std::io;
use std::path::Path;

use super::sysfs_tree::{LinkLayer, NicSpec};
use crate::node::ethtool_netlink::fec::{
    encode_reply, FecBin, FecReading, FecStats, LaneCounts, Padding,
};
use crate::node::ethtool_netlink::uapi::ETHTOOL_LINK_MODE_FEC_RS_BIT;
use crate::node::fec_collector::FileFec;

/// Bits of one RS(544,514) codeword (544 10-bit symbols).
const CODEWORD_BITS: u64 = 5440;
/// The histogram's bins: 0 to 15 bit errors per codeword, one value each (16 bins, as IEEE
/// 802.3ck defines them for RS(544,514)).
const BINS: u32 = 16;
/// How fast the share of corrected codewords falls with each more bit error: most corrected
/// codewords carry one error, few carry several (random errors on a healthy link).
const DECAY: f64 = 0.35;
/// The family id the files claim: any id above the controller's; the reader does not ask.
const FAMILY: u16 = 0x1e;

fn stat(nic: &NicSpec, name: &str) -> u64 {
    nic.ethtool_stat(name).unwrap_or(0)
}

/// A NIC's FEC reading: `None` for InfiniBand ports and NICs without statistics.
pub fn reading(nic: &NicSpec) -> Option<FecReading> {
    if nic.link_layer != LinkLayer::Ethernet || nic.ethtool.is_empty() {
        return None;
    }
    let corrected_bits = stat(nic, "rx_corrected_bits_phy");
    let uncorrectable = stat(nic, "rx_symbol_err_phy");
    let codewords = stat(nic, "rx_bits_phy") / CODEWORD_BITS;
    // Each corrected codeword with k errors has weight DECAY^(k-1).
    let weights: Vec<f64> = (1..BINS).map(|k| DECAY.powi(k as i32 - 1)).collect();
    let total_weight: f64 = weights.iter().sum();
    let mean_errors: f64 = weights
        .iter()
        .enumerate()
        .map(|(i, w)| (i + 1) as f64 * w)
        .sum::<f64>()
        / total_weight;
    let corrected_blocks = (corrected_bits as f64 / mean_errors) as u64;
    let mut histogram = vec![FecBin {
        low: 0,
        high: 0,
        codewords: codewords.saturating_sub(corrected_blocks),
        lanes: vec![],
    }];
    histogram.extend(weights.iter().zip(1u32..).map(|(w, k)| FecBin {
        low: k,
        high: k,
        codewords: (corrected_blocks as f64 * w / total_weight) as u64,
        lanes: vec![],
    }));
    let totals = |total| {
        Some(LaneCounts {
            total,
            lanes: vec![],
        })
    };
    Some(FecReading {
        active_bit: Some(ETHTOOL_LINK_MODE_FEC_RS_BIT),
        stats: Some(FecStats {
            corrected_blocks: totals(corrected_blocks),
            uncorrectable_blocks: totals(uncorrectable),
            corrected_bits: totals(corrected_bits),
            histogram,
        }),
    })
}

/// Writes `<dir>/<netdev>.fec` for every RoCE NIC with statistics (renamed into place, as the
/// statistics files are).
pub fn write_fec_files(dir: &Path, nics: &[NicSpec]) -> io::Result<()> {
    for (index, nic) in nics.iter().enumerate() {
        let (Some(netdev), Some(reading)) = (&nic.netdev, reading(nic)) else {
            continue;
        };
        // ifindex: lo is 1; the NICs follow in order.
        let ifindex = u32::try_from(index + 2).unwrap_or(u32::MAX);
        let bytes = encode_reply(FAMILY, 0, ifindex, netdev, &reading, Padding::None);
        let tmp = dir.join(format!(".{netdev}.fec.tmp"));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, FileFec::path_for(dir, netdev))?;
    }
    Ok(())
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::node::ethtool_netlink::fec::decode_answer;
    use crate::sim::sysfs_tree::connectx7_node;

    fn set(nic: &mut NicSpec, name: &str, value: u64) {
        match nic.ethtool.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => nic.ethtool.push((name.into(), value)),
        }
    }

    #[test]
    fn the_files_decode_to_the_phy_statistics() {
        let nics = connectx7_node(8, 7);
        let dir = tempfile::tempdir().unwrap();
        write_fec_files(dir.path(), &nics).unwrap();
        let roce = nics
            .iter()
            .find(|n| n.link_layer == LinkLayer::Ethernet && n.netdev.is_some())
            .unwrap();
        let netdev = roce.netdev.as_deref().unwrap();
        let bytes = std::fs::read(FileFec::path_for(dir.path(), netdev)).unwrap();
        let decoded = decode_answer(&bytes, netdev).unwrap();
        let stats = decoded.stats.clone().unwrap();
        assert_eq!(decoded.active_mode().as_deref(), Some("rs"));
        assert_eq!(
            stats.corrected_bits.unwrap().total,
            roce.ethtool_stat("rx_corrected_bits_phy").unwrap()
        );
        assert_eq!(stats.histogram.len(), 16);
        let corrected = stats.corrected_blocks.unwrap().total;
        let in_bins: u64 = stats.histogram[1..].iter().map(|b| b.codewords).sum();
        assert!(
            in_bins <= corrected && corrected - in_bins < 16,
            "{in_bins} {corrected}"
        );
        // No file for InfiniBand ports.
        for nic in nics
            .iter()
            .filter(|n| n.link_layer == LinkLayer::InfiniBand)
        {
            if let Some(netdev) = &nic.netdev {
                assert!(!FileFec::path_for(dir.path(), netdev).exists());
            }
        }
    }

    #[test]
    fn counters_only_grow_as_the_phy_statistics_grow() {
        let mut nic = connectx7_node(1, 3).remove(0);
        let before = reading(&nic).unwrap().stats.unwrap();
        let bits = stat(&nic, "rx_bits_phy");
        set(&mut nic, "rx_bits_phy", bits + 400_000_000_000);
        let corrected = stat(&nic, "rx_corrected_bits_phy");
        set(&mut nic, "rx_corrected_bits_phy", corrected + 400);
        set(&mut nic, "rx_symbol_err_phy", 2);
        let after = reading(&nic).unwrap().stats.unwrap();
        let total = |c: &Option<LaneCounts>| c.as_ref().unwrap().total;
        assert!(total(&after.corrected_blocks) > total(&before.corrected_blocks));
        assert_eq!(
            total(&after.corrected_bits),
            total(&before.corrected_bits) + 400
        );
        assert_eq!(total(&after.uncorrectable_blocks), 2);
        for (b, a) in before.histogram.iter().zip(&after.histogram) {
            assert!(a.codewords >= b.codewords, "{b:?} -> {a:?}");
        }
    }
}
