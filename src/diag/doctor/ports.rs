//! Link state, physical state and speed of every port.

use crate::node::sysfs::{Device, Port};

use super::report::{Finding, Severity};

/// IB_PORT_ACTIVE and the LinkUp physical state, as the kernel numbers them.
const STATE_ACTIVE: u32 = 4;
const PHYS_LINK_UP: u32 = 5;

pub(crate) fn check_state(device: &str, port: &Port) -> Finding {
    let state = port.state.as_ref().map(|(_, s)| s.as_str()).unwrap_or("?");
    let phys = port
        .phys_state
        .as_ref()
        .map(|(_, s)| s.as_str())
        .unwrap_or("?");
    let link_layer = port.link_layer.as_deref().unwrap_or("unknown link layer");
    let message = format!("{state}, {phys}, {link_layer}");
    let active = port
        .state
        .as_ref()
        .is_some_and(|(id, _)| *id == STATE_ACTIVE);
    let link_up = port
        .phys_state
        .as_ref()
        .is_some_and(|(id, _)| *id == PHYS_LINK_UP);
    let finding = |severity| Finding::port("port-state", device, port.number, severity, &message);
    match (active, link_up) {
        (true, true) => finding(Severity::Ok),
        (false, true) if !port.is_ethernet() => finding(Severity::Fail).with_fix(
            "the link is up but the port is not ACTIVE: on InfiniBand no subnet manager has \
             configured it; start opensm or check the fabric's SM",
        ),
        _ => finding(Severity::Fail).with_fix(
            "no link: check the cable and transceiver, the switch port (admin up, speed, \
             breakout), and `ip link set <netdev> up` for RoCE",
        ),
    }
}

/// Compares the port's rate with `expected_gbps`, or else with the fastest port of the same
/// link layer on this node (NICs of one role are normally bought and cabled alike).
pub(crate) fn check_rate(
    devices: &[Device],
    device: &str,
    port: &Port,
    expected_gbps: Option<f64>,
) -> Finding {
    let Some(rate) = port.rate_bytes_per_second.map(gbps) else {
        return Finding::port(
            "rate",
            device,
            port.number,
            Severity::Info,
            "rate not readable",
        );
    };
    let (target, against) = match expected_gbps {
        Some(expected) => (expected, "expected".to_string()),
        None => {
            let fastest = devices
                .iter()
                .flat_map(|d| &d.ports)
                .filter(|p| p.link_layer == port.link_layer)
                .filter_map(|p| p.rate_bytes_per_second.map(gbps))
                .fold(rate, f64::max);
            (fastest, "the fastest sibling port".to_string())
        }
    };
    if rate + 0.5 >= target {
        return Finding::port(
            "rate",
            device,
            port.number,
            Severity::Ok,
            format!("{rate} Gb/s"),
        );
    }
    Finding::port(
        "rate",
        device,
        port.number,
        Severity::Warn,
        format!("{rate} Gb/s, {against} runs at {target} Gb/s"),
    )
    .with_fix(
        "a slow link: check the cable/transceiver (a failed lane), the switch port's speed and \
         auto-negotiation/FEC settings",
    )
}

fn gbps(bytes_per_second: f64) -> f64 {
    (bytes_per_second * 8.0 / 1e9).round()
}
