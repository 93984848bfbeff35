//! `demo --scenario pcie-half-width` end to end: the simulated hosts' sysfs trees carry a PCI
//! function and root port for every NIC, read by the real node collector; only the one NIC whose
//! link trained at x8 of x16 says it is downtrained.

use crate::common::{self, demo_hosts_samples, demo_values_by_nic as by_nic, Exporter, Sample};

#[test]
fn the_half_width_nic_alone_is_downtrained() {
    let demo = Exporter::start_subcommand("demo", &["--scenario", "pcie-half-width"]);
    let samples = demo_hosts_samples(&demo);
    let downtrained = by_nic(&samples, "rdma_pcie_link_downtrained");
    let nics = by_nic(&samples, "rdma_port_info").len();
    assert_eq!(downtrained.len(), nics, "one flag per NIC: {downtrained:?}");
    let flagged: Vec<&str> = downtrained
        .iter()
        .filter(|(_, v)| *v == 1.0)
        .map(|(nic, _)| nic.as_str())
        .collect();
    assert_eq!(flagged, ["gpu-node-01 mlx5_1"], "{downtrained:?}");
    assert!(downtrained.iter().all(|(_, v)| *v == 0.0 || *v == 1.0));
    for (nic, width) in by_nic(&samples, "rdma_pcie_link_width_lanes") {
        let want = if nic == "gpu-node-01 mlx5_1" {
            8.0
        } else {
            16.0
        };
        assert_eq!(width, want, "{nic}");
    }
    // The join a panel needs: every NIC's PCI address and NUMA node.
    let info: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "rdma_pcie_link_info")
        .collect();
    assert_eq!(info.len(), nics);
    for s in &info {
        assert!(
            s.labels.contains_key("pci_address") && s.labels.contains_key("numa_node"),
            "{s:?}"
        );
        assert_eq!(s.labels["upstream_pci_address"], "0000:00:01.0", "{s:?}");
    }
    assert!(
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).all(|s| s.value == 0.0),
        "{:?}",
        common::matching(&samples, "rdma_exporter_read_errors_total", &[]).collect::<Vec<_>>()
    );
}

#[test]
fn a_healthy_fabric_has_no_downtrained_link() {
    let demo = Exporter::start_subcommand("demo", &["--scenario", "healthy"]);
    let samples = demo_hosts_samples(&demo);
    let downtrained = by_nic(&samples, "rdma_pcie_link_downtrained");
    assert!(!downtrained.is_empty());
    assert!(
        downtrained.iter().all(|(_, v)| *v == 0.0),
        "{downtrained:?}"
    );
    let aer = by_nic(&samples, "rdma_pcie_aer_errors_total");
    assert_eq!(
        aer.len(),
        2 * downtrained.len(),
        "nonfatal and fatal a NIC: {aer:?}"
    );
    assert!(aer.iter().all(|(_, v)| *v == 0.0), "{aer:?}");
}

/// A real Prometheus with the shipped rules (their `for:` cut to 10 s) scraping the scenario's
/// hosts: RdmaPcieLinkDowntrained arrives for that NIC alone, with its PCI address.
#[test]
fn a_real_prometheus_alerts_on_the_half_width_nic_alone() {
    use common::prometheus;
    let demo = Exporter::small_demo("pcie-half-width", "60", "2s", "6");
    let dir = tempfile::tempdir().unwrap();
    let alerts = crate::alerts_e2e::alerts_without_long_waits(dir.path());
    let rules = common::project_root().join("alerts/rdma-rules.yml");
    let (_prometheus, address) = prometheus::start_with_rules(
        dir.path(),
        &prometheus::demo_sd_job("rdma-pcie", &demo.address, None),
        &[&rules, &alerts],
    );
    let firing = prometheus::wait_for(
        &address,
        r#"ALERTS{alertname=~"RdmaPcie.*",alertstate="firing"}"#,
        std::time::Duration::from_secs(90),
        |v| !v.is_empty(),
    );
    // A little longer: a second NIC's alert would have had its chance too.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let firing = prometheus::try_query(
        &address,
        r#"ALERTS{alertname=~"RdmaPcie.*",alertstate="firing"}"#,
    )
    .unwrap_or(firing);
    assert_eq!(firing.len(), 1, "{firing:?}");
    let labels = &firing[0].0;
    assert_eq!(labels["alertname"], "RdmaPcieLinkDowntrained");
    assert_eq!(labels["instance"], "gpu-node-01", "{labels:?}");
    assert_eq!(labels["device"], "mlx5_1", "{labels:?}");
    assert!(labels.contains_key("pci_address"), "{labels:?}");
}
