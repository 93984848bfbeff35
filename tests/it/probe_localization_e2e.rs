//! Localization end to end (docs/localization.md): the demo's probe scenarios, a real
//! Prometheus evaluating the shipped rules, one `localize` reading it back for every cluster and
//! scraped by it, a real Alertmanager routing to a webhook receiver in this test. Each fault must be named by its verdict and its alert, and no other verdict may
//! appear in its fabric. A second test measures the time from a fault to its page with the
//! shipped intervals (agents scraped every 15 s; the localizer rounding, scraped and its alerts
//! evaluated every 5 s).

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::alerting::{alertmanager, webhook};
use common::prometheus;
use common::*;

use super::alerts_e2e::alerts_without_long_waits;
use super::localizer_e2e::localizer;

/// Prometheus on `address` with `rule_files`, sending to `alertmanager`, scraping and
/// evaluating every `interval`.
fn prometheus_at(
    dir: &std::path::Path,
    address: &str,
    interval: &str,
    rule_files: &[&std::path::Path],
    alertmanager: &str,
    scrape_configs: &str,
) -> ChildGuard {
    let config = format!(
        "global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  evaluation_interval: {interval}\nrule_files:\n{}alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\nscrape_configs:\n{scrape_configs}",
        prometheus::rule_file_list(rule_files)
    );
    prometheus::launch_at(dir, &config, address)
}

/// A small fabric of 2 hosts of 6 NICs on three leaves: with two leaves every path between them
/// has an end on each, and the uplinks of neither could be told apart.
fn demo(scenario: &str, start_at: &str) -> Exporter {
    Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            scenario,
            "--start-at",
            start_at,
            "--switch-interval",
            "2s",
            "--hosts",
            "2",
            "--nics-per-host",
            "6",
            "--leaves",
            "3",
        ],
    )
}

/// A scenario, the alert that must name its fault, and the verdict (`kind` and the labels that
/// name the suspect) the rules must record; `None`: no verdict but `responder`.
struct Expected {
    scenario: &'static str,
    alert: &'static str,
    labels: &'static [(&'static str, &'static str)],
    verdict: &'static [(&'static str, &'static str)],
}

const EXPECTED: [Expected; 4] = [
    Expected {
        scenario: "leaf-spine-loss",
        alert: "RdmaProbeSuspect",
        labels: &[("kind", "uplink"), ("switch", "leaf1")],
        verdict: &[("kind", "uplink"), ("switch", "leaf1")],
    },
    Expected {
        scenario: "nic-optic-failure",
        alert: "RdmaProbeSuspect",
        // Its leaf port joins the verdict once the switch poller's LLDP series are in; a page
        // that comes before names the NIC alone.
        labels: &[
            ("kind", "nic"),
            ("host", "gpu-node-02"),
            ("device", "mlx5_3"),
        ],
        verdict: &[
            ("kind", "nic"),
            ("host", "gpu-node-02"),
            ("device", "mlx5_3"),
            ("switch", "leaf1"),
        ],
    },
    Expected {
        scenario: "leaf-ecmp-blackhole",
        alert: "RdmaProbeSuspect",
        labels: &[("kind", "leaf"), ("switch", "leaf2")],
        verdict: &[("kind", "leaf"), ("switch", "leaf2")],
    },
    Expected {
        scenario: "host-cpu-load",
        alert: "RdmaProbeResponderSlow",
        labels: &[("instance", "gpu-node-02")],
        verdict: &[("kind", "responder"), ("host", "gpu-node-02")],
    },
];

fn has(labels: &BTreeMap<String, String>, wanted: &[(&str, &str)]) -> bool {
    wanted
        .iter()
        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
}

/// The probe alerts that name a suspect in the network.
const SUSPECT_ALERTS: [&str; 2] = ["RdmaProbeSuspect", "RdmaProbeHostUnreachable"];

#[test]
fn each_probe_fault_is_localized_and_no_other_suspect_is_named() {
    let _exclusive = common::exclusive(module_path!());
    // Every fault starts with the demo (--start-at 60: the fault's first second).
    let demos: Vec<Exporter> = EXPECTED.iter().map(|e| demo(e.scenario, "60")).collect();
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (_am, am_address) = alertmanager(dir.path(), &hook);
    // One localizer for the four clusters, started first: Prometheus scrapes it.
    let address = format!("127.0.0.1:{}", prometheus::free_port());
    let localize = localizer(&address, "2s");
    let mut scrape_configs: String = EXPECTED
        .iter()
        .zip(&demos)
        .map(|(e, d)| {
            prometheus::demo_sd_job(
                &format!("rdma-{}", e.scenario),
                &d.address,
                Some(e.scenario),
            )
        })
        .collect();
    scrape_configs += &prometheus::localizer_job("rdma-localizer", &localize.address, None);
    let fast = alerts_without_long_waits(dir.path());
    let rules = project_root().join("alerts/rdma-rules.yml");
    let _prometheus = prometheus_at(
        dir.path(),
        &address,
        "2s",
        &[&rules, &fast],
        &am_address,
        &scrape_configs,
    );
    let started = Instant::now();
    let arrived = |e: &Expected| {
        received.lock().unwrap().iter().any(|d| {
            d.labels.get("cluster").map(String::as_str) == Some(e.scenario)
                && d.labels["alertname"] == e.alert
                && has(&d.labels, e.labels)
        })
    };
    while !EXPECTED.iter().all(arrived) && started.elapsed() < Duration::from_secs(150) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let delivered = received.lock().unwrap().clone();
    let summary: Vec<String> = delivered
        .iter()
        .map(|d| format!("{:?}", d.labels))
        .collect();
    for e in &EXPECTED {
        assert!(
            arrived(e),
            "{}: no {} {:?} in {summary:#?}",
            e.scenario,
            e.alert,
            e.labels
        );
        let first = delivered
            .iter()
            .filter(|d| {
                d.labels.get("cluster").map(String::as_str) == Some(e.scenario)
                    && d.labels["alertname"] == e.alert
            })
            .map(|d| d.at.saturating_duration_since(started).as_secs_f64())
            .fold(f64::INFINITY, f64::min);
        println!("{}: {} after {first:.1} s", e.scenario, e.alert);
    }
    // No suspect but the expected one was paged in any fabric.
    for d in &delivered {
        let alert = d.labels["alertname"].as_str();
        if !SUSPECT_ALERTS.contains(&alert) {
            continue;
        }
        let cluster = d.labels.get("cluster").map(String::as_str).unwrap_or("");
        let expected = EXPECTED.iter().find(|e| e.scenario == cluster).unwrap();
        assert!(
            expected.alert == alert && has(&d.labels, expected.labels),
            "{cluster}: unexpected {alert} {:?}",
            d.labels
        );
    }
    // The localizer's verdicts now: in each fabric the expected one, and no other verdict that
    // names the network. `responder` verdicts of other hosts are allowed: on a machine this
    // loaded (four demos and Prometheus on two cores) a healthy host's probe loop can be kept
    // off the CPU too, and saying so is right.
    for e in &EXPECTED {
        let verdicts = prometheus::query(
            &address,
            &format!(
                "count by (kind, host, device, switch) (rdma_localization_verdict{{cluster=\"{}\"}})",
                e.scenario
            ),
        );
        assert!(
            verdicts.iter().any(|(labels, _)| has(labels, e.verdict)),
            "{}: no verdict {:?} in {verdicts:?}",
            e.scenario,
            e.verdict
        );
        for (labels, _) in &verdicts {
            assert!(
                has(labels, e.verdict)
                    || labels.get("kind").map(String::as_str) == Some("responder"),
                "{}: verdict {labels:?}, expected {:?}",
                e.scenario,
                e.verdict
            );
        }
    }
    // The landing page runs the same vote over the demo's own counts, not Prometheus': it must
    // name the localizer's suspect and no other network suspect, or the inputs have drifted
    // apart.
    // The page names nothing in its first 30 s of probing: wait for its first window.
    let page_verdicts = |demo: &Exporter| -> (bool, Vec<BTreeMap<String, String>>) {
        let (status, _, body) = demo.get("/api/v1/fabric");
        assert_eq!(status, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        let verdicts = json["probes"]["verdicts"]
            .as_array()
            .unwrap_or_else(|| panic!("no probes.verdicts in {json}"))
            .iter()
            .map(|v| {
                ["kind", "host", "device", "switch"]
                    .into_iter()
                    .filter_map(|k| Some((k.to_string(), v[k].as_str()?.to_string())))
                    .collect()
            })
            .collect();
        (json["probes"]["localized"] == true, verdicts)
    };
    for (e, demo) in EXPECTED.iter().zip(&demos) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut verdicts = page_verdicts(demo);
        while !(verdicts.0 && verdicts.1.iter().any(|labels| has(labels, e.verdict)))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_secs(1));
            verdicts = page_verdicts(demo);
        }
        let verdicts = verdicts.1;
        assert!(
            verdicts.iter().any(|labels| has(labels, e.verdict)),
            "{}: the page names {verdicts:?}, the rules {:?}",
            e.scenario,
            e.verdict
        );
        for labels in &verdicts {
            assert!(
                has(labels, e.verdict)
                    || labels.get("kind").map(String::as_str) == Some("responder"),
                "{}: the page names {labels:?}, the rules {:?}",
                e.scenario,
                e.verdict
            );
        }
    }
}

/// The shipped intervals and rules, real time: from a fault's start to its page, for the silent
/// 2 % loss of one uplink (the slowest to gather evidence), a NIC whose optic fails and a leaf
/// that blackholes an ECMP member.
/// The figures go to BENCHMARKS.md; the test asserts only that each page came during its fault
/// and named the right suspect.
#[test]
fn probe_faults_page_with_the_shipped_intervals() {
    let _exclusive = common::exclusive(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (_am, am_address) = alertmanager(dir.path(), &hook);
    // The faults start 60 simulated seconds into the cycle: 25 s after the demos start.
    let faults = [&EXPECTED[0], &EXPECTED[1], &EXPECTED[2]];
    let demos: Vec<Exporter> = faults.iter().map(|e| demo(e.scenario, "35")).collect();
    let fault_starts = Instant::now() + Duration::from_secs(25);
    // The shipped localizer: a round every 5 s, scraped every 5 s (its alerts' group is
    // evaluated every 5 s by its own `interval`).
    let address = format!("127.0.0.1:{}", prometheus::free_port());
    let localize = localizer(&address, "5s");
    let mut scrape_configs: String = faults
        .iter()
        .zip(&demos)
        .map(|(e, d)| {
            prometheus::demo_sd_job(
                &format!("rdma-{}", e.scenario),
                &d.address,
                Some(e.scenario),
            )
        })
        .collect();
    scrape_configs += &prometheus::every(
        &prometheus::localizer_job("rdma-localizer", &localize.address, None),
        "5s",
    );
    let rules = common::alerting::shipped_rule_files();
    let rule_refs: Vec<&std::path::Path> = rules.iter().map(|p| p.as_path()).collect();
    let _prometheus = prometheus_at(
        dir.path(),
        &address,
        "15s",
        &rule_refs,
        &am_address,
        &scrape_configs,
    );
    // The fault lasts 180 s.
    let deadline = fault_starts + Duration::from_secs(180);
    let page = |e: &Expected| {
        received
            .lock()
            .unwrap()
            .iter()
            .filter(|d| {
                d.labels.get("cluster").map(String::as_str) == Some(e.scenario)
                    && d.labels["alertname"] == e.alert
                    && has(&d.labels, e.labels)
            })
            .map(|d| d.at)
            .min()
    };
    while faults.iter().any(|e| page(e).is_none()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    for e in faults {
        let at = page(e).unwrap_or_else(|| {
            panic!(
                "{}: no {} {:?} during the fault; got {:#?}",
                e.scenario,
                e.alert,
                e.labels,
                received.lock().unwrap()
            )
        });
        assert!(at > fault_starts, "{}: paged before the fault", e.scenario);
        println!(
            "time to page: {}: {:.1} s from the fault's start (the shipped intervals: agents scraped every 15 s, the localizer every 5 s)",
            e.scenario,
            at.saturating_duration_since(fault_starts).as_secs_f64()
        );
    }
    // What a round reads, for the cost at scale (BENCHMARKS.md).
    let (_, _, metrics) = localize.get("/metrics");
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let samples = value("rdma_localization_samples_read");
    assert!(samples > 0.0, "{metrics}");
    println!(
        "a round read {samples} samples for {} live ports",
        value("rdma_localization_live_ports")
    );
}
