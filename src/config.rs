//! The YAML configuration file: typed, strict (`deny_unknown_fields`), and every error names the
//! file, line and column. Command-line flags override values from the file.

use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Deserializer};

/// The default port as a literal, so that help texts can `concat!` it: the single source of the
/// number. It avoids node_exporter 9100, snmp_exporter 9116, DOCA telemetry 9189,
/// infiniband_exporter 9315, dcgm-exporter 9400 and rdma_exporter 9879.
#[macro_export]
macro_rules! default_port {
    () => {
        9866
    };
}

/// The default port; every default address derives from it.
pub const DEFAULT_PORT: u16 = default_port!();

pub fn default_listen_address() -> String {
    format!(":{DEFAULT_PORT}")
}

pub const DEFAULT_TELEMETRY_PATH: &str = "/metrics";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub web: WebConfig,
    pub node: NodeConfig,
    /// Switch targets polled in the background.
    pub switches: Vec<crate::switch::config::SwitchConfig>,
    /// Extra or replacement vendor profiles (`*.yml`).
    pub switch_profiles_dir: Option<PathBuf>,
    /// Who decides when switches are read.
    pub switch_polling: SwitchPolling,
    /// NCCL debug logs, scanned in the background (off unless `log_dir` is set).
    pub nccl: NcclConfig,
    /// The exporter's own `process_*` figures.
    pub process: ProcessConfig,
}

/// `process:`: the `process` collector.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessConfig {
    pub enabled: bool,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig { enabled: true }
    }
}

/// `nccl:`: the collector of NCCL_DEBUG=INFO log files (`diag::nccl::collector`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NcclConfig {
    /// Directory of NCCL_DEBUG_FILE outputs; the collector is off without it.
    pub log_dir: Option<PathBuf>,
    /// Files changed longer ago than this are skipped (finished jobs).
    #[serde(deserialize_with = "duration")]
    pub max_age: std::time::Duration,
    /// Files read per scan, newest first.
    pub max_files: usize,
    /// Bytes read from the end of each file.
    pub max_bytes_per_file: u64,
    /// Processes (host, pid) exported; later ones are counted in `rdma_nccl_processes_dropped`.
    pub max_processes: usize,
    /// Time between two background scans of `log_dir`; scrapes serve the last one.
    #[serde(deserialize_with = "duration")]
    pub scan_interval: std::time::Duration,
    /// A scan reads no further file after this long (`rdma_nccl_scan_partial`).
    #[serde(deserialize_with = "duration")]
    pub scan_timeout: std::time::Duration,
}

impl Default for NcclConfig {
    fn default() -> Self {
        let limits = crate::diag::nccl::collector::NcclLogLimits::default();
        NcclConfig {
            log_dir: None,
            max_age: limits.max_age,
            max_files: limits.max_files,
            max_bytes_per_file: limits.max_bytes_per_file,
            max_processes: limits.max_processes,
            scan_interval: limits.scan_interval,
            scan_timeout: limits.scan_timeout,
        }
    }
}

/// `background`: every switch is read on its interval and `/metrics` serves them all.
/// `on_demand`: switches are read only when `/probe` asks, so that Prometheus (and its
/// sharding of targets across exporters) alone decides the load on the switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchPolling {
    #[default]
    Background,
    OnDemand,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// `host:port` or `:port`.
    pub listen_address: Option<String>,
    pub telemetry_path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    pub enabled: bool,
    /// Root of sysfs; `/sys` unless testing on a fixture tree.
    pub sysfs_path: PathBuf,
    pub devices: DeviceSelection,
    pub ethtool: EthtoolConfig,
    pub pfc_storm: PfcStormConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            enabled: true,
            sysfs_path: PathBuf::from("/sys"),
            devices: DeviceSelection::default(),
            ethtool: EthtoolConfig::default(),
            pfc_storm: PfcStormConfig::default(),
        }
    }
}

/// `node.pfc_storm`: the fast PFC storm sampler (`node::storm`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PfcStormConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "duration")]
    pub period: std::time::Duration,
    #[serde(deserialize_with = "duration")]
    pub detection_time: std::time::Duration,
    #[serde(deserialize_with = "ratio")]
    pub min_paused_ratio: f64,
}

impl Default for PfcStormConfig {
    fn default() -> Self {
        let defaults = crate::node::storm::StormConfig::default();
        PfcStormConfig {
            enabled: true,
            period: defaults.period,
            detection_time: defaults.detection,
            min_paused_ratio: defaults.min_paused_ratio,
        }
    }
}

impl PfcStormConfig {
    pub fn storm_config(&self) -> crate::node::storm::StormConfig {
        crate::node::storm::StormConfig {
            period: self.period,
            detection: self.detection_time,
            min_paused_ratio: self.min_paused_ratio,
        }
    }
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    let text = String::deserialize(d)?;
    crate::switch::config::parse_duration(&text).map_err(serde::de::Error::custom)
}

fn ratio<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(serde::de::Error::custom(format!(
            "min_paused_ratio {value} must be in (0, 1]"
        )))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceSelection {
    /// Only devices whose name matches (unanchored, as node_exporter's device-include).
    pub include: Option<Pattern>,
    /// Devices whose name matches are never read, not even listed below their directory.
    pub exclude: Option<Pattern>,
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

#[derive(Debug, Default, Deserialize)]
#[serde(try_from = "RawEthtoolConfig")]
pub struct EthtoolConfig {
    pub source: EthtoolSourceKind,
    /// Required with `source: files`.
    pub stats_dir: Option<PathBuf>,
    /// Driver statistics without a typed metric to export as `rdma_ethtool_stat{stat=...}`.
    pub include: Option<Pattern>,
}

/// `node.ethtool` as written; checked while parsing so errors keep their line and column.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawEthtoolConfig {
    source: EthtoolSourceKind,
    stats_dir: Option<PathBuf>,
    include: Option<Pattern>,
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
    /// The statistics file directory and the file source go together, never one silently.
    fn check(&self) -> Result<(), String> {
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

/// A regular expression, compiled while the file is parsed so that a bad pattern is reported
/// at its line and column.
#[derive(Clone)]
pub struct Pattern(pub Regex);

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0.as_str())
    }
}

impl std::str::FromStr for Pattern {
    type Err = regex::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Regex::new(s).map(Pattern)
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Regex::new(&text)
            .map(Pattern)
            .map_err(|e| serde::de::Error::custom(format!("invalid regular expression: {e}")))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Line, column and message of a YAML error. yaml_serde appends " at line L column C" to its
/// message; callers print the location first, so it is cut from the message.
pub fn yaml_error_parts(e: &serde_yaml::Error) -> (usize, usize, String) {
    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
    let message = e.to_string();
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    (line, column, message)
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Parses config text; `path` is only used in error messages.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    // An empty file is a valid, all-defaults config.
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    let config: Config = serde_yaml::from_str(text).map_err(|e| {
        let (line, column, message) = yaml_error_parts(&e);
        ConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    })?;
    validate(path, &config)?;
    Ok(config)
}

pub fn validate(path: &Path, config: &Config) -> Result<(), ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    config
        .node
        .ethtool
        .check()
        .map_err(|e| invalid(format!("node.{e}")))?;
    let mut names = std::collections::HashSet::new();
    for switch in &config.switches {
        if !names.insert(switch.name.as_str()) {
            return Err(invalid(format!(
                "switches: name {:?} is used twice",
                switch.name
            )));
        }
    }
    if let Some(telemetry_path) = &config.web.telemetry_path {
        check_telemetry_path(telemetry_path, SERVE_PATHS)
            .map_err(|e| invalid(format!("web.telemetry_path: {e}")))?;
    }
    Ok(())
}

/// Paths `serve` routes itself (`server::router`); `demo` adds [`DEMO_PATHS`].
pub const SERVE_PATHS: &[&str] = &["/", "/healthz", "/probe"];
pub const DEMO_PATHS: &[&str] = &["/", "/healthz", "/probe", "/sd", "/hosts"];

/// A telemetry path must be a plain absolute path that no other route uses: the router would
/// refuse it at startup, and `{` or `*` would make it a pattern.
pub fn check_telemetry_path(path: &str, taken: &[&str]) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("must start with `/`, got {path:?}"));
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "/-_.~".contains(c);
    if !path.chars().all(plain) || path.contains("//") {
        return Err(format!(
            "{path:?} may hold only letters, digits, `-`, `_`, `.`, `~` and single `/`"
        ));
    }
    let is_taken = |t: &&&str| path == **t || (**t != "/" && path.starts_with(&format!("{t}/")));
    if let Some(taken) = taken.iter().find(is_taken) {
        return Err(format!(
            "{path:?} is taken by the exporter's own {taken} route"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        parse(Path::new("c.yml"), text).unwrap_err().to_string()
    }

    #[test]
    fn empty_is_defaults() {
        let config = parse(Path::new("c.yml"), "").unwrap();
        assert!(config.node.enabled);
        assert_eq!(config.node.sysfs_path, PathBuf::from("/sys"));
        assert_eq!(config.node.ethtool.source, EthtoolSourceKind::Ioctl);
    }

    #[test]
    fn full_config() {
        let text = "web:\n  listen_address: 127.0.0.1:9999\nnode:\n  sysfs_path: /tmp/sys\n  devices:\n    exclude: '^mlx5_[01]$'\n  ethtool:\n    source: files\n    stats_dir: /tmp/stats\n    include: '^rx_vport'\n";
        let config = parse(Path::new("c.yml"), text).unwrap();
        assert_eq!(config.web.listen_address.as_deref(), Some("127.0.0.1:9999"));
        assert!(config.node.devices.exclude.unwrap().0.is_match("mlx5_1"));
        assert_eq!(config.node.ethtool.source, EthtoolSourceKind::Files);
    }

    #[test]
    fn unknown_key_names_key_line_and_column() {
        let err = parse_err("node:\n  sysfs_path: /sys\n  devcies: {}\n");
        assert!(err.starts_with("c.yml:3:3: "), "{err}");
        assert!(err.contains("unknown field `devcies`"), "{err}");
    }

    #[test]
    fn bad_regex_has_location() {
        let err = parse_err("node:\n  devices:\n    include: 'mlx5_('\n");
        assert!(err.starts_with("c.yml:3:"), "{err}");
        assert!(err.contains("invalid regular expression"), "{err}");
    }

    #[test]
    fn wrong_type_has_location() {
        let err = parse_err("node:\n  enabled: maybe\n");
        assert!(err.starts_with("c.yml:2:"), "{err}");
    }

    #[test]
    fn telemetry_path_cannot_take_another_route() {
        for bad in ["/healthz", "/probe", "/", "metrics", "/{x}", "/a//b", "/m*"] {
            let err = parse_err(&format!("web:\n  telemetry_path: '{bad}'\n"));
            assert!(err.contains("web.telemetry_path"), "{bad}: {err}");
        }
        assert!(check_telemetry_path("/hosts/x", DEMO_PATHS).is_err());
        assert!(check_telemetry_path("/sd", SERVE_PATHS).is_ok());
        parse(
            Path::new("c.yml"),
            "web:\n  telemetry_path: /rdma/metrics\n",
        )
        .unwrap();
    }

    #[test]
    fn files_source_needs_a_dir() {
        let err = parse_err("node:\n  ethtool:\n    source: files\n");
        assert!(err.contains("stats_dir is required"), "{err}");
        assert!(err.starts_with("c.yml:2:3: "), "{err}");
    }
}
