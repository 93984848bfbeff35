//! Command-line interface: Prometheus-style flags, which override the config file.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::config::{self, Config, ConfigError, EthtoolSourceKind, Pattern};
use crate::diag::nccl::collector::{NcclCollector, NcclLogLimits};
use crate::node::ethtool::{EthtoolSource, FileSource, IoctlSource};
use crate::node::sysfs::DeviceFilter;
use crate::node::{NodeCollector, NodeCollectorConfig};
use crate::server::AppState;
use crate::switch::config::{Access, SecretSource, SnmpConfig, SwitchConfig};
use crate::switch::gnmi::{GnmiTarget, GnmiTls};
use crate::switch::metrics::SwitchCollector;
use crate::switch::poller::{Poller, Source, Target, DEFAULT_CONCURRENCY};
use crate::switch::profile::Profiles;
use crate::switch::snmp::{Credentials, Secret, SnmpTarget, SnmpVersion, Usm};

#[derive(Debug, Parser)]
#[command(
    name = "rdma-fabric-exporter",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `serve`, the default subcommand.
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the per-node agent and serve /metrics (the default).
    Serve(ServeArgs),
    /// Serve a simulated fabric (hosts, RoCE NICs, leaf switches) in a chosen scenario: no
    /// hardware needed.
    Demo(DemoArgs),
    /// Check whether this host or container can use its RDMA devices (exit 0 healthy,
    /// 1 problems found, 2 could not run).
    Doctor(crate::diag::doctor::DoctorArgs),
    /// Read NCCL_DEBUG=INFO logs: which network NCCL chose, GPUDirect RDMA, socket fallbacks.
    Nccl(crate::diag::nccl::NcclArgs),
    /// Validate a config file; errors name the key, line and column.
    CheckConfig {
        /// Config file to check (`-` for standard input).
        #[arg(long = "config.file", value_name = "FILE")]
        config_file: PathBuf,
    },
}

#[derive(Debug, Args, Clone)]
pub struct DemoArgs {
    /// What the fabric goes through (a 300 s cycle: 60 s healthy, 180 s of the fault, 60 s of
    /// recovery, in simulated time).
    #[arg(long, value_enum, default_value = "pfc-storm")]
    pub scenario: crate::sim::scenario::ScenarioName,
    /// Simulated seconds per second (60 runs a cycle in 5 minutes).
    #[arg(long, default_value_t = 1.0, value_parser = positive_speed)]
    pub speed: f64,
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(2..=64))]
    pub hosts: u16,
    /// RoCE GPU NICs per host.
    #[arg(long = "nics-per-host", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=8))]
    pub nics_per_host: u16,
    /// Leaf switches; NIC n of every host is cabled to leaf n mod leaves (rail-optimized).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=8))]
    pub leaves: u16,
    /// Simulated seconds into the scenario's cycle to start at (60: straight into the fault).
    #[arg(long = "start-at", default_value_t = 0.0, value_parser = start_offset)]
    pub start_at: f64,
    /// How often the switch poller walks the simulated leaves (as in a config: 5s, 500ms).
    #[arg(long = "switch-interval", default_value = "5s", value_parser = crate::switch::config::parse_duration)]
    pub switch_interval: std::time::Duration,
    /// Seed of the fabric's counters (same seed, same fabric).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Address to listen on: `host:port` or `:port`.
    #[arg(long = "web.listen-address", value_name = "ADDRESS")]
    pub listen_address: Option<String>,
    /// Path of the metrics endpoints (the switches' and each host's).
    #[arg(long = "web.telemetry-path", value_name = "PATH", default_value = config::DEFAULT_TELEMETRY_PATH)]
    pub telemetry_path: String,
    /// Exporter-toolkit web config (TLS, basic auth, headers); re-read on change and SIGHUP.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
}

fn start_offset(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a number of seconds")),
    }
}

fn positive_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 10_000.0 => Ok(v),
        _ => Err(format!("{text:?} is not a speed between 0 and 10000")),
    }
}

impl DemoArgs {
    pub fn options(&self) -> crate::sim::demo::DemoOptions {
        crate::sim::demo::DemoOptions {
            scenario: self.scenario,
            speed: self.speed,
            shape: crate::sim::fabric::Shape {
                hosts: usize::from(self.hosts),
                nics_per_host: usize::from(self.nics_per_host),
                leaves: usize::from(self.leaves),
                seed: self.seed,
            },
            start_at_s: self.start_at,
            switch_interval: self.switch_interval,
            ..Default::default()
        }
    }
}

#[derive(Debug, Args, Default, Clone)]
pub struct LogArgs {
    /// Log level: error, warn, info, debug, trace.
    #[arg(long = "log.level", global = true, default_value = "info")]
    pub level: String,
    /// Log format: logfmt-like text or json.
    #[arg(long = "log.format", global = true, default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
}

#[derive(Debug, Args, Default, Clone)]
pub struct ServeArgs {
    /// YAML config file; flags given here override its values.
    #[arg(long = "config.file", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    #[arg(
        long = "web.listen-address",
        value_name = "ADDR",
        help = concat!("Address to listen on, `host:port` or `:port` [default: :", crate::default_port!(), "]")
    )]
    pub listen_address: Option<String>,
    /// Path under which metrics are exposed [default: /metrics].
    #[arg(long = "web.telemetry-path", value_name = "PATH")]
    pub telemetry_path: Option<String>,
    /// Exporter-toolkit web config (TLS, basic auth, headers); re-read on change and SIGHUP.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// sysfs mount point [default: /sys].
    #[arg(long = "path.sysfs", value_name = "DIR")]
    pub sysfs_path: Option<PathBuf>,
    /// Only RDMA devices whose name matches this regex.
    #[arg(long = "collector.infiniband.device-include", value_name = "REGEX")]
    pub device_include: Option<Pattern>,
    /// Never read RDMA devices whose name matches this regex.
    #[arg(long = "collector.infiniband.device-exclude", value_name = "REGEX")]
    pub device_exclude: Option<Pattern>,
    /// Where driver statistics come from [default: ioctl].
    #[arg(long = "collector.ethtool.source", value_enum, value_name = "SOURCE")]
    pub ethtool_source: Option<EthtoolSourceKind>,
    /// Directory of `<netdev>.txt` files in `ethtool -S` format (with --collector.ethtool.source=files).
    #[arg(long = "collector.ethtool.stats-dir", value_name = "DIR")]
    pub ethtool_stats_dir: Option<PathBuf>,
    /// Also export untyped driver statistics whose name matches this regex.
    #[arg(long = "collector.ethtool.metrics-include", value_name = "REGEX")]
    pub ethtool_include: Option<Pattern>,
    /// How often the fast PFC storm sampler reads the pause counters (e.g. 200ms).
    #[arg(long = "collector.pfc-storm.period", value_name = "DURATION", value_parser = crate::switch::config::parse_duration)]
    pub pfc_storm_period: Option<std::time::Duration>,
    /// Turn the fast PFC storm sampler off.
    #[arg(long = "no-collector.pfc-storm")]
    pub no_pfc_storm: bool,
    /// Directory of NCCL_DEBUG=INFO log files to report on at each scrape (off by default).
    #[arg(long = "collector.nccl.log-dir", value_name = "DIR")]
    pub nccl_log_dir: Option<PathBuf>,
    /// For benchmarks only: every scrape walks sysfs itself, however many run at once.
    #[arg(long = "debug.no-scrape-coalescing", hide = true)]
    pub no_scrape_coalescing: bool,
}

impl ServeArgs {
    /// Loads the config file (if any) and applies flag overrides.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config_file {
            Some(path) => config::load(path)?,
            None => Config::default(),
        };
        if let Some(v) = &self.listen_address {
            config.web.listen_address = Some(v.clone());
        }
        if let Some(v) = &self.telemetry_path {
            config.web.telemetry_path = Some(v.clone());
        }
        let node = &mut config.node;
        if let Some(v) = &self.sysfs_path {
            node.sysfs_path = v.clone();
        }
        if let Some(v) = &self.device_include {
            node.devices.include = Some(v.clone());
        }
        if let Some(v) = &self.device_exclude {
            node.devices.exclude = Some(v.clone());
        }
        if let Some(v) = self.ethtool_source {
            node.ethtool.source = v;
        }
        if let Some(v) = &self.ethtool_stats_dir {
            node.ethtool.stats_dir = Some(v.clone());
            // A stats dir on the command line selects the file source explicitly.
            if self.ethtool_source.is_none() {
                node.ethtool.source = EthtoolSourceKind::Files;
            }
        }
        if let Some(v) = &self.ethtool_include {
            node.ethtool.include = Some(v.clone());
        }
        if let Some(period) = self.pfc_storm_period {
            node.pfc_storm.period = period;
        }
        if self.no_pfc_storm {
            node.pfc_storm.enabled = false;
        }
        if let Some(dir) = &self.nccl_log_dir {
            config.nccl.log_dir = Some(dir.clone());
        }
        let origin = self
            .config_file
            .clone()
            .unwrap_or_else(|| PathBuf::from("<command line>"));
        config::validate(&origin, &config)?;
        Ok(config)
    }
}

/// Builds the node collector a config asks for.
pub fn node_collector(config: &Config) -> Option<NodeCollector> {
    let node = &config.node;
    if !node.enabled {
        return None;
    }
    let ethtool: Option<Arc<dyn EthtoolSource>> = match node.ethtool.source {
        EthtoolSourceKind::Ioctl => Some(Arc::new(IoctlSource)),
        EthtoolSourceKind::Files => node
            .ethtool
            .stats_dir
            .as_ref()
            .map(|dir| Arc::new(FileSource::new(dir)) as Arc<dyn EthtoolSource>),
        EthtoolSourceKind::None => None,
    };
    let mut collector = NodeCollector::new(NodeCollectorConfig {
        sysfs_root: node.sysfs_path.clone(),
        devices: DeviceFilter {
            include: node.devices.include.as_ref().map(|p| p.0.clone()),
            exclude: node.devices.exclude.as_ref().map(|p| p.0.clone()),
        },
        ethtool,
        ethtool_include: node.ethtool.include.as_ref().map(|p| p.0.clone()),
    });
    if node.pfc_storm.enabled {
        if let Err(e) = collector.start_storm_detector(node.pfc_storm.storm_config()) {
            // Scrapes still carry the cumulative pause counters.
            tracing::error!("the PFC storm sampler did not start: {e}");
        }
    }
    Some(collector)
}

/// Builds the switch poller: profiles resolved, communities read. Errors name the switch, never
/// the secret.
pub fn switch_poller(config: &Config) -> Result<Option<Arc<Poller>>, ConfigError> {
    if config.switches.is_empty() {
        return Ok(None);
    }
    let invalid = |message: String| ConfigError::Invalid {
        path: PathBuf::from("switches"),
        message,
    };
    let profiles = match &config.switch_profiles_dir {
        Some(dir) => Profiles::with_dir(dir),
        None => Profiles::builtin(),
    }
    .map_err(|e| invalid(e.to_string()))?;
    let mut targets = Vec::new();
    for switch in &config.switches {
        let profile = profiles.get(&switch.profile).ok_or_else(|| {
            invalid(format!(
                "switch {:?}: unknown profile {:?}; known: {}",
                switch.name,
                switch.profile,
                profiles.names().collect::<Vec<_>>().join(", ")
            ))
        })?;
        let secret = |source: &SecretSource, what: &str| {
            source
                .read()
                .map(Secret::new)
                .map_err(|e| invalid(format!("switch {:?}: {what}: {e}", switch.name)))
        };
        let source = match &switch.access {
            Access::Snmp(snmp) => {
                if profile.columns.is_empty() {
                    return Err(invalid(format!(
                        "switch {:?}: profile {:?} has no SNMP columns; use protocol: gnmi",
                        switch.name, profile.name
                    )));
                }
                Source::Snmp(snmp_target(switch, snmp, &secret)?)
            }
            Access::Gnmi(gnmi) => {
                if profile.gnmi.is_empty() {
                    return Err(invalid(format!(
                        "switch {:?}: profile {:?} has no gNMI paths; use protocol: snmp, or a profile with a `gnmi:` section (sonic, openconfig)",
                        switch.name, profile.name
                    )));
                }
                let credentials = match (&gnmi.username, &gnmi.password) {
                    (Some(user), Some(password)) => {
                        Some((user.clone(), secret(password, "password")?))
                    }
                    _ => None,
                };
                Source::Gnmi {
                    target: GnmiTarget {
                        address: with_default_port(&switch.address, 9339),
                        timeout: switch.timeout,
                        credentials,
                        tls: gnmi.tls.as_ref().map(|tls| GnmiTls {
                            ca_file: tls.ca_file.clone(),
                            client_cert: tls.cert_file.clone().zip(tls.key_file.clone()),
                            server_name: tls.server_name.clone(),
                        }),
                    },
                    mode: gnmi.mode,
                }
            }
        };
        targets.push(Target {
            name: switch.name.clone(),
            profile: profile.clone(),
            source,
            interval: switch.interval,
        });
    }
    Ok(Some(Arc::new(Poller::new(targets, DEFAULT_CONCURRENCY))))
}

fn snmp_target(
    switch: &SwitchConfig,
    snmp: &SnmpConfig,
    secret: &dyn Fn(&SecretSource, &str) -> Result<Secret, ConfigError>,
) -> Result<SnmpTarget, ConfigError> {
    let credentials = match (&snmp.community, &snmp.user) {
        (Some(community), _) if snmp.version == SnmpVersion::V1 => {
            Credentials::V1(secret(community, "community")?)
        }
        (Some(community), _) => Credentials::V2c(secret(community, "community")?),
        (None, Some(user)) => Credentials::V3(Usm {
            username: user.username.clone(),
            auth: (
                user.auth_protocol,
                secret(&user.auth_password, "auth password")?,
            ),
            privacy: match &user.privacy {
                Some((protocol, password)) => Some((*protocol, secret(password, "priv password")?)),
                None => None,
            },
        }),
        (None, None) => unreachable!("SnmpConfig always has a community or a user"),
    };
    Ok(SnmpTarget {
        address: switch.address.clone(),
        credentials,
        timeout: switch.timeout,
        retries: switch.retries,
        max_repetitions: switch.max_repetitions,
    })
}

/// `host` becomes `host:port`; `host:port` and `[v6]:port` stay as they are.
fn with_default_port(address: &str, port: u16) -> String {
    let has_port = match address.rsplit_once(':') {
        Some((host, p)) => p.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']')),
        None => false,
    };
    if has_port {
        address.to_string()
    } else if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// The NCCL log collector, when `nccl.log_dir` is set.
fn nccl_collector(config: &Config, node: Option<Arc<NodeCollector>>) -> Option<NcclCollector> {
    let nccl = &config.nccl;
    Some(NcclCollector {
        log_dir: nccl.log_dir.clone()?,
        limits: NcclLogLimits {
            max_files: nccl.max_files,
            max_bytes_per_file: nccl.max_bytes_per_file,
            max_age: nccl.max_age,
        },
        node,
    })
}

/// Registry and HTTP state for a resolved config.
pub fn app_state(config: &Config, switches: Option<Arc<Poller>>) -> AppState {
    let mut registry = Registry::default();
    let coalesced_scrapes = prometheus_client::metrics::counter::Counter::default();
    // prometheus-client appends `_total` and `_info`: it is given the names without them.
    use crate::exposition::{base_name, Kind};
    registry.register(
        base_name("rdma_exporter_coalesced_scrapes_total", Kind::Counter).expect("suffixed"),
        "Scrapes of /metrics answered with the result of a scrape that was running when they arrived, instead of a read of their own",
        coalesced_scrapes.clone(),
    );
    registry.register(
        base_name("rdma_exporter_build_info", Kind::Info).expect("suffixed"),
        "Build facts of the running rdma-fabric-exporter; value is always 1",
        Info::new(vec![
            ("version", crate::build::VERSION),
            ("revision", crate::build::REVISION),
            ("rustc_version", crate::build::RUSTC),
        ]),
    );
    let node = node_collector(config).map(Arc::new);
    match nccl_collector(config, node.clone()) {
        // It encodes the node's families with its own (they share self-metric families).
        Some(nccl) => registry.register_collector(Box::new(nccl)),
        None => {
            if let Some(node) = &node {
                registry.register_collector(Box::new(node.clone()));
            }
        }
    }
    if let Some(poller) = &switches {
        registry.register_collector(Box::new(SwitchCollector {
            poller: poller.clone(),
            only: None,
        }));
    }
    AppState {
        registry,
        node,
        telemetry_path: config
            .web
            .telemetry_path
            .clone()
            .unwrap_or_else(|| config::DEFAULT_TELEMETRY_PATH.to_string()),
        scrape_lock: Arc::new(tokio::sync::Mutex::new(())),
        coalesce_scrapes: true,
        last_scrape: Arc::default(),
        coalesced_scrapes,
        switches,
        hosts: Default::default(),
    }
}
