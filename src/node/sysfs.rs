//! Reads `/sys/class/infiniband` into a plain snapshot. Every failure is recorded and skipped:
//! one unreadable file never costs the rest of the device, one bad device never costs the node.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use regex::Regex;
use rustix::fs::AtFlags;

use super::counter_filter::CounterFilter;
use super::counters::Counters;
use super::ethtool_map::{types_of, StatTypes};
use super::hw_netlink::{self, DeviceLink, Miss, NetlinkHwCounters};
use super::parse::{self, ValueError};
use super::reason::ReadErrorReason;
use super::sys_dir::{AttrBuf, SysDir};
use super::tree_cache::{DeviceTree, FdBudget, TreeShared};

/// Device include/exclude, applied to the names listed in `class/infiniband` before any file of
/// the device is opened (reading counters of firmware-restricted PFs floods the kernel log).
/// Also the `node.devices` section of the config file.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceFilter {
    /// Only devices whose name matches (unanchored, as node_exporter's device-include).
    #[serde(deserialize_with = "crate::yaml::regex")]
    pub include: Option<Regex>,
    /// Devices whose name matches are never read, not even listed below their directory.
    #[serde(deserialize_with = "crate::yaml::regex")]
    pub exclude: Option<Regex>,
}

impl DeviceFilter {
    pub fn allows(&self, device: &str) -> bool {
        self.include.as_ref().is_none_or(|re| re.is_match(device))
            && !self.exclude.as_ref().is_some_and(|re| re.is_match(device))
    }
}

/// How long a kept tree serves a device's PCIe link reading: the alerts on it wait minutes, and a
/// link retrains rarely.
pub(crate) const PCIE_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);

/// What one walk of the tree found.
#[derive(Debug, Default, Clone)]
pub struct NodeSnapshot {
    /// False when `class/infiniband` does not exist (no RDMA driver loaded, or not a Linux sysfs).
    pub infiniband_present: bool,
    pub devices: Vec<Device>,
    pub errors: Vec<ReadError>,
}

#[derive(Debug, Default, Clone)]
pub struct Device {
    pub name: String,
    pub fw_ver: Option<String>,
    pub board_id: Option<String>,
    pub hca_type: Option<String>,
    pub node_guid: Option<String>,
    /// Device-level `hw_counters/*`, raw names, in name order (includes `lifespan`).
    pub hw_counters: Counters,
    pub ports: Vec<Port>,
    /// The PCIe link of the device's PCI function (`pcie.rs`); `None` off PCI or where sysfs
    /// does not link the device to a PCI function.
    pub pcie: Option<super::pcie::PcieLink>,
}

#[derive(Debug, Default, Clone)]
pub struct Port {
    pub number: u32,
    /// `number` as text: the `port` label of every series of this port.
    pub number_text: String,
    pub link_layer: Option<String>,
    pub state: Option<(u32, String)>,
    pub phys_state: Option<(u32, String)>,
    pub rate_bytes_per_second: Option<f64>,
    pub lid: Option<u64>,
    pub netdev: Option<String>,
    /// The netdev's kernel driver (`mlx5_core`, `bnxt_en`, `ice`, ...): which names its
    /// statistics have. `None` where sysfs does not say (fixture trees without `class/net`).
    pub netdev_driver: Option<String>,
    /// `counters/*`, raw kernel names and raw values (data counters still in 4-octet words).
    pub counters: Counters,
    /// Legacy `counters_ext/*` (pre-4.5 kernels), raw names and values.
    pub counters_ext: Counters,
    /// `hw_counters/*`, raw names (includes `lifespan`).
    pub hw_counters: Counters,
    /// Driver statistics of `netdev` (`ethtool -S`), filled by the node collector for RoCE ports.
    pub ethtool: super::ethtool::EthtoolStats,
    /// The type of each of `ethtool`'s statistics, with the name list it was made for (the node
    /// collector shares one per netdev across scrapes); read through [`Port::ethtool_types`].
    pub ethtool_typed: Option<(super::ethtool::StatNames, StatTypes)>,
    /// `netdev` lives in another network namespace (an SR-IOV VF in a pod): no driver
    /// statistics from here, and no read error. Set by the node collector.
    pub netdev_in_other_netns: bool,
    /// The congestion-control settings of `netdev` (MLNX_OFED's `ecn/`), read by the node
    /// collector after the driver statistics.
    pub ecn: super::ecn_settings::EcnRead,
}

impl Port {
    /// The type of each of `ethtool`'s statistics by position: the shared classification made
    /// for this very name list, or one made now.
    pub(crate) fn ethtool_types(&self) -> StatTypes {
        match &self.ethtool_typed {
            Some((names, types)) if Arc::ptr_eq(names, self.ethtool.names()) => types.clone(),
            _ => types_of(self.netdev_driver.as_deref(), self.ethtool.names()),
        }
    }

    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some(ETHERNET)
    }

    /// Fills `netdev_driver` from `class/net/<netdev>/device/driver`, beside `class/infiniband`.
    /// A kept tree remembers a driver found per netdev name (a netdev's driver is that of its
    /// PCI function, and a port's netdev name only comes back on the same function). A driver
    /// not found is asked again at the next read: the netdev may have been half there (its
    /// name in the GID table, its `class/net` entry gone or not yet back), and remembering
    /// that would leave the port without its driver's series for the tree's life.
    fn with_netdev_driver(mut self, device_dir: &SysDir) -> Port {
        let Some(netdev) = self.netdev.as_deref() else {
            return self;
        };
        let tree = device_dir.tree();
        if let Some(known) = tree.and_then(|t| t.netdev_driver(netdev)) {
            self.netdev_driver = known;
            return self;
        }
        let class = device_dir.path().parent().and_then(Path::parent);
        self.netdev_driver = class
            .and_then(|class| {
                std::fs::read_link(class.join("net").join(netdev).join("device/driver")).ok()
            })
            .and_then(|link| Some(link.file_name()?.to_str()?.to_string()));
        if let (Some(tree), Some(_)) = (tree, &self.netdev_driver) {
            tree.remember_netdev_driver(netdev, self.netdev_driver.clone());
        }
        self
    }
}

/// One value that could not be read, with the reason label used in metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadError {
    pub device: String,
    pub reason: ReadErrorReason,
    pub path: PathBuf,
    pub detail: String,
}

/// Reads the InfiniBand class below `sysfs_root` (normally `/sys`) on this thread, device after
/// device, without a deadline: for callers that may wait (`doctor`, the storm sampler's port
/// list). Scrapes read through [`super::device_reads::DeviceReads`], which bounds each device.
pub fn read_node(sysfs_root: &Path, filter: &DeviceFilter) -> NodeSnapshot {
    match list_devices(sysfs_root, filter) {
        ClassListing::Absent => NodeSnapshot::default(),
        ClassListing::Failed(error) => NodeSnapshot::failed(error),
        ClassListing::Listed(class_dir, names) => NodeSnapshot::of_reads(
            names
                .iter()
                .map(|name| class_dir.read_device(name, &|_, _| {})),
        ),
    }
}

/// What listing `class/infiniband` found.
pub(crate) enum ClassListing {
    /// No such directory: no RDMA driver is loaded (not an error).
    Absent,
    /// It exists but could not be listed.
    Failed(ReadError),
    /// The directory, and the names of the devices the filter allows, in name order.
    Listed(ClassDir, Vec<String>),
}

/// Lists `class/infiniband` below `sysfs_root`. The filter sees names only: nothing below an
/// excluded device is ever opened.
pub(crate) fn list_devices(sysfs_root: &Path, filter: &DeviceFilter) -> ClassListing {
    let class_path = sysfs_root.join("class/infiniband");
    let listing = SysDir::open(&class_path).and_then(|d| {
        let names = d.entries()?;
        Ok((d, names))
    });
    match listing {
        Ok((dir, names)) => ClassListing::Listed(
            ClassDir {
                dir,
                hw_counters: Arc::default(),
                hw_netlink: None,
            },
            names
                .iter()
                .filter(|n| filter.allows(n))
                .map(|n| n.to_string())
                .collect(),
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => ClassListing::Absent,
        Err(e) => ClassListing::Failed(ReadError {
            device: String::new(),
            reason: io_reason_at(None, &class_path, &e),
            path: class_path,
            detail: e.to_string(),
        }),
    }
}

/// The open `class/infiniband` directory. Devices are independent kernel objects: any number
/// of threads may read devices below it at once.
pub struct ClassDir {
    dir: SysDir,
    /// The `hw_counters` files each device read opens.
    hw_counters: Arc<CounterFilter>,
    /// Where port `hw_counters` are asked first (`None`: their files only).
    hw_netlink: Option<Arc<NetlinkHwCounters>>,
}

/// What reading one device gave: the device (unless its directory could not be opened) and
/// every value that could not be read.
#[derive(Debug, Default)]
pub(crate) struct DeviceRead {
    pub device: Option<Device>,
    pub errors: Vec<ReadError>,
}

impl ClassDir {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Reads only the `hw_counters` that `filter` allows (ports' and devices').
    pub(crate) fn with_hw_counters(mut self, filter: Arc<CounterFilter>) -> ClassDir {
        self.hw_counters = filter;
        self
    }

    /// Reads port `hw_counters` over RDMA netlink, each port's files where that fails.
    pub(crate) fn with_hw_netlink(mut self, netlink: Option<Arc<NetlinkHwCounters>>) -> ClassDir {
        self.hw_netlink = netlink;
        self
    }

    fn walk(&self, device: &str) -> Walk {
        Walk {
            hw_counters: self.hw_counters.clone(),
            hw_netlink: self.hw_netlink.as_ref().map(|n| n.link(device)),
            ..Walk::default()
        }
    }

    /// Reads device `name`, then calls `port_hook(device, port)` for each of its ports, on this
    /// thread (per-port work such as the netdev's driver statistics belongs to the device's read).
    pub(crate) fn read_device(
        &self,
        name: &str,
        port_hook: &dyn Fn(&str, &mut Port),
    ) -> DeviceRead {
        let mut walk = self.walk(name);
        // A device removed after the listing (or a dangling class symlink) is one error, not one
        // per attribute.
        let device = match self.dir.subdir(name) {
            Ok(dir) => Some(walk.device(&dir, name)),
            Err(e) => {
                walk.io_error(name, &self.dir, name, &e);
                None
            }
        };
        walk.finish(device, port_hook)
    }

    /// As [`ClassDir::read_device`], through the device's kept tree: its directories, listings
    /// and descriptors from earlier reads where they are still valid (see
    /// [`super::tree_cache`]), and whatever this read opens is kept for the next one. A kept
    /// tree found stale during the read is dropped and the device read again from scratch.
    pub(crate) fn read_device_kept(
        &self,
        name: &str,
        tree: &mut DeviceTree,
        budget: &Arc<FdBudget>,
        port_hook: &dyn Fn(&str, &mut Port),
    ) -> DeviceRead {
        let kept = tree
            .root
            .take()
            .filter(|root| root.is_entry_of(&self.dir, name));
        if let Some(root) = kept {
            let mut walk = self.walk(name);
            let device = walk.device(&root, name);
            if !root.is_stale() {
                tree.root = Some(root);
                tree.kept_reads += 1;
                return walk.finish(Some(device), port_hook);
            }
            tracing::debug!(
                device = name,
                "a kept descriptor's file is gone; reading afresh"
            );
        }
        tree.fresh_reads += 1;
        let mut walk = self.walk(name);
        let device = match self.dir.open_cached(name, TreeShared::new(budget.clone())) {
            Ok(root) => {
                let device = walk.device(&root, name);
                tree.root = Some(root);
                Some(device)
            }
            Err(e) => {
                walk.io_error(name, &self.dir, name, &e);
                None
            }
        };
        walk.finish(device, port_hook)
    }
}

impl NodeSnapshot {
    /// A present class directory that could not be listed.
    pub fn failed(error: ReadError) -> NodeSnapshot {
        NodeSnapshot {
            infiniband_present: true,
            devices: Vec::new(),
            errors: vec![error],
        }
    }

    /// The snapshot of a listed class directory from its devices' reads, in their order.
    pub(crate) fn of_reads(reads: impl IntoIterator<Item = DeviceRead>) -> NodeSnapshot {
        let mut snapshot = NodeSnapshot {
            infiniband_present: true,
            ..NodeSnapshot::default()
        };
        for read in reads {
            snapshot.devices.extend(read.device);
            snapshot.errors.extend(read.errors);
        }
        snapshot
    }
}

struct Walk {
    errors: Vec<ReadError>,
    /// Which `hw_counters` files are opened at all.
    hw_counters: Arc<CounterFilter>,
    /// The device's netlink link, asked for port `hw_counters` before their files.
    hw_netlink: Option<Arc<std::sync::Mutex<DeviceLink>>>,
    /// One attribute buffer for the whole walk, on the reader's stack: no per-file
    /// allocation, and no 4 KiB heap block per device (glibc consolidated its arenas for it).
    buf: AttrBuf,
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            errors: Vec::new(),
            hw_counters: Arc::default(),
            hw_netlink: None,
            buf: [0; 4096],
        }
    }
}

/// Whether an attribute must exist: a missing required one is an error, a missing optional one
/// (driver-dependent) is just absent.
#[derive(Clone, Copy, PartialEq)]
enum Presence {
    Required,
    Optional,
}

/// Whether an attribute's value is fixed while the device object lives (`fw_ver`, GUIDs,
/// `link_layer`): a kept tree then reads it once.
#[derive(Clone, Copy, PartialEq)]
enum Fixed {
    Yes,
    No,
}

impl Walk {
    fn error(&mut self, device: &str, reason: ReadErrorReason, path: &Path, detail: String) {
        self.errors.push(ReadError {
            device: device.to_string(),
            reason,
            path: path.to_path_buf(),
            detail,
        });
    }

    fn io_error(&mut self, device: &str, dir: &SysDir, name: &str, e: &std::io::Error) {
        let reason = io_reason_at(Some(dir), Path::new(name), e);
        self.error(device, reason, &dir.path_of(name), e.to_string());
    }

    /// The device's values and errors, with the port hook run on each port.
    fn finish(self, device: Option<Device>, port_hook: &dyn Fn(&str, &mut Port)) -> DeviceRead {
        let device = device.map(|mut device| {
            for port in &mut device.ports {
                port_hook(&device.name, port);
            }
            device
        });
        DeviceRead {
            device,
            errors: self.errors,
        }
    }

    fn device(&mut self, dir: &SysDir, name: &str) -> Device {
        // Fixed for the device object's lifetime: a kept tree keeps their bytes. Empty is the
        // driver's "none" (soft-RoCE's `fw_ver`), not a failed read.
        let text = |walk: &mut Self, attr: &str| {
            walk.attr(
                name,
                dir,
                attr,
                Presence::Optional,
                Fixed::Yes,
                parse::text_or_none,
            )
            .flatten()
        };
        let mut device = Device {
            name: name.to_string(),
            fw_ver: text(self, "fw_ver"),
            board_id: text(self, "board_id"),
            hca_type: text(self, "hca_type"),
            node_guid: text(self, "node_guid"),
            hw_counters: self.hw_counter_dir(name, dir),
            ports: Vec::new(),
            pcie: None,
        };
        match dir.subdir("ports").and_then(|ports| {
            let entries = ports.numbered_entries()?;
            Ok((ports, entries))
        }) {
            Ok((ports_dir, (entries, numbered))) => {
                device.ports.reserve_exact(numbered.len());
                for &(number, place) in numbered.iter() {
                    let entry = &entries[place];
                    match ports_dir.subdir(entry) {
                        Ok(port_dir) => {
                            let port = self.port(name, dir, &port_dir, number);
                            device.ports.push(port);
                        }
                        Err(e) => self.io_error(name, &ports_dir, entry, &e),
                    }
                }
            }
            Err(e) => self.io_error(name, dir, "ports", &e),
        }
        device.pcie = self.pcie(name, dir, &device.ports);
        device
    }

    /// The PCIe link of the device's PCI function, found beside `class/infiniband`. A kept tree
    /// serves its last reading without errors for [`PCIE_REFRESH`]: about 15 files a device,
    /// none of them kept open, cost a quarter of a scrape's CPU when read every time (the scrape
    /// bench: 1.14 -> 1.43 ms), for values that change when a link retrains.
    fn pcie(&mut self, name: &str, dir: &SysDir, ports: &[Port]) -> Option<super::pcie::PcieLink> {
        use super::pcie::{PcieError, PcieErrorKind};
        if let Some(recent) = dir.tree().and_then(|t| t.recent_pcie(PCIE_REFRESH)) {
            return recent;
        }
        let class = dir.path().parent().and_then(Path::parent)?;
        let mut netdevs = ports.iter().filter_map(|p| p.netdev.as_deref());
        let record = |walk: &mut Self, e: PcieError| {
            let (reason, detail) = match &e.error {
                PcieErrorKind::Io(io) => (io_reason_at(None, &e.path, io), io.to_string()),
                PcieErrorKind::Value(v) => (v.reason(), v.to_string()),
            };
            walk.error(name, reason, &e.path, detail);
        };
        let function = match super::pcie::function_dir(class, name, &mut netdevs) {
            Ok(function) => function?,
            Err(e) => {
                record(self, e);
                return None;
            }
        };
        let (link, errors) = super::pcie::read_link(&function, &mut self.buf);
        if errors.is_empty() {
            if let Some(tree) = dir.tree() {
                tree.remember_pcie(link.clone());
            }
        }
        for e in errors {
            record(self, e);
        }
        link
    }

    fn port(&mut self, device: &str, device_dir: &SysDir, dir: &SysDir, number: u32) -> Port {
        use Presence::{Optional, Required};
        let link_layer = self.attr(device, dir, "link_layer", Required, Fixed::Yes, parse::text);
        let infiniband = link_layer.as_deref() == Some(INFINIBAND);
        Port {
            number,
            number_text: number.to_string(),
            link_layer,
            state: self.value(device, dir, "state", Required, parse::state),
            phys_state: self.value(device, dir, "phys_state", Required, parse::state),
            rate_bytes_per_second: self.value(
                device,
                dir,
                "rate",
                Required,
                parse::rate_bytes_per_second,
            ),
            lid: self.value(device, dir, "lid", Optional, parse::counter),
            netdev_driver: None,
            netdev: netdev_of(device_dir, dir, infiniband),
            counters: self.counter_dir(device, dir, "counters"),
            counters_ext: self.counter_dir(device, dir, "counters_ext"),
            hw_counters: self.port_hw_counters(device, dir, number),
            ethtool: Default::default(),
            ethtool_typed: None,
            netdev_in_other_netns: false,
            ecn: Default::default(),
        }
        .with_netdev_driver(device_dir)
    }

    /// Reads and parses one attribute; failures are recorded, absence only when required.
    fn value<T>(
        &mut self,
        device: &str,
        dir: &SysDir,
        name: &str,
        presence: Presence,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        self.attr(device, dir, name, presence, Fixed::No, parse)
    }

    /// [`Walk::value`], saying whether the attribute is fixed for the device's lifetime.
    fn attr<T>(
        &mut self,
        device: &str,
        dir: &SysDir,
        name: &str,
        presence: Presence,
        fixed: Fixed,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        let read = match fixed {
            Fixed::Yes => dir.read_static(name, &mut self.buf),
            Fixed::No => dir.read(name, &mut self.buf),
        };
        self.parsed(device, dir, name, presence, read, parse)
    }

    /// The value of a read of attribute `name`; failures are recorded, absence only when
    /// required.
    fn parsed<T>(
        &mut self,
        device: &str,
        dir: &SysDir,
        name: &str,
        presence: Presence,
        read: std::io::Result<usize>,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        match read {
            Ok(n) => match parse(&self.buf[..n]) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.error(device, e.reason(), &dir.path_of(name), e.to_string());
                    None
                }
            },
            Err(e) if presence == Presence::Optional && dir.is_absent(name, &e) => None,
            Err(e) => {
                self.io_error(device, dir, name, &e);
                None
            }
        }
    }

    /// Counter `name`, entry `index` of `dir`'s listing; a failure is recorded.
    fn counter(&mut self, device: &str, dir: &SysDir, index: usize, name: &str) -> Option<u64> {
        let read = dir.read_listed(index, name, &mut self.buf);
        self.parsed(device, dir, name, Presence::Required, read, parse::counter)
    }

    /// The counters of `hw_counters/` the filter allows, in name order.
    fn hw_counter_dir(&mut self, device: &str, parent: &SysDir) -> Counters {
        let filter = self.hw_counters.clone();
        self.counter_dir_filtered(device, parent, "hw_counters", &filter)
    }

    /// A port's `hw_counters`: over netlink (one request, [`super::hw_netlink`]) where the
    /// device has a link, its listing naming the counters and `lifespan` read from its file;
    /// the files where netlink fails, the reason recorded (a refused device is not counted
    /// again). A port without `hw_counters/` is not asked.
    fn port_hw_counters(&mut self, device: &str, port_dir: &SysDir, port: u32) -> Counters {
        let Some(link) = self.hw_netlink.clone() else {
            return self.hw_counter_dir(device, port_dir);
        };
        let mut link = link.lock().unwrap_or_else(|p| p.into_inner());
        if link.is_refused() {
            return self.hw_counter_dir(device, port_dir);
        }
        let Ok((dir, names)) = port_dir.subdir("hw_counters").and_then(|dir| {
            let names = dir.entries()?;
            Ok((dir, names))
        }) else {
            return self.hw_counter_dir(device, port_dir);
        };
        let filter = self.hw_counters.clone();
        match link.port_values(port, &names, &filter) {
            Ok(mut values) => {
                drop(link);
                let lifespan = names.iter().position(|n| &**n == hw_netlink::LIFESPAN);
                if let Some(at) = lifespan.filter(|_| filter.allows(hw_netlink::LIFESPAN)) {
                    values[at] = self.counter(device, &dir, at, hw_netlink::LIFESPAN);
                }
                return Counters::new(names, values);
            }
            Err(Miss::Off) => {}
            Err(Miss::Counted(reason, detail)) => self.error(device, reason, dir.path(), detail),
        }
        drop(link);
        self.hw_counter_dir(device, port_dir)
    }

    /// All counters of `counters/` or `counters_ext/`, in name order.
    fn counter_dir(&mut self, device: &str, parent: &SysDir, name: &str) -> Counters {
        self.counter_dir_filtered(device, parent, name, &CounterFilter::ALL)
    }

    /// The counters of directory `name` that `keep` allows (the others are never opened). An
    /// absent directory is no error: which counter directories a port has depends on the
    /// driver (a device without a PMA has no `counters/`, soft-iWARP has no `hw_counters/`).
    fn counter_dir_filtered(
        &mut self,
        device: &str,
        parent: &SysDir,
        name: &str,
        keep: &CounterFilter,
    ) -> Counters {
        let listing = parent.subdir(name).and_then(|dir| {
            let names = dir.entries()?;
            Ok((dir, names))
        });
        match listing {
            Ok((dir, names)) => {
                // The values pair with the kept listing: no name is copied per scrape.
                let values = names
                    .iter()
                    .enumerate()
                    .map(|(index, counter)| {
                        if !keep.allows(counter) {
                            return None;
                        }
                        self.counter(device, &dir, index, counter)
                    })
                    .collect();
                Counters::new(names, values)
            }
            Err(e) if parent.is_absent(name, &e) => Counters::default(),
            Err(e) => {
                self.io_error(device, parent, name, &e);
                Counters::default()
            }
        }
    }
}

fn is_link(dir: Option<&SysDir>, path: &Path) -> bool {
    match dir {
        Some(dir) => dir
            .with_fd(|fd| rustix::fs::statat(fd, path, AtFlags::SYMLINK_NOFOLLOW).is_ok())
            .unwrap_or(false),
        None => std::fs::symlink_metadata(path).is_ok(),
    }
}

/// The `link_layer` of a RoCE (or iWARP) port, and of an InfiniBand port.
const ETHERNET: &str = "Ethernet";
const INFINIBAND: &str = "InfiniBand";

/// The GID entries a netdev is looked up in: the kernel reserves the head of a RoCE port's GID
/// table for its default GIDs, one per RoCE version (`ib_cache.c`), and binds them to the
/// port's netdev while it has one. The other slots (up to the hardware's table size) hold
/// addresses of that netdev or its upper devices, or nothing.
const DEFAULT_GID_SLOTS: usize = 2;

/// The netdev behind a port: the first readable `gid_attrs/ndevs/<i>` of the default GIDs
/// (RoCE), else the first entry of the PCI function's `device/net/` (IPoIB, or RoCE ports with
/// an empty GID table). Unreadable GID entries are normal (unused slots return an error), so
/// they are not recorded. An InfiniBand GID has no netdev, so an InfiniBand port's table is not
/// read at all: every slot of it fails, each an open, a failed read and a close per scrape.
fn netdev_of(device_dir: &SysDir, port_dir: &SysDir, infiniband: bool) -> Option<String> {
    let gid_ndevs = (!infiniband)
        .then(|| {
            port_dir
                .subdir("gid_attrs")
                .and_then(|d| d.subdir("ndevs"))
                .ok()
        })
        .flatten();
    if let Some(ndevs) = gid_ndevs {
        let (entries, numbered) = ndevs.numbered_entries().unwrap_or_default();
        let mut buf = [0u8; 4096];
        for &(_, place) in numbered.iter().take(DEFAULT_GID_SLOTS) {
            if let Ok(n) = ndevs.read_listed(place, &entries[place], &mut buf) {
                if let Ok(name) = parse::text(&buf[..n]) {
                    return Some(name);
                }
            }
        }
    }
    device_dir
        .subdir("device")
        .and_then(|d| d.subdir("net"))
        .and_then(|net| net.entries_now())
        .ok()
        .and_then(|names| names.into_iter().next())
}

/// A port and the netdev behind it, as the walk names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PortNetdev {
    pub device: String,
    pub port: String,
    pub netdev: String,
}

/// The ports with a netdev of the devices `filter` allows, in device and port order, named by
/// the walk's own rule ([`netdev_of`]) without reading a counter: the port list of the readers
/// on threads of their own (the storm sampler, FEC, transceivers). `ethernet_only`: the RoCE
/// ports (link layer Ethernet). Unreadable entries are left out; the walk reports them.
pub(crate) fn port_netdevs(
    sysfs_root: &Path,
    filter: &DeviceFilter,
    ethernet_only: bool,
) -> Vec<PortNetdev> {
    let ClassListing::Listed(class, devices) = list_devices(sysfs_root, filter) else {
        return Vec::new();
    };
    let mut buf: AttrBuf = [0; 4096];
    let mut found = Vec::new();
    for device in devices {
        let Ok(device_dir) = class.dir.subdir(&device) else {
            continue;
        };
        let Ok(ports) = device_dir.subdir("ports") else {
            continue;
        };
        let (entries, numbered) = ports.numbered_entries().unwrap_or_default();
        for &(number, place) in numbered.iter() {
            let Ok(port_dir) = ports.subdir(&entries[place]) else {
                continue;
            };
            let link_layer = port_dir
                .read("link_layer", &mut buf)
                .ok()
                .and_then(|n| parse::text(&buf[..n]).ok());
            if ethernet_only && link_layer.as_deref() != Some(ETHERNET) {
                continue;
            }
            let infiniband = link_layer.as_deref() == Some(INFINIBAND);
            if let Some(netdev) = netdev_of(&device_dir, &port_dir, infiniband) {
                found.push(PortNetdev {
                    device: device.clone(),
                    port: number.to_string(),
                    netdev,
                });
            }
        }
    }
    found
}

/// Maps an I/O error to its reason.
pub(super) fn io_reason_at(
    dir: Option<&SysDir>,
    path: &Path,
    e: &std::io::Error,
) -> ReadErrorReason {
    match e.kind() {
        ErrorKind::NotFound if is_link(dir, path) => ReadErrorReason::DanglingSymlink,
        ErrorKind::NotFound => ReadErrorReason::Vanished,
        ErrorKind::IsADirectory => ReadErrorReason::NotAFile,
        ErrorKind::PermissionDenied => ReadErrorReason::Permission,
        _ => match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                ReadErrorReason::Unsupported
            }
            Some(libc::ENOTDIR) => ReadErrorReason::NotADirectory,
            _ => ReadErrorReason::Io,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_include_then_exclude() {
        let filter = DeviceFilter {
            include: Some(Regex::new("^mlx5_").unwrap()),
            exclude: Some(Regex::new("^mlx5_1$").unwrap()),
        };
        assert!(filter.allows("mlx5_0"));
        assert!(!filter.allows("mlx5_1"));
        assert!(!filter.allows("irdma0"));
        assert!(DeviceFilter::default().allows("anything"));
    }

    #[test]
    fn the_netdevs_driver_is_read_from_class_net() {
        let root = tempfile::tempdir().unwrap();
        let device = root.path().join("class/infiniband/bnxt_re0");
        let port = device.join("ports/1");
        for dir in ["counters", "hw_counters", "gid_attrs/ndevs"] {
            std::fs::create_dir_all(port.join(dir)).unwrap();
        }
        for (file, text) in [
            ("link_layer", "Ethernet"),
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "200 Gb/sec (4X HDR)"),
            ("gid_attrs/ndevs/0", "ens1f0np0"),
        ] {
            std::fs::write(port.join(file), format!("{text}\n")).unwrap();
        }
        let pci = root.path().join("devices/pci0000:00/0000:01:00.0");
        std::fs::create_dir_all(&pci).unwrap();
        std::os::unix::fs::symlink("../../../bus/pci/drivers/bnxt_en", pci.join("driver")).unwrap();
        let net = root.path().join("class/net/ens1f0np0");
        std::fs::create_dir_all(&net).unwrap();
        std::os::unix::fs::symlink(&pci, net.join("device")).unwrap();
        let snapshot = read_node(root.path(), &DeviceFilter::default());
        let port = &snapshot.devices[0].ports[0];
        assert_eq!(port.netdev.as_deref(), Some("ens1f0np0"));
        assert_eq!(port.netdev_driver.as_deref(), Some("bnxt_en"));
    }

    #[test]
    fn missing_class_dir_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = read_node(dir.path(), &DeviceFilter::default());
        assert!(!snapshot.infiniband_present);
        assert!(snapshot.devices.is_empty());
        assert!(snapshot.errors.is_empty());
    }

    /// A port's netdev comes from its default GIDs (the head of the table) when it is RoCE, and
    /// from the PCI function's `net/` otherwise: the other slots are not read at each scrape.
    #[test]
    fn the_netdev_is_looked_up_in_the_default_gids_only_and_never_for_infiniband() {
        let root = tempfile::tempdir().unwrap();
        let port_with = |device: &str, link_layer: &str, ndevs: &[(&str, Option<&str>)]| {
            let dir = root.path().join("class/infiniband").join(device);
            let port = dir.join("ports/1");
            std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
            std::fs::write(port.join("link_layer"), format!("{link_layer}\n")).unwrap();
            for (slot, netdev) in ndevs {
                let path = port.join("gid_attrs/ndevs").join(slot);
                match netdev {
                    Some(name) => std::fs::write(path, format!("{name}\n")).unwrap(),
                    // Opens, then fails to read, as an unused slot does on sysfs.
                    None => std::fs::create_dir(path).unwrap(),
                }
            }
            let function = root.path().join("devices").join(device);
            std::fs::create_dir_all(function.join("net").join(format!("{device}_net"))).unwrap();
            std::os::unix::fs::symlink(&function, dir.join("device")).unwrap();
        };
        port_with(
            "roce_a",
            "Ethernet",
            &[("0", Some("eth_a")), ("1", Some("eth_a"))],
        );
        // The default GIDs are gone (the netdev left): an address GID further on is not used.
        port_with(
            "roce_b",
            "Ethernet",
            &[("0", None), ("1", None), ("2", Some("vlan_b"))],
        );
        // Were an InfiniBand GID slot readable, it would still not name the port's netdev.
        port_with("ib_c", "InfiniBand", &[("0", Some("not_a_netdev"))]);
        let snapshot = read_node(root.path(), &DeviceFilter::default());
        let netdevs: Vec<_> = snapshot
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.ports[0].netdev.as_deref()))
            .collect();
        assert_eq!(
            netdevs,
            [
                ("ib_c", Some("ib_c_net")),
                ("roce_a", Some("eth_a")),
                ("roce_b", Some("roce_b_net")),
            ]
        );
        let listed = port_netdevs(root.path(), &DeviceFilter::default(), false);
        let listed: Vec<_> = listed.iter().map(|p| p.netdev.as_str()).collect();
        assert_eq!(listed, ["ib_c_net", "eth_a", "roce_b_net"]);
    }
}
