//! Driver statistics of a netdev (`ethtool -S`), behind a small trait so that tests and the
//! simulated fabric can feed the same numbers from text files.

use std::path::{Path, PathBuf};

use super::reason::ReadErrorReason;

/// One driver statistic as the driver names it (`rx_prio3_pause`) and its raw value.
pub type RawStat = (String, u64);

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
}

/// The real kernel: SIOCETHTOOL ioctls, no capability needed.
#[derive(Debug, Default)]
pub struct IoctlSource;

impl EthtoolSource for IoctlSource {
    fn stats(&self, netdev: &str) -> Result<Vec<RawStat>, EthtoolError> {
        super::ethtool_ioctl::read_stats(netdev)
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

impl EthtoolSource for FileSource {
    fn stats(&self, netdev: &str) -> Result<Vec<RawStat>, EthtoolError> {
        if netdev.is_empty() || netdev.contains('/') || netdev.starts_with('.') {
            return Err(EthtoolError::BadName {
                netdev: netdev.to_string(),
            });
        }
        let path = self.path_for(netdev);
        let bytes =
            crate::bounded_read::read(&path, MAX_STATS_FILE_BYTES).map_err(
                |source| match source.kind() {
                    std::io::ErrorKind::NotFound => EthtoolError::NoDevice {
                        netdev: netdev.to_string(),
                    },
                    _ => EthtoolError::Io {
                        netdev: netdev.to_string(),
                        op: "read stats file",
                        source,
                    },
                },
            )?;
        parse_ethtool_text(&path, &bytes)
    }
}

/// An `ethtool -S` of a NIC with hundreds of queues is some hundred KiB; a stats file larger
/// than this is not one (a link to `/dev/zero` would otherwise be read until memory runs out).
const MAX_STATS_FILE_BYTES: u64 = 8 << 20;

/// Parses `ethtool -S` output: an optional `NIC statistics:` header, then `name: value` lines.
/// Names may contain spaces, dots and colons (`Queue[0] AllocFails`), so split on the last `: `.
pub fn parse_ethtool_text(path: &Path, bytes: &[u8]) -> Result<Vec<RawStat>, EthtoolError> {
    let text = std::str::from_utf8(bytes).map_err(|e| EthtoolError::Parse {
        path: path.to_path_buf(),
        line: 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count(),
        reason: "not UTF-8".into(),
    })?;
    let mut stats = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.ends_with("statistics:") {
            continue;
        }
        let parse_error = |reason: String| EthtoolError::Parse {
            path: path.to_path_buf(),
            line: index + 1,
            reason,
        };
        let (name, value) = trimmed
            .rsplit_once(": ")
            .ok_or_else(|| parse_error(format!("expected `name: value`, found {trimmed:?}")))?;
        let value = value
            .trim()
            .parse::<u64>()
            .map_err(|e| parse_error(format!("value of {name:?}: {e}")))?;
        stats.push((name.trim().to_string(), value));
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

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
