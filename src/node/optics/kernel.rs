//! Module memory from the running kernel: `ETHTOOL_MSG_MODULE_EEPROM_GET` page reads over the
//! `ethtool` generic netlink family (kernel 5.13+, any page and bank), with the SIOCETHTOOL
//! `ETHTOOL_GMODULEINFO`/`ETHTOOL_GMODULEEEPROM` ioctl as fallback where the netlink command is
//! missing (it reaches only the flat layouts: SFF-8472 A0h+A2h, SFF-8636 pages 00h-03h).
//!
//! Both need CAP_NET_ADMIN in the netdev's network namespace: the netlink op carries
//! `GENL_UNS_ADMIN_PERM` (`net/ethtool/netlink.c`, `ethtool_genl_ops`), and neither ioctl is in
//! the list of commands `__dev_ethtool` (`net/ethtool/ioctl.c`) lets anyone issue. EPERM is
//! [`PageError::Permission`].

use std::ffi::c_void;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::node::ethtool_ioctl;
use crate::node::ethtool_netlink::uapi::{
    ETHTOOL_MSG_MODULE_EEPROM_GET, ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY,
};
use crate::node::ethtool_netlink::{AttrWriter, EthtoolNetlink, EthtoolNlError};

use super::layout::{I2C_ADDRESS, I2C_ADDRESS_DIAGNOSTICS};
use super::{ModulePages, PageError, PageRequest};

// `ETHTOOL_A_MODULE_EEPROM_*` (include/uapi/linux/ethtool_netlink.h; the generated header
// since 6.7, same values): offset and length u32, page, bank and I2C address u8, data binary.
const ETHTOOL_A_MODULE_EEPROM_OFFSET: u16 = 2;
const ETHTOOL_A_MODULE_EEPROM_LENGTH: u16 = 3;
const ETHTOOL_A_MODULE_EEPROM_PAGE: u16 = 4;
const ETHTOOL_A_MODULE_EEPROM_BANK: u16 = 5;
const ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS: u16 = 6;
const ETHTOOL_A_MODULE_EEPROM_DATA: u16 = 7;

// include/uapi/linux/ethtool.h: the commands, `struct ethtool_modinfo`'s `type` values.
const ETHTOOL_GMODULEINFO: u32 = 0x42;
const ETHTOOL_GMODULEEEPROM: u32 = 0x43;
const ETH_MODULE_SFF_8079: u32 = 0x1;
const ETH_MODULE_SFF_8472: u32 = 0x2;
const ETH_MODULE_SFF_8636: u32 = 0x3;
const ETH_MODULE_SFF_8436: u32 = 0x4;

/// `struct ethtool_modinfo`.
#[repr(C)]
struct ModInfo {
    cmd: u32,
    kind: u32,
    eeprom_len: u32,
    reserved: [u32; 8],
}

/// `struct ethtool_eeprom` with room for the at most 256 bytes one request asks.
#[repr(C)]
struct Eeprom {
    cmd: u32,
    magic: u32,
    offset: u32,
    len: u32,
    data: [u8; 256],
}

/// The kernel's module memory, netlink first.
#[derive(Debug)]
pub(crate) struct KernelPages {
    netlink: EthtoolNetlink,
    /// The kernel has no ethtool family (before 5.6): straight to the ioctl from then on.
    no_netlink: AtomicBool,
}

impl KernelPages {
    /// `timeout` bounds each netlink request (the module's firmware answers over I2C).
    pub fn new(timeout: Duration) -> KernelPages {
        KernelPages {
            netlink: EthtoolNetlink::new(timeout),
            no_netlink: AtomicBool::new(false),
        }
    }

    fn netlink_read(&self, netdev: &str, request: PageRequest) -> Result<Vec<u8>, EthtoolNlError> {
        let mut extra = AttrWriter::default();
        extra
            .u32(ETHTOOL_A_MODULE_EEPROM_OFFSET, u32::from(request.offset))
            .u32(ETHTOOL_A_MODULE_EEPROM_LENGTH, u32::from(request.length))
            .u8(ETHTOOL_A_MODULE_EEPROM_PAGE, request.page)
            .u8(ETHTOOL_A_MODULE_EEPROM_BANK, request.bank)
            .u8(ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS, request.i2c_address);
        let answer = self.netlink.request(
            ETHTOOL_MSG_MODULE_EEPROM_GET,
            ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY,
            netdev,
            0,
            &extra,
        )?;
        data_of(&answer.attrs, request)
    }
}

/// `ETHTOOL_A_MODULE_EEPROM_DATA` of a reply, exactly the length asked.
pub(crate) fn data_of(attrs: &[u8], request: PageRequest) -> Result<Vec<u8>, EthtoolNlError> {
    for attr in crate::node::rdma_netlink::wire::attrs(attrs) {
        let attr = attr.map_err(|e| EthtoolNlError::Malformed(e.to_string()))?;
        if attr.kind == ETHTOOL_A_MODULE_EEPROM_DATA {
            if attr.value.len() != usize::from(request.length) {
                return Err(EthtoolNlError::Malformed(format!(
                    "{request}: {} bytes of data",
                    attr.value.len()
                )));
            }
            return Ok(attr.value.to_vec());
        }
    }
    Err(EthtoolNlError::Malformed(format!(
        "{request}: no data attribute"
    )))
}

impl ModulePages for KernelPages {
    fn read(&self, netdev: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
        if !self.no_netlink.load(Ordering::Relaxed) {
            match self.netlink_read(netdev, request) {
                Ok(bytes) => return Ok(bytes),
                Err(EthtoolNlError::NoFamily { .. } | EthtoolNlError::Unavailable(_)) => {
                    self.no_netlink.store(true, Ordering::Relaxed);
                }
                // A kernel with the family but not the command (5.6-5.12), or a driver
                // without module access: the ioctl tells them apart.
                Err(EthtoolNlError::NotSupported { .. }) => {}
                Err(EthtoolNlError::NoDevice { .. }) => return Err(PageError::NoModule),
                Err(EthtoolNlError::Permission { .. }) => return Err(PageError::Permission),
                Err(EthtoolNlError::BadName { netdev }) => return Err(PageError::BadName(netdev)),
                Err(EthtoolNlError::Timeout { timeout }) => {
                    return Err(PageError::Timeout(timeout))
                }
                // The driver refuses a page the module does not have.
                Err(EthtoolNlError::Errno(libc::EINVAL)) => return Err(PageError::NoPage(request)),
                Err(EthtoolNlError::Malformed(m)) => return Err(PageError::Malformed(m)),
                Err(e @ (EthtoolNlError::Errno(_) | EthtoolNlError::Io { .. })) => {
                    return Err(PageError::Io {
                        op: "ETHTOOL_MSG_MODULE_EEPROM_GET",
                        source: Arc::new(io::Error::other(e.to_string())),
                    })
                }
            }
        }
        ioctl_read(netdev, request)
    }
}

/// Where `request` lies in the flat buffer `ETHTOOL_GMODULEEEPROM` gives for a module of
/// `kind` with `eeprom_len` bytes: SFF-8079/8472 put A0h at 0-255 and A2h at 256-511;
/// SFF-8636/8436 put the lower page at 0-127 and upper page `p` at 128 * (p + 1). `None`:
/// not reachable this way.
pub(crate) fn flat_span(kind: u32, eeprom_len: u32, request: PageRequest) -> Option<u32> {
    let offset = u32::from(request.offset);
    let upper = offset >= 128;
    let start = match kind {
        ETH_MODULE_SFF_8079 | ETH_MODULE_SFF_8472 if request.page == 0 && request.bank == 0 => {
            match request.i2c_address {
                I2C_ADDRESS => offset,
                I2C_ADDRESS_DIAGNOSTICS => 256 + offset,
                _ => return None,
            }
        }
        ETH_MODULE_SFF_8636 | ETH_MODULE_SFF_8436
            if request.i2c_address == I2C_ADDRESS && request.bank == 0 =>
        {
            if !upper || request.page == 0 {
                offset
            } else if request.page <= 3 {
                128 * u32::from(request.page) + offset
            } else {
                return None;
            }
        }
        _ => return None,
    };
    (start + u32::from(request.length) <= eeprom_len).then_some(start)
}

fn ioctl_error(op: &'static str, e: io::Error) -> PageError {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => PageError::Permission,
        Some(libc::EOPNOTSUPP | libc::ENODEV | libc::ENXIO) => PageError::NoModule,
        _ => PageError::Io {
            op,
            source: Arc::new(e),
        },
    }
}

fn ioctl_read(netdev: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
    let ifname =
        ethtool_ioctl::ifr_name(netdev).map_err(|_| PageError::BadName(netdev.to_string()))?;
    let sock = ethtool_ioctl::open_socket().map_err(|e| ioctl_error("socket", e))?;
    let mut info = ModInfo {
        cmd: ETHTOOL_GMODULEINFO,
        kind: 0,
        eeprom_len: 0,
        reserved: [0; 8],
    };
    // SAFETY: the kernel writes at most `struct ethtool_modinfo`, which `ModInfo` is.
    unsafe {
        ethtool_ioctl::ethtool_ioctl(&sock, &ifname, ptr::from_mut(&mut info).cast::<c_void>())
    }
    .map_err(|e| ioctl_error("ETHTOOL_GMODULEINFO", e))?;
    let start = flat_span(info.kind, info.eeprom_len, request).ok_or(PageError::NoPage(request))?;
    let mut eeprom = Eeprom {
        cmd: ETHTOOL_GMODULEEEPROM,
        magic: 0,
        offset: start,
        len: u32::from(request.length),
        data: [0; 256],
    };
    // SAFETY: the kernel writes the 16-byte header and `len` (at most 255) bytes of data, which
    // `Eeprom` holds.
    unsafe {
        ethtool_ioctl::ethtool_ioctl(&sock, &ifname, ptr::from_mut(&mut eeprom).cast::<c_void>())
    }
    .map_err(|e| ioctl_error("ETHTOOL_GMODULEEEPROM", e))?;
    Ok(eeprom.data[..usize::from(request.length)].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_map_onto_the_ioctls_flat_layouts() {
        let a2 = PageRequest::lower(I2C_ADDRESS_DIAGNOSTICS);
        assert_eq!(flat_span(ETH_MODULE_SFF_8472, 512, a2), Some(256));
        // An SFP without diagnostics reports SFF-8079: 256 bytes, no A2h.
        assert_eq!(flat_span(ETH_MODULE_SFF_8079, 256, a2), None);
        let page_03 = PageRequest::upper(3, 0);
        assert_eq!(flat_span(ETH_MODULE_SFF_8636, 640, page_03), Some(512));
        assert_eq!(flat_span(ETH_MODULE_SFF_8636, 256, page_03), None);
        assert_eq!(
            flat_span(ETH_MODULE_SFF_8636, 256, PageRequest::upper(0, 0)),
            Some(128)
        );
        // CMIS pages beyond 03h are out of the ioctl's reach.
        assert_eq!(
            flat_span(ETH_MODULE_SFF_8636, 640, PageRequest::upper(0x11, 0)),
            None
        );
    }

    #[test]
    fn the_reply_data_must_be_the_length_asked() {
        let request = PageRequest::upper(0x11, 0);
        let mut attrs = AttrWriter::default();
        attrs.raw(ETHTOOL_A_MODULE_EEPROM_DATA, &[7; 128]);
        assert_eq!(data_of(attrs.bytes(), request).unwrap(), vec![7; 128]);
        let mut short = AttrWriter::default();
        short.raw(ETHTOOL_A_MODULE_EEPROM_DATA, &[7; 16]);
        assert!(data_of(short.bytes(), request).is_err());
        assert!(data_of(&[], request).is_err());
    }

    /// The running kernel judges the request itself: its policy checks every attribute before
    /// it looks for the driver's op, so a malformed request would be EINVAL. `lo` has no module
    /// op: EOPNOTSUPP for a process with CAP_NET_ADMIN, EPERM without; a kernel without the
    /// family (or the command, before 5.13) says so.
    #[test]
    fn the_kernel_accepts_the_request_and_lo_has_no_module_op() {
        let pages = KernelPages::new(Duration::from_secs(2));
        let result = pages.netlink_read("lo", PageRequest::upper(0x11, 0));
        match result {
            Err(EthtoolNlError::NotSupported { .. }) => {}
            Err(EthtoolNlError::Permission { .. }) => {
                // SAFETY: geteuid has no preconditions.
                assert_ne!(unsafe { libc::geteuid() }, 0, "root refused: {result:?}");
            }
            Err(EthtoolNlError::NoFamily { .. } | EthtoolNlError::Unavailable(_)) => {}
            other => panic!("lo: {other:?}"),
        }
        // No such netdev: ENODEV, read as no module.
        assert!(matches!(
            pages.read("nosuchdev0", PageRequest::lower(I2C_ADDRESS)),
            Err(PageError::NoModule | PageError::Permission)
        ));
    }

    /// Whatever the machine running the tests has: no panic, and an unprivileged process is
    /// refused or finds no module on `lo` (which has no module EEPROM).
    #[test]
    fn loopback_has_no_module() {
        let pages = KernelPages::new(Duration::from_secs(2));
        match pages.read("lo", PageRequest::lower(I2C_ADDRESS)) {
            Err(PageError::NoModule | PageError::Permission) => {}
            other => panic!("lo: {other:?}"),
        }
    }
}
