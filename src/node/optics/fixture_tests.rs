//! The decoders on the page images of `tests/fixtures/optics/modules/` (written byte by byte by
//! `make_fixtures.py`, independently of this code), on garbled and short pages, and on random
//! bytes.

use std::collections::HashMap;
use std::path::PathBuf;

use super::files::FilePages;
use super::*;

fn modules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/optics/modules")
}

fn read(netdev: &str) -> Option<ModuleReading> {
    read_module(&FilePages::new(modules()), netdev).unwrap()
}

#[track_caller]
fn close(got: Option<f64>, want: f64) {
    let got = got.expect("a value");
    assert!(
        (got - want).abs() <= want.abs() * 1e-9 + 1e-15,
        "got {got}, want {want}"
    );
}

#[track_caller]
fn levels(got: Option<Levels>, [high_alarm, low_alarm, high_warning, low_warning]: [f64; 4]) {
    let got = got.expect("thresholds");
    close(Some(got.high_alarm), high_alarm);
    close(Some(got.low_alarm), low_alarm);
    close(Some(got.high_warning), high_warning);
    close(Some(got.low_warning), low_warning);
}

const MW: f64 = 1e-3;
const MA: f64 = 1e-3;

#[test]
fn cmis_400g_decodes_eight_lanes_with_lane_5_under_its_low_warning() {
    let module = read("ens1f0np0").unwrap();
    assert_eq!(module.standard, Standard::Cmis);
    assert_eq!(module.identifier_name(), "QSFP-DD");
    assert_eq!(
        (
            module.vendor.as_str(),
            module.part_number.as_str(),
            module.revision.as_str(),
            module.serial_number.as_str()
        ),
        ("ACME OPTICS", "QDD-400G-SR8", "A0", "AC2412345678")
    );
    let d = module.diagnostics.unwrap();
    close(d.temperature_celsius, 38.5);
    close(d.supply_voltage_volts, 3.3);
    assert_eq!(d.lanes.len(), 8);
    let rx = [0.700, 0.710, 0.690, 0.705, 0.100, 0.702, 0.698, 0.701];
    let tx = [0.800, 0.810, 0.790, 0.805, 0.795, 0.802, 0.798, 0.801];
    // Bias as the 2 µA steps the image holds: round(mA / 0.002).
    let bias_steps = [3500, 3510, 3490, 3505, 3495, 3502, 3498, 3501];
    for (i, lane) in d.lanes.iter().enumerate() {
        assert_eq!(usize::from(lane.lane), i + 1);
        close(lane.rx_power_watts, rx[i] * MW);
        close(lane.tx_power_watts, tx[i] * MW);
        close(lane.bias_current_amperes, f64::from(bias_steps[i]) * 2e-6);
    }
    let t = d.thresholds;
    levels(t.temperature, [75.0, -5.0, 70.0, 0.0]);
    levels(t.supply_voltage, [3.63, 2.97, 3.465, 3.135]);
    levels(
        t.tx_power,
        [3.1623 * MW, 0.1122 * MW, 2.5119 * MW, 0.1413 * MW],
    );
    levels(t.bias_current, [15.0 * MA, 2.0 * MA, 13.0 * MA, 3.0 * MA]);
    levels(
        t.rx_power,
        [3.1623 * MW, 0.0891 * MW, 2.5119 * MW, 0.1122 * MW],
    );
    // The one lane under its warning, none under its alarm.
    let rx_levels = t.rx_power.unwrap();
    let low: Vec<u8> = d
        .lanes
        .iter()
        .filter(|l| l.rx_power_watts.unwrap() < rx_levels.low_warning)
        .map(|l| l.lane)
        .collect();
    assert_eq!(low, vec![5]);
    assert!(d
        .lanes
        .iter()
        .all(|l| l.rx_power_watts.unwrap() > rx_levels.low_alarm));
}

#[test]
fn qsfp28_decodes_four_lanes_and_page_03h_thresholds() {
    let module = read("ens2f0np0").unwrap();
    assert_eq!(module.standard, Standard::Sff8636);
    assert_eq!(module.identifier_name(), "QSFP28");
    assert_eq!(module.part_number, "QSFP-100G-SR4");
    assert_eq!(module.serial_number, "AQ2398765432");
    let d = module.diagnostics.unwrap();
    close(d.temperature_celsius, 31.25);
    close(d.supply_voltage_volts, 3.29);
    assert_eq!(d.lanes.len(), 4);
    for (lane, (rx, bias_steps, tx)) in d.lanes.iter().zip([
        (0.600, 3300, 0.700),
        (0.610, 3310, 0.710),
        (0.590, 3290, 0.690),
        (0.605, 3305, 0.705),
    ]) {
        close(lane.rx_power_watts, rx * MW);
        close(lane.bias_current_amperes, f64::from(bias_steps) * 2e-6);
        close(lane.tx_power_watts, tx * MW);
    }
    let t = d.thresholds;
    levels(t.temperature, [75.0, -5.0, 70.0, 0.0]);
    levels(t.supply_voltage, [3.63, 2.97, 3.465, 3.135]);
    levels(
        t.rx_power,
        [3.4674 * MW, 0.0407 * MW, 1.7378 * MW, 0.0813 * MW],
    );
    levels(t.bias_current, [12.0 * MA, 1.0 * MA, 10.0 * MA, 2.0 * MA]);
    levels(
        t.tx_power,
        [3.4674 * MW, 0.1479 * MW, 1.7378 * MW, 0.2951 * MW],
    );
}

#[test]
fn sfp28_decodes_a0h_and_a2h() {
    let module = read("ens3f0np0").unwrap();
    assert_eq!(module.standard, Standard::Sff8472);
    assert_eq!(module.identifier_name(), "SFP");
    assert_eq!(
        (
            module.vendor.as_str(),
            module.part_number.as_str(),
            module.revision.as_str()
        ),
        ("ACME OPTICS", "SFP-25G-SR", "A")
    );
    let d = module.diagnostics.unwrap();
    close(d.temperature_celsius, 33.75);
    close(d.supply_voltage_volts, 3.31);
    assert_eq!(d.lanes.len(), 1);
    close(d.lanes[0].bias_current_amperes, 6.8 * MA);
    close(d.lanes[0].tx_power_watts, 0.5623 * MW);
    close(d.lanes[0].rx_power_watts, 0.4467 * MW);
    let t = d.thresholds;
    levels(t.temperature, [78.0, -13.0, 73.0, -8.0]);
    levels(t.supply_voltage, [3.6, 3.0, 3.5, 3.1]);
    levels(t.bias_current, [12.0 * MA, 2.0 * MA, 11.0 * MA, 3.0 * MA]);
    levels(
        t.tx_power,
        [1.7783 * MW, 0.0891 * MW, 1.4125 * MW, 0.1122 * MW],
    );
    levels(
        t.rx_power,
        [1.7783 * MW, 0.0389 * MW, 1.4125 * MW, 0.0490 * MW],
    );
}

#[test]
fn a_cable_without_diagnostics_and_an_empty_cage_read_as_none() {
    let dac = read("ens4f0np0").unwrap();
    assert_eq!(dac.part_number, "QSFP-100G-CU2M");
    assert_eq!(dac.diagnostics, None);
    assert_eq!(read("ens5f0np0"), None);
}

/// Pages held in memory, each possibly damaged.
#[derive(Debug, Default)]
struct Memory(HashMap<(u8, u8, u8), Vec<u8>>);

impl Memory {
    /// The fixture's half pages of `netdev`, keyed like the requests.
    fn of(netdev: &str) -> Memory {
        let dir = modules().join(netdev);
        let mut pages = HashMap::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().into_string().unwrap();
            let address = u8::from_str_radix(&name[3..5], 16).unwrap();
            let key = match name.strip_prefix(&name[..6]).unwrap() {
                "lower.bin" => (address, 0, 0),
                rest => (address, u8::from_str_radix(&rest[4..6], 16).unwrap(), 128),
            };
            pages.insert(key, std::fs::read(entry.path()).unwrap());
        }
        Memory(pages)
    }
}

impl ModulePages for Memory {
    fn read(&self, _: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
        let key = (request.i2c_address, request.page, request.offset);
        self.0.get(&key).cloned().ok_or(PageError::NoPage(request))
    }
}

#[test]
fn short_pages_are_a_decode_error_naming_the_page() {
    for (netdev, key, what) in [
        ("ens1f0np0", (0x50, 0x11, 128), "CMIS page 11h"),
        ("ens1f0np0", (0x50, 0x02, 128), "CMIS page 02h"),
        ("ens2f0np0", (0x50, 0x00, 128), "SFF-8636 page 00h"),
        ("ens3f0np0", (0x51, 0x00, 0), "SFF-8472 A2h"),
    ] {
        let mut memory = Memory::of(netdev);
        memory.0.get_mut(&key).unwrap().truncate(40);
        let err = read_module(&memory, netdev).unwrap_err();
        assert_eq!(err.failure(), ReadFailure::Decode, "{netdev}: {err}");
        assert!(err.to_string().contains(what), "{netdev}: {err}");
    }
}

#[test]
fn garbled_pages_decode_to_bounded_values_or_a_clear_error() {
    // A CMIS module whose advertisement byte is all ones: the reserved bias multiplier.
    let mut memory = Memory::of("ens1f0np0");
    memory.0.get_mut(&(0x50, 0x01, 128)).unwrap()[160 - 128] = 0xFF;
    let err = read_module(&memory, "ens1f0np0").unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
    // Garbage text and a garbage lane count: printable labels, at most 8 lanes.
    let mut memory = Memory::of("ens1f0np0");
    let lower = memory.0.get_mut(&(0x50, 0, 0)).unwrap();
    lower[88] = 0xFF;
    memory.0.get_mut(&(0x50, 0x00, 128)).unwrap()[1..17].fill(0x07);
    let module = read_module(&memory, "ens1f0np0").unwrap().unwrap();
    assert_eq!(module.vendor, "????????????????");
    assert_eq!(module.diagnostics.unwrap().lanes.len(), 8);
}

/// xorshift64*: deterministic random bytes without a dependency.
#[derive(Debug)]
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Random pages of random lengths, the identifier drawn from the ones decoded.
#[derive(Debug)]
struct Noise(std::sync::Mutex<Random>);

impl ModulePages for Noise {
    fn read(&self, _: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
        let mut random = self.0.lock().unwrap();
        let len = match random.next() % 8 {
            0 => (random.next() % 128) as usize,
            _ => usize::from(request.length),
        };
        let mut bytes = random.bytes(len);
        if request.offset == 0 && request.i2c_address == 0x50 {
            if let Some(first) = bytes.first_mut() {
                *first =
                    [0x03, 0x11, 0x0D, 0x18, 0x19, 0x1E, 0x00, 0x42][(random.next() % 8) as usize];
            }
        }
        Ok(bytes)
    }
}

#[test]
fn random_bytes_never_panic_and_decode_to_finite_values() {
    let noise = Noise(std::sync::Mutex::new(Random(0x9E37_79B9_7F4A_7C15)));
    let mut decoded = 0;
    for _ in 0..20_000 {
        let Ok(Some(module)) = read_module(&noise, "eth0") else {
            continue;
        };
        decoded += 1;
        let Some(d) = module.diagnostics else {
            continue;
        };
        assert!(d.lanes.len() <= 8);
        let values = d
            .lanes
            .iter()
            .flat_map(|l| [l.tx_power_watts, l.rx_power_watts, l.bias_current_amperes])
            .chain([d.temperature_celsius, d.supply_voltage_volts])
            .flatten();
        for value in values {
            assert!(value.is_finite() && value > -200.0, "{value}");
        }
    }
    // Most draws are whole pages: the decoders ran on random content, not only on errors.
    assert!(decoded > 5_000, "{decoded}");
}
