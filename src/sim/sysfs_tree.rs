//! Writes sysfs-shaped fixture trees for mlx5 (ConnectX-7) RDMA devices, laid out like a real
//! Linux `/sys` — directories, relative symlinks and `"%llu\n"` attribute text — so that tests,
//! the benchmark and the simulated fabric drive the exporter through the same paths as a node.
//!
//! Written below `root` (the `sys` directory) for each [`NicSpec`]:
//!
//! ```text
//! devices/pci0000:00/0000:00:01.0/                       root port: PCIe link files (pcie_tree.rs)
//! devices/pci0000:00/0000:00:01.0/<pci>/                 PCI function: vendor, device, numa_node, PCIe link and AER ...
//!     driver    -> ../../../../bus/pci/drivers/mlx5_core
//!     subsystem -> ../../../../bus/pci
//!     infiniband/<dev>/                                  fw_ver, node_guid, hw_counters/, ports/1/...
//!         device    -> ../../../<pci>
//!         subsystem -> ../../../../../../class/infiniband
//!     net/<netdev>/                                      address, mtu, operstate, ...
//!         device    -> ../../../<pci>
//!         subsystem -> ../../../../../../class/net
//! class/infiniband/<dev> -> ../../devices/pci0000:00/0000:00:01.0/<pci>/infiniband/<dev>
//! class/net/<netdev>     -> ../../devices/pci0000:00/0000:00:01.0/<pci>/net/<netdev>
//! bus/pci/drivers/mlx5_core/<pci> -> ../../../../devices/pci0000:00/0000:00:01.0/<pci>
//! ```
//!
//! As in the kernel's tree, the `subsystem` links form cycles: walk it without following links.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Parent of every fixture PCI function (one root port on host bridge 0), relative to `root`.
pub const PCI_PARENT: &str = "devices/pci0000:00/0000:00:01.0";

/// `hw_counters/lifespan`: the kernel's default cache lifetime of hw counter values, in ms, as a
/// HZ=1000 kernel prints it; the value is kept in jiffies, so HZ=250 kernels (Debian's 6.1, seen
/// in `tests/it/real_kernel.rs`) print 12.
pub const LIFESPAN_MS: u64 = 10;

/// Link layer of port 1, as `ports/1/link_layer` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkLayer {
    /// RoCE.
    #[default]
    Ethernet,
    InfiniBand,
}

impl LinkLayer {
    /// The text of `ports/<n>/link_layer` (without the newline).
    pub fn sysfs_text(self) -> &'static str {
        match self {
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::InfiniBand => "InfiniBand",
        }
    }
}

/// One RDMA device with a single port (port 1), as the fixture writes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NicSpec {
    /// RDMA device name, e.g. `mlx5_0`.
    pub name: String,
    /// PCI function, e.g. `0000:1a:00.0`.
    pub pci_address: String,
    /// `ens1f0np0` for RoCE; IB ports may have an IPoIB netdev (`ibp42s0f0`) or none.
    pub netdev: Option<String>,
    pub link_layer: LinkLayer,
    /// Kernel text, e.g. `400 Gb/sec (4X NDR)`.
    pub rate: String,
    /// e.g. `4: ACTIVE`.
    pub state: String,
    /// e.g. `5: LinkUp`.
    pub phys_state: String,
    /// `0x0` for RoCE, e.g. `0x1f` for IB.
    pub lid: String,
    pub fw_ver: String,
    pub board_id: String,
    pub hca_type: String,
    /// `b83f:d203:00a1:2b3c`. RoCE MACs and GIDs are derived from it, as mlx5 does.
    pub node_guid: String,
    /// `ports/1/counters/<name>`, raw kernel values (`port_*_data` in 4-octet words).
    pub counters: Vec<(String, u64)>,
    /// `ports/1/hw_counters/<name>`, including `lifespan`.
    pub hw_counters: Vec<(String, u64)>,
    /// `<dev>/hw_counters/<name>`, including `lifespan`; empty means no directory at all.
    pub device_hw_counters: Vec<(String, u64)>,
    /// What `ethtool -S <netdev>` prints, in driver order; empty means no statistics file.
    pub ethtool: Vec<(String, u64)>,
    /// MLNX_OFED's `class/net/<netdev>/ecn/` (ECN/DCQCN settings); `None`: no such directory,
    /// as upstream mlx5 (the bundled fixture node). The demo's fabric sets it.
    pub ecn: Option<super::ecn_tree::EcnSpec>,
    /// The PCIe link of the PCI function (and of the root port above it): width and AER.
    pub pcie: super::pcie_tree::PcieSpec,
}

impl NicSpec {
    /// Value of `ports/1/counters/<name>`.
    pub fn counter(&self, name: &str) -> Option<u64> {
        lookup(&self.counters, name)
    }

    /// Value of `ports/1/hw_counters/<name>`.
    pub fn hw_counter(&self, name: &str) -> Option<u64> {
        lookup(&self.hw_counters, name)
    }

    /// Value of the `ethtool -S` statistic `name`.
    pub fn ethtool_stat(&self, name: &str) -> Option<u64> {
        lookup(&self.ethtool, name)
    }

    /// The PCI function directory below `root`.
    pub fn pci_dir(&self, root: &Path) -> PathBuf {
        root.join(PCI_PARENT).join(&self.pci_address)
    }

    /// The real (non-symlink) device directory below `root`.
    pub fn device_dir(&self, root: &Path) -> PathBuf {
        self.pci_dir(root).join("infiniband").join(&self.name)
    }

    fn is_ib(&self) -> bool {
        self.link_layer == LinkLayer::InfiniBand
    }
}

fn lookup(stats: &[(String, u64)], name: &str) -> Option<u64> {
    stats.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

/// Writes (or rewrites in place) the sysfs tree of `nics` below `root`, the `sys` directory.
///
/// Changed files are replaced by rename, so a concurrent reader sees the old or the new value,
/// never a truncated file; unchanged ones are left alone. Attributes absent from a later spec
/// are not removed. One writer per `root` at a time.
pub fn write_tree(root: &Path, nics: &[NicSpec]) -> io::Result<()> {
    fs::create_dir_all(root)?;
    let writer = Writer {
        root,
        // In `root` so the rename never crosses filesystems; the pid keeps processes apart.
        tmp: root.join(format!(".sysfs_tree.{}.tmp", std::process::id())),
    };
    for dir in ["class/infiniband", "class/net", "bus/pci/drivers/mlx5_core"] {
        fs::create_dir_all(root.join(dir))?;
    }
    for (position, nic) in nics.iter().enumerate() {
        writer.nic(nic, position)?;
    }
    Ok(())
}

/// Rewrites only what differs between `before` (already on disk under `root`, written by
/// `write_tree`) and `after`: counter values and port states. The simulated fabric calls this
/// ten times a second, where comparing every file on disk would cost more than the model.
pub fn update_tree(root: &Path, before: &[NicSpec], after: &[NicSpec]) -> io::Result<()> {
    let writer = Writer {
        root,
        tmp: root.join(format!(".sysfs_tree.{}.tmp", std::process::id())),
    };
    for (position, (old, new)) in before.iter().zip(after).enumerate() {
        // A new device, or a link that changed state (the netdev's carrier, operstate and
        // speed follow it): the whole device, compared file by file. Rare.
        if old.name != new.name || old.state != new.state || old.phys_state != new.phys_state {
            writer.nic(new, position)?;
            continue;
        }
        let device = new.device_dir(root);
        let port = device.join("ports/1");
        let changed = |old: &[(String, u64)], new: &'_ [(String, u64)]| -> Vec<(String, u64)> {
            new.iter()
                .zip(old)
                .filter(|(n, o)| n != o)
                .map(|(n, _)| n.clone())
                .collect()
        };
        for (dir, old, new) in [
            (port.join("counters"), &old.counters, &new.counters),
            (port.join("hw_counters"), &old.hw_counters, &new.hw_counters),
            (
                device.join("hw_counters"),
                &old.device_hw_counters,
                &new.device_hw_counters,
            ),
        ] {
            for (name, value) in changed(old, new) {
                writer.replace(&dir.join(name), &format!("{value}\n"))?;
            }
        }
        if old.pcie != new.pcie {
            let (function, port) = (new.pci_dir(root), root.join(PCI_PARENT));
            super::pcie_tree::write_pcie(&function, &port, &new.pcie, &|path, text| {
                writer.file(path, text)
            })?;
        }
        // A scenario turned a congestion-control setting on or off: rare, file by file.
        if let (Some(ecn), Some(netdev)) = (&new.ecn, &new.netdev) {
            if old.ecn.as_ref() != Some(ecn) {
                let dir = new.pci_dir(root).join("net").join(netdev);
                super::ecn_tree::write_ecn(&dir, ecn, &|path, text| writer.file(path, text))?;
            }
        }
    }
    Ok(())
}

/// Writes `<dir>/<netdev>.txt` in `ethtool -S` format for every NIC with a netdev and statistics.
pub fn write_ethtool_files(dir: &Path, nics: &[NicSpec]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for nic in nics {
        let Some(netdev) = &nic.netdev else { continue };
        if nic.ethtool.is_empty() {
            // A driver without statistics makes `ethtool -S` fail; no file models that.
            continue;
        }
        let tmp = dir.join(format!(".{netdev}.txt.tmp"));
        fs::write(&tmp, ethtool_text(&nic.ethtool))?;
        fs::rename(&tmp, dir.join(format!("{netdev}.txt")))?;
    }
    // Their FEC_GET answers beside them (the `fec` collector's file source).
    super::fec::write_fec_files(dir, nics)
}

/// `ethtool -S` output: a header, then one `     name: value` line per statistic.
pub fn ethtool_text(stats: &[(String, u64)]) -> String {
    let mut text = String::from("NIC statistics:\n");
    for (name, value) in stats {
        let _ = writeln!(text, "     {name}: {value}");
    }
    text
}

struct Writer<'a> {
    root: &'a Path,
    tmp: PathBuf,
}

impl Writer<'_> {
    fn nic(&self, nic: &NicSpec, position: usize) -> io::Result<()> {
        let pci_rel = format!("{PCI_PARENT}/{}", nic.pci_address);
        let pci_dir = self.root.join(&pci_rel);
        let bus = pci_bus(&nic.pci_address);
        let class = if nic.is_ib() { "0x020700" } else { "0x020000" };
        self.attrs(
            &pci_dir,
            &[
                ("vendor", "0x15b3".into()),
                // 0x1021 = 4129: the PCI id behind hca_type "MT4129" (ConnectX-7).
                ("device", "0x1021".into()),
                ("subsystem_vendor", "0x15b3".into()),
                ("class", class.into()),
                // Two-socket host: the upper half of the buses hangs off socket 1.
                ("numa_node", if bus >= 0x80 { "1" } else { "0" }.into()),
            ],
        )?;
        super::pcie_tree::write_pcie(
            &pci_dir,
            &self.root.join(PCI_PARENT),
            &nic.pcie,
            &|path, text| self.file(path, text),
        )?;
        self.link(
            &pci_dir.join("driver"),
            "../../../../bus/pci/drivers/mlx5_core",
        )?;
        self.link(&pci_dir.join("subsystem"), "../../../../bus/pci")?;
        self.link(
            &self
                .root
                .join("bus/pci/drivers/mlx5_core")
                .join(&nic.pci_address),
            &format!("../../../../{pci_rel}"),
        )?;

        self.ib_device(nic, &pci_dir)?;
        self.link(
            &self.root.join("class/infiniband").join(&nic.name),
            &format!("../../{pci_rel}/infiniband/{}", nic.name),
        )?;

        if let Some(netdev) = &nic.netdev {
            self.netdev(nic, netdev, &pci_dir, position)?;
            self.link(
                &self.root.join("class/net").join(netdev),
                &format!("../../{pci_rel}/net/{netdev}"),
            )?;
        }
        Ok(())
    }

    fn ib_device(&self, nic: &NicSpec, pci_dir: &Path) -> io::Result<()> {
        let dir = pci_dir.join("infiniband").join(&nic.name);
        self.attrs(
            &dir,
            &[
                ("node_type", "1: CA".into()),
                // Every device has one (ib_core); rdma-core's rdma-ndd sets it to
                // `<hostname> <device>`, and the tree knows no host name.
                ("node_desc", format!("localhost {}", nic.name)),
                ("node_guid", nic.node_guid.clone()),
                // mlx5 uses the node GUID as system image GUID on a single-host adapter.
                ("sys_image_guid", nic.node_guid.clone()),
                ("fw_ver", nic.fw_ver.clone()),
                ("hca_type", nic.hca_type.clone()),
                ("board_id", nic.board_id.clone()),
            ],
        )?;
        self.link(
            &dir.join("device"),
            &format!("../../../{}", nic.pci_address),
        )?;
        self.link(&dir.join("subsystem"), "../../../../../../class/infiniband")?;
        if !nic.device_hw_counters.is_empty() {
            self.counters(&dir.join("hw_counters"), &nic.device_hw_counters)?;
        }

        let port = dir.join("ports/1");
        let (sm_lid, cap_mask) = if nic.is_ib() {
            // Port capability mask as an mlx5 IB port (SM-managed, CM, ...) reports it.
            ("0x1", "0xa651e848")
        } else {
            // IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS: what mlx5 reports on RoCE ports.
            ("0x0", "0x04010000")
        };
        self.attrs(
            &port,
            &[
                ("link_layer", nic.link_layer.sysfs_text().into()),
                ("state", nic.state.clone()),
                ("phys_state", nic.phys_state.clone()),
                ("rate", nic.rate.clone()),
                ("lid", nic.lid.clone()),
                ("sm_lid", sm_lid.into()),
                ("sm_sl", "0".into()),
                ("lid_mask_count", "0".into()),
                ("cap_mask", cap_mask.into()),
            ],
        )?;
        self.counters(&port.join("counters"), &nic.counters)?;
        self.counters(&port.join("hw_counters"), &nic.hw_counters)?;
        self.attrs(&port.join("pkeys"), &[("0", "0xffff".into())])?;
        self.gid_table(nic, &port)
    }

    /// RoCE: link-local GIDs 0 (RoCE v1) and 1 (RoCE v2) bound to the netdev. IB: GID 0 from
    /// the port GUID, no `ndevs` entries (reading them fails on a real IB port).
    fn gid_table(&self, nic: &NicSpec, port: &Path) -> io::Result<()> {
        let gids = port.join("gids");
        let ndevs = port.join("gid_attrs/ndevs");
        let types = port.join("gid_attrs/types");
        for dir in [&gids, &ndevs, &types] {
            fs::create_dir_all(dir)?;
        }
        let guid = guid_bytes(&nic.node_guid);
        if nic.is_ib() {
            self.attrs(&gids, &[("0", gid_text(&guid))])?;
            return self.attrs(&types, &[("0", "IB/RoCE v1".into())]);
        }
        // RoCE GIDs come from the netdev's addresses: without a netdev the table is empty.
        let Some(netdev) = &nic.netdev else {
            return Ok(());
        };
        let gid = gid_text(&eui64(&mac_of(&guid)));
        self.attrs(&gids, &[("0", gid.clone()), ("1", gid)])?;
        self.attrs(&ndevs, &[("0", netdev.clone()), ("1", netdev.clone())])?;
        self.attrs(
            &types,
            &[("0", "IB/RoCE v1".into()), ("1", "RoCE v2".into())],
        )
    }

    fn netdev(
        &self,
        nic: &NicSpec,
        netdev: &str,
        pci_dir: &Path,
        position: usize,
    ) -> io::Result<()> {
        let dir = pci_dir.join("net").join(netdev);
        let guid = guid_bytes(&nic.node_guid);
        let up = nic.state.contains("ACTIVE");
        let (address, addr_len, if_type, mtu) = if nic.is_ib() {
            // IPoIB hardware address: 4 bytes of QPN, then the port GID.
            let mut hw = vec![0x00, 0x00, 0x10, 0x49, 0xfe, 0x80, 0, 0, 0, 0, 0, 0];
            hw.extend_from_slice(&guid);
            (colon_hex(&hw), "20", "32", "4092")
        } else {
            (colon_hex(&mac_of(&guid)), "6", "1", "9000")
        };
        let speed = match rate_gbps(&nic.rate) {
            Some(gbps) if up => (gbps * 1000.0).round().to_string(),
            _ => "-1".to_string(),
        };
        self.attrs(
            &dir,
            &[
                ("address", address),
                ("addr_len", addr_len.into()),
                ("type", if_type.into()),
                ("mtu", mtu.into()),
                ("operstate", if up { "up" } else { "down" }.into()),
                ("carrier", if up { "1" } else { "0" }.into()),
                ("speed", speed),
                ("dev_port", "0".into()),
                // 1 is lo; the order of `nics` stands in for probe order.
                ("ifindex", (position + 2).to_string()),
            ],
        )?;
        self.link(
            &dir.join("device"),
            &format!("../../../{}", nic.pci_address),
        )?;
        if let Some(ecn) = &nic.ecn {
            super::ecn_tree::write_ecn(&dir, ecn, &|path, text| self.file(path, text))?;
        }
        self.link(&dir.join("subsystem"), "../../../../../../class/net")
    }

    fn counters(&self, dir: &Path, values: &[(String, u64)]) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        for (name, value) in values {
            self.file(&dir.join(name), &format!("{value}\n"))?;
        }
        Ok(())
    }

    fn attrs(&self, dir: &Path, values: &[(&str, String)]) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        for (name, value) in values {
            self.file(&dir.join(name), &format!("{value}\n"))?;
        }
        Ok(())
    }

    fn file(&self, path: &Path, contents: &str) -> io::Result<()> {
        // Creating an inode is the slow part on disk filesystems (about 1 ms each on ext4 here),
        // so rewrites of the simulated fabric only replace what changed.
        if fs::read(path).is_ok_and(|old| old == contents.as_bytes()) {
            return Ok(());
        }
        self.replace(path, contents)
    }

    /// Replaces `path` by rename: a reader sees the old or the new value, never half of one.
    fn replace(&self, path: &Path, contents: &str) -> io::Result<()> {
        fs::write(&self.tmp, contents)?;
        fs::rename(&self.tmp, path)
    }

    /// Creates `at -> target`, replacing a link with another target (rewrites are idempotent).
    fn link(&self, at: &Path, target: &str) -> io::Result<()> {
        match fs::read_link(at) {
            Ok(existing) if existing == Path::new(target) => return Ok(()),
            Ok(_) => fs::remove_file(at)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Some(parent) = at.parent() {
            fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(target, at)
    }
}

/// The bus number of `dddd:bb:dd.f` (0 if malformed).
fn pci_bus(address: &str) -> u32 {
    address
        .split(':')
        .nth(1)
        .and_then(|bus| u32::from_str_radix(bus, 16).ok())
        .unwrap_or(0)
}

/// Leading number of a rate such as `400 Gb/sec (4X NDR)`.
fn rate_gbps(rate: &str) -> Option<f64> {
    rate.split_whitespace().next()?.parse().ok()
}

/// `b83f:d203:00a1:2b3c` as 8 bytes; zeros if malformed (fixtures only need stable output).
fn guid_bytes(guid: &str) -> [u8; 8] {
    let hex: String = guid.chars().filter(|c| *c != ':').collect();
    let value = u64::from_str_radix(&hex, 16).unwrap_or(0);
    value.to_be_bytes()
}

/// mlx5 Ethernet node GUIDs are the MAC with `03:00` inserted in the middle; this undoes it.
fn mac_of(guid: &[u8; 8]) -> [u8; 6] {
    [guid[0], guid[1], guid[2], guid[5], guid[6], guid[7]]
}

/// Modified EUI-64 interface id of a MAC (universal/local bit flipped, `ff:fe` inserted).
fn eui64(mac: &[u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// Link-local GID text as sysfs prints it: `fe80:0000:0000:0000:ba3f:d2ff:fea1:2b3c`.
fn gid_text(interface_id: &[u8; 8]) -> String {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[8..].copy_from_slice(interface_id);
    gid.chunks(2)
        .map(|pair| format!("{:02x}{:02x}", pair[0], pair[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ---------------------------------------------------------------------------------------------
// A deterministic ConnectX-7 GPU node.
// ---------------------------------------------------------------------------------------------

/// PCI buses of the eight GPU NICs (one per GPU, behind the GPUs' PCIe switches, four per socket).
const GPU_NIC_BUSES: [u32; 8] = [0x1a, 0x3c, 0x4d, 0x5e, 0x9c, 0xbc, 0xcc, 0xdc];
/// Bus of the dual-port storage/front-end adapter (functions .0 and .1).
const PAIR_BUS: u32 = 0x2a;
const FW_VER: &str = "28.39.1002";
const HCA_TYPE: &str = "MT4129";
/// Board ids (PSIDs) are plausible, not authoritative: one for the GPU NIC SKU, one for the
/// storage/front-end adapter.
const GPU_BOARD_ID: &str = "MT_0000000838";
const PAIR_BOARD_ID: &str = "MT_0000000834";
const RATE_400G: &str = "400 Gb/sec (4X NDR)";
/// The one PFC-enabled (lossless) priority; RoCE data runs on it, CNPs on priority 6.
const PFC_PRIORITY: usize = 3;
const CNP_PRIORITY: usize = 6;
/// RoCEv2 CNP frame on the wire: Eth 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4 + FCS 4.
const CNP_FRAME_BYTES: u64 = 78;
/// Ethernet FCS, counted by the PHY and per-priority byte counters but not by vport counters.
const FCS_BYTES: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// RoCE NIC paired with one GPU (GPUDirect RDMA, NCCL traffic).
    Gpu,
    /// InfiniBand storage port (function 0 of the dual-port adapter).
    Storage,
    /// RoCE front-end port: mostly TCP, a little RDMA.
    FrontEnd,
}

/// Where device `index` sits and what it is called.
struct Placement {
    role: Role,
    pci_address: String,
    netdev: String,
    /// Distinct per adapter, so GUIDs never collide within a node.
    card: u64,
    function: u64,
}

fn placement(index: usize) -> Placement {
    if let Some(&bus) = GPU_NIC_BUSES.get(index) {
        return Placement {
            role: Role::Gpu,
            pci_address: format!("0000:{bus:02x}:00.0"),
            // Dual-port silicon with only port 0 cabled: multi-function, hence "f0".
            netdev: format!("ens{}f0np0", index + 1),
            card: index as u64,
            function: 0,
        };
    }
    let extra = index - GPU_NIC_BUSES.len();
    let (card, function) = ((extra / 2) as u64, (extra % 2) as u64);
    // Adapters past the first pair go to buses 0xe0.. and then further PCI domains.
    let (domain, bus) = match card {
        0 => (0, PAIR_BUS),
        n => ((n - 1) / 32, 0xe0 + ((n - 1) % 32) as u32),
    };
    let role = if index == GPU_NIC_BUSES.len() {
        Role::Storage
    } else {
        Role::FrontEnd
    };
    let netdev = match role {
        // systemd's name for an IPoIB netdev of a multi-function device.
        Role::Storage => format!("ibp{bus}s0f{function}"),
        _ => format!("ens{}f{function}np{function}", 9 + card),
    };
    Placement {
        role,
        pci_address: format!("{domain:04x}:{bus:02x}:00.{function}"),
        netdev,
        card: GPU_NIC_BUSES.len() as u64 + card,
        function,
    }
}

/// A node of `devices` ConnectX-7 ports: `mlx5_0..7` are 400G RoCE GPU NICs; `mlx5_8` (if
/// present) is a 400G InfiniBand storage port and `mlx5_9` its RoCE front-end sibling on the
/// same dual-port adapter; further devices are more RoCE front-end ports.
///
/// Deterministic: the same `(devices, seed)` gives the same specs, and a device's values do not
/// depend on how many devices follow it.
pub fn connectx7_node(devices: usize, seed: u64) -> Vec<NicSpec> {
    let node = NodeProfile::new(seed);
    (0..devices).map(|i| build_nic(i, seed, &node)).collect()
}

/// What all NICs of one node share: the same job drives every GPU NIC.
struct NodeProfile {
    uptime_s: f64,
    gpu_tx_bytes: f64,
    ecn_ratio: f64,
    rx_pause_frames: f64,
}

impl NodeProfile {
    fn new(seed: u64) -> Self {
        let mut rng = SplitMix64(seed);
        NodeProfile {
            uptime_s: rng.between(4.0 * 3600.0, 36.0 * 3600.0),
            gpu_tx_bytes: rng.between(10e12, 90e12),
            ecn_ratio: rng.between(2e-5, 8e-4),
            rx_pause_frames: rng.between(1_000.0, 40_000.0),
        }
    }
}

/// Bytes and packets that crossed one port since the driver loaded.
#[derive(Default)]
struct Traffic {
    tx_rdma_bytes: u64,
    rx_rdma_bytes: u64,
    tx_rdma_packets: u64,
    rx_rdma_packets: u64,
    tx_rdma_mcast_bytes: u64,
    rx_rdma_mcast_bytes: u64,
    tx_rdma_mcast_packets: u64,
    rx_rdma_mcast_packets: u64,
    /// Non-RDMA traffic of the netdev (TCP, IPoIB).
    tx_eth_bytes: u64,
    rx_eth_bytes: u64,
    tx_eth_packets: u64,
    rx_eth_packets: u64,
}

impl Traffic {
    fn port_xmit_bytes(&self) -> u64 {
        self.tx_rdma_bytes + self.tx_rdma_mcast_bytes
    }
    fn port_rcv_bytes(&self) -> u64 {
        self.rx_rdma_bytes + self.rx_rdma_mcast_bytes
    }
    fn port_xmit_packets(&self) -> u64 {
        self.tx_rdma_packets + self.tx_rdma_mcast_packets
    }
    fn port_rcv_packets(&self) -> u64 {
        self.rx_rdma_packets + self.rx_rdma_mcast_packets
    }
}

/// Congestion-control counters of a RoCE port (zero on IB, where they do not exist).
#[derive(Default)]
struct Congestion {
    ecn_marked: u64,
    cnp_sent: u64,
    cnp_handled: u64,
    cnp_ignored: u64,
}

fn build_nic(index: usize, seed: u64, node: &NodeProfile) -> NicSpec {
    let place = placement(index);
    // Per-device stream keyed by index: adding devices never changes earlier ones.
    let mut rng = SplitMix64(seed ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let ib = place.role == Role::Storage;

    let traffic = traffic(place.role, node, &mut rng);
    let congestion = if ib {
        Congestion::default()
    } else {
        let ecn_marked =
            (traffic.rx_rdma_packets as f64 * node.ecn_ratio * rng.between(0.7, 1.3)) as u64;
        // A notification point rate-limits CNPs per QP, so it sends fewer than it sees marks.
        let cnp_sent = (ecn_marked as f64 * rng.between(0.25, 0.9)) as u64;
        // CNPs handled are the peers' reaction to this NIC's sends: same order of magnitude.
        let peer_marks = traffic.tx_rdma_packets as f64 * node.ecn_ratio * rng.between(0.7, 1.3);
        Congestion {
            ecn_marked,
            cnp_sent,
            cnp_handled: (peer_marks * rng.between(0.25, 0.9)) as u64,
            cnp_ignored: rng.sometimes(0.3, 1, 200),
        }
    };
    let link_downs = rng.sometimes(0.25, 1, 2);
    let crc_errors = if ib { 0 } else { rng.sometimes(0.2, 1, 12) };

    let hw_counters = port_hw_counters(ib, &traffic, &congestion, &mut rng);
    let device_hw_counters = device_hw_counters(&hw_counters);
    let counters = port_counters(ib, &traffic, link_downs, crc_errors, &mut rng);
    let ethtool = if ib {
        ipoib_ethtool(&traffic, &mut rng)
    } else {
        roce_ethtool(
            &traffic,
            &congestion,
            node,
            link_downs,
            crc_errors,
            &mut rng,
        )
    };

    // Odd multiplier plus offset is a bijection mod 2^23: distinct adapters never share a GUID,
    // yet the GUIDs look random. Functions of one adapter get consecutive GUIDs, as on hardware.
    let adapter = (place.card.wrapping_mul(0x5D_2B4F) + SplitMix64(seed).next()) & 0x7f_ffff;
    let guid_low = (adapter << 1) | place.function;
    NicSpec {
        name: format!("mlx5_{index}"),
        pci_address: place.pci_address,
        netdev: Some(place.netdev),
        link_layer: if ib {
            LinkLayer::InfiniBand
        } else {
            LinkLayer::Ethernet
        },
        rate: RATE_400G.into(),
        state: "4: ACTIVE".into(),
        phys_state: "5: LinkUp".into(),
        lid: if ib {
            format!("{:#x}", rng.range(0x10, 0x3ff))
        } else {
            "0x0".into()
        },
        fw_ver: FW_VER.into(),
        board_id: if place.role == Role::Gpu {
            GPU_BOARD_ID
        } else {
            PAIR_BOARD_ID
        }
        .into(),
        hca_type: HCA_TYPE.into(),
        node_guid: format!(
            "b83f:d203:00{:02x}:{:04x}",
            (guid_low >> 16) & 0xff,
            guid_low & 0xffff
        ),
        counters,
        hw_counters,
        device_hw_counters,
        ethtool,
        ecn: None,
        pcie: Default::default(),
    }
}

fn traffic(role: Role, node: &NodeProfile, rng: &mut SplitMix64) -> Traffic {
    // Average RDMA frame: 4096-byte MTU payloads mixed with ACKs and short messages.
    let rdma_frame = rng.between(3_400.0, 4_100.0);
    let (tx_rdma, rx_rdma, tx_eth, rx_eth, eth_frame) = match role {
        Role::Gpu => {
            // All-reduce is symmetric: every GPU NIC sends and receives about the same.
            let tx = node.gpu_tx_bytes * rng.between(0.93, 1.07);
            let rx = tx * rng.between(0.97, 1.03);
            (
                tx,
                rx,
                rng.between(2e9, 40e9),
                rng.between(2e9, 40e9),
                900.0,
            )
        }
        Role::Storage => {
            // Checkpoint restores and dataset reads: mostly inbound. IPoIB is management only.
            let rx = rng.between(20e12, 120e12);
            (
                rx * rng.between(0.05, 0.2),
                rx,
                rng.between(1e9, 10e9),
                rng.between(1e9, 10e9),
                2_000.0,
            )
        }
        Role::FrontEnd => (
            rng.between(0.5e12, 5e12),
            rng.between(0.5e12, 5e12),
            rng.between(2e12, 20e12),
            rng.between(2e12, 20e12),
            1_400.0,
        ),
    };
    let (tx_mcast_packets, rx_mcast_packets) = if role == Role::Storage {
        // IB multicast: IPoIB broadcast/ARP and SA traffic.
        (rng.range(1_000, 100_000), rng.range(1_000, 100_000))
    } else {
        (0, 0)
    };
    Traffic {
        tx_rdma_bytes: tx_rdma as u64,
        rx_rdma_bytes: rx_rdma as u64,
        tx_rdma_packets: (tx_rdma / rdma_frame) as u64,
        rx_rdma_packets: (rx_rdma / rdma_frame) as u64,
        tx_rdma_mcast_packets: tx_mcast_packets,
        rx_rdma_mcast_packets: rx_mcast_packets,
        tx_rdma_mcast_bytes: tx_mcast_packets * 256,
        rx_rdma_mcast_bytes: rx_mcast_packets * 256,
        tx_eth_bytes: tx_eth as u64,
        rx_eth_bytes: rx_eth as u64,
        tx_eth_packets: (tx_eth / eth_frame) as u64,
        rx_eth_packets: (rx_eth / eth_frame) as u64,
    }
}

/// `ports/1/counters`: the PMA PortCounters plus the extended (64-bit) table, as mlx5 fills it.
/// On RoCE mlx5 derives the data counters from the vport RDMA counters and has no IB link-level
/// error sources, so those stay zero.
fn port_counters(
    ib: bool,
    t: &Traffic,
    link_downs: u64,
    crc_errors: u64,
    rng: &mut SplitMix64,
) -> Vec<(String, u64)> {
    let ib_only = |rng: &mut SplitMix64, p: f64, lo: u64, hi: u64| {
        if ib {
            rng.sometimes(p, lo, hi)
        } else {
            0
        }
    };
    let link_error_recovery = ib_only(rng, 0.3, 1, 2);
    let port_rcv_errors = if ib {
        rng.sometimes(0.3, 1, 3)
    } else {
        crc_errors
    };
    let port_xmit_discards = ib_only(rng, 0.5, 1, 40);
    // IB: ticks with data queued but no credits. Busy storage ports wait a lot.
    let port_xmit_wait = if ib {
        rng.range(1_000_000, 500_000_000)
    } else {
        0
    };
    let symbol_error = ib_only(rng, 0.3, 1, 4);
    let vl15_dropped = ib_only(rng, 0.2, 1, 2);
    named(&[
        ("excessive_buffer_overrun_errors", 0),
        ("link_downed", link_downs),
        ("link_error_recovery", link_error_recovery),
        ("local_link_integrity_errors", 0),
        ("multicast_rcv_packets", t.rx_rdma_mcast_packets),
        ("multicast_xmit_packets", t.tx_rdma_mcast_packets),
        ("port_rcv_constraint_errors", 0),
        // 4-octet words, like the PMA counter it mirrors.
        ("port_rcv_data", t.port_rcv_bytes() / 4),
        ("port_rcv_errors", port_rcv_errors),
        ("port_rcv_packets", t.port_rcv_packets()),
        ("port_rcv_remote_physical_errors", 0),
        ("port_rcv_switch_relay_errors", 0),
        ("port_xmit_constraint_errors", 0),
        ("port_xmit_data", t.port_xmit_bytes() / 4),
        ("port_xmit_discards", port_xmit_discards),
        ("port_xmit_packets", t.port_xmit_packets()),
        ("port_xmit_wait", port_xmit_wait),
        ("symbol_error", symbol_error),
        ("unicast_rcv_packets", t.rx_rdma_packets),
        ("unicast_xmit_packets", t.tx_rdma_packets),
        ("VL15_dropped", vl15_dropped),
    ])
}

/// `ports/1/hw_counters` of a ConnectX-7. IB ports lack the RoCE-only groups: congestion
/// control (`np_*`, `rp_*`), RoCE acceleration (`roce_*`) and `rx_icrc_encapsulated`.
fn port_hw_counters(
    ib: bool,
    t: &Traffic,
    c: &Congestion,
    rng: &mut SplitMix64,
) -> Vec<(String, u64)> {
    // NCCL moves data with RDMA writes of 64 KiB-512 KiB chunks; reads and atomics are rare.
    let write_requests = (t.rx_rdma_bytes as f64 / rng.between(65_536.0, 524_288.0)) as u64;
    let read_requests = (write_requests as f64 * rng.between(0.01, 0.1)) as u64;
    let all = [
        ("duplicate_request", rng.sometimes(0.5, 1, 20)),
        ("implied_nak_seq_err", rng.sometimes(0.3, 1, 8)),
        ("lifespan", LIFESPAN_MS),
        ("local_ack_timeout_err", rng.sometimes(0.3, 1, 6)),
        ("np_cnp_sent", c.cnp_sent),
        ("np_ecn_marked_roce_packets", c.ecn_marked),
        ("out_of_buffer", rng.sometimes(0.4, 1, 300)),
        ("out_of_sequence", rng.range(0, 2_000)),
        ("packet_seq_err", rng.sometimes(0.4, 1, 50)),
        ("req_cqe_error", rng.sometimes(0.2, 1, 4)),
        ("req_cqe_flush_error", rng.sometimes(0.5, 1, 40)),
        ("req_remote_access_errors", 0),
        ("req_remote_invalid_request", 0),
        ("req_rnr_retries_exceeded", 0),
        ("req_transport_retries_exceeded", rng.sometimes(0.1, 1, 1)),
        ("resp_cqe_error", rng.sometimes(0.2, 1, 4)),
        ("resp_cqe_flush_error", rng.sometimes(0.5, 1, 60)),
        ("resp_local_length_error", 0),
        ("resp_remote_access_errors", 0),
        ("rnr_nak_retry_err", rng.sometimes(0.2, 1, 10)),
        ("roce_adp_retrans", rng.sometimes(0.5, 1, 200)),
        ("roce_adp_retrans_to", rng.sometimes(0.3, 1, 20)),
        ("roce_slow_restart", rng.sometimes(0.3, 1, 5)),
        ("roce_slow_restart_cnps", rng.sometimes(0.3, 1, 60)),
        ("roce_slow_restart_trans", rng.sometimes(0.3, 1, 5)),
        ("rp_cnp_handled", c.cnp_handled),
        ("rp_cnp_ignored", c.cnp_ignored),
        ("rx_atomic_requests", rng.range(0, 2_000)),
        ("rx_dct_connect", 0),
        ("rx_icrc_encapsulated", 0),
        ("rx_read_requests", read_requests),
        ("rx_write_requests", write_requests),
    ];
    // Values are drawn for every name first so both link layers consume the stream alike.
    all.iter()
        .filter(|(name, _)| !ib || !is_roce_only_hw_counter(name))
        .map(|(name, value)| (name.to_string(), *value))
        .collect()
}

/// Port hw counters that mlx5 registers only on Ethernet (RoCE) ports.
pub fn is_roce_only_hw_counter(name: &str) -> bool {
    name.starts_with("np_")
        || name.starts_with("rp_")
        || name.starts_with("roce_")
        || name == "rx_icrc_encapsulated"
}

/// `<dev>/hw_counters`. Device-level sets vary by driver: stock mlx5 registers none (no
/// directory) and in switchdev mode mirrors the port Q counters at device level, which is what
/// this models; other drivers (efa, hfi1) expose unrelated names here.
fn device_hw_counters(port: &[(String, u64)]) -> Vec<(String, u64)> {
    let mirrored = ["out_of_buffer", "out_of_sequence"];
    let mut counters = vec![("lifespan".to_string(), LIFESPAN_MS)];
    counters.extend(
        port.iter()
            .filter(|(name, _)| mirrored.contains(&name.as_str()))
            .cloned(),
    );
    counters
}

/// Per-priority wire traffic, index = 802.1p priority.
#[derive(Default)]
struct PerPriority {
    rx_bytes: [u64; 8],
    rx_packets: [u64; 8],
    rx_discards: [u64; 8],
    tx_bytes: [u64; 8],
    tx_packets: [u64; 8],
}

/// `ethtool -S` of a RoCE mlx5 netdev: a subset of each group, in en_stats.c group order (sw,
/// qcnt, vport, 802_3, 2863, phy, eth_ext, per_prio, pme, channels, per_port_buff_congest).
fn roce_ethtool(
    t: &Traffic,
    c: &Congestion,
    node: &NodeProfile,
    link_downs: u64,
    crc_errors: u64,
    rng: &mut SplitMix64,
) -> Vec<(String, u64)> {
    let mut s = Stats::default();

    // Wire view per priority: TCP on 0, RoCE data on the PFC priority, CNPs on 6.
    let mut prio = PerPriority::default();
    prio.rx_packets[0] = t.rx_eth_packets;
    prio.rx_bytes[0] = t.rx_eth_bytes + FCS_BYTES * t.rx_eth_packets;
    prio.tx_packets[0] = t.tx_eth_packets;
    prio.tx_bytes[0] = t.tx_eth_bytes + FCS_BYTES * t.tx_eth_packets;
    prio.rx_packets[PFC_PRIORITY] = t.port_rcv_packets();
    prio.rx_bytes[PFC_PRIORITY] = t.port_rcv_bytes() + FCS_BYTES * t.port_rcv_packets();
    prio.tx_packets[PFC_PRIORITY] = t.port_xmit_packets();
    prio.tx_bytes[PFC_PRIORITY] = t.port_xmit_bytes() + FCS_BYTES * t.port_xmit_packets();
    prio.rx_packets[CNP_PRIORITY] = c.cnp_handled + c.cnp_ignored;
    prio.rx_bytes[CNP_PRIORITY] = prio.rx_packets[CNP_PRIORITY] * CNP_FRAME_BYTES;
    prio.tx_packets[CNP_PRIORITY] = c.cnp_sent;
    prio.tx_bytes[CNP_PRIORITY] = c.cnp_sent * CNP_FRAME_BYTES;
    // Only the lossy priority drops for lack of buffer; the lossless one pauses instead.
    prio.rx_discards[0] = rng.sometimes(0.5, 1, 400);

    let out_of_buffer = rng.sometimes(0.4, 1, 2_000).min(t.rx_eth_packets);
    let rx_packets = t.rx_eth_packets - out_of_buffer;
    let rx_bytes = scale(t.rx_eth_bytes, rx_packets, t.rx_eth_packets);

    // sw: what reached the kernel stack (RDMA bypasses it).
    s.push("rx_packets", rx_packets);
    s.push("rx_bytes", rx_bytes);
    s.push("tx_packets", t.tx_eth_packets);
    s.push("tx_bytes", t.tx_eth_bytes);
    s.push("rx_csum_complete", (rx_packets as f64 * 0.97) as u64);
    s.push("tx_csum_partial", (t.tx_eth_packets as f64 * 0.9) as u64);
    s.push("tx_queue_dropped", 0);
    s.push("rx_buff_alloc_err", 0);
    // qcnt
    s.push("rx_out_of_buffer", out_of_buffer);
    s.push("rx_if_down_packets", rng.range(0, 40));
    // vport
    s.push("rx_vport_unicast_packets", t.rx_eth_packets);
    s.push("rx_vport_unicast_bytes", t.rx_eth_bytes);
    s.push("tx_vport_unicast_packets", t.tx_eth_packets);
    s.push("tx_vport_unicast_bytes", t.tx_eth_bytes);
    s.push("rx_vport_rdma_unicast_packets", t.rx_rdma_packets);
    s.push("rx_vport_rdma_unicast_bytes", t.rx_rdma_bytes);
    s.push("tx_vport_rdma_unicast_packets", t.tx_rdma_packets);
    s.push("tx_vport_rdma_unicast_bytes", t.tx_rdma_bytes);
    s.push("rx_vport_rdma_multicast_packets", t.rx_rdma_mcast_packets);
    s.push("rx_vport_rdma_multicast_bytes", t.rx_rdma_mcast_bytes);
    s.push("tx_vport_rdma_multicast_packets", t.tx_rdma_mcast_packets);
    s.push("tx_vport_rdma_multicast_bytes", t.tx_rdma_mcast_bytes);

    // PFC on the lossless priority: the switch pauses us (rx) far more than we pause it (tx).
    let rx_pause = (node.rx_pause_frames * rng.between(0.5, 1.5)) as u64;
    let tx_pause = rng.range(50, 5_000);
    // Pause durations in microseconds.
    let rx_pause_duration = (rx_pause as f64 * rng.between(4.0, 30.0)) as u64;
    let tx_pause_duration = (tx_pause as f64 * rng.between(4.0, 30.0)) as u64;
    // XOFF->XON transitions: pause frames are refreshed while XOFF lasts, so fewer than frames.
    let rx_pause_transition = (rx_pause as f64 / rng.between(2.0, 6.0)) as u64;

    // 802_3
    s.push("tx_packets_phy", prio.tx_packets.iter().sum());
    s.push("rx_packets_phy", prio.rx_packets.iter().sum());
    s.push("rx_crc_errors_phy", crc_errors);
    s.push("tx_bytes_phy", prio.tx_bytes.iter().sum());
    s.push("rx_bytes_phy", prio.rx_bytes.iter().sum());
    s.push("rx_oversize_pkts_phy", 0);
    s.push("rx_symbol_err_phy", 0);
    s.push("tx_mac_control_phy", tx_pause);
    s.push("rx_mac_control_phy", rx_pause);
    s.push("rx_unsupported_op_phy", 0);
    s.push("rx_pause_ctrl_phy", rx_pause);
    s.push("tx_pause_ctrl_phy", tx_pause);
    // 2863
    s.push("rx_discards_phy", prio.rx_discards.iter().sum());
    s.push("tx_discards_phy", 0);
    s.push("tx_errors_phy", 0);
    // phy. rx_bits_phy counts bits the link could carry (rate x time), not traffic. It is
    // documented in mlx5 counters.rst but only some kernels/OFED builds print it.
    let rx_bits = (400e9 * node.uptime_s) as u64;
    s.push("link_down_events_phy", link_downs);
    s.push("rx_pcs_symbol_err_phy", 0);
    s.push(
        "rx_corrected_bits_phy",
        (rx_bits as f64 * rng.between(1e-9, 2e-7)) as u64,
    );
    s.push("rx_bits_phy", rx_bits);
    // eth_ext: RX buffer crossed its threshold, which is what triggers our own tx pauses.
    s.push(
        "rx_buffer_passed_thres_phy",
        (tx_pause as f64 / rng.between(1.5, 4.0)) as u64,
    );
    // per_prio: traffic for all eight priorities, then PFC for enabled ones, then stall events.
    for p in 0..8 {
        s.push(&format!("rx_prio{p}_bytes"), prio.rx_bytes[p]);
        s.push(&format!("rx_prio{p}_packets"), prio.rx_packets[p]);
        s.push(&format!("rx_prio{p}_discards"), prio.rx_discards[p]);
        s.push(&format!("tx_prio{p}_bytes"), prio.tx_bytes[p]);
        s.push(&format!("tx_prio{p}_packets"), prio.tx_packets[p]);
    }
    let p = PFC_PRIORITY;
    s.push(&format!("rx_prio{p}_pause"), rx_pause);
    s.push(&format!("rx_prio{p}_pause_duration"), rx_pause_duration);
    s.push(&format!("tx_prio{p}_pause"), tx_pause);
    s.push(&format!("tx_prio{p}_pause_duration"), tx_pause_duration);
    s.push(&format!("rx_prio{p}_pause_transition"), rx_pause_transition);
    s.push("tx_pause_storm_warning_events", rng.sometimes(0.1, 1, 2));
    s.push("tx_pause_storm_error_events", 0);
    // pme
    s.push("module_unplug", 0);
    s.push("module_bus_stuck", 0);
    s.push("module_high_temp", 0);
    s.push("module_bad_shorted", 0);
    // channels: per-queue noise an operator does not want by default (two queues here).
    push_queues(
        &mut s,
        rx_packets,
        rx_bytes,
        t.tx_eth_packets,
        t.tx_eth_bytes,
        rng,
    );
    // per_port_buff_congest: no WRED on any priority; the NIC itself marks a little on the
    // lossless priority when its RX buffer fills.
    let marked = rng.sometimes(0.6, 10, 800);
    for p in 0..8 {
        s.push(&format!("rx_prio{p}_buf_discard"), prio.rx_discards[p]);
        s.push(&format!("rx_prio{p}_cong_discard"), 0);
        s.push(
            &format!("rx_prio{p}_marked"),
            if p == PFC_PRIORITY { marked } else { 0 },
        );
    }
    s.0
}

/// `ethtool -S` of an mlx5 IPoIB netdev: software, queue-counter and channel groups only (the
/// driver lists PFC counters only when the port type is Ethernet).
fn ipoib_ethtool(t: &Traffic, rng: &mut SplitMix64) -> Vec<(String, u64)> {
    let mut s = Stats::default();
    s.push("rx_packets", t.rx_eth_packets);
    s.push("rx_bytes", t.rx_eth_bytes);
    s.push("tx_packets", t.tx_eth_packets);
    s.push("tx_bytes", t.tx_eth_bytes);
    s.push("rx_csum_complete", (t.rx_eth_packets as f64 * 0.97) as u64);
    s.push("tx_csum_partial", (t.tx_eth_packets as f64 * 0.9) as u64);
    s.push("tx_queue_dropped", 0);
    s.push("rx_buff_alloc_err", 0);
    s.push("rx_out_of_buffer", rng.sometimes(0.3, 1, 100));
    s.push("rx_if_down_packets", 0);
    push_queues(
        &mut s,
        t.rx_eth_packets,
        t.rx_eth_bytes,
        t.tx_eth_packets,
        t.tx_eth_bytes,
        rng,
    );
    s.0
}

/// `rx0_*`, `rx1_*`, `tx0_*`, `tx1_*`, splitting the totals so the queues add up.
fn push_queues(
    s: &mut Stats,
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    rng: &mut SplitMix64,
) {
    let rx0 = (rx_packets as f64 * rng.between(0.4, 0.6)) as u64;
    let tx0 = (tx_packets as f64 * rng.between(0.4, 0.6)) as u64;
    let rx0_bytes = scale(rx_bytes, rx0, rx_packets);
    let tx0_bytes = scale(tx_bytes, tx0, tx_packets);
    s.push("rx0_packets", rx0);
    s.push("rx0_bytes", rx0_bytes);
    s.push("rx1_packets", rx_packets - rx0);
    s.push("rx1_bytes", rx_bytes - rx0_bytes);
    s.push("tx0_packets", tx0);
    s.push("tx0_bytes", tx0_bytes);
    s.push("tx1_packets", tx_packets - tx0);
    s.push("tx1_bytes", tx_bytes - tx0_bytes);
}

/// `total * part / whole` without overflow, clamped to `total`.
fn scale(total: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    ((u128::from(total) * u128::from(part.min(whole))) / u128::from(whole)) as u64
}

#[derive(Default)]
struct Stats(Vec<(String, u64)>);

impl Stats {
    fn push(&mut self, name: &str, value: u64) {
        self.0.push((name.to_string(), value));
    }
}

fn named(values: &[(&str, u64)]) -> Vec<(String, u64)> {
    values.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

/// SplitMix64: tiny, fast and fully determined by its seed, which is all a fixture needs (and
/// the benches' shuffles).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `lo..=hi` (modulo bias is irrelevant here).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// Zero, or with probability `p` a value in `lo..=hi`: error counters are mostly zero.
    /// Always draws twice so that later values do not shift with the outcome.
    fn sometimes(&mut self, p: f64, lo: u64, hi: u64) -> u64 {
        let hit = self.unit() < p;
        let value = self.range(lo, hi);
        if hit {
            value
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn written(nics: &[NicSpec]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write_tree(&dir.path().join("sys"), nics).unwrap();
        dir
    }

    /// Every entry below `root` without following links: path -> file bytes or link target.
    fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
        let mut entries = BTreeMap::new();
        let mut pending = vec![root.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let relative = path.strip_prefix(root).unwrap().to_path_buf();
                let kind = fs::symlink_metadata(&path).unwrap().file_type();
                if kind.is_symlink() {
                    let target = fs::read_link(&path).unwrap();
                    entries.insert(relative, format!("-> {}", target.display()));
                } else if kind.is_dir() {
                    entries.insert(relative, "dir".to_string());
                    pending.push(path);
                } else {
                    entries.insert(relative, fs::read_to_string(&path).unwrap());
                }
            }
        }
        entries
    }

    #[test]
    fn symlinks_resolve_like_the_kernel_tree() {
        let nics = connectx7_node(10, 7);
        let dir = written(&nics);
        let sys = dir.path().join("sys");
        let nic = &nics[0];
        let netdev = nic.netdev.as_deref().unwrap();

        let class_dev = sys.join("class/infiniband/mlx5_0");
        let through_class =
            fs::read_to_string(class_dev.join("ports/1/counters/port_xmit_data")).unwrap();
        assert_eq!(
            through_class,
            format!("{}\n", nic.counter("port_xmit_data").unwrap())
        );
        assert_eq!(
            fs::canonicalize(&class_dev).unwrap(),
            fs::canonicalize(nic.device_dir(&sys)).unwrap()
        );
        assert!(class_dev.join("device/net").join(netdev).is_dir());
        assert_eq!(
            fs::canonicalize(class_dev.join("device")).unwrap(),
            fs::canonicalize(nic.pci_dir(&sys)).unwrap()
        );
        let class_net = sys.join("class/net").join(netdev);
        assert_eq!(
            fs::read_to_string(class_net.join("operstate")).unwrap(),
            "up\n"
        );
        assert_eq!(
            fs::canonicalize(class_net.join("device")).unwrap(),
            fs::canonicalize(nic.pci_dir(&sys)).unwrap()
        );
        assert!(class_dev.join("subsystem/mlx5_0").exists());
        assert!(sys
            .join(PCI_PARENT)
            .join(&nic.pci_address)
            .join("driver")
            .is_dir());

        // Links are relative, so the tree can be moved or bind-mounted anywhere.
        for (path, value) in snapshot(&sys) {
            if let Some(target) = value.strip_prefix("-> ") {
                assert!(!target.starts_with('/'), "{path:?} -> {target}");
                assert!(sys.join(&path).exists(), "{path:?} -> {target} dangles");
            }
        }
        // RoCE GID table names the netdev for RoCE v1 and v2.
        let gid_attrs = class_dev.join("ports/1/gid_attrs");
        assert_eq!(
            fs::read_to_string(gid_attrs.join("ndevs/0")).unwrap(),
            format!("{netdev}\n")
        );
        assert_eq!(
            fs::read_to_string(gid_attrs.join("ndevs/1")).unwrap(),
            format!("{netdev}\n")
        );
        assert_eq!(
            fs::read_to_string(gid_attrs.join("types/1")).unwrap(),
            "RoCE v2\n"
        );
    }

    #[test]
    fn same_seed_gives_byte_identical_trees() {
        let a = written(&connectx7_node(10, 42));
        let b = written(&connectx7_node(10, 42));
        let (a, b) = (
            snapshot(&a.path().join("sys")),
            snapshot(&b.path().join("sys")),
        );
        assert!(a.len() > 500, "{} entries", a.len());
        assert_eq!(a, b);
        assert_ne!(connectx7_node(10, 42), connectx7_node(10, 43));
        // Earlier devices do not depend on how many follow.
        assert_eq!(connectx7_node(8, 42)[..], connectx7_node(10, 42)[..8]);
    }

    #[test]
    fn infiniband_ports_have_no_roce_counters_or_gid_netdevs() {
        let nics = connectx7_node(10, 1);
        let ib = &nics[8];
        assert_eq!(ib.link_layer, LinkLayer::InfiniBand);
        assert_ne!(ib.lid, "0x0");
        let dir = written(&nics);
        let port = dir.path().join("sys/class/infiniband/mlx5_8/ports/1");
        let names: Vec<String> = fs::read_dir(port.join("hw_counters"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.contains(&"out_of_sequence".to_string()));
        assert!(
            names.iter().all(|n| !is_roce_only_hw_counter(n)),
            "{names:?}"
        );
        assert_eq!(
            fs::read_dir(port.join("gid_attrs/ndevs")).unwrap().count(),
            0
        );
        assert_eq!(
            fs::read_to_string(port.join("link_layer")).unwrap(),
            "InfiniBand\n"
        );
        // RoCE ports do have them.
        assert!(nics[0].hw_counter("np_cnp_sent").is_some());
        assert!(nics[0].hw_counter("rp_cnp_handled").is_some());
    }

    #[test]
    fn node_layout_names_and_addresses() {
        let nics = connectx7_node(10, 3);
        let netdevs: Vec<&str> = nics.iter().map(|n| n.netdev.as_deref().unwrap()).collect();
        assert_eq!(
            netdevs,
            [
                "ens1f0np0",
                "ens2f0np0",
                "ens3f0np0",
                "ens4f0np0",
                "ens5f0np0",
                "ens6f0np0",
                "ens7f0np0",
                "ens8f0np0",
                "ibp42s0f0",
                "ens9f1np1"
            ]
        );
        assert_eq!(nics[0].pci_address, "0000:1a:00.0");
        for (i, nic) in nics.iter().enumerate() {
            assert_eq!(nic.name, format!("mlx5_{i}"));
            assert_eq!(nic.rate, "400 Gb/sec (4X NDR)");
            assert_eq!(nic.hca_type, "MT4129");
            assert_eq!(nic.hw_counter("lifespan"), Some(LIFESPAN_MS));
            assert_eq!(
                lookup(&nic.device_hw_counters, "lifespan"),
                Some(LIFESPAN_MS)
            );
        }
        let distinct = |f: fn(&NicSpec) -> &str| {
            let mut v: Vec<&str> = nics.iter().map(f).collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        assert_eq!(distinct(|n| &n.pci_address), 10);
        assert_eq!(distinct(|n| &n.node_guid), 10);
        // Many devices still get distinct addresses and names.
        let many = connectx7_node(80, 3);
        let mut pci: Vec<&str> = many.iter().map(|n| n.pci_address.as_str()).collect();
        pci.sort_unstable();
        pci.dedup();
        assert_eq!(pci.len(), 80);
    }

    #[test]
    fn counters_are_internally_consistent() {
        for nic in connectx7_node(10, 99) {
            let words = nic.counter("port_xmit_data").unwrap();
            if nic.link_layer == LinkLayer::InfiniBand {
                assert!(nic.ethtool_stat("rx_prio3_pause").is_none());
                continue;
            }
            let tx_bytes = nic.ethtool_stat("tx_vport_rdma_unicast_bytes").unwrap();
            assert!(
                words * 4 <= tx_bytes && tx_bytes - words * 4 < 4,
                "{}",
                nic.name
            );
            assert!(
                nic.hw_counter("np_cnp_sent").unwrap()
                    <= nic.hw_counter("np_ecn_marked_roce_packets").unwrap()
            );
            // PFC counters exist for priority 3 only.
            let pause: Vec<&str> = nic
                .ethtool
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| n.contains("_pause") && n.starts_with("rx_prio"))
                .collect();
            assert_eq!(
                pause,
                [
                    "rx_prio3_pause",
                    "rx_prio3_pause_duration",
                    "rx_prio3_pause_transition"
                ]
            );
            let prio_sum: u64 = (0..8)
                .map(|p| nic.ethtool_stat(&format!("tx_prio{p}_bytes")).unwrap())
                .sum();
            assert_eq!(nic.ethtool_stat("tx_bytes_phy"), Some(prio_sum));
            assert!(
                (60..=130).contains(&nic.ethtool.len()),
                "{}",
                nic.ethtool.len()
            );
        }
    }

    #[test]
    fn ethtool_files_use_ethtool_s_format() {
        let nics = connectx7_node(10, 5);
        let dir = tempfile::tempdir().unwrap();
        write_ethtool_files(dir.path(), &nics).unwrap();
        let text = fs::read_to_string(dir.path().join("ens1f0np0.txt")).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("NIC statistics:"));
        let parsed: Vec<(String, u64)> = lines
            .map(|line| {
                let (name, value) = line
                    .strip_prefix("     ")
                    .unwrap()
                    .split_once(": ")
                    .unwrap();
                (name.to_string(), value.parse().unwrap())
            })
            .collect();
        assert_eq!(parsed, nics[0].ethtool);
        assert!(dir.path().join("ibp42s0f0.txt").exists());
    }

    #[test]
    fn rewriting_a_tree_updates_values_in_place() {
        let mut nics = connectx7_node(2, 11);
        let dir = written(&nics);
        let sys = dir.path().join("sys");
        nics[1].counters[0].1 += 1;
        write_tree(&sys, &nics).unwrap();
        let (name, value) = &nics[1].counters[0];
        let path = sys
            .join("class/infiniband/mlx5_1/ports/1/counters")
            .join(name);
        assert_eq!(fs::read_to_string(path).unwrap(), format!("{value}\n"));
        assert!(!snapshot(&sys)
            .keys()
            .any(|p| p.to_string_lossy().contains(".tmp")));
    }

    #[test]
    fn updating_a_tree_writes_what_changed_and_gives_the_same_tree() {
        let before = connectx7_node(2, 11);
        let dir = written(&before);
        let sys = dir.path().join("sys");
        let mut after = before.clone();
        after[1].counters[0].1 += 7;
        after[0].hw_counters[3].1 += 2;
        after[0].state = "1: DOWN".into();
        update_tree(&sys, &before, &after).unwrap();
        let fresh = written(&after);
        let (updated, expected) = (snapshot(&sys), snapshot(&fresh.path().join("sys")));
        let differing: Vec<_> = expected
            .iter()
            .filter(|(path, value)| updated.get(*path) != Some(value))
            .map(|(path, _)| path)
            .chain(updated.keys().filter(|p| !expected.contains_key(*p)))
            .collect();
        assert!(differing.is_empty(), "{differing:?}");
    }
}
