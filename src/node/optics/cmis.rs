//! CMIS 4/5 (QSFP-DD, OSFP, QSFP112: 200G, 400G, 800G). Offsets are CMIS byte numbers (0-127
//! lower memory, 128-255 the selected upper page), as ethtool's `cmis.h` and
//! `module-common.h` name them:
//! - lower: 2 bit 7 flat memory (only page 00h), 14-15 temperature, 16-17 Vcc, 88 the first
//!   application descriptor's lane counts (bits 3-0: media lanes);
//! - page 00h: 129-144 vendor, 148-163 part number, 164-165 revision, 166-181 serial;
//! - page 01h: 159 module monitors supported (bit 0 temperature, bit 1 Vcc), 160 lane monitors
//!   supported (bit 0 Tx bias, bit 1 Tx power, bit 2 Rx power; bits 4-3 the Tx bias multiplier
//!   1, 2 or 4);
//! - page 02h: thresholds, 128 temperature, 136 Vcc, 176 Tx power, 184 Tx bias, 192 Rx power;
//! - page 11h (bank 0 = lanes 1-8): 154 Tx power, 170 Tx bias, 186 Rx power, 2 bytes a lane.

use super::layout::{self, amperes, celsius, need, text, u16_at, volts, watts};
use super::{DecodeError, Diagnostics, Lane, Levels, ModuleReading, Standard, Thresholds};

const PAGE: usize = 128;
/// Lanes of bank 0; banks 1-3 (lanes 9-32) are not read.
pub(crate) const BANK_LANES: usize = 8;

const MEMORY_MODEL: usize = 2;
const FLAT_MEMORY: u8 = 1 << 7;
const TEMP: usize = 14;
const VCC: usize = 16;
const FIRST_APPLICATION_LANES: usize = 88;

const MODULE_MONITORS: usize = 159;
const TEMP_SUPPORTED: u8 = 1 << 0;
const VCC_SUPPORTED: u8 = 1 << 1;
const LANE_MONITORS: usize = 160;
const BIAS_SUPPORTED: u8 = 1 << 0;
const TX_POWER_SUPPORTED: u8 = 1 << 1;
const RX_POWER_SUPPORTED: u8 = 1 << 2;
const BIAS_MULTIPLIER_SHIFT: u8 = 3;

const TEMP_THRESHOLDS: usize = 128;
const VCC_THRESHOLDS: usize = 136;
const TX_POWER_THRESHOLDS: usize = 176;
const BIAS_THRESHOLDS: usize = 184;
const RX_POWER_THRESHOLDS: usize = 192;

const LANE_TX_POWER: usize = 154;
const LANE_BIAS: usize = 170;
const LANE_RX_POWER: usize = 186;

/// Whether the module has only page 00h (passive copper): no advertisement, no monitors.
pub(crate) fn is_flat(lower: &[u8]) -> bool {
    lower
        .get(MEMORY_MODEL)
        .is_some_and(|b| b & FLAT_MEMORY != 0)
}

/// What page 01h advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Advertisement {
    pub temperature: bool,
    pub supply_voltage: bool,
    pub bias: bool,
    pub tx_power: bool,
    pub rx_power: bool,
    /// 1, 2 or 4: the Tx bias unit is 2 µA times this.
    pub bias_multiplier: u8,
}

impl Advertisement {
    /// From page 01h's 128 bytes.
    pub fn of(page_01: &[u8]) -> Result<Advertisement, DecodeError> {
        let page = need(page_01, PAGE, "CMIS page 01h")?;
        let module = page[MODULE_MONITORS - PAGE];
        let lane = page[LANE_MONITORS - PAGE];
        let bias_multiplier = match (lane >> BIAS_MULTIPLIER_SHIFT) & 0b11 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => {
                return Err(DecodeError::Unsupported(
                    "CMIS Tx bias multiplier 11b is reserved",
                ))
            }
        };
        Ok(Advertisement {
            temperature: module & TEMP_SUPPORTED != 0,
            supply_voltage: module & VCC_SUPPORTED != 0,
            bias: lane & BIAS_SUPPORTED != 0,
            tx_power: lane & TX_POWER_SUPPORTED != 0,
            rx_power: lane & RX_POWER_SUPPORTED != 0,
            bias_multiplier,
        })
    }

    pub(crate) fn any_lane_monitor(&self) -> bool {
        self.bias || self.tx_power || self.rx_power
    }

    fn any(&self) -> bool {
        self.temperature || self.supply_voltage || self.any_lane_monitor()
    }
}

/// Media lanes of the module's first application (1-8), 8 when the descriptor says none.
pub(crate) fn media_lanes(lower: &[u8]) -> usize {
    match lower
        .get(FIRST_APPLICATION_LANES)
        .map(|b| usize::from(b & 0x0F))
    {
        Some(n @ 1..=BANK_LANES) => n,
        _ => BANK_LANES,
    }
}

/// The pages of one CMIS module; upper pages as their 128 bytes (CMIS offset `n` is index
/// `n - 128`). `page_01` is required unless the memory is flat; `page_11` (bank 0) when page
/// 01h advertises a lane monitor; `page_02` is optional (no thresholds without it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pages<'a> {
    pub lower: &'a [u8],
    pub page_00: &'a [u8],
    pub page_01: Option<&'a [u8]>,
    pub page_02: Option<&'a [u8]>,
    pub page_11: Option<&'a [u8]>,
}

pub fn decode(pages: Pages<'_>) -> Result<ModuleReading, DecodeError> {
    let lower = need(pages.lower, PAGE, "CMIS lower memory")?;
    let page_00 = need(pages.page_00, PAGE, "CMIS page 00h")?;
    let diagnostics = if is_flat(lower) {
        None
    } else {
        let advertised = Advertisement::of(pages.page_01.unwrap_or(&[]))?;
        diagnostics(lower, advertised, pages.page_02, pages.page_11)?
    };
    Ok(ModuleReading {
        standard: Standard::Cmis,
        identifier: lower[0],
        vendor: text(page_00, 129 - PAGE, 144 - PAGE),
        part_number: text(page_00, 148 - PAGE, 163 - PAGE),
        revision: text(page_00, 164 - PAGE, 165 - PAGE),
        serial_number: text(page_00, 166 - PAGE, 181 - PAGE),
        diagnostics,
    })
}

fn diagnostics(
    lower: &[u8],
    advertised: Advertisement,
    page_02: Option<&[u8]>,
    page_11: Option<&[u8]>,
) -> Result<Option<Diagnostics>, DecodeError> {
    if !advertised.any() {
        return Ok(None);
    }
    let multiplier = f64::from(advertised.bias_multiplier);
    let bias = move |raw: u16| amperes(raw) * multiplier;
    let lanes = if advertised.any_lane_monitor() {
        let page = need(page_11.unwrap_or(&[]), PAGE, "CMIS page 11h")?;
        let at = |base: usize, i: usize| u16_at(page, base - PAGE + 2 * i);
        (0..media_lanes(lower))
            .map(|i| Lane {
                lane: i as u8 + 1,
                tx_power_watts: advertised.tx_power.then(|| watts(at(LANE_TX_POWER, i))),
                rx_power_watts: advertised.rx_power.then(|| watts(at(LANE_RX_POWER, i))),
                bias_current_amperes: advertised.bias.then(|| bias(at(LANE_BIAS, i))),
            })
            .collect()
    } else {
        Vec::new()
    };
    let thresholds = match page_02 {
        Some(page) => {
            let page = need(page, PAGE, "CMIS page 02h")?;
            let levels = |at: usize, unit: &dyn Fn(u16) -> f64| -> Levels {
                layout::levels(page, at - PAGE, unit)
            };
            Thresholds {
                temperature: advertised
                    .temperature
                    .then(|| levels(TEMP_THRESHOLDS, &celsius)),
                supply_voltage: advertised
                    .supply_voltage
                    .then(|| levels(VCC_THRESHOLDS, &volts)),
                tx_power: advertised
                    .tx_power
                    .then(|| levels(TX_POWER_THRESHOLDS, &watts)),
                bias_current: advertised.bias.then(|| levels(BIAS_THRESHOLDS, &bias)),
                rx_power: advertised
                    .rx_power
                    .then(|| levels(RX_POWER_THRESHOLDS, &watts)),
            }
        }
        None => Thresholds::default(),
    };
    Ok(Some(Diagnostics {
        temperature_celsius: advertised.temperature.then(|| celsius(u16_at(lower, TEMP))),
        supply_voltage_volts: advertised.supply_voltage.then(|| volts(u16_at(lower, VCC))),
        lanes,
        thresholds,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> [Vec<u8>; 5] {
        let mut lower = vec![0u8; 128];
        lower[0] = 0x18;
        lower[14..16].copy_from_slice(&0x2A00u16.to_be_bytes()); // 42 °C
        lower[88] = 0x44; // 4 host lanes, 4 media lanes
        let page_00 = vec![b' '; 128];
        let mut page_01 = vec![0u8; 128];
        page_01[159 - 128] = TEMP_SUPPORTED;
        page_01[160 - 128] = RX_POWER_SUPPORTED | BIAS_SUPPORTED | (1 << BIAS_MULTIPLIER_SHIFT);
        let mut page_02 = vec![0u8; 128];
        page_02[184 - 128..186 - 128].copy_from_slice(&5000u16.to_be_bytes());
        let mut page_11 = vec![0u8; 128];
        page_11[170 - 128..172 - 128].copy_from_slice(&3000u16.to_be_bytes());
        page_11[186 - 128 + 6..186 - 128 + 8].copy_from_slice(&7000u16.to_be_bytes());
        [lower, page_00, page_01, page_02, page_11]
    }

    fn decoded(p: &[Vec<u8>; 5]) -> Result<ModuleReading, DecodeError> {
        decode(Pages {
            lower: &p[0],
            page_00: &p[1],
            page_01: Some(&p[2]),
            page_02: Some(&p[3]),
            page_11: Some(&p[4]),
        })
    }

    #[test]
    fn only_advertised_monitors_and_lanes_are_read() {
        let d = decoded(&pages()).unwrap().diagnostics.unwrap();
        assert_eq!(d.temperature_celsius, Some(42.0));
        assert_eq!(d.supply_voltage_volts, None);
        assert_eq!(d.lanes.len(), 4);
        // 3000 * 2 µA * multiplier 2 = 12 mA.
        assert!((d.lanes[0].bias_current_amperes.unwrap() - 12e-3).abs() < 1e-12);
        assert!((d.lanes[3].rx_power_watts.unwrap() - 0.7e-3).abs() < 1e-12);
        assert_eq!(d.lanes[0].tx_power_watts, None);
        // Bias threshold scaled the same way: 5000 * 2 µA * 2 = 20 mA.
        assert!((d.thresholds.bias_current.unwrap().high_alarm - 20e-3).abs() < 1e-12);
        assert_eq!(d.thresholds.tx_power, None);
    }

    #[test]
    fn flat_memory_reads_as_no_diagnostics() {
        let mut p = pages();
        p[0][2] = FLAT_MEMORY;
        let reading = decode(Pages {
            lower: &p[0],
            page_00: &p[1],
            ..Pages::default()
        })
        .unwrap();
        assert_eq!(reading.diagnostics, None);
    }

    #[test]
    fn a_lane_monitor_without_its_page_is_an_error() {
        let p = pages();
        let err = decode(Pages {
            lower: &p[0],
            page_00: &p[1],
            page_01: Some(&p[2]),
            ..Pages::default()
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Short {
                    what: "CMIS page 11h",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn the_reserved_bias_multiplier_is_refused() {
        let mut p = pages();
        p[2][160 - 128] |= 0b11 << BIAS_MULTIPLIER_SHIFT;
        assert!(matches!(decoded(&p), Err(DecodeError::Unsupported(_))));
    }
}
