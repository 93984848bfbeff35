//! `rdma-fabric-exporter doctor`: a one-shot report on whether this host or container can use
//! its RDMA devices, with the fix for each problem found.
//!
//! Each submodule checks one thing and returns findings; this module reads the node once, runs
//! the checks in order and prints the report. Only `--exporter` looks beyond the node: the
//! exporter running on it, for its probes of the local ports (`probe.rs`).

mod devices;
mod gids;
mod limits;
mod mtu;
mod netns;
mod pcie;
mod ports;
mod prio_traffic;
mod probe;
mod qos;
mod report;
mod resources;
mod roce_qos;
pub(crate) mod trust;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::ecn_tune::query::Endpoint;
use super::OutputFormat;
use crate::node::dcb::{AnswerFiles, DcbSource, KernelDcb};
use crate::node::ethtool::{EthtoolSource, FileSource, IoctlSource};
use crate::node::sysfs::{read_node, DeviceFilter, NodeSnapshot};

pub use netns::NetnsView;
pub use report::{Finding, Report, Severity};

/// Exit status when the checks could not run at all.
const EXIT_COULD_NOT_RUN: u8 = 2;

/// How long one netdev's DCB netlink answer may take.
const DCB_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// sysfs mount point (a fixture tree in tests).
    #[arg(long = "path.sysfs", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// devtmpfs mount point: `<dev>/infiniband/uverbs*` and `rdma_cm` are opened.
    #[arg(long = "path.dev", default_value = "/dev")]
    pub dev: PathBuf,
    /// procfs mount point: `<procfs>/self/status` (CapEff) and `<procfs>/self/limits`
    /// (memlock; getrlimit when unreadable).
    #[arg(long = "path.procfs", default_value = "/proc")]
    pub procfs: PathBuf,
    /// Expected port rate in Gb/s (e.g. 400); default: the fastest port of the same link layer.
    #[arg(long = "expected-rate", value_name = "GBPS")]
    pub expected_rate: Option<f64>,
    /// The 802.1p priority RoCE traffic should use (PFC and ECN are checked on it). Default:
    /// the priority its traffic class maps to when DCB netlink tells, else 3.
    #[arg(long = "roce-priority", value_parser = clap::value_parser!(u8).range(0..8))]
    pub roce_priority: Option<u8>,
    /// The IP traffic class (ToS byte, DSCP * 4 + ECN) RoCE packets are sent with, as
    /// NCCL_IB_TC sets it. MLNX_OFED's global tc/<port>/traffic_class overrides it; unset, 0.
    #[arg(long = "roce-tclass", env = "NCCL_IB_TC", value_name = "TOS")]
    pub roce_tclass: Option<u8>,
    /// iproute2's `rdma` tool, for QP and other resource use.
    #[arg(long = "rdma-tool", default_value = "rdma")]
    pub rdma_tool: PathBuf,
    /// The exporter running on this node (http://[user:password@]host:9866): its probes of the
    /// local ports are read, probe loss and mean network RTT per port, from two scrapes
    /// `--exporter-interval` apart. Default: none, the node alone is read.
    #[arg(long, value_name = "URL")]
    pub exporter: Option<String>,
    /// Time between the two scrapes of `--exporter`.
    #[arg(long = "exporter-interval", value_name = "DURATION", default_value = "10s", value_parser = crate::yaml::parse_duration, requires = "exporter")]
    pub exporter_interval: Duration,
    /// Report format.
    #[arg(long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Test only: the network namespace view as a file (`<ifname> <address>...` per line)
    /// instead of asking the kernel.
    #[arg(long = "netns-view", hide = true)]
    pub netns_view: Option<PathBuf>,
    /// Test only: driver statistics from `<dir>/<netdev>.txt` (`ethtool -S` format) instead of
    /// the SIOCETHTOOL ioctl.
    #[arg(long = "ethtool-stats-dir", hide = true)]
    pub ethtool_stats_dir: Option<PathBuf>,
    /// Test only: DCB netlink answers from `<dir>/<netdev>.bin` (one netlink datagram; a missing
    /// file is a netdev without DCB) instead of asking the kernel.
    #[arg(long = "dcb-answers-dir", hide = true)]
    pub dcb_answers_dir: Option<PathBuf>,
}

/// Why the report could not be made at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {reason}")]
    NetnsView {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("listing this network namespace's interfaces (getifaddrs): {0}")]
    Getifaddrs(#[source] std::io::Error),
    #[error("reading {path}: {detail}")]
    Sysfs { path: PathBuf, detail: String },
    #[error(transparent)]
    Exporter(#[from] crate::diag::ecn_tune::query::QueryError),
}

/// Runs the checks; exit 0 healthy, 1 problems found, 2 could not run.
pub fn main(args: &DoctorArgs) -> ExitCode {
    match run(args) {
        Ok(report) => {
            let text = match args.output {
                OutputFormat::Text => report.to_text(),
                OutputFormat::Json => {
                    serde_json::to_string_pretty(&report.to_json()).unwrap_or_default() + "\n"
                }
            };
            // A closed pipe (`doctor | head`) is the reader's choice, not a failure to report.
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
            ExitCode::from(report.exit_status())
        }
        Err(e) => {
            eprintln!("doctor: could not run: {e}");
            ExitCode::from(EXIT_COULD_NOT_RUN)
        }
    }
}

/// All checks, in the order an operator would fix things: devices, access, limits, links,
/// namespace and addressing, QoS, resources; then the probes, with `--exporter`.
pub fn run(args: &DoctorArgs) -> Result<Report, DoctorError> {
    // A URL that cannot be used is a mistake in the arguments: said before any check runs.
    let exporter = args
        .exporter
        .as_deref()
        .map(|url| Endpoint::parse_flag("--exporter", url))
        .transpose()?;
    let snapshot = read_snapshot(&args.sysfs)?;
    let mut report = Report::default();
    report.add(devices::check_presence(&args.sysfs, &snapshot));
    report.extend(devices::check_dev_files(&args.dev));
    report.extend(limits::check(&args.procfs));
    if !snapshot.devices.is_empty() {
        check_devices(args, &snapshot, &mut report)?;
    }
    // The exporter sees the node's devices even where this container does not.
    if let Some(exporter) = exporter {
        report.extend(probe::check(exporter, args.exporter_interval)?);
    }
    Ok(report)
}

/// Ports, namespace and addressing, QoS, resources: the checks of a node with devices.
fn check_devices(
    args: &DoctorArgs,
    snapshot: &NodeSnapshot,
    report: &mut Report,
) -> Result<(), DoctorError> {
    let view = match &args.netns_view {
        Some(path) => NetnsView::from_file(path)?,
        None => NetnsView::from_kernel()?,
    };
    let ethtool: Box<dyn EthtoolSource> = match &args.ethtool_stats_dir {
        Some(dir) => Box::new(FileSource::new(dir)),
        None => Box::new(IoctlSource),
    };
    let dcb: Box<dyn DcbSource> = match &args.dcb_answers_dir {
        Some(dir) => Box::new(AnswerFiles::new(dir)),
        None => Box::new(KernelDcb::new(DCB_TIMEOUT)),
    };
    check_ports(
        args,
        snapshot,
        &view,
        ethtool.as_ref(),
        dcb.as_ref(),
        report,
    );
    report.extend(resources::check(&args.rdma_tool, &args.sysfs));
    Ok(())
}

/// Reads the devices. A `class/infiniband` that exists but cannot be listed (the walk's only
/// error without a device name) would make every other finding meaningless.
fn read_snapshot(sysfs: &Path) -> Result<NodeSnapshot, DoctorError> {
    let snapshot = read_node(sysfs, &DeviceFilter::default());
    let unlistable = snapshot
        .errors
        .iter()
        .find(|e| e.device.is_empty())
        .filter(|_| snapshot.devices.is_empty());
    if let Some(error) = unlistable {
        return Err(DoctorError::Sysfs {
            path: error.path.clone(),
            detail: error.detail.clone(),
        });
    }
    Ok(snapshot)
}

fn check_ports(
    args: &DoctorArgs,
    snapshot: &NodeSnapshot,
    view: &NetnsView,
    ethtool: &dyn EthtoolSource,
    dcb: &dyn DcbSource,
    report: &mut Report,
) {
    let roce_ports = || {
        snapshot.devices.iter().flat_map(|d| {
            d.ports
                .iter()
                .filter(|p| p.is_ethernet())
                .map(move |p| (d, p))
        })
    };
    let roce_netdevs: Vec<String> = roce_ports().filter_map(|(_, p)| p.netdev.clone()).collect();
    let vf_netdevs: Vec<String> = roce_ports()
        .filter(|(d, _)| netns::is_vf(&args.sysfs, &d.name))
        .filter_map(|(_, p)| p.netdev.clone())
        .collect();
    report.add(netns::guess_mode(view, &roce_netdevs, &vf_netdevs));
    let visible = roce_netdevs.iter().filter(|n| view.has(n)).count();
    let partial = visible > 0 && visible < roce_netdevs.len();
    let mtus: Vec<(String, u32)> = roce_netdevs
        .iter()
        .filter_map(|n| Some((n.clone(), mtu::read_mtu(&args.sysfs, n).ok()?)))
        .collect();
    let qos_sources = roce_qos::Sources {
        sysfs: &args.sysfs,
        ethtool,
        dcb,
        roce_priority: args.roce_priority,
        roce_tclass: args.roce_tclass,
        mtus: &mtus,
    };

    for device in &snapshot.devices {
        report.extend(pcie::check_link(device));
        for port in &device.ports {
            let state = ports::check_state(&device.name, port);
            let active = state.severity == Severity::Ok;
            report.add(state);
            if active {
                report.add(ports::check_rate(
                    &snapshot.devices,
                    &device.name,
                    port,
                    args.expected_rate,
                ));
            }
            if !port.is_ethernet() {
                continue;
            }
            let findings = netns::check_netdev(
                view,
                &device.name,
                port.number,
                port.netdev.as_deref(),
                partial,
            );
            let usable = findings.iter().all(|f| f.severity == Severity::Ok);
            report.extend(findings);
            let Some(netdev) = port.netdev.as_deref().filter(|_| usable) else {
                continue;
            };
            let port_dir = args
                .sysfs
                .join("class/infiniband")
                .join(&device.name)
                .join("ports")
                .join(&port.number_text);
            report.extend(gids::check_addresses(
                &gids::read_table(&port_dir),
                &device.name,
                port.number,
                netdev,
                &view.routable_addresses(netdev),
            ));
            report.extend(roce_qos::check(
                &qos_sources,
                &roce_qos::Port {
                    device: &device.name,
                    port: port.number,
                    netdev,
                    is_vf: vf_netdevs.iter().any(|n| n == netdev),
                },
            ));
        }
    }
}
