//! What SFF-8472, SFF-8636 and CMIS share: the SFF-8024 identifier byte, the 16-bit monitor
//! encodings, vendor text fields. Sources: SFF-8024 (identifier values, as ethtool's
//! `module-common.h` lists them), SFF-8472 section 9 and SFF-8636 section 6.2.4 / CMIS
//! section 8.2.4 (monitor units, as ethtool's `sfpdiag.c`, `qsfp.c` and `cmis.c` convert them).

use super::{DecodeError, Standard};

/// Where every module answers: the identifier, lower memory and upper pages (SFF-8472's A0h).
pub(crate) const I2C_ADDRESS: u8 = 0x50;
/// SFF-8472's second address, A2h: diagnostics and their thresholds.
pub(crate) const I2C_ADDRESS_DIAGNOSTICS: u8 = 0x51;

// Monitor units, as divisors so that a step count converts to the nearest double of the
// decimal value (1000 steps of 0.1 µW print as 0.0001, not 9.999999999999999e-5).
/// Temperature: 1/256 °C steps, two's complement (all three standards).
const STEPS_PER_CELSIUS: f64 = 256.0;
/// Supply voltage: 100 µV steps.
const STEPS_PER_VOLT: f64 = 10_000.0;
/// Optical power: 0.1 µW steps.
const STEPS_PER_WATT: f64 = 10_000_000.0;
/// Laser bias: 2 µA steps (CMIS multiplies it by the advertised scaling factor).
const STEPS_PER_AMPERE: f64 = 500_000.0;

/// The standard a module identifier means (SFF-8024 Table 4-1). Byte 0 of address 0x50.
pub(crate) fn standard_of(identifier: u8) -> Result<Standard, DecodeError> {
    match identifier {
        // SFP/SFP+/SFP28 and modules soldered to the board with the SFP memory map.
        0x02 | 0x03 => Ok(Standard::Sff8472),
        // QSFP, QSFP+ (SFF-8436 memory map, which SFF-8636 continues), QSFP28.
        0x0C | 0x0D | 0x11 => Ok(Standard::Sff8636),
        // QSFP-DD, OSFP, DSFP, QSFP+ with CMIS, SFP-DD with CMIS, SFP+ with CMIS.
        0x18 | 0x19 | 0x1B | 0x1E | 0x1F | 0x20 => Ok(Standard::Cmis),
        other => Err(DecodeError::UnknownIdentifier(other)),
    }
}

/// SFF-8024's name of an identifier, for the info series.
pub fn identifier_name(identifier: u8) -> &'static str {
    match identifier {
        0x02 => "soldered",
        0x03 => "SFP",
        0x0C => "QSFP",
        0x0D => "QSFP+",
        0x11 => "QSFP28",
        0x18 => "QSFP-DD",
        0x19 => "OSFP",
        0x1B => "DSFP",
        0x1E => "QSFP+ CMIS",
        0x1F => "SFP-DD CMIS",
        0x20 => "SFP+ CMIS",
        _ => "unknown",
    }
}

/// `bytes`, if at least `need` long; `what` names it in the error.
pub fn need<'a>(bytes: &'a [u8], need: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
    if bytes.len() < need {
        return Err(DecodeError::Short {
            what,
            need,
            have: bytes.len(),
        });
    }
    Ok(bytes)
}

/// The big-endian u16 at `at` (every monitor and threshold is MSB first). The caller checked
/// the length with [`need`]; a short buffer reads as 0 rather than panicking.
pub(crate) fn u16_at(bytes: &[u8], at: usize) -> u16 {
    match bytes.get(at..at + 2) {
        Some(&[msb, lsb]) => u16::from_be_bytes([msb, lsb]),
        _ => 0,
    }
}

pub fn celsius(raw: u16) -> f64 {
    f64::from(raw as i16) / STEPS_PER_CELSIUS
}

pub fn volts(raw: u16) -> f64 {
    f64::from(raw) / STEPS_PER_VOLT
}

/// 0 stays 0 W (no light), never -inf: the exporter speaks watts, not dBm.
pub fn watts(raw: u16) -> f64 {
    f64::from(raw) / STEPS_PER_WATT
}

pub fn amperes(raw: u16) -> f64 {
    f64::from(raw) / STEPS_PER_AMPERE
}

/// Four thresholds stored as high alarm, low alarm, high warning, low warning (the order of all
/// three standards), 2 bytes each from `at`, converted with `unit`.
pub fn levels(bytes: &[u8], at: usize, unit: impl Fn(u16) -> f64) -> super::Levels {
    super::Levels {
        high_alarm: unit(u16_at(bytes, at)),
        low_alarm: unit(u16_at(bytes, at + 2)),
        high_warning: unit(u16_at(bytes, at + 4)),
        low_warning: unit(u16_at(bytes, at + 6)),
    }
}

/// An ASCII field (vendor name, part number, ...): padded with spaces (or NULs) on the right;
/// bytes outside printable ASCII are shown as `?` so a garbled EEPROM cannot put control
/// characters into a label.
pub fn text(bytes: &[u8], from: usize, to_inclusive: usize) -> String {
    let field = bytes.get(from..=to_inclusive).unwrap_or(&[]);
    let shown: String = field
        .iter()
        .map(|&b| {
            if (0x20..0x7F).contains(&b) {
                char::from(b)
            } else if b == 0 {
                ' '
            } else {
                '?'
            }
        })
        .collect();
    shown.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_the_standards() {
        // 0x1980 / 256 = 25.5 °C; 0xFF00 is -1 °C (two's complement).
        assert_eq!(celsius(0x1980), 25.5);
        assert_eq!(celsius(0xFF00), -1.0);
        // 33000 * 100 µV = 3.3 V.
        assert!((volts(33000) - 3.3).abs() < 1e-12);
        // 10000 * 0.1 µW = 1 mW; 0 stays 0 W.
        assert!((watts(10000) - 1e-3).abs() < 1e-15);
        assert_eq!(watts(0), 0.0);
        // 3000 * 2 µA = 6 mA.
        assert!((amperes(3000) - 6e-3).abs() < 1e-15);
    }

    #[test]
    fn text_is_trimmed_and_never_carries_control_bytes() {
        let bytes = b"MELLANOX        \x01\x1b\x00\x00";
        assert_eq!(text(bytes, 0, 15), "MELLANOX");
        assert_eq!(text(bytes, 16, 19), "??");
        // Out of range: empty, no panic.
        assert_eq!(text(bytes, 30, 40), "");
    }

    #[test]
    fn identifiers_choose_the_standard() {
        assert_eq!(standard_of(0x03), Ok(Standard::Sff8472));
        assert_eq!(standard_of(0x11), Ok(Standard::Sff8636));
        assert_eq!(standard_of(0x18), Ok(Standard::Cmis));
        assert_eq!(standard_of(0x19), Ok(Standard::Cmis));
        assert_eq!(standard_of(0x00), Err(DecodeError::UnknownIdentifier(0)));
        assert_eq!(u16_at(&[1], 0), 0);
    }
}
