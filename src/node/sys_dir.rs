//! An open sysfs directory, optionally remembering what it opened for the next scrape.
//!
//! Files below a directory are opened relative to its descriptor, so the kernel resolves one
//! path component per file instead of the whole symlinked path. In a cached tree (see
//! [`super::tree_cache`]) a directory also keeps, between scrapes, its sorted listing, its open
//! subdirectories and the open descriptors of the attributes read below it, read again with
//! `pread` at offset 0: sysfs attributes are seq_file (kernfs) files, and a read at position 0
//! calls the attribute's `show()` again, so a kept descriptor gives the current value. Static
//! attributes (firmware version, GUIDs, link layer) keep their bytes.
//!
//! Every cached directory is checked before use: its `fstat` must still give the inode and
//! change times it had when it was opened, and those times must have been older than
//! [`SETTLE`] then (file systems stamp times at a clock tick's granularity, so a change within
//! the same tick could otherwise go unseen). A directory that fails the check is opened again
//! by name, and everything below it with it. On sysfs, a removed attribute read through a kept
//! descriptor fails with ENODEV (ENOENT elsewhere): the tree is then marked stale and the
//! caller reads the device again from scratch.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

use super::counters::Names;
use super::tree_cache::{Charge, TreeShared};

/// How old a directory's change times must be before its listing is trusted across scrapes.
pub const SETTLE: Duration = Duration::from_secs(1);

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);
/// NONBLOCK: a FIFO or device node where an attribute should be (a broken or hostile tree)
/// must not wedge the walk; regular sysfs attributes ignore the flag.
const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK);

/// The entries of a directory named by a number, in numeric order: each number with its
/// entry's place in the directory's [`Names`].
pub(crate) type Numbered = Arc<[(u32, usize)]>;

/// The size bound of every attribute read: attributes are at most a page.
pub(crate) type AttrBuf = [u8; 4096];

/// An open directory; clones share it (and its cache).
#[derive(Clone)]
pub(crate) struct SysDir(Arc<DirNode>);

struct DirNode {
    path: PathBuf,
    /// Set in a cached tree: what the tree shares (descriptor budget, staleness).
    tree: Option<Arc<TreeShared>>,
    /// Identity and change times when opened; only taken in a cached tree.
    stamp: Option<Kept>,
    /// This directory's own descriptor, charged to the budget.
    _charge: Option<Charge>,
    state: Mutex<DirState>,
}

struct DirState {
    dir: Dir,
    listing: Option<Names>,
    /// The numbered entries of `listing` in numeric order (see [`SysDir::numbered_entries`]).
    numbered: Option<Numbered>,
    // Looked up once per attribute per scrape by names the kernel chose: the Fx hash, not
    // SipHash (which was 3-6% of a scrape), since no untrusted party picks these keys.
    subdirs: FxHashMap<String, SysDir>,
    files: FxHashMap<String, KeptFile>,
    /// The kept files of the listing's entries, by their place in it: the counters of a
    /// `counters/` directory are read by position, with no name hashed per read.
    listed_files: Vec<Option<KeptFile>>,
    /// Names found to have no entry at all (an optional `counters_ext/` on a current kernel):
    /// not looked up again while the directory is kept, since an entry added later changes
    /// the directory's times and with them the directory.
    absent: Vec<String>,
}

/// How a read names its file: by name, or by its place in this directory's listing.
#[derive(Clone, Copy)]
enum Key<'n> {
    Name(&'n str),
    Listed(usize, &'n str),
}

impl Key<'_> {
    fn name(&self) -> &str {
        match self {
            Key::Name(name) | Key::Listed(_, name) => name,
        }
    }
}

impl DirState {
    fn known_absent(&self, name: &str) -> bool {
        self.absent.iter().any(|a| a == name)
    }

    fn kept(&self, key: Key<'_>) -> Option<&KeptFile> {
        match key {
            Key::Name(name) => self.files.get(name),
            Key::Listed(index, _) => self.listed_files.get(index)?.as_ref(),
        }
    }

    fn forget(&mut self, key: Key<'_>) {
        match key {
            Key::Name(name) => {
                self.files.remove(name);
            }
            Key::Listed(index, _) => {
                if let Some(slot) = self.listed_files.get_mut(index) {
                    *slot = None;
                }
            }
        }
    }

    fn keep(&mut self, key: Key<'_>, file: KeptFile) {
        match key {
            Key::Name(name) => {
                self.files.insert(name.to_string(), file);
            }
            Key::Listed(index, _) => {
                if self.listed_files.len() <= index {
                    self.listed_files.resize_with(index + 1, || None);
                }
                self.listed_files[index] = Some(file);
            }
        }
    }
}

enum KeptFile {
    /// A regular file's descriptor, read again with `pread` at offset 0.
    Open { fd: OwnedFd, _charge: Charge },
    /// A static attribute's bytes.
    Bytes(Vec<u8>),
}

/// What identifies a directory and tells whether its entries changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub fn of(stat: &Stat) -> Stamp {
        Stamp {
            dev: stat.st_dev,
            ino: stat.st_ino,
            mtime: (stat.st_mtime, stat.st_mtime_nsec as i64),
            ctime: (stat.st_ctime, stat.st_ctime_nsec as i64),
        }
    }

    /// True when both change times were at least [`SETTLE`] old at `now`: a change after
    /// `now` then gets a later time than these, so it cannot go unseen.
    fn settled_at(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let newest = self.mtime.max(self.ctime);
        let Ok(secs) = u64::try_from(newest.0) else {
            return false;
        };
        let nanos = u32::try_from(newest.1).unwrap_or(0);
        now.checked_sub(Duration::new(secs, nanos))
            .is_some_and(|age| age >= SETTLE)
    }
}

/// A kept directory's stamp, trusted across scrapes only when it was settled when taken.
#[derive(Debug, Clone, Copy)]
struct Kept {
    stamp: Stamp,
    settled: bool,
}

impl Kept {
    fn take(fd: &OwnedFd) -> std::io::Result<Kept> {
        let stamp = Stamp::of(&rustix::fs::fstat(fd)?);
        Ok(Kept {
            stamp,
            settled: stamp.settled_at(SystemTime::now()),
        })
    }

    /// True when `now` (a fresh stat of the same path or descriptor) shows nothing changed.
    fn still(&self, now: &Stat) -> bool {
        self.settled && Stamp::of(now) == self.stamp
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// True for the errors a kept descriptor gives once its file is gone.
fn is_gone(e: &rustix::io::Errno) -> bool {
    *e == rustix::io::Errno::NODEV || *e == rustix::io::Errno::NOENT
}

impl SysDir {
    /// Opens `path` for a plain walk (nothing is kept).
    pub fn open(path: &Path) -> std::io::Result<SysDir> {
        let fd = rustix::fs::open(path, DIR_FLAGS, Mode::empty())?;
        SysDir::new(fd, path.to_path_buf(), None)
    }

    fn new(fd: OwnedFd, path: PathBuf, tree: Option<Arc<TreeShared>>) -> std::io::Result<SysDir> {
        let (tree, stamp, charge) = match tree {
            Some(tree) => match tree.budget.charge() {
                Some(charge) => (Some(tree), Some(Kept::take(&fd)?), Some(charge)),
                // No descriptor to spare: this directory and what is below it are not kept.
                None => (None, None, None),
            },
            None => (None, None, None),
        };
        Ok(SysDir(Arc::new(DirNode {
            path,
            tree,
            stamp,
            _charge: charge,
            state: Mutex::new(DirState {
                dir: Dir::new(fd)?,
                listing: None,
                numbered: None,
                subdirs: FxHashMap::default(),
                files: FxHashMap::default(),
                listed_files: Vec::new(),
                absent: Vec::new(),
            }),
        })))
    }

    pub fn path(&self) -> &Path {
        &self.0.path
    }

    pub(crate) fn path_of(&self, name: &str) -> PathBuf {
        self.0.path.join(name)
    }

    /// Calls `f` with the directory's descriptor.
    pub(crate) fn with_fd<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> std::io::Result<R> {
        let state = lock(&self.0.state);
        Ok(f(state.dir.fd()?))
    }

    /// Opens subdirectory `name` as the root of a cached tree sharing `tree`.
    pub(crate) fn open_cached(&self, name: &str, tree: Arc<TreeShared>) -> std::io::Result<SysDir> {
        let fd = self.with_fd(|fd| rustix::fs::openat(fd, name, DIR_FLAGS, Mode::empty()))??;
        SysDir::new(fd, self.path_of(name), Some(tree))
    }

    /// True when `name` below `parent` is still this directory, unchanged and settled: what a
    /// kept tree's root is checked with, through the class directory's entry.
    pub(crate) fn is_entry_of(&self, parent: &SysDir, name: &str) -> bool {
        let Some(kept) = self.0.stamp else {
            return false;
        };
        kept.settled
            && parent
                .with_fd(|fd| rustix::fs::statat(fd, name, rustix::fs::AtFlags::empty()))
                .ok()
                .and_then(Result::ok)
                .is_some_and(|stat| kept.still(&stat))
    }

    /// True when this kept directory still has the identity and times it was opened with.
    fn is_unchanged(&self) -> bool {
        let Some(kept) = self.0.stamp else {
            return false;
        };
        kept.settled
            && self
                .with_fd(|fd| rustix::fs::fstat(fd))
                .ok()
                .and_then(Result::ok)
                .is_some_and(|stat| kept.still(&stat))
    }

    /// True when a lookup of `name` that failed with `e` found no entry at all, as opposed to
    /// a dangling symlink or another error. A settled kept directory remembers the answer.
    pub(crate) fn is_absent(&self, name: &str, e: &std::io::Error) -> bool {
        if e.kind() != ErrorKind::NotFound {
            return false;
        }
        let mut state = lock(&self.0.state);
        if state.known_absent(name) {
            return true;
        }
        let Ok(fd) = state.dir.fd() else {
            return true;
        };
        let absent = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).is_err();
        if absent && self.0.stamp.is_some_and(|kept| kept.settled) {
            state.absent.push(name.to_string());
        }
        absent
    }

    /// What a cached tree shares; `None` in a plain walk.
    pub fn tree(&self) -> Option<&Arc<TreeShared>> {
        self.0.tree.as_ref()
    }

    /// Whether a cached tree is stale (a kept descriptor's file is gone).
    pub(crate) fn is_stale(&self) -> bool {
        self.0.tree.as_ref().is_some_and(|t| t.is_stale())
    }

    pub(crate) fn subdir(&self, name: &str) -> std::io::Result<SysDir> {
        let mut state = lock(&self.0.state);
        if state.known_absent(name) {
            return Err(ErrorKind::NotFound.into());
        }
        if let Some(kept) = state.subdirs.get(name) {
            if kept.is_unchanged() {
                return Ok(kept.clone());
            }
            state.subdirs.remove(name);
        }
        let fd = rustix::fs::openat(state.dir.fd()?, name, DIR_FLAGS, Mode::empty())?;
        let child = SysDir::new(fd, self.path_of(name), self.0.tree.clone())?;
        if child.0.tree.is_some() {
            state.subdirs.insert(name.to_string(), child.clone());
        }
        Ok(child)
    }

    /// Entry names, sorted so that output order does not depend on the filesystem. A cached
    /// directory lists once (it is re-opened when its entries change).
    pub fn entries(&self) -> std::io::Result<Names> {
        let mut state = lock(&self.0.state);
        if let Some(listing) = &state.listing {
            return Ok(listing.clone());
        }
        let names: Names = list(&mut state.dir)?
            .into_iter()
            .map(String::into_boxed_str)
            .collect();
        if self.0.tree.is_some() {
            state.listing = Some(names.clone());
        }
        Ok(names)
    }

    /// The entries named by a number (`ports/1`, `gid_attrs/ndevs/0`) in numeric order, with
    /// the listing they index. A cached directory sorts once: a RoCE port's GID table lists
    /// every slot of the hardware's table (1 024 on rxe), used or not.
    pub(crate) fn numbered_entries(&self) -> std::io::Result<(Names, Numbered)> {
        let names = self.entries()?;
        let mut state = lock(&self.0.state);
        // Only the kept listing has a kept order: a fresh one may differ from the last.
        if let (Some(listing), Some(numbered)) = (&state.listing, &state.numbered) {
            if Arc::ptr_eq(listing, &names) {
                return Ok((names, numbered.clone()));
            }
        }
        let mut numbered: Vec<(u32, usize)> = names
            .iter()
            .enumerate()
            .filter_map(|(place, name)| Some((canonical_number(name)?, place)))
            .collect();
        numbered.sort_unstable();
        let numbered: Numbered = numbered.into();
        if state.listing.is_some() {
            state.numbered = Some(numbered.clone());
        }
        Ok((names, numbered))
    }

    /// Entry names, listed now even in a cached tree: for directories whose entries change
    /// without the device changing (a PCI function's `net/`, where netdevs come and go).
    pub(crate) fn entries_now(&self) -> std::io::Result<Vec<String>> {
        list(&mut lock(&self.0.state).dir)
    }

    /// Reads an attribute with one `read(2)` of at most a page: one read avoids spinning on
    /// drivers that return EAGAIN forever. Returns the byte count read into `buf`.
    pub fn read(&self, name: &str, buf: &mut AttrBuf) -> std::io::Result<usize> {
        self.read_kept(Key::Name(name), buf, false)
    }

    /// As [`SysDir::read`], for entry `index` of this directory's [`SysDir::entries`] (which
    /// is `name`): a kept descriptor is found by position.
    pub(crate) fn read_listed(
        &self,
        index: usize,
        name: &str,
        buf: &mut AttrBuf,
    ) -> std::io::Result<usize> {
        self.read_kept(Key::Listed(index, name), buf, false)
    }

    /// As [`SysDir::read`], for an attribute that is fixed for the device object's lifetime
    /// (a cached tree keeps its bytes).
    pub(crate) fn read_static(&self, name: &str, buf: &mut AttrBuf) -> std::io::Result<usize> {
        self.read_kept(Key::Name(name), buf, true)
    }

    fn read_kept(&self, key: Key<'_>, buf: &mut AttrBuf, fixed: bool) -> std::io::Result<usize> {
        let mut state = lock(&self.0.state);
        match state.kept(key) {
            Some(KeptFile::Bytes(bytes)) => {
                buf[..bytes.len()].copy_from_slice(bytes);
                return Ok(bytes.len());
            }
            Some(KeptFile::Open { fd, .. }) => match rustix::io::pread(fd, &mut buf[..], 0) {
                Ok(n) => return Ok(n),
                Err(e) => {
                    state.forget(key);
                    if is_gone(&e) {
                        if let Some(tree) = &self.0.tree {
                            tree.mark_stale();
                        }
                    }
                    return Err(e.into());
                }
            },
            None if state.known_absent(key.name()) => return Err(ErrorKind::NotFound.into()),
            None => {}
        }
        let fd = rustix::fs::openat(state.dir.fd()?, key.name(), FILE_FLAGS, Mode::empty())?;
        let n = rustix::io::read(&fd, &mut buf[..])?;
        if let Some(tree) = &self.0.tree {
            if fixed {
                state.keep(key, KeptFile::Bytes(buf[..n].to_vec()));
            } else if is_regular(&fd) {
                // Only regular files: `pread` on a FIFO or a device node would fail where
                // a plain read does not.
                if let Some(charge) = tree.budget.charge() {
                    let kept = KeptFile::Open {
                        fd,
                        _charge: charge,
                    };
                    state.keep(key, kept);
                }
            }
        }
        Ok(n)
    }
}

fn is_regular(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::RegularFile)
}

/// `name` as a number when it is one written the kernel's way: decimal digits, no sign and no
/// leading zero (`ports/1`, never `ports/01`).
fn canonical_number(name: &str) -> Option<u32> {
    let digits = name.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = name.len() > 1 && name.starts_with('0');
    if !digits || leading_zero {
        return None;
    }
    name.parse().ok()
}

fn list(dir: &mut Dir) -> std::io::Result<Vec<String>> {
    dir.rewind();
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Ok(name) = std::str::from_utf8(name) {
            names.push(name.to_string());
        }
    }
    names.sort_unstable();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tree_cache::FdBudget;
    use std::process::Command;

    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// On the real sysfs of this kernel: a kept descriptor gives the current value at every
    /// read, and once its kernel object is gone it fails with ENODEV, which marks the tree
    /// stale. Uses a veth pair's statistics (needs root and `ip`; returns early without them).
    #[test]
    fn a_kept_sysfs_descriptor_reads_anew_and_fails_once_its_object_is_gone() {
        let name = format!("rfk{:05}", std::process::id() % 100_000);
        let peer = format!("{name}p");
        if !ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]) {
            eprintln!("skipped: cannot create a veth pair (not root, or no ip)");
            return;
        }
        struct Link(String);
        impl Drop for Link {
            fn drop(&mut self) {
                ip(&["link", "del", &self.0]);
            }
        }
        let link = Link(name.clone());
        let tree = TreeShared::new(FdBudget::new(10));
        let net = SysDir::open(Path::new("/sys/class/net")).unwrap();
        let device = net.open_cached(&name, tree.clone()).unwrap();
        let mut buf = [0u8; 4096];
        let read = |buf: &mut AttrBuf| {
            let n = device.read("mtu", buf)?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf[..n]).trim().to_string())
        };
        assert_eq!(read(&mut buf).unwrap(), "1500");
        // Kept (the directory and the file): the next read is a `pread` of that descriptor.
        assert_eq!(tree.budget.left(), 10 - 2);
        assert!(ip(&["link", "set", &name, "mtu", "1400"]));
        assert_eq!(
            read(&mut buf).unwrap(),
            "1400",
            "show() runs again at offset 0"
        );
        assert_eq!(tree.budget.left(), 10 - 2, "still the same descriptor");
        drop(link);
        let err = read(&mut buf).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENODEV), "{err}");
        assert!(tree.is_stale());
    }

    #[test]
    fn numbered_entries_are_in_numeric_order_and_a_kept_directory_sorts_once() {
        let root = tempfile::tempdir().unwrap();
        let ndevs = root.path().join("ndevs");
        std::fs::create_dir(&ndevs).unwrap();
        // Not numbers the kernel writes: a sign, a leading zero, a name.
        for name in ["10", "2", "0", "1", "100", "+3", "04", "types"] {
            std::fs::write(ndevs.join(name), name).unwrap();
        }
        let numbers = |dir: &SysDir| {
            let (names, numbered) = dir.numbered_entries().unwrap();
            let pairs: Vec<(u32, String)> = numbered
                .iter()
                .map(|&(number, place)| (number, names[place].to_string()))
                .collect();
            (pairs, numbered)
        };
        let expected: Vec<(u32, String)> = [0, 1, 2, 10, 100]
            .into_iter()
            .map(|n| (n, n.to_string()))
            .collect();

        let plain = SysDir::open(&ndevs).unwrap();
        assert_eq!(numbers(&plain).0, expected);

        let parent = SysDir::open(root.path()).unwrap();
        let kept = parent
            .open_cached("ndevs", TreeShared::new(FdBudget::new(10)))
            .unwrap();
        let (first, first_order) = numbers(&kept);
        assert_eq!(first, expected);
        let (_, again) = numbers(&kept);
        assert!(Arc::ptr_eq(&first_order, &again), "sorted once while kept");
    }
}
