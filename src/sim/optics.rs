//! The demo's transceivers: one 400G CMIS module (OSFP, 8 lanes) in the cage of every NIC with a
//! netdev, written as the `transceiver` collector's page files (`node::optics::files`) under
//! `<host>/modules/`. Healthy modules wobble around ~0.7 mW received per lane; the scenario's
//! `optic_rx_fade` sinks one NIC's received power (in dB, as a dirty connector does) through its
//! module's low warning threshold. The byte layout is CMIS's (see `node::optics::cmis`).

use std::fs;
use std::io;
use std::path::Path;

use super::fabric::Fabric;
use crate::node::optics::files::file_name;

/// The modules' own thresholds, as the fixtures' 400G module states them.
pub const RX_LOW_WARNING_W: f64 = 112.2e-6;
pub const RX_LOW_ALARM_W: f64 = 89.1e-6;
/// Where a fully faded optic's receive power settles: under the warning, over the alarm.
pub const FADED_RX_W: f64 = 95e-6;
/// A healthy lane's receive power before its wobble.
const HEALTHY_RX_W: f64 = 0.7e-3;

const LANES: usize = 8;

/// A 128-byte half page addressed by CMIS byte numbers (`base` 0 or 128).
struct Half {
    base: usize,
    bytes: [u8; 128],
}

impl Half {
    fn new(base: usize) -> Half {
        Half {
            base,
            bytes: [0; 128],
        }
    }

    fn u8(&mut self, at: usize, value: u8) {
        self.bytes[at - self.base] = value;
    }

    fn u16(&mut self, at: usize, value: u16) {
        self.bytes[at - self.base..at - self.base + 2].copy_from_slice(&value.to_be_bytes());
    }

    fn text(&mut self, first: usize, last: usize, value: &str) {
        let field = &mut self.bytes[first - self.base..=last - self.base];
        field.fill(b' ');
        for (dst, src) in field.iter_mut().zip(value.bytes()) {
            *dst = src;
        }
    }

    /// High alarm, low alarm, high warning, low warning, 2 bytes each.
    fn levels(&mut self, at: usize, values: [u16; 4]) {
        for (i, value) in values.into_iter().enumerate() {
            self.u16(at + 2 * i, value);
        }
    }
}

fn steps(value: f64, per_unit: f64) -> u16 {
    (value * per_unit).round().clamp(0.0, 65535.0) as u16
}

fn celsius(c: f64) -> u16 {
    ((c * 256.0).round() as i16) as u16
}

fn watts(w: f64) -> u16 {
    steps(w, 1e7)
}

fn amperes(a: f64) -> u16 {
    steps(a, 5e5)
}

fn volts(v: f64) -> u16 {
    steps(v, 1e4)
}

/// What one module reads at simulated time `t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModuleValues {
    pub temperature_c: f64,
    pub rx_w: [f64; LANES],
    pub tx_w: [f64; LANES],
    pub bias_a: [f64; LANES],
}

/// The module of NIC `nic` of host `host`: healthy wobble, then the scenario's fade.
pub fn values(fabric: &Fabric, host: usize, nic: usize) -> ModuleValues {
    let t = fabric.time_s;
    let fade = fabric.scenario.condition(t, host, nic).optic_rx_fade;
    let seed = host as f64 * 1.7 + nic as f64 * 0.9;
    let mut rx_w = [0.0; LANES];
    let mut tx_w = [0.0; LANES];
    let mut bias_a = [0.0; LANES];
    for lane in 0..LANES {
        let wobble = 1.0 + 0.02 * (t / 11.0 + seed + lane as f64 * 0.6).sin();
        let healthy = HEALTHY_RX_W * (1.0 + 0.04 * (seed + lane as f64).cos()) * wobble;
        // Interpolated in dB: the fade takes the same share of the way in every lane.
        rx_w[lane] = healthy * (FADED_RX_W / healthy).powf(fade);
        tx_w[lane] = 0.8e-3 * (1.0 + 0.03 * (seed * 2.0 + lane as f64).sin());
        bias_a[lane] = 7e-3 * (1.0 + 0.02 * (seed + lane as f64 * 1.3).cos());
    }
    ModuleValues {
        temperature_c: 44.0 + 3.0 * (t / 37.0 + seed).sin(),
        rx_w,
        tx_w,
        bias_a,
    }
}

/// Writes every NIC's module of host `host` under `modules` (`<netdev>/<half page>.bin`), each
/// file through a rename so that a reader never sees half of one. `all`: every page (the
/// first write); else only the pages whose monitors move (lower memory and page 11h).
pub fn write_modules(modules: &Path, fabric: &Fabric, host: usize, all: bool) -> io::Result<()> {
    let Some(nics) = fabric.hosts.get(host).map(|h| &h.nics) else {
        return Ok(());
    };
    for (index, nic) in nics.iter().enumerate() {
        let Some(netdev) = &nic.spec.netdev else {
            continue;
        };
        let dir = modules.join(netdev);
        fs::create_dir_all(&dir)?;
        let serial = format!("SIM{host:02}{index:02}{:06}", 400_000 + index);
        for (page, half) in pages(&values(fabric, host, index), &serial) {
            if !all && !matches!(page, None | Some(0x11)) {
                continue;
            }
            let name = match page {
                None => file_name(0x50, 0, 0, false),
                Some(page) => file_name(0x50, page, 0, true),
            };
            let tmp = dir.join(format!(".{name}.tmp"));
            fs::write(&tmp, half.bytes)?;
            fs::rename(&tmp, dir.join(name))?;
        }
    }
    Ok(())
}

/// The lower memory (`None`) and upper pages 00h, 01h, 02h, 11h of one module.
fn pages(v: &ModuleValues, serial: &str) -> Vec<(Option<u8>, Half)> {
    let mut lower = Half::new(0);
    lower.u8(0, 0x19); // OSFP
    lower.u8(1, 0x50); // CMIS 5.0
    lower.u8(3, 0x06); // ModuleReady
    lower.u16(14, celsius(v.temperature_c));
    lower.u16(16, volts(3.3));
    lower.u8(85, 0x01); // multimode fibre
    lower.u8(88, 0x88); // first application: 8 host lanes, 8 media lanes
    let mut page_00 = Half::new(128);
    page_00.u8(128, 0x19);
    page_00.text(129, 144, "SIM OPTICS");
    page_00.text(148, 163, "OSFP-400G-SR8");
    page_00.text(164, 165, "A0");
    page_00.text(166, 181, serial);
    let mut page_01 = Half::new(128);
    page_01.u8(159, 0x03); // temperature and Vcc monitors
    page_01.u8(160, 0x07); // Tx bias, Tx power, Rx power monitors; bias multiplier 1
    let mut page_02 = Half::new(128);
    page_02.levels(
        128,
        [celsius(75.0), celsius(-5.0), celsius(70.0), celsius(0.0)],
    );
    page_02.levels(136, [volts(3.63), volts(2.97), volts(3.465), volts(3.135)]);
    page_02.levels(176, [3.1623e-3, 112.2e-6, 2.5119e-3, 141.3e-6].map(watts));
    page_02.levels(184, [15e-3, 2e-3, 13e-3, 3e-3].map(amperes));
    page_02.levels(
        192,
        [3.1623e-3, RX_LOW_ALARM_W, 2.5119e-3, RX_LOW_WARNING_W].map(watts),
    );
    let mut page_11 = Half::new(128);
    for lane in 0..LANES {
        page_11.u16(154 + 2 * lane, watts(v.tx_w[lane]));
        page_11.u16(170 + 2 * lane, amperes(v.bias_a[lane]));
        page_11.u16(186 + 2 * lane, watts(v.rx_w[lane]));
    }
    vec![
        (None, lower),
        (Some(0x00), page_00),
        (Some(0x01), page_01),
        (Some(0x02), page_02),
        (Some(0x11), page_11),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::optics::files::FilePages;
    use crate::node::optics::read_module;
    use crate::sim::fabric::Shape;
    use crate::sim::scenario::{Scenario, ScenarioName, OPTIC_FADING_NIC};

    fn fabric(name: ScenarioName, t: f64) -> Fabric {
        let mut fabric = Fabric::new(
            Shape {
                hosts: 2,
                nics_per_host: 4,
                ..Shape::default()
            },
            Scenario::new(name),
        );
        fabric.time_s = t;
        fabric
    }

    #[test]
    fn the_written_pages_decode_to_the_simulated_values() {
        let fabric = fabric(ScenarioName::Healthy, 30.0);
        let dir = tempfile::tempdir().unwrap();
        write_modules(dir.path(), &fabric, 0, true).unwrap();
        let netdev = fabric.hosts[0].nics[0].spec.netdev.clone().unwrap();
        let module = read_module(&FilePages::new(dir.path()), &netdev)
            .unwrap()
            .unwrap();
        assert_eq!(module.identifier_name(), "OSFP");
        let d = module.diagnostics.unwrap();
        let want = values(&fabric, 0, 0);
        assert_eq!(d.lanes.len(), 8);
        for (lane, rx) in d.lanes.iter().zip(want.rx_w) {
            assert!((lane.rx_power_watts.unwrap() - rx).abs() < 1e-7);
        }
        let rx = d.thresholds.rx_power.unwrap();
        assert!((rx.low_warning - RX_LOW_WARNING_W).abs() < 1e-10);
        assert!((d.temperature_celsius.unwrap() - want.temperature_c).abs() < 0.01);
    }

    #[test]
    fn only_the_fading_nic_sinks_under_its_warning_during_the_fault() {
        let (host, nic) = OPTIC_FADING_NIC;
        // Before the fault; at its end; in the next cycles' healthy phase (the fade stays).
        for (t, fading_low) in [(30.0, false), (235.0, true), (330.0, true), (1000.0, true)] {
            let fabric = fabric(ScenarioName::OpticFading, t);
            for h in 0..2 {
                for n in 0..4 {
                    let low = values(&fabric, h, n)
                        .rx_w
                        .iter()
                        .all(|&w| w < RX_LOW_WARNING_W && w > RX_LOW_ALARM_W);
                    let healthy = values(&fabric, h, n).rx_w.iter().all(|&w| w > 0.5e-3);
                    if (h, n) == (host, nic) && fading_low {
                        assert!(low, "t={t} {h}/{n}");
                    } else {
                        assert!(healthy, "t={t} {h}/{n}");
                    }
                }
            }
        }
    }
}
