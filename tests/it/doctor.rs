//! `doctor` end to end: the real binary on sysfs trees written by `sim::sysfs_tree`, with a fake
//! /dev, procfs files, a network-namespace view file, `ethtool -S` files and a fake `rdma` tool.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::dcb_answer::Answer;
use common::path_str;
use rdma_fabric_exporter::sim::sysfs_tree::{
    connectx7_node, write_ethtool_files, write_tree, LinkLayer, NicSpec,
};

/// CapEff of a Docker container (default capabilities, no IPC_LOCK) and the same with IPC_LOCK.
const CAP_EFF_DEFAULT: &str = "00000000a80425fb";
const CAP_EFF_IPC_LOCK: &str = "00000000a80465fb";

/// A node as the doctor sees it, written in a temporary directory. Each test changes one thing.
struct Node {
    dir: tempfile::TempDir,
    nics: Vec<NicSpec>,
    /// Lines of the netns view file; `None` writes the healthy view.
    view: Option<String>,
    cap_eff: &'static str,
    memlock: &'static str,
    dev_files: bool,
    /// `--rdma-tool`; `None` writes a fake one printing one device's resource use.
    rdma_tool: Option<&'static str>,
    /// DCB netlink answers by netdev (`--dcb-answers-dir`); a netdev without one has no DCB.
    dcb: Vec<(String, Vec<u8>)>,
    /// Files written below the sysfs tree after it (knobs the simulated node does not write).
    sys_files: Vec<(String, String)>,
}

impl Node {
    /// Two RoCE ports (mlx5_0, mlx5_1), or ten with the IB port mlx5_8.
    fn new(devices: usize) -> Node {
        Node {
            dir: tempfile::tempdir().unwrap(),
            nics: connectx7_node(devices, 7),
            view: None,
            cap_eff: CAP_EFF_IPC_LOCK,
            memlock: "unlimited",
            dev_files: true,
            rdma_tool: None,
            dcb: Vec::new(),
            sys_files: Vec::new(),
        }
    }

    /// DCB answers for every RoCE netdev: `answer` for each, `answer_for` where it returns one.
    fn with_dcb(&mut self, answer: impl Fn(usize) -> Answer) {
        let roce: Vec<(usize, String)> = self
            .roce()
            .map(|(i, nic)| (i, nic.netdev.clone().unwrap()))
            .collect();
        self.dcb = roce
            .into_iter()
            .map(|(i, netdev)| (netdev.clone(), answer(i).for_netdev(&netdev).bytes()))
            .collect();
    }

    /// MLNX_OFED's global traffic class on every RoCE device.
    fn with_global_tclass(&mut self, tclass: u8) {
        let names: Vec<String> = self.roce().map(|(_, n)| n.name.clone()).collect();
        for name in names {
            self.sys_files.push((
                format!("class/infiniband/{name}/tc/1/traffic_class"),
                format!("Global tclass={tclass}\n"),
            ));
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn roce(&self) -> impl Iterator<Item = (usize, &NicSpec)> {
        self.nics
            .iter()
            .enumerate()
            .filter(|(_, n)| n.link_layer == LinkLayer::Ethernet && n.netdev.is_some())
    }

    /// Writes everything and runs `doctor` with `extra` flags.
    fn doctor(&self, extra: &[&str]) -> (i32, String, String) {
        let sys = self.path("sys");
        write_tree(&sys, &self.nics).unwrap();
        for (i, nic) in self.roce() {
            add_ipv4_gid(&sys, nic, &address_of(i));
        }
        for (relative, text) in &self.sys_files {
            let path = sys.join(relative);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        write_ethtool_files(&self.path("ethtool"), &self.nics).unwrap();
        let dcb = self.path("dcb");
        fs::create_dir_all(&dcb).unwrap();
        for (netdev, bytes) in &self.dcb {
            fs::write(dcb.join(format!("{netdev}.bin")), bytes).unwrap();
        }
        if self.dev_files {
            let ib = self.path("dev/infiniband");
            fs::create_dir_all(&ib).unwrap();
            for (i, _) in self.nics.iter().enumerate() {
                fs::write(ib.join(format!("uverbs{i}")), "").unwrap();
            }
            fs::write(ib.join("rdma_cm"), "").unwrap();
        } else {
            fs::create_dir_all(self.path("dev")).unwrap();
        }
        let proc_self = self.path("proc/self");
        fs::create_dir_all(&proc_self).unwrap();
        fs::write(
            proc_self.join("status"),
            format!(
                "Name:\tdoctor\nCapInh:\t0000000000000000\nCapPrm:\t{0}\nCapEff:\t{0}\n",
                self.cap_eff
            ),
        )
        .unwrap();
        fs::write(
            proc_self.join("limits"),
            format!(
                "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max open files            1048576              1048576              files     \n\
                 Max locked memory         {0:<20} {0:<20} bytes     \n",
                self.memlock
            ),
        )
        .unwrap();
        let view = self.view.clone().unwrap_or_else(|| self.healthy_view());
        fs::write(self.path("netns"), view).unwrap();
        let tool = self.path("rdma");
        fs::write(
            &tool,
            "#!/bin/sh\necho '[{\"ifindex\":0,\"ifname\":\"mlx5_0\",\"pd\":4,\"cq\":5,\"qp\":3,\"cm_id\":0,\"mr\":2,\"ctx\":1,\"srq\":0}]'\n",
        )
        .unwrap();
        fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap();

        let mut args = vec![
            "doctor".to_string(),
            "--path.sysfs".into(),
            path_str(&sys).into(),
            "--path.dev".into(),
            path_str(&self.path("dev")).into(),
            "--path.procfs".into(),
            path_str(&self.path("proc")).into(),
            "--netns-view".into(),
            path_str(&self.path("netns")).into(),
            "--ethtool-stats-dir".into(),
            path_str(&self.path("ethtool")).into(),
            "--rdma-tool".into(),
            self.rdma_tool.unwrap_or(path_str(&tool)).into(),
            "--dcb-answers-dir".into(),
            path_str(&dcb).into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::run(&args)
    }

    /// Host networking: lo, the management interface and every RoCE netdev with its address.
    fn healthy_view(&self) -> String {
        let mut view = String::from("lo 127.0.0.1 ::1\neno1 192.168.0.10\n");
        for (i, nic) in self.roce() {
            let netdev = nic.netdev.as_deref().unwrap();
            view.push_str(&format!("{netdev} {}/24 fe80::1\n", address_of(i)));
        }
        view
    }
}

fn address_of(index: usize) -> String {
    format!("10.0.{index}.1")
}

/// What the kernel adds when an IPv4 address goes on a RoCE netdev: a RoCE v1 and a RoCE v2
/// GID `::ffff:a.b.c.d`, printed as eight 4-digit groups.
fn add_ipv4_gid(sys: &Path, nic: &NicSpec, address: &str) {
    let octets: Vec<u8> = address.split('.').map(|o| o.parse().unwrap()).collect();
    let gid = format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        octets[0], octets[1], octets[2], octets[3]
    );
    let port = nic.device_dir(sys).join("ports/1");
    for (index, kind) in [("2", "IB/RoCE v1"), ("3", "RoCE v2")] {
        fs::write(port.join("gids").join(index), format!("{gid}\n")).unwrap();
        fs::write(
            port.join("gid_attrs/types").join(index),
            format!("{kind}\n"),
        )
        .unwrap();
        fs::write(
            port.join("gid_attrs/ndevs").join(index),
            format!("{}\n", nic.netdev.as_deref().unwrap()),
        )
        .unwrap();
    }
}

/// The report lines of one severity (`FAIL`, `WARN`, ...).
fn lines_of<'a>(stdout: &'a str, severity: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(severity))
        .collect()
}

fn assert_no_panic(stderr: &str) {
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn healthy_node_exits_0() {
    let node = Node::new(10);
    let (code, stdout, stderr) = node.doctor(&[]);
    assert_no_panic(&stderr);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(lines_of(&stdout, "FAIL").is_empty(), "{stdout}");
    assert!(lines_of(&stdout, "WARN").is_empty(), "{stdout}");
    assert!(stdout.contains("10 RDMA devices"), "{stdout}");
    assert!(
        stdout.contains("RoCE v2 GID index 3 for 10.0.0.1 on ens1f0np0"),
        "{stdout}"
    );
    assert!(stdout.contains("PFC enabled on priority 3"), "{stdout}");
    // Without DCB netlink PFC is inferred, and the report says why.
    assert!(
        stdout.contains("inferred from mlx5's rx_prio<p>_pause statistics; DCB netlink: ens1f0np0 has no DCB support"),
        "{stdout}"
    );
    assert!(
        stdout.contains("INFO  qos-trust: trust mode and DSCP map unknown: DCB netlink"),
        "{stdout}"
    );
    assert!(
        stdout.contains("OK    mtu: netdev MTU 9000 -> RoCE active MTU 4096"),
        "{stdout}"
    );
    assert!(stdout.contains("not visible on this kernel"), "{stdout}");
    assert!(stdout.contains("host network"), "{stdout}");
    assert!(stdout.contains("qp 3"), "{stdout}");
    // The IB port has no netdev checks.
    let ib = stdout
        .split("mlx5_8\n")
        .nth(1)
        .unwrap()
        .split("mlx5_9")
        .next()
        .unwrap();
    assert!(ib.contains("InfiniBand") && !ib.contains("netdev"), "{ib}");
    assert!(stdout.ends_with("healthy (exit 0)\n"), "{stdout}");
}

#[test]
fn netdev_missing_from_the_namespace_is_the_pod_network_case() {
    let mut node = Node::new(2);
    node.view = Some("lo 127.0.0.1\neth0 10.244.1.5/24\n".into());
    let (code, stdout, stderr) = node.doctor(&[]);
    assert_no_panic(&stderr);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 2, "{stdout}");
    assert!(
        fails[0].contains("netdev ens1f0np0 is not in this network namespace"),
        "{stdout}"
    );
    assert!(stdout.contains("hostNetwork: true"), "{stdout}");
    assert!(
        stdout.contains("Multus with the host-device / SR-IOV CNI"),
        "{stdout}"
    );
    assert!(stdout.contains("a pod on its CNI network only"), "{stdout}");
}

#[test]
fn some_netdevs_moved_in_is_a_warning_about_the_others() {
    let mut node = Node::new(2);
    node.view = Some("lo 127.0.0.1\neth0 10.244.1.5\nens1f0np0 10.0.0.1\n".into());
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    assert!(lines_of(&stdout, "FAIL").is_empty(), "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(warns[0].contains("ens2f0np0"), "{stdout}");
    assert!(stdout.contains("NCCL_IB_HCA"), "{stdout}");
    assert!(stdout.contains("1 of 2 RoCE netdevs"), "{stdout}");
}

#[test]
fn netdev_without_an_ip_address() {
    let mut node = Node::new(2);
    node.view = Some("lo 127.0.0.1\nens1f0np0 fe80::1\nens2f0np0 10.0.1.1\n".into());
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(
        fails[0].contains("ens1f0np0 has no IPv4 or global IPv6 address"),
        "{stdout}"
    );
    assert!(
        fails[0].contains("No IP address found for device"),
        "{stdout}"
    );
}

#[test]
fn address_without_a_roce_v2_gid() {
    let mut node = Node::new(2);
    // 10.9.9.9 is not in the GID table (an address on a bond above the port, say).
    node.view = Some("lo 127.0.0.1\nens1f0np0 10.9.9.9\nens2f0np0 10.0.1.1\n".into());
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(
        fails[0].contains("no RoCE v2 GID for 10.9.9.9 on ens1f0np0"),
        "{stdout}"
    );
}

#[test]
fn port_down() {
    let mut node = Node::new(2);
    node.nics[1].state = "1: DOWN".into();
    node.nics[1].phys_state = "3: Disabled".into();
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(
        fails[0].contains("port-state: DOWN, Disabled, Ethernet"),
        "{stdout}"
    );
    assert!(
        stdout.contains("check the cable and transceiver"),
        "{stdout}"
    );
}

#[test]
fn slower_than_expected_rate() {
    let node = Node::new(2);
    let (code, stdout, _) = node.doctor(&["--expected-rate", "800"]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 2, "{stdout}");
    assert!(
        warns[0].contains("400 Gb/s, expected runs at 800 Gb/s"),
        "{stdout}"
    );
}

#[test]
fn slower_than_its_siblings() {
    let mut node = Node::new(2);
    node.nics[1].rate = "200 Gb/sec (4X HDR)".into();
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(
        warns[0].contains("200 Gb/s, the fastest sibling port runs at 400 Gb/s"),
        "{stdout}"
    );
}

#[test]
fn missing_dev_infiniband() {
    let mut node = Node::new(2);
    node.dev_files = false;
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(fails[0].contains("infiniband does not exist"), "{stdout}");
    assert!(stdout.contains("mount /dev/infiniband"), "{stdout}");
    assert!(stdout.contains("rdma/"), "{stdout}");
}

#[test]
fn unopenable_uverbs() {
    let node = Node::new(2);
    let ib = node.path("dev/infiniband");
    fs::create_dir_all(&ib).unwrap();
    // A dangling symlink: present in the listing, ENOENT on open, even as root.
    std::os::unix::fs::symlink("/nonexistent/uverbs9", ib.join("uverbs9")).unwrap();
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(fails[0].contains("uverbs9: missing"), "{stdout}");
}

#[test]
fn missing_ipc_lock() {
    let mut node = Node::new(2);
    node.cap_eff = CAP_EFF_DEFAULT;
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let fails = lines_of(&stdout, "FAIL");
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(
        fails[0].contains("CAP_IPC_LOCK is not in the effective capability set"),
        "{stdout}"
    );
    assert!(
        stdout.contains("add IPC_LOCK to the container's capabilities"),
        "{stdout}"
    );
}

#[test]
fn low_memlock() {
    let mut node = Node::new(2);
    node.memlock = "65536";
    node.cap_eff = CAP_EFF_DEFAULT;
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let memlock: Vec<&str> = lines_of(&stdout, "FAIL")
        .into_iter()
        .filter(|l| l.contains("FAIL  memlock:"))
        .collect();
    assert_eq!(memlock.len(), 1, "{stdout}");
    assert!(memlock[0].contains("limited to 64 KiB"), "{stdout}");
    assert!(stdout.contains("ulimit -l unlimited"), "{stdout}");

    // With IPC_LOCK the kernel does not charge verbs pinning to the limit: a warning.
    node.cap_eff = CAP_EFF_IPC_LOCK;
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(warns[0].contains("memlock"), "{stdout}");
}

#[test]
fn pfc_off_on_the_roce_priority() {
    let node = Node::new(2);
    // mlx5_0 has PFC on priority 3 only: asking about priority 4 finds it off.
    let (code, stdout, _) = node.doctor(&["--roce-priority", "4"]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 2, "{stdout}");
    assert!(
        warns[0].contains("PFC enabled on priority 3 but not on the RoCE priority 4"),
        "{stdout}"
    );
    assert!(stdout.contains("mlnx_qos"), "{stdout}");
}

#[test]
fn ecn_knobs_when_mlnx_ofed_exposes_them() {
    let node = Node::new(2);
    // Written after the tree: doctor() rewrites the tree but leaves extra files alone.
    let sys = node.path("sys");
    write_tree(&sys, &node.nics).unwrap();
    for (netdev, np) in [("ens1f0np0", "1"), ("ens2f0np0", "0")] {
        let ecn = sys.join("class/net").join(netdev).join("ecn");
        for (role, value) in [("roce_np", np), ("roce_rp", "1")] {
            fs::create_dir_all(ecn.join(role).join("enable")).unwrap();
            fs::write(ecn.join(role).join("enable/3"), format!("{value}\n")).unwrap();
        }
    }
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("OK    ecn: ECN enabled on priority 3"),
        "{stdout}"
    );
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(
        warns[0].contains("ECN off on priority 3: roce_np"),
        "{stdout}"
    );
}

#[test]
fn sriov_vf_is_recognised() {
    let node = Node::new(2);
    let sys = node.path("sys");
    write_tree(&sys, &node.nics).unwrap();
    for nic in &node.nics {
        std::os::unix::fs::symlink("../0000:00:02.0", nic.pci_dir(&sys).join("physfn")).unwrap();
    }
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("SR-IOV VF netdevs in this namespace"),
        "{stdout}"
    );
}

#[test]
fn without_the_rdma_tool_resources_are_info() {
    let mut node = Node::new(2);
    node.rdma_tool = Some("/nonexistent/rdma");
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("INFO  resources: QP/resource use not available"),
        "{stdout}"
    );
}

#[test]
fn json_output_shape() {
    let mut node = Node::new(2);
    node.nics[1].state = "1: DOWN".into();
    node.nics[1].phys_state = "3: Disabled".into();
    let (code, stdout, _) = node.doctor(&["--output", "json"]);
    assert_eq!(code, 1, "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["exit_status"], 1);
    let findings = report["findings"].as_array().unwrap();
    let down = findings
        .iter()
        .find(|f| f["check"] == "port-state" && f["device"] == "mlx5_1")
        .unwrap();
    assert_eq!(down["port"], 1);
    assert_eq!(down["severity"], "fail");
    assert!(down["message"].as_str().unwrap().contains("DOWN"));
    assert!(down["fix"].is_string());
    let host = findings.iter().find(|f| f["check"] == "devices").unwrap();
    assert!(
        host.get("device").is_none() && host.get("port").is_none() && host.get("fix").is_none()
    );
    for finding in findings {
        let severity = finding["severity"].as_str().unwrap();
        assert!(
            ["ok", "info", "warn", "fail"].contains(&severity),
            "{finding}"
        );
        assert!(finding["message"].is_string());
    }
    let summary = &report["summary"];
    let counted: u64 = ["ok", "info", "warn", "fail"]
        .iter()
        .map(|k| summary[*k].as_u64().unwrap())
        .sum();
    assert_eq!(counted as usize, findings.len());
    assert_eq!(summary["fail"], 1);
}

#[test]
fn bad_netns_view_cannot_run() {
    let mut node = Node::new(2);
    node.view = Some("eth0 not-an-address\n".into());
    let (code, stdout, stderr) = node.doctor(&[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("line 1"), "{stderr}");
}

/// This machine has no RDMA hardware: the real view of /sys, /dev and /proc.
#[test]
fn real_machine_without_rdma_devices() {
    if Path::new("/sys/class/infiniband").exists() {
        eprintln!("skipped: this machine has RDMA devices");
        return;
    }
    let (code, stdout, stderr) = common::run(&["doctor"]);
    assert_no_panic(&stderr);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("FAIL  devices: no RDMA devices in /sys/class/infiniband"),
        "{stdout}"
    );
    assert!(stdout.contains("load the driver"), "{stdout}");

    let (code, stdout, _) = common::run(&["doctor", "--output", "json"]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["findings"][0]["message"],
        "no RDMA devices in /sys/class/infiniband"
    );
}

#[test]
fn resources_near_the_rdma_cgroup_limit() {
    let node = Node::new(2);
    let cgroup = node.path("sys/fs/cgroup");
    fs::create_dir_all(&cgroup).unwrap();
    // The fake tool reports pd 4 + cq 5 + qp 3 + mr 2 + srq 0 = 14 objects on mlx5_0.
    fs::write(
        cgroup.join("rdma.max"),
        "mlx5_0 hca_handle=max hca_object=15\nmlx5_1 hca_handle=max hca_object=max\n",
    )
    .unwrap();
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(
        warns[0].contains("qp 3")
            && warns[0].contains("14 objects of the RDMA cgroup's hca_object limit 15"),
        "{stdout}"
    );
}

/// The lines of `stdout` that belong to one device (its header up to the next device's).
fn device_section<'a>(stdout: &'a str, device: &str) -> &'a str {
    let start = stdout
        .find(&format!("\n{device}\n"))
        .unwrap_or_else(|| panic!("no {device} in {stdout}"));
    let rest = &stdout[start + 1..];
    let end = rest[1..]
        .find("\nmlx5_")
        .or_else(|| rest.find("\nsummary:"))
        .map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// Moves the per-priority bytes of priority 3 to priority 0: RoCE sent unmarked.
fn move_bytes_to_priority_0(nic: &mut NicSpec) {
    for dir in ["rx", "tx"] {
        let take = |stats: &mut Vec<(String, u64)>, name: &str| {
            let stat = stats.iter_mut().find(|(n, _)| n == name).unwrap();
            std::mem::take(&mut stat.1)
        };
        let moved = take(&mut nic.ethtool, &format!("{dir}_prio3_bytes"));
        let prio0 = nic
            .ethtool
            .iter_mut()
            .find(|(n, _)| *n == format!("{dir}_prio0_bytes"))
            .unwrap();
        prio0.1 += moved;
    }
}

#[test]
fn qos_path_healthy_with_dcb_netlink() {
    let mut node = Node::new(2);
    node.with_dcb(|_| Answer::mlx5_trust_dscp(0b0000_1000));
    node.with_global_tclass(106);
    let (code, stdout, stderr) = node.doctor(&[]);
    assert_no_panic(&stderr);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(lines_of(&stdout, "WARN").is_empty(), "{stdout}");
    for expected in [
        "OK    qos-trust: trust DSCP (DCB netlink: 64 DSCP entries in the APP table)",
        "OK    roce-priority: RoCE traffic class 106 (MLNX_OFED sysfs tc/1/traffic_class) = DSCP 26 -> priority 3 (DCB netlink APP table)",
        "OK    pfc: PFC enabled on priority 3 (DSCP 26 -> priority 3 in the DCB APP table) (DCB netlink)",
        "OK    prio-traffic: RDMA bytes fit in what the PFC priority 3 carried",
        "OK    mtu: netdev MTU 9000 -> RoCE active MTU 4096",
    ] {
        assert_eq!(
            stdout.matches(expected).count(),
            2,
            "{expected:?} once per port in {stdout}"
        );
    }
}

#[test]
fn trust_pcp_with_dscp_marked_traffic() {
    let mut node = Node::new(2);
    node.with_dcb(|i| {
        if i == 0 {
            Answer::mlx5_trust_pcp(0b0000_1000)
        } else {
            Answer::mlx5_trust_dscp(0b0000_1000)
        }
    });
    node.with_global_tclass(106);
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(
        warns[0].contains("qos-trust: trust PCP (DCB netlink: no DSCP entry in the APP table")
            && warns[0].contains("ignores the DSCP of RoCE traffic class 106")
            && warns[0].contains("untagged frames land on priority 0"),
        "{stdout}"
    );
    assert!(
        device_section(&stdout, "mlx5_0").contains("WARN  qos-trust"),
        "{stdout}"
    );
    assert!(
        stdout.contains("mlnx_qos -i ens1f0np0 --trust dscp"),
        "{stdout}"
    );
}

#[test]
fn pfc_off_on_the_priority_roce_uses() {
    let mut node = Node::new(2);
    // mlx5_0 has PFC on priority 4, but DSCP 26 maps to 3: RoCE runs lossy there.
    node.with_dcb(|i| Answer::mlx5_trust_dscp(if i == 0 { 0b0001_0000 } else { 0b0000_1000 }));
    node.with_global_tclass(106);
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 2, "{stdout}");
    let mlx5_0 = device_section(&stdout, "mlx5_0");
    assert!(
        mlx5_0.contains("WARN  pfc: PFC enabled on priority 4 but not on the RoCE priority 3 (DSCP 26 -> priority 3 in the DCB APP table) (DCB netlink)"),
        "{stdout}"
    );
    // The byte counters agree: the RDMA bytes went over priority 3, which has no PFC.
    assert!(
        mlx5_0.contains("of the RDMA bytes went over priorities without PFC")
            && mlx5_0.contains("priority 3 carries")
            && mlx5_0.contains("the PFC priority 4"),
        "{stdout}"
    );
    assert!(
        !device_section(&stdout, "mlx5_1").contains("WARN"),
        "{stdout}"
    );
}

#[test]
fn the_nccl_default_traffic_class_lands_on_priority_0() {
    let mut node = Node::new(2);
    node.with_dcb(|_| Answer::mlx5_trust_dscp(0b0000_1000));
    // No global traffic class and no NCCL_IB_TC: NCCL sends DSCP 0.
    let (code, stdout, _) = node.doctor(&["--roce-tclass", "0"]);
    assert_eq!(code, 1, "{stdout}");
    let pfc: Vec<&str> = lines_of(&stdout, "WARN")
        .into_iter()
        .filter(|l| l.contains("pfc:"))
        .collect();
    assert_eq!(pfc.len(), 2, "{stdout}");
    assert!(
        pfc[0].contains("not on the RoCE priority 0 (DSCP 0 -> priority 0 in the DCB APP table)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("traffic class 0 (--roce-tclass / NCCL_IB_TC) = DSCP 0 -> priority 0"),
        "{stdout}"
    );
    // With the traffic class given, the same node is healthy.
    let (code, stdout, _) = node.doctor(&["--roce-tclass", "106"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn rdma_traffic_on_priority_0_without_pfc() {
    let mut node = Node::new(2);
    node.with_dcb(|_| Answer::mlx5_trust_dscp(0b0000_1000));
    node.with_global_tclass(106);
    move_bytes_to_priority_0(&mut node.nics[0]);
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(
        warns[0].contains("prio-traffic: all of the RDMA bytes went over priorities without PFC: priority 0 carries 100% of all bytes, the PFC priority 3 0%"),
        "{stdout}"
    );
    assert!(warns[0].contains("PFC from DCB netlink"), "{stdout}");
    assert!(
        device_section(&stdout, "mlx5_0").contains("WARN  prio-traffic"),
        "{stdout}"
    );
    assert!(
        stdout.contains("NCCL_IB_TC, e.g. 106 for DSCP 26"),
        "{stdout}"
    );
}

#[test]
fn netdev_mtu_mismatch() {
    let mut node = Node::new(2);
    node.sys_files
        .push(("class/net/ens2f0np0/mtu".into(), "1500\n".into()));
    let (code, stdout, _) = node.doctor(&[]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 1, "{stdout}");
    assert!(
        warns[0].contains(
            "mtu: netdev MTU 1500 -> RoCE active MTU 1024, while ens1f0np0 runs 9000 (RoCE 4096)"
        ),
        "{stdout}"
    );
    assert!(
        device_section(&stdout, "mlx5_1").contains("WARN  mtu"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ip link set ens2f0np0 mtu 9000"),
        "{stdout}"
    );
}

#[test]
fn roce_priority_given_against_the_one_roce_uses() {
    let mut node = Node::new(2);
    node.with_dcb(|_| Answer::mlx5_trust_dscp(0b0000_1000));
    node.with_global_tclass(106);
    let (code, stdout, _) = node.doctor(&["--roce-priority", "5"]);
    assert_eq!(code, 1, "{stdout}");
    let warns = lines_of(&stdout, "WARN");
    assert_eq!(warns.len(), 2, "{stdout}");
    assert!(
        warns[0].contains("roce-priority: RoCE traffic lands on priority 3 (DSCP 26 -> priority 3 in the DCB APP table), not on the priority 5 of --roce-priority"),
        "{stdout}"
    );
}

#[test]
fn an_unreadable_dcb_answer_falls_back_to_the_statistics() {
    let mut node = Node::new(2);
    node.dcb = vec![("ens1f0np0".into(), b"\x10\x00\x00\x00garbage".to_vec())];
    let (code, stdout, stderr) = node.doctor(&[]);
    assert_no_panic(&stderr);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("PFC enabled on priority 3 (inferred from mlx5's rx_prio<p>_pause statistics; DCB netlink: malformed answer"),
        "{stdout}"
    );
}

/// `--exporter`: the probes of the local ports, read from the exporter on the node. The demo's
/// first host stands in for it: its NICs (mlx5_0, mlx5_1, the fixture's names) probe each other
/// and the other host's through the simulated fabric, which loses nothing in `healthy`. A rise
/// with PFC and lost probes are proven on expositions in src/diag/doctor/probe.rs.
#[test]
fn probes_of_the_local_ports_from_the_exporter() {
    let demo = common::Exporter::small_demo("healthy", "0", "1s", "2");
    let host = "/hosts/gpu-node-01";
    // Until both ports have answered probes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, _, body) = demo.get(&format!("{host}/metrics?collect[]=probe"));
        assert_eq!(status, 200, "{body}");
        let answered = body
            .lines()
            .filter(|l| l.starts_with("rdma_probe_network_rtt_seconds_count{"))
            .filter(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"))
            .count();
        if answered == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo's host never answered probes on both ports:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let node = Node::new(2);
    let url = demo.url(host);
    let (code, stdout, stderr) = node.doctor(&["--exporter", &url, "--exporter-interval", "3s"]);
    assert_no_panic(&stderr);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for device in ["mlx5_0", "mlx5_1"] {
        let section = device_section(&stdout, device);
        assert!(
            section.contains("OK    probe-loss: ") && section.contains(", none lost ("),
            "{section}"
        );
        // OK, or INFO on a machine so loaded that the demo's host clock (its ports time
        // probes in software) moved the mean by 100 µs: never a problem either way.
        assert!(
            section.contains("probe-rtt: ") && section.contains("mean network RTT "),
            "{section}"
        );
    }

    // Without --exporter nothing is asked.
    let (_, stdout, _) = node.doctor(&[]);
    assert!(!stdout.contains("probe"), "{stdout}");

    // An exporter that is not there is a warning, named, with the address to give.
    let port = common::prometheus::free_port();
    let gone = format!("http://127.0.0.1:{port}");
    let (code, stdout, stderr) = node.doctor(&["--exporter", &gone, "--exporter-interval", "1s"]);
    assert_no_panic(&stderr);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("WARN  probe: cannot reach the exporter at {gone}")),
        "{stdout}"
    );
    // An unusable URL is a mistake in the arguments.
    let (code, _, stderr) = node.doctor(&["--exporter", "https://node:9866"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--exporter: https is not supported"),
        "{stderr}"
    );
}
