//! `serve`'s optional NCCL collector. A background thread scans a directory of NCCL debug logs
//! (NCCL_DEBUG_FILE, one file per process) every `scan_interval`; a scrape serves the last
//! finished scan and never touches the filesystem, so that a slow or hung shared filesystem
//! (NFS, Lustre) costs stale NCCL series, never a scrape.
//!
//! Files are tailed ([`Tailer`]): a scan reads only what was appended since the previous one.
//! Bounded per scan: the newest `max_files` files changed within `max_age`, at most the last
//! `max_bytes_per_file` of each, at most `max_processes` processes (the others counted), and
//! `scan_timeout` of time after which no further file is read (the scan is then partial, the
//! next ones carry on). One thread scans: a scan stuck in a read delays the next one, scans
//! never pile up.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use super::process::{process_hash, LogParser, ProcessLog};
use super::verdict::{summarize, ProcessSummary, Transport};
use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Value};
use crate::periodic::Periodic;

/// The `nccl:` section of the config file: which logs the scan thread reads, and how often.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NcclConfig {
    /// Directory of NCCL_DEBUG_FILE outputs; the collector is off without it.
    pub log_dir: Option<PathBuf>,
    /// Files changed longer ago than this are skipped (finished jobs).
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub max_age: Duration,
    /// Files read per scan, newest first.
    pub max_files: usize,
    /// Bytes read from the end of each file.
    pub max_bytes_per_file: u64,
    /// Processes (host, pid) exported; later ones are counted in `rdma_nccl_processes_dropped`.
    pub max_processes: usize,
    /// Time between two background scans of `log_dir`; scrapes serve the last one.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub scan_interval: Duration,
    /// A scan reads no further file after this long (`rdma_nccl_scan_partial`).
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub scan_timeout: Duration,
    /// Export per-node counts (`rdma_nccl_processes`) instead of one series set per process:
    /// a busy node starts thousands of ranks a day.
    pub aggregate_only: bool,
}

impl Default for NcclConfig {
    fn default() -> Self {
        NcclConfig {
            log_dir: None,
            max_age: Duration::from_secs(24 * 3600),
            max_files: 256,
            // Init lines come first, but a long job's file is mostly later output: the tail of a
            // rotated or appended file still holds the last communicator's setup.
            max_bytes_per_file: 4 << 20,
            max_processes: 1024,
            scan_interval: Duration::from_secs(30),
            scan_timeout: Duration::from_secs(10),
            aggregate_only: false,
        }
    }
}

/// A file's identity: a file replaced under the same name (rotation) is another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// A log file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    pub path: PathBuf,
    pub id: FileId,
    pub len: u64,
    pub modified: SystemTime,
}

/// Bytes read from a file: `[start, start + bytes.len())` of the file as it was opened.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub id: FileId,
    /// The file's length when opened.
    pub len: u64,
    pub start: u64,
    /// True when the read carries on where `resume` said: same file, not truncated since.
    pub continued: bool,
    pub bytes: Vec<u8>,
}

/// Where the logs come from: the directory, or a stand-in that blocks (tests).
pub trait LogSource: Send + Sync + std::fmt::Debug {
    /// The files to read, newest first, within `limits`. Listing stops at `deadline`: the files
    /// found by then are returned.
    fn recent_files(&self, limits: &NcclConfig, deadline: Instant) -> io::Result<Vec<LogFile>>;

    /// Reads a file to its end: from `resume`'s offset when it is still the same file and no
    /// shorter, else from its start; in both cases at most its last `max_bytes`. Past
    /// `deadline`, an error of kind `TimedOut`.
    fn read(
        &self,
        path: &Path,
        resume: Option<(FileId, u64)>,
        max_bytes: u64,
        deadline: Instant,
    ) -> io::Result<Chunk>;
}

/// The log directory itself.
#[derive(Debug, Clone)]
pub struct LogDir(pub PathBuf);

/// Bytes read between two looks at the deadline.
const READ_CHUNK: u64 = 256 << 10;

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

/// A listed file as the heap orders it: older, then later in name order, first out.
type Listed = (SystemTime, Reverse<PathBuf>, u64, u64, u64);

impl LogSource for LogDir {
    fn recent_files(&self, limits: &NcclConfig, deadline: Instant) -> io::Result<Vec<LogFile>> {
        let now = SystemTime::now();
        // The newest `max_files`, kept in a heap whose top is the oldest kept: a directory of a
        // million files costs `max_files` entries of memory.
        let mut newest: BinaryHeap<Reverse<Listed>> = BinaryHeap::new();
        let entries = std::fs::read_dir(&self.0)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.0.display())))?;
        for entry in entries {
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
            let id = file_id(&meta);
            newest.push(Reverse((
                modified,
                Reverse(entry.path()),
                id.dev,
                id.ino,
                meta.len(),
            )));
            if newest.len() > limits.max_files {
                newest.pop();
            }
        }
        // Newest first (ties by name), so that the caps drop old jobs.
        let mut files: Vec<LogFile> = newest
            .into_iter()
            .map(
                |Reverse((modified, Reverse(path), dev, ino, len))| LogFile {
                    path,
                    id: FileId { dev, ino },
                    len,
                    modified,
                },
            )
            .collect();
        files.sort_by(|a, b| {
            b.modified
                .cmp(&a.modified)
                .then_with(|| a.path.cmp(&b.path))
        });
        Ok(files)
    }

    fn read(
        &self,
        path: &Path,
        resume: Option<(FileId, u64)>,
        max_bytes: u64,
        deadline: Instant,
    ) -> io::Result<Chunk> {
        // Opened without blocking and refused unless a regular file (a FIFO put in its place).
        let file = crate::bounded_read::open_regular(path)?;
        let meta = file.metadata()?;
        let (id, len) = (file_id(&meta), meta.len());
        let continued = resume.is_some_and(|(was, offset)| was == id && offset <= len);
        let from = match resume {
            Some((_, offset)) if continued => offset,
            _ => 0,
        };
        let start = from.max(len.saturating_sub(max_bytes));
        let mut file = file;
        file.seek(SeekFrom::Start(start))?;
        // Up to the length seen at the open: what is written meanwhile is for the next scan.
        let mut file = file.take(len - start);
        let mut bytes = Vec::new();
        loop {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the scan's time is up",
                ));
            }
            let read = (&mut file).take(READ_CHUNK).read_to_end(&mut bytes)?;
            if read == 0 {
                break;
            }
        }
        Ok(Chunk {
            id,
            len,
            start,
            continued,
            bytes,
        })
    }
}

/// What one scan of the directory found.
#[derive(Debug, Clone)]
pub struct DirScan {
    /// False when the directory could not be listed.
    pub listed: bool,
    /// True when the scan's time ran out before every file was brought up to date.
    pub partial: bool,
    /// Files within the limits, and those of them read (in part) by this scan.
    pub files: usize,
    pub files_read: usize,
    pub bytes_read: u64,
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
            files: 0,
            files_read: 0,
            bytes_read: 0,
            processes: Vec::new(),
            processes_dropped: 0,
            duration: Duration::ZERO,
            finished: Instant::now(),
        }
    }
}

/// Dropped processes counted one by one over all files; beyond, the count stays there.
const DROPPED_COUNTED: usize = 1 << 17;

/// What is known of one file: its processes so far, and how far it was read.
#[derive(Debug)]
struct Tailed {
    id: FileId,
    modified: SystemTime,
    /// Bytes parsed: the next read starts here.
    offset: u64,
    /// The file's length at the last read; past `offset` is a line still being written.
    len: u64,
    parser: LogParser,
}

/// Follows the files of a log directory from scan to scan: each scan reads only what was
/// appended since the previous one (a file that did not change costs a `stat`), starts over on
/// a file replaced (rotation) or truncated, and forgets files that left the limits.
#[derive(Debug, Default)]
pub(crate) struct Tailer {
    files: std::collections::HashMap<PathBuf, Tailed>,
}

impl Tailer {
    pub fn new() -> Tailer {
        Tailer::default()
    }

    /// One scan: lists the recent files and brings them up to date, newest first, until
    /// `scan_timeout`; then merges their processes, newest files first, up to `max_processes`.
    pub fn scan(&mut self, source: &dyn LogSource, limits: &NcclConfig) -> DirScan {
        let started = Instant::now();
        // A timeout too large to add is no timeout.
        let deadline = started
            .checked_add(limits.scan_timeout)
            .unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 24 * 3600));
        let files = match source.recent_files(limits, deadline) {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!("the NCCL log directory could not be listed: {e}");
                // Nothing is served as current; what is known of the files is kept for when
                // the directory comes back.
                return DirScan {
                    listed: false,
                    duration: started.elapsed(),
                    finished: Instant::now(),
                    ..DirScan::empty()
                };
            }
        };
        self.files
            .retain(|path, _| files.iter().any(|f| &f.path == path));
        let (mut files_read, mut bytes_read) = (0, 0);
        // Listing itself may have stopped at the deadline.
        let mut partial = Instant::now() >= deadline;
        for file in &files {
            if partial {
                break;
            }
            if self.files.get(&file.path).is_some_and(|t| {
                t.id == file.id
                    && t.modified == file.modified
                    && t.len == file.len
                    && t.offset == t.len
            }) {
                continue;
            }
            match self.update(source, file, limits, deadline) {
                Ok(read) => {
                    files_read += 1;
                    bytes_read += read;
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => partial = true,
                // A file removed, replaced or unreadable since listing: known as it was.
                Err(e) => tracing::debug!("nccl log {}: {e}", file.path.display()),
            }
            partial |= Instant::now() >= deadline;
        }
        let (processes, processes_dropped) = self.merge(&files, limits.max_processes);
        DirScan {
            listed: true,
            partial,
            files: files.len(),
            files_read,
            bytes_read,
            processes,
            processes_dropped,
            duration: started.elapsed(),
            finished: Instant::now(),
        }
    }

    /// Reads what `file` gained since the last scan; returns the bytes read.
    fn update(
        &mut self,
        source: &dyn LogSource,
        file: &LogFile,
        limits: &NcclConfig,
        deadline: Instant,
    ) -> io::Result<u64> {
        let known = self.files.get(&file.path);
        // Same length but another modification time: rewritten in place, read it again.
        let rewritten = known
            .is_some_and(|t| t.id == file.id && t.len == file.len && t.modified != file.modified);
        let resume = known.filter(|_| !rewritten).map(|t| (t.id, t.offset));
        // A line still unfinished at the previous scan and untouched since is taken as it is.
        let settled = known.is_some_and(|t| t.id == file.id && t.len == file.len);
        let chunk = source.read(&file.path, resume, limits.max_bytes_per_file, deadline)?;
        let counted_elsewhere: usize = self
            .files
            .iter()
            .filter(|(path, _)| **path != file.path)
            .map(|(_, t)| t.parser.processes_dropped() as usize)
            .sum();
        let tailed = match self.files.entry(file.path.clone()) {
            std::collections::hash_map::Entry::Occupied(entry) if chunk.continued => {
                entry.into_mut()
            }
            entry => {
                let fresh = Tailed {
                    id: chunk.id,
                    modified: file.modified,
                    offset: chunk.start,
                    len: chunk.len,
                    parser: LogParser::with_max_processes(limits.max_processes)
                        .without_evidence_text(),
                };
                match entry {
                    std::collections::hash_map::Entry::Occupied(mut e) => {
                        e.insert(fresh);
                        e.into_mut()
                    }
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(fresh),
                }
            }
        };
        let bytes = &chunk.bytes;
        // Whole lines only, unless the line is all the bound allows or has stopped growing.
        let whole = settled || bytes.len() as u64 >= limits.max_bytes_per_file;
        let take = match bytes.iter().rposition(|b| *b == b'\n') {
            _ if whole => bytes.len(),
            Some(at) => at + 1,
            None => 0,
        };
        // One budget of dropped processes counted over all files.
        let dropped = tailed.parser.processes_dropped() as usize;
        tailed.parser.set_max_dropped_counted(
            DROPPED_COUNTED
                .saturating_sub(counted_elsewhere)
                .max(dropped),
        );
        tailed
            .parser
            .feed(&file.path.display().to_string(), &bytes[..take]);
        tailed.id = chunk.id;
        tailed.modified = file.modified;
        tailed.offset = chunk.start + take as u64;
        tailed.len = chunk.len;
        Ok(bytes.len() as u64)
    }

    /// Every file's processes, newest file first, at most `max_processes`; and the count of
    /// those left out (by a file's own cap or here).
    fn merge(&self, files: &[LogFile], max_processes: usize) -> (Vec<ProcessSummary>, u64) {
        let mut merged: std::collections::BTreeMap<(&str, u32), ProcessLog> =
            std::collections::BTreeMap::new();
        let mut left_out: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut dropped_in_files = 0u64;
        for file in files {
            let Some(tailed) = self.files.get(&file.path) else {
                continue;
            };
            dropped_in_files += tailed.parser.processes_dropped();
            for process in tailed.parser.processes() {
                let key = (process.host.as_str(), process.pid);
                if let Some(known) = merged.get_mut(&key) {
                    known.absorb(process);
                } else if merged.len() < max_processes {
                    merged.insert(key, process.clone());
                } else if left_out.len() < DROPPED_COUNTED {
                    left_out.insert(process_hash(&process.host, process.pid));
                }
            }
        }
        let summaries = merged.values().map(summarize).collect();
        let dropped = (dropped_in_files + left_out.len() as u64).min(DROPPED_COUNTED as u64);
        (summaries, dropped)
    }
}

/// One scan from nothing known: every file read up to its bound.
pub fn scan(source: &dyn LogSource, limits: &NcclConfig) -> DirScan {
    Tailer::new().scan(source, limits)
}

/// The collector: the last finished scan, and the thread that makes them.
#[derive(Debug)]
pub struct NcclCollector {
    limits: NcclConfig,
    spawned: Instant,
    scans: Periodic<Option<Arc<DirScan>>>,
}

impl NcclCollector {
    /// Starts the scan thread on `source`; the first scan starts at once.
    pub fn spawn(source: Arc<dyn LogSource>, limits: NcclConfig) -> io::Result<NcclCollector> {
        let thread_limits = limits.clone();
        let mut tailer = Tailer::new();
        let scans = Periodic::spawn("nccl-log-scan", limits.scan_interval, None, move || {
            let scan = tailer.scan(source.as_ref(), &thread_limits);
            if scan.partial {
                tracing::warn!(
                    files = scan.files,
                    files_read = scan.files_read,
                    bytes_read = scan.bytes_read,
                    timeout = ?thread_limits.scan_timeout,
                    "the NCCL log scan ran out of time; what it read is served, the next scans carry on"
                );
            }
            Some(Arc::new(scan))
        })?;
        Ok(NcclCollector {
            limits,
            spawned: Instant::now(),
            scans,
        })
    }

    /// The last finished scan, if any.
    pub(crate) fn last_scan(&self) -> Option<Arc<DirScan>> {
        self.scans.last().as_ref().clone()
    }

    /// How old the served result may grow before it counts as stale: two intervals and a
    /// scan's own timeout.
    pub fn stale_after(&self) -> Duration {
        let limits = &self.limits;
        limits
            .scan_interval
            .saturating_mul(2)
            .saturating_add(limits.scan_timeout)
    }
}

/// Adds the NCCL families of one scan: per process, or only per-node counts.
pub fn add_metrics<'a>(families: &mut Families<'a>, scan: &'a DirScan, aggregate_only: bool) {
    let fallbacks = scan
        .processes
        .iter()
        .filter(|p| p.transport == Transport::Socket)
        .count() as u64;
    if aggregate_only {
        add_process_counts(families, scan);
    } else {
        add_processes(families, scan);
    }
    families.gauge(
        "rdma_nccl_socket_fallback_processes",
        "Processes in the NCCL debug logs whose NCCL uses TCP sockets.",
        Vec::new(),
        Value::U64(fallbacks),
    );
    add_scan_health(families, scan);
}

/// `rdma_nccl_processes`: processes by host and by what `rdma_nccl_process_info` would say.
fn add_process_counts<'a>(families: &mut Families<'a>, scan: &'a DirScan) {
    let mut counts: std::collections::BTreeMap<[&'a str; 4], u64> = Default::default();
    for p in &scan.processes {
        let key = [
            p.host.as_str(),
            p.network.as_str(),
            p.link_layer.as_str(),
            p.gdr.as_label(),
        ];
        *counts.entry(key).or_default() += 1;
    }
    for ([host, network, link_layer, gdr], count) in counts {
        families.gauge(
            "rdma_nccl_processes",
            "Processes found in the NCCL debug logs by host, network NCCL chose, link layer of their HCAs and GPUDirect RDMA state (nccl.aggregate_only: instead of per-process series).",
            vec![
                ("host", Cow::Borrowed(host)),
                ("network", Cow::Borrowed(network)),
                ("link_layer", Cow::Borrowed(link_layer)),
                ("gdr", Cow::Borrowed(gdr)),
            ],
            Value::U64(count),
        );
    }
}

/// `rdma_nccl_process_info` and `rdma_nccl_socket_fallback` of every process.
fn add_processes<'a>(families: &mut Families<'a>, scan: &'a DirScan) {
    for p in &scan.processes {
        let pid: Cow<'a, str> = Cow::Owned(p.pid.to_string());
        families.info(
            "rdma_nccl_process_info",
            "A process found in the NCCL debug logs: the network NCCL chose (empty: none), link layer of its HCAs, GPUDirect RDMA state.",
            vec![
                ("host", Cow::Borrowed(p.host.as_str())),
                ("pid", pid.clone()),
                ("network", Cow::Borrowed(p.network.as_str())),
                ("link_layer", Cow::Borrowed(p.link_layer.as_str())),
                ("gdr", Cow::Borrowed(p.gdr.as_label())),
            ],
        );
        let socket = p.transport == Transport::Socket;
        families.gauge(
            "rdma_nccl_socket_fallback",
            "1 if the process's NCCL uses TCP sockets instead of IB/RoCE.",
            vec![("host", Cow::Borrowed(p.host.as_str())), ("pid", pid)],
            Value::U64(u64::from(socket)),
        );
    }
}

/// How complete the last scan was.
fn add_scan_health<'a>(families: &mut Families<'a>, scan: &'a DirScan) {
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

    fn retire(&self) {
        self.scans.stop();
    }

    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, std::fmt::Error> {
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
        add_metrics(&mut families, scan, self.limits.aggregate_only);
        out.encode(&families)?;
        let since = match &last {
            Some(scan) => scan.finished.elapsed(),
            None => self.spawned.elapsed(),
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
    use crate::testutil::{self, wait_for};
    use std::sync::{Condvar, Mutex};

    /// A source whose files are given in memory, newest first; a read of the file `block` names
    /// waits until `release`, as a read of a hung NFS server would.
    #[derive(Debug, Default)]
    struct Scripted {
        files: Mutex<Vec<(PathBuf, Vec<u8>)>>,
        blocked: Mutex<Option<PathBuf>>,
        released: Condvar,
        waiting: Mutex<bool>,
        /// Calls to `read`, blocked ones included.
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
        fn recent_files(&self, _: &NcclConfig, _: Instant) -> io::Result<Vec<LogFile>> {
            let files = self.files.lock().unwrap();
            Ok(files
                .iter()
                .map(|(path, bytes)| LogFile {
                    path: path.clone(),
                    id: scripted_id(path),
                    len: bytes.len() as u64,
                    modified: SystemTime::UNIX_EPOCH,
                })
                .collect())
        }

        fn read(
            &self,
            path: &Path,
            resume: Option<(FileId, u64)>,
            _: u64,
            _: Instant,
        ) -> io::Result<Chunk> {
            *self.reads.lock().unwrap() += 1;
            let mut blocked = self.blocked.lock().unwrap();
            while blocked.as_deref() == Some(path) {
                *self.waiting.lock().unwrap() = true;
                blocked = self.released.wait(blocked).unwrap();
            }
            drop(blocked);
            *self.waiting.lock().unwrap() = false;
            let files = self.files.lock().unwrap();
            let (_, bytes) = files.iter().find(|(p, _)| p == path).unwrap();
            let id = scripted_id(path);
            let len = bytes.len() as u64;
            let continued = resume.is_some_and(|(was, offset)| was == id && offset <= len);
            let start = match resume {
                Some((_, offset)) if continued => offset,
                _ => 0,
            };
            Ok(Chunk {
                id,
                len,
                start,
                continued,
                bytes: bytes[start as usize..].to_vec(),
            })
        }
    }

    fn scripted_id(path: &Path) -> FileId {
        FileId {
            dev: 1,
            ino: process_hash(&path.display().to_string(), 0),
        }
    }

    fn limits(interval_ms: u64, timeout_ms: u64) -> NcclConfig {
        NcclConfig {
            scan_interval: Duration::from_millis(interval_ms),
            scan_timeout: Duration::from_millis(timeout_ms),
            ..NcclConfig::default()
        }
    }

    /// A scan's bound here: a blocked scan is released within it.
    const SCAN_WAIT: Duration = Duration::from_secs(30);

    /// One scrape of the collector through the framework: (body, collector success).
    fn scrape(collector: &Arc<NcclCollector>) -> (String, bool) {
        let text = testutil::scrape(collector);
        let ok = text.contains(r#"rdma_exporter_collector_success{collector="nccl"} 1"#);
        (text, ok)
    }

    const IB: &str = "h1:10:10 [0] NCCL INFO Using network IB\n";
    const SOCKET: &str = "h2:20:20 [0] NCCL INFO Using network Socket\n";

    /// Starts a collector on `source` and waits for its first scan.
    fn started(source: &Arc<Scripted>, limits: NcclConfig) -> Arc<NcclCollector> {
        let collector = Arc::new(NcclCollector::spawn(source.clone(), limits).unwrap());
        wait_for("the first scan", SCAN_WAIT, || {
            collector.last_scan().is_some()
        });
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
        wait_for("the scan to block", SCAN_WAIT, || {
            *source.waiting.lock().unwrap()
        });
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
        // One scan thread: while it hangs, no other scan even tries a read.
        let reads = *source.reads.lock().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(*source.reads.lock().unwrap(), reads, "a second scan ran");
        source.release();
        wait_for("a scan after the release", SCAN_WAIT, || {
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
        wait_for("the scan to block", SCAN_WAIT, || {
            *source.waiting.lock().unwrap()
        });
        std::thread::sleep(collector.stale_after() + Duration::from_millis(50));
        let (body, ok) = scrape(&collector);
        // Still served, but the collector says it failed.
        assert!(!ok, "{body}");
        assert!(body.contains(r#"host="h1""#), "{body}");
        source.release();
        wait_for("a fresh scan", SCAN_WAIT, || scrape(&collector).1);
    }

    #[test]
    fn an_unlisted_directory_fails_the_scan() {
        let dir = tempfile::tempdir().unwrap();
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
        let limits = NcclConfig {
            max_files: 2,
            ..NcclConfig::default()
        };
        let files = source.recent_files(&limits, far).unwrap();
        let names: Vec<_> = files.iter().map(|f| f.path.file_name().unwrap()).collect();
        assert_eq!(names, ["new.log", "mid.log"]);
        assert_eq!(files[0].len, IB.len() as u64);
        // The tail bound is exact; a resume carries on from its offset.
        let tail = source.read(&files[0].path, None, 5, far).unwrap();
        assert_eq!(
            (tail.bytes.as_slice(), tail.continued),
            (&b"k IB\n"[..], false)
        );
        let resumed = source
            .read(&files[0].path, Some((files[0].id, 30)), 1000, far)
            .unwrap();
        assert_eq!(resumed.bytes, &IB.as_bytes()[30..]);
        assert!(resumed.continued);
        // Another file under the name, or a shorter one: read from its start.
        let other = FileId { dev: 0, ino: 0 };
        let replaced = source.read(&files[0].path, Some((other, 3)), 1000, far);
        assert!(!replaced.unwrap().continued);
        let beyond = source
            .read(&files[0].path, Some((files[0].id, 1000)), 1000, far)
            .unwrap();
        assert_eq!((beyond.start, beyond.continued), (0, false));
        // A FIFO is refused without blocking.
        assert!(source.read(&dir.path().join("fifo"), None, 5, far).is_err());
        let err = source
            .read(&files[0].path, None, 5, Instant::now())
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    /// Appends `text` to `path`.
    fn append(path: &Path, text: &str) {
        use std::io::Write;
        let mut file = std::fs::File::options().append(true).open(path).unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    /// `host:pid` and network of each process served, sorted.
    fn served(scan: &DirScan) -> Vec<(String, String)> {
        let mut served: Vec<_> = scan
            .processes
            .iter()
            .map(|p| (format!("{}:{}", p.host, p.pid), p.network.clone()))
            .collect();
        served.sort();
        served
    }

    fn who(scan: &DirScan) -> Vec<String> {
        served(scan).into_iter().map(|(who, _)| who).collect()
    }

    #[test]
    fn files_are_tailed_from_scan_to_scan() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        std::fs::write(&a, IB).unwrap();
        let source = LogDir(dir.path().to_path_buf());
        let limits = limits(1000, 60_000);
        let mut tailer = Tailer::new();
        let first = tailer.scan(&source, &limits);
        assert_eq!((first.files_read, first.bytes_read), (1, IB.len() as u64));
        // Unchanged: not read again, still served.
        let again = tailer.scan(&source, &limits);
        assert_eq!((again.files_read, again.processes.len()), (0, 1));
        // Appended: only the new bytes are read; a line still being written waits for its end.
        let socket = "h1:10:10 [0] NCCL INFO Using network Socket\n";
        let unfinished = "h3:30:30 [0] NCCL INFO Using net";
        append(&a, &format!("{socket}{unfinished}"));
        let grown = tailer.scan(&source, &limits);
        assert_eq!(grown.bytes_read, (socket.len() + unfinished.len()) as u64);
        assert_eq!(served(&grown), [("h1:10".into(), "Socket".into())]);
        append(&a, "work IB\n");
        let finished = tailer.scan(&source, &limits);
        assert_eq!(finished.bytes_read, unfinished.len() as u64 + 8);
        assert_eq!(who(&finished), ["h1:10", "h3:30"]);
        // A new file is picked up; a rotated (replaced) one is read from its start.
        let b = dir.path().join("b.log");
        std::fs::write(&b, SOCKET).unwrap();
        let rotated = dir.path().join("a.log.new");
        std::fs::write(&rotated, "h9:90:90 [0] NCCL INFO Using network IB\n").unwrap();
        std::fs::rename(&rotated, &a).unwrap();
        let after = tailer.scan(&source, &limits);
        assert_eq!(who(&after), ["h2:20", "h9:90"]);
        // Truncated in place (copytruncate), then written again: read from its start.
        std::fs::File::options()
            .write(true)
            .truncate(true)
            .open(&b)
            .unwrap();
        append(&b, "h7:70:70 [0] NCCL INFO Using network IB\n");
        let truncated = tailer.scan(&source, &limits);
        assert_eq!(who(&truncated), ["h7:70", "h9:90"]);
        // A removed file is forgotten.
        std::fs::remove_file(&b).unwrap();
        assert_eq!(who(&tailer.scan(&source, &limits)), ["h9:90"]);
        // A directory that went away: nothing is served as current.
        drop(dir);
        let gone = tailer.scan(&source, &limits);
        assert!(!gone.listed && gone.processes.is_empty());
    }

    #[test]
    fn a_last_line_without_newline_is_taken_once_it_stops_growing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.log"), IB.trim_end()).unwrap();
        let source = LogDir(dir.path().to_path_buf());
        let mut tailer = Tailer::new();
        assert!(tailer
            .scan(&source, &limits(1000, 60_000))
            .processes
            .is_empty());
        assert_eq!(who(&tailer.scan(&source, &limits(1000, 60_000))), ["h1:10"]);
    }

    #[test]
    fn a_partial_scan_is_completed_by_the_next_ones() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3 {
            let text = format!("h{i}:{i}:1 [0] NCCL INFO Using network IB\n");
            std::fs::write(dir.path().join(format!("{i}.log")), text).unwrap();
        }
        let source = LogDir(dir.path().to_path_buf());
        let mut tailer = Tailer::new();
        // No time at all: nothing read, the scan says so.
        let cut = tailer.scan(&source, &limits(1000, 0));
        assert!(cut.partial && cut.listed);
        assert_eq!(cut.files_read, 0);
        let full = tailer.scan(&source, &limits(1000, 60_000));
        assert!(!full.partial);
        assert_eq!((full.files_read, full.processes.len()), (3, 3));
    }

    #[test]
    fn the_same_process_in_two_files_is_merged() {
        let dir = tempfile::tempdir().unwrap();
        let older = dir.path().join("old.log");
        let hcas = "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n";
        std::fs::write(&older, hcas).unwrap();
        let file = std::fs::File::options().write(true).open(&older).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(60))
            .unwrap();
        let network = "h:1:1 [0] NCCL INFO Using network IB\n";
        std::fs::write(dir.path().join("new.log"), network).unwrap();
        let result = scan(&LogDir(dir.path().to_path_buf()), &limits(1000, 60_000));
        assert_eq!(result.processes.len(), 1);
        assert_eq!(result.processes[0].network, "IB");
        assert_eq!(result.processes[0].link_layer, "RoCE");
    }

    #[test]
    fn processes_beyond_the_cap_are_counted_not_exported() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..50)
            .map(|i| format!("host{i}:{i}:1 [0] NCCL INFO Using network IB\n"))
            .collect();
        std::fs::write(dir.path().join("many.log"), text).unwrap();
        let limits = NcclConfig {
            max_processes: 8,
            ..NcclConfig::default()
        };
        let result = scan(&LogDir(dir.path().to_path_buf()), &limits);
        assert_eq!((result.processes.len(), result.processes_dropped), (8, 42));
        let mut families = Families::default();
        add_metrics(&mut families, &result, false);
        assert_eq!(families.len(), 8 * 2 + 3);
    }

    #[test]
    fn aggregate_only_counts_processes_per_host_instead() {
        let dir = tempfile::tempdir().unwrap();
        let mut text: String = (0..40)
            .map(|i| format!("host{}:{i}:1 [0] NCCL INFO Using network IB\n", i % 2))
            .collect();
        text.push_str("host0:99:1 [0] NCCL INFO Using network Socket\n");
        std::fs::write(dir.path().join("many.log"), text).unwrap();
        let result = scan(&LogDir(dir.path().to_path_buf()), &NcclConfig::default());
        assert_eq!(result.processes.len(), 41);
        let mut families = Families::default();
        add_metrics(&mut families, &result, true);
        let samples = families.sample_lines();
        assert!(
            !samples.iter().any(|s| s.contains("pid=")),
            "no per-process series: {samples:#?}"
        );
        let counts: Vec<&String> = samples
            .iter()
            .filter(|s| s.starts_with("rdma_nccl_processes{"))
            .collect();
        assert_eq!(counts.len(), 3, "{samples:#?}");
        assert!(
            counts.iter().any(
                |s| s.starts_with("rdma_nccl_processes{host=host1,network=IB,")
                    && s.ends_with(" 20")
            ),
            "{counts:#?}"
        );
        assert!(samples.contains(&"rdma_nccl_socket_fallback_processes{} 1".to_string()));
    }
}
