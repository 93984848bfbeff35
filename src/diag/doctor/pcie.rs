//! The PCIe link of each RDMA device (`node::pcie`): one line a device, a warning when the link
//! trained below what both of its ends support or the function reported uncorrectable errors.

use crate::node::pcie::PcieLink;
use crate::node::sysfs::Device;

use super::report::{Finding, Severity};

/// `None` for a device without a known PCI function (soft devices on veths, non-PCI devices).
pub(crate) fn check_link(device: &Device) -> Option<Finding> {
    let link = device.pcie.as_ref()?;
    let message = describe(link);
    let finding = |severity| Finding::device("pcie", &device.name, severity, &message);
    let uncorrectable = link.aer.nonfatal.unwrap_or(0) + link.aer.fatal.unwrap_or(0);
    Some(match link.downtrained() {
        Some(true) => finding(Severity::Warn).with_fix(
            "the PCIe link trained below what the NIC and its slot support: reseat the NIC and \
             its riser or cable and reboot; check the slot's BIOS settings (bifurcation, forced \
             generation); `lspci -vv` shows LnkCap against LnkSta",
        ),
        _ if uncorrectable > 0 => finding(Severity::Warn).with_fix(
            "the function reported uncorrectable PCIe errors since boot (aer_dev_nonfatal, \
             aer_dev_fatal): see the kernel log (`dmesg | grep -i aer`)",
        ),
        Some(false) => finding(Severity::Ok),
        None => finding(Severity::Info),
    })
}

/// `PCIe 0000:1a:00.0 (NUMA 1): 32 GT/s x16; supports 32 GT/s x16 (upstream 0000:00:01.0)`.
fn describe(link: &PcieLink) -> String {
    let speed = |s: Option<f64>| s.map_or("? GT/s".to_string(), |s| format!("{} GT/s", s / 1e9));
    let width = |w: Option<u32>| w.map_or("x?".to_string(), |w| format!("x{w}"));
    let mut text = format!("PCIe {}", link.function.address);
    if let Some(node) = link.numa_node {
        text.push_str(&format!(" (NUMA {node})"));
    }
    text.push_str(&format!(
        ": {} {}; both ends support {} {}",
        speed(link.function.current_speed),
        width(link.function.current_width),
        speed(link.supported_speed()),
        width(link.supported_width()),
    ));
    if let Some(upstream) = &link.upstream {
        text.push_str(&format!(" (upstream {})", upstream.address));
    }
    if let (Some(nonfatal), Some(fatal)) = (link.aer.nonfatal, link.aer.fatal) {
        text.push_str(&format!("; AER non-fatal {nonfatal}, fatal {fatal}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::pcie::{AerCounts, LinkEnd};

    fn device(width: u32, fatal: u64) -> Device {
        let end = |address: &str, width| LinkEnd {
            address: address.into(),
            current_speed: Some(32e9),
            current_width: Some(width),
            max_speed: Some(32e9),
            max_width: Some(16),
        };
        Device {
            name: "mlx5_1".into(),
            pcie: Some(PcieLink {
                function: end("0000:2a:00.0", width),
                numa_node: Some(0),
                upstream: Some(end("0000:27:01.0", width)),
                aer: AerCounts {
                    correctable: Some(4),
                    nonfatal: Some(0),
                    fatal: Some(fatal),
                },
            }),
            ..Device::default()
        }
    }

    #[test]
    fn a_half_width_link_warns_and_a_full_one_is_ok() {
        let half = check_link(&device(8, 0)).unwrap();
        assert_eq!(half.severity, Severity::Warn);
        assert_eq!(
            half.message,
            "PCIe 0000:2a:00.0 (NUMA 0): 32 GT/s x8; both ends support 32 GT/s x16 \
             (upstream 0000:27:01.0); AER non-fatal 0, fatal 0"
        );
        assert_eq!(check_link(&device(16, 0)).unwrap().severity, Severity::Ok);
        let fatal = check_link(&device(16, 1)).unwrap();
        assert_eq!(fatal.severity, Severity::Warn);
        assert!(fatal.fix.unwrap().contains("aer"));
        assert!(check_link(&Device::default()).is_none());
    }
}
