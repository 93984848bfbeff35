//! SFF-8636 (QSFP+, QSFP28): the lower page's monitors, upper page 00h's identity and
//! diagnostic monitoring type, upper page 03h's thresholds. Offsets are SFF-8636's byte numbers
//! (0-127 lower, 128-255 upper), as ethtool's `qsfp.h` names them: lower 2 status (bit 2 flat
//! memory), 22-23 temperature, 26-27 Vcc, 34-41 Rx power, 42-49 Tx bias, 50-57 Tx power (lanes
//! 1-4); page 00h 148-163 vendor, 168-183 part number, 184-185 revision, 196-211 serial,
//! 220 diagnostic monitoring type; page 03h 128 temperature, 144 Vcc, 176 Rx power, 184 Tx bias,
//! 192 Tx power thresholds.

use super::layout::{self, amperes, celsius, need, text, u16_at, volts, watts};
use super::{DecodeError, Diagnostics, Lane, ModuleReading, Standard, Thresholds};

const LANES: usize = 4;
const PAGE: usize = 128;

const STATUS_2: usize = 2;
/// Upper memory is flat: only page 00h exists (no page 03h thresholds).
const FLAT_MEMORY: u8 = 1 << 2;

const TEMP: usize = 22;
const VCC: usize = 26;
const RX_POWER: usize = 34;
const TX_BIAS: usize = 42;
const TX_POWER: usize = 50;

const DIAG_TYPE: usize = 220;
const TEMP_MONITORED: u8 = 1 << 5;
const VCC_MONITORED: u8 = 1 << 4;
const TX_POWER_MONITORED: u8 = 1 << 2;

const TEMP_THRESHOLDS: usize = 128;
const VCC_THRESHOLDS: usize = 144;
const RX_POWER_THRESHOLDS: usize = 176;
const TX_BIAS_THRESHOLDS: usize = 184;
const TX_POWER_THRESHOLDS: usize = 192;

/// Whether page 03h exists (the module's memory is paged, not flat).
pub(crate) fn has_threshold_page(lower: &[u8]) -> bool {
    lower.get(STATUS_2).is_some_and(|b| b & FLAT_MEMORY == 0)
}

/// Decodes the lower page, upper page 00h and, when the module has it, page 03h. Upper pages
/// are given as their 128 bytes: SFF-8636 offset `n` (128-255) is index `n - 128`.
pub fn decode(
    lower: &[u8],
    page_00: &[u8],
    page_03: Option<&[u8]>,
) -> Result<ModuleReading, DecodeError> {
    let lower = need(lower, PAGE, "SFF-8636 lower page")?;
    let page_00 = need(page_00, PAGE, "SFF-8636 page 00h")?;
    let page_03 = match page_03 {
        Some(page) => Some(need(page, PAGE, "SFF-8636 page 03h")?),
        None => None,
    };
    let diag_type = page_00[DIAG_TYPE - PAGE];
    let temperature = u16_at(lower, TEMP);
    // SFF-8636 has no "diagnostics implemented" bit as SFF-8472 has; like ethtool, a module
    // that advertises no monitor counts as monitored when it reports a real temperature.
    let advertised = diag_type & (TEMP_MONITORED | VCC_MONITORED) != 0;
    let reports = temperature != 0 && temperature != 0xFFFF;
    let diagnostics = (advertised || reports).then(|| {
        let all = !advertised;
        let tx_power = all || diag_type & TX_POWER_MONITORED != 0;
        let lanes = (0..LANES)
            .map(|i| Lane {
                lane: i as u8 + 1,
                tx_power_watts: tx_power.then(|| watts(u16_at(lower, TX_POWER + 2 * i))),
                rx_power_watts: Some(watts(u16_at(lower, RX_POWER + 2 * i))),
                bias_current_amperes: Some(amperes(u16_at(lower, TX_BIAS + 2 * i))),
            })
            .collect();
        let thresholds = match page_03.filter(|_| has_threshold_page(lower)) {
            Some(page) => {
                let levels =
                    |at: usize, unit: fn(u16) -> f64| layout::levels(page, at - PAGE, unit);
                Thresholds {
                    temperature: Some(levels(TEMP_THRESHOLDS, celsius)),
                    supply_voltage: Some(levels(VCC_THRESHOLDS, volts)),
                    rx_power: Some(levels(RX_POWER_THRESHOLDS, watts)),
                    bias_current: Some(levels(TX_BIAS_THRESHOLDS, amperes)),
                    tx_power: tx_power.then(|| levels(TX_POWER_THRESHOLDS, watts)),
                }
            }
            None => Thresholds::default(),
        };
        Diagnostics {
            temperature_celsius: (all || diag_type & TEMP_MONITORED != 0)
                .then(|| celsius(temperature)),
            supply_voltage_volts: (all || diag_type & VCC_MONITORED != 0)
                .then(|| volts(u16_at(lower, VCC))),
            lanes,
            thresholds,
        }
    });
    Ok(ModuleReading {
        standard: Standard::Sff8636,
        identifier: lower[0],
        vendor: text(page_00, 148 - PAGE, 163 - PAGE),
        part_number: text(page_00, 168 - PAGE, 183 - PAGE),
        revision: text(page_00, 184 - PAGE, 185 - PAGE),
        serial_number: text(page_00, 196 - PAGE, 211 - PAGE),
        diagnostics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let mut lower = vec![0u8; 128];
        lower[0] = 0x11;
        lower[22..24].copy_from_slice(&0x2300u16.to_be_bytes()); // 35 °C
        lower[26..28].copy_from_slice(&32900u16.to_be_bytes());
        for i in 0..4 {
            lower[34 + 2 * i..36 + 2 * i].copy_from_slice(&(6000 + i as u16).to_be_bytes());
        }
        let mut page_00 = vec![0u8; 128];
        page_00[220 - 128] = TEMP_MONITORED | VCC_MONITORED | TX_POWER_MONITORED | 0x08;
        let mut page_03 = vec![0u8; 128];
        page_03[0..2].copy_from_slice(&0x4B00u16.to_be_bytes()); // 75 °C high alarm
        (lower, page_00, page_03)
    }

    #[test]
    fn lanes_and_thresholds_come_from_their_pages() {
        let (lower, page_00, page_03) = pages();
        let d = decode(&lower, &page_00, Some(&page_03))
            .unwrap()
            .diagnostics
            .unwrap();
        assert_eq!(d.temperature_celsius, Some(35.0));
        assert_eq!(d.lanes.len(), 4);
        assert!((d.lanes[3].rx_power_watts.unwrap() - 600.3e-6).abs() < 1e-12);
        assert_eq!(d.thresholds.temperature.unwrap().high_alarm, 75.0);
    }

    #[test]
    fn flat_memory_has_no_thresholds_even_if_a_page_is_given() {
        let (mut lower, page_00, page_03) = pages();
        lower[2] = FLAT_MEMORY;
        let d = decode(&lower, &page_00, Some(&page_03))
            .unwrap()
            .diagnostics
            .unwrap();
        assert_eq!(d.thresholds, Thresholds::default());
    }

    #[test]
    fn a_module_without_monitors_reads_as_no_diagnostics() {
        let (mut lower, mut page_00, _) = pages();
        lower[22..24].copy_from_slice(&[0, 0]);
        page_00[220 - 128] = 0;
        assert_eq!(decode(&lower, &page_00, None).unwrap().diagnostics, None);
    }

    #[test]
    fn short_pages_are_refused() {
        let (lower, page_00, page_03) = pages();
        assert!(decode(&lower[..20], &page_00, None).is_err());
        assert!(decode(&lower, &page_00[..127], None).is_err());
        assert!(decode(&lower, &page_00, Some(&page_03[..1])).is_err());
    }
}
