//! The `rdma_pcie_*` families: a device's PCIe link ([`super::pcie::PcieLink`]) as metrics.
//!
//! Series budget: at most 6 a device by default (the info series, current speed and width,
//! the downtrained flag, non-fatal and fatal AER counts); `detail` adds the correctable AER
//! count and the maxima of both ends (4 more), for the cases the flag alone does not explain.

use std::borrow::Cow;

use super::pcie::PcieLink;
use super::sysfs::{Device, NodeSnapshot};
use crate::exposition::{Families, Value};

/// `node.pcie`: how much of each device's PCIe link is exported.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcieConfig {
    /// Also the correctable AER count and both ends' maximum speed and width (4 more series
    /// a device).
    pub detail: bool,
}

/// The PCIe families of every device of `snapshot`.
pub(crate) fn add_node_pcie<'a>(
    families: &mut Families<'a>,
    snapshot: &'a NodeSnapshot,
    detail: bool,
) {
    for device in &snapshot.devices {
        add_pcie_metrics(families, device, detail);
    }
}

/// Adds the PCIe families of `device` (nothing when its PCI function is unknown).
pub(crate) fn add_pcie_metrics<'a>(families: &mut Families<'a>, device: &'a Device, detail: bool) {
    let Some(link) = &device.pcie else {
        return;
    };
    let name = || ("device", Cow::Borrowed(device.name.as_str()));
    add_info(families, device, link);
    if let Some(speed) = link.function.current_speed {
        families.gauge(
            "rdma_pcie_link_speed_transfers_per_second",
            "Current PCIe link speed of the RDMA device's PCI function (current_link_speed), in transfers per second (16.0 GT/s = 16e9).",
            [name()],
            Value::F64(speed),
        );
    }
    if let Some(width) = link.function.current_width {
        families.gauge(
            "rdma_pcie_link_width_lanes",
            "Current PCIe link width of the RDMA device's PCI function (current_link_width), in lanes.",
            [name()],
            Value::U64(u64::from(width)),
        );
    }
    if let Some(downtrained) = link.downtrained() {
        families.gauge(
            "rdma_pcie_link_downtrained",
            "1 when the PCIe link runs slower or narrower than both of its ends support: current speed or width below the lower of the function's and its upstream port's maximum.",
            [name()],
            Value::U64(u64::from(downtrained)),
        );
    }
    let aer = [
        ("correctable", link.aer.correctable, detail),
        ("nonfatal", link.aer.nonfatal, true),
        ("fatal", link.aer.fatal, true),
    ];
    for (severity, count, shown) in aer {
        let (Some(count), true) = (count, shown) else {
            continue;
        };
        families.counter(
            "rdma_pcie_aer_errors_total",
            "PCIe errors the function reported through AER since boot (TOTAL_ERR_* of aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal); correctable only with node.pcie.detail.",
            [name(), ("severity", Cow::Borrowed(severity))],
            Value::U64(count),
        );
    }
    if detail {
        add_maxima(families, device, link);
    }
}

/// `rdma_pcie_link_info`: where the function sits, for joins (a NIC beside the GPUs of its
/// NUMA node). A fact sysfs does not give is left out rather than written empty.
fn add_info<'a>(families: &mut Families<'a>, device: &'a Device, link: &'a PcieLink) {
    let labels = [
        ("device", Cow::Borrowed(device.name.as_str())),
        ("pci_address", Cow::Borrowed(link.function.address.as_str())),
        (
            "numa_node",
            link.numa_node
                .map_or(Cow::Borrowed(""), |n| Cow::Owned(n.to_string())),
        ),
        (
            "upstream_pci_address",
            Cow::Borrowed(link.upstream.as_ref().map_or("", |u| u.address.as_str())),
        ),
    ];
    families.info(
        "rdma_pcie_link_info",
        "PCI function of an RDMA device: its PCI address, NUMA node and the PCI address of the port above it (switch downstream port or root port).",
        labels.into_iter().filter(|(_, value)| !value.is_empty()),
    );
}

/// The maxima of both ends of the link (`node.pcie.detail`).
fn add_maxima<'a>(families: &mut Families<'a>, device: &'a Device, link: &'a PcieLink) {
    let ends = std::iter::once(("device", &link.function))
        .chain(link.upstream.as_ref().map(|u| ("upstream", u)));
    for (end, values) in ends {
        let labels = || {
            [
                ("device", Cow::Borrowed(device.name.as_str())),
                ("end", Cow::Borrowed(end)),
            ]
        };
        if let Some(speed) = values.max_speed {
            families.gauge(
                "rdma_pcie_link_max_speed_transfers_per_second",
                "Highest PCIe link speed one end of the RDMA device's link supports (max_link_speed of the function, end=device, or of its upstream port, end=upstream), in transfers per second.",
                labels(),
                Value::F64(speed),
            );
        }
        if let Some(width) = values.max_width {
            families.gauge(
                "rdma_pcie_link_max_width_lanes",
                "Widest PCIe link one end of the RDMA device's link supports (max_link_width of the function, end=device, or of its upstream port, end=upstream), in lanes.",
                labels(),
                Value::U64(u64::from(width)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::pcie::{AerCounts, LinkEnd};

    fn device(link: Option<PcieLink>) -> Device {
        Device {
            name: "mlx5_0".into(),
            pcie: link,
            ..Device::default()
        }
    }

    fn half_width() -> PcieLink {
        let end = |address: &str, width| LinkEnd {
            address: address.into(),
            current_speed: Some(32e9),
            current_width: Some(width),
            max_speed: Some(32e9),
            max_width: Some(16),
        };
        PcieLink {
            function: end("0000:1a:00.0", 8),
            numa_node: Some(1),
            upstream: Some(end("0000:00:01.0", 8)),
            aer: AerCounts {
                correctable: Some(7),
                nonfatal: Some(2),
                fatal: Some(0),
            },
        }
    }

    /// One `name{labels} value` line a sample, in the order added.
    fn text(families: &Families) -> String {
        families
            .samples()
            .map(|(name, labels, value)| {
                let labels: Vec<String> =
                    labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
                let value = match value {
                    Value::U64(v) => v.to_string(),
                    Value::F64(v) => v.to_string(),
                };
                format!("{name}{{{}}} {value}\n", labels.join(","))
            })
            .collect()
    }

    #[test]
    fn six_series_by_default_and_the_flag_says_half_width() {
        let device = device(Some(half_width()));
        let mut families = Families::default();
        add_pcie_metrics(&mut families, &device, false);
        assert_eq!(families.len(), 6);
        let text = text(&families);
        for line in [
            r#"rdma_pcie_link_info{device="mlx5_0",pci_address="0000:1a:00.0",numa_node="1",upstream_pci_address="0000:00:01.0"} 1"#,
            r#"rdma_pcie_link_width_lanes{device="mlx5_0"} 8"#,
            r#"rdma_pcie_link_downtrained{device="mlx5_0"} 1"#,
            r#"rdma_pcie_aer_errors_total{device="mlx5_0",severity="nonfatal"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("correctable"), "{text}");
    }

    #[test]
    fn detail_adds_correctable_errors_and_both_ends_maxima() {
        let device = device(Some(half_width()));
        let mut families = Families::default();
        add_pcie_metrics(&mut families, &device, true);
        assert_eq!(families.len(), 11);
        let text = text(&families);
        assert!(text
            .contains(r#"rdma_pcie_aer_errors_total{device="mlx5_0",severity="correctable"} 7"#));
        assert!(
            text.contains(r#"rdma_pcie_link_max_width_lanes{device="mlx5_0",end="upstream"} 16"#)
        );
    }

    #[test]
    fn unknown_facts_are_left_out() {
        let mut link = half_width();
        link.numa_node = None;
        link.upstream = None;
        link.aer = AerCounts::default();
        link.function.current_speed = None;
        let device = device(Some(link));
        let mut families = Families::default();
        add_pcie_metrics(&mut families, &device, false);
        let text = text(&families);
        assert!(
            text.contains(r#"rdma_pcie_link_info{device="mlx5_0",pci_address="0000:1a:00.0"} 1"#),
            "{text}"
        );
        assert!(!text.contains("rdma_pcie_link_speed"), "{text}");
        assert!(!text.contains("rdma_pcie_link_downtrained"), "{text}");
        assert!(!text.contains("rdma_pcie_aer"), "{text}");
        let off_pci = self::device(None);
        let mut none = Families::default();
        add_pcie_metrics(&mut none, &off_pci, true);
        assert!(none.is_empty());
    }
}
