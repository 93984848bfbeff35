//! The PCIe link of an RDMA device: its PCI function's current and maximum link speed and
//! width, the same of the port above it (the switch downstream port or root port the link
//! trains with), its NUMA node and its AER counters, read from sysfs during the device's read.
//!
//! Where sysfs has it (kernel sources, facts only):
//! - `drivers/pci/pci-sysfs.c`: `current_link_speed`, `max_link_speed` print
//!   `pci_speed_string()` of `drivers/pci/probe.c` ("2.5 GT/s PCIe" ... "64.0 GT/s PCIe",
//!   "Unknown"); kernels before 5.x printed `PCIE_SPEED2STR` of `drivers/pci/pci.h`
//!   ("2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "Unknown speed"). `current_link_width` and
//!   `max_link_width` print the lane count as `%u`. These four exist on PCI Express functions
//!   only. `numa_node` prints `%d`, -1 when the platform names none.
//! - `drivers/pci/pcie/aer.c` (`aer_stats_dev_attr`): `aer_dev_correctable`, `aer_dev_nonfatal`,
//!   `aer_dev_fatal`, one `NAME count` line per error bit and a last `TOTAL_ERR_COR`,
//!   `TOTAL_ERR_NONFATAL` or `TOTAL_ERR_FATAL` line; present only on functions with an AER
//!   capability.
//!
//! The function is found through `class/infiniband/<dev>/device`, or for a soft device (rxe,
//! siw) through its port's netdev's `class/net/<netdev>/device`; a link that ends below the
//! function (an auxiliary device such as irdma's, a virtio device) is walked up to the first
//! directory named like a PCI address. Missing files are absent values, not errors.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::parse::{attribute_text, ValueError};
use super::sys_dir::{AttrBuf, SysDir};

/// One end of a PCIe link, as its function's sysfs directory reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkEnd {
    /// The PCI address (`0000:3b:00.0`): the directory's name.
    pub address: String,
    /// Transfers per second (16.0 GT/s is 16e9); `None` when absent or "Unknown".
    pub current_speed: Option<f64>,
    pub current_width: Option<u32>,
    pub max_speed: Option<f64>,
    pub max_width: Option<u32>,
}

/// The AER counters of a function (`TOTAL_ERR_*` of each file), where the kernel has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AerCounts {
    pub correctable: Option<u64>,
    pub nonfatal: Option<u64>,
    pub fatal: Option<u64>,
}

/// The PCIe link of one RDMA device's PCI function.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PcieLink {
    pub function: LinkEnd,
    /// `None` when the kernel says -1 (no NUMA affinity) or has no `numa_node`.
    pub numa_node: Option<i64>,
    /// The port above the function (switch downstream port or root port); `None` for a
    /// function directly on a root bus (`pci0000:00`).
    pub upstream: Option<LinkEnd>,
    pub aer: AerCounts,
}

impl PcieLink {
    /// The fastest speed both ends support: the function's maximum, capped by the upstream
    /// port's.
    pub fn supported_speed(&self) -> Option<f64> {
        both_ends(
            self.function.max_speed,
            self.upstream_max(|u| u.max_speed)?,
            f64::min,
        )
    }

    /// The widest width both ends support.
    pub fn supported_width(&self) -> Option<u32> {
        both_ends(
            self.function.max_width,
            self.upstream_max(|u| u.max_width)?,
            u32::min,
        )
    }

    /// True when the link trained below what both of its ends support, in speed or in width;
    /// `None` when a value it needs is unknown.
    pub fn downtrained(&self) -> Option<bool> {
        let speed = self.function.current_speed? < self.supported_speed()?;
        let width = self.function.current_width? < self.supported_width()?;
        Some(speed || width)
    }

    /// The upstream port's maximum: `Some(None)` when there is no upstream port (nothing
    /// caps the function's), `None` when the port exists but does not say.
    fn upstream_max<T>(&self, of: impl Fn(&LinkEnd) -> Option<T>) -> Option<Option<T>> {
        match &self.upstream {
            None => Some(None),
            Some(upstream) => of(upstream).map(Some),
        }
    }
}

fn both_ends<T: Copy>(function: Option<T>, upstream: Option<T>, min: fn(T, T) -> T) -> Option<T> {
    let function = function?;
    Some(upstream.map_or(function, |upstream| min(function, upstream)))
}

/// Why a PCIe attribute could not be read or parsed.
#[derive(Debug)]
pub struct PcieError {
    pub path: PathBuf,
    pub error: PcieErrorKind,
}

#[derive(Debug)]
pub enum PcieErrorKind {
    Io(std::io::Error),
    Value(ValueError),
}

/// A link speed: "16.0 GT/s PCIe", "8 GT/s" (older kernels) -> transfers per second;
/// "Unknown" and "Unknown speed" (no link, or a speed the kernel cannot name) -> `None`.
pub(crate) fn parse_speed(bytes: &[u8]) -> Result<Option<f64>, ValueError> {
    let text = attribute_text(bytes)?;
    if text.starts_with("Unknown") {
        return Ok(None);
    }
    let not_a_speed = || ValueError::NotANumber(text.to_string());
    let (number, unit) = text.split_once(' ').ok_or_else(not_a_speed)?;
    if !unit.starts_with("GT/s") {
        return Err(not_a_speed());
    }
    let gigatransfers: f64 = number.parse().map_err(|_| not_a_speed())?;
    if !gigatransfers.is_finite() || gigatransfers <= 0.0 {
        return Err(not_a_speed());
    }
    Ok(Some(gigatransfers * 1e9))
}

/// A link width: the lane count, `%u`.
pub(crate) fn parse_width(bytes: &[u8]) -> Result<u32, ValueError> {
    let text = attribute_text(bytes)?;
    text.parse()
        .map_err(|_| ValueError::NotANumber(text.to_string()))
}

/// `numa_node`: `%d`; -1 (no NUMA affinity) -> `None`.
pub(crate) fn parse_numa_node(bytes: &[u8]) -> Result<Option<i64>, ValueError> {
    let text = attribute_text(bytes)?;
    let node: i64 = text
        .parse()
        .map_err(|_| ValueError::NotANumber(text.to_string()))?;
    Ok((node >= 0).then_some(node))
}

/// The `TOTAL_<total>` line of an `aer_dev_*` file (`total` is `ERR_COR`, `ERR_NONFATAL` or
/// `ERR_FATAL`); a file without it, or with a count that is no number, is garbled.
pub(crate) fn parse_aer_total(bytes: &[u8], total: &str) -> Result<u64, ValueError> {
    let text = attribute_text(bytes)?;
    let prefix = format!("TOTAL_{total} ");
    let count = text
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .ok_or_else(|| ValueError::NotANumber(format!("no TOTAL_{total} line")))?;
    count
        .trim()
        .parse()
        .map_err(|e: std::num::ParseIntError| match e.kind() {
            std::num::IntErrorKind::PosOverflow => ValueError::Overflow(count.to_string()),
            _ => ValueError::NotANumber(count.to_string()),
        })
}

/// True for a PCI address directory name: `DDDD:BB:DD.F` (the domain may be longer, as
/// VMD's `10000`), lowercase hex as the kernel prints it.
pub(crate) fn is_pci_address(name: &str) -> bool {
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut parts = name.split(':');
    let (Some(domain), Some(bus), Some(slot_fn), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Some((slot, function)) = slot_fn.split_once('.') else {
        return false;
    };
    domain.len() >= 4
        && domain.bytes().all(|b| b.is_ascii_hexdigit())
        && hex(bus, 2)
        && hex(slot, 2)
        && matches!(function.as_bytes(), [b'0'..=b'7'])
}

/// How many directories a walk up from a device link may climb to find its PCI function
/// (an auxiliary device or a virtio device sits one level below it).
const MAX_CLIMB: usize = 4;

/// The PCI function directory of an RDMA device: `<class_dir>/infiniband/<device>/device`,
/// else the first netdev's `<class_dir>/net/<netdev>/device`, resolved and walked up to a
/// directory named like a PCI address. `Ok(None)`: no such link, or not on PCI.
pub(crate) fn function_dir(
    class_dir: &Path,
    device: &str,
    netdevs: &mut dyn Iterator<Item = &str>,
) -> Result<Option<PathBuf>, PcieError> {
    let own = class_dir.join("infiniband").join(device).join("device");
    let link = if own.symlink_metadata().is_ok() {
        Some(own)
    } else {
        netdevs
            .map(|netdev| class_dir.join("net").join(netdev).join("device"))
            .find(|link| link.symlink_metadata().is_ok())
    };
    let Some(link) = link else {
        return Ok(None);
    };
    let resolved = std::fs::canonicalize(&link).map_err(|e| PcieError {
        path: link.clone(),
        error: PcieErrorKind::Io(e),
    })?;
    Ok(resolved
        .ancestors()
        .take(MAX_CLIMB + 1)
        .find(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_pci_address)
        })
        .map(Path::to_path_buf))
}

/// Reads the link of the function at `function` (a directory from [`function_dir`]) and of
/// its upstream port. Every failure is returned beside what could be read.
pub fn read_link(function: &Path, buf: &mut AttrBuf) -> (Option<PcieLink>, Vec<PcieError>) {
    let mut errors = Vec::new();
    let dir = match SysDir::open(function) {
        Ok(dir) => dir,
        Err(e) => {
            errors.push(PcieError {
                path: function.to_path_buf(),
                error: PcieErrorKind::Io(e),
            });
            return (None, errors);
        }
    };
    let mut reader = Reader {
        buf,
        errors: &mut errors,
    };
    let link = PcieLink {
        function: reader.end(&dir),
        numa_node: reader.attr(&dir, "numa_node", parse_numa_node).flatten(),
        upstream: function
            .parent()
            .filter(|parent| {
                parent
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(is_pci_address)
            })
            .and_then(|parent| match SysDir::open(parent) {
                Ok(up) => Some(reader.end(&up)),
                Err(e) => {
                    reader.errors.push(PcieError {
                        path: parent.to_path_buf(),
                        error: PcieErrorKind::Io(e),
                    });
                    None
                }
            }),
        aer: AerCounts {
            correctable: reader.attr(&dir, "aer_dev_correctable", |b| {
                parse_aer_total(b, "ERR_COR")
            }),
            nonfatal: reader.attr(&dir, "aer_dev_nonfatal", |b| {
                parse_aer_total(b, "ERR_NONFATAL")
            }),
            fatal: reader.attr(&dir, "aer_dev_fatal", |b| parse_aer_total(b, "ERR_FATAL")),
        },
    };
    (Some(link), errors)
}

struct Reader<'a> {
    buf: &'a mut AttrBuf,
    errors: &'a mut Vec<PcieError>,
}

impl Reader<'_> {
    fn end(&mut self, dir: &SysDir) -> LinkEnd {
        LinkEnd {
            address: dir
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            current_speed: self.attr(dir, "current_link_speed", parse_speed).flatten(),
            current_width: self.attr(dir, "current_link_width", parse_width),
            max_speed: self.attr(dir, "max_link_speed", parse_speed).flatten(),
            max_width: self.attr(dir, "max_link_width", parse_width),
        }
    }

    /// One attribute: absent -> `None` without an error; unreadable or garbled -> an error.
    fn attr<T>(
        &mut self,
        dir: &SysDir,
        name: &str,
        parse: impl Fn(&[u8]) -> Result<T, ValueError>,
    ) -> Option<T> {
        let error = match dir.read(name, self.buf) {
            Ok(n) => match parse(&self.buf[..n]) {
                Ok(value) => return Some(value),
                Err(e) => PcieErrorKind::Value(e),
            },
            Err(e) if e.kind() == ErrorKind::NotFound && dir.is_absent(name, &e) => return None,
            Err(e) => PcieErrorKind::Io(e),
        };
        self.errors.push(PcieError {
            path: dir.path_of(name),
            error,
        });
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GT: f64 = 1e9;

    #[test]
    fn speeds_in_every_kernel_spelling() {
        for (text, want) in [
            ("2.5 GT/s PCIe\n", Some(2.5 * GT)),
            ("16.0 GT/s PCIe\n", Some(16.0 * GT)),
            ("64.0 GT/s PCIe\n", Some(64.0 * GT)),
            ("8 GT/s\n", Some(8.0 * GT)),
            ("5.0 GT/s\n", Some(5.0 * GT)),
            ("Unknown\n", None),
            ("Unknown speed\n", None),
        ] {
            assert_eq!(parse_speed(text.as_bytes()), Ok(want), "{text:?}");
        }
        for garbled in ["fast\n", "16.0 Gb/s\n", "x GT/s\n", "-8 GT/s\n", "\n"] {
            assert!(parse_speed(garbled.as_bytes()).is_err(), "{garbled:?}");
        }
    }

    #[test]
    fn widths_and_numa_nodes() {
        assert_eq!(parse_width(b"16\n"), Ok(16));
        assert!(parse_width(b"x16\n").is_err());
        assert_eq!(parse_numa_node(b"1\n"), Ok(Some(1)));
        assert_eq!(parse_numa_node(b"-1\n"), Ok(None));
        assert!(parse_numa_node(b"node1\n").is_err());
    }

    #[test]
    fn aer_totals_are_the_total_line() {
        let text = b"RxErr 0\nBadTLP 3\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 4\n";
        assert_eq!(parse_aer_total(text, "ERR_COR"), Ok(4));
        assert!(parse_aer_total(text, "ERR_FATAL").is_err());
        assert!(parse_aer_total(b"TOTAL_ERR_FATAL lots\n", "ERR_FATAL").is_err());
        assert_eq!(
            parse_aer_total(b"Undefined 0\nTOTAL_ERR_FATAL 2\n", "ERR_FATAL"),
            Ok(2)
        );
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_address("0000:3b:00.0"));
        assert!(is_pci_address("10000:e1:00.1"));
        assert!(!is_pci_address("pci0000:00"));
        assert!(!is_pci_address("virtio0"));
        assert!(!is_pci_address("0000:3b:00.8"));
        assert!(!is_pci_address("0000:3b:00"));
    }

    fn end(current: (f64, u32), max: (f64, u32)) -> LinkEnd {
        LinkEnd {
            address: String::new(),
            current_speed: Some(current.0 * GT),
            current_width: Some(current.1),
            max_speed: Some(max.0 * GT),
            max_width: Some(max.1),
        }
    }

    #[test]
    fn downtrained_is_below_what_both_ends_support() {
        let link = |function, upstream| PcieLink {
            function,
            upstream,
            ..PcieLink::default()
        };
        // Half width in a x16 slot.
        let half = link(end((16.0, 8), (16.0, 16)), Some(end((16.0, 8), (16.0, 16))));
        assert_eq!(half.downtrained(), Some(true));
        // A Gen5 NIC in a Gen4 slot runs at 16 GT/s as it should.
        let capped = link(
            end((16.0, 16), (32.0, 16)),
            Some(end((16.0, 16), (16.0, 16))),
        );
        assert_eq!(capped.downtrained(), Some(false));
        assert_eq!(capped.supported_speed(), Some(16.0 * GT));
        // A x1 device in a x16 root port: the root port runs below its own maximum, but the
        // link is as wide as its narrower end.
        let narrow = link(end((2.5, 1), (2.5, 1)), Some(end((2.5, 1), (8.0, 16))));
        assert_eq!(narrow.downtrained(), Some(false));
        // Slower than both ends allow.
        let slow = link(end((8.0, 16), (16.0, 16)), Some(end((8.0, 16), (16.0, 16))));
        assert_eq!(slow.downtrained(), Some(true));
        // Without an upstream port, the function's own maximum is the bar.
        assert_eq!(
            link(end((8.0, 8), (8.0, 16)), None).downtrained(),
            Some(true)
        );
        // An upstream port that does not say its maximum: unknown, not healthy.
        let mut unknown = half.clone();
        unknown.upstream.as_mut().unwrap().max_width = None;
        assert_eq!(unknown.downtrained(), None);
        let mut no_link = half;
        no_link.function.current_speed = None;
        assert_eq!(no_link.downtrained(), None);
    }

    fn write(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    #[test]
    fn a_soft_device_is_found_through_its_netdevs_virtio_parent() {
        let root = tempfile::tempdir().unwrap();
        let port = root.path().join("devices/pci0000:00/0000:00:1c.0");
        let function = port.join("0000:01:00.0");
        let virtio = function.join("virtio0");
        write(
            &port,
            &[
                ("current_link_speed", "2.5 GT/s PCIe\n"),
                ("current_link_width", "1\n"),
                ("max_link_speed", "8.0 GT/s PCIe\n"),
                ("max_link_width", "16\n"),
            ],
        );
        write(
            &function,
            &[
                ("current_link_speed", "2.5 GT/s PCIe\n"),
                ("current_link_width", "1\n"),
                ("max_link_speed", "2.5 GT/s PCIe\n"),
                ("max_link_width", "1\n"),
                ("numa_node", "-1\n"),
                ("aer_dev_fatal", "Undefined 0\nTOTAL_ERR_FATAL 0\n"),
                ("aer_dev_nonfatal", "garbled\n"),
            ],
        );
        std::fs::create_dir_all(&virtio).unwrap();
        let class = root.path().join("class");
        std::fs::create_dir_all(class.join("infiniband/rxe0")).unwrap();
        std::fs::create_dir_all(class.join("net/eth1")).unwrap();
        std::os::unix::fs::symlink(&virtio, class.join("net/eth1/device")).unwrap();

        let found = function_dir(&class, "rxe0", &mut ["eth1"].into_iter()).unwrap();
        assert_eq!(
            found.as_deref(),
            Some(function.canonicalize().unwrap().as_path())
        );
        let mut buf = [0; 4096];
        let (link, errors) = read_link(&found.unwrap(), &mut buf);
        let link = link.unwrap();
        assert_eq!(link.function.address, "0000:01:00.0");
        assert_eq!(link.function.max_width, Some(1));
        assert_eq!(link.numa_node, None);
        let upstream = link.upstream.as_ref().unwrap();
        assert_eq!(upstream.address, "0000:00:1c.0");
        assert_eq!(upstream.max_speed, Some(8.0 * GT));
        assert_eq!(link.downtrained(), Some(false));
        assert_eq!(link.aer.fatal, Some(0));
        assert_eq!(link.aer.correctable, None, "absent: no error");
        assert_eq!(link.aer.nonfatal, None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].path.ends_with("aer_dev_nonfatal"));
    }

    #[test]
    fn no_device_link_and_no_netdev_is_no_pci_function() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("infiniband/mlx5_0")).unwrap();
        let found = function_dir(root.path(), "mlx5_0", &mut std::iter::empty()).unwrap();
        assert_eq!(found, None);
    }

    #[test]
    fn a_device_link_to_a_non_pci_device_is_no_pci_function() {
        let root = tempfile::tempdir().unwrap();
        let platform = root.path().join("devices/platform/soc/eth0");
        std::fs::create_dir_all(&platform).unwrap();
        let dev = root.path().join("class/infiniband/hns_0");
        std::fs::create_dir_all(&dev).unwrap();
        std::os::unix::fs::symlink(&platform, dev.join("device")).unwrap();
        let found = function_dir(&root.path().join("class"), "hns_0", &mut std::iter::empty());
        assert_eq!(found.unwrap(), None);
    }
}
