//! The window of an nccl-tests run, from its own output: only the timestamps are read here
//! (parsing the results is the `nccl-tests` command's job).
//!
//! nccl-tests writes times only when asked (NVIDIA/nccl-tests README and `src/util.cu`):
//! `-S 1` (`--report_timestamps`) adds a `%Y-%m-%d %H:%M:%S` timestamp to every result row, and
//! `-J FILE` (`--output_file`) writes a JSON report with `start_time` and `end_time` in the same
//! format. Both are the local time of the host that ran rank 0, without a zone: they are read
//! in this host's zone (`TZ` overrides it, e.g. `TZ=UTC`). A plain output has no time in it at
//! all; then the window must be given with `--start/--end`.

use std::io::Read;
use std::path::Path;

use super::window::{CivilTime, Window};

/// nccl-tests outputs of long runs stay far below this; anything larger is not one.
const MAX_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum NcclWindowError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no timestamps in this nccl-tests output (nccl-tests prints them with -S 1, or start_time/end_time in its -J JSON report): give the run's window with --start and --end")]
    NoTimestamps { path: String },
    #[error("{path}: only one timestamped row ({at}): the run's span is unknown; give --start and --end")]
    OneInstant { path: String, at: String },
    #[error("{path}: {message}")]
    Json { path: String, message: String },
    #[error("{path}: {text:?} is not a local time this host can convert")]
    LocalTime { path: String, text: String },
}

/// Reads `path` (`-`: standard input) and returns the span its timestamps cover.
pub fn read(path: &Path) -> Result<Window, NcclWindowError> {
    let name = if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    let read_error = |source| NcclWindowError::Read {
        path: name.clone(),
        source,
    };
    let bytes = if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(read_error(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than {MAX_BYTES} bytes"),
            )));
        }
        bytes
    } else {
        crate::bounded_read::read(path, MAX_BYTES).map_err(read_error)?
    };
    let text = String::from_utf8_lossy(&bytes);
    let (first, last) = span(&name, &text)?;
    let start = local_to_unix(&first).ok_or_else(|| NcclWindowError::LocalTime {
        path: name.clone(),
        text: first.clone(),
    })?;
    let end = local_to_unix(&last).ok_or_else(|| NcclWindowError::LocalTime {
        path: name.clone(),
        text: last.clone(),
    })?;
    Ok(Window {
        start,
        end,
        source: format!("nccl-tests {name}: {first} .. {last} (local time)"),
    })
}

/// The first and last timestamp of the run, as written (local time, no zone).
pub fn span(name: &str, text: &str) -> Result<(String, String), NcclWindowError> {
    let stamps = if text.trim_start().starts_with('{') {
        json_stamps(name, text)?
    } else {
        row_stamps(text)
    };
    let Some(first) = stamps.first().cloned() else {
        return Err(NcclWindowError::NoTimestamps { path: name.into() });
    };
    if stamps.iter().all(|s| *s == first) {
        return Err(NcclWindowError::OneInstant {
            path: name.into(),
            at: first,
        });
    }
    // Rows are written in order; a clock step backwards mid-run still gives a usable span.
    let mut sorted = stamps;
    sorted.sort_by_key(|a| civil_key(a));
    Ok((sorted[0].clone(), sorted[sorted.len() - 1].clone()))
}

fn civil_key(text: &str) -> String {
    // `YYYY-MM-DD HH:MM:SS` sorts as text once the separator is the same.
    text.replace('T', " ")
}

/// `start_time` and `end_time` of a `-J` report.
fn json_stamps(name: &str, text: &str) -> Result<Vec<String>, NcclWindowError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| NcclWindowError::Json {
            path: name.into(),
            message: format!("not an nccl-tests JSON report: {e}"),
        })?;
    let mut stamps = Vec::new();
    for key in ["start_time", "end_time"] {
        match value.get(key) {
            Some(serde_json::Value::String(s)) if CivilTime::parse(s).is_some() => {
                stamps.push(s.clone())
            }
            Some(other) => {
                return Err(NcclWindowError::Json {
                    path: name.into(),
                    message: format!("{key} is {other}, not a \"%Y-%m-%d %H:%M:%S\" time"),
                })
            }
            None => {}
        }
    }
    Ok(stamps)
}

/// Timestamps of result rows (`-S 1`): a row starts with a number (a size, or the timestamp
/// itself), possibly after an MPI rank tag such as `[1,0]<stdout>:`. Comment lines (`#`) and
/// NCCL log lines, which may carry times of their own, are not rows.
fn row_stamps(text: &str) -> Vec<String> {
    let mut stamps = Vec::new();
    for line in text.lines() {
        let mut row = line.trim_start();
        if row.starts_with('[') {
            if let Some(end) = row.find("]<stdout>:") {
                row = row[end + "]<stdout>:".len()..].trim_start();
            }
        }
        if !row.starts_with(|c: char| c.is_ascii_digit()) || row.contains("NCCL") {
            continue;
        }
        if let Some(stamp) = find_stamp(row) {
            stamps.push(stamp.to_string());
        }
    }
    stamps
}

/// The first `YYYY-MM-DD HH:MM:SS` in `row`.
fn find_stamp(row: &str) -> Option<&str> {
    let bytes = row.as_bytes();
    (0..bytes.len().saturating_sub(18)).find_map(|at| {
        let candidate = row.get(at..at + 19)?;
        let before_ok = at == 0 || !bytes[at - 1].is_ascii_digit();
        (before_ok && bytes[at + 10] == b' ' && CivilTime::parse(candidate).is_some())
            .then_some(candidate)
    })
}

/// A zone-less time read as this host's local time (mktime, which follows `TZ`).
fn local_to_unix(text: &str) -> Option<f64> {
    let t = CivilTime::parse(text)?;
    // SAFETY: `tm` is a plain C struct, all-zero is a valid value; every field mktime reads is
    // set below (tm_isdst = -1: let the zone rules decide daylight saving time).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = i32::try_from(t.year - 1900).ok()?;
    tm.tm_mon = t.month as i32 - 1;
    tm.tm_mday = t.day as i32;
    tm.tm_hour = t.hour as i32;
    tm.tm_min = t.minute as i32;
    tm.tm_sec = t.second as i32;
    tm.tm_isdst = -1;
    // SAFETY: mktime reads and normalizes the struct we own; it returns -1 on error.
    let unix = unsafe { libc::mktime(&mut tm) };
    (unix != -1).then_some(unix as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows as `writeBenchmarkLineBody` and `writeTimestamp` in nccl-tests' `src/util.cu`
    /// print them with `-S 1`: the in-place columns, then `%21s` of the local time.
    const WITH_TIMESTAMPS: &str = "\
# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
# Collective test starting: all_reduce_perf
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong           timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)           %Y-%m-%d %H:%M:%S
  8589934592    2147483648     float     sum      -1  45012.3  190.84  357.82       0  44987.1  190.94  358.02       0  2025-10-14 12:00:05
  8589934592    2147483648     float     sum      -1  45101.0  190.46  357.11       0  45003.9  190.87  357.89       0  2025-10-14 12:09:58
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 357.71
";

    #[test]
    fn timestamped_rows_give_the_span() {
        let (first, last) = span("t", WITH_TIMESTAMPS).unwrap();
        assert_eq!(first, "2025-10-14 12:00:05");
        assert_eq!(last, "2025-10-14 12:09:58");
    }

    #[test]
    fn rank_tags_and_leading_timestamps_are_rows_too() {
        let text =
            "[1,0]<stdout>:  2025-10-14 12:00:00   17179869184  4294967296  float  none  -1  1.0\n\
                    2025-10-14 12:05:00   17179869184  4294967296  float  none  -1  1.0\n";
        let (first, last) = span("t", text).unwrap();
        assert_eq!(
            (first.as_str(), last.as_str()),
            ("2025-10-14 12:00:00", "2025-10-14 12:05:00")
        );
    }

    #[test]
    fn nccl_log_lines_and_comments_do_not_count() {
        let text = "2025-10-14 11:00:00 host:1:1 [0] NCCL INFO Bootstrap\n\
                    # Collective test starting 2025-10-14 11:00:01\n\
                    1024 256 float sum -1 10.0 0.1 0.1 0 10.0 0.1 0.1 0\n";
        assert!(matches!(
            span("t", text),
            Err(NcclWindowError::NoTimestamps { .. })
        ));
    }

    #[test]
    fn json_reports_give_start_and_end_time() {
        let json = r#"{"version":3,"start_time":"2025-10-14 12:00:00","args":["all_reduce_perf"],"end_time":"2025-10-14 12:30:00"}"#;
        let (first, last) = span("r.json", json).unwrap();
        assert_eq!(
            (first.as_str(), last.as_str()),
            ("2025-10-14 12:00:00", "2025-10-14 12:30:00")
        );
        let bad = r#"{"start_time": 5}"#;
        assert!(matches!(
            span("r.json", bad),
            Err(NcclWindowError::Json { .. })
        ));
        assert!(matches!(
            span("r.json", "{not json"),
            Err(NcclWindowError::Json { .. })
        ));
    }

    #[test]
    fn a_single_instant_is_not_a_span() {
        let row = "1024 256 float sum -1 10.0 0.1 0.1 0 10.0 0.1 0.1 0  2025-10-14 12:00:00\n";
        let e = span("t", &row.repeat(3)).unwrap_err();
        assert!(matches!(e, NcclWindowError::OneInstant { .. }), "{e}");
        assert!(e.to_string().contains("--start"));
    }

    #[test]
    fn stamps_are_found_only_whole() {
        assert_eq!(find_stamp("12025-10-14 12:00:00"), None);
        assert_eq!(
            find_stamp("x 2025-10-14 12:00:00"),
            Some("2025-10-14 12:00:00")
        );
        assert_eq!(find_stamp("2025-13-14 12:00:00"), None);
        assert_eq!(find_stamp("2025-10-14"), None);
        assert_eq!(
            find_stamp("é2025-10-14 12:00:00"),
            Some("2025-10-14 12:00:00")
        );
    }
}
