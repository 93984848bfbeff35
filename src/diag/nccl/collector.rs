//! `serve`'s optional NCCL collector. A background thread scans a directory of NCCL debug logs
//! (NCCL_DEBUG_FILE, one file per process) every `scan_interval`; a scrape serves the last
//! finished scan and never touches the filesystem, so that a slow or hung shared filesystem
//! (NFS, Lustre) costs stale NCCL series, never a scrape.
//!
//! Bounded per scan: the newest `max_files` files changed within `max_age`, the last
//! `max_bytes_per_file` of each, at most `max_processes` processes, and `scan_timeout` of time
//! after which no further file is read (the scan is then partial). One thread scans: a scan
//! stuck in a read delays the next one, scans never pile up.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::process::LogParser;
use super::verdict::{summarize, ProcessSummary, Transport};
use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Kind, Value};

#[derive(Debug, Clone)]
pub struct NcclLogLimits {
    pub max_files: usize,
    pub max_bytes_per_file: u64,
    pub max_age: Duration,
    /// Processes (host, pid) kept per scan; later ones are counted, not exported.
    pub max_processes: usize,
    /// Time between the starts of two scans.
    pub scan_interval: Duration,
    /// Time after which a scan reads no further file.
    pub scan_timeout: Duration,
}

impl Default for NcclLogLimits {
    fn default() -> Self {
        NcclLogLimits {
            max_files: 256,
            // Init lines come first, but a long job's file is mostly later output: the tail of a
            // rotated or appended file still holds the last communicator's setup.
            max_bytes_per_file: 4 << 20,
            max_age: Duration::from_secs(24 * 3600),
            max_processes: 1024,
            scan_interval: Duration::from_secs(30),
            scan_timeout: Duration::from_secs(10),
        }
    }
}

/// Where the logs come from: the directory, or a stand-in that blocks (tests).
pub trait LogSource: Send + Sync + std::fmt::Debug {
    /// The files to read, newest first, within `limits`. Listing stops at `deadline`: the files
    /// found by then are returned.
    fn recent_files(&self, limits: &NcclLogLimits, deadline: Instant) -> io::Result<Vec<PathBuf>>;

    /// At most the last `max_bytes` of a file. Past `deadline`, an error of kind `TimedOut`.
    fn read_tail(&self, path: &Path, max_bytes: u64, deadline: Instant) -> io::Result<Vec<u8>>;
}

/// The log directory itself.
#[derive(Debug, Clone)]
pub struct LogDir(pub PathBuf);

/// Bytes read between two looks at the deadline.
const READ_CHUNK: u64 = 256 << 10;

impl LogSource for LogDir {
    fn recent_files(&self, limits: &NcclLogLimits, deadline: Instant) -> io::Result<Vec<PathBuf>> {
        let now = SystemTime::now();
        // The newest `max_files`, kept in a heap whose top is the oldest kept: a directory of a
        // million files costs `max_files` entries of memory.
        let mut newest: BinaryHeap<Reverse<(SystemTime, Reverse<PathBuf>)>> = BinaryHeap::new();
        for entry in std::fs::read_dir(&self.0)? {
            if Instant::now() >= deadline {
                break;
            }
            let Ok(entry) = entry else { continue };
            // Follows links, as the reader does; a FIFO or device is not a file and is skipped.
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            let Ok(modified) = meta.modified() else {
                continue;
            };
            let age = now.duration_since(modified).unwrap_or_default();
            if !meta.is_file() || age > limits.max_age {
                continue;
            }
            newest.push(Reverse((modified, Reverse(entry.path()))));
            if newest.len() > limits.max_files {
                newest.pop();
            }
        }
        // Newest first (ties by name), so that the caps drop old jobs.
        let mut files: Vec<(SystemTime, PathBuf)> = newest
            .into_iter()
            .map(|Reverse((modified, Reverse(path)))| (modified, path))
            .collect();
        files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        Ok(files.into_iter().map(|(_, path)| path).collect())
    }

    fn read_tail(&self, path: &Path, max_bytes: u64, deadline: Instant) -> io::Result<Vec<u8>> {
        // Opened without blocking and refused unless a regular file (a FIFO put in its place).
        let mut file = crate::bounded_read::open_regular(path)?;
        let len = file.metadata()?.len();
        if len > max_bytes {
            file.seek(SeekFrom::Start(len - max_bytes))?;
        }
        let mut bytes = Vec::new();
        let mut file = file.take(max_bytes);
        loop {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the scan's time is up",
                ));
            }
            let read = (&mut file).take(READ_CHUNK).read_to_end(&mut bytes)?;
            if read == 0 {
                return Ok(bytes);
            }
        }
    }
}

/// What one scan of the directory found.
#[derive(Debug, Clone)]
pub struct DirScan {
    /// False when the directory could not be listed.
    pub listed: bool,
    /// True when the scan's time ran out before every file was read.
    pub partial: bool,
    pub files_read: usize,
    pub processes: Vec<ProcessSummary>,
    /// Processes left out because `max_processes` were already kept.
    pub processes_dropped: u64,
    pub duration: Duration,
    pub finished: Instant,
}

impl DirScan {
    /// Nothing found yet: the families are written empty, with their zero totals.
    fn empty() -> DirScan {
        DirScan {
            listed: true,
            partial: false,
            files_read: 0,
            processes: Vec::new(),
            processes_dropped: 0,
            duration: Duration::ZERO,
            finished: Instant::now(),
        }
    }
}

/// One scan: lists the recent files, reads their tails newest first until `scan_timeout`, and
/// keeps at most `max_processes` processes.
pub fn scan(source: &dyn LogSource, limits: &NcclLogLimits) -> DirScan {
    let started = Instant::now();
    // A timeout too large to add is no timeout.
    let deadline = started
        .checked_add(limits.scan_timeout)
        .unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 24 * 3600));
    let mut parser = LogParser::with_max_processes(limits.max_processes);
    let mut files_read = 0;
    let mut partial = false;
    let listed = match source.recent_files(limits, deadline) {
        Ok(files) => {
            for path in &files {
                if Instant::now() >= deadline {
                    partial = true;
                    break;
                }
                match source.read_tail(path, limits.max_bytes_per_file, deadline) {
                    Ok(bytes) => {
                        parser.feed(&path.display().to_string(), &bytes);
                        files_read += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                        partial = true;
                        break;
                    }
                    // A file removed, replaced or unreadable since listing is skipped.
                    Err(e) => tracing::debug!("nccl log {}: {e}", path.display()),
                }
            }
            // Listing itself may have stopped at the deadline.
            partial |= Instant::now() >= deadline;
            true
        }
        Err(e) => {
            tracing::debug!("nccl log dir: {e}");
            false
        }
    };
    let processes_dropped = parser.processes_dropped();
    let processes = parser.finish().iter().map(summarize).collect();
    DirScan {
        listed,
        partial,
        files_read,
        processes,
        processes_dropped,
        duration: started.elapsed(),
        finished: Instant::now(),
    }
}

/// The collector: the last finished scan, and the thread that makes them.
#[derive(Debug)]
pub struct NcclCollector {
    shared: Arc<Shared>,
    /// Dropped with the collector: the scan thread then ends at its next wake-up.
    _stop: mpsc::Sender<()>,
}

#[derive(Debug)]
struct Shared {
    limits: NcclLogLimits,
    spawned: Instant,
    last: Mutex<Option<Arc<DirScan>>>,
}

impl NcclCollector {
    /// Starts the scan thread on `source`; the first scan starts at once.
    pub fn spawn(source: Arc<dyn LogSource>, limits: NcclLogLimits) -> io::Result<NcclCollector> {
        let shared = Arc::new(Shared {
            limits,
            spawned: Instant::now(),
            last: Mutex::new(None),
        });
        let (stop, stopped) = mpsc::channel();
        let thread_shared = shared.clone();
        // Detached: a thread stuck in a read of a hung filesystem does not keep the process
        // from exiting when `main` returns.
        std::thread::Builder::new()
            .name("nccl-log-scan".into())
            .spawn(move || run(&thread_shared, source.as_ref(), &stopped))?;
        Ok(NcclCollector {
            shared,
            _stop: stop,
        })
    }

    /// The last finished scan, if any.
    pub fn last_scan(&self) -> Option<Arc<DirScan>> {
        self.shared
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How old the served result may grow before it counts as stale: two intervals and a
    /// scan's own timeout.
    pub fn stale_after(&self) -> Duration {
        let limits = &self.shared.limits;
        limits
            .scan_interval
            .saturating_mul(2)
            .saturating_add(limits.scan_timeout)
    }
}

fn run(shared: &Shared, source: &dyn LogSource, stopped: &mpsc::Receiver<()>) {
    let interval = shared.limits.scan_interval;
    loop {
        let started = Instant::now();
        let scan = scan(source, &shared.limits);
        if !scan.listed {
            tracing::warn!("the NCCL log directory could not be listed");
        } else if scan.partial {
            tracing::warn!(
                files_read = scan.files_read,
                timeout = ?shared.limits.scan_timeout,
                "the NCCL log scan ran out of time; the files read are served"
            );
        }
        *shared.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(scan));
        // The next start on the interval's grid: a scan longer than the interval skips the
        // missed starts rather than running back to back.
        let elapsed = started.elapsed();
        let periods = elapsed.as_nanos() / interval.as_nanos().max(1) + 1;
        let next = interval
            .checked_mul(u32::try_from(periods).unwrap_or(u32::MAX))
            .unwrap_or(Duration::MAX);
        match stopped.recv_timeout(next.saturating_sub(started.elapsed())) {
            Err(RecvTimeoutError::Timeout) => {}
            // The collector is gone (or sent a stop).
            _ => return,
        }
    }
}

/// Adds the NCCL families of one scan.
pub fn add_metrics<'a>(families: &mut Families<'a>, scan: &'a DirScan) {
    let mut fallbacks = 0u64;
    for p in &scan.processes {
        let pid: Cow<'a, str> = Cow::Owned(p.pid.to_string());
        let added = families.add(
            "rdma_nccl_process_info",
            Kind::Info,
            "A process found in the NCCL debug logs: the network NCCL chose (empty: none), link layer of its HCAs, GPUDirect RDMA state.",
            vec![
                ("host", Cow::Borrowed(p.host.as_str())),
                ("pid", pid.clone()),
                ("network", Cow::Borrowed(p.network.as_str())),
                ("link_layer", Cow::Borrowed(p.link_layer.as_str())),
                ("gdr", Cow::Borrowed(p.gdr.as_label())),
            ],
            Value::U64(1),
        );
        debug_assert!(added.is_ok(), "{added:?}");
        let socket = p.transport == Transport::Socket;
        fallbacks += u64::from(socket);
        families.gauge(
            "rdma_nccl_socket_fallback",
            "1 if the process's NCCL uses TCP sockets instead of IB/RoCE.",
            vec![("host", Cow::Borrowed(p.host.as_str())), ("pid", pid)],
            Value::U64(u64::from(socket)),
        );
    }
    families.gauge(
        "rdma_nccl_socket_fallback_processes",
        "Processes in the NCCL debug logs whose NCCL uses TCP sockets.",
        Vec::new(),
        Value::U64(fallbacks),
    );
    families.gauge(
        "rdma_nccl_processes_dropped",
        "Processes in the last scan of the NCCL debug logs left out because nccl.max_processes were already exported (newest files first).",
        Vec::new(),
        Value::U64(scan.processes_dropped),
    );
    families.gauge(
        "rdma_nccl_scan_partial",
        "1 if the last scan of the NCCL debug logs reached nccl.scan_timeout before reading every file within the limits; the files read are served.",
        Vec::new(),
        Value::U64(u64::from(scan.partial)),
    );
}

/// Success and duration are those of the last finished scan: it failed when the directory could
/// not be listed, or when it is stale (a scan hung in a read of a sick filesystem).
impl Collector for NcclCollector {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn collect(&self, out: &mut Output<'_, '_>) -> Result<Outcome, std::fmt::Error> {
        let last = self.last_scan();
        let empty;
        let scan = match &last {
            Some(scan) => scan.as_ref(),
            None => {
                empty = DirScan::empty();
                &empty
            }
        };
        let mut families = Families::default();
        add_metrics(&mut families, scan);
        out.encode(&families)?;
        let since = match &last {
            Some(scan) => scan.finished.elapsed(),
            None => self.shared.spawned.elapsed(),
        };
        let fresh = since <= self.stale_after();
        Ok(Outcome {
            ok: fresh && scan.listed,
            duration: last.map(|scan| scan.duration),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::{Collectors, Scrape, Selection};
    use std::sync::Condvar;

    /// A source whose files are given in memory, newest first; a read of the file `block` names
    /// waits until `release`, as a read of a hung NFS server would.
    #[derive(Debug, Default)]
    struct Scripted {
        files: Mutex<Vec<(PathBuf, Vec<u8>)>>,
        blocked: Mutex<Option<PathBuf>>,
        released: Condvar,
        waiting: Mutex<bool>,
        reads: Mutex<usize>,
    }

    impl Scripted {
        fn add(&self, name: &str, text: &str) {
            let mut files = self.files.lock().unwrap();
            files.insert(0, (PathBuf::from(name), text.as_bytes().to_vec()));
        }

        fn block(&self, name: &str) {
            *self.blocked.lock().unwrap() = Some(PathBuf::from(name));
        }

        fn release(&self) {
            *self.blocked.lock().unwrap() = None;
            self.released.notify_all();
        }
    }

    impl LogSource for Scripted {
        fn recent_files(&self, _: &NcclLogLimits, _: Instant) -> io::Result<Vec<PathBuf>> {
            let files = self.files.lock().unwrap();
            Ok(files.iter().map(|(p, _)| p.clone()).collect())
        }

        fn read_tail(&self, path: &Path, _: u64, _: Instant) -> io::Result<Vec<u8>> {
            let mut blocked = self.blocked.lock().unwrap();
            while blocked.as_deref() == Some(path) {
                *self.waiting.lock().unwrap() = true;
                blocked = self.released.wait(blocked).unwrap();
            }
            drop(blocked);
            *self.waiting.lock().unwrap() = false;
            *self.reads.lock().unwrap() += 1;
            let files = self.files.lock().unwrap();
            let (_, bytes) = files.iter().find(|(p, _)| p == path).unwrap();
            Ok(bytes.clone())
        }
    }

    fn limits(interval_ms: u64, timeout_ms: u64) -> NcclLogLimits {
        NcclLogLimits {
            scan_interval: Duration::from_millis(interval_ms),
            scan_timeout: Duration::from_millis(timeout_ms),
            ..NcclLogLimits::default()
        }
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One scrape of the collector through the framework: (body, collector success).
    fn scrape(collector: &Arc<NcclCollector>) -> (String, bool) {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Scrape {
            collectors: Arc::new(Collectors::new(vec![collector.clone()])),
            selection: Selection::All,
            self_metrics: true,
        }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let ok = text.contains(r#"rdma_exporter_collector_success{collector="nccl"} 1"#);
        (text, ok)
    }

    const IB: &str = "h1:10:10 [0] NCCL INFO Using network IB\n";
    const SOCKET: &str = "h2:20:20 [0] NCCL INFO Using network Socket\n";

    /// Starts a collector on `source` and waits for its first scan.
    fn started(source: &Arc<Scripted>, limits: NcclLogLimits) -> Arc<NcclCollector> {
        let collector = Arc::new(NcclCollector::spawn(source.clone(), limits).unwrap());
        wait_for("the first scan", || collector.last_scan().is_some());
        collector
    }

    #[test]
    fn a_scrape_serves_the_last_scan_while_the_next_one_is_blocked() {
        let source = Arc::new(Scripted::default());
        source.add("a.log", IB);
        // A long timeout: the blocked scan does not make the result stale during the test.
        let collector = started(&source, limits(20, 60_000));
        let first = collector.last_scan().unwrap().finished;
        source.block("b.log");
        source.add("b.log", SOCKET);
        wait_for("the scan to block", || *source.waiting.lock().unwrap());
        for _ in 0..3 {
            let asked = Instant::now();
            let (body, ok) = scrape(&collector);
            assert!(asked.elapsed() < Duration::from_secs(5));
            assert!(
                body.contains(r#"rdma_nccl_socket_fallback{host="h1",pid="10"} 0"#),
                "{body}"
            );
            assert!(!body.contains("h2"), "{body}");
            assert!(ok, "{body}");
            assert!(
                body.contains(r#"rdma_exporter_collector_duration_seconds{collector="nccl"}"#),
                "{body}"
            );
        }
        assert_eq!(collector.last_scan().unwrap().finished, first);
        // One scan thread: while it hangs, no other scan reads anything.
        let reads = *source.reads.lock().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(*source.reads.lock().unwrap(), reads, "a second scan ran");
        source.release();
        wait_for("a scan after the release", || {
            collector.last_scan().unwrap().finished != first
        });
        let (body, ok) = scrape(&collector);
        assert!(ok, "{body}");
        assert!(
            body.contains(r#"rdma_nccl_socket_fallback{host="h2",pid="20"} 1"#),
            "{body}"
        );
    }

    #[test]
    fn a_hung_scan_makes_the_served_result_stale() {
        let source = Arc::new(Scripted::default());
        source.add("a.log", IB);
        let collector = started(&source, limits(20, 50));
        source.block("b.log");
        source.add("b.log", SOCKET);
        wait_for("the scan to block", || *source.waiting.lock().unwrap());
        std::thread::sleep(collector.stale_after() + Duration::from_millis(50));
        let (body, ok) = scrape(&collector);
        // Still served, but the collector says it failed.
        assert!(!ok, "{body}");
        assert!(body.contains(r#"host="h1""#), "{body}");
        source.release();
        wait_for("a fresh scan", || scrape(&collector).1);
    }

    #[test]
    fn the_timeout_stops_reading_and_keeps_what_was_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.log"), IB).unwrap();
        let source = LogDir(dir.path().to_path_buf());
        let full = scan(&source, &limits(1000, 10_000));
        assert!(full.listed && !full.partial, "{full:?}");
        assert_eq!((full.files_read, full.processes.len()), (1, 1));
        // A timeout already passed: nothing read, the scan says it is partial.
        let cut = scan(&source, &limits(1000, 0));
        assert!(cut.listed && cut.partial, "{cut:?}");
        assert_eq!(cut.files_read, 0);
        let missing = scan(&LogDir(dir.path().join("nope")), &limits(1000, 1000));
        assert!(!missing.listed);
    }

    #[test]
    fn listing_keeps_the_newest_files_and_skips_what_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        for (i, name) in ["old.log", "mid.log", "new.log"].iter().enumerate() {
            let path = dir.path().join(name);
            std::fs::write(&path, IB).unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(now - Duration::from_secs(100 * (3 - i as u64)))
                .unwrap();
        }
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let fifo = std::ffi::CString::new(dir.path().join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let source = LogDir(dir.path().to_path_buf());
        let far = Instant::now() + Duration::from_secs(60);
        let limits = NcclLogLimits {
            max_files: 2,
            ..NcclLogLimits::default()
        };
        let files = source.recent_files(&limits, far).unwrap();
        let names: Vec<_> = files.iter().map(|p| p.file_name().unwrap()).collect();
        assert_eq!(names, ["new.log", "mid.log"]);
        // Read through the deadline-aware reader, tail bound exact.
        assert_eq!(source.read_tail(&files[0], 5, far).unwrap(), b"k IB\n");
        // A FIFO is refused without blocking.
        assert!(source.read_tail(&dir.path().join("fifo"), 5, far).is_err());
        let past = Instant::now();
        let err = source.read_tail(&files[0], 5, past).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn processes_beyond_the_cap_are_counted_not_exported() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..50)
            .map(|i| format!("host{i}:{i}:1 [0] NCCL INFO Using network IB\n"))
            .collect();
        std::fs::write(dir.path().join("many.log"), text).unwrap();
        let limits = NcclLogLimits {
            max_processes: 8,
            ..NcclLogLimits::default()
        };
        let result = scan(&LogDir(dir.path().to_path_buf()), &limits);
        assert_eq!((result.processes.len(), result.processes_dropped), (8, 42));
        let mut families = Families::default();
        add_metrics(&mut families, &result);
        assert_eq!(families.len(), 8 * 2 + 3);
    }
}
