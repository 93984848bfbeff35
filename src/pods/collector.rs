//! The `pods` collector (off unless configured): which pod and container the kubelet gave each
//! RDMA device (`rdma_device_pod_info`, for joins in dcgm-exporter's style), and each pod's RDMA
//! cgroup use and limit. The kubelet and the cgroup tree are read on a thread of its own every
//! `pods.interval`; a scrape serves the last reading. Queue pairs per pod come from the
//! `netlink` collector, whose owners this module's [`owner_resolver`] names.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::config::PodsConfig;
use super::{cgroup, device_map, pod_names, pod_resources, rdma_cgroup};
use super::{PodName, PodRdmaCgroup, PodsError};
use crate::exposition::{Families, Value};
use crate::node::netlink_collector::{OwnerResolver, QpOwner};
use crate::periodic::{PeriodicCollector, Served};

/// A failed read's source and reason.
type ErrorKey = (&'static str, &'static str);

/// One reading of the kubelet and the cgroup tree.
#[derive(Debug, Default)]
pub struct Reading {
    /// (device, port, netdev, namespace, pod, container, resource).
    devices: BTreeSet<[String; 7]>,
    cgroups: Vec<(Option<PodName>, PodRdmaCgroup)>,
    /// Which parts failed, by source and reason.
    failures: Vec<(&'static str, PodsError)>,
}

pub type PodsCollector = PeriodicCollector<PodsConfig>;

impl PodsCollector {
    /// Starts the reading thread; the first reading starts at once.
    pub fn spawn(config: PodsConfig, sysfs_root: PathBuf) -> io::Result<PodsCollector> {
        // The kubelet client is async; the reading thread drives it on a runtime of its own,
        // so a slow kubelet never holds a worker of the server's runtime.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread_config = config.clone();
        let mut logged: BTreeSet<ErrorKey> = BTreeSet::new();
        PeriodicCollector::start("pods", config, move |errors| {
            let reading = read(&thread_config, &sysfs_root, &runtime);
            for (source, error) in &reading.failures {
                errors.add((*source, error.reason()));
                // Once per kind: a missing socket fails the same way every interval.
                if logged.insert((source, error.reason())) {
                    tracing::warn!("pods collector: {source}: {error}");
                }
            }
            reading
        })
    }
}

fn read(config: &PodsConfig, sysfs_root: &Path, runtime: &tokio::runtime::Runtime) -> Reading {
    let mut reading = Reading::default();
    match runtime.block_on(pod_resources::list(
        &config.pod_resources_socket,
        config.timeout,
    )) {
        Ok(assigned) => {
            for a in assigned {
                for target in device_map::resolve(sysfs_root, &a.device_id) {
                    reading.devices.insert([
                        target.device,
                        target.port.to_string(),
                        target.netdev,
                        a.namespace.clone(),
                        a.pod.clone(),
                        a.container.clone(),
                        a.resource.clone(),
                    ]);
                }
            }
        }
        Err(e) => reading.failures.push(("pod_resources", e)),
    }
    let names = match pod_names::read(&config.pod_logs_dir) {
        Ok(names) => names,
        Err(e) => {
            reading.failures.push(("pod_names", e));
            HashMap::new()
        }
    };
    let cgroup_root = config
        .cgroup_path
        .clone()
        .unwrap_or_else(|| sysfs_root.join("fs/cgroup"));
    match rdma_cgroup::scan(&cgroup_root, &rdma_cgroup::ScanLimits::default()) {
        Ok(cgroups) => {
            reading.cgroups = cgroups
                .into_iter()
                .map(|c| (names.get(&c.pod_uid).cloned(), c))
                .collect();
        }
        Err(e) => reading.failures.push(("rdma_cgroup", e)),
    }
    reading
}

impl Served for PodsConfig {
    const NAME: &'static str = "pods";
    type Reading = Reading;
    type ErrorKey = ErrorKey;

    fn interval(&self) -> Duration {
        self.interval
    }

    fn slowest_reading(&self) -> Duration {
        self.timeout.saturating_mul(2)
    }

    fn add_metrics<'a>(
        &self,
        families: &mut Families<'a>,
        reading: &'a Reading,
        errors: &BTreeMap<ErrorKey, u64>,
    ) {
        for [device, port, netdev, namespace, pod, container, resource] in &reading.devices {
            families.info(
                "rdma_device_pod_info",
                "An RDMA port the kubelet assigned to a container (pod-resources API), for joins: * on (device, port) group_left(namespace, pod, container) rdma_device_pod_info.",
                vec![
                    ("device", Cow::Borrowed(device.as_str())),
                    ("port", Cow::Borrowed(port.as_str())),
                    ("netdev", Cow::Borrowed(netdev.as_str())),
                    ("namespace", Cow::Borrowed(namespace.as_str())),
                    ("pod", Cow::Borrowed(pod.as_str())),
                    ("container", Cow::Borrowed(container.as_str())),
                    ("resource", Cow::Borrowed(resource.as_str())),
                ],
            );
        }
        for (name, cgroup) in &reading.cgroups {
            let (namespace, pod) = name
                .as_ref()
                .map_or(("", ""), |n| (n.namespace.as_str(), n.pod.as_str()));
            for (device, use_) in &cgroup.devices {
                for (resource, current, max) in [
                    ("hca_handle", use_.hca_handle, use_.max_hca_handle),
                    ("hca_object", use_.hca_object, use_.max_hca_object),
                ] {
                    let labels = vec![
                        ("namespace", Cow::Borrowed(namespace)),
                        ("pod", Cow::Borrowed(pod)),
                        ("pod_uid", Cow::Borrowed(cgroup.pod_uid.as_str())),
                        ("device", Cow::Borrowed(device.as_str())),
                        ("resource", Cow::Borrowed(resource)),
                    ];
                    families.gauge(
                        "rdma_pod_cgroup_usage",
                        "What the pod's RDMA cgroup charges now on the device (rdma.current): hca_handle (contexts) or hca_object (QPs, CQs, MRs, PDs, SRQs...).",
                        labels.clone(),
                        Value::U64(current),
                    );
                    if let Some(max) = max {
                        families.gauge(
                            "rdma_pod_cgroup_limit",
                            "The pod's RDMA cgroup limit on the device (rdma.max); absent where it is max (no limit).",
                            labels,
                            Value::U64(max),
                        );
                    }
                }
            }
        }
        for ((source, reason), count) in errors {
            families.counter(
                "rdma_exporter_pods_errors_total",
                "Reads of the pods collector that failed, by source (pod_resources, pod_names, rdma_cgroup) and reason.",
                vec![
                    ("source", Cow::Borrowed(*source)),
                    ("reason", Cow::Borrowed(*reason)),
                ],
                Value::U64(*count),
            );
        }
    }

    /// The kubelet answered (a pod without an RDMA cgroup or a missing log directory only
    /// leaves names or limits out).
    fn ok(&self, reading: &Reading) -> bool {
        !reading.failures.iter().any(|(s, _)| *s == "pod_resources")
    }
}

/// Names the owner of a queue pair: its container from `/proc/<pid>/cgroup`, its pod's name
/// from the pod log directories when `pod_logs_dir` is given (re-listed at most every 10 s).
pub fn owner_resolver(proc_root: PathBuf, pod_logs_dir: Option<PathBuf>) -> OwnerResolver {
    const NAMES_TTL: Duration = Duration::from_secs(10);
    let names: Mutex<Option<(Instant, HashMap<String, PodName>)>> = Mutex::new(None);
    Arc::new(move |pid| {
        let container = cgroup::container_of_pid(&proc_root, pid).ok()??;
        let mut owner = QpOwner {
            pod_uid: container.pod_uid,
            container_id: container.container_id,
            ..QpOwner::default()
        };
        if let Some(dir) = &pod_logs_dir {
            let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
            if names
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() > NAMES_TTL)
            {
                *names = Some((Instant::now(), pod_names::read(dir).unwrap_or_default()));
            }
            if let Some(name) = names.as_ref().and_then(|(_, n)| n.get(&owner.pod_uid)) {
                owner.namespace = name.namespace.clone();
                owner.pod = name.pod.clone();
            }
        }
        Some(owner)
    })
}
