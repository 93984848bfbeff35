//! Issue 61, item 9, end to end: the demo's `two-faults` scenario (gpu-node-01 mlx5_5's optic
//! fades while leaf1's uplink to spine-02 drops 2 %) and the healthy demo with background loss
//! on every path (`--probe-background-loss`), side by side.
//!
//! - The landing page's vote (`src/probe/localize.rs`) names both faults of `two-faults` and
//!   nothing else, and nothing on the healthy demo at any time of its ten minutes.
//! - Through a real Prometheus evaluating the shipped rules, the localizer (`localize`, the same
//!   vote once per cluster, reading that Prometheus back and scraped by it, as in
//!   `localizer_e2e.rs`) and a real Alertmanager routing to a webhook receiver in this test:
//!   both faults paged, each by its own `RdmaProbeSuspect`, no other suspect, and nothing paged
//!   from the healthy demo. (The PromQL vote the alerts read before named one fault at a time:
//!   two faults split its 80 % and its `spine` verdict took both, and a path failed there at one
//!   lost probe, so background loss alone paged `kind="spine"` too.)
//!
//! Ten minutes of demo time, in less wall time: the healthy demo runs at `--speed 4` (its
//! simulated clock covers ten minutes in 150 s), but its probes go out in wall time (a round a
//! second, whatever the speed), so it also runs at four times the flag's example loss, 4e-4 a
//! packet: over 150 s it loses as many probes as ten minutes at 1e-4 do, and each of the rules'
//! 2-minute windows sees four times the loss it would. The alerts' `for:` is cut to 10 s (the
//! shipped 15 s or more would only make a page rarer).

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::alerting::{alertmanager, webhook};
use common::prometheus;
use common::*;

use super::alerts_e2e::alerts_without_long_waits;
use super::localizer_e2e::localizer;

/// The end-to-end tests' small fabric (2 hosts of 6 NICs on three leaves, so that leaf1's
/// uplinks are told from the others'), its counters moved once a second.
fn demo(scenario: &str, extra: &[&str]) -> Exporter {
    let mut args = vec![
        "--scenario",
        scenario,
        "--switch-interval",
        "2s",
        "--hosts",
        "2",
        "--nics-per-host",
        "6",
        "--leaves",
        "3",
        "--tick",
        "1s",
    ];
    args.extend_from_slice(extra);
    Exporter::start_subcommand("demo", &args)
}

fn has(labels: &BTreeMap<String, String>, wanted: &[(&str, &str)]) -> bool {
    wanted
        .iter()
        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
}

const TWO_FAULTS: &str = "two-faults";
const HEALTHY: &str = "healthy-background-loss";

/// The two faults' pages: gpu-node-01 mlx5_5 (its leaf port joins once the switch poller's
/// LLDP series are in) and leaf1's uplinks.
const PAGES: [&[(&str, &str)]; 2] = [
    &[
        ("alertname", "RdmaProbeSuspect"),
        ("kind", "nic"),
        ("host", "gpu-node-01"),
        ("device", "mlx5_5"),
    ],
    &[
        ("alertname", "RdmaProbeSuspect"),
        ("kind", "uplink"),
        ("switch", "leaf1"),
    ],
];

/// The probe alerts that name a suspect in the network.
const SUSPECT_ALERTS: [&str; 2] = ["RdmaProbeSuspect", "RdmaProbeHostUnreachable"];

/// The page's half: no Prometheus, the demos' own `/api/v1/fabric`.
#[test]
fn the_page_names_both_faults_and_nothing_on_background_loss() {
    let _exclusive = common::exclusive(module_path!());
    let (two, healthy) = demos();
    let started = Instant::now();
    // The healthy demo's page, every few seconds of its ten minutes.
    while started.elapsed() < RUN {
        healthy_page_names_nothing(&healthy);
        std::thread::sleep(Duration::from_secs(5));
    }
    healthy_page_names_nothing(&healthy);
    healthy_lost_probes(&healthy);
    page_names_both(&two);
}

/// The rules' half of item 9, the "done when": `two-faults` paged twice, each fault by
/// its own `RdmaProbeSuspect`, no other suspect, and nothing paged from the healthy demo with
/// background loss over ten minutes of its demo time.
#[test]
fn two_faults_are_both_paged_and_background_loss_pages_nothing() {
    let _exclusive = common::exclusive(module_path!());
    let (two, healthy) = demos();
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (_am, am_address) = alertmanager(dir.path(), &hook);
    // The localizer first, as in localizer_e2e.rs: Prometheus' scrape config names it. One
    // localizer for both demos: it votes on each `cluster` apart, and its verdicts keep it.
    let prometheus_address = format!("127.0.0.1:{}", prometheus::free_port());
    let localizer = localizer(&prometheus_address, "2s");
    let scrape_configs = [
        prometheus::demo_sd_job("rdma-two-faults", &two.address, Some(TWO_FAULTS)),
        prometheus::demo_sd_job("rdma-healthy", &healthy.address, Some(HEALTHY)),
        prometheus::localizer_job("rdma-localizer", &localizer.address, None),
    ]
    .concat();
    let fast = alerts_without_long_waits(dir.path());
    let rules = project_root().join("alerts/rdma-rules.yml");
    let config = format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 2s\nrule_files:\n{}alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am_address}']\nscrape_configs:\n{scrape_configs}",
        prometheus::rule_file_list(&[&rules, &fast])
    );
    let _prometheus = prometheus::launch_at(dir.path(), &config, &prometheus_address);
    let started = Instant::now();
    let paged = |wanted: &[(&str, &str)]| {
        received.lock().unwrap().iter().any(|d| {
            d.labels.get("cluster").map(String::as_str) == Some(TWO_FAULTS)
                && has(&d.labels, wanted)
        })
    };
    // The healthy demo ran its ten minutes under the rules, and both faults were paged.
    while !(started.elapsed() >= RUN && PAGES.iter().all(|p| paged(p)))
        && started.elapsed() < RUN + Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    let delivered = received.lock().unwrap().clone();
    let summary: Vec<String> = delivered
        .iter()
        .map(|d| {
            format!(
                "{:.0} s {:?}",
                d.at.saturating_duration_since(started).as_secs_f64(),
                d.labels
            )
        })
        .collect();
    for page in PAGES {
        assert!(paged(page), "no page {page:?} in {summary:#?}");
    }
    println!("delivered: {summary:#?}");
    // No other suspect paged in two-faults; nothing critical at all in the healthy fabric.
    for d in &delivered {
        let alert = d.labels["alertname"].as_str();
        match d.labels.get("cluster").map(String::as_str) {
            Some(TWO_FAULTS) => assert!(
                !SUSPECT_ALERTS.contains(&alert) || PAGES.iter().any(|p| has(&d.labels, p)),
                "{TWO_FAULTS}: unexpected {alert} {:?}",
                d.labels
            ),
            Some(HEALTHY) => assert!(
                !SUSPECT_ALERTS.contains(&alert)
                    && d.labels.get("severity").map(String::as_str) != Some("critical"),
                "{HEALTHY}: paged {alert} {:?}",
                d.labels
            ),
            _ => {}
        }
    }
    healthy_lost_probes(&healthy);
    page_names_both(&two);
}

/// How long both demos run: the healthy one's ten minutes at `--speed 4`.
const RUN: Duration = Duration::from_secs(150);

/// `two-faults` from its fault's start (`--start-at 60`: 180 s of it), and the healthy demo
/// with background loss.
fn demos() -> (Exporter, Exporter) {
    let two = demo(TWO_FAULTS, &["--start-at", "60"]);
    let healthy = demo(
        "healthy",
        &["--speed", "4", "--probe-background-loss", "4e-4"],
    );
    (two, healthy)
}

/// The verdicts on a demo's page that name the network, and whether its window is long enough
/// to name anything.
fn page_verdicts(demo: &Exporter) -> (bool, Vec<BTreeMap<String, String>>) {
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
                .collect::<BTreeMap<String, String>>()
        })
        // A busy responder is no network suspect: on a loaded machine a healthy host's probe
        // loop can be kept off the CPU, and saying so is right.
        .filter(|v| v.get("kind").map(String::as_str) != Some("responder"))
        .collect();
    (json["probes"]["localized"] == true, verdicts)
}

fn healthy_page_names_nothing(healthy: &Exporter) {
    let (_, verdicts) = page_verdicts(healthy);
    assert!(
        verdicts.is_empty(),
        "{HEALTHY}: the page names {verdicts:?}"
    );
}

/// The healthy demo lost probes: the background loss was on.
fn healthy_lost_probes(healthy: &Exporter) {
    let (status, _, body) = healthy.get("/hosts/gpu-node-01/metrics");
    assert_eq!(status, 200, "{body}");
    let lost: f64 = parse_exposition(&body)
        .into_iter()
        .filter(|s| s.name == "rdma_probe_lost_total")
        .map(|s| s.value)
        .sum();
    assert!(lost > 0.0, "{HEALTHY}: gpu-node-01 lost no probe");
}

/// The page of `two-faults` names both faults, and no other network suspect. It names
/// nothing over its first 30 s of probing, and the uplink's 2 % needs most of its 2-minute
/// window: it is given a minute more.
fn page_names_both(two: &Exporter) {
    let on_page = [
        &[
            ("kind", "nic"),
            ("host", "gpu-node-01"),
            ("device", "mlx5_5"),
        ][..],
        &[("kind", "uplink"), ("switch", "leaf1")][..],
    ];
    let names_both = |(localized, verdicts): &(bool, Vec<BTreeMap<String, String>>)| {
        *localized && on_page.iter().all(|w| verdicts.iter().any(|v| has(v, w)))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = page_verdicts(two);
    while !names_both(&seen) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        seen = page_verdicts(two);
    }
    let verdicts = seen.1;
    for wanted in on_page {
        assert!(
            verdicts.iter().any(|v| has(v, wanted)),
            "{TWO_FAULTS}: the page names {verdicts:?}, not {wanted:?}"
        );
    }
    for v in &verdicts {
        assert!(
            on_page.iter().any(|w| has(v, w)),
            "{TWO_FAULTS}: the page also names {v:?}"
        );
    }
    println!("{TWO_FAULTS}: the page names {verdicts:?}");
}
