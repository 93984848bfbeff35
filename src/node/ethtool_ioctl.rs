//! `ethtool -S` through the SIOCETHTOOL ioctl: ETHTOOL_GSSET_INFO for the number of statistics,
//! then ETHTOOL_GSTRINGS for their names and ETHTOOL_GSTATS for their values. The kernel lets
//! anyone issue these three commands, so no capability is needed.
//!
//! The string set is re-read on every call because drivers change it at runtime (mlx5 adds
//! per-priority counters when PFC is enabled).

use std::ffi::{c_char, c_void};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};

use libc::IFNAMSIZ;

use super::ethtool::{EthtoolError, EthtoolStats, RawStat, StatNames};

// include/uapi/linux/ethtool.h
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
/// Length of one string-set record: a statistic name, NUL-padded.
pub const ETH_GSTRING_LEN: usize = 32;

/// `struct ifreq` as SIOCETHTOOL uses it: the name and the `ifr_data` member of the union.
/// libc exposes the union, not a typed `ifr_data`; the padding keeps the size equal to the C
/// struct because the kernel copies `sizeof(struct ifreq)` bytes in.
#[repr(C)]
struct IfReq {
    ifr_name: [c_char; IFNAMSIZ],
    ifr_data: *mut c_void,
    _pad: [u8; IFREQ_PAD],
}

const IFREQ_PAD: usize = size_of::<libc::ifreq>() - IFNAMSIZ - size_of::<*mut c_void>();

/// `struct ethtool_sset_info` with room for exactly one `data` entry: the kernel writes one u32
/// per bit set in the mask we pass in, and we pass one bit.
#[repr(C)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// Result of one pass over GSSET_INFO, GSTRINGS, GSTATS.
enum Attempt {
    Read(EthtoolStats),
    /// The driver's count moved away from the GSSET_INFO answer mid-read.
    CountChanged {
        expected: u32,
        got: u32,
    },
}

/// All driver statistics of `netdev` in driver order, as `ethtool -S` prints them.
///
/// Fails with `NotSupported` when the driver has no statistics set at all (`lo`, bridges,
/// dummy); a driver that has the set but reports zero entries yields an empty vector.
pub fn read_stats(netdev: &str) -> Result<Vec<RawStat>, EthtoolError> {
    let stats = read_stats_sharing(netdev, None)?;
    Ok(stats.iter().map(|(n, v)| (n.to_string(), v)).collect())
}

/// As [`read_stats`], sharing `previous` (the names of the netdev's last read) when GSTRINGS
/// gives the same names: a node's NICs list hundreds to thousands of statistics each (mlx5:
/// per channel), and then no name is allocated per scrape.
pub fn read_stats_sharing(
    netdev: &str,
    previous: Option<&StatNames>,
) -> Result<EthtoolStats, EthtoolError> {
    let ifname = ifr_name(netdev)?;
    let sock = open_socket().map_err(|e| map_errno(netdev, "socket", e))?;
    // One retry: a single config change (PFC toggled) between GSSET_INFO and the reads is
    // normal; a set that keeps changing is worth surfacing.
    let mut retried = false;
    loop {
        match read_once(&sock, &ifname, netdev, previous)? {
            Attempt::Read(stats) => return Ok(stats),
            Attempt::CountChanged { .. } if !retried => retried = true,
            Attempt::CountChanged { expected, got } => {
                return Err(EthtoolError::CountChanged {
                    netdev: netdev.to_string(),
                    expected,
                    got,
                })
            }
        }
    }
}

fn read_once(
    sock: &OwnedFd,
    ifname: &IfName,
    netdev: &str,
    previous: Option<&StatNames>,
) -> Result<Attempt, EthtoolError> {
    let count = stats_count(sock, ifname).map_err(|e| map_errno(netdev, "GSSET_INFO", e))?;
    let Some(n) = count else {
        return Err(EthtoolError::NotSupported {
            netdev: netdev.to_string(),
        });
    };
    // A zero count must not reach GSTRINGS/GSTATS: there 0 means "whatever the driver has now",
    // which is exactly the unbounded copy-out the count is meant to prevent.
    if n == 0 {
        return Ok(Attempt::Read(EthtoolStats::default()));
    }

    let names = match read_counted(
        sock,
        ifname,
        &[ETHTOOL_GSTRINGS, ETH_SS_STATS],
        n,
        ETH_GSTRING_LEN,
    )
    .map_err(|e| map_errno(netdev, "GSTRINGS", e))?
    {
        Counted::Read(items) => decode_names(&items, n as usize, previous)
            .map_err(|e| invalid(netdev, "GSTRINGS", e))?,
        Counted::Changed(got) => return Ok(Attempt::CountChanged { expected: n, got }),
    };
    let values = match read_counted(sock, ifname, &[ETHTOOL_GSTATS], n, size_of::<u64>())
        .map_err(|e| map_errno(netdev, "GSTATS", e))?
    {
        Counted::Read(items) => {
            decode_stats(&items, n as usize).map_err(|e| invalid(netdev, "GSTATS", e))?
        }
        Counted::Changed(got) => return Ok(Attempt::CountChanged { expected: n, got }),
    };
    Ok(Attempt::Read(EthtoolStats::new(
        names,
        values.into_iter().map(Some).collect(),
    )))
}

/// A GSTRINGS or GSTATS payload whose length is not `count` whole records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes are not {count} records of {record_len} bytes")]
pub struct RecordsError {
    pub len: usize,
    pub count: usize,
    pub record_len: usize,
}

/// The names of a GSTRINGS answer: `count` records of `ETH_GSTRING_LEN` bytes. Pure, so the
/// byte handling is tested (and fuzzed) without a kernel.
pub fn decode_strings(buf: &[u8], count: usize) -> Result<Vec<String>, RecordsError> {
    Ok(records(buf, count, ETH_GSTRING_LEN)?.map(gstring).collect())
}

/// The names of a GSTRINGS answer as a shared list: `previous` itself when every record holds
/// its name (compared in place, nothing allocated), else a list of their own.
pub fn decode_names(
    buf: &[u8],
    count: usize,
    previous: Option<&StatNames>,
) -> Result<StatNames, RecordsError> {
    let records = records(buf, count, ETH_GSTRING_LEN)?;
    if let Some(previous) = previous.filter(|p| p.len() == count) {
        let same = records
            .clone()
            .zip(previous.iter())
            .all(|(raw, name)| gstring_bytes(raw) == name.as_bytes());
        if same {
            return Ok(previous.clone());
        }
    }
    Ok(records.map(|raw| gstring(raw).into_boxed_str()).collect())
}

/// The values of a GSTATS answer: `count` u64 in native byte order.
pub fn decode_stats(buf: &[u8], count: usize) -> Result<Vec<u64>, RecordsError> {
    Ok(records(buf, count, size_of::<u64>())?
        .map(|v| u64::from_ne_bytes(v.try_into().expect("8-byte chunk")))
        .collect())
}

/// `buf` as exactly `count` records; a short or long buffer is refused rather than truncated,
/// which would pair names with the wrong values.
fn records(
    buf: &[u8],
    count: usize,
    record_len: usize,
) -> Result<std::slice::ChunksExact<'_, u8>, RecordsError> {
    if count.checked_mul(record_len) != Some(buf.len()) {
        return Err(RecordsError {
            len: buf.len(),
            count,
            record_len,
        });
    }
    Ok(buf.chunks_exact(record_len))
}

/// A statistic name: NUL-padded to 32 bytes, not NUL-terminated when it uses all 32.
fn gstring(raw: &[u8]) -> String {
    String::from_utf8_lossy(gstring_bytes(raw)).into_owned()
}

/// A record's bytes up to its NUL. A name that is not UTF-8 never equals a kept name as bytes
/// (those are lossily decoded), so such a list is always decoded afresh.
fn gstring_bytes(raw: &[u8]) -> &[u8] {
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    &raw[..end]
}

fn invalid(netdev: &str, op: &'static str, e: RecordsError) -> EthtoolError {
    EthtoolError::Io {
        netdev: netdev.to_string(),
        op,
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    }
}

fn map_errno(netdev: &str, op: &'static str, source: io::Error) -> EthtoolError {
    let netdev = netdev.to_string();
    match source.raw_os_error() {
        Some(libc::ENODEV) => EthtoolError::NoDevice { netdev },
        Some(libc::EOPNOTSUPP) => EthtoolError::NotSupported { netdev },
        _ => EthtoolError::Io { netdev, op, source },
    }
}

pub(crate) type IfName = [c_char; IFNAMSIZ];

pub(crate) fn ifr_name(netdev: &str) -> Result<IfName, EthtoolError> {
    let bytes = netdev.as_bytes();
    // The kernel silently truncates at IFNAMSIZ-1 and would query a different device.
    if bytes.is_empty() || bytes.len() >= IFNAMSIZ || bytes.contains(&0) {
        return Err(EthtoolError::BadName {
            netdev: netdev.to_string(),
        });
    }
    let mut name: IfName = [0; IFNAMSIZ];
    for (dst, src) in name.iter_mut().zip(bytes) {
        *dst = c_char::from_ne_bytes([*src]);
    }
    Ok(name)
}

pub(crate) fn open_socket() -> io::Result<OwnedFd> {
    // SAFETY: no pointer arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Issues SIOCETHTOOL for `ifname`; the command is the first u32 at `data`.
///
/// # Safety
/// `data` must point to writable memory large enough for everything the kernel writes back
/// for the command it holds.
pub(crate) unsafe fn ethtool_ioctl(
    sock: &OwnedFd,
    ifname: &IfName,
    data: *mut c_void,
) -> io::Result<()> {
    let mut ifr = IfReq {
        ifr_name: *ifname,
        ifr_data: data,
        _pad: [0; IFREQ_PAD],
    };
    // SAFETY: `ifr` is a complete `struct ifreq` that outlives the call; the caller vouches for
    // `data`.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCETHTOOL as _,
            ptr::from_mut(&mut ifr),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Size of the ETH_SS_STATS set, or `None` if the driver has no such set.
fn stats_count(sock: &OwnedFd, ifname: &IfName) -> io::Result<Option<u32>> {
    let mut info = SsetInfo {
        cmd: ETHTOOL_GSSET_INFO,
        reserved: 0,
        sset_mask: 1 << ETH_SS_STATS,
        data: [0],
    };
    // SAFETY: the kernel writes the 16-byte header plus one u32 per requested bit (one), which
    // is exactly `SsetInfo`.
    unsafe { ethtool_ioctl(sock, ifname, ptr::from_mut(&mut info).cast())? };
    // The kernel clears the bit when the driver has no such set.
    Ok((info.sset_mask & (1 << ETH_SS_STATS) != 0).then_some(info.data[0]))
}

enum Counted {
    /// Exactly the requested number of items, `item_len` bytes each.
    Read(Vec<u8>),
    /// The kernel reported a different count (0 on kernels that refuse a mismatched count).
    Changed(u32),
}

/// GSTRINGS/GSTATS: a header of u32 words ending in the item count, followed by the items.
/// `head` is the header without the count.
fn read_counted(
    sock: &OwnedFd,
    ifname: &IfName,
    head: &[u32],
    n: u32,
    item_len: usize,
) -> io::Result<Counted> {
    let head_len = (head.len() + 1) * size_of::<u32>();
    let data_len = (n as usize)
        .checked_mul(item_len)
        .and_then(|len| len.checked_add(head_len))
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
    let mut buf = GuardedBuf::new(data_len)?;
    for (word, slot) in head
        .iter()
        .chain([&n])
        .zip(buf.bytes_mut().chunks_exact_mut(4))
    {
        slot.copy_from_slice(&word.to_ne_bytes());
    }
    // SAFETY: `buf` holds the header plus `n` items; a kernel that writes more than that hits
    // the guard page and fails with EFAULT (see `GuardedBuf`).
    let result = unsafe { ethtool_ioctl(sock, ifname, buf.as_mut_ptr()) };
    let count_at = head_len - size_of::<u32>();
    let got = u32::from_ne_bytes(buf.bytes()[count_at..head_len].try_into().expect("4 bytes"));
    match result {
        Ok(()) if got == n => Ok(Counted::Read(buf.bytes()[head_len..].to_vec())),
        Ok(()) => Ok(Counted::Changed(got)),
        // Old kernels write the header, then fault on the guard page if the set grew.
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) && got != n => Ok(Counted::Changed(got)),
        Err(e) => Err(e),
    }
}

/// Zeroed, page-aligned read/write memory followed by an inaccessible guard page.
///
/// Kernels before the 2025 fix "ethtool: Avoid overflowing userspace buffer on stats query"
/// ignore the count we pass to GSTRINGS/GSTATS and copy out the driver's current count. If the
/// set grew after GSSET_INFO, that would overrun a heap buffer; here it faults on the guard
/// page and the ioctl fails with EFAULT instead.
struct GuardedBuf {
    base: NonNull<u8>,
    map_len: usize,
    len: usize,
}

impl GuardedBuf {
    fn new(len: usize) -> io::Result<Self> {
        let page = page_size();
        let data_len = len.max(1).div_ceil(page) * page;
        let map_len = data_len + page;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(addr.cast::<u8>()).expect("mmap returned NULL");
        // Owns the mapping from here on, so the error path below unmaps it.
        let buf = GuardedBuf { base, map_len, len };
        // SAFETY: the last page of the mapping created above; nothing references it.
        let rc = unsafe {
            libc::mprotect(
                addr.cast::<u8>().add(data_len).cast(),
                page,
                libc::PROT_NONE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(buf)
    }

    fn as_mut_ptr(&mut self) -> *mut c_void {
        self.base.as_ptr().cast()
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are mapped read/write (zero-filled by mmap) for the
        // lifetime of `self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.len) }
    }
}

impl Drop for GuardedBuf {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping created in `new`; no borrows of it outlive `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

fn page_size() -> usize {
    // SAFETY: no pointer arguments.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of};

    #[test]
    fn ifreq_layout_matches_libc() {
        assert_eq!(size_of::<IfReq>(), size_of::<libc::ifreq>());
        assert_eq!(align_of::<IfReq>(), align_of::<libc::ifreq>());
        assert_eq!(offset_of!(IfReq, ifr_data), IFNAMSIZ);
    }

    #[test]
    fn sset_info_layout_matches_uapi() {
        assert_eq!(offset_of!(SsetInfo, sset_mask), 8);
        assert_eq!(offset_of!(SsetInfo, data), 16);
    }

    #[test]
    fn loopback_has_no_stats_set() {
        // loopback's ethtool_ops have no get_sset_count, so GSSET_INFO clears the bit (this is
        // where `ethtool -S lo` prints "no stats available").
        let err = read_stats("lo").unwrap_err();
        assert!(matches!(err, EthtoolError::NotSupported { .. }), "{err:?}");
    }

    #[test]
    fn missing_device_is_no_device() {
        let err = read_stats("nonexistent0").unwrap_err();
        assert!(matches!(err, EthtoolError::NoDevice { .. }), "{err:?}");
        // 15 bytes is the longest valid name and must reach the kernel.
        let err = read_stats("nonexistent0123").unwrap_err();
        assert!(matches!(err, EthtoolError::NoDevice { .. }), "{err:?}");
    }

    #[test]
    fn invalid_names_are_rejected_before_the_kernel() {
        for name in ["nonexistent01234", "", "eth\0x"] {
            let err = read_stats(name).unwrap_err();
            assert!(
                matches!(err, EthtoolError::BadName { .. }),
                "{name:?}: {err:?}"
            );
        }
    }

    #[test]
    fn gstring_stops_at_nul_and_tolerates_full_width_and_bad_utf8() {
        let mut raw = [0u8; ETH_GSTRING_LEN];
        raw[..10].copy_from_slice(b"rx_packets");
        assert_eq!(gstring(&raw), "rx_packets");
        assert_eq!(
            gstring(&[b'a'; ETH_GSTRING_LEN]),
            "a".repeat(ETH_GSTRING_LEN)
        );
        assert_eq!(gstring(b"q\xff\0junk"), "q\u{fffd}");
    }

    #[test]
    fn names_equal_to_the_previous_read_share_its_list() {
        let record = |name: &[u8]| {
            let mut raw = [0u8; ETH_GSTRING_LEN];
            raw[..name.len()].copy_from_slice(name);
            raw
        };
        let buf: Vec<u8> = [record(b"rx_packets"), record(b"rx_prio3_pause")].concat();
        let first = decode_names(&buf, 2, None).unwrap();
        assert_eq!(
            &*first,
            ["rx_packets".into(), "rx_prio3_pause".into()] as [Box<str>; 2]
        );
        let again = decode_names(&buf, 2, Some(&first)).unwrap();
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        // One name differs: a list of its own, with the new name.
        let changed: Vec<u8> = [record(b"rx_packets"), record(b"rx_prio4_pause")].concat();
        let other = decode_names(&changed, 2, Some(&first)).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&first, &other));
        assert_eq!(&*other[1], "rx_prio4_pause");
        // A name that is not UTF-8 is decoded lossily every time, never matched as bytes.
        let odd: Vec<u8> = [record(b"rx_packets"), record(b"q\xff")].concat();
        let lossy = decode_names(&odd, 2, None).unwrap();
        assert_eq!(&*lossy[1], "q\u{fffd}");
        let lossy_again = decode_names(&odd, 2, Some(&lossy)).unwrap();
        assert_eq!(lossy_again, lossy);
        // A count that does not match the buffer is still refused.
        assert!(decode_names(&buf, 3, Some(&first)).is_err());
    }

    #[test]
    fn decoders_pair_whole_records_only() {
        let mut names = vec![0u8; 2 * ETH_GSTRING_LEN];
        names[..10].copy_from_slice(b"rx_packets");
        names[ETH_GSTRING_LEN..ETH_GSTRING_LEN + 14].copy_from_slice(b"rx_prio3_pause");
        assert_eq!(
            decode_strings(&names, 2).unwrap(),
            ["rx_packets", "rx_prio3_pause"]
        );
        let values: Vec<u8> = [7u64, u64::MAX]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(decode_stats(&values, 2).unwrap(), [7, u64::MAX]);
        assert_eq!(
            decode_strings(&names[1..], 2).unwrap_err(),
            RecordsError {
                len: 63,
                count: 2,
                record_len: ETH_GSTRING_LEN
            }
        );
        assert!(decode_stats(&values, 3).is_err());
        // A count whose byte size overflows is refused, not wrapped.
        assert!(decode_stats(&values, usize::MAX).is_err());
        assert_eq!(decode_strings(&[], 0).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn guarded_buf_is_zeroed_and_sized() {
        let mut buf = GuardedBuf::new(12 + 3 * ETH_GSTRING_LEN).unwrap();
        assert_eq!(buf.bytes().len(), 108);
        assert!(buf.bytes().iter().all(|b| *b == 0));
        buf.bytes_mut()[107] = 1;
        assert_eq!(buf.bytes()[107], 1);
    }
}
