//! Parsers for the text of single sysfs attribute files. Pure functions: no I/O, so they can be
//! fuzzed and unit-tested on every quirk seen in the field.

use super::reason::ReadErrorReason;

/// Why a counter file's content was not a counter; [`ValueError::reason`] is its `reason` label
/// in `rdma_exporter_read_errors_total`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Old kernels print this when the PMA MAD fails (iWARP, VFs, restricted PFs).
    #[error("counter not available (N/A (no PMA))")]
    NotAvailable,
    #[error("empty file")]
    Empty,
    #[error("content is not UTF-8")]
    NotUtf8,
    #[error("not a number: {0:?}")]
    NotANumber(String),
    #[error("number larger than 64 bits: {0:?}")]
    Overflow(String),
}

impl ValueError {
    pub fn reason(&self) -> ReadErrorReason {
        match self {
            ValueError::NotAvailable => ReadErrorReason::NotAvailable,
            ValueError::Empty => ReadErrorReason::Empty,
            ValueError::NotUtf8 => ReadErrorReason::NotUtf8,
            ValueError::NotANumber(_) => ReadErrorReason::Parse,
            ValueError::Overflow(_) => ReadErrorReason::Overflow,
        }
    }
}

/// Trims the kernel's trailing newline (and stray blank lines some drivers leave) from text.
pub fn attribute_text(bytes: &[u8]) -> Result<&str, ValueError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ValueError::NotUtf8)?;
    let text = text.trim();
    if text.is_empty() {
        return Err(ValueError::Empty);
    }
    Ok(text)
}

/// A counter: decimal, or `0x` hex as some drivers print.
pub fn counter(bytes: &[u8]) -> Result<u64, ValueError> {
    match kernel_decimal(bytes) {
        Some(value) => Ok(value),
        None => any_counter(bytes),
    }
}

/// The kernel's own spelling, `<decimal>\n` with at most 19 digits (which cannot overflow),
/// read without the UTF-8 check, trim and searches of [`any_counter`]: nearly all of the 600
/// files a scrape of a ConnectX node reads.
fn kernel_decimal(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.strip_suffix(b"\n")?;
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u64::from(byte - b'0'))
    })
}

/// Every spelling of a counter that [`counter`] accepts.
fn any_counter(bytes: &[u8]) -> Result<u64, ValueError> {
    let text = attribute_text(bytes)?;
    if text.contains("N/A") {
        return Err(ValueError::NotAvailable);
    }
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    u64::from_str_radix(digits, radix).map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => ValueError::Overflow(text.to_string()),
        _ => ValueError::NotANumber(text.to_string()),
    })
}

/// `state` and `phys_state` are `"<id>: <NAME>"`, e.g. `"4: ACTIVE"`, `"5: LinkUp"`.
pub fn state(bytes: &[u8]) -> Result<(u32, String), ValueError> {
    let text = attribute_text(bytes)?;
    let (id, name) = text
        .split_once(':')
        .ok_or_else(|| ValueError::NotANumber(text.to_string()))?;
    let id = id
        .trim()
        .parse::<u32>()
        .map_err(|_| ValueError::NotANumber(text.to_string()))?;
    Ok((id, name.trim().to_string()))
}

/// `rate` is `"<Gb/s> Gb/sec (<width>X<speed>)"`, e.g. `"400 Gb/sec (4X NDR)"`, `"2.5 Gb/sec (1X SDR)"`,
/// `"10 Gb/sec (4X)"`. Returns bytes per second (1 Gb/s = 125,000,000 B/s).
pub fn rate_bytes_per_second(bytes: &[u8]) -> Result<f64, ValueError> {
    let text = attribute_text(bytes)?;
    let number = text.split_whitespace().next().unwrap_or_default();
    let gbps: f64 = number
        .parse()
        .map_err(|_| ValueError::NotANumber(text.to_string()))?;
    // A finite Gb/s figure can still overflow once converted (1e301 Gb/s): check the result.
    let bytes_per_second = gbps * 125_000_000.0;
    if !bytes_per_second.is_finite() || gbps < 0.0 {
        return Err(ValueError::NotANumber(text.to_string()));
    }
    Ok(bytes_per_second)
}

/// A free-text attribute (fw_ver, board_id, link_layer, netdev names).
pub fn text(bytes: &[u8]) -> Result<String, ValueError> {
    attribute_text(bytes).map(str::to_string)
}

/// An identity attribute where empty is the driver's "none" (soft-RoCE's `fw_ver`): `None`.
pub(crate) fn text_or_none(bytes: &[u8]) -> Result<Option<String>, ValueError> {
    match text(bytes) {
        Err(ValueError::Empty) => Ok(None),
        other => other.map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters() {
        assert_eq!(counter(b"42\n"), Ok(42));
        assert_eq!(counter(b"0x1f\n"), Ok(31));
        assert_eq!(counter(b"18446744073709551615\n"), Ok(u64::MAX));
        assert_eq!(counter(b"N/A (no PMA)\n"), Err(ValueError::NotAvailable));
        assert_eq!(counter(b""), Err(ValueError::Empty));
        assert_eq!(counter(b"\n\n"), Err(ValueError::Empty));
        assert_eq!(counter(b"\xff\xfe"), Err(ValueError::NotUtf8));
        assert_eq!(
            counter(b"18446744073709551616"),
            Err(ValueError::Overflow("18446744073709551616".into()))
        );
        assert_eq!(counter(b"-1"), Err(ValueError::NotANumber("-1".into())));
        assert_eq!(
            counter(b"12 34"),
            Err(ValueError::NotANumber("12 34".into()))
        );
    }

    #[test]
    fn the_kernel_spelling_reads_as_every_spelling_does() {
        let inputs: [&[u8]; 12] = [
            b"0\n",
            b"42\n",
            b"007\n",
            b"9999999999999999999\n",
            b"18446744073709551615\n",
            b"18446744073709551616\n",
            b"\n",
            b"42",
            b"4 2\n",
            b"+5\n",
            b"42\n\n",
            b"0x1f\n",
        ];
        for input in inputs {
            if let Some(value) = kernel_decimal(input) {
                assert_eq!(any_counter(input), Ok(value), "{input:?}");
            }
            assert_eq!(counter(input), any_counter(input), "{input:?}");
        }
        assert_eq!(
            kernel_decimal(b"9999999999999999999\n"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(
            kernel_decimal(b"18446744073709551615\n"),
            None,
            "20 digits: the general path"
        );
        assert_eq!(kernel_decimal(b"42"), None, "no newline: the general path");
    }

    #[test]
    fn states() {
        assert_eq!(state(b"4: ACTIVE\n"), Ok((4, "ACTIVE".into())));
        assert_eq!(state(b"5: LinkUp\n"), Ok((5, "LinkUp".into())));
        assert!(state(b"ACTIVE").is_err());
        assert!(state(b"x: ACTIVE").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(rate_bytes_per_second(b"400 Gb/sec (4X NDR)\n"), Ok(50e9));
        assert_eq!(
            rate_bytes_per_second(b"2.5 Gb/sec (1X SDR)\n"),
            Ok(312_500_000.0)
        );
        assert_eq!(rate_bytes_per_second(b"10 Gb/sec (4X)"), Ok(1.25e9));
        assert!(rate_bytes_per_second(b"fast").is_err());
        assert!(rate_bytes_per_second(b"NaN Gb/sec").is_err());
        assert!(rate_bytes_per_second(b"1e301 Gb/sec").is_err());
    }

    #[test]
    fn text_keeps_only_the_value() {
        assert_eq!(text(b"Ethernet\n\n"), Ok("Ethernet".into()));
        assert_eq!(text(b"  \n"), Err(ValueError::Empty));
    }
}
