//! Which rail each local RDMA device is on: the leaf group it is cabled to, which decides the
//! paths a port probes as `rail` (same leaves) or `cross_rail`, and whose NICs the gray-failure
//! rules hold each NIC against. The place of a device in the sorted device list is no rail: a
//! storage NIC among the GPU NICs, or one NIC missing, shifts every rail after it. In order:
//! 1. LLDP: the leaf the port's netdev is cabled to, its rail the number its name ends with
//!    (`leaf3`, `su2-rail3` -> 3; a leaf name without one says nothing);
//! 2. the configuration, `probe.rails: {mlx5_0: 0, ...}`;
//! 3. the PCI placement: the index of the accelerator (GPU) nearest the NIC in the PCI tree,
//!    among the host's accelerators in PCI order (NIC i sits beside GPU i in rail-optimized
//!    servers; each GPU pairs with one NIC). A NIC with no accelerator below its root port (a
//!    storage or front-end NIC) has no place.
//!
//! A device none of these places is off the rails: its rail is [`UNPLACED_BASE`] plus its
//! index among such devices, so it never takes a GPU NIC's rail. Where nothing places any
//! device (no LLDP, no config, no accelerators: soft-RoCE, the demo), rails are the sorted
//! order, as before. Every agent of a fabric must take its rails from the same source.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The first rail of devices that no source places.
pub(crate) const UNPLACED_BASE: u32 = 100;

/// Where a device's rail came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Lldp,
    Config,
    Placement,
    Unplaced,
    Order,
}

/// What is known of one local RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub device: String,
    /// The leaf its LLDP neighbour names, where there is LLDP data for it.
    pub lldp_leaf: Option<String>,
    /// Its PCI path below `devices/` (`pci0000:00`, `0000:00:01.0`, ...); empty when unknown.
    pub pci_path: Vec<String>,
}

/// The rail of every device of `nics`, by device name.
pub(crate) fn assign(
    nics: &[Nic],
    config: &BTreeMap<String, u32>,
    accelerators: &[Vec<String>],
) -> BTreeMap<String, (u32, Source)> {
    let mut sorted: Vec<&Nic> = nics.iter().collect();
    sorted.sort_by(|a, b| a.device.cmp(&b.device));
    let placed = placement(&sorted, accelerators);
    let mut rails = BTreeMap::new();
    for nic in &sorted {
        let from_lldp = nic.lldp_leaf.as_deref().and_then(trailing_number);
        let chosen = from_lldp
            .map(|rail| (rail, Source::Lldp))
            .or_else(|| config.get(&nic.device).map(|rail| (*rail, Source::Config)))
            .or_else(|| {
                placed
                    .get(&nic.device)
                    .map(|rail| (*rail, Source::Placement))
            });
        if let Some(chosen) = chosen {
            rails.insert(nic.device.clone(), chosen);
        }
    }
    let (order, base) = if rails.is_empty() {
        (Source::Order, 0)
    } else {
        (Source::Unplaced, UNPLACED_BASE)
    };
    let left: Vec<&&Nic> = sorted
        .iter()
        .filter(|n| !rails.contains_key(&n.device))
        .collect();
    for (index, nic) in left.into_iter().enumerate() {
        rails.insert(nic.device.clone(), (base + index as u32, order));
    }
    rails
}

/// The number a leaf's name ends with.
fn trailing_number(name: &str) -> Option<u32> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().ok()
}

/// Each NIC's nearest accelerator, each accelerator taken once: NICs in PCI order take the
/// free accelerator that shares the deepest bridge with them, below the root complex.
fn placement(nics: &[&Nic], accelerators: &[Vec<String>]) -> BTreeMap<String, u32> {
    let mut order: Vec<usize> = (0..accelerators.len()).collect();
    order.sort_by(|a, b| accelerators[*a].cmp(&accelerators[*b]));
    let mut by_pci: Vec<&&Nic> = nics.iter().filter(|n| !n.pci_path.is_empty()).collect();
    by_pci.sort_by(|a, b| a.pci_path.cmp(&b.pci_path));
    let mut taken = vec![false; accelerators.len()];
    let mut placed = BTreeMap::new();
    for nic in by_pci {
        let shared = |gpu: &Vec<String>| {
            nic.pci_path
                .iter()
                .zip(gpu)
                .take_while(|(a, b)| a == b)
                .count()
        };
        // Index in PCI order, and depth shared; the root complex alone (1) is no nearness.
        let best = order
            .iter()
            .enumerate()
            .filter(|(_, gpu)| !taken[**gpu])
            .map(|(rank, gpu)| (rank, *gpu, shared(&accelerators[*gpu])))
            .filter(|(_, _, depth)| *depth >= 2)
            .max_by(|a, b| a.2.cmp(&b.2).then(b.0.cmp(&a.0)));
        if let Some((rank, gpu, _)) = best {
            taken[gpu] = true;
            placed.insert(nic.device.clone(), rank as u32);
        }
    }
    placed
}

/// PCI device classes of accelerators: 3D controllers (NVIDIA's datacenter GPUs), display
/// controllers (AMD Instinct) and processing accelerators (Gaudi and others).
const ACCELERATOR_CLASSES: [&str; 3] = ["0x0302", "0x0380", "0x1200"];
/// VGA controllers count only from these vendors (NVIDIA, AMD): a server's BMC has a VGA
/// controller too (ASPEED, Matrox), which is no GPU.
const VGA_CLASS: &str = "0x0300";
const GPU_VENDORS: [&str; 2] = ["0x10de", "0x1002"];

fn is_accelerator(device: &Path) -> bool {
    let read = |file: &str| crate::bounded_read::read_to_string(&device.join(file), 64);
    let Ok(class) = read("class") else {
        return false;
    };
    if ACCELERATOR_CLASSES.iter().any(|c| class.starts_with(c)) {
        return true;
    }
    class.starts_with(VGA_CLASS) && read("vendor").is_ok_and(|v| GPU_VENDORS.contains(&v.trim()))
}

/// A device's path below `devices/`, from a sysfs link to it.
fn pci_path(link: &Path) -> Vec<String> {
    let Ok(real) = std::fs::canonicalize(link) else {
        return Vec::new();
    };
    let parts: Vec<String> = real
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.iter().rposition(|p| p == "devices") {
        Some(at) => parts[at + 1..]
            .iter()
            .take_while(|p| p.starts_with("pci") || p.contains(':'))
            .cloned()
            .collect(),
        None => Vec::new(),
    }
}

/// `<sysfs>/class/infiniband/<device>/device`'s PCI path.
pub(crate) fn nic_pci_path(sysfs: &Path, device: &str) -> Vec<String> {
    pci_path(&sysfs.join("class/infiniband").join(device).join("device"))
}

/// The PCI paths of the host's accelerators (`<sysfs>/bus/pci/devices`).
pub fn accelerators(sysfs: &Path) -> Vec<Vec<String>> {
    let dir: PathBuf = sysfs.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| is_accelerator(&entry.path()))
        .map(|entry| pci_path(&entry.path()))
        .filter(|path| !path.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path under root port `root` and switch port `port`: `pci0000:00/<root>/<port>/<bdf>`.
    fn path(root: u8, port: u8, bdf: &str) -> Vec<String> {
        vec![
            "pci0000:00".into(),
            format!("0000:00:{root:02x}.0"),
            format!("0000:{port:02x}:00.0"),
            bdf.to_string(),
        ]
    }

    /// Rail-optimized: GPU i and NIC i under root port i, each on its own switch port.
    fn gpus(n: u8) -> Vec<Vec<String>> {
        (0..n)
            .map(|i| {
                path(
                    i + 1,
                    0x10 * (i + 1),
                    &format!("0000:{:02x}:00.0", 0x10 * (i + 1) + 1),
                )
            })
            .collect()
    }

    fn nic(device: &str, pci: Vec<String>) -> Nic {
        Nic {
            device: device.into(),
            lldp_leaf: None,
            pci_path: pci,
        }
    }

    /// GPU NIC `i` named `name`, beside GPU `i`.
    fn gpu_nic(name: &str, i: u8) -> Nic {
        nic(
            name,
            path(
                i + 1,
                0x10 * (i + 1),
                &format!("0000:{:02x}:00.0", 0x10 * (i + 1) + 2),
            ),
        )
    }

    fn rails(assigned: &BTreeMap<String, (u32, Source)>) -> Vec<(&str, u32)> {
        assigned
            .iter()
            .map(|(d, (r, _))| (d.as_str(), *r))
            .collect()
    }

    /// A storage NIC named between the GPU NICs (mlx5_2, on a root port of its own) shifted
    /// every rail after it when rails were the sorted order; beside their GPUs, they keep theirs.
    #[test]
    fn a_storage_nic_does_not_shift_the_rails() {
        let mut nics: Vec<Nic> = (0..4u8)
            .map(|i| {
                let name = if i < 2 { i } else { i + 1 };
                gpu_nic(&format!("mlx5_{name}"), i)
            })
            .collect();
        nics.push(nic("mlx5_2", path(0x20, 0x80, "0000:81:00.0")));
        let assigned = assign(&nics, &BTreeMap::new(), &gpus(4));
        assert_eq!(
            rails(&assigned),
            [
                ("mlx5_0", 0),
                ("mlx5_1", 1),
                ("mlx5_2", UNPLACED_BASE),
                ("mlx5_3", 2),
                ("mlx5_4", 3)
            ]
        );
        assert_eq!(assigned["mlx5_3"].1, Source::Placement);
        assert_eq!(assigned["mlx5_2"].1, Source::Unplaced);
    }

    /// A host whose NIC of rail 1 is missing (failed, or left out by device_include): the NICs
    /// after it keep their rails.
    #[test]
    fn a_missing_nic_does_not_shift_the_rails() {
        let nics = [
            gpu_nic("mlx5_0", 0),
            gpu_nic("mlx5_2", 2),
            gpu_nic("mlx5_3", 3),
        ];
        let assigned = assign(&nics, &BTreeMap::new(), &gpus(4));
        assert_eq!(
            rails(&assigned),
            [("mlx5_0", 0), ("mlx5_2", 2), ("mlx5_3", 3)]
        );
    }

    /// LLDP's leaf first, then the config, then the placement; nothing known: the sorted order.
    #[test]
    fn lldp_then_the_config_then_the_placement() {
        let mut by_lldp = gpu_nic("mlx5_0", 0);
        by_lldp.lldp_leaf = Some("su1-leaf7".into());
        let mut unnumbered = gpu_nic("mlx5_1", 1);
        unnumbered.lldp_leaf = Some("leaf-a".into());
        let nics = [by_lldp, unnumbered, gpu_nic("mlx5_2", 2)];
        let config = BTreeMap::from([("mlx5_0".to_string(), 5), ("mlx5_1".to_string(), 6)]);
        let assigned = assign(&nics, &config, &gpus(3));
        assert_eq!(assigned["mlx5_0"], (7, Source::Lldp));
        assert_eq!(assigned["mlx5_1"], (6, Source::Config));
        assert_eq!(assigned["mlx5_2"], (2, Source::Placement));
        let bare = [nic("rxe1", Vec::new()), nic("rxe0", Vec::new())];
        let assigned = assign(&bare, &BTreeMap::new(), &[]);
        assert_eq!(assigned["rxe0"], (0, Source::Order));
        assert_eq!(assigned["rxe1"], (1, Source::Order));
    }

    /// The PCI paths come from sysfs' links, as the kernel lays them out.
    #[test]
    fn pci_paths_are_read_through_the_sysfs_links() {
        let sys = tempfile::tempdir().unwrap();
        let root = sys.path();
        let gpu = "devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:11:00.0";
        let nic = "devices/pci0000:00/0000:00:01.0/0000:10:00.0/0000:12:00.0";
        let storage = "devices/pci0000:80/0000:80:01.0/0000:81:00.0";
        // The BMC's VGA, first in PCI order and no GPU.
        let bmc = "devices/pci0000:00/0000:00:00.5/0000:01:00.0";
        for (dir, class, vendor) in [
            (gpu, "0x030200", "0x10de"),
            (nic, "0x020700", "0x15b3"),
            (storage, "0x020700", "0x15b3"),
            (bmc, "0x030000", "0x1a03"),
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join("class"), format!("{class}\n")).unwrap();
            std::fs::write(root.join(dir).join("vendor"), format!("{vendor}\n")).unwrap();
            let bdf = dir.rsplit('/').next().unwrap();
            std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            std::os::unix::fs::symlink(root.join(dir), root.join("bus/pci/devices").join(bdf))
                .unwrap();
        }
        for (device, dir) in [("mlx5_0", nic), ("mlx5_1", storage)] {
            let ib = root.join(dir).join("infiniband").join(device);
            std::fs::create_dir_all(&ib).unwrap();
            std::os::unix::fs::symlink(root.join(dir), ib.join("device")).unwrap();
            std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
            std::os::unix::fs::symlink(&ib, root.join("class/infiniband").join(device)).unwrap();
        }
        let gpus = accelerators(root);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].last().unwrap(), "0000:11:00.0");
        let nics: Vec<Nic> = ["mlx5_0", "mlx5_1"]
            .iter()
            .map(|d| Nic {
                device: d.to_string(),
                lldp_leaf: None,
                pci_path: nic_pci_path(root, d),
            })
            .collect();
        assert_eq!(nics[0].pci_path.len(), 4);
        let assigned = assign(&nics, &BTreeMap::new(), &gpus);
        assert_eq!(assigned["mlx5_0"], (0, Source::Placement));
        assert_eq!(assigned["mlx5_1"], (UNPLACED_BASE, Source::Unplaced));
    }
}
