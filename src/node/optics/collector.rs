//! The `transceiver` collector (opt-in: the kernel's module EEPROM reads need CAP_NET_ADMIN,
//! and the default collectors need no capability). Module memory is read over I2C by the NIC's
//! firmware, slowly, so it is read on a thread of its own every `node.transceiver.interval`,
//! never at scrape time; each module's read runs on its own thread and is waited for at most
//! `node.transceiver.timeout`, so a module that never answers costs only its own series (and
//! is not asked again until its read returns).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde::Deserialize;

use super::{read_module, ModulePages, ModuleReading, ReadFailure};
use crate::exposition::{Families, Label, Value};
use crate::node::sysfs::{port_netdevs, DeviceFilter, PortNetdev};
use crate::periodic::{ErrorCounts, PeriodicCollector, Served};

/// Where module pages come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TransceiverSourceKind {
    /// ethtool netlink page reads, the SIOCETHTOOL ioctl as fallback (needs CAP_NET_ADMIN).
    #[default]
    Kernel,
    /// `<modules_dir>/<netdev>/` page files (fixtures, simulation).
    Files,
}

/// `node.transceiver`: the `transceiver` collector.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransceiverConfig {
    /// Off by default: the kernel reads need CAP_NET_ADMIN.
    pub enabled: bool,
    /// How often every module is read.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub interval: Duration,
    /// A module's whole read (and each netlink request of it) must end within this.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub timeout: Duration,
    pub source: TransceiverSourceKind,
    /// Required with `source: files`.
    pub modules_dir: Option<PathBuf>,
}

impl Default for TransceiverConfig {
    fn default() -> Self {
        TransceiverConfig {
            enabled: false,
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            source: TransceiverSourceKind::Kernel,
            modules_dir: None,
        }
    }
}

impl TransceiverConfig {
    /// The page files' directory and the file source go together.
    pub fn check(&self) -> Result<(), String> {
        match (self.source, &self.modules_dir) {
            (TransceiverSourceKind::Files, None) => {
                Err("transceiver.modules_dir is required when transceiver.source is `files`".into())
            }
            (TransceiverSourceKind::Kernel, Some(_)) => {
                Err("transceiver.modules_dir is only used with `transceiver.source: files`".into())
            }
            _ => Ok(()),
        }
    }

    /// The source the config names. A module's read asks up to five pages, one request at a
    /// time on one netlink socket: each request gets a fifth of the module's bound, so one
    /// stuck request cannot hold the socket for the next module's whole bound.
    pub fn pages(&self) -> Arc<dyn ModulePages> {
        match (self.source, &self.modules_dir) {
            (TransceiverSourceKind::Files, Some(dir)) => {
                Arc::new(super::files::FilePages::new(dir))
            }
            _ => Arc::new(super::kernel::KernelPages::new(
                (self.timeout / 5).max(Duration::from_millis(200)),
            )),
        }
    }
}

/// What one port's read found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ModuleState {
    /// No module, or none the kernel can read (a DAC without EEPROM access, a soft device).
    Absent,
    Present(Box<ModuleReading>),
    Failed(ReadFailure),
}

#[derive(Debug, Default)]
pub struct Reading {
    ports: Vec<(PortNetdev, ModuleState)>,
}

/// The collector: the last reading and the thread that makes them.
pub type TransceiverCollector = PeriodicCollector<TransceiverConfig>;

impl TransceiverCollector {
    /// Starts the reading thread; the first reading starts at once.
    pub fn spawn(
        pages: Arc<dyn ModulePages>,
        config: TransceiverConfig,
        sysfs_root: PathBuf,
        devices: DeviceFilter,
    ) -> io::Result<TransceiverCollector> {
        let timeout = config.timeout;
        // Netdevs whose previous read has not returned yet.
        let mut busy: HashMap<String, Arc<AtomicBool>> = HashMap::new();
        // Failure kinds already logged at warn level (then debug): EPERM on every port of
        // every reading must not flood the log.
        let mut warned = HashSet::new();
        PeriodicCollector::start("transceiver", config, move |errors| {
            let ports = list_ports(&sysfs_root, &devices);
            let mut read = Vec::with_capacity(ports.len());
            for port in ports {
                let state = read_bounded(&pages, &port.netdev, timeout, &mut busy);
                if let ModuleState::Failed(failure) = &state {
                    count_failure(errors, &mut warned, *failure, &port);
                }
                read.push((port, state));
            }
            Reading { ports: read }
        })
    }
}

/// One module's read on a thread of its own, waited for at most `timeout`.
fn read_bounded(
    pages: &Arc<dyn ModulePages>,
    netdev: &str,
    timeout: Duration,
    busy: &mut HashMap<String, Arc<AtomicBool>>,
) -> ModuleState {
    let flag = busy.entry(netdev.to_string()).or_default().clone();
    if flag.load(Ordering::Acquire) {
        // The previous read is still stuck in the driver: do not pile up threads behind it.
        return ModuleState::Failed(ReadFailure::Timeout);
    }
    flag.store(true, Ordering::Release);
    let (send, receive) = mpsc::channel();
    let (thread_pages, thread_netdev, thread_flag) =
        (pages.clone(), netdev.to_string(), flag.clone());
    let spawned = std::thread::Builder::new()
        .name("transceiver-read".into())
        .spawn(move || {
            let result = read_module(thread_pages.as_ref(), &thread_netdev);
            thread_flag.store(false, Ordering::Release);
            let _ = send.send(result);
        });
    if spawned.is_err() {
        flag.store(false, Ordering::Release);
        return ModuleState::Failed(ReadFailure::Io);
    }
    match receive.recv_timeout(timeout) {
        Ok(Ok(Some(reading))) => ModuleState::Present(Box::new(reading)),
        Ok(Ok(None)) => ModuleState::Absent,
        Ok(Err(e)) => {
            tracing::debug!("transceiver of {netdev}: {e}");
            ModuleState::Failed(e.failure())
        }
        Err(_) => ModuleState::Failed(ReadFailure::Timeout),
    }
}

fn count_failure(
    errors: &ErrorCounts<ReadFailure>,
    warned: &mut HashSet<ReadFailure>,
    failure: ReadFailure,
    port: &PortNetdev,
) {
    errors.add(failure);
    if warned.insert(failure) {
        let hint = if failure == ReadFailure::Permission {
            " (the transceiver collector needs CAP_NET_ADMIN)"
        } else {
            ""
        };
        tracing::warn!(
            "transceiver of {} port {} ({}): read failed, reason {}{hint}; further failures of this kind are logged at debug level",
            port.device,
            port.port,
            port.netdev,
            failure.as_label()
        );
    }
}

/// The RDMA ports with a netdev, as the sysfs walk names them (any link layer: an InfiniBand
/// port has a cage too). A netdev is read once even if two ports share it.
pub(crate) fn list_ports(sysfs_root: &Path, devices: &DeviceFilter) -> Vec<PortNetdev> {
    let mut seen = HashSet::new();
    port_netdevs(sysfs_root, devices, false)
        .into_iter()
        .filter(|p| seen.insert(p.netdev.clone()))
        .collect()
}

/// A port's module labels; `lane` and `level` are added per sample.
fn port_labels(port: &PortNetdev) -> Vec<Label<'_>> {
    vec![
        ("device", Cow::Borrowed(port.device.as_str())),
        ("port", Cow::Borrowed(port.port.as_str())),
        ("netdev", Cow::Borrowed(port.netdev.as_str())),
    ]
}

fn with<'a>(mut labels: Vec<Label<'a>>, extra: &[(&'static str, Cow<'a, str>)]) -> Vec<Label<'a>> {
    labels.extend(extra.iter().cloned());
    labels
}

impl Served for TransceiverConfig {
    const NAME: &'static str = "transceiver";
    type Reading = Reading;
    type ErrorKey = ReadFailure;

    fn interval(&self) -> Duration {
        self.interval
    }

    /// A few modules at their timeout.
    fn slowest_reading(&self) -> Duration {
        self.timeout.saturating_mul(4)
    }

    fn add_metrics<'a>(
        &self,
        families: &mut Families<'a>,
        reading: &'a Reading,
        errors: &BTreeMap<ReadFailure, u64>,
    ) {
        for (port, state) in &reading.ports {
            let labels = port_labels(port);
            let module = match state {
                ModuleState::Failed(_) => continue,
                ModuleState::Absent => None,
                ModuleState::Present(module) => Some(module),
            };
            families.gauge(
                "rdma_transceiver_present",
                "1 if the port's netdev has a module the kernel can read (an optic or an active cable), 0 if not (an empty cage, a DAC without readable EEPROM, a soft device).",
                labels.clone(),
                Value::U64(u64::from(module.is_some())),
            );
            let Some(module) = module else { continue };
            families.info(
                "rdma_transceiver_info",
                "The port's module as its EEPROM names it: SFF-8024 identifier, management standard, vendor, part number, revision and serial number.",
                with(
                    labels.clone(),
                    &[
                        ("identifier", Cow::Borrowed(module.identifier_name())),
                        ("standard", Cow::Borrowed(module.standard.as_label())),
                        ("vendor", Cow::Borrowed(module.vendor.as_str())),
                        ("part_number", Cow::Borrowed(module.part_number.as_str())),
                        ("revision", Cow::Borrowed(module.revision.as_str())),
                        ("serial_number", Cow::Borrowed(module.serial_number.as_str())),
                    ],
                ),
            );
            let Some(diagnostics) = &module.diagnostics else {
                continue;
            };
            if let Some(celsius) = diagnostics.temperature_celsius {
                families.gauge(
                    "rdma_transceiver_temperature_celsius",
                    "Module temperature the module measures (its digital diagnostics).",
                    labels.clone(),
                    Value::F64(celsius),
                );
            }
            if let Some(volts) = diagnostics.supply_voltage_volts {
                families.gauge(
                    "rdma_transceiver_supply_voltage_volts",
                    "Module supply voltage (Vcc) the module measures.",
                    labels.clone(),
                    Value::F64(volts),
                );
            }
            for lane in &diagnostics.lanes {
                let lane_labels = with(
                    labels.clone(),
                    &[("lane", Cow::Owned(lane.lane.to_string()))],
                );
                if let Some(watts) = lane.tx_power_watts {
                    families.gauge(
                        "rdma_transceiver_tx_power_watts",
                        "Optical power the module transmits on the lane (0: no light).",
                        lane_labels.clone(),
                        Value::F64(watts),
                    );
                }
                if let Some(watts) = lane.rx_power_watts {
                    families.gauge(
                        "rdma_transceiver_rx_power_watts",
                        "Optical power the module receives on the lane (0: no light); average power or OMA, as the module measures.",
                        lane_labels.clone(),
                        Value::F64(watts),
                    );
                }
                if let Some(amperes) = lane.bias_current_amperes {
                    families.gauge(
                        "rdma_transceiver_bias_current_amperes",
                        "Laser bias current on the lane.",
                        lane_labels,
                        Value::F64(amperes),
                    );
                }
            }
            let t = &diagnostics.thresholds;
            let thresholds: [(&str, &'static str, _); 5] = [
                (
                    "rdma_transceiver_temperature_threshold_celsius",
                    "The module's own temperature alarm and warning thresholds, by level (high_alarm, high_warning, low_warning, low_alarm).",
                    t.temperature,
                ),
                (
                    "rdma_transceiver_supply_voltage_threshold_volts",
                    "The module's own supply voltage alarm and warning thresholds, by level.",
                    t.supply_voltage,
                ),
                (
                    "rdma_transceiver_tx_power_threshold_watts",
                    "The module's own transmit power alarm and warning thresholds (per module, for every lane), by level.",
                    t.tx_power,
                ),
                (
                    "rdma_transceiver_rx_power_threshold_watts",
                    "The module's own receive power alarm and warning thresholds (per module, for every lane), by level.",
                    t.rx_power,
                ),
                (
                    "rdma_transceiver_bias_current_threshold_amperes",
                    "The module's own laser bias current alarm and warning thresholds (per module, for every lane), by level.",
                    t.bias_current,
                ),
            ];
            for (name, help, levels) in thresholds {
                let Some(levels) = levels else { continue };
                for (level, value) in levels.labelled() {
                    families.gauge(
                        name,
                        help,
                        with(labels.clone(), &[("level", Cow::Borrowed(level))]),
                        Value::F64(value),
                    );
                }
            }
        }
        for (failure, count) in errors {
            families.counter(
                "rdma_exporter_transceiver_read_errors_total",
                "Module reads that failed, by reason (permission: the collector lacks CAP_NET_ADMIN); the port's transceiver series are left out of that reading.",
                vec![("reason", Cow::Borrowed(failure.as_label()))],
                Value::U64(*count),
            );
        }
    }

    /// Every port read or found empty.
    fn ok(&self, reading: &Reading) -> bool {
        !reading
            .ports
            .iter()
            .any(|(_, state)| matches!(state, ModuleState::Failed(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::optics::{PageError, PageRequest};
    use crate::testutil::scrape;
    use std::time::Instant;

    /// Every read answers with one error, or blocks forever.
    #[derive(Debug)]
    enum Behaviour {
        Refuse(fn() -> PageError),
        Hang,
    }

    impl ModulePages for Behaviour {
        fn read(&self, _: &str, _: PageRequest) -> Result<Vec<u8>, PageError> {
            match self {
                Behaviour::Refuse(error) => Err(error()),
                Behaviour::Hang => loop {
                    std::thread::park();
                },
            }
        }
    }

    fn sysfs_with_two_ports() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (device, netdev) in [("mlx5_0", "eth0"), ("mlx5_1", "eth1")] {
            let ndevs = root
                .path()
                .join("class/infiniband")
                .join(device)
                .join("ports/1/gid_attrs/ndevs");
            std::fs::create_dir_all(&ndevs).unwrap();
            std::fs::write(ndevs.join("0"), format!("{netdev}\n")).unwrap();
        }
        root
    }

    fn started(
        pages: Behaviour,
        timeout: Duration,
    ) -> (Arc<TransceiverCollector>, tempfile::TempDir) {
        let sysfs = sysfs_with_two_ports();
        let config = TransceiverConfig {
            enabled: true,
            timeout,
            ..TransceiverConfig::default()
        };
        let collector = Arc::new(
            TransceiverCollector::spawn(
                Arc::new(pages),
                config,
                sysfs.path().into(),
                DeviceFilter::default(),
            )
            .unwrap(),
        );
        collector.assert_first_reading();
        (collector, sysfs)
    }

    #[test]
    fn the_files_source_and_its_directory_go_together() {
        let parse = |text: &str| -> TransceiverConfig { serde_yaml::from_str(text).unwrap() };
        let config = parse("enabled: true\nsource: files\n");
        assert!(config
            .check()
            .unwrap_err()
            .contains("modules_dir is required"));
        let config = parse("modules_dir: /tmp/m\n");
        assert!(config.check().unwrap_err().contains("only used with"));
        let config = parse("source: files\nmodules_dir: /tmp/m\ninterval: 5s\n");
        assert_eq!(config.check(), Ok(()));
        assert_eq!(config.interval, Duration::from_secs(5));
        assert!(
            !TransceiverConfig::default().enabled,
            "opt-in: needs CAP_NET_ADMIN"
        );
    }

    #[test]
    fn ports_without_a_module_read_as_absent_not_as_errors() {
        let (collector, _sysfs) = started(
            Behaviour::Refuse(|| PageError::NoModule),
            Duration::from_secs(5),
        );
        let text = scrape(&collector);
        assert!(
            text.contains(r#"rdma_transceiver_present{device="mlx5_1",port="1",netdev="eth1"} 0"#),
            "{text}"
        );
        assert!(!text.contains("transceiver_read_errors"), "{text}");
        assert!(
            text.contains(r#"rdma_exporter_collector_success{collector="transceiver"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn eperm_is_counted_with_its_own_reason_and_no_series_is_made_up() {
        let (collector, _sysfs) = started(
            Behaviour::Refuse(|| PageError::Permission),
            Duration::from_secs(5),
        );
        let text = scrape(&collector);
        assert!(
            text.contains(r#"rdma_exporter_transceiver_read_errors_total{reason="permission"} 2"#),
            "{text}"
        );
        assert!(!text.contains("rdma_transceiver_present"), "{text}");
        assert!(
            text.contains(r#"rdma_exporter_collector_success{collector="transceiver"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn a_module_that_never_answers_costs_its_timeout_and_nothing_else() {
        let started_at = Instant::now();
        let (collector, _sysfs) = started(Behaviour::Hang, Duration::from_millis(200));
        // Two ports, each bounded by the timeout: the reading ends, it does not hang.
        assert!(started_at.elapsed() < Duration::from_secs(5));
        let text = scrape(&collector);
        assert!(
            text.contains(r#"rdma_exporter_transceiver_read_errors_total{reason="timeout"} 2"#),
            "{text}"
        );
    }
}
