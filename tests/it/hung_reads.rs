//! A device whose reads hang (issue 14, item 1): the scrape serves the other devices within the
//! device read timeout and reports the hung one as `reason="timeout"`; later scrapes add no
//! thread for it; it comes back once its read returns; SIGTERM still ends the process.
//!
//! The hang is real: the device's `hw_counters` directory is a symlink into a FUSE mount whose
//! server never answers, so the exporter's `openat` blocks in the kernel as a sysfs read does
//! behind a wedged firmware command (a FIFO would not do: the walk opens files non-blocking).
//! The mount lives in a mount namespace of the exporter's own, so nothing outlives the test;
//! closing the FUSE device releases the blocked read with ENOTCONN.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{
    copy_tree, fixture, get_with, matching, path_str, skip_or_fail, threads, timed_scrape,
    value_of, Exporter, Sample,
};

const HUNG: &str = "mlx5_3";
/// `node.device_read_timeout` in these tests. Scrapes after the first must not wait for it
/// (they take about 0.1 s, up to a second on a loaded machine): 3 s keeps a scrape that waited
/// for the deadline apart from a slow one.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// Scrapes taken while the device hangs.
const SCRAPES: usize = 20;

/// A FUSE mount whose server never answers: every lookup below it blocks until the FUSE device
/// is closed (on drop).
struct HungMount {
    fuse: File,
    dir: PathBuf,
}

impl HungMount {
    /// Opens `/dev/fuse`; the mount itself is made in the exporter's namespace (see `start`).
    fn new(dir: PathBuf) -> Result<HungMount, String> {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| format!("cannot open /dev/fuse: {e}"))?;
        Ok(HungMount { fuse, dir })
    }

    /// On the calling thread: a private mount namespace with the hung mount in it. Children
    /// started from this thread afterwards live in that namespace; the test's others do not.
    fn mount_here(&self) -> Result<(), String> {
        let os = |what: &str, rc: i32| match rc {
            0 => Ok(()),
            _ => Err(format!("{what}: {}", std::io::Error::last_os_error())),
        };
        let root = CString::new("/").unwrap();
        let target = CString::new(path_str(&self.dir)).unwrap();
        let fstype = CString::new("fuse").unwrap();
        let options = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            self.fuse.as_raw_fd()
        ))
        .unwrap();
        // SAFETY: plain system calls on valid C strings; unshare affects this thread only.
        unsafe {
            os("unshare(CLONE_NEWNS)", libc::unshare(libc::CLONE_NEWNS))?;
            // Private: the mount must not propagate back to the test's namespace.
            os(
                "making / private",
                libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
            )?;
            os(
                "mounting FUSE",
                libc::mount(
                    fstype.as_ptr(),
                    target.as_ptr(),
                    fstype.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr().cast(),
                ),
            )
        }
    }
}

/// What hangs.
#[derive(Clone, Copy)]
enum Hang {
    /// Device `HUNG`'s `hw_counters` directory.
    DeviceCounters,
    /// `class/infiniband` itself: the listing, which no device deadline covers.
    ClassDir,
}

/// A copy of the fixture node with one directory behind a hung mount.
struct HungNode {
    _dir: tempfile::TempDir,
    config: PathBuf,
    /// The real directory, moved aside until `restore`.
    aside: PathBuf,
    /// Where it was, now a symlink into the mount.
    hung: PathBuf,
    mount: Option<HungMount>,
}

impl HungNode {
    fn new(hang: Hang) -> Result<HungNode, String> {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        copy_tree(&fixture("cx7-roce/sys"), &sys);
        let hung = match hang {
            Hang::DeviceCounters => std::fs::canonicalize(sys.join("class/infiniband").join(HUNG))
                .unwrap()
                .join("hw_counters"),
            Hang::ClassDir => sys.join("class/infiniband"),
        };
        let aside = dir.path().join("aside");
        std::fs::rename(&hung, &aside).unwrap();
        let mount = HungMount::new(dir.path().join("hung"))?;
        std::os::unix::fs::symlink(mount.dir.join("x"), &hung).unwrap();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "node:\n  sysfs_path: {}\n  device_read_timeout: {}ms\n  ethtool: {{source: none}}\n",
                sys.display(),
                READ_TIMEOUT.as_millis()
            ),
        )
        .unwrap();
        Ok(HungNode {
            _dir: dir,
            config,
            aside,
            hung,
            mount: Some(mount),
        })
    }

    /// Starts the exporter in a mount namespace where the hung mount is mounted.
    fn start(&self) -> Result<Exporter, String> {
        let mount = self.mount.as_ref().expect("not released yet");
        let config = self.config.clone();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    mount.mount_here()?;
                    Ok(Exporter::start(&["--config.file", path_str(&config)]))
                })
                .join()
                .unwrap()
        })
    }

    /// Closes the FUSE device: the blocked read fails at once (ENOTCONN) and returns.
    fn release(&mut self) {
        self.mount = None;
    }

    /// Puts the real directory back.
    fn restore(&self) {
        std::fs::remove_file(&self.hung).unwrap();
        std::fs::rename(&self.aside, &self.hung).unwrap();
    }
}

/// A node with a hung device and its exporter; `None` (after `skip_or_fail`) where FUSE mounts
/// cannot be made (no /dev/fuse, no CAP_SYS_ADMIN).
fn hung_exporter(hang: Hang) -> Option<(HungNode, Exporter)> {
    let node = match HungNode::new(hang) {
        Ok(node) => node,
        Err(e) => {
            skip_or_fail(&format!("a hung FUSE mount is needed: {e}"));
            return None;
        }
    };
    match node.start() {
        Ok(exporter) => Some((node, exporter)),
        Err(e) => {
            skip_or_fail(&format!("a hung FUSE mount is needed: {e}"));
            None
        }
    }
}

fn devices_served(samples: &[Sample]) -> Vec<String> {
    let mut devices: Vec<String> = matching(samples, "rdma_port_state", &[])
        .map(|s| s.labels["device"].clone())
        .collect();
    devices.dedup();
    devices
}

fn timeouts(samples: &[Sample]) -> f64 {
    value_of(
        samples,
        "rdma_exporter_read_errors_total",
        &[("device", HUNG), ("reason", "timeout")],
    )
    .unwrap_or(0.0)
}

/// Reader threads of `pid` once those of healthy devices have exited (they end right after
/// sending their result, so they may still be seen for a moment).
fn settled_readers(pid: u32, expected: usize) -> (usize, usize) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let counts = threads(pid, "sysfs-read");
        if counts.0 <= expected || Instant::now() > until {
            return counts;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn median_and_max(mut latencies: Vec<Duration>) -> (Duration, Duration) {
    latencies.sort();
    (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    )
}

fn all_devices() -> Vec<String> {
    (0..10).map(|i| format!("mlx5_{i}")).collect()
}

#[test]
fn a_hung_device_is_cut_off_by_its_deadline_and_comes_back_when_its_read_returns() {
    let _exclusive = crate::common::exclusive(module_path!());
    let Some((mut node, exporter)) = hung_exporter(Hang::DeviceCounters) else {
        return;
    };
    let pid = exporter.pid();
    // The mount is in the exporter's namespace only: the test's own view has none.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(" - fuse "), "{mounts}");
    let healthy: Vec<String> = all_devices().into_iter().filter(|d| d != HUNG).collect();

    // The first scrape waits for the deadline, then serves the nine others.
    let (samples, first) = timed_scrape(&exporter);
    assert!(
        first >= READ_TIMEOUT && first < READ_TIMEOUT + Duration::from_secs(3),
        "first scrape took {first:?}"
    );
    assert_eq!(devices_served(&samples), healthy);
    assert_eq!(timeouts(&samples), 1.0);
    let (readers, threads_after_first) = settled_readers(pid, 1);
    assert_eq!(readers, 1, "one reader stuck on {HUNG}");

    // Later scrapes do not wait for it, nor start another reader.
    let mut latencies = Vec::new();
    let mut most_threads = 0;
    for n in 2..=SCRAPES + 1 {
        let (samples, took) = timed_scrape(&exporter);
        assert!(took < READ_TIMEOUT, "scrape {n} took {took:?}");
        assert_eq!(devices_served(&samples), healthy);
        assert_eq!(timeouts(&samples), n as f64, "one timeout per scrape");
        let (readers, all) = settled_readers(pid, 1);
        assert_eq!(readers, 1, "scrape {n}: reader threads");
        most_threads = most_threads.max(all);
        latencies.push(took);
    }
    // Two more than after the first scrape at most: the runtime's blocking pool may keep an
    // extra idle thread, and a reader started for a job an idle reader took first stays idle
    // in the pool; a reader per scrape would add one thread per scrape (20 here).
    assert!(
        most_threads <= threads_after_first + 2,
        "threads grew from {threads_after_first} to {most_threads} over {SCRAPES} scrapes"
    );
    let (status, _, body) = exporter.get("/healthz");
    assert_eq!(
        (status, body.as_str()),
        (200, "OK\n"),
        "a hung device is no reason to restart"
    );
    let (median, max) = median_and_max(latencies);
    eprintln!(
        "figures: while {HUNG} hangs: first scrape {first:?}; the {SCRAPES} next: median \
         {median:?}, max {max:?}; {readers} reader thread, {threads_after_first} threads after the \
         first scrape, at most {most_threads} after the next"
    );

    // Its read returns (with an error): the next scrape reads it again, in full.
    node.release();
    node.restore();
    let until = Instant::now() + Duration::from_secs(10);
    let samples = loop {
        let (samples, _) = timed_scrape(&exporter);
        if devices_served(&samples).len() == 10 {
            break samples;
        }
        assert!(Instant::now() < until, "{HUNG} did not come back");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(devices_served(&samples), all_devices());
    let counted = timeouts(&samples);
    let (samples, _) = timed_scrape(&exporter);
    assert_eq!(timeouts(&samples), counted, "no timeout once it reads");
    assert!(
        value_of(
            &samples,
            "rdma_device_hw_out_of_sequence_total",
            &[("device", HUNG)]
        )
        .is_some(),
        "{HUNG}'s device counters, read through the restored directory, are back"
    );
    assert_eq!(settled_readers(pid, 0).0, 0, "no reader left");
    let healthy: Vec<Duration> = (0..SCRAPES).map(|_| timed_scrape(&exporter).1).collect();
    let (median, max) = median_and_max(healthy);
    eprintln!("figures: all devices healthy: {SCRAPES} scrapes, median {median:?}, max {max:?}");
    drop(node);
    drop(exporter);
}

#[test]
fn sigterm_ends_the_exporter_while_a_read_hangs() {
    let _exclusive = crate::common::exclusive(module_path!());
    let Some((node, mut exporter)) = hung_exporter(Hang::DeviceCounters) else {
        return;
    };
    let (_, first) = timed_scrape(&exporter);
    assert!(first >= READ_TIMEOUT, "{first:?}");
    assert_eq!(threads(exporter.pid(), "sysfs-read").0, 1);
    let started = Instant::now();
    let status = exporter
        .terminate(Duration::from_secs(5))
        .expect("the exporter did not exit within 5 s of SIGTERM while a read hangs");
    eprintln!(
        "figures: exited {:?} after SIGTERM: {status}",
        started.elapsed()
    );
    assert!(status.success(), "{status}");
    drop(node);
}

#[test]
fn healthz_fails_when_the_walk_itself_is_wedged() {
    let _exclusive = crate::common::exclusive(module_path!());
    let Some((mut node, exporter)) = hung_exporter(Hang::ClassDir) else {
        return;
    };
    let (status, _, body) = get_with(
        &exporter.url("/metrics"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "2")],
    );
    assert_eq!(status, 503, "{body}");
    let (status, _, body) = exporter.get("/healthz");
    assert_eq!((status, body.as_str()), (200, "OK\n"), "not overdue yet");
    // Overdue 10 s after the device read timeout.
    let until = Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        let (status, _, body) = exporter.get("/healthz");
        if status != 200 || Instant::now() > until {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("node walk has been running"), "{body}");
    // The listing fails once the mount is gone: the walk ends and health returns.
    node.release();
    node.restore();
    let until = Instant::now() + Duration::from_secs(10);
    while exporter.get("/healthz").0 != 200 {
        assert!(
            Instant::now() < until,
            "/healthz stayed 503 after the walk ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A scrape that arrives while the wedged walk's scrape is still encoding its (failed)
    // result shares that result (scrape coalescing; health returns when the walk itself
    // ends): the devices are back by the next walk.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let served = devices_served(&timed_scrape(&exporter).0);
        if served == all_devices() {
            break;
        }
        assert!(Instant::now() < until, "devices not back: {served:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
