//! The `transceiver` collector through the binary, on the page images of
//! `tests/fixtures/optics/modules/` (the `files` source) beside the `cx7-roce` sysfs tree: the
//! CMIS 400G module's eight lanes and thresholds are served, and the shipped alert fires on the
//! one lane under its warning threshold, with series taken from a real scrape.

use std::time::{Duration, Instant};

use crate::common;

use common::*;

/// Scrapes until the collector's first reading is served.
fn scrape_with_modules(exporter: &Exporter) -> (String, Vec<Sample>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = exporter.metrics();
        if body.contains("rdma_transceiver_present{") {
            let samples = parse_exposition(&body);
            return (body, samples);
        }
        assert!(Instant::now() < deadline, "no transceiver reading:\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start() -> Exporter {
    let modules = fixture("optics/modules");
    Exporter::on_sysfs(
        &fixture("cx7-roce/sys"),
        &[
            "--collector.transceiver",
            "--collector.transceiver.modules-dir",
            path_str(&modules),
        ],
    )
}

#[test]
fn the_cmis_modules_lanes_sfp_and_qsfp_modules_and_empty_cages_are_served() {
    let exporter = start();
    let (body, samples) = scrape_with_modules(&exporter);
    let port = |device: &'static str, netdev: &'static str| {
        vec![("device", device), ("port", "1"), ("netdev", netdev)]
    };
    let cmis = port("mlx5_0", "ens1f0np0");
    for lane in 1..=8 {
        let lane = lane.to_string();
        let mut labels = cmis.clone();
        labels.push(("lane", lane.as_str()));
        for family in [
            "rdma_transceiver_rx_power_watts",
            "rdma_transceiver_tx_power_watts",
            "rdma_transceiver_bias_current_amperes",
        ] {
            assert!(
                value_of(&samples, family, &labels).is_some(),
                "{family} lane {lane}"
            );
        }
    }
    let mut lane5 = cmis.clone();
    lane5.push(("lane", "5"));
    assert_eq!(
        value_of(&samples, "rdma_transceiver_rx_power_watts", &lane5),
        Some(0.0001)
    );
    let mut low_warning = cmis.clone();
    low_warning.push(("level", "low_warning"));
    assert_eq!(
        value_of(
            &samples,
            "rdma_transceiver_rx_power_threshold_watts",
            &low_warning
        ),
        Some(0.0001122)
    );
    assert_eq!(
        value_of(&samples, "rdma_transceiver_temperature_celsius", &cmis),
        Some(38.5)
    );
    let mut info = cmis.clone();
    info.extend([
        ("identifier", "QSFP-DD"),
        ("standard", "cmis"),
        ("vendor", "ACME OPTICS"),
        ("part_number", "QDD-400G-SR8"),
        ("serial_number", "AC2412345678"),
    ]);
    assert_eq!(
        value_of(&samples, "rdma_transceiver_info", &info),
        Some(1.0)
    );
    // One lane of the SFP28, four of the QSFP28.
    let lanes_of = |device: &str| {
        samples
            .iter()
            .filter(|s| s.name == "rdma_transceiver_rx_power_watts" && s.labels["device"] == device)
            .count()
    };
    assert_eq!((lanes_of("mlx5_1"), lanes_of("mlx5_2")), (4, 1));
    // The cable without diagnostics: present, named, no monitor.
    assert_eq!(
        value_of(
            &samples,
            "rdma_transceiver_present",
            &port("mlx5_3", "ens4f0np0")
        ),
        Some(1.0)
    );
    assert_eq!(lanes_of("mlx5_3"), 0);
    assert!(value_of(
        &samples,
        "rdma_transceiver_temperature_celsius",
        &port("mlx5_3", "ens4f0np0")
    )
    .is_none());
    // Empty cages: present 0, and no error.
    assert_eq!(
        value_of(
            &samples,
            "rdma_transceiver_present",
            &port("mlx5_4", "ens5f0np0")
        ),
        Some(0.0)
    );
    assert!(
        !body.contains("rdma_exporter_transceiver_read_errors_total"),
        "{body}"
    );
    assert_eq!(
        value_of(
            &samples,
            "rdma_exporter_collector_success",
            &[("collector", "transceiver")]
        ),
        Some(1.0)
    );
    promtool_check_metrics(&body);
}

/// promtool input series holding each scraped sample of `families` for 20 minutes.
fn input_series(samples: &[Sample], families: &[&str]) -> String {
    let mut out = String::new();
    for sample in samples
        .iter()
        .filter(|s| families.contains(&s.name.as_str()))
    {
        let labels: Vec<String> = sample
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .chain([
                "instance=\"gpu-node-01\"".to_string(),
                "job=\"rdma-node\"".to_string(),
            ])
            .collect();
        out.push_str(&format!(
            "  - series: '{}{{{}}}'\n    values: '{}+0x20'\n",
            sample.name,
            labels.join(", "),
            sample.value
        ));
    }
    out
}

#[test]
fn the_rx_power_alert_fires_on_the_scraped_low_lane_only() {
    let exporter = start();
    let (_, samples) = scrape_with_modules(&exporter);
    let series = input_series(
        &samples,
        &[
            "rdma_transceiver_rx_power_watts",
            "rdma_transceiver_rx_power_threshold_watts",
            "rdma_transceiver_temperature_celsius",
            "rdma_transceiver_temperature_threshold_celsius",
        ],
    );
    // Four modules' lanes went in (8 + 4 + 1), and their thresholds.
    assert_eq!(
        series.matches("rdma_transceiver_rx_power_watts{").count(),
        13
    );
    let rules = project_root().join("alerts/rdma-alerts.yml");
    let test = format!(
        r#"rule_files:
- {rules}
evaluation_interval: 15s
tests:
- interval: 1m
  input_series:
{series}  alert_rule_test:
  - eval_time: 10m
    alertname: RdmaTransceiverRxPowerLow
    exp_alerts:
    - exp_labels:
        severity: warning
        instance: gpu-node-01
        job: rdma-node
        device: mlx5_0
        port: '1'
        netdev: ens1f0np0
        lane: '5'
      exp_annotations:
        summary: A transceiver lane receives less light than its module's warning threshold.
        description: "gpu-node-01 mlx5_0 (ens1f0np0) lane 5 receives 100uW, under its module's own low warning threshold: a dirty or damaged fibre or connector, or the far end's transmitter fading."
        runbook_url: https://github.com/rdma-fabric-exporter/rdma-fabric-exporter/blob/main/docs/runbooks.md#rdmatransceiverrxpowerlow
  - eval_time: 10m
    alertname: RdmaTransceiverRxPowerCritical
  - eval_time: 10m
    alertname: RdmaTransceiverHot
"#,
        rules = rules.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scraped.test.yml");
    std::fs::write(&file, &test).unwrap();
    let out = promtool(&["test", "rules", path_str(&file)]);
    assert!(out.contains("SUCCESS"), "{out}\n{test}");
}

/// The transceiver samples of a demo host, once its first module reading is served.
fn demo_host(demo: &Exporter, host: &str) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = demo.get(&format!("/hosts/{host}/metrics"));
        assert_eq!(status, 200, "{body}");
        if body.contains("rdma_transceiver_rx_power_watts{") {
            return parse_exposition(&body);
        }
        assert!(Instant::now() < deadline, "{host}: no transceiver reading");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `(device, lane)` of every lane under its module's low warning threshold.
fn lanes_under_warning(samples: &[Sample]) -> Vec<(String, String)> {
    let mut low = Vec::new();
    for rx in samples
        .iter()
        .filter(|s| s.name == "rdma_transceiver_rx_power_watts")
    {
        let device = rx.labels["device"].as_str();
        let warning = value_of(
            samples,
            "rdma_transceiver_rx_power_threshold_watts",
            &[("device", device), ("level", "low_warning")],
        )
        .expect("the module's threshold");
        if rx.value < warning {
            low.push((device.to_string(), rx.labels["lane"].clone()));
        }
    }
    low
}

/// The demo's hosts have healthy modules on every NIC; in `optic-fading` the one NIC the
/// scenario names (gpu-node-02 mlx5_2) receives under its warning threshold on every lane, and
/// no other NIC does.
#[test]
fn optic_fading_sinks_the_named_nic_alone_under_its_threshold() {
    let healthy = Exporter::small_demo("healthy", "150", "500ms", "4");
    for host in ["gpu-node-01", "gpu-node-02"] {
        let samples = demo_host(&healthy, host);
        let lanes = samples
            .iter()
            .filter(|s| s.name == "rdma_transceiver_rx_power_watts")
            .count();
        assert_eq!(lanes, 4 * 8, "{host}");
        assert_eq!(lanes_under_warning(&samples), vec![], "{host}");
    }
    drop(healthy);

    // 150 s into the cycle: the fade has reached its floor (it began at 60 s).
    let fading = Exporter::small_demo("optic-fading", "150", "500ms", "4");
    assert_eq!(
        lanes_under_warning(&demo_host(&fading, "gpu-node-01")),
        vec![]
    );
    let samples = demo_host(&fading, "gpu-node-02");
    let low = lanes_under_warning(&samples);
    let expected: Vec<(String, String)> = (1..=8)
        .map(|lane| ("mlx5_2".to_string(), lane.to_string()))
        .collect();
    assert_eq!(low, expected);
    // Under the warning, not under the alarm: the warning alert's case.
    let alarm = value_of(
        &samples,
        "rdma_transceiver_rx_power_threshold_watts",
        &[("device", "mlx5_2"), ("level", "low_alarm")],
    )
    .unwrap();
    assert!(samples
        .iter()
        .filter(|s| s.name == "rdma_transceiver_rx_power_watts" && s.labels["device"] == "mlx5_2")
        .all(|s| s.value > alarm));
}
