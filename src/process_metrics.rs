//! The exporter's own process figures, under the names every Prometheus client library uses
//! (`process_resident_memory_bytes`, `process_open_fds`, ...), plus the number of live async
//! tasks. They let operators (and the soak bench) see a leak in the exporter itself.
//!
//! Read from `/proc/self` at each scrape: a few small reads, no crate needed. Where `/proc` is
//! missing the figures are simply absent.

use std::borrow::Cow;
use std::path::Path;

/// `/proc/stat` of a machine with hundreds of cores is tens of KiB.
const PROC_FILE_MAX: u64 = 1 << 20;

use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Value};

#[derive(Debug, Default, Clone)]
pub struct ProcessCollector {
    /// The runtime whose live tasks are counted; `None` outside a runtime.
    pub runtime: Option<tokio::runtime::Handle>,
}

/// What `/proc/<pid>/stat` holds that is exposed (the benches read other processes with it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcStat {
    pub cpu_seconds: f64,
    pub threads: u64,
    pub start_time_seconds: f64,
    pub virtual_memory_bytes: u64,
    pub resident_memory_bytes: u64,
}

/// Parses `/proc/<pid>/stat` (see proc(5)); `boot_time` is `btime` from `/proc/stat`.
fn parse_stat(
    stat: &str,
    ticks_per_second: f64,
    page_size: u64,
    boot_time: u64,
) -> Option<ProcStat> {
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // proc(5) numbers fields from 1 with pid and comm as 1 and 2; `fields[0]` is field 3.
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks_per_second,
        threads: field(20)?,
        start_time_seconds: boot_time as f64 + field(22)? as f64 / ticks_per_second,
        virtual_memory_bytes: field(23)?,
        resident_memory_bytes: field(24)?.saturating_mul(page_size),
    })
}

/// `btime` from `/proc/stat`, read once: the boot time does not change, and the file is
/// several KiB on a many-core machine.
fn boot_time() -> Option<u64> {
    static BOOT_TIME: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *BOOT_TIME.get_or_init(|| {
        let stat =
            crate::bounded_read::read_to_string(Path::new("/proc/stat"), PROC_FILE_MAX).ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()
    })
}

/// `/proc/<pid>/stat` of `pid`, or of this process when `None`.
pub fn read_stat(pid: Option<u32>) -> Option<ProcStat> {
    // SAFETY: sysconf has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let stat = match pid {
        Some(pid) => crate::bounded_read::read_to_string(
            Path::new(&format!("/proc/{pid}/stat")),
            PROC_FILE_MAX,
        )
        .ok()?,
        None => own_stat()?,
    };
    parse_stat(&stat, ticks as f64, page as u64, boot_time()?)
}

/// The most `/proc/self/stat` holds: 52 numbers of at most 20 digits and a 16-byte name.
const OWN_STAT_MAX: usize = 2048;

/// `/proc/self/stat` through a descriptor opened once: a read at offset 0 of a procfs file
/// generates it afresh, and the open (a path walk through `self` to this process's directory)
/// cost as much as the read itself at every scrape.
fn own_stat() -> Option<String> {
    static OWN_STAT: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let kept = OWN_STAT
        .get_or_init(|| std::fs::File::open("/proc/self/stat").ok())
        .as_ref();
    let mut buffer = [0u8; OWN_STAT_MAX];
    let read = kept.and_then(|file| std::os::unix::fs::FileExt::read_at(file, &mut buffer, 0).ok());
    match read {
        // A full buffer may be cut short: read it whole by path instead.
        Some(len) if len > 0 && len < buffer.len() => {
            String::from_utf8(buffer[..len].to_vec()).ok()
        }
        _ => crate::bounded_read::read_to_string(Path::new("/proc/self/stat"), PROC_FILE_MAX).ok(),
    }
}

/// The number of open descriptors. Linux 6.2 and later report it as the size of `/proc/self/fd`,
/// one `stat`; listing the directory instead costs a `getdents64` pass over every descriptor,
/// and the node collector keeps hundreds open between scrapes (10% of a scrape's CPU on the
/// bench fixture). Older kernels report 0 there, and get the listing.
fn open_fds() -> Option<u64> {
    match std::fs::metadata("/proc/self/fd") {
        Ok(meta) if meta.len() > 0 => Some(meta.len()),
        _ => Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64),
    }
}

fn max_fds() -> Option<u64> {
    crate::fd_limit::current().ok().map(|(soft, _)| soft)
}

impl ProcessCollector {
    fn families(&self) -> Families<'static> {
        let mut families = Families::default();
        let none = Vec::<(&'static str, Cow<'static, str>)>::new;
        if let Some(stat) = read_stat(None) {
            families.counter(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                none(),
                Value::F64(stat.cpu_seconds),
            );
            families.gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                none(),
                Value::U64(stat.resident_memory_bytes),
            );
            families.gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                none(),
                Value::U64(stat.virtual_memory_bytes),
            );
            families.gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                none(),
                Value::F64(stat.start_time_seconds),
            );
            families.gauge(
                "process_threads",
                "Number of OS threads in the process.",
                none(),
                Value::U64(stat.threads),
            );
        }
        if let Some(fds) = open_fds() {
            families.gauge(
                "process_open_fds",
                "Number of open file descriptors.",
                none(),
                Value::U64(fds),
            );
        }
        if let Some(fds) = max_fds() {
            families.gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                none(),
                Value::U64(fds),
            );
        }
        if let Some(runtime) = &self.runtime {
            families.gauge(
                "rdma_exporter_async_tasks",
                "Async tasks alive in the exporter's runtime (switch sessions, connections, timers); flat in a healthy exporter.",
                none(),
                Value::U64(runtime.metrics().num_alive_tasks() as u64),
            );
        }
        families
    }
}

impl Collector for ProcessCollector {
    fn name(&self) -> &'static str {
        "process"
    }

    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, std::fmt::Error> {
        let families = self.families();
        out.encode(&families)?;
        // Without /proc the figures are absent, which is not a failure of the exporter.
        Ok(Outcome::ok(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_taken_after_the_command_name() {
        // A command name with spaces and a ')' must not shift the fields.
        let stat = "4242 (rfe (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    250 50 0 0 20 0 7 0 1000 123456789 3000 18446744073709551615";
        let parsed = parse_stat(stat, 100.0, 4096, 1_700_000_000).unwrap();
        assert_eq!(
            parsed,
            ProcStat {
                cpu_seconds: 3.0,
                threads: 7,
                start_time_seconds: 1_700_000_010.0,
                virtual_memory_bytes: 123_456_789,
                resident_memory_bytes: 3000 * 4096,
            }
        );
        assert_eq!(parse_stat("4242 (rfe) S 1 2", 100.0, 4096, 0), None);
    }

    #[test]
    fn own_figures_are_plausible() {
        let stat = read_stat(None).expect("/proc/self/stat");
        assert!(stat.resident_memory_bytes > 1 << 20, "{stat:?}");
        assert!(stat.threads >= 1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            stat.start_time_seconds <= now + 1.0
                && stat.start_time_seconds > now - 86_400.0 * 365.0
        );
        assert!(open_fds().unwrap() >= 3);
        assert!(max_fds().unwrap() >= open_fds().unwrap());
    }

    #[test]
    fn each_read_of_the_kept_descriptor_is_fresh() {
        let cpu = || read_stat(None).expect("/proc/self/stat").cpu_seconds;
        let before = cpu();
        // Burn CPU until the kernel's tick-based times move (they count in 1/CLK_TCK steps).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut spin = 0u64;
        while cpu() <= before {
            assert!(std::time::Instant::now() < until, "CPU time never moved");
            for i in 0..100_000u64 {
                spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(i));
            }
        }
        assert_eq!(own_stat().map(|s| s.rsplit_once(')').is_some()), Some(true));
    }

    #[test]
    fn open_fds_counts_descriptors_this_process_holds() {
        // Other tests open and close files meanwhile: only a lower bound is certain.
        let held: Vec<std::fs::File> = (0..64)
            .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
            .collect();
        let counted = open_fds().unwrap();
        assert!(counted >= held.len() as u64 + 3, "{counted}");
        let listed = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        assert!(
            counted.abs_diff(listed) < 64,
            "{counted} against {listed} listed"
        );
    }
}
