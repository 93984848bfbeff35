//! What one attribute read costs, by file system and by read pattern: this host's real sysfs
//! (kernfs) against the same bytes on tmpfs, the medium of the scrape bench's fixture node.
//!
//! The scrape bench compares our exporter with node_exporter on a fixture tree in `/dev/shm`,
//! because no RDMA device exists here. Its ratio holds for a real node only as far as a read
//! costs the same on both media. This bench reads every `/sys/class/net/*/statistics/*`
//! attribute (each read calls the driver's `ndo_get_stats64`, as a counter read calls the RDMA
//! driver) and a tmpfs copy of them, in two patterns:
//! - ours: a descriptor kept open between scrapes, read again with `pread` at offset 0;
//! - node_exporter's (`util.SysReadFile` in prometheus/procfs, as `strace` shows node_exporter
//!   1.5 reading its infiniband files): open by absolute path, the poller registration Go's
//!   `os.Open` attempts (refused for a regular file), one read of 128 bytes, close.
//!
//! The tmpfs copy has the same layout as sysfs (`class/net/<netdev>` a symbolic link into
//! `devices/`), so each path is resolved through as many components on both media.
//!
//! `cargo bench --bench sysfs_reads`. BENCH_RUNS=K alternated rounds (default 20) of
//! BENCH_READS=N reads of every file (default 500). Prints the CPU per read (this thread's
//! clock) of each pair, the median of the rounds, and the ratios; asserts nothing. Exits
//! non-zero when this host's sysfs shows no netdev statistics.

mod common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{ensure, Context};
use common::proc::env_number;
use common::stats::median;

const DEFAULT_RUNS: u64 = 20;
const DEFAULT_READS: u64 = 500;
/// An attribute is at most a page.
const PAGE: usize = 4096;

fn main() -> ExitCode {
    common::exit_code("sysfs_reads", run())
}

fn run() -> anyhow::Result<()> {
    let runs = env_number("BENCH_RUNS", DEFAULT_RUNS)?;
    let reads = env_number("BENCH_READS", DEFAULT_READS)?;
    let sysfs = statistics_files(Path::new("/sys/class/net"))?;
    ensure!(
        !sysfs.is_empty(),
        "no readable /sys/class/net/*/statistics/* attribute on this host"
    );
    let copy = tempfile::Builder::new()
        .prefix("rfe-sysfs-reads-")
        .tempdir_in("/dev/shm")
        .context("a directory on tmpfs (/dev/shm)")?;
    let tmpfs = sysfs
        .iter()
        .map(|path| mirror(path, copy.path()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    println!(
        "{} attributes (/sys/class/net/*/statistics/*) and a copy on tmpfs; {runs} rounds of \
         {reads} reads of each, alternated; CPU ns a read (this thread's clock), median of the \
         rounds\n",
        sysfs.len()
    );

    let media = [("sysfs (kernfs)", &sysfs), ("tmpfs copy", &tmpfs)];
    let mut samples = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let mut kept: Vec<Vec<File>> = Vec::new();
    for (_, files) in media {
        kept.push(files.iter().map(File::open).collect::<Result<_, _>>()?);
    }
    let poller = Poller::new()?;
    for _ in 0..runs {
        for (m, (_, files)) in media.iter().enumerate() {
            samples[m][0].push(per_read_ns(reads, files.len(), || read_kept(&kept[m]))?);
            samples[m][1].push(per_read_ns(reads, files.len(), || {
                read_open_close(files, &poller)
            })?);
        }
    }

    println!(
        "{:<16} {:>22} {:>26} {:>12}",
        "medium", "kept descriptor, ns", "open, read, close, ns", "open / kept"
    );
    let mut medians = [[0.0; 2]; 2];
    for (m, (name, _)) in media.iter().enumerate() {
        medians[m] = [median(&mut samples[m][0]), median(&mut samples[m][1])];
        let [kept, opened] = medians[m];
        println!(
            "{name:<16} {kept:>22.0} {opened:>26.0} {:>11.1}x",
            opened / kept
        );
    }
    println!(
        "\nsysfs / tmpfs: a kept read {:.1}x, an open-read-close {:.1}x. A fixture on tmpfs \
         makes each file that node_exporter opens {:.0} ns cheaper than on a real node, and \
         each file that we pread {:.0} ns cheaper.",
        medians[0][0] / medians[1][0],
        medians[0][1] / medians[1][1],
        medians[0][1] - medians[1][1],
        medians[0][0] - medians[1][0],
    );
    Ok(())
}

/// Copies the attribute at `path` (`/sys/class/net/<netdev>/statistics/<name>`) below `root` with
/// sysfs's layout: the file under the netdev's real directory in `devices/`, and
/// `class/net/<netdev>` a relative symbolic link to that directory, as on sysfs. Returns the
/// copy's path through the link.
fn mirror(path: &Path, root: &Path) -> anyhow::Result<PathBuf> {
    let statistics = path.parent().context("an attribute has a directory")?;
    let class_entry = statistics.parent().context("statistics has a netdev")?;
    let netdev = class_entry.file_name().context("a netdev has a name")?;
    let device_dir = std::fs::canonicalize(class_entry)?;
    let below = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let copied_dir = below(&device_dir).join("statistics");
    std::fs::create_dir_all(&copied_dir)?;
    let name = path.file_name().context("an attribute has a name")?;
    std::fs::write(copied_dir.join(name), std::fs::read(path)?)?;
    let class_net = below(Path::new("/sys/class/net"));
    std::fs::create_dir_all(&class_net)?;
    let link = class_net.join(netdev);
    if std::fs::symlink_metadata(&link).is_err() {
        // From sys/class/net/<netdev>: three levels up is the root of the copy.
        let target = Path::new("../../..").join(device_dir.strip_prefix("/")?);
        std::os::unix::fs::symlink(target, &link)?;
    }
    Ok(link.join("statistics").join(name))
}

/// Every readable regular file in `<class_net>/*/statistics/`, sorted.
fn statistics_files(class_net: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let netdevs =
        std::fs::read_dir(class_net).with_context(|| format!("listing {}", class_net.display()))?;
    for netdev in netdevs {
        let Ok(entries) = std::fs::read_dir(netdev?.path().join("statistics")) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_file() && std::fs::read(&path).is_ok() {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// This thread's CPU ns per file read over `reads` passes of `pass` (which reads `files` and
/// returns the bytes it got: every pass must get some, or it measured failures).
fn per_read_ns(
    reads: u64,
    files: usize,
    mut pass: impl FnMut() -> std::io::Result<usize>,
) -> anyhow::Result<f64> {
    let before = thread_cpu_ns();
    for _ in 0..reads {
        ensure!(pass()? > 0, "a pass over the attributes read nothing");
    }
    Ok((thread_cpu_ns() - before) as f64 / (reads as f64 * files as f64))
}

/// Our walk's read: `pread` at 0 on each kept descriptor. Returns the bytes read.
fn read_kept(files: &[File]) -> std::io::Result<usize> {
    let mut buf = [0u8; PAGE];
    let mut bytes = 0;
    for file in files {
        bytes += file.read_at(&mut buf, 0)?;
    }
    Ok(bytes)
}

/// procfs's `SysReadFile`: one read into a 128-byte buffer.
/// Returns the bytes read.
fn read_open_close(paths: &[PathBuf], poller: &Poller) -> std::io::Result<usize> {
    use std::io::Read;
    let mut buf = [0u8; 128];
    let mut bytes = 0;
    for path in paths {
        let mut file = File::open(path)?;
        poller.try_register(&file);
        bytes += file.read(&mut buf)?;
    }
    Ok(bytes)
}

/// An epoll instance: Go's `os.Open` offers every new descriptor to its poller, and the kernel
/// refuses a regular file (EPERM); the attempt is part of what each of node_exporter's reads
/// costs.
struct Poller(std::os::fd::OwnedFd);

impl Poller {
    fn new() -> std::io::Result<Poller> {
        // SAFETY: epoll_create1 takes no pointer; a non-negative result is a new descriptor.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(Poller(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    fn try_register(&self, file: &File) {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are open for the call and `event` outlives it. The result is
        // ignored on purpose: a regular file is refused, as it is for Go.
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                file.as_raw_fd(),
                &mut event,
            )
        };
    }
}

/// This thread's CPU time to the nanosecond. Not `common::proc::thread_cpu_ns`: `schedstat`
/// brings a running thread's own time up to date only at scheduler ticks, too coarse for a
/// round of a few milliseconds.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}
