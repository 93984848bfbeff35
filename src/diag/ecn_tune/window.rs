//! The time window the evidence is taken over: `--start/--end` (RFC 3339 or Unix seconds),
//! `--last 10m`, or the span an nccl-tests output gives (`nccl_window.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Shorter than this, a window holds too few evaluations of the 1-minute recording rules to
/// tell a sustained state from a blip.
pub const MIN_WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Unix seconds.
    pub start: f64,
    pub end: f64,
    /// Where the window came from (`--last 10m`, `--start/--end`, the nccl-tests file).
    pub source: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WindowError {
    #[error("{flag} {text:?}: {message}")]
    BadTime {
        flag: &'static str,
        text: String,
        message: String,
    },
    #[error("the window ends ({end}) before it starts ({start})")]
    Reversed { start: String, end: String },
    #[error("the window is {seconds:.0} s long; it must be at least {} s (the recording rules average over 1 minute)", MIN_WINDOW.as_secs())]
    TooShort { seconds: f64 },
    #[error("the window ends at {end}, in the future: Prometheus has no data there yet")]
    InTheFuture { end: String },
}

impl Window {
    pub fn seconds(&self) -> f64 {
        self.end - self.start
    }

    /// `[W]` in PromQL: whole seconds, at least one.
    pub fn range(&self) -> String {
        format!("{}s", (self.seconds().round() as u64).max(1))
    }

    /// Checks the window against the clock `now` (Unix seconds).
    pub fn checked(self, now: f64) -> Result<Window, WindowError> {
        if self.end <= self.start {
            return Err(WindowError::Reversed {
                start: rfc3339(self.start),
                end: rfc3339(self.end),
            });
        }
        if self.seconds() < MIN_WINDOW.as_secs_f64() {
            return Err(WindowError::TooShort {
                seconds: self.seconds(),
            });
        }
        // A minute of clock skew between this host and Prometheus' is tolerated.
        if self.end > now + 60.0 {
            return Err(WindowError::InTheFuture {
                end: rfc3339(self.end),
            });
        }
        Ok(self)
    }
}

pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `--last D`: the D before `now`.
pub fn last(duration: Duration, now: f64) -> Window {
    Window {
        start: now - duration.as_secs_f64(),
        end: now,
        source: format!("--last {}s", duration.as_secs()),
    }
}

/// A time as Prometheus' API takes it: RFC 3339 (`2025-10-14T12:00:00Z`, an offset, fractional
/// seconds) or Unix seconds (`1760443200`, `1760443200.5`).
pub(crate) fn parse_time(flag: &'static str, text: &str) -> Result<f64, WindowError> {
    let bad = |message: &str| WindowError::BadTime {
        flag,
        text: text.to_string(),
        message: message.to_string(),
    };
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return match trimmed.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(bad("not a number of Unix seconds")),
        };
    }
    parse_rfc3339(trimmed).ok_or_else(|| {
        bad("expected RFC 3339 (2025-10-14T12:00:00Z, 2025-10-14T14:00:00+02:00) or Unix seconds")
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Date and time fields, checked for range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CivilTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl CivilTime {
    /// `YYYY-MM-DD?HH:MM:SS` where `?` is `T`, `t` or a space.
    pub fn parse(text: &str) -> Option<CivilTime> {
        let b = text.as_bytes();
        if b.len() != 19
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't' | b' ')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<u32> {
            let digits = text.get(range)?;
            if !digits.bytes().all(|d| d.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        };
        let t = CivilTime {
            year: i64::from(number(0..4)?),
            month: number(5..7)?,
            day: number(8..10)?,
            hour: number(11..13)?,
            minute: number(14..16)?,
            second: number(17..19)?,
        };
        let valid = (1..=12).contains(&t.month)
            && t.day >= 1
            && t.day <= days_in_month(t.year, t.month)
            && t.hour < 24
            && t.minute < 60
            && t.second < 61;
        valid.then_some(t)
    }

    /// Unix seconds, reading the fields as UTC.
    pub(crate) fn as_utc(&self) -> f64 {
        let days = days_from_civil(self.year, self.month, self.day);
        (days * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)) as f64
    }
}

/// RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
pub(crate) fn parse_rfc3339(text: &str) -> Option<f64> {
    let base = CivilTime::parse(text.get(..19)?)?;
    let mut rest = &text[19..];
    let mut fraction = 0.0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after_dot.len());
        if digits == 0 || digits > 9 {
            return None;
        }
        fraction = format!("0.{}", &after_dot[..digits]).parse().ok()?;
        rest = &after_dot[digits..];
    }
    let offset_seconds = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let b = rest.as_bytes();
            if b.len() != 6 || b[3] != b':' {
                return None;
            }
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 3600 + minutes * 60)
        }
    };
    Some(base.as_utc() + fraction - offset_seconds as f64)
}

/// Unix seconds as RFC 3339 in UTC, to the second.
pub(crate) fn rfc3339(unix: f64) -> String {
    if !unix.is_finite() {
        return "invalid time".into();
    }
    let secs = unix.floor() as i64;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_and_unix_times() {
        // 2015-07-01T20:10:51.781Z is 1435781451.781 (the Prometheus API docs' example pair).
        let t = parse_time("--start", "2015-07-01T20:10:51.781Z").unwrap();
        assert!((t - 1_435_781_451.781).abs() < 1e-6, "{t}");
        assert_eq!(
            parse_time("--start", "2015-07-01T22:10:51+02:00").unwrap(),
            1_435_781_451.0
        );
        assert_eq!(
            parse_time("--start", "2015-07-01T15:10:51-05:00").unwrap(),
            1_435_781_451.0
        );
        assert_eq!(parse_time("--end", "1435781451").unwrap(), 1_435_781_451.0);
        assert_eq!(
            parse_time("--end", "1435781451.5").unwrap(),
            1_435_781_451.5
        );
        assert_eq!(parse_time("--end", "1970-01-01T00:00:00Z").unwrap(), 0.0);
        assert_eq!(
            parse_time("--end", "2024-02-29T00:00:00Z").unwrap(),
            1_709_164_800.0
        );
    }

    #[test]
    fn bad_times_are_refused_with_the_flag_named() {
        for text in [
            "",
            "yesterday",
            "2015-07-01",
            "2015-07-01T20:10:51",
            "2015-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2015-07-01T24:00:00Z",
            "2015-07-01T20:10:51+2:00",
            "2015-07-01T20:10:51.Z",
            "1.2.3",
            "2015-07-01T20:10:51Zjunk",
            "２０１５-07-01T20:10:51Z",
        ] {
            let e = parse_time("--start", text).unwrap_err();
            assert!(e.to_string().starts_with("--start "), "{text:?}: {e}");
        }
    }

    #[test]
    fn rfc3339_round_trips() {
        for unix in [
            0.0,
            951_782_400.0,
            1_435_781_451.0,
            1_760_443_200.0,
            4_102_444_800.0,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339(unix)).unwrap(), unix);
        }
        assert_eq!(rfc3339(1_435_781_451.781), "2015-07-01T20:10:51Z");
    }

    #[test]
    fn windows_are_checked() {
        let now = 10_000.0;
        let w = |start, end| Window {
            start,
            end,
            source: "test".into(),
        };
        assert_eq!(w(9_000.0, 9_600.0).checked(now).unwrap().range(), "600s");
        assert!(matches!(
            w(9_600.0, 9_000.0).checked(now),
            Err(WindowError::Reversed { .. })
        ));
        assert!(matches!(
            w(9_000.0, 9_030.0).checked(now),
            Err(WindowError::TooShort { .. })
        ));
        assert!(matches!(
            w(9_000.0, 20_000.0).checked(now),
            Err(WindowError::InTheFuture { .. })
        ));
        let l = last(Duration::from_secs(600), now);
        assert_eq!((l.start, l.end), (9_400.0, 10_000.0));
    }
}
