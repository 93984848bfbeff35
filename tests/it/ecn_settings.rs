//! The NIC's ECN/DCQCN settings end to end: MLNX_OFED's `class/net/<netdev>/ecn/` read by the
//! real binary on a fixture node (only the PFC priority exported, parameters opt-in, a garbled
//! file a read error), and on the demo: the healthy fabric reports ECN on, and the shipped
//! `RdmaTrafficOnPriorityWithoutEcn` expression, evaluated by a real Prometheus over the
//! `cnp-ignored` demo, selects exactly the NIC whose reaction point is off.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use rdma_fabric_exporter::sim::ecn_tree::{write_ecn, EcnSpec};

/// The cx7-roce node with MLNX_OFED's `ecn/` below two netdevs: `ens1f0np0` (mlx5_0) with
/// DCQCN on for priority 3, `ens2f0np0` (mlx5_1) with `roce_rp/enable/3` garbled.
fn node_with_ecn() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce"), dir.path());
    let net = dir.path().join("sys/class/net");
    let write = |path: &Path, text: &str| std::fs::write(path, text);
    write_ecn(&net.join("ens1f0np0"), &EcnSpec::on_priority(3), &write).unwrap();
    write_ecn(&net.join("ens2f0np0"), &EcnSpec::on_priority(3), &write).unwrap();
    std::fs::write(net.join("ens2f0np0/ecn/roce_rp/enable/3"), "on\n").unwrap();
    dir
}

fn node(dir: &Path, extra: &[&str]) -> Vec<Sample> {
    let exporter = Exporter::on_node(&dir.join("sys"), &dir.join("ethtool"), extra);
    parse_exposition(&exporter.metrics())
}

#[test]
fn a_node_exports_its_pfc_prioritys_settings_and_counts_a_garbled_file() {
    let dir = node_with_ecn();
    let samples = node(dir.path(), &[]);
    let ecn: BTreeSet<String> = samples
        .iter()
        .filter(|s| s.name == "rdma_ecn_enabled")
        .map(|s| {
            format!(
                "{} {} {} {} {}",
                s.labels["device"],
                s.labels["netdev"],
                s.labels["priority"],
                s.labels["point"],
                s.value
            )
        })
        .collect();
    // mlx5_0: priority 3 only (the PFC priority; the fixture's traffic on 0 and 6 is not
    // read), both points on. mlx5_1: the garbled reaction point is left out, the notification
    // point read. No other device has an ecn/ directory.
    assert_eq!(
        ecn,
        BTreeSet::from([
            "mlx5_0 ens1f0np0 3 reaction 1".to_string(),
            "mlx5_0 ens1f0np0 3 notification 1".to_string(),
            "mlx5_1 ens2f0np0 3 notification 1".to_string(),
        ])
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_read_errors_total",
            &[("device", "mlx5_1"), ("reason", "parse")]
        ),
        Some(1.0)
    );
    assert!(
        !samples.iter().any(|s| s.name.starts_with("rdma_dcqcn_")),
        "parameters are opt-in"
    );

    let samples = node(dir.path(), &["--collector.sysfs.ecn-parameters"]);
    let mlx5_0: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name.starts_with("rdma_dcqcn_") && s.labels["device"] == "mlx5_0")
        .collect();
    assert_eq!(mlx5_0.len(), 19, "{mlx5_0:#?}");
    assert_eq!(
        value_of(
            &samples,
            "rdma_dcqcn_rp_ai_rate_bytes_per_second",
            &[("device", "mlx5_0")]
        ),
        Some(5.0 * 125_000.0)
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_dcqcn_np_min_time_between_cnps_seconds",
            &[("device", "mlx5_0")]
        ),
        Some(4e-6)
    );
}

/// The expression of the shipped `RdmaTrafficOnPriorityWithoutEcn`.
fn alert_expression() -> String {
    let text = std::fs::read_to_string(project_root().join("alerts/rdma-alerts.yml")).unwrap();
    let file: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    file["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .find(|r| r["alert"].as_str() == Some("RdmaTrafficOnPriorityWithoutEcn"))
        .and_then(|r| r["expr"].as_str())
        .expect("the alert is shipped")
        .to_string()
}

#[test]
fn the_alert_selects_exactly_the_demo_nic_with_its_reaction_point_off() {
    let _exclusive = common::exclusive(module_path!());
    // 2 hosts of 6 NICs; 60 s into the cycle: the fault (cnp-ignored: gpu-node-02 mlx5_1's
    // reaction point off) runs for the next 180 s.
    let healthy = Exporter::small_demo("healthy", "60", "2s", "6");
    let faulty = Exporter::small_demo("cnp-ignored", "60", "2s", "6");
    let dir = tempfile::tempdir().unwrap();
    let jobs = [
        prometheus::demo_sd_job("rdma-healthy", &healthy.address, Some("healthy")),
        prometheus::demo_sd_job("rdma-cnp-ignored", &faulty.address, Some("cnp-ignored")),
    ]
    .concat();
    let (_prometheus, address) = prometheus::start_with_rules(
        dir.path(),
        &jobs,
        &[&project_root().join("alerts/rdma-rules.yml")],
    );

    // The healthy fabric reports DCQCN on for the RoCE priority at both points of every NIC.
    let on = prometheus::wait_for(
        &address,
        r#"rdma_ecn_enabled{cluster="healthy"} == 1"#,
        Duration::from_secs(60),
        |v| v.len() == 2 * 2 * 6,
    );
    assert_eq!(on.len(), 2 * 2 * 6, "{on:?}");
    assert!(on.iter().all(|(labels, _)| labels["priority"] == "3"));

    let expr = alert_expression();
    let selected =
        prometheus::wait_for(&address, &expr, Duration::from_secs(90), |v| !v.is_empty());
    let nics: BTreeSet<(String, String, String, String)> = selected
        .iter()
        .map(|(labels, _)| {
            (
                labels["cluster"].clone(),
                labels["instance"].clone(),
                labels["device"].clone(),
                labels["point"].clone(),
            )
        })
        .collect();
    assert_eq!(
        nics,
        BTreeSet::from([(
            "cnp-ignored".to_string(),
            "gpu-node-02".to_string(),
            "mlx5_1".to_string(),
            "reaction".to_string()
        )]),
        "{selected:?}"
    );
    // Its value is the priority's share of the NIC's RDMA bytes: all of them.
    assert!(
        selected.iter().all(|(_, share)| *share > 0.9),
        "{selected:?}"
    );
    // A few evaluations later the healthy fabric still selects nothing.
    std::thread::sleep(Duration::from_secs(3));
    let again = prometheus::query(&address, &expr);
    assert!(
        !again.is_empty()
            && again
                .iter()
                .all(|(labels, _)| labels["cluster"] == "cnp-ignored"),
        "{again:?}"
    );
}
