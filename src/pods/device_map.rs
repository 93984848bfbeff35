//! From a device plugin's device ID to the RDMA ports it gives a container, through sysfs.
//!
//! - A PCI address (the SR-IOV network device plugin's IDs, `0000:3b:00.2`; the short
//!   `3b:00.2` means domain 0): the function's `infiniband/<dev>` (`bus/pci/devices/<pci>`, or
//!   where that is missing the `class/infiniband/<dev>/device` links read backwards), each of
//!   its `ports/<n>`, and the port's netdev among `<pci>/net/*` (the one whose `dev_port` is
//!   `n - 1`: ConnectX-3 and other multi-port functions), else the RoCE GID table's
//!   (`ports/<n>/gid_attrs/ndevs/0`: a bond's netdev lives elsewhere). A VF is a PCI function
//!   of its own with its own RDMA device: the same path.
//! - An RDMA device name (some plugins hand those out): that device.
//! - Anything else, e.g. the RDMA shared device plugin's IDs: nothing. That plugin
//!   (Mellanox/k8s-rdma-shared-dev-plugin, `pkg/resources/server.go`) advertises
//!   `rdmaHcaMax` interchangeable devices with IDs `"0"`, `"1"`, … and mounts every selected
//!   device's `/dev/infiniband` nodes into each container that asks: the ID names no device.
//!   Such a resource is attributed by its queue pairs instead (the QP's pid -> `cgroup` ->
//!   container), or by the devices its config selects.

use std::fs;
use std::path::{Path, PathBuf};

use super::DeviceTarget;

/// Bounds on the directories read: a node has tens of RDMA devices, a few hundred with VFs.
const MAX_ENTRIES: usize = 4096;
const MAX_ATTR: u64 = 4096;

/// The RDMA ports `device_id` reaches below `sysfs_root` (`/sys`), sorted; empty when the ID
/// names no RDMA device here.
pub fn resolve(sysfs_root: &Path, device_id: &str) -> Vec<DeviceTarget> {
    let id = device_id.trim();
    let devices: Vec<(String, PathBuf)> = if let Some(pci) = pci_address(id) {
        match pci_dir(sysfs_root, &pci) {
            Some(dir) => names(&dir.join("infiniband"))
                .into_iter()
                .map(|dev| (dev, dir.clone()))
                .collect(),
            None => Vec::new(),
        }
    } else if is_device_name(id) && sysfs_root.join("class/infiniband").join(id).is_dir() {
        let pci = sysfs_root.join("class/infiniband").join(id).join("device");
        vec![(id.to_string(), pci)]
    } else {
        Vec::new()
    };
    let mut targets = Vec::new();
    for (device, pci) in devices {
        let ports_dir = sysfs_root
            .join("class/infiniband")
            .join(&device)
            .join("ports");
        let netdevs = netdevs_by_port(&pci);
        for port in names(&ports_dir)
            .iter()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let netdev = netdevs
                .iter()
                .find(|(dev_port, _)| *dev_port + 1 == port)
                .map(|(_, name)| name.clone())
                .or_else(|| attr(&ports_dir.join(format!("{port}/gid_attrs/ndevs/0"))))
                .unwrap_or_default();
            targets.push(DeviceTarget {
                device: device.clone(),
                port,
                netdev,
            });
        }
    }
    targets.sort();
    targets.dedup();
    targets
}

/// `dddd:bb:dd.f` in lower case, from that or the short `bb:dd.f`; `None` for anything else.
pub fn pci_address(id: &str) -> Option<String> {
    let full = match id.len() {
        12 => id.to_string(),
        7 => format!("0000:{id}"),
        _ => return None,
    };
    let b = full.as_bytes();
    let hex_at = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_hexdigit);
    let shaped = b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex_at(0..4)
        && hex_at(5..7)
        && hex_at(8..10)
        && matches!(b[11], b'0'..=b'7');
    shaped.then(|| full.to_ascii_lowercase())
}

/// The PCI function's directory: the bus's link, else the RDMA device whose `device` link
/// ends in the address (trees without `bus/pci/devices`, as the fixtures are).
fn pci_dir(sysfs_root: &Path, pci: &str) -> Option<PathBuf> {
    let by_bus = sysfs_root.join("bus/pci/devices").join(pci);
    if by_bus.is_dir() {
        return Some(by_bus);
    }
    let class = sysfs_root.join("class/infiniband");
    names(&class).into_iter().find_map(|dev| {
        let link = class.join(dev).join("device");
        let target = fs::read_link(&link).ok()?;
        (target.file_name()? == pci).then_some(link)
    })
}

/// `(dev_port, name)` of the function's netdevs; a missing `dev_port` reads 0 (older kernels).
fn netdevs_by_port(pci_dir: &Path) -> Vec<(u32, String)> {
    let net = pci_dir.join("net");
    names(&net)
        .into_iter()
        .map(|name| {
            let dev_port = attr(&net.join(&name).join("dev_port"))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            (dev_port, name)
        })
        .collect()
}

/// Sorted entry names of `dir`, at most [`MAX_ENTRIES`]; none when unreadable.
fn names(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .take(MAX_ENTRIES)
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

fn attr(path: &Path) -> Option<String> {
    let text = crate::bounded_read::read_to_string(path, MAX_ATTR).ok()?;
    let value = text.trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// What a kernel RDMA device name may hold; nothing that walks out of `class/infiniband`.
fn is_device_name(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::sysfs_tree::{connectx7_node, write_tree, NicSpec, PCI_PARENT};

    fn target(device: &str, port: u32, netdev: &str) -> DeviceTarget {
        DeviceTarget {
            device: device.into(),
            port,
            netdev: netdev.into(),
        }
    }

    /// Two ConnectX-7 PFs, a VF of the first (`0000:1a:00.2`, its own `mlx5_2`), and the IB
    /// device without a netdev.
    fn node() -> (tempfile::TempDir, PathBuf, Vec<NicSpec>) {
        let mut nics = connectx7_node(10, 7);
        let mut vf = nics[0].clone();
        vf.name = "mlx5_10".into();
        vf.pci_address = "0000:1a:00.2".into();
        vf.netdev = Some("ens1f0v0".into());
        nics.push(vf);
        nics[8].netdev = None;
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        write_tree(&sys, &nics).unwrap();
        (dir, sys, nics)
    }

    #[test]
    fn pci_addresses_and_device_names_resolve() {
        let (_dir, sys, nics) = node();
        assert_eq!(nics[0].pci_address, "0000:1a:00.0");
        let pf = vec![target("mlx5_0", 1, "ens1f0np0")];
        assert_eq!(resolve(&sys, "0000:1a:00.0"), pf);
        assert_eq!(resolve(&sys, "1a:00.0"), pf);
        assert_eq!(resolve(&sys, " 0000:1A:00.0\n"), pf);
        assert_eq!(resolve(&sys, "mlx5_0"), pf);
        assert_eq!(
            resolve(&sys, "0000:1a:00.2"),
            [target("mlx5_10", 1, "ens1f0v0")]
        );
        // InfiniBand without IPoIB: the port, no netdev.
        let ib = &nics[8];
        assert_eq!(resolve(&sys, &ib.pci_address), [target(&ib.name, 1, "")]);
    }

    #[test]
    fn the_bus_link_is_used_where_it_exists() {
        let (_dir, sys, nics) = node();
        let pci = &nics[1].pci_address;
        let bus = sys.join("bus/pci/devices");
        fs::create_dir_all(&bus).unwrap();
        std::os::unix::fs::symlink(format!("../../../{PCI_PARENT}/{pci}"), bus.join(pci)).unwrap();
        // The class link is gone: only the bus can lead there.
        fs::remove_file(nics[1].device_dir(&sys).join("device")).unwrap();
        assert_eq!(
            resolve(&sys, pci),
            [target(&nics[1].name, 1, nics[1].netdev.as_deref().unwrap())]
        );
    }

    #[test]
    fn multi_port_functions_match_netdevs_by_dev_port() {
        let (_dir, sys, nics) = node();
        let nic = &nics[3];
        let pci_dir = nic.pci_dir(&sys);
        fs::create_dir_all(nic.device_dir(&sys).join("ports/2")).unwrap();
        let second = pci_dir.join("net/ens4f1");
        fs::create_dir_all(&second).unwrap();
        fs::write(second.join("dev_port"), "1\n").unwrap();
        let first = nic.netdev.as_deref().unwrap();
        assert_eq!(
            resolve(&sys, &nic.pci_address),
            [target(&nic.name, 1, first), target(&nic.name, 2, "ens4f1")]
        );
        // No netdev under the function (a bond took it): the GID table's.
        fs::remove_dir_all(&second).unwrap();
        let gids = nic.device_dir(&sys).join("ports/2/gid_attrs/ndevs");
        fs::create_dir_all(&gids).unwrap();
        fs::write(gids.join("0"), "bond0\n").unwrap();
        assert_eq!(
            resolve(&sys, &nic.pci_address)[1],
            target(&nic.name, 2, "bond0")
        );
    }

    #[test]
    fn other_ids_resolve_to_nothing() {
        let (_dir, sys, _) = node();
        for id in [
            "",
            "0",
            "1",
            "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763",
            "0000:99:00.0",
            "0000:1a:00.8",
            "00:1a:00.0",
            "..",
            "../../etc",
            "mlx5_99",
            "/dev/infiniband/uverbs0",
            "0000:1a:00.0:extra",
            "ü0000:1a:00",
        ] {
            assert!(resolve(&sys, id).is_empty(), "{id:?}");
        }
        assert!(resolve(Path::new("/nonexistent"), "0000:1a:00.0").is_empty());
    }
}
