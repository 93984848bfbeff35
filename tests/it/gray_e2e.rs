//! The gray-failure alerts end to end (issue 62): simulated fabrics scraped by a real Prometheus
//! that evaluates the shipped rules. `gray-nic` must raise RdmaNicPeerOutlier for its NIC, on the
//! signals it stands out on, and no threshold alert; `ber-climbing` must raise
//! RdmaLinkTrendingToFailure for its link; `healthy` (ten minutes of demo time) and every other
//! scenario must raise neither.
//!
//! The shipped `for:` are cut so that a test can see an alert: 10 s for every alert, 2 minutes
//! for the two new ones. Both stand down while another warning or critical alert about their
//! NIC is pending or firing, and shipped, they wait longer (30 minutes) than any of those
//! (15 minutes at most); cut, they keep waiting longer than the others need to turn pending,
//! so a fault that a threshold alert sees within two minutes stays theirs. Whether an alert
//! fired is read from Prometheus' own `ALERTS` history, not from when the test looked.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::prometheus;
use common::{parse_exposition, project_root, ChildGuard, Exporter};

const NEW_ALERTS: &str = "RdmaNicPeerOutlier|RdmaLinkTrendingToFailure";

/// The shipped alerts, every `for:` cut to 10 s, the gray group's to 2 minutes.
fn alerts_with_short_waits(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(project_root().join("alerts/rdma-alerts.yml")).unwrap();
    let mut file: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut cut = 0;
    for group in file["groups"].as_sequence_mut().unwrap() {
        for rule in group["rules"].as_sequence_mut().unwrap() {
            let gray = rule["alert"]
                .as_str()
                .is_some_and(|name| NEW_ALERTS.split('|').any(|n| n == name));
            let rule = rule.as_mapping_mut().unwrap();
            if rule.contains_key("for") {
                let wait = if gray { "2m" } else { "10s" };
                rule.insert("for".into(), wait.into());
                cut += 1;
            }
        }
    }
    assert!(cut >= 30, "{cut} for: lines");
    let path = dir.join("rdma-alerts-short-waits.yml");
    std::fs::write(&path, serde_yaml::to_string(&file).unwrap()).unwrap();
    path
}

/// Prometheus scraping each demo as its own cluster (`cluster` = the scenario), every 5 s, with
/// the shipped recording rules and the alerts above.
fn prometheus_for(dir: &Path, demos: &[(&str, &Exporter)]) -> (ChildGuard, String) {
    let jobs: String = demos
        .iter()
        .map(|(scenario, demo)| {
            prometheus::demo_sd_job(&format!("rdma-{scenario}"), &demo.address, Some(scenario))
        })
        .collect();
    let rules = project_root().join("alerts/rdma-rules.yml");
    let alerts = alerts_with_short_waits(dir);
    let config = format!(
        "global:\n  scrape_interval: 5s\n  scrape_timeout: 5s\n  evaluation_interval: 5s\nrule_files:\n{}scrape_configs:\n{jobs}",
        prometheus::rule_file_list(&[&rules, &alerts])
    );
    prometheus::launch(dir, &config)
}

/// A demo of `hosts` hosts of 6 NICs (every scenario's NIC is among them), `start_at` into its
/// cycle, at `speed`, its counters moving once a second.
fn demo(scenario: &str, hosts: &str, start_at: &str, speed: &str) -> Exporter {
    Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            scenario,
            "--hosts",
            hosts,
            "--nics-per-host",
            "6",
            "--start-at",
            start_at,
            "--speed",
            speed,
            "--switch-interval",
            "5s",
            // Rates over the 5 s scrapes are the same; a demo costs a tenth of a core less.
            "--tick",
            "1s",
        ],
    )
}

/// Every alert that fired in the last `window`, as (cluster, alertname, instance, device).
fn fired(address: &str, selector: &str, window: &str) -> Vec<(String, String, String, String)> {
    let expr = format!(
        "count by (cluster, alertname, instance, device) (max_over_time(ALERTS{{alertstate=\"firing\",{selector}}}[{window}]))"
    );
    let label = |l: &BTreeMap<String, String>, k: &str| l.get(k).cloned().unwrap_or_default();
    // Nothing while Prometheus is still starting.
    let mut all: Vec<_> = prometheus::try_query(address, &expr)
        .unwrap_or_default()
        .into_iter()
        .map(|(l, _)| {
            (
                label(&l, "cluster"),
                label(&l, "alertname"),
                label(&l, "instance"),
                label(&l, "device"),
            )
        })
        .collect();
    all.sort();
    all
}

/// The description of a firing alert, from Prometheus' alerts API.
fn description(address: &str, alertname: &str, cluster: &str) -> Option<String> {
    let answer: serde_json::Value =
        reqwest::blocking::get(format!("http://{address}/api/v1/alerts"))
            .ok()?
            .json()
            .ok()?;
    answer["data"]["alerts"]
        .as_array()?
        .iter()
        .find(|a| {
            a["labels"]["alertname"] == alertname
                && a["labels"]["cluster"] == cluster
                && a["state"] == "firing"
        })
        .and_then(|a| a["annotations"]["description"].as_str())
        .map(str::to_string)
}

/// Simulated seconds the healthy demo has run: the bytes its first NIC sent at ~92 % of 400G.
fn demo_seconds(demo: &Exporter) -> f64 {
    let (status, _, body) = demo.get("/hosts/gpu-node-01/metrics");
    assert_eq!(status, 200, "{body}");
    let sent = parse_exposition(&body)
        .into_iter()
        .find(|s| {
            s.name == "rdma_port_xmit_data_bytes_total"
                && s.labels.get("device").map(String::as_str) == Some("mlx5_0")
        })
        .map(|s| s.value)
        .unwrap_or(0.0);
    sent / (0.92 * 50e9)
}

#[test]
fn gray_nic_and_ber_climbing_fire_their_alerts_and_healthy_fires_neither() {
    let _exclusive = common::exclusive(module_path!());
    // gray-nic from boot; ber-climbing 2 simulated minutes before its BER passes 1e-7 (it
    // starts climbing at 60 s); healthy four times faster, from its start.
    let gray = demo("gray-nic", "4", "0", "1");
    let climbing = demo("ber-climbing", "4", "120", "1");
    let healthy = demo("healthy", "4", "0", "4");
    let healthy_sent_at_start = demo_seconds(&healthy);
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, address) = prometheus_for(
        dir.path(),
        &[
            ("gray-nic", &gray),
            ("ber-climbing", &climbing),
            ("healthy", &healthy),
        ],
    );
    let wanted = [
        (
            "gray-nic".to_string(),
            "RdmaNicPeerOutlier".to_string(),
            "gpu-node-03".to_string(),
            "mlx5_1".to_string(),
        ),
        (
            "ber-climbing".to_string(),
            "RdmaLinkTrendingToFailure".to_string(),
            "gpu-node-02".to_string(),
            "mlx5_4".to_string(),
        ),
    ];
    let selector = format!("alertname=~\"{NEW_ALERTS}\"");
    let started = Instant::now();
    // Both fired, and the healthy fabric ran ten simulated minutes under the rules.
    loop {
        let now = fired(&address, &selector, "1h");
        let healthy_ran = demo_seconds(&healthy) - healthy_sent_at_start;
        if wanted.iter().all(|w| now.contains(w)) && healthy_ran >= 600.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "after 15 minutes: {now:?} fired, healthy ran {healthy_ran:.0} s"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let fired_new = fired(&address, &selector, "1h");
    // gray-nic on its NIC alone; ber-climbing on its link (and, since its FEC corrections stand
    // far out of its rail, maybe RdmaNicPeerOutlier on that same NIC); healthy never.
    for (cluster, alert, instance, device) in &fired_new {
        let nic = (instance.as_str(), device.as_str());
        match cluster.as_str() {
            "gray-nic" => assert_eq!(
                (alert.as_str(), nic),
                ("RdmaNicPeerOutlier", ("gpu-node-03", "mlx5_1")),
                "{fired_new:?}"
            ),
            "ber-climbing" => assert_eq!(nic, ("gpu-node-02", "mlx5_4"), "{fired_new:?}"),
            _ => panic!("{cluster} fired {alert}: {fired_new:?}"),
        }
    }
    // It names the signals it stands out on, with the peers' median: read once every signal
    // has had its 5-minute window (the NIC is gray from boot, so the alert still fires).
    let description =
        description(&address, "RdmaNicPeerOutlier", "gray-nic").expect("the alert's description");
    for signal in [
        "transport_errors",
        "cnp_handled",
        "pfc_paused",
        "fec_corrected_bits",
        "rx_power_margin_db",
    ] {
        assert!(description.contains(signal), "{signal}: {description}");
    }
    assert!(description.contains("peers' median"), "{description}");
    // The gray NIC stays under every threshold: no other warning or critical alert fired in
    // gray-nic's fabric.
    let others = fired(
        &address,
        &format!("cluster=\"gray-nic\",alertname!~\"{NEW_ALERTS}\",severity=~\"warning|critical\""),
        "1h",
    );
    assert_eq!(others, vec![], "threshold alerts on gray-nic");
}

/// Every other RoCE scenario, on four hosts (rails of four NICs, so that the peer comparison
/// runs), from its fault's start through its recovery, six at a time under one Prometheus (at
/// 1 s ticks six cost less than two did at 100 ms; fifteen demos at once, with the other
/// test's three, starved a loaded machine of its scrapes): neither new alert fires.
#[test]
fn no_other_scenario_fires_the_gray_alerts() {
    let _exclusive = common::exclusive(module_path!());
    let batches: [&[&str]; 2] = [
        &[
            "pfc-storm",
            "ecn-too-high",
            "ecn-too-low",
            "link-flap",
            "cnp-ignored",
            "transport-errors",
        ],
        &[
            "nic-optic-failure",
            "optic-fading",
            "pcie-half-width",
            "leaf-spine-loss",
            "leaf-ecmp-blackhole",
            "host-cpu-load",
        ],
    ];
    let selector = format!("alertname=~\"{NEW_ALERTS}\"");
    for batch in batches {
        let demos: Vec<Exporter> = batch.iter().map(|s| demo(s, "4", "60", "1")).collect();
        let named: Vec<(&str, &Exporter)> = batch.iter().copied().zip(demos.iter()).collect();
        let dir = tempfile::tempdir().unwrap();
        let (_prometheus, address) = prometheus_for(dir.path(), &named);
        // The fault (180 s) and a minute of recovery, with the rules evaluating throughout:
        // the rules' own series say how long they have run.
        let evaluated = |address: &str| {
            prometheus::try_query(
                address,
                "count(count_over_time(rdma:rail_peer_signal:median5m{signal=\"tx_bytes\"}[1h]) >= 48)",
            )
            .and_then(|v| v.first().map(|(_, n)| *n))
            .unwrap_or(0.0)
        };
        let started = Instant::now();
        // Every rail (six a demo) compared for 48 evaluations: 4 minutes at 5 s.
        while evaluated(&address) < (batch.len() * 6) as f64 {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "{batch:?}: the rules did not run for 4 minutes over every port"
            );
            std::thread::sleep(Duration::from_secs(2));
        }
        // The peer comparison ran: every rail had its median.
        let medians = prometheus::query(
            &address,
            "count by (cluster) (rdma:rail_peer_signal:median5m{signal=\"tx_bytes\"})",
        );
        assert_eq!(medians.len(), batch.len(), "{medians:?}");
        let fired_new = fired(&address, &selector, "1h");
        // On failure, the signals that made the outliers.
        let outliers: Vec<String> =
            prometheus::query(&address, "max_over_time(rdma:nic_peer_outlier:score5m[1h])")
                .iter()
                .map(|(l, score)| format!("{l:?} {score:.1}"))
                .collect();
        assert_eq!(fired_new, vec![], "{batch:?}; outliers seen: {outliers:#?}");
    }
}
