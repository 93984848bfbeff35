//! Driver statistics of a netdev (`ethtool -S`), behind a small trait so that tests and the
//! simulated fabric can feed the same numbers from text files.

use std::path::{Path, PathBuf};

use super::reason::ReadErrorReason;

/// One driver statistic as the driver names it (`rx_prio3_pause`) and its raw value.
pub type RawStat = (String, u64);

/// A netdev's statistic names in driver order. Drivers list the same names scrape after scrape,
/// so one list is shared by every read that finds it unchanged: a read then allocates no name.
pub(crate) type StatNames = super::counters::Names;

/// A netdev's driver statistics: the names and, in the same order, the values of one read.
pub type EthtoolStats = super::counters::Counters;

/// `stats`, with `previous`'s names when they are the same list.
pub(crate) fn reusing(stats: Vec<RawStat>, previous: Option<&StatNames>) -> EthtoolStats {
    let mut builder = StatsBuilder::new(previous);
    for (name, value) in &stats {
        builder.push(name, *value);
    }
    builder.finish()
}

/// Builds an [`EthtoolStats`] stat by stat, keeping the previous read's names for as long as
/// the new ones match them.
struct StatsBuilder<'p> {
    previous: Option<&'p StatNames>,
    /// Set at the first name that differs from `previous`: the names so far, then every next.
    fresh: Option<Vec<Box<str>>>,
    values: Vec<Option<u64>>,
}

impl<'p> StatsBuilder<'p> {
    fn new(previous: Option<&'p StatNames>) -> Self {
        StatsBuilder {
            previous,
            fresh: None,
            values: Vec::with_capacity(previous.map_or(0, |p| p.len())),
        }
    }

    fn push(&mut self, name: &str, value: u64) {
        let index = self.values.len();
        match (&mut self.fresh, self.previous) {
            (Some(fresh), _) => fresh.push(name.into()),
            (None, Some(previous)) if previous.get(index).is_some_and(|p| **p == *name) => {}
            (None, previous) => {
                let mut fresh: Vec<Box<str>> =
                    previous.map_or_else(Vec::new, |p| p[..index].to_vec());
                fresh.push(name.into());
                self.fresh = Some(fresh);
            }
        }
        self.values.push(Some(value));
    }

    fn finish(self) -> EthtoolStats {
        let names = match (self.fresh, self.previous) {
            (Some(fresh), _) => fresh.into(),
            (None, Some(previous)) if previous.len() == self.values.len() => previous.clone(),
            // The list got shorter: a prefix of the previous one.
            (None, Some(previous)) => previous[..self.values.len()].into(),
            (None, None) => StatNames::default(),
        };
        EthtoolStats::new(names, self.values)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EthtoolError {
    #[error("netdev {netdev}: no such device in this network namespace")]
    NoDevice { netdev: String },
    #[error("netdev {netdev}: driver reports no statistics")]
    NotSupported { netdev: String },
    #[error("netdev {netdev}: statistic count changed during the read ({expected} -> {got})")]
    CountChanged {
        netdev: String,
        expected: u32,
        got: u32,
    },
    #[error("netdev {netdev}: invalid interface name")]
    BadName { netdev: String },
    #[error("netdev {netdev}: {op}: {source}")]
    Io {
        netdev: String,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {reason}")]
    Parse {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

impl EthtoolError {
    /// The `reason` label for `rdma_exporter_read_errors_total`.
    pub fn reason(&self) -> ReadErrorReason {
        match self {
            EthtoolError::NoDevice { .. } => ReadErrorReason::EthtoolNoDevice,
            EthtoolError::NotSupported { .. } => ReadErrorReason::EthtoolNotSupported,
            EthtoolError::CountChanged { .. } => ReadErrorReason::EthtoolCountChanged,
            EthtoolError::BadName { .. } => ReadErrorReason::EthtoolBadName,
            EthtoolError::Io { .. } => ReadErrorReason::EthtoolIo,
            EthtoolError::Parse { .. } => ReadErrorReason::EthtoolParse,
        }
    }
}

/// Where driver statistics come from.
pub trait EthtoolSource: Send + Sync + std::fmt::Debug {
    /// All statistics of `netdev`, in driver order.
    fn stats(&self, netdev: &str) -> Result<Vec<RawStat>, EthtoolError>;

    /// As [`EthtoolSource::stats`], sharing `previous` (the names of this netdev's last read)
    /// when the driver lists the same names.
    fn read(
        &self,
        netdev: &str,
        previous: Option<&StatNames>,
    ) -> Result<EthtoolStats, EthtoolError> {
        self.stats(netdev).map(|stats| reusing(stats, previous))
    }
}

/// The real kernel: SIOCETHTOOL ioctls, no capability needed.
#[derive(Debug, Default)]
pub struct IoctlSource;

impl EthtoolSource for IoctlSource {
    fn stats(&self, netdev: &str) -> Result<Vec<RawStat>, EthtoolError> {
        super::ethtool_ioctl::read_stats(netdev)
    }

    fn read(
        &self,
        netdev: &str,
        previous: Option<&StatNames>,
    ) -> Result<EthtoolStats, EthtoolError> {
        super::ethtool_ioctl::read_stats_sharing(netdev, previous)
    }
}

/// Statistics from `<dir>/<netdev>.txt` files in `ethtool -S` output format. Only used when the
/// operator selects it explicitly (fixtures, the simulated fabric).
#[derive(Debug)]
pub struct FileSource {
    dir: PathBuf,
}

impl FileSource {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSource { dir: dir.into() }
    }

    pub fn path_for(&self, netdev: &str) -> PathBuf {
        self.dir.join(format!("{netdev}.txt"))
    }
}

impl FileSource {
    /// `parse(path, bytes)` of `netdev`'s stats file, read into this thread's buffer: the walk
    /// reads every netdev's file at every scrape, and a fresh buffer of a few KiB each time
    /// made the allocator consolidate its free lists.
    fn with_bytes<R>(
        &self,
        netdev: &str,
        parse: impl FnOnce(&Path, &[u8]) -> Result<R, EthtoolError>,
    ) -> Result<R, EthtoolError> {
        thread_local! {
            static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        if netdev.is_empty() || netdev.contains('/') || netdev.starts_with('.') {
            return Err(EthtoolError::BadName {
                netdev: netdev.to_string(),
            });
        }
        let path = self.path_for(netdev);
        BUFFER.with_borrow_mut(|bytes| {
            let read = crate::bounded_read::read_into(&path, MAX_STATS_FILE_BYTES, bytes);
            let parsed = match read {
                Ok(()) => parse(&path, bytes),
                Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
                    Err(EthtoolError::NoDevice {
                        netdev: netdev.to_string(),
                    })
                }
                Err(source) => Err(EthtoolError::Io {
                    netdev: netdev.to_string(),
                    op: "read stats file",
                    source,
                }),
            };
            // A huge file's buffer is not kept for the thread's life.
            if bytes.capacity() > KEPT_BUFFER_BYTES {
                *bytes = Vec::new();
            }
            parsed
        })
    }
}

impl EthtoolSource for FileSource {
    fn stats(&self, netdev: &str) -> Result<Vec<RawStat>, EthtoolError> {
        self.with_bytes(netdev, parse_ethtool_text)
    }

    fn read(
        &self,
        netdev: &str,
        previous: Option<&StatNames>,
    ) -> Result<EthtoolStats, EthtoolError> {
        self.with_bytes(netdev, |path, bytes| {
            let mut stats = StatsBuilder::new(previous);
            for_each_stat(path, bytes, |name, value| stats.push(name, value))?;
            Ok(stats.finish())
        })
    }
}

/// An `ethtool -S` of a NIC with hundreds of queues is some hundred KiB; a stats file larger
/// than this is not one (a link to `/dev/zero` would otherwise be read until memory runs out).
const MAX_STATS_FILE_BYTES: u64 = 8 << 20;

/// The largest read buffer a thread keeps between reads: a NIC with a few hundred queues.
const KEPT_BUFFER_BYTES: usize = 256 << 10;

/// Parses `ethtool -S` output: an optional `NIC statistics:` header, then `name: value` lines.
/// Names may contain spaces, dots and colons (`Queue[0] AllocFails`), so split on the last `: `.
pub fn parse_ethtool_text(path: &Path, bytes: &[u8]) -> Result<Vec<RawStat>, EthtoolError> {
    let mut stats = Vec::new();
    for_each_stat(path, bytes, |name, value| {
        stats.push((name.to_string(), value))
    })?;
    Ok(stats)
}

/// `line.rsplit_once(": ")`, searched from the end byte by byte: the value is a few digits, so
/// this finds it at once where the two-way string search set itself up for every line.
fn split_last_colon_space(line: &str) -> Option<(&str, &str)> {
    let at = line.as_bytes().windows(2).rposition(|w| w == b": ")?;
    // Both halves split at ASCII bytes: valid UTF-8 boundaries.
    Some((&line[..at], &line[at + 2..]))
}

/// The common line, `    name: 1234`, read from its end: the digits, the blanks before them,
/// `: `, the name. What is not that exactly (a header, a sign, a value of 20 digits that may
/// not fit) is `None`, and the general parse below takes it. Where both take a line they agree:
/// the colon found is the last one followed by a space, as the general parse's. A third of the
/// scrape's parse went to searching each line's `: ` and then parsing the value forwards.
fn common_stat_line(line: &str) -> Option<(&str, u64)> {
    let bytes = line.as_bytes();
    let mut end = bytes.len();
    while end > 0 && bytes[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    let digits_end = end;
    let mut value = 0u64;
    let mut scale = 1u64;
    while end > 0 && bytes[end - 1].is_ascii_digit() {
        // At most 19 digits: every such number fits in a u64.
        if digits_end - end == 19 {
            return None;
        }
        end -= 1;
        value += u64::from(bytes[end] - b'0') * scale;
        scale = scale.wrapping_mul(10);
    }
    if end == digits_end {
        return None;
    }
    let digits_start = end;
    while end > 0 && bytes[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    // `: ` right before the value's blanks.
    if end == digits_start || end == 0 || bytes[end - 1] != b':' || bytes[end] != b' ' {
        return None;
    }
    // Split at ASCII bytes: char boundaries.
    let name = line[..end - 1].trim_ascii();
    Some((name, value))
}

/// Calls `stat(name, value)` for each statistic of `ethtool -S` output, in order.
fn for_each_stat(
    path: &Path,
    bytes: &[u8],
    mut stat: impl FnMut(&str, u64),
) -> Result<(), EthtoolError> {
    let text = std::str::from_utf8(bytes).map_err(|e| EthtoolError::Parse {
        path: path.to_path_buf(),
        line: 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count(),
        reason: "not UTF-8".into(),
    })?;
    // Lines split with one SIMD pass over the text (`str::lines` searched for each line's end
    // anew, half of this parse), and ASCII trims (ethtool prints ASCII; the Unicode-aware
    // `trim` was a per-line cost). A trailing `\r` goes with the trim, as `lines` drops it.
    let ends = memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len()));
    let mut start = 0;
    for (index, end) in ends.enumerate() {
        // Both ends are at a newline or the text's end: char boundaries.
        let line = &text[start..end];
        start = end + 1;
        if let Some((name, value)) = common_stat_line(line) {
            stat(name, value);
            continue;
        }
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() || trimmed.ends_with("statistics:") {
            continue;
        }
        let parse_error = |reason: String| EthtoolError::Parse {
            path: path.to_path_buf(),
            line: index + 1,
            reason,
        };
        let (name, value) = split_last_colon_space(trimmed)
            .ok_or_else(|| parse_error(format!("expected `name: value`, found {trimmed:?}")))?;
        let value = value
            .trim_ascii()
            .parse::<u64>()
            .map_err(|e| parse_error(format!("value of {name:?}: {e}")))?;
        stat(name.trim_ascii(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The general parse of one line, as `for_each_stat` does it without the common path.
    fn general(line: &str) -> Option<(&str, u64)> {
        let (name, value) = split_last_colon_space(line.trim_ascii())?;
        Some((name.trim_ascii(), value.trim_ascii().parse().ok()?))
    }

    /// The common path takes the usual lines, leaves the rest to the general parse, and where
    /// it takes a line it reads what the general parse reads.
    #[test]
    fn the_common_line_path_agrees_with_the_general_parse() {
        let taken = [
            ("     rx_prio3_pause: 12", ("rx_prio3_pause", 12)),
            ("tx_bytes: 0", ("tx_bytes", 0)),
            ("Queue[0] AllocFails: 7\r", ("Queue[0] AllocFails", 7)),
            ("a: b: 5", ("a: b", 5)),
            ("name: \t42  ", ("name", 42)),
            (": 5", ("", 5)),
            (
                "max: 9999999999999999999",
                ("max", 9_999_999_999_999_999_999),
            ),
        ];
        for (line, expected) in taken {
            assert_eq!(common_stat_line(line), Some(expected), "{line:?}");
            assert_eq!(general(line), Some(expected), "{line:?}");
        }
        let left = [
            "NIC statistics:",
            "",
            "   ",
            "     5",
            "abc:5",
            "x 5",
            "name:\t5",
            "name: +5",
            "name: -5",
            "name: 5x",
            "name: 18446744073709551615",
            "name: 18446744073709551616",
            "name: 00000000000000000000001",
        ];
        for line in left {
            assert_eq!(common_stat_line(line), None, "{line:?}");
        }
        // What the general parse makes of those (a value, or the error the file reports).
        assert_eq!(general("name: +5"), Some(("name", 5)));
        assert_eq!(
            general("name: 18446744073709551615"),
            Some(("name", u64::MAX))
        );
        assert_eq!(general("name: 00000000000000000000001"), Some(("name", 1)));
        assert_eq!(general("name: 18446744073709551616"), None);
        assert_eq!(general("abc:5"), None);
    }

    /// A read whose names match the previous read's shares that list; any change (a renamed,
    /// added or removed statistic) gives a list of its own with the right names.
    #[test]
    fn a_read_shares_an_unchanged_name_list() {
        let dir = tempfile::tempdir().unwrap();
        let source = FileSource::new(dir.path());
        let write = |text: &str| std::fs::write(dir.path().join("eth0.txt"), text).unwrap();
        let names =
            |stats: &EthtoolStats| stats.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>();
        write("NIC statistics:\n a: 1\n b: 2\n c: 3\n");
        let first = source.read("eth0", None).unwrap();
        assert_eq!(
            first.iter().collect::<Vec<_>>(),
            [("a", 1), ("b", 2), ("c", 3)]
        );
        write("NIC statistics:\n a: 4\n b: 5\n c: 6\n");
        let same = source.read("eth0", Some(first.names())).unwrap();
        assert!(
            Arc::ptr_eq(first.names(), same.names()),
            "one list for both"
        );
        assert_eq!(
            same.iter().collect::<Vec<_>>(),
            [("a", 4), ("b", 5), ("c", 6)]
        );
        write("NIC statistics:\n a: 1\n x: 2\n c: 3\n d: 4\n");
        let changed = source.read("eth0", Some(first.names())).unwrap();
        assert_eq!(names(&changed), ["a", "x", "c", "d"]);
        assert_eq!(changed.get("x"), Some(2));
        write("NIC statistics:\n a: 1\n b: 2\n");
        let shorter = source.read("eth0", Some(first.names())).unwrap();
        assert_eq!(names(&shorter), ["a", "b"]);
        write("NIC statistics:\n a: 1\n b: 2\n c: 3\n d: 4\n");
        let longer = source.read("eth0", Some(first.names())).unwrap();
        assert_eq!(names(&longer), ["a", "b", "c", "d"]);
        // The default read (the ioctl source's) shares an equal list too.
        let pairs = vec![("a".to_string(), 7), ("b".into(), 8), ("c".into(), 9)];
        let reused = reusing(pairs, Some(first.names()));
        assert!(Arc::ptr_eq(first.names(), reused.names()));
        assert_eq!(reused.get("c"), Some(9));
    }

    #[test]
    fn the_split_is_rsplit_once() {
        for line in [
            "a: 1",
            "[0]: rx_discards: 2",
            "x:1",
            ": 3",
            "a: ",
            "a:: 4",
            "a: : 5",
            "é: 6",
            "",
            ":",
        ] {
            assert_eq!(
                split_last_colon_space(line),
                line.rsplit_once(": "),
                "{line:?}"
            );
        }
    }

    #[test]
    fn parses_ethtool_s_output() {
        let text = b"NIC statistics:\n     rx_packets: 12\n     rx_prio3_pause: 7\n     Queue[0] AllocFails: 3\n";
        let stats = parse_ethtool_text(Path::new("x"), text).unwrap();
        assert_eq!(
            stats,
            vec![
                ("rx_packets".to_string(), 12),
                ("rx_prio3_pause".to_string(), 7),
                ("Queue[0] AllocFails".to_string(), 3)
            ]
        );
    }

    #[test]
    fn lines_split_as_str_lines_splits_them() {
        // CRLF, no final newline, blank lines, a lone `\r`: the same stats and line numbers.
        let text = b"NIC statistics:\r\n a: 1\r\n\r\n\n b: 2\r\r\n c: 3";
        let stats = parse_ethtool_text(Path::new("x"), text).unwrap();
        let expected: Vec<RawStat> = vec![("a".into(), 1), ("b".into(), 2), ("c".into(), 3)];
        assert_eq!(stats, expected);
        assert!(parse_ethtool_text(Path::new("x"), b"").unwrap().is_empty());
        assert!(parse_ethtool_text(Path::new("x"), b"\n\n")
            .unwrap()
            .is_empty());
        let err = parse_ethtool_text(Path::new("f"), b"a: 1\r\n\r\nno value\r\n").unwrap_err();
        assert!(err.to_string().starts_with("f: line 3:"), "{err}");
    }

    #[test]
    fn bnxt_ring_lines_and_tabs() {
        // bnxt_en indents with tabs and prints per-ring statistics as `[ring]: name: value`.
        let text = b"NIC statistics:\n\t[0]: rx_discards: 0\n\t[1]: rx_discards: 2\n\trx_pfc_ena_frames_pri3: 9\n";
        let stats = parse_ethtool_text(Path::new("x"), text).unwrap();
        assert_eq!(
            stats,
            vec![
                ("[0]: rx_discards".to_string(), 0),
                ("[1]: rx_discards".to_string(), 2),
                ("rx_pfc_ena_frames_pri3".to_string(), 9)
            ]
        );
    }

    #[test]
    fn rejects_garbage_with_line_number() {
        let err = parse_ethtool_text(Path::new("f"), b"NIC statistics:\n rx: 1\n tx: lots\n")
            .unwrap_err();
        assert!(matches!(err, EthtoolError::Parse { line: 3, .. }), "{err}");
    }

    #[test]
    fn file_source_refuses_path_like_names() {
        let source = FileSource::new("/nonexistent");
        assert!(matches!(
            source.stats("../etc/passwd"),
            Err(EthtoolError::BadName { .. })
        ));
    }
}
