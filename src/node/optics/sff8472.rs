//! SFF-8472 (SFP, SFP+, SFP28): identification in A0h (I2C address 0x50), diagnostics in A2h
//! (0x51). Offsets are SFF-8472's decimal byte numbers, the same ethtool's `sfpdiag.c` and
//! `sfpid.c` use: A0h 92 diagnostic monitoring type, 93 enhanced options; A2h 0-39 thresholds,
//! 56-91 external calibration constants, 96-105 the monitors.

use super::layout::{self, amperes, celsius, need, text, u16_at, volts, watts};
use super::{DecodeError, Diagnostics, Lane, ModuleReading, Standard, Thresholds};

/// A0h bytes the decoder reads: up to the enhanced options byte (93).
pub(crate) const A0_LEN: usize = 94;
/// A2h bytes the decoder reads: thresholds, calibration and the monitors (96-105).
pub(crate) const A2_LEN: usize = 106;

// A0h, diagnostic monitoring type (byte 92).
const A0_DIAG_TYPE: usize = 92;
const DIAG_IMPLEMENTED: u8 = 1 << 6;
const DIAG_INTERNALLY_CALIBRATED: u8 = 1 << 5;
const DIAG_EXTERNALLY_CALIBRATED: u8 = 1 << 4;
// A0h, enhanced options (byte 93): alarm/warning flags (and hence thresholds) implemented.
const A0_ENHANCED_OPTIONS: usize = 93;
const ALARM_WARNING_IMPLEMENTED: u8 = 1 << 7;

// A2h thresholds: high alarm, low alarm, high warning, low warning for each quantity.
const A2_TEMP_THRESHOLDS: usize = 0;
const A2_VCC_THRESHOLDS: usize = 8;
const A2_BIAS_THRESHOLDS: usize = 16;
const A2_TX_POWER_THRESHOLDS: usize = 24;
const A2_RX_POWER_THRESHOLDS: usize = 32;
// A2h external calibration: Rx_PWR(4) .. Rx_PWR(0) as big-endian IEEE 754 singles, then
// slope (unsigned 8.8 fixed point) and offset (signed 16) pairs.
const A2_CAL_RX_PWR4: usize = 56;
const A2_CAL_BIAS: usize = 76;
const A2_CAL_TX_POWER: usize = 80;
const A2_CAL_TEMP: usize = 84;
const A2_CAL_VCC: usize = 88;
// A2h monitors.
const A2_TEMP: usize = 96;
const A2_VCC: usize = 98;
const A2_BIAS: usize = 100;
const A2_TX_POWER: usize = 102;
const A2_RX_POWER: usize = 104;

/// Whether the module has diagnostics, i.e. whether A2h is worth reading.
pub(crate) fn has_diagnostics(a0: &[u8]) -> bool {
    a0.get(A0_DIAG_TYPE)
        .is_some_and(|b| b & DIAG_IMPLEMENTED != 0)
}

/// Decodes A0h and, for a module with diagnostics, A2h (required then).
pub fn decode(a0: &[u8], a2: Option<&[u8]>) -> Result<ModuleReading, DecodeError> {
    let a0 = need(a0, A0_LEN, "SFF-8472 A0h")?;
    let diagnostics = if has_diagnostics(a0) {
        let a2 = need(a2.unwrap_or(&[]), A2_LEN, "SFF-8472 A2h")?;
        Some(diagnostics(a0, a2)?)
    } else {
        None
    };
    Ok(ModuleReading {
        standard: Standard::Sff8472,
        identifier: a0[0],
        vendor: text(a0, 20, 35),
        part_number: text(a0, 40, 55),
        revision: text(a0, 56, 59),
        serial_number: text(a0, 68, 83),
        diagnostics,
    })
}

/// Raw A/D values to calibrated ones: identity for internally calibrated modules, the module's
/// own constants for externally calibrated ones (SFF-8472 section 9.3).
enum Calibration {
    Internal,
    External {
        rx_power: [f32; 5],
        bias: (f64, f64),
        tx_power: (f64, f64),
        temperature: (f64, f64),
        voltage: (f64, f64),
    },
}

impl Calibration {
    fn of(a0: &[u8], a2: &[u8]) -> Result<Calibration, DecodeError> {
        let kind = a0[A0_DIAG_TYPE];
        if kind & DIAG_EXTERNALLY_CALIBRATED == 0 {
            if kind & DIAG_INTERNALLY_CALIBRATED == 0 {
                return Err(DecodeError::Unsupported(
                    "SFF-8472 diagnostics that are neither internally nor externally calibrated",
                ));
            }
            return Ok(Calibration::Internal);
        }
        let float = |at: usize| f32::from_be_bytes([a2[at], a2[at + 1], a2[at + 2], a2[at + 3]]);
        let slope_offset = |at: usize| {
            let slope = f64::from(a2[at]) + f64::from(a2[at + 1]) / 256.0;
            let offset = f64::from(u16_at(a2, at + 2) as i16);
            (slope, offset)
        };
        // Stored from the 4th power down to the constant term.
        let mut rx_power = [0f32; 5];
        for (power, coefficient) in rx_power.iter_mut().enumerate() {
            *coefficient = float(A2_CAL_RX_PWR4 + 4 * (4 - power));
        }
        if rx_power.iter().any(|c| !c.is_finite()) {
            return Err(DecodeError::Unsupported(
                "SFF-8472 external calibration with a non-finite Rx power coefficient",
            ));
        }
        Ok(Calibration::External {
            rx_power,
            bias: slope_offset(A2_CAL_BIAS),
            tx_power: slope_offset(A2_CAL_TX_POWER),
            temperature: slope_offset(A2_CAL_TEMP),
            voltage: slope_offset(A2_CAL_VCC),
        })
    }

    /// A linear quantity (bias, Tx power, voltage): slope * raw + offset, in the raw's unit,
    /// kept within what 16 bits hold.
    fn linear(raw: u16, (slope, offset): (f64, f64)) -> u16 {
        (slope * f64::from(raw) + offset)
            .round()
            .clamp(0.0, 65535.0) as u16
    }

    fn temperature(&self, raw: u16) -> u16 {
        match self {
            Calibration::Internal => raw,
            Calibration::External {
                temperature: (slope, offset),
                ..
            } => {
                let value = (slope * f64::from(raw as i16) + offset)
                    .round()
                    .clamp(f64::from(i16::MIN), f64::from(i16::MAX));
                (value as i16) as u16
            }
        }
    }

    fn voltage(&self, raw: u16) -> u16 {
        match self {
            Calibration::Internal => raw,
            Calibration::External { voltage, .. } => Self::linear(raw, *voltage),
        }
    }

    fn bias(&self, raw: u16) -> u16 {
        match self {
            Calibration::Internal => raw,
            Calibration::External { bias, .. } => Self::linear(raw, *bias),
        }
    }

    fn tx_power(&self, raw: u16) -> u16 {
        match self {
            Calibration::Internal => raw,
            Calibration::External { tx_power, .. } => Self::linear(raw, *tx_power),
        }
    }

    /// Rx power: the polynomial sum of Rx_PWR(i) * raw^i, in 0.1 µW.
    fn rx_power(&self, raw: u16) -> u16 {
        match self {
            Calibration::Internal => raw,
            Calibration::External { rx_power, .. } => {
                let x = f64::from(raw);
                let value: f64 = rx_power
                    .iter()
                    .enumerate()
                    .map(|(power, c)| f64::from(*c) * x.powi(power as i32))
                    .sum();
                if value.is_finite() {
                    value.round().clamp(0.0, 65535.0) as u16
                } else {
                    0
                }
            }
        }
    }
}

fn diagnostics(a0: &[u8], a2: &[u8]) -> Result<Diagnostics, DecodeError> {
    let cal = Calibration::of(a0, a2)?;
    let thresholds = if a0[A0_ENHANCED_OPTIONS] & ALARM_WARNING_IMPLEMENTED != 0 {
        let calibrated = |at: usize, cal_fn: &dyn Fn(u16) -> u16, unit: fn(u16) -> f64| {
            layout::levels(a2, at, |raw| unit(cal_fn(raw)))
        };
        Thresholds {
            temperature: Some(calibrated(
                A2_TEMP_THRESHOLDS,
                &|r| cal.temperature(r),
                celsius,
            )),
            supply_voltage: Some(calibrated(A2_VCC_THRESHOLDS, &|r| cal.voltage(r), volts)),
            bias_current: Some(calibrated(A2_BIAS_THRESHOLDS, &|r| cal.bias(r), amperes)),
            tx_power: Some(calibrated(
                A2_TX_POWER_THRESHOLDS,
                &|r| cal.tx_power(r),
                watts,
            )),
            rx_power: Some(calibrated(
                A2_RX_POWER_THRESHOLDS,
                &|r| cal.rx_power(r),
                watts,
            )),
        }
    } else {
        Thresholds::default()
    };
    Ok(Diagnostics {
        temperature_celsius: Some(celsius(cal.temperature(u16_at(a2, A2_TEMP)))),
        supply_voltage_volts: Some(volts(cal.voltage(u16_at(a2, A2_VCC)))),
        lanes: vec![Lane {
            lane: 1,
            tx_power_watts: Some(watts(cal.tx_power(u16_at(a2, A2_TX_POWER)))),
            rx_power_watts: Some(watts(cal.rx_power(u16_at(a2, A2_RX_POWER)))),
            bias_current_amperes: Some(amperes(cal.bias(u16_at(a2, A2_BIAS)))),
        }],
        thresholds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A0h of an SFP28 with internally calibrated diagnostics and thresholds.
    fn a0(diag_type: u8) -> Vec<u8> {
        let mut a0 = vec![0u8; 128];
        a0[0] = 0x03;
        a0[20..36].copy_from_slice(b"ACME OPTICS     ");
        a0[40..56].copy_from_slice(b"SFP-25G-SR      ");
        a0[56..60].copy_from_slice(b"A1  ");
        a0[68..84].copy_from_slice(b"SN0001          ");
        a0[92] = diag_type;
        a0[93] = 0x80;
        a0
    }

    fn a2() -> Vec<u8> {
        let mut a2 = vec![0u8; 128];
        // Temperature 30.5 °C, Vcc 3.3 V, bias 7 mA, Tx 0.8 mW, Rx 0.5 mW.
        a2[96..98].copy_from_slice(&0x1E80u16.to_be_bytes());
        a2[98..100].copy_from_slice(&33000u16.to_be_bytes());
        a2[100..102].copy_from_slice(&3500u16.to_be_bytes());
        a2[102..104].copy_from_slice(&8000u16.to_be_bytes());
        a2[104..106].copy_from_slice(&5000u16.to_be_bytes());
        // Rx power thresholds: 2 mW, 0.05 mW, 1.6 mW, 0.1 mW.
        for (i, v) in [20000u16, 500, 16000, 1000].iter().enumerate() {
            a2[32 + 2 * i..34 + 2 * i].copy_from_slice(&v.to_be_bytes());
        }
        a2
    }

    #[test]
    fn without_diagnostics_only_identity_is_read() {
        let reading = decode(&a0(0x00), None).unwrap();
        assert_eq!(reading.vendor, "ACME OPTICS");
        assert_eq!(reading.diagnostics, None);
    }

    #[test]
    fn internal_calibration_reads_units_directly() {
        let reading = decode(&a0(0x68), Some(&a2())).unwrap();
        let d = reading.diagnostics.unwrap();
        assert_eq!(d.temperature_celsius, Some(30.5));
        let lane = d.lanes[0];
        assert!((lane.rx_power_watts.unwrap() - 0.5e-3).abs() < 1e-12);
        assert!((lane.bias_current_amperes.unwrap() - 7e-3).abs() < 1e-12);
        let rx = d.thresholds.rx_power.unwrap();
        assert!((rx.low_warning - 0.1e-3).abs() < 1e-12);
        assert!((rx.low_alarm - 0.05e-3).abs() < 1e-12);
    }

    #[test]
    fn external_calibration_applies_the_modules_constants() {
        let mut a2 = a2();
        // Rx: 0.1 µW * (10 + 2 * raw); bias: slope 0.5, offset +100 (2 µA steps).
        a2[68..72].copy_from_slice(&2.0f32.to_be_bytes());
        a2[72..76].copy_from_slice(&10.0f32.to_be_bytes());
        a2[76..80].copy_from_slice(&[0x00, 0x80, 0x00, 0x64]);
        // Temperature slope 1, offset -256 (-1 °C); others slope 1.
        a2[84..88].copy_from_slice(&[0x01, 0x00, 0xFF, 0x00]);
        for at in [80, 88] {
            a2[at] = 1;
        }
        let d = decode(&a0(0x58), Some(&a2)).unwrap().diagnostics.unwrap();
        assert_eq!(d.temperature_celsius, Some(29.5));
        let lane = d.lanes[0];
        // (10 + 2 * 5000) * 0.1 µW = 1.001 mW.
        assert!((lane.rx_power_watts.unwrap() - 1.001e-3).abs() < 1e-12);
        // (0.5 * 3500 + 100) * 2 µA = 3.7 mA.
        assert!((lane.bias_current_amperes.unwrap() - 3.7e-3).abs() < 1e-12);
    }

    #[test]
    fn diagnostics_without_a_calibration_kind_are_refused() {
        let err = decode(&a0(0x40), Some(&a2())).unwrap_err();
        assert!(matches!(err, DecodeError::Unsupported(_)), "{err}");
    }

    #[test]
    fn short_pages_are_refused() {
        assert!(matches!(
            decode(&a0(0x68)[..50], None),
            Err(DecodeError::Short {
                need: 94,
                have: 50,
                ..
            })
        ));
        assert!(matches!(
            decode(&a0(0x68), Some(&a2()[..100])),
            Err(DecodeError::Short {
                need: 106,
                have: 100,
                ..
            })
        ));
        assert!(matches!(
            decode(&a0(0x68), None),
            Err(DecodeError::Short { have: 0, .. })
        ));
    }
}
