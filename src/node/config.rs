//! The `node:` section of the config file: what the per-node agent reads. Checked while the
//! file is parsed, so mistakes are reported with their line and column.

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use super::counter_filter::CounterFilter;
pub use super::hw_netlink::HwCountersSource;
use super::netlink_collector::NetlinkConfig;
use super::optics::collector::TransceiverConfig;
use super::storm::StormConfig;
use super::sysfs::DeviceFilter;

/// Healthy devices read in milliseconds; this leaves a scrape with Prometheus' default 10 s
/// timeout time to serve the other devices when one hangs.
pub(crate) const DEFAULT_DEVICE_READ_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    pub enabled: bool,
    /// Root of sysfs; `/sys` unless testing on a fixture tree.
    pub sysfs_path: PathBuf,
    /// Root of procfs, `/proc`: the owners of queue pairs (their command name and cgroup).
    pub proc_path: PathBuf,
    pub devices: DeviceFilter,
    /// `hw_counters` files to read, by name (anchored include/exclude patterns).
    pub hw_counters: CounterFilter,
    /// Where port `hw_counters` are read: one RDMA netlink request a port, or one sysfs file a
    /// counter (`auto`: netlink on the real `/sys` where the kernel has NETLINK_RDMA).
    pub hw_counters_source: HwCountersSource,
    /// How long a scrape waits for one device's read (its sysfs files and its netdevs' driver
    /// statistics) before leaving the device out with `reason="timeout"`.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub device_read_timeout: Duration,
    pub ethtool: EthtoolConfig,
    /// The fast PFC storm sampler.
    pub pfc_storm: StormConfig,
    /// RDMA resources and queue pairs over RDMA netlink (the `netlink` collector).
    pub netlink: NetlinkConfig,
    /// FEC mode and counters over ethtool netlink (the `fec` collector).
    pub fec: super::fec_collector::FecConfig,
    /// Transceiver modules' diagnostics (the opt-in `transceiver` collector).
    pub transceiver: TransceiverConfig,
    /// The NIC's ECN/DCQCN settings (MLNX_OFED's `class/net/<netdev>/ecn/`).
    pub ecn_settings: super::ecn_settings::EcnSettingsConfig,
    /// How much of each RDMA device's PCIe link is exported.
    pub pcie: super::pcie_metrics::PcieConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            enabled: true,
            sysfs_path: PathBuf::from("/sys"),
            proc_path: PathBuf::from("/proc"),
            devices: DeviceFilter::default(),
            hw_counters: CounterFilter::default(),
            hw_counters_source: HwCountersSource::default(),
            device_read_timeout: DEFAULT_DEVICE_READ_TIMEOUT,
            ethtool: EthtoolConfig::default(),
            pfc_storm: StormConfig::default(),
            netlink: NetlinkConfig::default(),
            fec: Default::default(),
            transceiver: TransceiverConfig::default(),
            ecn_settings: Default::default(),
            pcie: Default::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EthtoolSourceKind {
    /// SIOCETHTOOL on the netdev (the real kernel).
    #[default]
    Ioctl,
    /// `<stats_dir>/<netdev>.txt` files in `ethtool -S` format (fixtures, simulation).
    Files,
    /// Do not read driver statistics.
    None,
}

/// `node.ethtool`: where driver statistics come from.
#[derive(Debug, Default, Deserialize)]
#[serde(try_from = "RawEthtoolConfig")]
pub struct EthtoolConfig {
    pub source: EthtoolSourceKind,
    /// Required with `source: files`.
    pub stats_dir: Option<PathBuf>,
    /// Driver statistics without a typed metric to export as `rdma_ethtool_stat{stat=...}`.
    pub include: Option<Regex>,
}

/// `node.ethtool` as written; checked while parsing so errors keep their line and column.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEthtoolConfig {
    source: EthtoolSourceKind,
    stats_dir: Option<PathBuf>,
    #[serde(deserialize_with = "crate::yaml::regex")]
    include: Option<Regex>,
}

impl TryFrom<RawEthtoolConfig> for EthtoolConfig {
    type Error = String;
    fn try_from(raw: RawEthtoolConfig) -> Result<Self, Self::Error> {
        let config = EthtoolConfig {
            source: raw.source,
            stats_dir: raw.stats_dir,
            include: raw.include,
        };
        config.check()?;
        Ok(config)
    }
}

impl EthtoolConfig {
    /// The statistics file directory and the file source go together, never one silently
    /// (checked again after command-line flags are applied).
    pub fn check(&self) -> Result<(), String> {
        match (self.source, &self.stats_dir) {
            (EthtoolSourceKind::Files, None) => {
                Err("ethtool.stats_dir is required when ethtool.source is `files`".into())
            }
            (EthtoolSourceKind::Ioctl | EthtoolSourceKind::None, Some(_)) => Err(
                "ethtool.stats_dir is only used with `ethtool.source: files`; set the source explicitly".into(),
            ),
            _ => Ok(()),
        }
    }
}
