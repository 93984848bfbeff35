//! When a log line was written, from a timestamp at its start, where the line has one.
//!
//! Who writes them:
//! - NCCL itself since v2.26 (`NCCL_DEBUG_TIMESTAMP_FORMAT`, strftime, default `[%F %T] `, local
//!   time; `NCCL_DEBUG_TIMESTAMP_LEVELS` defaults to WARN only, so INFO lines have none unless
//!   it is set);
//! - wrappers: `kubectl logs --timestamps` / `docker logs -t` (RFC 3339, UTC, `Z`), journald's
//!   short-iso (`+0000` offsets), Python logging's `%(asctime)s` (`2024-05-01 10:00:00,123`),
//!   CloudWatch exports (`  | 2024-...Z | `), Open MPI's `--timestamp-output` (ctime(),
//!   `Mon May  1 10:00:00 2024`).
//!
//! Times without an offset are read as UTC: only the times of one log are compared with each
//! other, and they share their clock (a DST change inside a gap shifts it by an hour).

use std::sync::LazyLock;

use jiff::civil::DateTime;
use jiff::{tz::Offset, Timestamp};
use regex::Regex;

/// How far into a line its timestamp may start: after a short tag (`0: ` from `srun -l`,
/// `[1,0]<stdout>:` from mpirun, `[rank0]:` from torchrun), never in a message's text.
const MAX_LEAD: usize = 40;
/// Bytes of a line searched: the lead and the longest timestamp after it.
const SEARCHED: usize = MAX_LEAD + 40;

/// ISO 8601 date and time, `T` or a space between, `.` or `,` before the fraction, an optional
/// `Z` or offset (`+00:00`, `+0000`, `+00`).
static ISO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?P<offset>[Zz]|[+-]\d{2}(?::?\d{2})?)?",
    )
    .expect("static regex")
});

/// ctime(): `Www Mmm dd hh:mm:ss yyyy`, the day padded with a space.
static CTIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d{2}:\d{2}:\d{2} \d{4}")
        .expect("static regex")
});

/// The instant of the first timestamp near the start of `line`; `None` when it has none or
/// it names no real date (a month 13, a February 30).
pub(crate) fn line_time(line: &str) -> Option<Timestamp> {
    let mut end = line.len().min(SEARCHED);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let head = &line[..end];
    // Cheap filter: every form has `hh:mm:ss`.
    if !head.contains(':') {
        return None;
    }
    if let Some(caps) = ISO.captures(head) {
        let whole = caps.get(0)?;
        if whole.start() <= MAX_LEAD {
            return iso(whole.as_str(), caps.name("offset").is_some());
        }
    }
    let found = CTIME.find(head).filter(|m| m.start() <= MAX_LEAD)?;
    let time = jiff::fmt::strtime::parse("%a %b %e %H:%M:%S %Y", found.as_str()).ok()?;
    Offset::UTC.to_timestamp(time.to_datetime().ok()?).ok()
}

fn iso(text: &str, has_offset: bool) -> Option<Timestamp> {
    // Python's `,mmm` is ISO 8601's other decimal sign; jiff's grammar takes both, the
    // normalization keeps this independent of that detail.
    let text = text.replacen(',', ".", 1);
    if has_offset {
        return text.parse::<Timestamp>().ok();
    }
    let civil: DateTime = text.parse().ok()?;
    Offset::UTC.to_timestamp(civil).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn nccl_own_prefix_with_and_without_subseconds() {
        assert_eq!(
            line_time("[2026-03-04 09:15:01] gpu-a:7:9 [0] NCCL INFO Init COMPLETE"),
            Some(at("2026-03-04T09:15:01Z"))
        );
        assert_eq!(
            line_time("[2026-03-04 09:15:01.250] gpu-a:7:9 [0] NCCL INFO x"),
            Some(at("2026-03-04T09:15:01.25Z"))
        );
    }

    #[test]
    fn wrappers_rfc3339_journald_python_ctime() {
        // kubectl logs --timestamps: nanoseconds and Z.
        assert_eq!(
            line_time("2026-05-01T10:00:00.123456789Z gpu-a:7:9 [0] NCCL INFO x"),
            Some(at("2026-05-01T10:00:00.123456789Z"))
        );
        // journald short-iso: an offset without a colon counts.
        assert_eq!(
            line_time("2026-05-01T12:00:00+0200 gpu-a trainer[77]: gpu-a:7:9 [0] NCCL INFO x"),
            Some(at("2026-05-01T10:00:00Z"))
        );
        // Python logging, after srun -l's task label.
        assert_eq!(
            line_time("3: [2026-05-01 10:00:00,500] INFO step 10 loss 2.31"),
            Some(at("2026-05-01T10:00:00.5Z"))
        );
        // Open MPI --timestamp-output with --tag-output: ctime(), the day space-padded.
        assert_eq!(
            line_time("Fri May  1 10:00:00 2026[1,0]<stdout>:gpu-a:7:9 [0] NCCL INFO x"),
            Some(at("2026-05-01T10:00:00Z"))
        );
        // A CloudWatch export.
        assert_eq!(
            line_time("  | 2026-05-01T10:00:00.074Z | gpu-a:7:9 [0] NCCL INFO x"),
            Some(at("2026-05-01T10:00:00.074Z"))
        );
    }

    #[test]
    fn no_timestamp_or_one_that_is_not_a_date() {
        assert_eq!(line_time("gpu-a:7:9 [0] NCCL INFO Using network IB"), None);
        assert_eq!(
            line_time("[2026-13-01 10:00:00] gpu-a:7:9 [0] NCCL INFO x"),
            None
        );
        assert_eq!(
            line_time("[2026-02-30 10:00:00] gpu-a:7:9 [0] NCCL INFO x"),
            None
        );
        // A date deep in a message is no time of the line.
        assert_eq!(
            line_time(
                "gpu-a:7:9 [0] NCCL INFO checkpoint of run 42 written at 2026-05-01 10:00:00"
            ),
            None
        );
        // Multi-byte text around the cut does not panic.
        assert_eq!(line_time(&"é".repeat(100)), None);
        assert_eq!(line_time(""), None);
    }
}
