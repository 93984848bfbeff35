//! What the simulated hosts run: a training job's worker pod, whose RC queue pairs grow with
//! the number of peers it talks to as the job scales out over each scenario cycle, and an
//! inference pod on UD queue pairs; plus the kernel's GSI QP on every port. The demo exposes
//! them through the `netlink` and `pods` collectors' own code: [`SimNetlink`] answers as the
//! kernel would, and [`write_host_files`] lays out the `/proc`, cgroup and kubelet files the
//! pod attribution reads.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::fabric::Fabric;
use super::pod_resources_server::pod;
use super::scenario::CYCLE_S;
use crate::node::rdma_netlink::{
    DeviceResources, NetlinkError, NetlinkLimits, NetlinkSnapshot, NetlinkSource, PortStatistics,
    QpState, QpType, QueuePair,
};
use crate::pods::pod_resources::proto::PodResources;

/// RC QPs a worker opens per peer and NIC (NCCL's default of 2 QPs per connection).
const RC_PER_PEER: u32 = 2;
/// Simulated seconds between two steps of the job's scale-out.
const SCALE_OUT_EVERY_S: f64 = 60.0;
/// UD QPs the inference server keeps per NIC it uses.
const INFERENCE_UD_QPS: u32 = 4;
/// The inference server uses the first NICs only.
const INFERENCE_NICS: usize = 2;
/// The RDMA cgroup limit of the training pod's objects (`rdma.max` hca_object).
pub const TRAINING_OBJECT_LIMIT: u64 = 400;

/// One simulated pod with one container and one process holding queue pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub container: String,
    pub container_id: String,
    pub pid: u32,
    pub comm: String,
    /// `burstable` or `guaranteed`: where the systemd cgroup driver puts the pod.
    pub qos: &'static str,
    /// The RDMA resource the kubelet assigned it: `nvidia.com/hostdev` with the host's NICs'
    /// PCI addresses as device IDs, or the shared-device plugin's resource, whose IDs name no
    /// device.
    pub resource: Option<&'static str>,
    /// Its RDMA cgroup limit of hca_object, if any.
    pub object_limit: Option<u64>,
}

/// Deterministic hex of `len` digits from a seed (IDs that look like the real ones).
fn hex_id(seed: u64, len: usize) -> String {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut out = String::with_capacity(len + 16);
    while out.len() < len {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.push_str(&format!("{:016x}", z ^ (z >> 31)));
    }
    out.truncate(len);
    out
}

fn uuid(seed: u64) -> String {
    let h = hex_id(seed, 32);
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// The pods of host number `host` (0-based) named `host_name`.
pub fn pods_of(host: usize, host_name: &str) -> Vec<SimPod> {
    let seed = host as u64 * 100;
    vec![
        SimPod {
            namespace: "ml-training".into(),
            name: format!("llm-pretrain-worker-{host}"),
            uid: uuid(seed + 1),
            container: "trainer".into(),
            container_id: hex_id(seed + 2, 64),
            pid: 4100 + host as u32 * 10,
            comm: "python3".into(),
            qos: "guaranteed",
            resource: Some("nvidia.com/hostdev"),
            object_limit: Some(TRAINING_OBJECT_LIMIT),
        },
        SimPod {
            namespace: "inference".into(),
            name: format!("embedding-server-{}", host_name.replace('_', "-")),
            uid: uuid(seed + 3),
            container: "server".into(),
            container_id: hex_id(seed + 4, 64),
            pid: 4101 + host as u32 * 10,
            comm: "tritonserver".into(),
            qos: "burstable",
            resource: Some("rdma/rdma_shared_device_a"),
            object_limit: None,
        },
    ]
}

/// What the kubelet's pod-resources API lists on host number `host`: the pods, their RDMA
/// resource, and the training pod's GPUs (which name no RDMA device).
pub fn pod_resources(fabric: &Fabric, host: usize) -> Vec<PodResources> {
    let Some(h) = fabric.hosts.get(host) else {
        return Vec::new();
    };
    let nics: Vec<&str> = h.nics.iter().map(|n| n.spec.pci_address.as_str()).collect();
    let gpus: Vec<String> = (0..h.nics.len())
        .map(|gpu| uuid(host as u64 * 1000 + gpu as u64).to_uppercase())
        .map(|id| format!("GPU-{id}"))
        .collect();
    let gpus: Vec<&str> = gpus.iter().map(String::as_str).collect();
    pods_of(host, &h.name)
        .into_iter()
        .map(|p| {
            let mut devices: Vec<(&str, &[&str])> = Vec::new();
            match p.resource {
                Some(r @ "nvidia.com/hostdev") => {
                    devices.push((r, &nics));
                    devices.push(("nvidia.com/gpu", &gpus));
                }
                Some(r) => devices.push((r, &["0"])),
                None => {}
            }
            pod(&p.namespace, &p.name, &p.container, &devices)
        })
        .collect()
}

/// Peers the training worker talks to at simulated time `t`: one more every minute of the
/// cycle, up to every other host.
pub fn training_peers(time_s: f64, hosts: usize) -> u32 {
    let step = (time_s.rem_euclid(CYCLE_S) / SCALE_OUT_EVERY_S) as u32 + 1;
    step.min(hosts.saturating_sub(1).max(1) as u32)
}

/// The QPs and resources of one host at the fabric's current time, as RDMA netlink lists them.
pub fn snapshot(fabric: &Fabric, host: usize) -> NetlinkSnapshot {
    let mut snapshot = NetlinkSnapshot::default();
    let Some(h) = fabric.hosts.get(host) else {
        return snapshot;
    };
    let pods = pods_of(host, &h.name);
    let peers = training_peers(fabric.time_s, fabric.hosts.len());
    for (index, nic) in h.nics.iter().enumerate() {
        let device = nic.spec.name.clone();
        let mut lqpn = 0x100u32;
        let mut qps = Vec::new();
        let mut push = |qp_type, state, pid: Option<u32>, owner: &str, lqpn: u32| {
            qps.push(QueuePair {
                device: device.clone(),
                port: Some(1),
                lqpn,
                qp_type,
                state,
                pid,
                owner: owner.to_string(),
            })
        };
        push(QpType::Gsi, QpState::Rts, None, "ib_core", 1);
        let link_up = nic.spec.state.contains("ACTIVE");
        let training = &pods[0];
        for _ in 0..peers * RC_PER_PEER {
            // A flapping link sends its connected QPs to the error state.
            let state = if link_up { QpState::Rts } else { QpState::Err };
            push(QpType::Rc, state, Some(training.pid), &training.comm, lqpn);
            lqpn += 1;
        }
        // The bootstrap / connection manager QP.
        push(
            QpType::Ud,
            QpState::Rts,
            Some(training.pid),
            &training.comm,
            lqpn,
        );
        lqpn += 1;
        if index < INFERENCE_NICS {
            let inference = &pods[1];
            for _ in 0..INFERENCE_UD_QPS {
                push(
                    QpType::Ud,
                    QpState::Rts,
                    Some(inference.pid),
                    &inference.comm,
                    lqpn,
                );
                lqpn += 1;
            }
        }
        let user_qps = qps.iter().filter(|q| q.pid.is_some()).count() as u64;
        let processes = if index < INFERENCE_NICS { 2 } else { 1 };
        snapshot.devices.push(DeviceResources {
            index: index as u32,
            name: device.clone(),
            summary: BTreeMap::from([
                ("pd".to_string(), processes + 1),
                ("cq".to_string(), user_qps * 2 + 1),
                ("qp".to_string(), qps.len() as u64),
                ("cm_id".to_string(), 0),
                ("mr".to_string(), 64 * processes),
                ("ctx".to_string(), processes),
                ("srq".to_string(), 0),
            ]),
        });
        snapshot.qps.extend(qps);
        // The optional congestion counters, where an administrator enabled them.
        let hw = |name| nic.spec.hw_counter(name).unwrap_or(0);
        snapshot.port_stats.push(PortStatistics {
            device: device.clone(),
            port: 1,
            counters: vec![
                ("cc_rx_ce_pkts".into(), hw("np_ecn_marked_roce_packets")),
                ("cc_rx_cnp_pkts".into(), hw("rp_cnp_handled")),
                ("cc_tx_cnp_pkts".into(), hw("np_cnp_sent")),
            ],
        });
    }
    snapshot
}

/// A host of the simulated fabric as an RDMA netlink source.
#[derive(Debug, Clone)]
pub struct SimNetlink {
    pub fabric: Arc<Mutex<Fabric>>,
    pub host: usize,
}

impl NetlinkSource for SimNetlink {
    fn read(&self, limits: &NetlinkLimits) -> Result<NetlinkSnapshot, NetlinkError> {
        let fabric = self.fabric.lock().unwrap_or_else(|p| p.into_inner());
        let mut snapshot = snapshot(&fabric, self.host);
        if !limits.qps {
            snapshot.qps.clear();
        }
        if !limits.port_stats {
            snapshot.port_stats.clear();
        }
        Ok(snapshot)
    }
}

/// The systemd driver's pod slice: `kubepods-<qos>-pod<uid with _>.slice` under its QoS slice
/// (guaranteed pods sit directly under `kubepods.slice`).
pub fn pod_cgroup(pod: &SimPod) -> String {
    let uid = pod.uid.replace('-', "_");
    match pod.qos {
        "guaranteed" => format!("/kubepods.slice/kubepods-pod{uid}.slice"),
        qos => format!("/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"),
    }
}

/// How many RDMA objects (QPs, CQs, MRs, PDs...) a pod holds on each device: what its cgroup's
/// `rdma.current` counts.
fn objects_of(snapshot: &NetlinkSnapshot, pod: &SimPod) -> BTreeMap<String, u64> {
    let mut objects = BTreeMap::new();
    for qp in snapshot.qps.iter().filter(|q| q.pid == Some(pod.pid)) {
        // A QP, its two CQs.
        *objects.entry(qp.device.clone()).or_default() += 3;
    }
    objects
}

/// What [`write_host_files`] writes depends only on this: the job's peers and which NICs are
/// up. The demo rewrites the files only when it changes, not every tick.
pub fn host_files_key(fabric: &Fabric, host: usize) -> String {
    let peers = training_peers(fabric.time_s, fabric.hosts.len());
    let links: String = fabric.hosts.get(host).map_or(String::new(), |h| {
        h.nics
            .iter()
            .map(|n| {
                if n.spec.state.contains("ACTIVE") {
                    '1'
                } else {
                    '0'
                }
            })
            .collect()
    });
    format!("{peers}/{links}")
}

/// Writes what pod attribution reads on a host under `root`: `proc/<pid>/{cgroup,comm}`,
/// `var/log/pods/<ns>_<pod>_<uid>/<container>/`, and the pods' RDMA cgroup files under
/// `sys/fs/cgroup` (cgroup v2, systemd driver, containerd).
pub fn write_host_files(root: &Path, fabric: &Fabric, host: usize) -> io::Result<()> {
    let Some(h) = fabric.hosts.get(host) else {
        return Ok(());
    };
    let snapshot = snapshot(fabric, host);
    for pod in pods_of(host, &h.name) {
        let proc_dir = root.join("proc").join(pod.pid.to_string());
        std::fs::create_dir_all(&proc_dir)?;
        let cgroup = format!(
            "{}/cri-containerd-{}.scope",
            pod_cgroup(&pod),
            pod.container_id
        );
        write_if_changed(&proc_dir.join("cgroup"), &format!("0::{cgroup}\n"))?;
        write_if_changed(&proc_dir.join("comm"), &format!("{}\n", pod.comm))?;
        let logs = root
            .join("var/log/pods")
            .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid))
            .join(&pod.container);
        std::fs::create_dir_all(&logs)?;
        let pod_dir = root
            .join("sys/fs/cgroup")
            .join(pod_cgroup(&pod).trim_start_matches('/'));
        std::fs::create_dir_all(
            pod_dir.join(format!("cri-containerd-{}.scope", pod.container_id)),
        )?;
        let objects = objects_of(&snapshot, &pod);
        let devices = h.nics.iter().map(|n| n.spec.name.as_str());
        let mut current = String::new();
        let mut max = String::new();
        for device in devices {
            let used = objects.get(device).copied().unwrap_or(0);
            let handles = u64::from(used > 0);
            current.push_str(&format!(
                "{device} hca_handle={handles} hca_object={used}\n"
            ));
            let limit = pod
                .object_limit
                .map_or("max".to_string(), |l| l.to_string());
            max.push_str(&format!("{device} hca_handle=max hca_object={limit}\n"));
        }
        write_if_changed(&pod_dir.join("rdma.current"), &current)?;
        write_if_changed(&pod_dir.join("rdma.max"), &max)?;
    }
    Ok(())
}

/// Rewrites a file only when its text changes, in place: a reader never sees it missing.
fn write_if_changed(path: &Path, text: &str) -> io::Result<()> {
    match std::fs::read_to_string(path) {
        Ok(old) if old == text => Ok(()),
        _ => std::fs::write(path, text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::fabric::Shape;
    use crate::sim::scenario::{Scenario, ScenarioName};

    fn fabric() -> Fabric {
        Fabric::new(Shape::default(), Scenario::new(ScenarioName::Healthy))
    }

    #[test]
    fn rc_queue_pairs_grow_with_the_peers_of_the_job() {
        let mut fabric = fabric();
        let rc_at = |fabric: &Fabric| {
            snapshot(fabric, 0)
                .qps
                .iter()
                .filter(|q| q.qp_type == QpType::Rc && q.device == "mlx5_0")
                .count()
        };
        assert_eq!(rc_at(&fabric), 2, "one peer at the start");
        fabric.time_s = 130.0;
        assert_eq!(rc_at(&fabric), 6, "three peers after two minutes");
        fabric.time_s = 250.0;
        assert_eq!(rc_at(&fabric), 6, "never more peers than other hosts");
        let ud: Vec<_> = snapshot(&fabric, 0)
            .qps
            .into_iter()
            .filter(|q| q.qp_type == QpType::Ud && q.device == "mlx5_0")
            .collect();
        assert_eq!(ud.len(), 1 + INFERENCE_UD_QPS as usize);
    }

    #[test]
    fn the_resource_summary_counts_the_listed_qps() {
        let snapshot = snapshot(&fabric(), 1);
        for device in &snapshot.devices {
            let listed = snapshot
                .qps
                .iter()
                .filter(|q| q.device == device.name)
                .count();
            assert_eq!(device.summary["qp"], listed as u64, "{}", device.name);
        }
        let pods = pods_of(1, "host-1");
        assert_ne!(pods[0].uid, pods[1].uid);
        assert_eq!(pods[0].container_id.len(), 64);
        assert!(snapshot.qps.iter().any(|q| q.pid == Some(pods[1].pid)));
    }

    #[test]
    fn host_files_name_the_pods_as_a_node_would() {
        let dir = tempfile::tempdir().unwrap();
        let fabric = fabric();
        write_host_files(dir.path(), &fabric, 0).unwrap();
        let pod = &pods_of(0, &fabric.hosts[0].name)[0];
        let cgroup =
            std::fs::read_to_string(dir.path().join(format!("proc/{}/cgroup", pod.pid))).unwrap();
        assert!(
            cgroup.starts_with("0::/kubepods.slice/kubepods-pod"),
            "{cgroup}"
        );
        assert!(cgroup.contains(&pod.uid.replace('-', "_")));
        let current = std::fs::read_to_string(
            dir.path()
                .join("sys/fs/cgroup")
                .join(pod_cgroup(pod).trim_start_matches('/'))
                .join("rdma.current"),
        )
        .unwrap();
        // Two RC QPs and the UD QP on mlx5_0, three objects each.
        assert!(
            current.contains("mlx5_0 hca_handle=1 hca_object=9\n"),
            "{current}"
        );
    }
}
