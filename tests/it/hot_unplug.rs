//! Hot-unplug: RDMA devices and netdevs disappear and come back while scrapes run.
//!
//! The first test flips a whole device and another device's netdev in a copy of the bundled
//! ConnectX-7 node (laid out as the kernel does: the class link, `gid_attrs/ndevs`,
//! `device/net/<if>`, and its `ethtool -S` file). The second deletes and re-creates a real
//! netdev (a veth pair) behind a port while the SIOCETHTOOL reader runs; it needs root and `ip`
//! and prints `skipped` without them (fails when `CI` is set). Every scrape must answer 200 with
//! a valid, duplicate-free exposition; a removed device's or netdev's series vanish and come back.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

const REMOVED_DEVICE: &str = "mlx5_3";
const NETDEV_DEVICE: &str = "mlx5_5";
const NETDEV: &str = "ens6f0np0";

fn has(samples: &[Sample], name: &str, device: &str) -> bool {
    samples
        .iter()
        .any(|s| s.name == name && s.labels.get("device").map(String::as_str) == Some(device))
}

/// Renames `from` to `to`, or back, in a loop until stopped; returns how many flips it made.
fn flip_in_a_loop(
    pairs: Vec<(PathBuf, PathBuf)>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut flips = 0;
        while !stop.load(Ordering::Relaxed) {
            for (from, to) in &pairs {
                let _ = std::fs::rename(from, to);
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
            for (from, to) in &pairs {
                let _ = std::fs::rename(to, from);
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
            flips += 1;
        }
        flips
    })
}

#[test]
fn devices_and_netdevs_vanish_and_return_while_scraped() {
    let _exclusive = common::exclusive(module_path!());
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce"), tree.path());
    let sys = tree.path().join("sys");
    let ethtool = tree.path().join("ethtool");
    let parked = tree.path().join("parked");
    std::fs::create_dir_all(&parked).unwrap();
    let class = sys.join("class/infiniband");
    let netdev_device = class.join(NETDEV_DEVICE);
    // What the kernel takes away with a netdev: its GID entries' netdev names, the PCI
    // function's net/ entry, and (here) its statistics file.
    let netdev_parts = vec![
        (
            netdev_device.join("ports/1/gid_attrs"),
            parked.join("gid_attrs"),
        ),
        (
            netdev_device.join("device/net").join(NETDEV),
            parked.join(NETDEV),
        ),
        (
            ethtool.join(format!("{NETDEV}.txt")),
            parked.join(format!("{NETDEV}.txt")),
        ),
    ];
    let device_part = (class.join(REMOVED_DEVICE), parked.join(REMOVED_DEVICE));

    let exporter = Exporter::on_node(&sys, &ethtool, &[]);
    // The storm sampler's first periods, so that its series are there from the start: waited
    // for (two 200 ms periods on an idle machine, longer on a loaded one).
    let before = until(|| {
        let samples = scrape_without_duplicates(&exporter);
        has(&samples, "rdma_pfc_paused_ratio_peak", NETDEV_DEVICE).then_some(samples)
    });
    assert!(has(&before, "rdma_port_info", REMOVED_DEVICE));
    assert!(has(&before, "rdma_pfc_paused_ratio_peak", NETDEV_DEVICE));
    assert!(has(&before, "rdma_pfc_pause_frames_total", NETDEV_DEVICE));

    let stop = Arc::new(AtomicBool::new(false));
    let mut pairs = netdev_parts.clone();
    pairs.push(device_part.clone());
    let flipper = flip_in_a_loop(pairs, stop.clone());
    let (mut device_missing, mut device_present) = (0, 0);
    let (mut netdev_missing, mut netdev_present) = (0, 0);
    for _ in 0..200 {
        let samples = scrape_without_duplicates(&exporter);
        match has(&samples, "rdma_port_info", REMOVED_DEVICE) {
            true => device_present += 1,
            false => device_missing += 1,
        }
        match has(&samples, "rdma_pfc_pause_frames_total", NETDEV_DEVICE) {
            true => netdev_present += 1,
            false => netdev_missing += 1,
        }
        // The device whose netdev comes and goes keeps its RDMA series throughout.
        assert!(has(&samples, "rdma_port_info", NETDEV_DEVICE));
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    eprintln!(
        "{flips} flips; {REMOVED_DEVICE} missing in {device_missing}/200 scrapes, {NETDEV} statistics missing in {netdev_missing}/200"
    );
    // The flipper restores everything at the end of each cycle.
    assert!(device_missing + device_present == 200 && netdev_missing + netdev_present == 200);

    // Gone for good: its series disappear at the next scrape, and nothing else does.
    for (from, to) in netdev_parts.iter().chain([&device_part]) {
        std::fs::rename(from, to).unwrap();
    }
    let samples = scrape_without_duplicates(&exporter);
    assert!(!has(&samples, "rdma_port_info", REMOVED_DEVICE));
    assert!(!has(&samples, "rdma_hw_np_cnp_sent_total", REMOVED_DEVICE));
    assert!(!has(&samples, "rdma_pfc_pause_frames_total", NETDEV_DEVICE));
    assert!(has(&samples, "rdma_hw_np_cnp_sent_total", NETDEV_DEVICE));
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(9.0));
    // Back: every series returns with the values on disk.
    for (from, to) in netdev_parts.iter().chain([&device_part]) {
        std::fs::rename(to, from).unwrap();
    }
    let key = |s: &Sample| (s.name.clone(), s.labels.clone());
    let keys = |samples: &[Sample]| {
        let mut keys: Vec<_> = samples
            .iter()
            .filter(|s| !s.name.starts_with("rdma_exporter_") && !s.name.starts_with("process_"))
            .map(key)
            .collect();
        keys.sort();
        keys
    };
    let before_keys = keys(&before);
    // The storm sampler sees the netdev again at its next period: waited for, as above (at
    // most the deadline; what differs then is reported below).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (after, after_keys) = loop {
        let after = scrape_without_duplicates(&exporter);
        let after_keys = keys(&after);
        if after_keys == before_keys || std::time::Instant::now() > deadline {
            break (after, after_keys);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let lost: Vec<_> = before_keys
        .iter()
        .filter(|k| !after_keys.contains(k))
        .collect();
    let gained: Vec<_> = after_keys
        .iter()
        .filter(|k| !before_keys.contains(k))
        .collect();
    assert!(
        lost.is_empty() && gained.is_empty(),
        "series differ after the devices came back: lost {lost:?}, gained {gained:?}"
    );
    assert_eq!(
        value_of(
            &after,
            "rdma_pfc_pause_frames_total",
            &[
                ("device", NETDEV_DEVICE),
                ("priority", "3"),
                ("direction", "rx")
            ]
        ),
        value_of(
            &before,
            "rdma_pfc_pause_frames_total",
            &[
                ("device", NETDEV_DEVICE),
                ("priority", "3"),
                ("direction", "rx")
            ]
        )
    );
    promtool_check_metrics(&exporter.metrics());
}

/// Points `device`'s port 1 at `netdev`, as the kernel's GID table would.
fn point_port_at(sys: &Path, device: &str, netdev: &str) {
    let ndevs = sys
        .join("class/infiniband")
        .join(device)
        .join("ports/1/gid_attrs/ndevs");
    for entry in std::fs::read_dir(&ndevs).unwrap() {
        std::fs::write(entry.unwrap().path(), format!("{netdev}\n")).unwrap();
    }
}

#[test]
fn a_real_netdev_deleted_and_recreated_while_scraped() {
    let _exclusive = common::exclusive(module_path!());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip_or_fail("not root, cannot create interfaces");
    }
    let netdev = format!("rfh{:04}a", std::process::id() % 10000);
    let peer = format!("rfh{:04}b", std::process::id() % 10000);
    let _ = ip(&["link", "del", &netdev]);
    if let Err(e) = ip(&[
        "link", "add", &netdev, "type", "veth", "peer", "name", &peer,
    ]) {
        return skip_or_fail(&e);
    }
    struct Link(String);
    impl Drop for Link {
        fn drop(&mut self) {
            let _ = ip(&["link", "del", &self.0]);
        }
    }
    let _link = Link(netdev.clone());

    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce/sys"), tree.path());
    point_port_at(tree.path(), NETDEV_DEVICE, &netdev);
    // The tree's class/net lists the veth, as the host's sysfs lists a netdev of the host's
    // namespace; it is not updated when the flipper deletes it. So a deleted veth is one the
    // host lists and this namespace lacks: `ethtool_no_device`. (A netdev that class/net does
    // not list either is in another namespace, no error: ethtool_faults.rs.)
    std::fs::create_dir(tree.path().join("class/net").join(&netdev)).unwrap();
    let exporter = Exporter::start(&[
        "--path.sysfs",
        path_str(tree.path()),
        "--collector.ethtool.source",
        "ioctl",
        // veth has no PFC counters: its driver statistics come out as rdma_ethtool_stat.
        "--collector.ethtool.metrics-include",
        "^peer_ifindex$",
        "--collector.infiniband.device-include",
        NETDEV_DEVICE,
    ]);
    let stat = |samples: &[Sample]| has(samples, "rdma_ethtool_stat", NETDEV_DEVICE);
    assert!(
        stat(&scrape_without_duplicates(&exporter)),
        "veth statistics are read"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, netdev, peer) = (stop.clone(), netdev.clone(), peer.clone());
        std::thread::spawn(move || {
            let mut cycles = 0;
            while !stop.load(Ordering::Relaxed) {
                ip(&["link", "del", &netdev]).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
                ip(&[
                    "link", "add", &netdev, "type", "veth", "peer", "name", &peer,
                ])
                .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
                cycles += 1;
            }
            cycles
        })
    };
    let (mut missing, mut present) = (0, 0);
    for _ in 0..150 {
        match stat(&scrape_without_duplicates(&exporter)) {
            true => present += 1,
            false => missing += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let cycles = flipper.join().unwrap();
    eprintln!("{cycles} delete/create cycles; statistics missing in {missing}/150 scrapes");
    assert!(cycles > 0 && present > 0);

    ip(&["link", "del", &netdev]).unwrap();
    let samples = scrape_without_duplicates(&exporter);
    assert!(!stat(&samples), "a deleted netdev's statistics vanish");
    assert!(
        has(&samples, "rdma_port_info", NETDEV_DEVICE),
        "the RDMA port stays"
    );
    let no_device = value_of(
        &samples,
        "rdma_exporter_read_errors_total",
        &[("device", NETDEV_DEVICE), ("reason", "ethtool_no_device")],
    );
    assert!(
        no_device.unwrap_or(0.0) >= 1.0,
        "counted as ethtool_no_device"
    );
    ip(&[
        "link", "add", &netdev, "type", "veth", "peer", "name", &peer,
    ])
    .unwrap();
    assert!(
        stat(&scrape_without_duplicates(&exporter)),
        "and return with it"
    );
}

/// `node_guid` of `device`'s `rdma_port_info`, if it has one.
fn node_guid(samples: &[Sample], device: &str) -> Option<String> {
    samples
        .iter()
        .find(|s| {
            s.name == "rdma_port_info" && s.labels.get("device").map(String::as_str) == Some(device)
        })
        .and_then(|s| s.labels.get("node_guid").cloned())
}

fn read_errors_of(samples: &[Sample], device: &str) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == "rdma_exporter_read_errors_total"
                && s.labels.get("device").map(String::as_str) == Some(device)
        })
        .map(|s| s.value)
        .sum()
}

/// The first `Some` of `ready`, asked every 200 ms for at most 30 s.
fn until<T>(ready: impl Fn() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(found) = ready() {
            return found;
        }
        assert!(std::time::Instant::now() < deadline, "timed out");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Long enough for a changed directory to be kept again (`node::sys_dir::SETTLE`, 1 s).
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(1200));
}

/// The exporter keeps each device's directories and attribute descriptors between scrapes.
/// Whatever the kernel does to a device between two scrapes, the next one serves what is on
/// disk: a device re-created under its name (another GUID, other counters, one counter fewer),
/// a counter file gone, a device gone, a device added.
#[test]
fn kept_trees_follow_devices_that_are_recreated_removed_and_added() {
    let _exclusive = common::exclusive(module_path!());
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce"), tree.path());
    let sys = tree.path().join("sys");
    let class = sys.join("class/infiniband");
    let parked = tree.path().join("parked");
    settle();
    let exporter = Exporter::on_node(&sys, &tree.path().join("ethtool"), &[]);
    let port = |device: &'static str| [("device", device), ("port", "1")];
    for _ in 0..3 {
        let samples = scrape_without_duplicates(&exporter);
        assert_eq!(
            node_guid(&samples, "mlx5_2").as_deref(),
            Some("b83f:d203:009d:c782")
        );
        assert_eq!(
            value_of(&samples, "rdma_port_xmit_packets_total", &port("mlx5_2")),
            Some(13374824501.0)
        );
    }

    // Re-created under the same name: a new directory with another GUID and other counters.
    let link = class.join("mlx5_2");
    let target = class.join(std::fs::read_link(&link).unwrap());
    std::fs::rename(&target, &parked).unwrap();
    copy_tree(&parked, &target);
    std::fs::write(target.join("node_guid"), "dead:beef:0000:0002\n").unwrap();
    std::fs::write(target.join("ports/1/counters/port_xmit_packets"), "42\n").unwrap();
    std::fs::remove_file(target.join("ports/1/hw_counters/out_of_sequence")).unwrap();
    let check_recreated = |samples: &[Sample]| {
        assert_eq!(
            node_guid(samples, "mlx5_2").as_deref(),
            Some("dead:beef:0000:0002")
        );
        assert_eq!(
            value_of(samples, "rdma_port_xmit_packets_total", &port("mlx5_2")),
            Some(42.0)
        );
        assert!(!has(samples, "rdma_hw_out_of_sequence_total", "mlx5_2"));
        assert_eq!(read_errors_of(samples, "mlx5_2"), 0.0);
    };
    check_recreated(&scrape_without_duplicates(&exporter));
    // Once settled, the new directory is the one kept: still its values, and live ones.
    settle();
    check_recreated(&scrape_without_duplicates(&exporter));
    check_recreated(&scrape_without_duplicates(&exporter));
    std::fs::write(target.join("ports/1/counters/port_xmit_packets"), "43\n").unwrap();
    let samples = scrape_without_duplicates(&exporter);
    assert_eq!(
        value_of(&samples, "rdma_port_xmit_packets_total", &port("mlx5_2")),
        Some(43.0)
    );

    // A counter file goes from a kept directory: its series goes, nothing is counted as failed.
    assert!(has(&samples, "rdma_hw_rx_write_requests_total", "mlx5_0"));
    std::fs::remove_file(class.join("mlx5_0/ports/1/hw_counters/rx_write_requests")).unwrap();
    let samples = scrape_without_duplicates(&exporter);
    assert!(!has(&samples, "rdma_hw_rx_write_requests_total", "mlx5_0"));
    assert!(has(&samples, "rdma_hw_np_cnp_sent_total", "mlx5_0"));
    assert_eq!(read_errors_of(&samples, "mlx5_0"), 0.0);

    // A device goes: no sysfs series of it at the next scrape (the storm sampler re-lists its
    // ports on its own period). It comes back under another name.
    let mlx5_3 = std::fs::read_link(class.join(REMOVED_DEVICE)).unwrap();
    std::fs::remove_file(class.join(REMOVED_DEVICE)).unwrap();
    let samples = scrape_without_duplicates(&exporter);
    let stale: Vec<&str> = samples
        .iter()
        .filter(|s| {
            ["rdma_port_", "rdma_hw_", "rdma_device_"]
                .iter()
                .any(|p| s.name.starts_with(p))
                && s.labels.get("device").map(String::as_str) == Some(REMOVED_DEVICE)
        })
        .map(|s| s.name.as_str())
        .collect();
    assert!(stale.is_empty(), "series of a removed device: {stale:?}");
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(9.0));
    std::os::unix::fs::symlink(&mlx5_3, class.join("mlx5_10")).unwrap();
    let samples = scrape_without_duplicates(&exporter);
    assert_eq!(value_of(&samples, "rdma_devices", &[]), Some(10.0));
    assert!(has(&samples, "rdma_port_info", "mlx5_10"));
    assert_eq!(read_errors_of(&samples, "mlx5_10"), 0.0);
    promtool_check_metrics(&exporter.metrics());
}
