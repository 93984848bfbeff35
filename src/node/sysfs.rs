//! Reads `/sys/class/infiniband` into a plain snapshot. Every failure is recorded and skipped:
//! one unreadable file never costs the rest of the device, one bad device never costs the node.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use regex::Regex;

use super::parse::{self, ValueError};

/// Device include/exclude, applied to the names listed in `class/infiniband` before any file of
/// the device is opened (reading counters of firmware-restricted PFs floods the kernel log).
#[derive(Debug, Clone, Default)]
pub struct DeviceFilter {
    pub include: Option<Regex>,
    pub exclude: Option<Regex>,
}

impl DeviceFilter {
    pub fn allows(&self, device: &str) -> bool {
        self.include.as_ref().is_none_or(|re| re.is_match(device))
            && !self.exclude.as_ref().is_some_and(|re| re.is_match(device))
    }
}

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
    pub hw_counters: Vec<(String, u64)>,
    pub ports: Vec<Port>,
}

#[derive(Debug, Default, Clone)]
pub struct Port {
    pub number: u32,
    pub link_layer: Option<String>,
    pub state: Option<(u32, String)>,
    pub phys_state: Option<(u32, String)>,
    pub rate_bytes_per_second: Option<f64>,
    pub lid: Option<u64>,
    pub netdev: Option<String>,
    /// `counters/*`, raw kernel names and raw values (data counters still in 4-octet words).
    pub counters: Vec<(String, u64)>,
    /// Legacy `counters_ext/*` (pre-4.5 kernels), raw names and values.
    pub counters_ext: Vec<(String, u64)>,
    /// `hw_counters/*`, raw names (includes `lifespan`).
    pub hw_counters: Vec<(String, u64)>,
    /// Driver statistics of `netdev` (`ethtool -S`), filled by the node collector for RoCE ports.
    pub ethtool: Vec<(String, u64)>,
}

impl Port {
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
}

/// One value that could not be read, with the reason label used in metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadError {
    pub device: String,
    pub reason: &'static str,
    pub path: PathBuf,
    pub detail: String,
}

/// Reads the InfiniBand class below `sysfs_root` (normally `/sys`).
pub fn read_node(sysfs_root: &Path, filter: &DeviceFilter) -> NodeSnapshot {
    let class_dir = sysfs_root.join("class/infiniband");
    let mut walk = Walk::default();
    let names = match sorted_entries(&class_dir) {
        Ok(names) => names,
        Err(e) if e.kind() == ErrorKind::NotFound => return NodeSnapshot::default(),
        Err(e) => {
            walk.error("", io_reason(&class_dir, &e), &class_dir, e.to_string());
            return NodeSnapshot {
                infiniband_present: true,
                devices: Vec::new(),
                errors: walk.errors,
            };
        }
    };
    let devices = names
        .into_iter()
        .filter(|name| filter.allows(name))
        .filter_map(|name| walk.device(&class_dir.join(&name), name))
        .collect();
    NodeSnapshot {
        infiniband_present: true,
        devices,
        errors: walk.errors,
    }
}

#[derive(Default)]
struct Walk {
    errors: Vec<ReadError>,
}

impl Walk {
    fn error(&mut self, device: &str, reason: &'static str, path: &Path, detail: String) {
        self.errors.push(ReadError {
            device: device.to_string(),
            reason,
            path: path.to_path_buf(),
            detail,
        });
    }

    fn device(&mut self, dir: &Path, name: String) -> Option<Device> {
        // A device removed after the listing (or a dangling class symlink) is one error, not one
        // per attribute.
        if let Err(e) = std::fs::metadata(dir) {
            self.error(&name, io_reason(dir, &e), dir, e.to_string());
            return None;
        }
        let mut device = Device {
            fw_ver: self.optional_text(&name, &dir.join("fw_ver")),
            board_id: self.optional_text(&name, &dir.join("board_id")),
            hca_type: self.optional_text(&name, &dir.join("hca_type")),
            node_guid: self.optional_text(&name, &dir.join("node_guid")),
            hw_counters: self.optional_counter_dir(&name, &dir.join("hw_counters")),
            ..Device::default()
        };
        let ports_dir = dir.join("ports");
        match sorted_entries(&ports_dir) {
            Ok(entries) => {
                let mut numbers: Vec<u32> = entries.iter().filter_map(|p| p.parse().ok()).collect();
                numbers.sort_unstable();
                for number in numbers {
                    let port = self.port(&name, dir, &ports_dir.join(number.to_string()), number);
                    device.ports.push(port);
                }
            }
            Err(e) => self.error(&name, io_reason(&ports_dir, &e), &ports_dir, e.to_string()),
        }
        device.name = name;
        Some(device)
    }

    fn port(&mut self, device: &str, device_dir: &Path, dir: &Path, number: u32) -> Port {
        let state = self.value(device, &dir.join("state"), parse::state);
        let phys_state = self.value(device, &dir.join("phys_state"), parse::state);
        let link_layer = self.value(device, &dir.join("link_layer"), parse::text);
        let rate = self.value(device, &dir.join("rate"), parse::rate_bytes_per_second);
        let lid = self.optional_value(device, &dir.join("lid"), parse::counter);
        let counters = self.counter_dir(device, &dir.join("counters"));
        let counters_ext = self.optional_counter_dir(device, &dir.join("counters_ext"));
        let hw_counters = self.counter_dir(device, &dir.join("hw_counters"));
        Port {
            number,
            link_layer,
            state,
            phys_state,
            rate_bytes_per_second: rate,
            lid,
            netdev: netdev_of(device_dir, dir),
            counters,
            counters_ext,
            hw_counters,
            ethtool: Vec::new(),
        }
    }

    /// A required attribute: any failure, including absence, is recorded.
    fn value<T>(
        &mut self,
        device: &str,
        path: &Path,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        match read_attribute(path) {
            Ok(bytes) => match parse(&bytes) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.error(device, e.reason(), path, e.to_string());
                    None
                }
            },
            Err(e) => {
                self.error(device, io_reason(path, &e), path, e.to_string());
                None
            }
        }
    }

    /// An attribute that drivers may legitimately lack: absence is not an error.
    fn optional_value<T>(
        &mut self,
        device: &str,
        path: &Path,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        if std::fs::symlink_metadata(path).is_err() {
            return None;
        }
        self.value(device, path, parse)
    }

    fn optional_text(&mut self, device: &str, path: &Path) -> Option<String> {
        self.optional_value(device, path, parse::text)
    }

    /// `counters/` and `hw_counters/`: the directory itself is expected on every port.
    fn counter_dir(&mut self, device: &str, dir: &Path) -> Vec<(String, u64)> {
        match sorted_entries(dir) {
            Ok(names) => self.counters_in(device, dir, names),
            Err(e) => {
                let reason = match e.kind() {
                    ErrorKind::NotFound if std::fs::symlink_metadata(dir).is_err() => "missing_dir",
                    _ => io_reason(dir, &e),
                };
                self.error(device, reason, dir, e.to_string());
                Vec::new()
            }
        }
    }

    /// `counters_ext/` (legacy kernels) and device-level `hw_counters/` (driver-dependent).
    fn optional_counter_dir(&mut self, device: &str, dir: &Path) -> Vec<(String, u64)> {
        if std::fs::symlink_metadata(dir).is_err() {
            return Vec::new();
        }
        self.counter_dir(device, dir)
    }

    fn counters_in(&mut self, device: &str, dir: &Path, names: Vec<String>) -> Vec<(String, u64)> {
        let mut values = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(&name);
            if let Some(v) = self.value(device, &path, parse::counter) {
                values.push((name, v));
            }
        }
        values
    }
}

/// The netdev behind a port: the first readable `gid_attrs/ndevs/<i>` (RoCE), else the first
/// entry of the PCI function's `device/net/` (IPoIB, or RoCE ports with an empty GID table).
/// Unreadable GID entries are normal (unused slots return an error), so they are not recorded.
fn netdev_of(device_dir: &Path, port_dir: &Path) -> Option<String> {
    let ndevs = port_dir.join("gid_attrs/ndevs");
    if let Ok(entries) = sorted_entries(&ndevs) {
        let mut indexes: Vec<u32> = entries.iter().filter_map(|e| e.parse().ok()).collect();
        indexes.sort_unstable();
        for index in indexes {
            if let Ok(bytes) = read_attribute(&ndevs.join(index.to_string())) {
                if let Ok(name) = parse::text(&bytes) {
                    return Some(name);
                }
            }
        }
    }
    sorted_entries(&device_dir.join("device/net"))
        .ok()
        .and_then(|names| names.into_iter().next())
}

/// Reads a sysfs attribute with one `read(2)`: attributes are at most a page, and one read avoids
/// spinning on drivers that return EAGAIN forever.
pub fn read_attribute(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = [0u8; 4096];
    let n = file.read(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// Entry names of a directory, sorted, so that output order does not depend on the filesystem.
fn sorted_entries(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort_unstable();
    Ok(names)
}

/// Maps an I/O error to a stable reason label.
fn io_reason(path: &Path, e: &std::io::Error) -> &'static str {
    match e.kind() {
        ErrorKind::NotFound if std::fs::symlink_metadata(path).is_ok() => "dangling_symlink",
        ErrorKind::NotFound => "vanished",
        ErrorKind::IsADirectory => "not_a_file",
        ErrorKind::PermissionDenied => "permission",
        _ => match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => "unsupported",
            _ => "io",
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
    fn missing_class_dir_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = read_node(dir.path(), &DeviceFilter::default());
        assert!(!snapshot.infiniband_present);
        assert!(snapshot.devices.is_empty());
        assert!(snapshot.errors.is_empty());
    }
}
