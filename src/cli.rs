//! Command-line interface: Prometheus-style flags, which override the config file. Only
//! `main.rs` uses this module; the wiring from a `Config` is `app.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use regex::Regex;

use crate::config::{self, Config, Origin};
use crate::node::config::EthtoolSourceKind;
use crate::yaml::ConfigError;

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
    // Boxed: the serve flags outweigh every other subcommand's.
    Serve(Box<ServeArgs>),
    /// Serve a simulated fabric (hosts, RoCE NICs, leaf switches) in a chosen scenario: no
    /// hardware needed.
    Demo(DemoArgs),
    /// Check whether this host or container can use its RDMA devices (exit 0 healthy,
    /// 1 problems found, 2 could not run).
    Doctor(crate::diag::doctor::DoctorArgs),
    /// Read NCCL_DEBUG=INFO logs: which network NCCL chose, GPUDirect RDMA, socket fallbacks.
    Nccl(crate::nccl::NcclArgs),
    /// The ECN tuning loop's reading half: from Prometheus over an nccl-tests run, whether each
    /// NIC's and switch port's ECN threshold is too high, too low or healthy (exit 0 none
    /// misconfigured, 1 misconfigured, 2 could not query).
    EcnTune(crate::diag::ecn_tune::EcnTuneArgs),
    /// The cluster's probe localization, run once per cluster: reads the agents' probe counts
    /// and the LLDP wiring from Prometheus every round, votes, and serves the verdicts on
    /// /metrics for the alerts and boards.
    Localize(crate::localizer::LocalizeArgs),
    /// Judge one nccl-tests run (all_reduce_perf, ...): data errors, and busbw against the NIC
    /// line rate (exit 0 healthy, 1 below or errors, 2 unreadable, 3 not nccl-tests output).
    NcclTests(crate::diag::nccl_tests::NcclTestsArgs),
    /// Read saved ibnetdiscover, iblinkinfo, perfquery and ibqueryerrors outputs: degraded
    /// links, ports with errors, congested ports (exit 0 none, 1 found, 2 unreadable, 3 not
    /// infiniband-diags output).
    IbReport(crate::diag::ib_report::IbReportArgs),
    /// Probe one path now through the running agent: N probes from one of its ports to a peer's
    /// port, loss and RTT percentiles (network and responder delay apart) (exit 0 loss within
    /// --max-loss, 1 above, 2 could not ping).
    Ping(crate::diag::ping::PingArgs),
    /// Every RDMA port's hardware counters over RDMA netlink or from sysfs, or both readers
    /// timed (`--bench ROUNDS`): for the real-kernel suite and BENCHMARKS.md.
    #[command(hide = true)]
    HwCounters(crate::diag::hw_counters::HwCountersArgs),
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
    #[arg(long = "switch-interval", default_value = "5s", value_parser = crate::yaml::parse_duration)]
    pub switch_interval: std::time::Duration,
    /// How often the simulated counters move and the trees are rewritten (100ms to 5s). Each
    /// tick rewrites every counter file; a longer tick is lighter for many demos on one
    /// machine, and rates over a scrape interval stay the same.
    #[arg(long, default_value = "100ms", value_parser = tick)]
    pub tick: std::time::Duration,
    /// Seed of the fabric's counters (same seed, same fabric).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Start with HOST's probe agent stopped (repeatable): its ports stay in the other hosts'
    /// peer sets and answer nothing, as a stopped agent's do until the next peer refresh.
    #[arg(long = "stop-agent", value_name = "HOST")]
    pub stop_agent: Vec<String>,
    /// The chance (0 to under 1) that any probe or answer is lost on any path of the simulated
    /// fabric, in every scenario, besides the scenario's own faults: a real fleet's background
    /// loss (1e-4: one packet in 10 000). Draws are seeded with --seed.
    #[arg(
        long = "probe-background-loss",
        value_name = "P",
        default_value_t = 0.0,
        value_parser = background_loss
    )]
    pub probe_background_loss: f64,
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

/// A counter-name pattern, anchored as `node.hw_counters` patterns are.
fn anchored_regex(text: &str) -> Result<Regex, String> {
    crate::node::counter_filter::anchored(text)
        .map_err(|e| format!("invalid regular expression: {e}"))
}

fn start_offset(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a number of seconds")),
    }
}

fn tick(text: &str) -> Result<std::time::Duration, String> {
    let tick = crate::yaml::parse_duration(text)?;
    let range = std::time::Duration::from_millis(100)..=std::time::Duration::from_secs(5);
    if range.contains(&tick) {
        Ok(tick)
    } else {
        Err(format!("{text:?} is not between 100ms and 5s"))
    }
}

fn background_loss(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a chance from 0 to under 1 (1e-4: one packet in 10 000)"
        )),
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
            stopped_agents: self.stop_agent.clone(),
            tick: self.tick,
            probe_background_loss: self.probe_background_loss,
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
    /// procfs mount point [default: /proc]: the owners of queue pairs.
    #[arg(long = "path.procfs", value_name = "DIR")]
    pub proc_path: Option<PathBuf>,
    /// Only RDMA devices whose name matches this regex.
    #[arg(long = "collector.infiniband.device-include", value_name = "REGEX")]
    pub device_include: Option<Regex>,
    /// Never read RDMA devices whose name matches this regex.
    #[arg(long = "collector.infiniband.device-exclude", value_name = "REGEX")]
    pub device_exclude: Option<Regex>,
    /// Where driver statistics come from [default: ioctl].
    /// Only the port and device hw_counters whose whole name matches (anchored regex); the
    /// others are never read.
    #[arg(long = "collector.sysfs.hw-counters-include", value_name = "REGEX", value_parser = anchored_regex)]
    pub hw_counters_include: Option<Regex>,
    /// Never read the port and device hw_counters whose whole name matches (anchored regex).
    #[arg(long = "collector.sysfs.hw-counters-exclude", value_name = "REGEX", value_parser = anchored_regex)]
    pub hw_counters_exclude: Option<Regex>,
    /// Where port hw_counters are read: `netlink` (one RDMA netlink request a port), `sysfs`
    /// (one file a counter), `auto` (netlink on the real /sys when the kernel answers) [default: auto].
    #[arg(
        long = "collector.sysfs.hw-counters-source",
        value_enum,
        value_name = "SOURCE"
    )]
    pub hw_counters_source: Option<crate::node::config::HwCountersSource>,
    /// Also export the DCQCN parameters of MLNX_OFED's `class/net/<netdev>/ecn/` (19 gauges a
    /// RoCE port).
    #[arg(long = "collector.sysfs.ecn-parameters")]
    pub ecn_parameters: bool,
    #[arg(long = "collector.ethtool.source", value_enum, value_name = "SOURCE")]
    pub ethtool_source: Option<EthtoolSourceKind>,
    /// Directory of `<netdev>.txt` files in `ethtool -S` format (with --collector.ethtool.source=files).
    #[arg(long = "collector.ethtool.stats-dir", value_name = "DIR")]
    pub ethtool_stats_dir: Option<PathBuf>,
    /// Also export untyped driver statistics whose name matches this regex.
    #[arg(long = "collector.ethtool.metrics-include", value_name = "REGEX")]
    pub ethtool_include: Option<Regex>,
    /// Directory of `<netdev>/` module page files instead of the kernel (fixtures, tests).
    #[arg(long = "collector.transceiver.modules-dir", value_name = "DIR")]
    pub transceiver_modules_dir: Option<PathBuf>,
    /// How often the transceiver modules are read [default: 60s].
    #[arg(long = "collector.transceiver.interval", value_name = "DURATION", value_parser = crate::yaml::parse_duration)]
    pub transceiver_interval: Option<std::time::Duration>,
    /// How often the fast PFC storm sampler reads the pause counters (e.g. 200ms).
    #[arg(long = "collector.pfc_storm.period", alias = "collector.pfc-storm.period", value_name = "DURATION", value_parser = crate::yaml::parse_duration)]
    pub pfc_storm_period: Option<std::time::Duration>,
    /// The kubelet's pod-resources socket [default: /var/lib/kubelet/pod-resources/kubelet.sock].
    #[arg(long = "collector.pods.pod-resources-socket", value_name = "PATH")]
    pub pod_resources_socket: Option<PathBuf>,
    /// The kubelet's pod log directories, which name pods by UID [default: /var/log/pods].
    #[arg(long = "collector.pods.pod-logs-dir", value_name = "DIR")]
    pub pod_logs_dir: Option<PathBuf>,
    /// cgroup mount holding the pods' RDMA cgroups [default: <path.sysfs>/fs/cgroup].
    #[arg(long = "path.cgroupfs", value_name = "DIR")]
    pub cgroup_path: Option<PathBuf>,
    /// Directory of NCCL_DEBUG=INFO log files to report on at each scrape (off by default).
    /// Read only the switches of this shard (INDEX/COUNT), by Prometheus' hashmod of the
    /// switch name: the replicas of a sharded poller share one config.
    #[arg(long = "switch.shard", value_name = "INDEX/COUNT")]
    pub switch_shard: Option<crate::switch::shard::SwitchShard>,
    #[arg(long = "collector.nccl.log-dir", value_name = "DIR")]
    pub nccl_log_dir: Option<PathBuf>,
    /// Per-node process counts (rdma_nccl_processes) instead of per-process NCCL series.
    #[arg(long = "collector.nccl.aggregate-only")]
    pub nccl_aggregate_only: bool,
    /// Per-lane FEC series, where the driver counts per lane (node.fec.per_lane).
    #[arg(long = "collector.fec.per-lane")]
    pub fec_per_lane: bool,
    /// The FEC histogram's bins as series (node.fec.histogram).
    #[arg(long = "collector.fec.histogram")]
    pub fec_histogram: bool,
    #[command(flatten)]
    pub collectors: CollectorFlags,
    #[command(flatten)]
    pub ib_fabric: IbFabricFlags,
    /// Threads of the async runtime, which serves HTTP and polls switches (node_exporter's
    /// --runtime.gomaxprocs). Default: 1 where no switch is polled (a node agent reads its
    /// devices on threads of their own, and a second runtime thread only adds wake-ups to
    /// each scrape), else one per CPU.
    #[arg(
        long = "runtime.worker-threads",
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub worker_threads: Option<u16>,
    /// For benchmarks only: every scrape walks sysfs itself, however many run at once.
    #[arg(long = "debug.no-scrape-coalescing", hide = true)]
    pub no_scrape_coalescing: bool,
}

impl ServeArgs {
    /// Loads the config file (if any) and applies flag overrides; `app::check` validates the
    /// result.
    pub fn resolve(&self) -> Result<(Config, Origin), ConfigError> {
        let (mut config, origin) = match &self.config_file {
            Some(path) => config::load(path)?,
            None => (Config::default(), Origin::command_line()),
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
        if let Some(v) = &self.proc_path {
            node.proc_path = v.clone();
        }
        if let Some(v) = &self.device_include {
            node.devices.include = Some(v.clone());
        }
        if let Some(v) = &self.device_exclude {
            node.devices.exclude = Some(v.clone());
        }
        if let Some(v) = &self.hw_counters_include {
            node.hw_counters.set_include(v.clone());
        }
        if let Some(v) = &self.hw_counters_exclude {
            node.hw_counters.set_exclude(v.clone());
        }
        if let Some(v) = self.hw_counters_source {
            node.hw_counters_source = v;
        }
        if self.ecn_parameters {
            node.ecn_settings.parameters = true;
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
        if let Some(dir) = &self.transceiver_modules_dir {
            node.transceiver.modules_dir = Some(dir.clone());
            node.transceiver.source = crate::node::optics::collector::TransceiverSourceKind::Files;
        }
        if let Some(interval) = self.transceiver_interval {
            node.transceiver.interval = interval;
        }
        if let Some(v) = &self.pod_resources_socket {
            config.pods.pod_resources_socket = v.clone();
        }
        if let Some(v) = &self.pod_logs_dir {
            config.pods.pod_logs_dir = v.clone();
        }
        if let Some(v) = &self.cgroup_path {
            config.pods.cgroup_path = Some(v.clone());
        }
        if let Some(shard) = self.switch_shard {
            config.switch_shard = Some(shard);
        }
        if let Some(dir) = &self.nccl_log_dir {
            config.nccl.log_dir = Some(dir.clone());
        }
        if self.nccl_aggregate_only {
            config.nccl.aggregate_only = true;
        }
        if self.fec_per_lane {
            config.node.fec.per_lane = true;
        }
        if self.fec_histogram {
            config.node.fec.histogram = true;
        }
        self.ib_fabric.apply(&mut config.ib_fabric);
        self.collectors
            .apply(&mut config)
            .map_err(|message| ConfigError::Invalid {
                path: PathBuf::from("<command line>"),
                message,
            })?;
        Ok((config, origin))
    }
}

/// `--collector.<name>` and `--no-collector.<name>` for every collector of
/// [`crate::collector::KNOWN`]; the last of a pair wins, as in node_exporter.
#[derive(Debug, Args, Default, Clone)]
pub struct CollectorFlags {
    /// Walk /sys/class/infiniband (device, port and hw counters) [default: on].
    #[arg(long = "collector.sysfs", overrides_with = "no_sysfs")]
    sysfs: bool,
    /// Without the walk, the ethtool and pfc_storm collectors have no ports to read.
    #[arg(long = "no-collector.sysfs", overrides_with = "sysfs")]
    no_sysfs: bool,
    /// Read the RoCE netdevs' driver statistics during the walk [default: on].
    #[arg(long = "collector.ethtool", overrides_with = "no_ethtool")]
    ethtool: bool,
    #[arg(long = "no-collector.ethtool", overrides_with = "ethtool")]
    no_ethtool: bool,
    /// Sample PFC pause counters every period for storms [default: on].
    #[arg(long = "collector.pfc_storm", overrides_with = "no_pfc_storm")]
    pfc_storm: bool,
    #[arg(
        long = "no-collector.pfc_storm",
        alias = "no-collector.pfc-storm",
        overrides_with = "pfc_storm"
    )]
    no_pfc_storm: bool,
    /// Report on NCCL debug logs (needs --collector.nccl.log-dir) [default: on with a log dir].
    #[arg(long = "collector.nccl", overrides_with = "no_nccl")]
    nccl: bool,
    #[arg(long = "no-collector.nccl", overrides_with = "nccl")]
    no_nccl: bool,
    /// Poll the config file's switches [default: on with switches].
    #[arg(long = "collector.switch", overrides_with = "no_switch")]
    switch: bool,
    #[arg(long = "no-collector.switch", overrides_with = "switch")]
    no_switch: bool,
    /// The exporter's own process_* figures [default: on].
    #[arg(long = "collector.process", overrides_with = "no_process")]
    process: bool,
    #[arg(long = "no-collector.process", overrides_with = "process")]
    no_process: bool,
    /// RDMA resources and queue pairs over RDMA netlink [default: on; success 0 where the
    /// kernel has no RDMA netlink].
    #[arg(long = "collector.netlink", overrides_with = "no_netlink")]
    netlink: bool,
    #[arg(long = "no-collector.netlink", overrides_with = "netlink")]
    no_netlink: bool,
    /// FEC mode and counters of the RoCE netdevs over ethtool netlink, where driver statistics
    /// are read [default: on].
    #[arg(long = "collector.fec", overrides_with = "no_fec")]
    fec: bool,
    #[arg(long = "no-collector.fec", overrides_with = "fec")]
    no_fec: bool,
    /// Transceiver modules (optics) of the RDMA ports' netdevs: temperature, voltage, per-lane
    /// power and bias with the modules' own thresholds; needs CAP_NET_ADMIN [default: off].
    #[arg(long = "collector.transceiver", overrides_with = "no_transceiver")]
    transceiver: bool,
    #[arg(long = "no-collector.transceiver", overrides_with = "transceiver")]
    no_transceiver: bool,
    /// Pods behind RDMA devices and queue pairs: the kubelet's pod-resources API, pod log
    /// directories and RDMA cgroups [default: off].
    #[arg(long = "collector.pods", overrides_with = "no_pods")]
    pods: bool,
    #[arg(long = "no-collector.pods", overrides_with = "pods")]
    no_pods: bool,
    /// Scan the InfiniBand subnet (switches, links, switch port counters) with the
    /// infiniband-diags tools: one or two hosts per subnet [default: off].
    #[arg(long = "collector.ib_fabric", overrides_with = "no_ib_fabric")]
    ib_fabric: bool,
    #[arg(long = "no-collector.ib_fabric", overrides_with = "ib_fabric")]
    no_ib_fabric: bool,
    /// Probe between RDMA NICs over UD queue pairs: loss and network RTT per local port and
    /// path kind; peers from `probe:` in the config file [default: off].
    #[arg(long = "collector.probe", overrides_with = "no_probe")]
    probe: bool,
    #[arg(long = "no-collector.probe", overrides_with = "probe")]
    no_probe: bool,
}

impl CollectorFlags {
    /// Turns collectors on or off in `config`; an enabled collector without what it reads is
    /// refused, not silently off.
    fn apply(&self, config: &mut Config) -> Result<(), String> {
        let node = &mut config.node;
        if self.sysfs {
            node.enabled = true;
        }
        if self.no_sysfs {
            node.enabled = false;
        }
        if self.ethtool && node.ethtool.source == EthtoolSourceKind::None {
            node.ethtool.source = EthtoolSourceKind::Ioctl;
        }
        if self.no_ethtool {
            node.ethtool.source = EthtoolSourceKind::None;
            node.ethtool.stats_dir = None;
        }
        if self.pfc_storm {
            node.pfc_storm.enabled = true;
        }
        if self.no_pfc_storm {
            node.pfc_storm.enabled = false;
        }
        if self.nccl && config.nccl.log_dir.is_none() {
            return Err(
                "--collector.nccl needs a log directory: --collector.nccl.log-dir or nccl.log_dir"
                    .into(),
            );
        }
        if self.no_nccl {
            config.nccl.log_dir = None;
        }
        if self.switch && config.switches.is_empty() {
            return Err("--collector.switch needs switches: in the config file".into());
        }
        if self.no_switch {
            config.switches.clear();
        }
        if self.netlink {
            config.node.netlink.enabled = true;
        }
        if self.no_netlink {
            config.node.netlink.enabled = false;
        }
        if self.fec {
            if config.node.ethtool.source == EthtoolSourceKind::None {
                return Err("--collector.fec reads beside the driver statistics: \
                            not with --no-collector.ethtool or ethtool.source: none"
                    .into());
            }
            config.node.fec.enabled = true;
        }
        if self.no_fec {
            config.node.fec.enabled = false;
        }
        if self.transceiver {
            config.node.transceiver.enabled = true;
        }
        if self.no_transceiver {
            config.node.transceiver.enabled = false;
        }
        if self.pods {
            config.pods.enabled = true;
        }
        if self.no_pods {
            config.pods.enabled = false;
        }
        if self.ib_fabric {
            config.ib_fabric.enabled = true;
        }
        if self.no_ib_fabric {
            config.ib_fabric.enabled = false;
        }
        if self.probe {
            config.probe.enabled = true;
        }
        if self.no_probe {
            config.probe.enabled = false;
        }
        if self.process {
            config.process.enabled = true;
        }
        if self.no_process {
            config.process.enabled = false;
        }
        Ok(())
    }
}

/// `--collector.ib_fabric.*`: the subnet scan's schedule, bounds and selection; each overrides
/// `ib_fabric:` of the config file.
#[derive(Debug, Args, Default, Clone)]
pub struct IbFabricFlags {
    /// Time between two subnet scans [default: 60s].
    #[arg(long = "collector.ib_fabric.interval", value_name = "DURATION", value_parser = crate::yaml::parse_duration)]
    interval: Option<std::time::Duration>,
    /// Deadline of a whole scan; what is not read by then is reported as failed [default: 45s].
    #[arg(long = "collector.ib_fabric.timeout", value_name = "DURATION", value_parser = crate::yaml::parse_duration)]
    timeout: Option<std::time::Duration>,
    /// The longest one query (one perfquery run) may take [default: 10s].
    #[arg(long = "collector.ib_fabric.query-timeout", value_name = "DURATION", value_parser = crate::yaml::parse_duration)]
    query_timeout: Option<std::time::Duration>,
    /// Read only the switches whose GUID falls in shard INDEX of COUNT (instances split a
    /// fabric without overlap).
    #[arg(long = "collector.ib_fabric.shard", value_name = "INDEX/COUNT")]
    shard: Option<crate::ib::selection::Shard>,
    /// Read only the switches whose node description matches (anchored regex).
    #[arg(long = "collector.ib_fabric.switch-include", value_name = "REGEX", value_parser = crate::ib::config::anchored_regex)]
    switch_include: Option<Regex>,
    /// Never read the switches whose node description matches (anchored regex).
    #[arg(long = "collector.ib_fabric.switch-exclude", value_name = "REGEX", value_parser = crate::ib::config::anchored_regex)]
    switch_exclude: Option<Regex>,
    /// Export only error and congestion counters (no data or packet counters).
    #[arg(long = "collector.ib_fabric.errors-only")]
    errors_only: bool,
    /// The ibnetdiscover to run [default: ibnetdiscover, on PATH].
    #[arg(long = "collector.ib_fabric.ibnetdiscover", value_name = "PATH")]
    ibnetdiscover: Option<std::path::PathBuf>,
    /// The perfquery to run [default: perfquery, on PATH].
    #[arg(long = "collector.ib_fabric.perfquery", value_name = "PATH")]
    perfquery: Option<std::path::PathBuf>,
    /// The local HCA the tools use (their -C), where the host has several: it picks the subnet.
    #[arg(long = "collector.ib_fabric.ca", value_name = "CA")]
    ca: Option<String>,
    /// The port of that HCA (the tools' -P).
    #[arg(long = "collector.ib_fabric.ca-port", value_name = "PORT")]
    ca_port: Option<u8>,
    /// perfquery runs at once [default: 4].
    #[arg(long = "collector.ib_fabric.parallel", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    parallel: Option<u16>,
}

impl IbFabricFlags {
    fn apply(&self, ib: &mut crate::ib::config::IbFabricConfig) {
        if let Some(v) = self.interval {
            ib.interval = v;
        }
        if let Some(v) = self.timeout {
            ib.timeout = v;
        }
        if let Some(v) = self.query_timeout {
            ib.query_timeout = v;
        }
        if let Some(v) = self.shard {
            ib.shard = Some(v);
        }
        if let Some(v) = &self.switch_include {
            ib.switch_include = Some(v.clone());
        }
        if let Some(v) = &self.switch_exclude {
            ib.switch_exclude = Some(v.clone());
        }
        if self.errors_only {
            ib.errors_only = true;
        }
        if let Some(v) = &self.ibnetdiscover {
            ib.ibnetdiscover = v.clone();
        }
        if let Some(v) = &self.perfquery {
            ib.perfquery = v.clone();
        }
        if let Some(v) = &self.ca {
            ib.ca = Some(v.clone());
        }
        if let Some(v) = self.ca_port {
            ib.ca_port = Some(v);
        }
        if let Some(v) = self.parallel {
            ib.parallel = usize::from(v);
        }
    }
}
