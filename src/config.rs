//! The YAML configuration file: typed, strict (`deny_unknown_fields`), and every error names the
//! file, line and column. Command-line flags override values from the file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::nccl::collector::NcclConfig;
use crate::node::config::NodeConfig;
use crate::yaml::{locate, ConfigError, ConfigErrors, Problem, Step};

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
    pub web: ListenConfig,
    pub node: NodeConfig,
    /// Switch targets polled in the background.
    pub switches: Vec<crate::switch::config::SwitchConfig>,
    /// Extra or replacement vendor profiles (`*.yml`).
    pub switch_profiles_dir: Option<PathBuf>,
    /// Who decides when switches are read.
    pub switch_polling: SwitchPolling,
    /// `INDEX/COUNT`: this replica reads only the switches Prometheus' `hashmod` of their name
    /// puts in bucket INDEX (several replicas share one config).
    pub switch_shard: Option<crate::switch::shard::SwitchShard>,
    /// NCCL debug logs, scanned in the background (off unless `log_dir` is set).
    pub nccl: NcclConfig,
    /// The exporter's own `process_*` figures.
    pub process: ProcessConfig,
    /// Pod attribution (off unless `pods.enabled`).
    pub pods: crate::pods::config::PodsConfig,
    /// The InfiniBand subnet scan (off unless `ib_fabric.enabled`).
    pub ib_fabric: crate::ib::config::IbFabricConfig,
    /// Active probes between RDMA NICs (off unless `probe.enabled`).
    pub probe: crate::probe::config::ProbeConfig,
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
pub struct ListenConfig {
    /// `host:port` or `:port`.
    pub listen_address: Option<String>,
    pub telemetry_path: Option<String>,
}

/// Where a config came from: its file and text, so that problems found after parsing are
/// reported at their line and column. `text` is `None` for a config of flags alone.
#[derive(Debug, Clone)]
pub struct Origin {
    pub path: PathBuf,
    pub text: Option<String>,
}

impl Origin {
    pub fn command_line() -> Origin {
        Origin {
            path: PathBuf::from("<command line>"),
            text: None,
        }
    }

    /// The error for `problem`, placed in the text when the text holds its node.
    pub fn error(&self, problem: Problem) -> ConfigError {
        let located = self
            .text
            .as_deref()
            .and_then(|text| problem.at.iter().find_map(|at| locate(text, at)));
        match located {
            Some((line, column)) => ConfigError::At {
                path: self.path.clone(),
                line,
                column,
                message: problem.message,
            },
            None => ConfigError::Invalid {
                path: self.path.clone(),
                message: problem.message,
            },
        }
    }

    pub fn errors(&self, problems: Vec<Problem>) -> ConfigErrors {
        ConfigErrors(problems.into_iter().map(|p| self.error(p)).collect())
    }
}

/// Reads a config file and parses it (syntax and types); [`problems`] and
/// `app::check` find the rest.
pub fn load(path: &Path) -> Result<(Config, Origin), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let config = parse(path, &text)?;
    Ok((
        config,
        Origin {
            path: path.to_path_buf(),
            text: Some(text),
        },
    ))
}

/// Parses config text (syntax and types); `path` is only used in error messages.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    // An empty file is a valid, all-defaults config.
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    crate::yaml::from_str(path, text)
}

/// Every problem of the config's own sections that parsing alone cannot see (combinations,
/// names used twice, ranges). Switch targets (profiles, secrets) are checked by `app::check`,
/// which builds them.
pub fn problems(config: &Config) -> Vec<Problem> {
    use Step::{Index, Key};
    let mut problems = Vec::new();
    if let Err(e) = config.node.ethtool.check() {
        problems.push(Problem::at(
            vec![Key("node"), Key("ethtool")],
            format!("node.{e}"),
        ));
    }
    if let Err(e) = config.node.transceiver.check() {
        problems.push(Problem::at(
            vec![Key("node"), Key("transceiver")],
            format!("node.{e}"),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for (i, switch) in config.switches.iter().enumerate() {
        if !names.insert(switch.name.as_str()) {
            problems.push(Problem::at(
                vec![Key("switches"), Index(i), Key("name")],
                format!("switches: name {:?} is used twice", switch.name),
            ));
        }
    }
    if let Some(telemetry_path) = &config.web.telemetry_path {
        if let Err(e) = check_telemetry_path(telemetry_path, SERVE_PATHS) {
            problems.push(Problem::at(
                vec![Key("web"), Key("telemetry_path")],
                format!("web.telemetry_path: {e}"),
            ));
        }
    }
    problems.extend(nccl_problems(&config.nccl));
    for (key, message) in config.probe.problems() {
        problems.push(Problem::at(vec![Key("probe"), Key(key)], message));
    }
    problems.extend(background_problems(config));
    problems
}

/// A QP dump bound below one netlink message would truncate every dump, silently. (Zero
/// durations are refused while parsing.)
fn background_problems(config: &Config) -> Vec<Problem> {
    use Step::Key;
    let mut problems = Vec::new();
    if config.node.netlink.max_dump_bytes < 4096 {
        problems.push(Problem::at(
            vec![Key("node"), Key("netlink"), Key("max_dump_bytes")],
            "node.netlink.max_dump_bytes must be at least 4096".to_string(),
        ));
    }
    problems
}

/// Limits of zero would turn the collector off silently.
fn nccl_problems(nccl: &NcclConfig) -> Vec<Problem> {
    use Step::Key;
    let mut problems = Vec::new();
    let at = |key: &'static str, message: String| Problem::at(vec![Key("nccl"), Key(key)], message);
    for (key, value) in [
        ("max_files", nccl.max_files as u64),
        ("max_processes", nccl.max_processes as u64),
        ("max_bytes_per_file", nccl.max_bytes_per_file),
    ] {
        if value == 0 {
            problems.push(at(key, format!("nccl.{key} must be at least 1")));
        }
    }
    problems
}

/// Paths `serve` routes itself (`server::router`; the landing page's JSON and its `/assets`);
/// `demo` adds [`DEMO_PATHS`].
pub const SERVE_PATHS: &[&str] = &[
    "/",
    "/healthz",
    "/probe",
    "/ib/switch",
    "/probe-address",
    "/probe-ping",
    "/api/v1/fabric",
    "/assets",
];
pub const DEMO_PATHS: &[&str] = &[
    "/",
    "/healthz",
    "/probe",
    "/api/v1/fabric",
    "/assets",
    "/sd",
    "/hosts",
    "/ib",
    // Below `/hosts/<host>` beside the telemetry path.
    "/probe-address",
    "/probe-ping",
    // The demo serves its subnet at `/ib<telemetry path>`: `/switch` would be `/ib/switch`.
    "/switch",
];

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
    use std::time::Duration;

    use super::*;
    use crate::node::config::EthtoolSourceKind;

    fn parse_err(text: &str) -> String {
        parse(Path::new("c.yml"), text).unwrap_err().to_string()
    }

    /// The problems of a config that parses, placed in its text.
    fn problems_of(text: &str) -> String {
        let config = parse(Path::new("c.yml"), text).unwrap();
        let origin = Origin {
            path: PathBuf::from("c.yml"),
            text: Some(text.to_string()),
        };
        origin.errors(problems(&config)).to_string()
    }

    #[test]
    fn every_problem_at_once_at_its_line() {
        let text = "web:\n  telemetry_path: /healthz\nnccl:\n  max_files: 0\n  scan_interval: 5s\n  max_processes: 0\n";
        let errors = problems_of(text);
        let lines: Vec<&str> = errors.lines().collect();
        assert_eq!(lines.len(), 3, "{errors}");
        assert!(
            lines[0].starts_with("c.yml:2:19: web.telemetry_path"),
            "{errors}"
        );
        assert!(
            lines[1].starts_with("c.yml:4:14: nccl.max_files must be at least 1"),
            "{errors}"
        );
        assert!(
            lines[2].starts_with("c.yml:6:18: nccl.max_processes must be at least 1"),
            "{errors}"
        );
        assert_eq!(problems_of("nccl:\n  max_files: 2\n"), "");
    }

    #[test]
    fn a_qp_dump_bound_below_one_message_is_refused_at_its_key() {
        let errors = problems_of("node:\n  netlink:\n    max_dump_bytes: 100\n");
        assert!(
            errors.starts_with("c.yml:3:21: node.netlink.max_dump_bytes must be at least 4096"),
            "{errors}"
        );
        assert_eq!(
            problems_of("node:\n  netlink:\n    max_dump_bytes: 4096\n"),
            ""
        );
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
        assert!(config.node.devices.exclude.unwrap().is_match("mlx5_1"));
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
        for bad in [
            "/healthz",
            "/probe",
            "/",
            "/api/v1/fabric",
            "/assets/fabric.js",
            "metrics",
            "/{x}",
            "/a//b",
            "/m*",
        ] {
            let err = problems_of(&format!("web:\n  telemetry_path: '{bad}'\n"));
            assert!(err.contains("web.telemetry_path"), "{bad}: {err}");
        }
        assert!(check_telemetry_path("/hosts/x", DEMO_PATHS).is_err());
        assert!(check_telemetry_path("/sd", SERVE_PATHS).is_ok());
        assert_eq!(problems_of("web:\n  telemetry_path: /rdma/metrics\n"), "");
    }

    #[test]
    fn storm_and_nccl_sections() {
        let defaults = parse(Path::new("c.yml"), "node: {}\n").unwrap();
        let storm = defaults.node.pfc_storm;
        assert!(storm.enabled);
        assert_eq!(
            (storm.period, storm.detection_time, storm.min_paused_ratio),
            (Duration::from_millis(200), Duration::from_millis(400), 0.9)
        );
        assert_eq!(defaults.nccl.log_dir, None);
        assert_eq!(defaults.nccl.max_age, Duration::from_secs(24 * 3600));
        assert_eq!(defaults.nccl.max_files, 256);
        assert_eq!(defaults.nccl.max_bytes_per_file, 4 << 20);
        let text = "node:\n  pfc_storm:\n    enabled: false\n    period: 100ms\n    detection_time: 1s\n    min_paused_ratio: 1\nnccl:\n  log_dir: /var/log/nccl\n  max_age: 2h\n  max_files: 3\n  max_bytes_per_file: 1024\n";
        let config = parse(Path::new("c.yml"), text).unwrap();
        let storm = config.node.pfc_storm;
        assert!(!storm.enabled);
        assert_eq!(
            (storm.period, storm.detection_time, storm.min_paused_ratio),
            (Duration::from_millis(100), Duration::from_secs(1), 1.0)
        );
        assert_eq!(config.nccl.log_dir, Some(PathBuf::from("/var/log/nccl")));
        assert_eq!(config.nccl.max_age, Duration::from_secs(7200));
        assert_eq!(
            (config.nccl.max_files, config.nccl.max_bytes_per_file),
            (3, 1024)
        );
        for (text, expected) in [
            (
                "node:\n  pfc_storm:\n    min_paused_ratio: 1.5\n",
                "c.yml:3:5: node.pfc_storm: min_paused_ratio 1.5 must be in (0, 1]",
            ),
            (
                "node:\n  pfc_storm:\n    period: 0s\n",
                "c.yml:3:13: node.pfc_storm.period: duration \"0s\" must be positive",
            ),
            (
                "node:\n  pfc_storm:\n    detection: 1s\n",
                "c.yml:3:5: node.pfc_storm: unknown field `detection`, expected one of `enabled`, `period`, `detection_time`, `min_paused_ratio`",
            ),
            (
                "nccl:\n  max_age: soon\n",
                "c.yml:2:12: nccl.max_age: invalid duration \"soon\": expected e.g. 500ms, 30s, 2m",
            ),
            (
                "nccl:\n  foo: 1\n",
                "c.yml:2:3: nccl: unknown field `foo`, expected one of `log_dir`, `max_age`, `max_files`, `max_bytes_per_file`",
            ),
            (
                "node:\n  devices:\n    exclude: 'mlx5_('\n",
                "c.yml:3:14: node.devices.exclude: invalid regular expression",
            ),
            (
                "probe:\n  ping_unlisted: maybe\n",
                "c.yml:2:18: probe.ping_unlisted: invalid type",
            ),
            (
                "probe:\n  traffic_class: 300\n",
                "c.yml:2:18: probe.traffic_class: invalid value",
            ),
            (
                "probe:\n  ping_unlisetd: true\n",
                "c.yml:2:3: probe: unknown field `ping_unlisetd`",
            ),
        ] {
            let err = parse_err(text);
            assert!(err.starts_with(expected), "{text}: {err}");
        }
    }

    #[test]
    fn switch_shard_and_hw_counters_are_checked_at_their_key() {
        let config = parse(
            Path::new("c.yml"),
            "switch_shard: 1/3\nnode:\n  hw_counters: {exclude: 'roce_.*'}\n",
        )
        .unwrap();
        assert_eq!(
            config.switch_shard,
            Some(crate::switch::shard::SwitchShard { index: 1, count: 3 })
        );
        assert!(!config.node.hw_counters.allows("roce_adp_retrans"));
        assert!(config.node.hw_counters.allows("np_cnp_sent"));
        let err = parse_err("node: {}\nswitch_shard: 3/3\n");
        assert!(err.starts_with("c.yml:"), "{err}");
        assert!(
            err.contains("switch_shard: \"3/3\" is not a shard"),
            "{err}"
        );
    }

    #[test]
    fn hw_counters_source_is_checked_at_its_key() {
        use crate::node::config::HwCountersSource;
        assert_eq!(
            Config::default().node.hw_counters_source,
            HwCountersSource::Sysfs
        );
        let config = parse(Path::new("c.yml"), "node:\n  hw_counters_source: auto\n").unwrap();
        assert_eq!(config.node.hw_counters_source, HwCountersSource::Auto);
        let err = parse_err("node:\n  hw_counters_source: ioctl\n");
        assert!(
            err.starts_with("c.yml:2:23: node.hw_counters_source: unknown variant `ioctl`"),
            "{err}"
        );
    }

    #[test]
    fn files_source_needs_a_dir() {
        let err = parse_err("node:\n  ethtool:\n    source: files\n");
        assert!(err.contains("stats_dir is required"), "{err}");
        assert!(err.starts_with("c.yml:2:3: "), "{err}");
    }
}
