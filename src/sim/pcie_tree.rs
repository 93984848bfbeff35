//! The PCIe link files of a simulated NIC's PCI function and of the root port above it, as
//! Linux's sysfs prints them (`drivers/pci/pci-sysfs.c`: `current_link_speed`,
//! `current_link_width`, `max_link_speed`, `max_link_width`; `drivers/pci/pcie/aer.c`:
//! `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`, one `NAME count` line per error
//! bit the kernel names, then a `TOTAL_ERR_*` line). A ConnectX-7 is a Gen5 x16 function in a
//! Gen5 x16 root port; every simulated function hangs from the one root port of
//! `sysfs_tree::PCI_PARENT` (a simplification: a real root port has one link).

use std::io;
use std::path::Path;

/// The kernel's speed text for the simulated Gen5 links.
pub const GEN5: &str = "32.0 GT/s PCIe";
/// Lanes of a ConnectX-7 and of its slot.
pub const FULL_WIDTH: u32 = 16;

/// What a NIC's PCIe link trained to, and its AER counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieSpec {
    /// Lanes the link trained at (16 healthy; 8: half width).
    pub current_width: u32,
    pub aer_correctable: u64,
    pub aer_nonfatal: u64,
    pub aer_fatal: u64,
}

impl Default for PcieSpec {
    /// A healthy link: full width, no AER errors.
    fn default() -> Self {
        PcieSpec {
            current_width: FULL_WIDTH,
            aer_correctable: 0,
            aer_nonfatal: 0,
            aer_fatal: 0,
        }
    }
}

/// `aer_correctable_error_string` of the 6.1 kernel (bit order; unnamed bits are not printed).
const CORRECTABLE: &[&str] = &[
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
];
/// `aer_uncorrectable_error_string` of the 6.1 kernel (bit order), for both non-fatal and fatal.
const UNCORRECTABLE: &[&str] = &[
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
];

/// One `aer_dev_*` file: every named bit, `count` on `bit`, then the total.
pub fn aer_text(names: &[&str], bit: &str, count: u64, total: &str) -> String {
    let mut text = String::new();
    for name in names {
        let n = if *name == bit { count } else { 0 };
        text.push_str(&format!("{name} {n}\n"));
    }
    text.push_str(&format!("TOTAL_{total} {count}\n"));
    text
}

/// The files of the function at `function` and of the root port at `root_port`, each through
/// `write(path, text)` (the tree writer's replace-by-rename).
pub fn write_pcie(
    function: &Path,
    root_port: &Path,
    spec: &PcieSpec,
    write: &dyn Fn(&Path, &str) -> io::Result<()>,
) -> io::Result<()> {
    let link = |dir: &Path, width: u32| -> io::Result<()> {
        write(&dir.join("current_link_speed"), &format!("{GEN5}\n"))?;
        write(&dir.join("current_link_width"), &format!("{width}\n"))?;
        write(&dir.join("max_link_speed"), &format!("{GEN5}\n"))?;
        write(&dir.join("max_link_width"), &format!("{FULL_WIDTH}\n"))
    };
    link(function, spec.current_width)?;
    // The root port's link status is its one link's: what the function trained at.
    link(root_port, spec.current_width)?;
    write(
        &function.join("aer_dev_correctable"),
        &aer_text(CORRECTABLE, "BadTLP", spec.aer_correctable, "ERR_COR"),
    )?;
    write(
        &function.join("aer_dev_nonfatal"),
        &aer_text(UNCORRECTABLE, "CmpltTO", spec.aer_nonfatal, "ERR_NONFATAL"),
    )?;
    write(
        &function.join("aer_dev_fatal"),
        &aer_text(UNCORRECTABLE, "MalfTLP", spec.aer_fatal, "ERR_FATAL"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::pcie;

    #[test]
    fn written_files_read_back_through_the_exporters_reader() {
        let root = tempfile::tempdir().unwrap();
        let port = root.path().join("pci0000:00/0000:00:01.0");
        let function = port.join("0000:1a:00.0");
        std::fs::create_dir_all(&function).unwrap();
        let spec = PcieSpec {
            current_width: 8,
            aer_nonfatal: 3,
            ..PcieSpec::default()
        };
        write_pcie(&function, &port, &spec, &|path, text| {
            std::fs::write(path, text)
        })
        .unwrap();
        let mut buf = [0; 4096];
        let (link, errors) = pcie::read_link(&function, &mut buf);
        assert!(errors.is_empty(), "{errors:?}");
        let link = link.unwrap();
        assert_eq!(link.function.current_width, Some(8));
        assert_eq!(link.function.max_speed, Some(32e9));
        assert_eq!(link.upstream.as_ref().unwrap().max_width, Some(16));
        assert_eq!(link.downtrained(), Some(true));
        assert_eq!(link.aer.nonfatal, Some(3));
        assert_eq!(link.aer.fatal, Some(0));
        let healthy = PcieSpec::default();
        write_pcie(&function, &port, &healthy, &|path, text| {
            std::fs::write(path, text)
        })
        .unwrap();
        let (link, _) = pcie::read_link(&function, &mut buf);
        assert_eq!(link.unwrap().downtrained(), Some(false));
    }
}
