//! The PCIe link through the binary, on sysfs trees laid out as the kernel does (class
//! symlinks into `devices/`, a soft device found through its netdev's virtio device): what is
//! served, what is left out, and a garbled file counted with its reason.

use crate::common::{self, parse_exposition, value_of, Exporter};

use std::os::unix::fs::symlink;
use std::path::Path;

fn write(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// A device's port 1: RoCE, active, with `netdev` as its GID 0 netdev.
fn rdma_device(dir: &Path, netdev: &str) {
    let port = dir.join("ports/1");
    write(
        &port,
        &[
            ("link_layer", "Ethernet\n"),
            ("state", "4: ACTIVE\n"),
            ("phys_state", "5: LinkUp\n"),
            ("rate", "200 Gb/sec (4X HDR)\n"),
        ],
    );
    write(
        &port.join("gid_attrs/ndevs"),
        &[("0", &format!("{netdev}\n"))],
    );
}

fn link(dir: &Path, current: (&str, &str), max: (&str, &str)) {
    write(
        dir,
        &[
            ("current_link_speed", &format!("{}\n", current.0)),
            ("current_link_width", &format!("{}\n", current.1)),
            ("max_link_speed", &format!("{}\n", max.0)),
            ("max_link_width", &format!("{}\n", max.1)),
        ],
    );
}

/// mlx5_0: Gen4 x8 of x16 behind a Gen4 x16 root port, a garbled `aer_dev_nonfatal`;
/// mlx5_1: link speed "Unknown" (link down); rxe0: soft-RoCE on a virtio-net function on the
/// root bus, a conventional PCI function without link files.
fn node(root: &Path) {
    let devices = root.join("devices");
    let port0 = devices.join("pci0000:3a/0000:3a:00.0");
    link(&port0, ("16.0 GT/s PCIe", "8"), ("16.0 GT/s PCIe", "16"));
    let fn0 = port0.join("0000:3b:00.0");
    link(&fn0, ("16.0 GT/s PCIe", "8"), ("16.0 GT/s PCIe", "16"));
    write(
        &fn0,
        &[
            ("numa_node", "0\n"),
            ("aer_dev_nonfatal", "Undefined 0\nDLP 0\n"),
            ("aer_dev_fatal", "Undefined 0\nDLP 0\nTOTAL_ERR_FATAL 0\n"),
        ],
    );
    let port1 = devices.join("pci0000:80/0000:80:01.0");
    link(&port1, ("Unknown", "0"), ("16.0 GT/s PCIe", "16"));
    let fn1 = port1.join("0000:81:00.0");
    link(&fn1, ("Unknown", "0"), ("16.0 GT/s PCIe", "16"));
    write(&fn1, &[("numa_node", "1\n")]);
    let virtio = devices.join("pci0000:00/0000:00:03.0/virtio0");
    write(virtio.parent().unwrap(), &[("numa_node", "-1\n")]);
    std::fs::create_dir_all(&virtio).unwrap();

    let class = root.join("class");
    for (name, function, netdev) in [("mlx5_0", &fn0, "ens1np0"), ("mlx5_1", &fn1, "ens2np0")] {
        let dir = function.join("infiniband").join(name);
        rdma_device(&dir, netdev);
        symlink(function, dir.join("device")).unwrap();
        std::fs::create_dir_all(class.join("infiniband")).unwrap();
        symlink(&dir, class.join("infiniband").join(name)).unwrap();
    }
    let rxe = devices.join("virtual/infiniband/rxe0");
    rdma_device(&rxe, "eth9");
    symlink(&rxe, class.join("infiniband/rxe0")).unwrap();
    let net = devices.join("virtual/net/eth9");
    std::fs::create_dir_all(&net).unwrap();
    symlink(&virtio, net.join("device")).unwrap();
    std::fs::create_dir_all(class.join("net")).unwrap();
    symlink(&net, class.join("net/eth9")).unwrap();
}

#[test]
fn the_link_is_served_and_a_garbled_file_is_a_read_error() {
    let tree = tempfile::tempdir().unwrap();
    node(tree.path());
    let exporter = Exporter::on_sysfs(tree.path(), &[]);
    let body = exporter.metrics();
    let samples = parse_exposition(&body);
    let get = |name: &str, labels: &[(&str, &str)]| value_of(&samples, name, labels);

    // mlx5_0: x8 of x16 at both ends, downtrained; the fatal count served, the garbled
    // non-fatal one counted as a parse error.
    assert_eq!(
        get("rdma_pcie_link_width_lanes", &[("device", "mlx5_0")]),
        Some(8.0)
    );
    assert_eq!(
        get(
            "rdma_pcie_link_speed_transfers_per_second",
            &[("device", "mlx5_0")]
        ),
        Some(16e9)
    );
    assert_eq!(
        get("rdma_pcie_link_downtrained", &[("device", "mlx5_0")]),
        Some(1.0)
    );
    let info = [
        ("device", "mlx5_0"),
        ("pci_address", "0000:3b:00.0"),
        ("numa_node", "0"),
        ("upstream_pci_address", "0000:3a:00.0"),
    ];
    assert_eq!(get("rdma_pcie_link_info", &info), Some(1.0), "{body}");
    let aer = |device, severity| {
        get(
            "rdma_pcie_aer_errors_total",
            &[("device", device), ("severity", severity)],
        )
    };
    assert_eq!(aer("mlx5_0", "fatal"), Some(0.0));
    assert_eq!(aer("mlx5_0", "nonfatal"), None);
    assert_eq!(
        get(
            "rdma_exporter_read_errors_total",
            &[("device", "mlx5_0"), ("reason", "parse")]
        ),
        Some(1.0),
        "{body}"
    );

    // mlx5_1: its link is down ("Unknown"): no speed and no judgement, and no error.
    assert_eq!(
        get(
            "rdma_pcie_link_speed_transfers_per_second",
            &[("device", "mlx5_1")]
        ),
        None
    );
    assert_eq!(
        get("rdma_pcie_link_downtrained", &[("device", "mlx5_1")]),
        None
    );
    assert_eq!(
        get("rdma_pcie_link_width_lanes", &[("device", "mlx5_1")]),
        Some(0.0)
    );
    assert_eq!(aer("mlx5_1", "fatal"), None, "no AER files: no series");

    // rxe0: found through eth9's virtio device; a conventional function on the root bus.
    let rxe = common::matching(&samples, "rdma_pcie_link_info", &[("device", "rxe0")])
        .next()
        .unwrap_or_else(|| panic!("no rdma_pcie_link_info for rxe0:\n{body}"));
    assert_eq!(rxe.labels["pci_address"], "0000:00:03.0");
    assert!(
        !rxe.labels.contains_key("numa_node"),
        "-1 is no node: {rxe:?}"
    );
    assert!(!rxe.labels.contains_key("upstream_pci_address"), "{rxe:?}");
    assert_eq!(
        get("rdma_pcie_link_downtrained", &[("device", "rxe0")]),
        None
    );

    // Only the garbled file is an error.
    let errors: Vec<_> =
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    common::promtool_check_metrics(&body);
}
