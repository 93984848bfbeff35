//! The `fec` collector: each RoCE port's FEC mode and counters (corrected and uncorrectable
//! blocks, corrected bits; per lane and the FEC histogram on request), over ethtool netlink
//! (`ethtool_netlink::fec`). The kernel is asked on a thread of its own every
//! `node.fec.interval`, not at scrape time: mlx5 answers FEC_GET with firmware register reads
//! (PPCNT) per port, which a thread at a fixed pace keeps at one per interval whatever the number
//! of scrapers, and a hung firmware command holds that thread, never a scrape. FEC_GET needs no
//! privilege (no `GENL_ADMIN_PERM` on it in `net/ethtool/netlink.c`), so the collector is on by
//! default. A driver without FEC (`EOPNOTSUPP`) gives no series and no error.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::ethtool_netlink::fec::{self, FecReading};
use super::ethtool_netlink::{EthtoolNetlink, EthtoolNlError};
use super::sysfs::{port_netdevs, DeviceFilter, PortNetdev};
use crate::exposition::{Families, Value};
use crate::periodic::{ErrorCounts, PeriodicCollector, Served};

/// `node.fec`: the `fec` collector.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FecConfig {
    pub enabled: bool,
    /// How often each port is asked.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub interval: Duration,
    /// Each port's answer must arrive within this.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub timeout: Duration,
    /// Per-lane series of the three counters, where the driver counts per lane.
    pub per_lane: bool,
    /// The FEC histogram's bins (kernels of late 2025 with a driver that fills them).
    pub histogram: bool,
}

impl Default for FecConfig {
    fn default() -> Self {
        FecConfig {
            enabled: true,
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(2),
            per_lane: false,
            histogram: false,
        }
    }
}

/// Where a netdev's FEC reading comes from.
pub trait FecSource: Send + Sync + std::fmt::Debug {
    fn read(&self, netdev: &str) -> Result<FecReading, EthtoolNlError>;
}

/// The running kernel, over ethtool netlink.
#[derive(Debug)]
pub struct KernelFec(EthtoolNetlink);

impl KernelFec {
    pub fn new(timeout: Duration) -> KernelFec {
        KernelFec(EthtoolNetlink::new(timeout))
    }
}

impl FecSource for KernelFec {
    fn read(&self, netdev: &str) -> Result<FecReading, EthtoolNlError> {
        fec::read(&self.0, netdev)
    }
}

/// `<dir>/<netdev>.fec`: the kernel's FEC_GET answer as bytes (one datagram, reply or error),
/// beside the `ethtool -S` files of `node.ethtool.source: files` (fixtures, the simulated
/// fabric). No file: a driver without FEC.
#[derive(Debug)]
pub struct FileFec {
    dir: PathBuf,
}

/// Far above any answer (a full one with 16 bins and 8 lanes is under 2 KiB).
const MAX_FEC_FILE_BYTES: u64 = 64 << 10;

impl FileFec {
    pub fn new(dir: impl Into<PathBuf>) -> FileFec {
        FileFec { dir: dir.into() }
    }

    pub fn path_for(dir: &Path, netdev: &str) -> PathBuf {
        dir.join(format!("{netdev}.fec"))
    }
}

impl FecSource for FileFec {
    fn read(&self, netdev: &str) -> Result<FecReading, EthtoolNlError> {
        if netdev.is_empty() || netdev.contains('/') || netdev.starts_with('.') {
            return Err(EthtoolNlError::BadName {
                netdev: netdev.into(),
            });
        }
        let path = FileFec::path_for(&self.dir, netdev);
        match crate::bounded_read::read(&path, MAX_FEC_FILE_BYTES) {
            Ok(bytes) => fec::decode_answer(&bytes, netdev),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(EthtoolNlError::NotSupported {
                netdev: netdev.into(),
            }),
            Err(e) => Err(EthtoolNlError::Io {
                op: "read FEC file",
                source: Arc::new(e),
            }),
        }
    }
}

/// A RoCE port and its netdev, as sysfs lists them.
/// As the sysfs walk decides it (`node/mod.rs`): a netdev the host's `class/net` does not list
/// lives in another network namespace (a VF in a pod); no error.
fn in_other_namespace(sysfs_root: &Path, netdev: &str) -> bool {
    let class_net = sysfs_root.join("class/net");
    class_net.is_dir() && std::fs::symlink_metadata(class_net.join(netdev)).is_err()
}

/// One port's reading.
#[derive(Debug, Clone, PartialEq)]
struct PortFec {
    port: PortNetdev,
    reading: FecReading,
}

/// One round over the node's ports.
#[derive(Debug, Default)]
pub struct Reading {
    ports: Vec<PortFec>,
    /// Reads that failed (not "not supported"): the round is served, but not as a success.
    failed: usize,
    /// No ethtool netlink here (kernel before 5.6, or no generic netlink).
    unavailable: bool,
}

/// Failed reads by reason; `unavailable_logged` once ethtool netlink was found missing.
fn read_round(
    source: &dyn FecSource,
    sysfs_root: &Path,
    filter: &DeviceFilter,
    errors: &ErrorCounts<&'static str>,
    unavailable_logged: &mut bool,
) -> Reading {
    let mut reading = Reading::default();
    for port in port_netdevs(sysfs_root, filter, true) {
        match source.read(&port.netdev) {
            Ok(fec) => reading.ports.push(PortFec { port, reading: fec }),
            // A driver without FEC: none.
            Err(EthtoolNlError::NotSupported { .. }) => {}
            Err(EthtoolNlError::NoDevice { .. })
                if in_other_namespace(sysfs_root, &port.netdev) => {}
            Err(e @ (EthtoolNlError::NoFamily { .. } | EthtoolNlError::Unavailable(_))) => {
                if !std::mem::replace(unavailable_logged, true) {
                    tracing::warn!(
                        "FEC statistics: {e}; the fec collector exports nothing and reports \
                         success 0 (--no-collector.fec turns it off)"
                    );
                }
                reading.unavailable = true;
                // Every other port would say the same.
                break;
            }
            Err(e) => {
                tracing::debug!(
                    "FEC of {} ({} port {}): {e}",
                    port.netdev,
                    port.device,
                    port.port
                );
                reading.failed += 1;
                errors.add(e.reason());
            }
        }
    }
    reading
}

/// The collector: the last round, and the thread that makes them.
pub type FecCollector = PeriodicCollector<FecConfig>;

impl FecCollector {
    /// Starts the reading thread; the first round starts at once.
    pub fn spawn(
        source: Arc<dyn FecSource>,
        config: FecConfig,
        sysfs_root: PathBuf,
        filter: DeviceFilter,
    ) -> io::Result<FecCollector> {
        let mut unavailable_logged = false;
        PeriodicCollector::start("rdma-fec", config, move |errors| {
            let source = source.as_ref();
            read_round(
                source,
                &sysfs_root,
                &filter,
                errors,
                &mut unavailable_logged,
            )
        })
    }
}

fn port_labels(port: &PortNetdev) -> Vec<(&'static str, Cow<'_, str>)> {
    vec![
        ("device", Cow::Borrowed(port.device.as_str())),
        ("port", Cow::Borrowed(port.port.as_str())),
        ("netdev", Cow::Borrowed(port.netdev.as_str())),
    ]
}

fn help_of(total_name: &str) -> (&'static str, &'static str) {
    match total_name {
        "rdma_fec_corrected_blocks_total" => (
            "FEC blocks (codewords) received with errors that FEC corrected (ETHTOOL_A_FEC_STAT_CORRECTED, total).",
            "FEC blocks corrected on one lane, where the driver counts per lane (BASE-R; RS-FEC corrects across lanes and gives totals only).",
        ),
        "rdma_fec_uncorrectable_blocks_total" => (
            "FEC blocks (codewords) received with errors FEC could not correct: frames lost on the link (ETHTOOL_A_FEC_STAT_UNCORR, total).",
            "FEC blocks that could not be corrected on one lane, where the driver counts per lane.",
        ),
        _ => (
            "Bits FEC corrected: the pre-FEC bit errors of the link (ETHTOOL_A_FEC_STAT_CORR_BITS, total).",
            "Bits FEC corrected on one lane, where the driver counts per lane.",
        ),
    }
}

impl Served for FecConfig {
    const NAME: &'static str = "fec";
    /// Reading a node's ports takes milliseconds.
    const FIRST_READING_WAIT: Duration = Duration::from_secs(1);
    /// Every scrape of a round serves its few KiB as encoded once.
    const ENCODE_ONCE: bool = true;
    type Reading = Reading;
    type ErrorKey = &'static str;

    fn interval(&self) -> Duration {
        self.interval
    }

    /// A few ports at their timeout.
    fn slowest_reading(&self) -> Duration {
        self.timeout.saturating_mul(8)
    }

    fn add_metrics<'a>(
        &self,
        families: &mut Families<'a>,
        reading: &'a Reading,
        errors: &BTreeMap<&'static str, u64>,
    ) {
        for PortFec { port, reading } in &reading.ports {
            if let Some(mode) = reading.active_mode() {
                let mut labels = port_labels(port);
                labels.push(("mode", Cow::Owned(mode)));
                families.gauge(
                    "rdma_fec_mode_info",
                    "The port's active FEC mode (ETHTOOL_A_FEC_ACTIVE): off, rs (Reed-Solomon, RS-FEC), baser (BASE-R/FireCode), llrs (low-latency RS), or bit<N> for a link mode this build does not name.",
                    labels,
                    Value::U64(1),
                );
            }
            let Some(stats) = &reading.stats else {
                continue;
            };
            let counters = [
                (
                    &stats.corrected_blocks,
                    "rdma_fec_corrected_blocks_total",
                    "rdma_fec_lane_corrected_blocks_total",
                ),
                (
                    &stats.uncorrectable_blocks,
                    "rdma_fec_uncorrectable_blocks_total",
                    "rdma_fec_lane_uncorrectable_blocks_total",
                ),
                (
                    &stats.corrected_bits,
                    "rdma_fec_corrected_bit_errors_total",
                    "rdma_fec_lane_corrected_bit_errors_total",
                ),
            ];
            for (counts, total_name, lane_name) in counters {
                let Some(counts) = counts else { continue };
                let (help, lane_help) = help_of(total_name);
                families.counter(
                    total_name,
                    help,
                    port_labels(port),
                    Value::U64(counts.total),
                );
                if self.per_lane {
                    for (lane, value) in counts.lanes.iter().enumerate() {
                        let mut labels = port_labels(port);
                        labels.push(("lane", Cow::Owned(lane.to_string())));
                        families.counter(lane_name, lane_help, labels, Value::U64(*value));
                    }
                }
            }
            if self.histogram {
                for bin in &stats.histogram {
                    let mut labels = port_labels(port);
                    labels.push(("bit_errors_low", Cow::Owned(bin.low.to_string())));
                    labels.push(("bit_errors_high", Cow::Owned(bin.high.to_string())));
                    families.counter(
                        "rdma_fec_histogram_codewords_total",
                        "FEC codewords received with between bit_errors_low and bit_errors_high (inclusive) bit errors: one bin of the FEC histogram (IEEE 802.3ck/df, ETHTOOL_A_FEC_STAT_HIST), as the driver defines its bins.",
                        labels,
                        Value::U64(bin.codewords),
                    );
                }
            }
        }
        for (reason, count) in errors {
            families.counter(
                "rdma_exporter_fec_errors_total",
                "FEC reads that failed, by reason (a driver without FEC is not one); the other ports are still served.",
                vec![("reason", Cow::Borrowed(*reason))],
                Value::U64(*count),
            );
        }
    }

    /// Ethtool netlink available and every port read (or without FEC).
    fn ok(&self, reading: &Reading) -> bool {
        !reading.unavailable && reading.failed == 0
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::node::ethtool_netlink::fec::{
        encode_error, encode_reply, FecBin, FecStats, LaneCounts, Padding,
    };
    use crate::node::ethtool_netlink::uapi::ETHTOOL_LINK_MODE_FEC_RS_BIT;
    use crate::testutil::{scrape, wait_for};

    /// A sysfs tree of `ports` (device, link layer, netdev); `class/net` lists `host_netdevs`.
    fn tree(ports: &[(&str, &str, &str)], host_netdevs: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (device, link_layer, netdev) in ports {
            let port = root
                .path()
                .join(format!("class/infiniband/{device}/ports/1"));
            std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
            std::fs::write(port.join("link_layer"), format!("{link_layer}\n")).unwrap();
            std::fs::write(port.join("gid_attrs/ndevs/0"), format!("{netdev}\n")).unwrap();
        }
        for netdev in host_netdevs {
            std::fs::create_dir_all(root.path().join("class/net").join(netdev)).unwrap();
        }
        root
    }

    fn rs(corrected: u64, uncorrectable: u64, bits: u64) -> FecReading {
        FecReading {
            active_bit: Some(ETHTOOL_LINK_MODE_FEC_RS_BIT),
            stats: Some(FecStats {
                corrected_blocks: Some(LaneCounts {
                    total: corrected,
                    lanes: vec![corrected / 2, corrected - corrected / 2],
                }),
                uncorrectable_blocks: Some(LaneCounts {
                    total: uncorrectable,
                    lanes: vec![],
                }),
                corrected_bits: Some(LaneCounts {
                    total: bits,
                    lanes: vec![],
                }),
                histogram: vec![
                    FecBin {
                        low: 0,
                        high: 0,
                        codewords: 1000,
                        lanes: vec![],
                    },
                    FecBin {
                        low: 1,
                        high: 3,
                        codewords: corrected,
                        lanes: vec![],
                    },
                ],
            }),
        }
    }

    fn started(dir: &Path, sysfs: &Path, config: FecConfig) -> Arc<FecCollector> {
        let source = Arc::new(FileFec::new(dir));
        let collector = Arc::new(
            FecCollector::spawn(source, config, sysfs.into(), DeviceFilter::default()).unwrap(),
        );
        collector.assert_first_reading();
        collector
    }

    fn write(dir: &Path, netdev: &str, bytes: &[u8]) {
        std::fs::write(FileFec::path_for(dir, netdev), bytes).unwrap();
    }

    #[test]
    fn ports_are_the_roce_ones_with_their_netdevs() {
        let sys = tree(
            &[
                ("mlx5_1", "Ethernet", "ens2np0"),
                ("mlx5_0", "Ethernet", "ens1np0"),
                ("mlx5_ib", "InfiniBand", "ib0"),
            ],
            &[],
        );
        let filter = DeviceFilter {
            exclude: Some(regex::Regex::new("mlx5_1").unwrap()),
            ..DeviceFilter::default()
        };
        assert_eq!(
            port_netdevs(sys.path(), &filter, true),
            [PortNetdev {
                device: "mlx5_0".into(),
                port: "1".into(),
                netdev: "ens1np0".into()
            }]
        );
    }

    #[test]
    fn three_series_and_the_mode_per_port_by_default() {
        let sys = tree(
            &[
                ("mlx5_0", "Ethernet", "ens1np0"),
                ("mlx5_1", "Ethernet", "veth7"),
                ("mlx5_2", "Ethernet", "enspod"),
            ],
            &["ens1np0", "veth7"],
        );
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "ens1np0",
            &encode_reply(27, 1, 4, "ens1np0", &rs(1234, 2, 5678), Padding::None),
        );
        // veth: the kernel's EOPNOTSUPP. enspod: no file and not in class/net (a pod's VF).
        write(dir.path(), "veth7", &encode_error(27, 1, libc::EOPNOTSUPP));
        let text = scrape(&started(dir.path(), sys.path(), FecConfig::default()));
        let labels = r#"{device="mlx5_0",port="1",netdev="ens1np0"}"#;
        for line in [
            format!("rdma_fec_corrected_blocks_total{labels} 1234"),
            format!("rdma_fec_uncorrectable_blocks_total{labels} 2"),
            format!("rdma_fec_corrected_bit_errors_total{labels} 5678"),
            r#"rdma_fec_mode_info{device="mlx5_0",port="1",netdev="ens1np0",mode="rs"} 1"#.into(),
            r#"rdma_exporter_collector_success{collector="fec"} 1"#.into(),
        ] {
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
        let fec_series = text.lines().filter(|l| l.starts_with("rdma_fec_")).count();
        assert_eq!(fec_series, 4, "{text}");
        assert!(
            !text.contains("veth7") && !text.contains("rdma_exporter_fec_errors_total"),
            "{text}"
        );
    }

    #[test]
    fn lanes_and_histogram_come_on_request() {
        let sys = tree(&[("mlx5_0", "Ethernet", "ens1np0")], &[]);
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "ens1np0",
            &encode_reply(27, 1, 4, "ens1np0", &rs(10, 0, 12), Padding::Align64),
        );
        let config = FecConfig {
            per_lane: true,
            histogram: true,
            ..FecConfig::default()
        };
        let text = scrape(&started(dir.path(), sys.path(), config));
        for line in [
            r#"rdma_fec_lane_corrected_blocks_total{device="mlx5_0",port="1",netdev="ens1np0",lane="0"} 5"#,
            r#"rdma_fec_lane_corrected_blocks_total{device="mlx5_0",port="1",netdev="ens1np0",lane="1"} 5"#,
            r#"rdma_fec_histogram_codewords_total{device="mlx5_0",port="1",netdev="ens1np0",bit_errors_low="0",bit_errors_high="0"} 1000"#,
            r#"rdma_fec_histogram_codewords_total{device="mlx5_0",port="1",netdev="ens1np0",bit_errors_low="1",bit_errors_high="3"} 10"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // RS totals only: no lane series for the others.
        assert!(!text.contains("rdma_fec_lane_uncorrectable"), "{text}");
    }

    /// The scrapes of one round serve its families as encoded once; the next round's are
    /// encoded anew.
    #[test]
    fn a_round_is_encoded_once_for_all_its_scrapes() {
        let sys = tree(&[("mlx5_0", "Ethernet", "ens1np0")], &[]);
        let dir = tempfile::tempdir().unwrap();
        let reply =
            |corrected| encode_reply(27, 1, 4, "ens1np0", &rs(corrected, 0, 1), Padding::None);
        write(dir.path(), "ens1np0", &reply(11));
        let config = FecConfig {
            interval: Duration::from_millis(200),
            ..FecConfig::default()
        };
        let collector = started(dir.path(), sys.path(), config);
        let encoded = FecCollector::last_encoded;
        // Two scrapes of one round (checked: a round may end between them).
        let (families, again) = loop {
            let round = collector.last(Duration::ZERO);
            let text = scrape(&collector);
            let families = encoded(&collector).unwrap();
            scrape(&collector);
            let again = encoded(&collector).unwrap();
            if Arc::ptr_eq(&round, &collector.last(Duration::ZERO)) {
                assert!(text.contains(r#"netdev="ens1np0"} 11"#), "{text}");
                break (families, again);
            }
        };
        assert!(Arc::ptr_eq(&families, &again), "one encoding for the round");
        write(dir.path(), "ens1np0", &reply(12));
        let next =
            r#"rdma_fec_corrected_blocks_total{device="mlx5_0",port="1",netdev="ens1np0"} 12"#;
        wait_for("the next round served", Duration::from_secs(10), || {
            scrape(&collector).contains(next)
        });
        assert!(!Arc::ptr_eq(&families, &encoded(&collector).unwrap()));
    }

    #[test]
    fn a_garbled_answer_is_an_error_and_the_other_ports_are_served() {
        let sys = tree(
            &[
                ("mlx5_0", "Ethernet", "ens1np0"),
                ("mlx5_1", "Ethernet", "ens2np0"),
            ],
            &[],
        );
        let dir = tempfile::tempdir().unwrap();
        let good = encode_reply(27, 1, 4, "ens1np0", &rs(7, 0, 9), Padding::None);
        write(dir.path(), "ens1np0", &good);
        write(dir.path(), "ens2np0", &good[..good.len() - 5]);
        let text = scrape(&started(dir.path(), sys.path(), FecConfig::default()));
        for line in [
            r#"rdma_fec_corrected_blocks_total{device="mlx5_0",port="1",netdev="ens1np0"} 7"#,
            r#"rdma_exporter_fec_errors_total{reason="malformed"} 1"#,
            r#"rdma_exporter_collector_success{collector="fec"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains(r#"netdev="ens2np0""#), "{text}");
    }
}
