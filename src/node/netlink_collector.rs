//! The `netlink` collector: RDMA resources and queue pairs over RDMA netlink, and the optional
//! hardware counters sysfs never shows. The kernel is asked on a thread of its own every
//! `node.netlink.interval` (a QP dump of a busy node is large and takes device locks); a scrape
//! serves the last reading. Queue pairs are counted per owner at the container level: per-pid
//! series only on request, since pids churn.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::rdma_netlink::{NetlinkError, NetlinkLimits, NetlinkSnapshot, NetlinkSource};
use crate::exposition::{sanitize_name_part, Families, Value};
use crate::periodic::{ErrorCounts, PeriodicCollector, Served};

/// `node.netlink`: the `netlink` collector.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetlinkConfig {
    pub enabled: bool,
    /// How often the kernel is asked.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub interval: Duration,
    /// Each request's whole answer must arrive within this.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub timeout: Duration,
    /// A dump stops past this many bytes (the QPs of a node with ~100 000 of them).
    pub max_dump_bytes: u64,
    /// Dump queue pairs.
    pub qps: bool,
    /// Add a `pid` label to the QPs per owner (one series per process: they churn).
    pub qps_per_pid: bool,
    /// Read port statistics for the optional counters sysfs does not show.
    pub port_stats: bool,
}

impl Default for NetlinkConfig {
    fn default() -> Self {
        NetlinkConfig {
            enabled: true,
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            max_dump_bytes: 16 << 20,
            qps: true,
            qps_per_pid: false,
            port_stats: true,
        }
    }
}

impl NetlinkConfig {
    fn limits(&self) -> NetlinkLimits {
        NetlinkLimits {
            timeout: self.timeout,
            max_dump_bytes: usize::try_from(self.max_dump_bytes).unwrap_or(usize::MAX),
            qps: self.qps,
            port_stats: self.port_stats,
        }
    }
}

/// Who holds a queue pair, at the container level. Empty fields are unknown: a process outside
/// any pod, or a pod whose name is not known here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpOwner {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container_id: String,
}

/// From a pid (as the netlink answer gives it) to its container and pod.
pub type OwnerResolver = Arc<dyn Fn(u32) -> Option<QpOwner> + Send + Sync>;

/// QPs counted by device, type and owner; `pid` only with `qps_per_pid`.
type OwnerKey = (String, String, QpOwner, String, Option<u32>);

/// One reading, already aggregated so that a scrape only encodes.
#[derive(Debug, Default)]
pub struct Reading {
    /// `None`: RDMA netlink is not available here.
    available: bool,
    resources: Vec<(String, String, u64)>,
    /// (device, port, type, state) -> QPs.
    qps: BTreeMap<(String, String, String, String), u64>,
    qps_by_owner: BTreeMap<OwnerKey, u64>,
    qps_truncated: bool,
    /// Counters of `CMD_STAT_GET` that the port's `hw_counters` directory does not hold.
    optional_counters: Vec<(String, String, String, u64)>,
    failed_requests: usize,
}

/// The collector: the last reading, and the thread that makes them.
pub type NetlinkCollector = PeriodicCollector<NetlinkConfig>;

impl NetlinkCollector {
    /// Starts the reading thread; the first reading starts at once. `sysfs_root` tells which
    /// counters sysfs already exports (those are left to the `sysfs` collector).
    pub fn spawn(
        source: Arc<dyn NetlinkSource>,
        config: NetlinkConfig,
        sysfs_root: PathBuf,
        owners: OwnerResolver,
    ) -> io::Result<NetlinkCollector> {
        let limits = config.limits();
        let thread_config = config.clone();
        let mut unavailable_logged = false;
        PeriodicCollector::start("rdma-netlink", config, move |errors| {
            match source.read(&limits) {
                Ok(snapshot) => {
                    count_failures(errors, &snapshot.failures);
                    aggregate(snapshot, &thread_config, &sysfs_root, owners.as_ref())
                }
                Err(e) => {
                    // Once per process: where the kernel has no RDMA netlink every reading
                    // fails the same way.
                    if !std::mem::replace(&mut unavailable_logged, true) {
                        tracing::warn!(
                            "{e}; the netlink collector exports nothing and reports success 0 \
                             (--no-collector.netlink turns it off)"
                        );
                    }
                    Reading::default()
                }
            }
        })
    }
}

fn count_failures(errors: &ErrorCounts<&'static str>, failures: &[NetlinkError]) {
    for failure in failures {
        errors.add(failure.reason());
        tracing::debug!("RDMA netlink: {failure}");
    }
}

fn aggregate(
    snapshot: NetlinkSnapshot,
    config: &NetlinkConfig,
    sysfs_root: &Path,
    owners: &(dyn Fn(u32) -> Option<QpOwner> + Send + Sync),
) -> Reading {
    let mut reading = Reading {
        available: true,
        qps_truncated: snapshot.qps_truncated,
        failed_requests: snapshot.failures.len(),
        ..Reading::default()
    };
    for device in &snapshot.devices {
        for (resource, count) in &device.summary {
            reading
                .resources
                .push((device.name.clone(), resource.clone(), *count));
        }
    }
    // One cgroup read per process, not per QP.
    let mut owner_of: HashMap<u32, QpOwner> = HashMap::new();
    for qp in &snapshot.qps {
        let port = qp.port.map(|p| p.to_string()).unwrap_or_default();
        let qp_type = qp.qp_type.as_label().into_owned();
        *reading
            .qps
            .entry((
                qp.device.clone(),
                port,
                qp_type.clone(),
                qp.state.as_label().into_owned(),
            ))
            .or_default() += 1;
        let owner = match qp.pid {
            Some(pid) => owner_of
                .entry(pid)
                .or_insert_with(|| owners(pid).unwrap_or_default())
                .clone(),
            None => QpOwner::default(),
        };
        let pid = qp.pid.filter(|_| config.qps_per_pid);
        *reading
            .qps_by_owner
            .entry((qp.device.clone(), qp_type, owner, qp.owner.clone(), pid))
            .or_default() += 1;
    }
    for port in &snapshot.port_stats {
        let in_sysfs = hw_counter_names(sysfs_root, &port.device, port.port);
        for (name, value) in &port.counters {
            if !in_sysfs.contains(name) {
                reading.optional_counters.push((
                    port.device.clone(),
                    port.port.to_string(),
                    name.clone(),
                    *value,
                ));
            }
        }
    }
    reading
}

/// The counters the `sysfs` collector exports for a port. Optional counters (`cc_rx_ce_pkts`,
/// `rdma_tx_bytes`, ...) are never files there; the kernel skips them in sysfs.
fn hw_counter_names(sysfs_root: &Path, device: &str, port: u32) -> HashSet<String> {
    let dir = sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("hw_counters");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Served for NetlinkConfig {
    const NAME: &'static str = "netlink";
    type Reading = Reading;
    type ErrorKey = &'static str;

    fn interval(&self) -> Duration {
        self.interval
    }

    /// A reading's few requests, each at its timeout.
    fn slowest_reading(&self) -> Duration {
        self.timeout.saturating_mul(8)
    }

    fn add_metrics<'a>(
        &self,
        families: &mut Families<'a>,
        reading: &'a Reading,
        errors: &BTreeMap<&'static str, u64>,
    ) {
        for (device, resource, count) in &reading.resources {
            families.gauge(
                "rdma_device_resources",
                "RDMA objects of this type the device holds now (RDMA netlink resource summary: qp, cq, mr, pd, cm_id, ctx, srq).",
                vec![
                    ("device", Cow::Borrowed(device.as_str())),
                    ("resource", Cow::Borrowed(resource.as_str())),
                ],
                Value::U64(*count),
            );
        }
        for ((device, port, qp_type, state), count) in &reading.qps {
            families.gauge(
                "rdma_qps",
                "Queue pairs on the device by port (empty: not bound yet), type and state, as RDMA netlink lists them.",
                vec![
                    ("device", Cow::Borrowed(device.as_str())),
                    ("port", Cow::Borrowed(port.as_str())),
                    ("qp_type", Cow::Borrowed(qp_type.as_str())),
                    ("state", Cow::Borrowed(state.as_str())),
                ],
                Value::U64(*count),
            );
        }
        for ((device, qp_type, owner, process, pid), count) in &reading.qps_by_owner {
            let mut labels = vec![
                ("device", Cow::Borrowed(device.as_str())),
                ("qp_type", Cow::Borrowed(qp_type.as_str())),
                ("namespace", Cow::Borrowed(owner.namespace.as_str())),
                ("pod", Cow::Borrowed(owner.pod.as_str())),
                ("pod_uid", Cow::Borrowed(owner.pod_uid.as_str())),
                ("container_id", Cow::Borrowed(owner.container_id.as_str())),
                ("owner", Cow::Borrowed(process.as_str())),
            ];
            if let Some(pid) = pid {
                labels.push(("pid", Cow::Owned(pid.to_string())));
            }
            families.gauge(
                "rdma_owner_qps",
                "Queue pairs on the device by type and owner: the pod and container of the process (empty outside a pod), and the process or kernel module name.",
                labels,
                Value::U64(*count),
            );
        }
        for (device, port, name, value) in &reading.optional_counters {
            // Not `rdma_hw_*`: a counter optional on one device may be a sysfs file on another,
            // and one family must not come from two collectors.
            let exposed = format!("{}{}_total", "rdma_optional_", sanitize_name_part(name));
            let added = families.add(
                &exposed,
                crate::exposition::Kind::Counter,
                "Optional hardware counter of the port, read over RDMA netlink (the kernel does not show optional counters in sysfs; an administrator enables them with `rdma statistic set`).",
                vec![
                    ("device", Cow::Borrowed(device.as_str())),
                    ("port", Cow::Borrowed(port.as_str())),
                ],
                Value::U64(*value),
            );
            if let Err(e) = added {
                tracing::debug!("RDMA netlink counter {name}: {e}");
            }
        }
        if reading.available {
            families.gauge(
                "rdma_exporter_netlink_qps_truncated",
                "1 if the last QP dump stopped at node.netlink.max_dump_bytes: the QP series count only the QPs before it.",
                Vec::new(),
                Value::U64(u64::from(reading.qps_truncated)),
            );
        }
        for (reason, count) in errors {
            families.counter(
                "rdma_exporter_netlink_errors_total",
                "RDMA netlink requests that failed, by reason; the other requests of the reading are still served.",
                vec![("reason", Cow::Borrowed(*reason))],
                Value::U64(*count),
            );
        }
    }

    /// Netlink available and no request failed.
    fn ok(&self, reading: &Reading) -> bool {
        reading.available && reading.failed_requests == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::Collector;
    use crate::node::rdma_netlink::{DeviceResources, PortStatistics, QpState, QpType, QueuePair};
    use crate::testutil::scrape;

    /// Answers with a fixed snapshot, or as a kernel without RDMA netlink.
    #[derive(Debug)]
    struct Fixed(Option<NetlinkSnapshot>);

    impl NetlinkSource for Fixed {
        fn read(&self, _: &NetlinkLimits) -> Result<NetlinkSnapshot, NetlinkError> {
            self.0.clone().ok_or_else(|| {
                NetlinkError::Unavailable(Arc::new(io::Error::from_raw_os_error(
                    libc::EPROTONOSUPPORT,
                )))
            })
        }
    }

    fn qp(
        device: &str,
        qp_type: QpType,
        state: QpState,
        pid: Option<u32>,
        owner: &str,
    ) -> QueuePair {
        QueuePair {
            device: device.into(),
            port: Some(1),
            lqpn: 7,
            qp_type,
            state,
            pid,
            owner: owner.into(),
        }
    }

    fn node() -> NetlinkSnapshot {
        NetlinkSnapshot {
            devices: vec![DeviceResources {
                index: 0,
                name: "mlx5_0".into(),
                summary: BTreeMap::from([("qp".into(), 4), ("cq".into(), 9)]),
            }],
            qps: vec![
                qp("mlx5_0", QpType::Gsi, QpState::Rts, None, "ib_core"),
                qp("mlx5_0", QpType::Rc, QpState::Rts, Some(10), "python3"),
                qp("mlx5_0", QpType::Rc, QpState::Rts, Some(11), "python3"),
                qp(
                    "mlx5_0",
                    QpType::Ud,
                    QpState::Init,
                    Some(12),
                    "ibv_ud_pingpong",
                ),
            ],
            qps_truncated: false,
            port_stats: vec![PortStatistics {
                device: "mlx5_0".into(),
                port: 1,
                counters: vec![("out_of_buffer".into(), 5), ("cc_rx_ce_pkts".into(), 42)],
            }],
            failures: vec![NetlinkError::NotSupported {
                command: "RES_CQ_GET",
            }],
        }
    }

    /// pids 10 and 11 run in one container; 12 on the host.
    fn owners() -> OwnerResolver {
        Arc::new(|pid| {
            (pid != 12).then(|| QpOwner {
                namespace: "ml".into(),
                pod: "worker-0".into(),
                pod_uid: "uid-1".into(),
                container_id: "c1".into(),
            })
        })
    }

    fn started(source: Fixed, config: NetlinkConfig, sysfs: &Path) -> Arc<NetlinkCollector> {
        let collector = Arc::new(
            NetlinkCollector::spawn(Arc::new(source), config, sysfs.into(), owners()).unwrap(),
        );
        collector.assert_first_reading();
        collector
    }

    #[test]
    fn queue_pairs_are_counted_per_container_not_per_process() {
        let sysfs = tempfile::tempdir().unwrap();
        let hw = sysfs
            .path()
            .join("class/infiniband/mlx5_0/ports/1/hw_counters");
        std::fs::create_dir_all(&hw).unwrap();
        std::fs::write(hw.join("out_of_buffer"), "5\n").unwrap();
        let collector = started(Fixed(Some(node())), NetlinkConfig::default(), sysfs.path());
        let text = scrape(&collector);
        for line in [
            r#"rdma_device_resources{device="mlx5_0",resource="qp"} 4"#,
            r#"rdma_qps{device="mlx5_0",port="1",qp_type="RC",state="RTS"} 2"#,
            r#"rdma_qps{device="mlx5_0",port="1",qp_type="UD",state="INIT"} 1"#,
            r#"rdma_owner_qps{device="mlx5_0",qp_type="RC",namespace="ml",pod="worker-0",pod_uid="uid-1",container_id="c1",owner="python3"} 2"#,
            r#"rdma_owner_qps{device="mlx5_0",qp_type="GSI",namespace="",pod="",pod_uid="",container_id="",owner="ib_core"} 1"#,
            r#"rdma_owner_qps{device="mlx5_0",qp_type="UD",namespace="",pod="",pod_uid="",container_id="",owner="ibv_ud_pingpong"} 1"#,
            // Only the counter sysfs does not show.
            r#"rdma_optional_cc_rx_ce_pkts_total{device="mlx5_0",port="1"} 42"#,
            r#"rdma_exporter_netlink_errors_total{reason="unsupported"} 1"#,
            r#"rdma_exporter_netlink_qps_truncated 0"#,
            // A request failed: the reading is served, but not as a success.
            r#"rdma_exporter_collector_success{collector="netlink"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("out_of_buffer"), "{text}");
        assert!(!text.contains("pid="), "pids only on request:\n{text}");
    }

    #[test]
    fn per_pid_series_come_on_request() {
        let sysfs = tempfile::tempdir().unwrap();
        let config = NetlinkConfig {
            qps_per_pid: true,
            ..NetlinkConfig::default()
        };
        let text = scrape(&started(Fixed(Some(node())), config, sysfs.path()));
        assert!(
            text.contains(r#"container_id="c1",owner="python3",pid="10"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn a_kernel_without_rdma_netlink_gives_success_0_and_nothing_else() {
        let sysfs = tempfile::tempdir().unwrap();
        let collector = started(Fixed(None), NetlinkConfig::default(), sysfs.path());
        let text = scrape(&collector);
        assert!(
            text.contains(r#"rdma_exporter_collector_success{collector="netlink"} 0"#),
            "{text}"
        );
        assert!(
            !text.contains("rdma_qps") && !text.contains("truncated"),
            "{text}"
        );
        collector.retire();
    }
}
