//! Splits NCCL debug output into records: `host:pid:tid [dev] NCCL LEVEL message`.
//!
//! Prefix per ops.md §6.1 (`src/debug.cc`): an optional strftime timestamp, then
//! `"%s:%d:%d "` (hostname with special characters turned into `-`, pid, tid), then
//! `"[%d] NCCL INFO %s"` or `"[%d] file:line (func) NCCL WARN %s"`. The prefix is searched
//! anywhere in a physical line, not only at its start: processes sharing one file interleave
//! their writes, so one physical line may hold the tail of one record and a whole other one.

use std::sync::LazyLock;

use regex::Regex;

/// Only hostname characters NCCL leaves as they are, so that a record glued to the end of
/// another (`...via NET/IB/0host:1:2 [0] NCCL INFO`) is cut at the `/`.
static PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) \[(?P<dev>\d{1,4})\](?: [^\[\]]*?)? NCCL (?P<level>INFO|WARN|TRACE) ",
    )
    .expect("static regex")
});

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Trace,
}

/// One record of a process; `message` runs to the next record's prefix or the end of the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub level: Level,
    pub message: &'a str,
}

/// A line that starts with the level but lost the `host:pid:tid [dev]` prefix, as excerpts in
/// tuning guides and tickets quote them (`NCCL INFO NET/IB : Using ...`).
static BARE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*NCCL (?P<level>INFO|WARN|TRACE) ").expect("static regex"));

/// The record of a line without prefix (see [`BARE`]): its host is empty, its pid 0; the
/// caller names the process after its input.
pub(crate) fn bare_record(line: &str) -> Option<Record<'_>> {
    let caps = BARE.captures(line)?;
    let level = match caps.name("level")?.as_str() {
        "WARN" => Level::Warn,
        "TRACE" => Level::Trace,
        _ => Level::Info,
    };
    Some(Record {
        host: "",
        pid: 0,
        level,
        message: line[caps.get(0)?.end()..].trim_end(),
    })
}

/// The records in one physical line; text before the first prefix (a fragment of a truncated
/// record, or a line without prefix such as the version banner) is returned apart.
pub fn records(line: &str) -> (&str, Vec<Record<'_>>) {
    records_with_hosts(line, |_| false)
}

/// As `records`, but a prefix glued to the previous record's text (`...Using network IBh2:2:2`)
/// starts at the longest suffix of its host that `known_host` accepts: the host regex cannot
/// tell `IBh2` from `h2`, hosts seen on earlier lines can.
pub(crate) fn records_with_hosts(
    line: &str,
    known_host: impl Fn(&str) -> bool,
) -> (&str, Vec<Record<'_>>) {
    // Cheap filter first: most lines of a big log that are not NCCL's carry no "NCCL ".
    if !line.contains(" NCCL ") {
        return (line, Vec::new());
    }
    let mut found: Vec<(usize, usize, Record<'_>)> = Vec::new();
    for caps in PREFIX.captures_iter(line) {
        let (Some(whole), Some(host), Some(pid), Some(level)) = (
            caps.get(0),
            caps.name("host"),
            caps.name("pid"),
            caps.name("level"),
        ) else {
            continue;
        };
        // A pid that does not fit is garbage, not a process.
        let Ok(pid) = pid.as_str().parse::<u32>() else {
            continue;
        };
        let mut start = whole.start();
        let mut host = host.as_str();
        // The glue may sit anywhere in the word (`network IBh2:...`): an unknown host with a
        // known suffix is taken as glued.
        if !known_host(host) {
            if let Some(at) = (1..host.len())
                .filter(|&at| host.is_char_boundary(at))
                .find(|&at| known_host(&host[at..]))
            {
                start += at;
                host = &host[at..];
            }
        }
        let level = match level.as_str() {
            "WARN" => Level::Warn,
            "TRACE" => Level::Trace,
            _ => Level::Info,
        };
        found.push((
            start,
            whole.end(),
            Record {
                host,
                pid,
                level,
                message: "",
            },
        ));
    }
    let leading = match found.first() {
        Some((start, _, _)) => &line[..*start],
        None => line,
    };
    let ends: Vec<usize> = found
        .iter()
        .skip(1)
        .map(|(start, _, _)| *start)
        .chain(std::iter::once(line.len()))
        .collect();
    let records = found
        .into_iter()
        .zip(ends)
        .map(|((_, body_start, mut record), end)| {
            record.message = line[body_start..end].trim_end();
            record
        })
        .collect();
    (leading, records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_info_line() {
        let (rest, recs) = records("gpu-node-01:4242:4242 [0] NCCL INFO Using network IB");
        assert_eq!(rest, "");
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].host, "gpu-node-01");
        assert_eq!(recs[0].pid, 4242);
        assert_eq!(recs[0].level, Level::Info);
        assert_eq!(recs[0].message, "Using network IB");
    }

    #[test]
    fn timestamp_and_warn_with_location() {
        let (rest, recs) = records(
            "[2024-05-01 10:00:00] node2:7:9 [3] transport/net_ib.cc:101 (ncclIbInit) NCCL WARN NET/IB : oops",
        );
        assert_eq!(rest, "[2024-05-01 10:00:00] ");
        assert_eq!(recs[0].level, Level::Warn);
        assert_eq!(recs[0].message, "NET/IB : oops");
    }

    #[test]
    fn interleaved_records_split() {
        // `0h2` could be a host: hosts seen earlier settle it.
        let (rest, recs) = records_with_hosts(
            "h1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0h2:2:2 [0] NCCL INFO Using network Socket",
            |host| host == "h2",
        );
        assert_eq!(rest, "");
        assert_eq!(recs.len(), 2);
        assert_eq!(
            recs[0].message,
            "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0"
        );
        assert_eq!((recs[1].host, recs[1].pid), ("h2", 2));
    }

    #[test]
    fn banner_without_prefix() {
        let (rest, recs) = records("NCCL version 2.18.5+cuda12.2");
        assert_eq!(rest, "NCCL version 2.18.5+cuda12.2");
        assert!(recs.is_empty());
    }

    #[test]
    fn a_line_without_prefix() {
        let record =
            bare_record("NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>")
                .unwrap();
        assert_eq!(
            (record.host, record.pid, record.level),
            ("", 0, Level::Info)
        );
        assert!(record.message.starts_with("NET/IB : Using"));
        assert!(bare_record("  NCCL WARN NET/Socket : Connection refused").is_some());
        // A fragment of a record cut mid-line is not a line of its own.
        assert!(bare_record("...k IB NCCL INFO Using network Socket").is_none());
        assert!(bare_record("NCCL version 2.18.5+cuda12.2").is_none());
    }
}
