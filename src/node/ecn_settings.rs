//! The NIC's congestion-control settings of a RoCE port: whether DCQCN's reaction point (the
//! sender slows down on CNPs) and notification point (the receiver answers ECN marks with CNPs)
//! are enabled per priority, and, opt-in, the DCQCN parameters.
//!
//! Where they come from (facts only, no code taken):
//! - MLNX_OFED / DOCA-OFED's mlx5 (`drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c`,
//!   knneth/mlnx-ofa_kernel; also in a few vendor kernels, e.g. oracle/linux-uek) creates
//!   `class/net/<netdev>/ecn/`, one directory per protocol: `roce_rp` (reaction point) and
//!   `roce_np` (notification point), each with `enable/0`..`enable/7` (one file per 802.1p
//!   priority) and the protocol's parameter files directly beside `enable/`. Old drivers also
//!   have an `802.1.qau_rp` directory (QCN, not RoCE): not read.
//! - `enable/<p>` prints `"%d\n"` of the firmware's QUERY_CONG_STATUS answer, 0 or 1, and
//!   prints nothing (0 bytes) when the firmware command fails (`mlx5e_show_ecn_enable`,
//!   `en_ecn.c`): an empty file is `reason="empty"`, not "off".
//! - Each parameter file prints `"%d\n"` of one field of QUERY_CONG_PARAMS, or fails the read
//!   with the command's error (`en_ecn.c`). roce_rp: clamp_tgt_rate,
//!   clamp_tgt_rate_after_time_inc, rpg_time_reset, rpg_byte_reset, rpg_threshold,
//!   rpg_max_rate, rpg_ai_rate, rpg_hai_rate, rpg_gd, rpg_min_dec_fac, rpg_min_rate,
//!   rate_to_set_on_first_cnp, dce_tcp_g, dce_tcp_rtt, rate_reduce_monitor_period,
//!   initial_alpha_value; roce_np: min_time_between_cnps, cnp_dscp, cnp_802p_prio
//!   (`mlx5e_fill_rp_attributes`, `mlx5e_fill_np_attributes`). prometheus/procfs'
//!   `sysfs/net_class_ecn.go` (PR #695) and its fixture read the same layout.
//! - Units and defaults: NVIDIA's "DCQCN parameters" page (the DOCA and MLNX_OFED manuals):
//!   rates in Mb/s, periods in µs, `dce_tcp_g` and `initial_alpha_value` fixed point with 10
//!   fractional bits, `rpg_min_dec_fac` in percent. Uncertain, so exported as printed:
//!   `rpg_byte_reset` (the pages disagree on its granularity), `rpg_gd` (a base-2 exponent),
//!   `rpg_threshold` (a count); and whether `rpg_max_rate` 0 means "line rate".
//! - NVIDIA's ECN page writes the parameters as `ecn/<protocol>/params/<attribute>`; the
//!   driver source has no `params/` directory, and the source wins here.
//! - Upstream mlx5 has no `ecn/` directory: it exposes the same parameters in debugfs
//!   (`mlx5/<pci>/cc_params/`, `drivers/infiniband/hw/mlx5/cong.c`, `rp_*`/`np_*` names, plus
//!   `np_cnp_prio_mode`), root only, and no per-priority enable. A port without `ecn/` has no
//!   series: its settings are unknown, which is no error.
//!
//! Each `enable` read and each parameter read is a firmware command, so only the priorities
//! whose series are exported are read ([`PriorityTraffic::settings_priorities`]), and the
//! parameters only when asked for (`node.ecn_settings.parameters`).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::ethtool_map::pause_names_show_pfc;
use super::metrics::EncodeIssue;
use super::parse::{self, ValueError};
use super::priority_traffic::PriorityTraffic;
use super::reason::ReadErrorReason;
use super::sys_dir::{AttrBuf, SysDir};
use super::sysfs::{Device, Port};
use crate::exposition::{Families, Label, Value};

/// `priority` label values.
const PRIORITIES: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];

/// The two ends of DCQCN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The sender: cuts its rate when CNPs arrive.
    Reaction,
    /// The receiver: answers ECN-marked packets with CNPs.
    Notification,
}

impl Point {
    pub const ALL: [Point; 2] = [Point::Reaction, Point::Notification];

    /// The `point` label.
    pub fn as_label(self) -> &'static str {
        match self {
            Point::Reaction => "reaction",
            Point::Notification => "notification",
        }
    }

    /// The protocol directory below `ecn/` (en_sysfs.c `mlx5e_get_cong_protocol`).
    fn dir(self) -> &'static str {
        match self {
            Point::Reaction => "roce_rp",
            Point::Notification => "roce_np",
        }
    }
}

/// How a parameter file's number becomes the metric's base unit.
#[derive(Debug, Clone, Copy)]
enum Scale {
    /// Printed as is (a flag, a count, a code point).
    Raw,
    /// Microseconds to seconds.
    Micros,
    /// Mb/s to bytes per second.
    Mbits,
    /// Fixed point with 10 fractional bits to a ratio.
    Fixed10,
    /// Percent to a ratio.
    Percent,
}

impl Scale {
    fn apply(self, raw: u64) -> Value {
        match self {
            Scale::Raw => Value::U64(raw),
            Scale::Micros => Value::F64(raw as f64 / 1e6),
            Scale::Mbits => Value::F64(raw as f64 * 125_000.0),
            Scale::Fixed10 => Value::F64(raw as f64 / 1024.0),
            Scale::Percent => Value::F64(raw as f64 / 100.0),
        }
    }
}

/// One DCQCN parameter file and its gauge.
#[derive(Debug)]
pub struct Parameter {
    pub point: Point,
    /// The file's name below `ecn/roce_rp/` or `ecn/roce_np/`.
    pub file: &'static str,
    pub metric: &'static str,
    help: &'static str,
    scale: Scale,
}

const fn rp(
    file: &'static str,
    metric: &'static str,
    help: &'static str,
    scale: Scale,
) -> Parameter {
    Parameter {
        point: Point::Reaction,
        file,
        metric,
        help,
        scale,
    }
}

const fn np(
    file: &'static str,
    metric: &'static str,
    help: &'static str,
    scale: Scale,
) -> Parameter {
    Parameter {
        point: Point::Notification,
        file,
        metric,
        help,
        scale,
    }
}

/// The parameter files MLNX_OFED's mlx5 creates, in its order (`en_sysfs.c`).
pub const PARAMETERS: &[Parameter] = &[
    rp("clamp_tgt_rate", "rdma_dcqcn_rp_clamp_target_rate", "DCQCN reaction point clamp_tgt_rate (mlx5 ecn/roce_rp): 1 = the target rate follows the current rate at every rate decrease.", Scale::Raw),
    rp("clamp_tgt_rate_after_time_inc", "rdma_dcqcn_rp_clamp_target_rate_after_time_increase", "DCQCN reaction point clamp_tgt_rate_after_time_inc (mlx5 ecn/roce_rp): 1 = the target rate follows the current rate after a timer increase.", Scale::Raw),
    rp("rpg_time_reset", "rdma_dcqcn_rp_time_reset_seconds", "DCQCN reaction point rpg_time_reset (mlx5 ecn/roce_rp): time between rate increase events.", Scale::Micros),
    rp("rpg_byte_reset", "rdma_dcqcn_rp_byte_reset", "DCQCN reaction point rpg_byte_reset (mlx5 ecn/roce_rp): bytes sent between rate increase events, as the driver prints it (its unit is not documented consistently).", Scale::Raw),
    rp("rpg_threshold", "rdma_dcqcn_rp_threshold", "DCQCN reaction point rpg_threshold (mlx5 ecn/roce_rp): rate increase events before the next increase phase.", Scale::Raw),
    rp("rpg_max_rate", "rdma_dcqcn_rp_max_rate_bytes_per_second", "DCQCN reaction point rpg_max_rate (mlx5 ecn/roce_rp): highest rate a flow is raised to (0 as printed).", Scale::Mbits),
    rp("rpg_ai_rate", "rdma_dcqcn_rp_ai_rate_bytes_per_second", "DCQCN reaction point rpg_ai_rate (mlx5 ecn/roce_rp): rate step of the additive increase phase.", Scale::Mbits),
    rp("rpg_hai_rate", "rdma_dcqcn_rp_hai_rate_bytes_per_second", "DCQCN reaction point rpg_hai_rate (mlx5 ecn/roce_rp): rate step of the hyper increase phase.", Scale::Mbits),
    rp("rpg_gd", "rdma_dcqcn_rp_gd", "DCQCN reaction point rpg_gd (mlx5 ecn/roce_rp): the rate reduction's alpha coefficient, a base-2 exponent as the driver prints it.", Scale::Raw),
    rp("rpg_min_dec_fac", "rdma_dcqcn_rp_min_dec_factor_ratio", "DCQCN reaction point rpg_min_dec_fac (mlx5 ecn/roce_rp): largest share of the rate one decrease may take.", Scale::Percent),
    rp("rpg_min_rate", "rdma_dcqcn_rp_min_rate_bytes_per_second", "DCQCN reaction point rpg_min_rate (mlx5 ecn/roce_rp): lowest rate a flow is cut to.", Scale::Mbits),
    rp("rate_to_set_on_first_cnp", "rdma_dcqcn_rp_rate_on_first_cnp_bytes_per_second", "DCQCN reaction point rate_to_set_on_first_cnp (mlx5 ecn/roce_rp): rate set at a flow's first CNP (0: no fixed rate).", Scale::Mbits),
    rp("dce_tcp_g", "rdma_dcqcn_rp_dce_tcp_g_ratio", "DCQCN reaction point dce_tcp_g (mlx5 ecn/roce_rp): alpha's update weight g.", Scale::Fixed10),
    rp("dce_tcp_rtt", "rdma_dcqcn_rp_dce_tcp_rtt_seconds", "DCQCN reaction point dce_tcp_rtt (mlx5 ecn/roce_rp): alpha's update period.", Scale::Micros),
    rp("rate_reduce_monitor_period", "rdma_dcqcn_rp_rate_reduce_monitor_period_seconds", "DCQCN reaction point rate_reduce_monitor_period (mlx5 ecn/roce_rp): shortest time between two rate decreases.", Scale::Micros),
    rp("initial_alpha_value", "rdma_dcqcn_rp_initial_alpha_ratio", "DCQCN reaction point initial_alpha_value (mlx5 ecn/roce_rp): alpha at a flow's first CNP.", Scale::Fixed10),
    np("min_time_between_cnps", "rdma_dcqcn_np_min_time_between_cnps_seconds", "DCQCN notification point min_time_between_cnps (mlx5 ecn/roce_np): shortest time between two CNPs the port sends.", Scale::Micros),
    np("cnp_dscp", "rdma_dcqcn_np_cnp_dscp", "DCQCN notification point cnp_dscp (mlx5 ecn/roce_np): the DSCP of the CNPs the port sends.", Scale::Raw),
    np("cnp_802p_prio", "rdma_dcqcn_np_cnp_priority", "DCQCN notification point cnp_802p_prio (mlx5 ecn/roce_np): the 802.1p priority of the CNPs the port sends.", Scale::Raw),
];

/// What the `ecn/` directory of one netdev says, as far as it was read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EcnSettings {
    /// Per point ([`Point::ALL`] order), a bit per priority whose `enable` file was read.
    known: [u8; 2],
    /// Per point, a bit per priority read as enabled.
    enabled: [u8; 2],
    /// (index in [`PARAMETERS`], value as printed) of each parameter read.
    pub parameters: Vec<(usize, u64)>,
}

impl EcnSettings {
    /// Whether `point` is enabled on `priority`; `None`: not read (or unreadable).
    pub fn enabled(&self, point: Point, priority: u8) -> Option<bool> {
        let i = point as usize;
        let bit = 1u8.checked_shl(u32::from(priority))?;
        (self.known[i] & bit != 0).then_some(self.enabled[i] & bit != 0)
    }

    fn set(&mut self, point: Point, priority: u8, on: bool) {
        let (i, bit) = (point as usize, 1u8 << priority);
        self.known[i] |= bit;
        if on {
            self.enabled[i] |= bit;
        }
    }

    /// A parameter's value as printed, by file name.
    pub fn parameter(&self, point: Point, file: &str) -> Option<u64> {
        self.parameters.iter().find_map(|&(i, v)| {
            let p = &PARAMETERS[i];
            (p.point == point && p.file == file).then_some(v)
        })
    }
}

/// One value of `ecn/` that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct EcnError {
    pub reason: ReadErrorReason,
    pub path: PathBuf,
    pub detail: String,
}

/// One port's read of its netdev's `ecn/` directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EcnRead {
    /// `None`: no `ecn/` directory (not MLNX_OFED's mlx5), or nothing was asked.
    pub settings: Option<EcnSettings>,
    pub errors: Vec<EcnError>,
}

/// An `enable/<p>` file: `0` or `1` and a newline. Anything else is garbled; an empty file is
/// the driver's failed firmware query.
pub(crate) fn parse_enabled(bytes: &[u8]) -> Result<bool, ValueError> {
    match parse::attribute_text(bytes)? {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(ValueError::NotANumber(other.to_string())),
    }
}

/// `node.ecn_settings`: what of the settings is exported. The per-priority enables are always
/// read where `ecn/` exists (two firmware queries per exported priority).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EcnSettingsConfig {
    /// Also read and export the DCQCN parameters (19 gauges a RoCE port, 19 more firmware
    /// queries a read).
    pub parameters: bool,
}

/// What to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request {
    /// A bit per priority whose `enable` files are read.
    pub priorities: u8,
    /// Read the DCQCN parameter files too.
    pub parameters: bool,
}

/// Reads `<class_net>/<netdev>/ecn/` as `request` says.
pub fn read(class_net: &Path, netdev: &str, request: Request) -> EcnRead {
    let mut read = EcnRead::default();
    if request.priorities == 0 && !request.parameters {
        return read;
    }
    let path = class_net.join(netdev).join("ecn");
    let ecn = match SysDir::open(&path) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return read,
        Err(e) => {
            read.error(super::sysfs::io_reason_at(None, &path, &e), path, &e);
            return read;
        }
    };
    let mut settings = EcnSettings::default();
    let mut buf: AttrBuf = [0; 4096];
    for point in Point::ALL {
        let dir = match ecn.subdir(point.dir()) {
            Ok(dir) => dir,
            Err(e) if ecn.is_absent(point.dir(), &e) => continue,
            Err(e) => {
                read.io_error(&ecn, point.dir(), &e);
                continue;
            }
        };
        if request.priorities != 0 {
            match dir.subdir("enable") {
                Ok(enable) => {
                    for priority in 0..8u8 {
                        if request.priorities & (1 << priority) == 0 {
                            continue;
                        }
                        let name = PRIORITIES[usize::from(priority)];
                        if let Some(on) = read.value(&enable, name, &mut buf, parse_enabled) {
                            settings.set(point, priority, on);
                        }
                    }
                }
                Err(e) if dir.is_absent("enable", &e) => {}
                Err(e) => read.io_error(&dir, "enable", &e),
            }
        }
        if request.parameters {
            for (index, parameter) in PARAMETERS.iter().enumerate() {
                if parameter.point != point {
                    continue;
                }
                if let Some(value) = read.value(&dir, parameter.file, &mut buf, parse::counter) {
                    settings.parameters.push((index, value));
                }
            }
        }
    }
    read.settings = Some(settings);
    read
}

impl EcnRead {
    fn error(&mut self, reason: ReadErrorReason, path: PathBuf, detail: &dyn std::fmt::Display) {
        self.errors.push(EcnError {
            reason,
            path,
            detail: detail.to_string(),
        });
    }

    fn io_error(&mut self, dir: &SysDir, name: &str, e: &std::io::Error) {
        let reason = super::sysfs::io_reason_at(Some(dir), Path::new(name), e);
        self.error(reason, dir.path_of(name), e);
    }

    /// One file's value. A file the driver did not create is unknown, not an error (mlx5
    /// creates all eight priorities and every parameter; another driver may not).
    fn value<T>(
        &mut self,
        dir: &SysDir,
        name: &str,
        buf: &mut AttrBuf,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        match dir.read(name, buf) {
            Ok(n) => match parse(&buf[..n]) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.error(e.reason(), dir.path_of(name), &e);
                    None
                }
            },
            Err(e) if dir.is_absent(name, &e) => None,
            Err(e) => {
                self.io_error(dir, name, &e);
                None
            }
        }
    }
}

/// What to read for `port`: its RoCE netdev's settings on the priorities whose series are
/// exported (from its driver statistics, so nothing without them), parameters if asked.
pub(crate) fn request_for(port: &Port, parameters: bool) -> Option<(&str, Request)> {
    let netdev = port.netdev.as_deref().filter(|_| port.is_ethernet())?;
    if port.netdev_in_other_netns {
        return None;
    }
    let driver = port.netdev_driver.as_deref();
    let mut traffic = PriorityTraffic::default();
    let types = port.ethtool_types();
    for (stat, value) in types.iter().zip(port.ethtool.values()) {
        if let (Some(stat), Some(value)) = (stat, value) {
            traffic.note(*stat, *value);
        }
    }
    let request = Request {
        priorities: traffic.settings_priorities(pause_names_show_pfc(driver)),
        parameters,
    };
    Some((netdev, request))
}

/// Reads the settings of `port` into it (on the device's reader, after its statistics), or
/// takes them from `kept` while they are recent.
pub(crate) fn read_port(class_net: &Path, port: &mut Port, parameters: bool, kept: &KeptEcnReads) {
    if let Some((netdev, request)) = request_for(port, parameters) {
        port.ecn = kept.read(class_net, netdev, request);
    }
}

/// How long a netdev's settings, read without errors, are served before its files are read
/// again. They change when an operator reconfigures DCQCN, each `enable` file is a firmware
/// query (each parameter another), and the alerts on them wait minutes; the PCIe link is kept
/// the same way (`sysfs::PCIE_REFRESH`).
pub(crate) const ECN_REFRESH: Duration = Duration::from_secs(30);

/// The last error-free read of each netdev's `ecn/` (an absent directory included), served for
/// [`ECN_REFRESH`] to the same request. A read with errors is not kept: the next scrape reads
/// again, and counts the errors again.
#[derive(Debug)]
pub(crate) struct KeptEcnReads {
    refresh: Duration,
    reads: Mutex<FxHashMap<String, KeptRead>>,
}

impl Default for KeptEcnReads {
    fn default() -> Self {
        KeptEcnReads::new(ECN_REFRESH)
    }
}

#[derive(Debug)]
struct KeptRead {
    at: Instant,
    request: Request,
    settings: Option<EcnSettings>,
}

impl KeptEcnReads {
    /// Reads served for `refresh` each.
    pub fn new(refresh: Duration) -> KeptEcnReads {
        KeptEcnReads {
            refresh,
            reads: Mutex::default(),
        }
    }

    /// `read(class_net, netdev, request)`, or its kept answer while recent.
    pub fn read(&self, class_net: &Path, netdev: &str, request: Request) -> EcnRead {
        if let Some(kept) = self.lock().get(netdev) {
            if kept.request == request && kept.at.elapsed() < self.refresh {
                return EcnRead {
                    settings: kept.settings.clone(),
                    errors: Vec::new(),
                };
            }
        }
        let at = Instant::now();
        let fresh = read(class_net, netdev, request);
        let mut kept = self.lock();
        // Netdevs renamed or gone leave with their age.
        kept.retain(|_, k| k.at.elapsed() < self.refresh);
        if fresh.errors.is_empty() {
            let settings = fresh.settings.clone();
            kept.insert(
                netdev.to_string(),
                KeptRead {
                    at,
                    request,
                    settings,
                },
            );
        } else {
            kept.remove(netdev);
        }
        fresh
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<String, KeptRead>> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `rdma_ecn_enabled` for every priority read, the parameters read, and the read's errors
/// as issues for `rdma_exporter_read_errors_total`.
pub fn add_metrics<'a>(
    families: &mut Families<'a>,
    device: &'a Device,
    port: &'a Port,
    issues: &mut Vec<EncodeIssue>,
) {
    issues.extend(port.ecn.errors.iter().map(|e| EncodeIssue {
        device: device.name.clone(),
        reason: e.reason,
        detail: format!("{}: {}", e.path.display(), e.detail),
    }));
    let (Some(settings), Some(netdev)) = (&port.ecn.settings, &port.netdev) else {
        return;
    };
    let labels = || -> [Label<'a>; 3] {
        [
            ("device", Cow::Borrowed(device.name.as_str())),
            ("port", Cow::Borrowed(port.number_text.as_str())),
            ("netdev", Cow::Borrowed(netdev.as_str())),
        ]
    };
    for priority in 0..8u8 {
        for point in Point::ALL {
            let Some(on) = settings.enabled(point, priority) else {
                continue;
            };
            families.gauge(
                "rdma_ecn_enabled",
                "1 where the NIC has DCQCN's ECN reaction point (sender slows down on CNPs) or notification point (receiver sends CNPs for ECN marks) enabled on the priority, 0 where off (mlx5 ecn/roce_rp, ecn/roce_np with MLNX_OFED). Only priorities with PFC, else those that carried traffic; no series: not known.",
                labels().into_iter().chain([
                    ("priority", Cow::Borrowed(PRIORITIES[usize::from(priority)])),
                    ("point", Cow::Borrowed(point.as_label())),
                ]),
                Value::U64(u64::from(on)),
            );
        }
    }
    for &(index, raw) in &settings.parameters {
        let parameter = &PARAMETERS[index];
        families.gauge(
            parameter.metric,
            parameter.help,
            labels(),
            parameter.scale.apply(raw),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tests/fixtures/ecn-settings/sys/class/net`.
    fn class_net() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ecn-settings/sys/class/net")
    }

    const ALL_PRIORITIES: u8 = 0xff;

    #[test]
    fn enable_files_parse_strictly() {
        assert_eq!(parse_enabled(b"1\n"), Ok(true));
        assert_eq!(parse_enabled(b"0\n"), Ok(false));
        assert_eq!(parse_enabled(b"1"), Ok(true));
        // mlx5 prints nothing when the firmware query fails.
        assert_eq!(parse_enabled(b""), Err(ValueError::Empty));
        assert_eq!(
            parse_enabled(b"2\n").unwrap_err().reason(),
            ReadErrorReason::Parse
        );
        assert_eq!(
            parse_enabled(b"on\n").unwrap_err().reason(),
            ReadErrorReason::Parse
        );
    }

    #[test]
    fn the_fixture_reads_with_exact_values() {
        let request = Request {
            priorities: ALL_PRIORITIES,
            parameters: true,
        };
        let read = read(&class_net(), "ens1f0np0", request);
        assert_eq!(read.errors, vec![], "a clean tree reads without errors");
        let settings = read.settings.expect("ecn/ exists");
        for priority in 0..8 {
            let on = priority == 3;
            assert_eq!(settings.enabled(Point::Reaction, priority), Some(on));
            // The notification point is on for 3 and, in this fixture, for 4 too.
            let np_on = priority == 3 || priority == 4;
            assert_eq!(settings.enabled(Point::Notification, priority), Some(np_on));
        }
        for (point, file, value) in [
            (Point::Reaction, "rpg_ai_rate", 5),
            (Point::Reaction, "rpg_hai_rate", 50),
            (Point::Reaction, "rpg_time_reset", 300),
            (Point::Reaction, "rpg_byte_reset", 32767),
            (Point::Reaction, "rpg_min_dec_fac", 50),
            (Point::Reaction, "dce_tcp_g", 1019),
            (Point::Reaction, "initial_alpha_value", 1023),
            (Point::Reaction, "clamp_tgt_rate_after_time_inc", 1),
            (Point::Notification, "min_time_between_cnps", 4),
            (Point::Notification, "cnp_dscp", 48),
            (Point::Notification, "cnp_802p_prio", 6),
        ] {
            assert_eq!(settings.parameter(point, file), Some(value), "{file}");
        }
        assert_eq!(settings.parameters.len(), PARAMETERS.len());
    }

    #[test]
    fn only_the_requested_priorities_are_read() {
        let request = Request {
            priorities: 1 << 3,
            parameters: false,
        };
        let settings = read(&class_net(), "ens1f0np0", request).settings.unwrap();
        assert_eq!(settings.enabled(Point::Reaction, 3), Some(true));
        assert_eq!(settings.enabled(Point::Reaction, 4), None);
        assert_eq!(settings.enabled(Point::Notification, 4), None);
        assert!(settings.parameters.is_empty());
    }

    #[test]
    fn garbled_values_are_errors_with_a_reason_and_a_missing_file_is_unknown() {
        let request = Request {
            priorities: ALL_PRIORITIES,
            parameters: true,
        };
        let read = read(&class_net(), "ens2f0np0", request);
        let settings = read.settings.clone().unwrap();
        // roce_rp/enable/3 holds "2": garbled, so unknown, and a parse error.
        assert_eq!(settings.enabled(Point::Reaction, 3), None);
        // roce_np/enable/3 is missing: unknown, no error.
        assert_eq!(settings.enabled(Point::Notification, 3), None);
        // roce_np/enable/5 is empty: the driver's failed firmware query.
        assert_eq!(settings.enabled(Point::Notification, 5), None);
        // The others read.
        assert_eq!(settings.enabled(Point::Reaction, 0), Some(false));
        assert_eq!(settings.enabled(Point::Notification, 0), Some(false));
        // rpg_ai_rate holds "fast": an error; the rest of the parameters read.
        assert_eq!(settings.parameter(Point::Reaction, "rpg_ai_rate"), None);
        assert_eq!(
            settings.parameter(Point::Reaction, "rpg_hai_rate"),
            Some(50)
        );
        let mut errors: Vec<(String, &str)> = read
            .errors
            .iter()
            .map(|e| {
                let path = e.path.strip_prefix(class_net()).unwrap();
                (path.display().to_string(), e.reason.as_label())
            })
            .collect();
        errors.sort();
        assert_eq!(
            errors,
            vec![
                ("ens2f0np0/ecn/roce_np/enable/5".to_string(), "empty"),
                ("ens2f0np0/ecn/roce_rp/enable/3".to_string(), "parse"),
                ("ens2f0np0/ecn/roce_rp/rpg_ai_rate".to_string(), "parse"),
            ]
        );
    }

    #[test]
    fn a_netdev_without_ecn_has_no_settings_and_no_error() {
        let request = Request {
            priorities: ALL_PRIORITIES,
            parameters: true,
        };
        assert_eq!(read(&class_net(), "ens3f0np0", request), EcnRead::default());
        assert_eq!(
            read(&class_net(), "no-such-netdev", request),
            EcnRead::default()
        );
    }

    /// A netdev directory in a temporary `class/net` with `ecn/`: both points enabled on the
    /// priorities in `on`, off on the others.
    fn write_netdev(class_net: &Path, netdev: &str, on: &[u8]) {
        for point in Point::ALL {
            let enable = class_net
                .join(netdev)
                .join("ecn")
                .join(point.dir())
                .join("enable");
            std::fs::create_dir_all(&enable).unwrap();
            for priority in 0..8u8 {
                let text = if on.contains(&priority) { "1\n" } else { "0\n" };
                std::fs::write(enable.join(priority.to_string()), text).unwrap();
            }
        }
    }

    #[test]
    fn kept_settings_are_served_for_their_refresh_to_the_same_request() {
        let dir = tempfile::tempdir().unwrap();
        let class_net = dir.path();
        write_netdev(class_net, "ens1f0np0", &[3]);
        let request = Request {
            priorities: 1 << 3,
            parameters: false,
        };
        let kept = KeptEcnReads::new(Duration::from_secs(3600));
        let on = kept.read(class_net, "ens1f0np0", request);
        let on_settings = on.settings.clone().unwrap();
        assert_eq!(on_settings.enabled(Point::Reaction, 3), Some(true));

        // An operator turns DCQCN off: the kept read is served while recent...
        write_netdev(class_net, "ens1f0np0", &[]);
        assert_eq!(kept.read(class_net, "ens1f0np0", request), on);
        // ...but another request reads the files.
        let wider = Request {
            priorities: (1 << 3) | (1 << 4),
            parameters: false,
        };
        let off = kept.read(class_net, "ens1f0np0", wider).settings.unwrap();
        assert_eq!(off.enabled(Point::Reaction, 3), Some(false));

        // With no time kept, every read goes to the files.
        let unkept = KeptEcnReads::new(Duration::ZERO);
        assert_eq!(
            unkept
                .read(class_net, "ens1f0np0", request)
                .settings
                .unwrap()
                .enabled(Point::Reaction, 3),
            Some(false)
        );
        write_netdev(class_net, "ens1f0np0", &[3]);
        assert_eq!(unkept.read(class_net, "ens1f0np0", request), on);

        // An absent directory is kept too: one that appears is seen at the refresh.
        assert_eq!(
            kept.read(class_net, "ens2f0np0", request),
            EcnRead::default()
        );
        write_netdev(class_net, "ens2f0np0", &[3]);
        assert_eq!(
            kept.read(class_net, "ens2f0np0", request),
            EcnRead::default()
        );
        assert_eq!(unkept.read(class_net, "ens2f0np0", request), on);
    }

    #[test]
    fn a_read_with_errors_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let class_net = dir.path();
        write_netdev(class_net, "ens1f0np0", &[3]);
        let enable = class_net.join("ens1f0np0/ecn/roce_rp/enable/3");
        // The driver's failed firmware query.
        std::fs::write(&enable, "").unwrap();
        let request = Request {
            priorities: 1 << 3,
            parameters: false,
        };
        let kept = KeptEcnReads::new(Duration::from_secs(3600));
        let failed = kept.read(class_net, "ens1f0np0", request);
        assert_eq!(failed.errors.len(), 1, "{failed:?}");
        // Read again, and counted again, until a read succeeds; that one is kept.
        assert_eq!(kept.read(class_net, "ens1f0np0", request), failed);
        std::fs::write(&enable, "1\n").unwrap();
        let read = kept.read(class_net, "ens1f0np0", request);
        assert!(read.errors.is_empty());
        assert_eq!(
            read.settings.as_ref().unwrap().enabled(Point::Reaction, 3),
            Some(true)
        );
        std::fs::write(&enable, "").unwrap();
        assert_eq!(kept.read(class_net, "ens1f0np0", request), read);
    }

    #[test]
    fn nothing_asked_reads_nothing() {
        let read = read(&class_net(), "ens1f0np0", Request::default());
        assert_eq!(read, EcnRead::default());
    }

    fn port_with(settings: EcnSettings) -> (Device, Port) {
        let port = Port {
            number: 1,
            number_text: "1".into(),
            netdev: Some("ens1f0np0".into()),
            ecn: EcnRead {
                settings: Some(settings),
                errors: Vec::new(),
            },
            ..Port::default()
        };
        let device = Device {
            name: "mlx5_0".into(),
            ..Device::default()
        };
        (device, port)
    }

    fn samples(device: &Device, port: &Port) -> Vec<String> {
        let mut families = Families::default();
        let mut issues = Vec::new();
        add_metrics(&mut families, device, port, &mut issues);
        families.sample_lines()
    }

    #[test]
    fn series_follow_what_was_read_in_base_units() {
        let mut settings = EcnSettings::default();
        settings.set(Point::Reaction, 3, false);
        settings.set(Point::Notification, 3, true);
        let index = |file| PARAMETERS.iter().position(|p| p.file == file).unwrap();
        settings.parameters = vec![
            (index("rpg_ai_rate"), 5),
            (index("rpg_time_reset"), 300),
            (index("initial_alpha_value"), 1024),
            (index("cnp_dscp"), 48),
        ];
        let (device, port) = port_with(settings);
        let got = samples(&device, &port);
        let base = "device=mlx5_0,port=1,netdev=ens1f0np0";
        assert_eq!(
            got,
            vec![
                format!("rdma_ecn_enabled{{{base},priority=3,point=reaction}} 0"),
                format!("rdma_ecn_enabled{{{base},priority=3,point=notification}} 1"),
                format!("rdma_dcqcn_rp_ai_rate_bytes_per_second{{{base}}} 625000"),
                format!("rdma_dcqcn_rp_time_reset_seconds{{{base}}} 0.0003"),
                format!("rdma_dcqcn_rp_initial_alpha_ratio{{{base}}} 1"),
                format!("rdma_dcqcn_np_cnp_dscp{{{base}}} 48"),
            ]
        );
    }

    #[test]
    fn read_errors_become_issues_of_the_device() {
        let (device, mut port) = port_with(EcnSettings::default());
        port.ecn.errors.push(EcnError {
            reason: ReadErrorReason::Parse,
            path: PathBuf::from("/sys/class/net/ens1f0np0/ecn/roce_rp/enable/3"),
            detail: "not a number".into(),
        });
        let mut families = Families::default();
        let mut issues = Vec::new();
        add_metrics(&mut families, &device, &port, &mut issues);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].device, "mlx5_0");
        assert_eq!(issues[0].reason, ReadErrorReason::Parse);
        assert!(issues[0].detail.contains("roce_rp/enable/3"));
    }

    #[test]
    fn metric_names_are_unique_and_lint_clean() {
        let mut names: Vec<&str> = PARAMETERS.iter().map(|p| p.metric).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PARAMETERS.len());
        for name in names {
            assert!(name.starts_with("rdma_dcqcn_"), "{name}");
            assert!(
                !name.ends_with("_total"),
                "{name}: a setting, not a counter"
            );
        }
    }
}
