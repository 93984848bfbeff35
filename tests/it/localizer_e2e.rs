//! The localizer end to end (docs/localization.md): a demo whose NIC optic fails, a real
//! Prometheus scraping it and evaluating the shipped rules and alerts, `localize` reading that
//! Prometheus back and scraped by it. `RdmaProbeSuspect` must fire from the localizer's verdict,
//! naming that NIC and nothing else; with Prometheus stopped, or answering nothing, the localizer
//! keeps answering its scrapes with `rdma_localization_up 0`.

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::prometheus::{self, free_port, Vector};
use common::*;

use super::alerts_e2e::alerts_without_long_waits;

fn has(labels: &BTreeMap<String, String>, wanted: &[(&str, &str)]) -> bool {
    wanted
        .iter()
        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
}

/// `localize` reading `prometheus` every `interval`, each query bounded by 1 s.
pub(crate) fn localizer(prometheus: &str, interval: &str) -> Exporter {
    Exporter::start_subcommand(
        "localize",
        &[
            "--prometheus",
            &format!("http://{prometheus}"),
            "--interval",
            interval,
            "--query-timeout",
            "1s",
        ],
    )
}

/// The localizer's `/metrics`, which must answer within 5 s whatever its Prometheus does.
fn scrape(localizer: &Exporter) -> String {
    let response = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(localizer.url("/metrics"))
        .send()
        .unwrap_or_else(|e| panic!("the localizer did not answer its scrape: {e}"));
    assert_eq!(response.status(), 200);
    response.text().unwrap()
}

/// Scrapes until `done` holds or `within` passes; the last body.
fn scrape_until(localizer: &Exporter, within: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + within;
    loop {
        let body = scrape(localizer);
        if done(&body) || Instant::now() > deadline {
            return body;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn sample(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

const NIC: [(&str, &str); 4] = [
    ("kind", "nic"),
    ("host", "gpu-node-02"),
    ("device", "mlx5_3"),
    ("switch", "leaf1"),
];

#[test]
fn the_localizer_s_verdict_pages_the_failing_nic_and_outlives_prometheus() {
    let _exclusive = common::exclusive(module_path!());
    let dir = tempfile::tempdir().unwrap();
    // 2 hosts of 6 NICs on 3 leaves; the optic of gpu-node-02 mlx5_3 fails from the start.
    let demo = Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            "nic-optic-failure",
            "--start-at",
            "60",
            "--switch-interval",
            "2s",
            "--hosts",
            "2",
            "--nics-per-host",
            "6",
            "--leaves",
            "3",
        ],
    );
    let started = Instant::now();
    // The localizer first: Prometheus' scrape config names it.
    let prometheus_address = format!("127.0.0.1:{}", free_port());
    let localizer = localizer(&prometheus_address, "2s");
    let cluster = "optic";
    let scrape_configs = prometheus::demo_sd_job("rdma-demo", &demo.address, Some(cluster))
        + &prometheus::localizer_job("rdma-localizer", &localizer.address, Some(cluster));
    let fast = alerts_without_long_waits(dir.path());
    let rules = project_root().join("alerts/rdma-rules.yml");
    let config = format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 2s\nrule_files:\n{}scrape_configs:\n{scrape_configs}",
        prometheus::rule_file_list(&[&rules, &fast])
    );
    let server = prometheus::launch_at(dir.path(), &config, &prometheus_address);

    let suspects = |v: &Vector| -> Vec<BTreeMap<String, String>> {
        v.iter().map(|(labels, _)| labels.clone()).collect()
    };
    let firing = prometheus::wait_for(
        &prometheus_address,
        r#"ALERTS{alertname="RdmaProbeSuspect", alertstate="firing"}"#,
        Duration::from_secs(150),
        |v| v.iter().any(|(labels, _)| has(labels, &NIC)),
    );
    assert!(
        firing.iter().any(|(labels, _)| has(labels, &NIC)),
        "no RdmaProbeSuspect naming {NIC:?}: {:#?}\nthe localizer says:\n{}",
        suspects(&firing),
        scrape(&localizer)
    );
    let firing_at = Instant::now();
    // Nothing else named in the network, firing or pending: a `responder` verdict (a demo
    // host kept off the CPU on a loaded machine) is no page.
    let paged = prometheus::query(
        &prometheus_address,
        r#"ALERTS{alertname=~"RdmaProbeSuspect|RdmaProbeHostUnreachable"}"#,
    );
    // (Before the switch poller's LLDP is in, the same NIC is named without its leaf.)
    let the_nic = &NIC[..3];
    for (labels, _) in &paged {
        assert!(has(labels, the_nic), "an unexpected page: {labels:?}");
        assert_eq!(labels.get("cluster").map(String::as_str), Some(cluster));
    }
    let verdicts = prometheus::query(&prometheus_address, "rdma_localization_verdict");
    for (labels, _) in &verdicts {
        assert!(
            has(labels, the_nic) || labels.get("kind").map(String::as_str) == Some("responder"),
            "an unexpected verdict: {labels:?}"
        );
    }
    let confidence = prometheus::query(
        &prometheus_address,
        r#"rdma_localization_verdict_confidence{kind="nic"}"#,
    );
    assert!(confidence.iter().all(|(_, c)| *c > 0.99), "{confidence:?}");
    // A figure for the record, not an assertion.
    println!(
        "RdmaProbeSuspect fired {:.0} s after the demo started",
        firing_at.duration_since(started).as_secs_f64()
    );

    // Prometheus gone: the localizer answers at once, says it is down, and still serves the
    // verdict it last read (2 minutes at most) with its age.
    drop(server);
    let body = scrape_until(&localizer, Duration::from_secs(30), |b| {
        sample(b, "rdma_localization_up ") == Some(0.0)
    });
    assert_eq!(sample(&body, "rdma_localization_up "), Some(0.0), "{body}");
    assert!(
        sample(
            &body,
            r#"rdma_localization_query_errors_total{reason="unreachable"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{body}"
    );
    assert!(
        body.contains(r#"rdma_localization_verdict{cluster="optic",kind="nic",host="gpu-node-02",device="mlx5_3""#),
        "{body}"
    );
    assert!(
        sample(&body, "rdma_localization_verdicts_age_seconds ").is_some(),
        "{body}"
    );
    drop(localizer);
    drop(demo);
}

/// A Prometheus that accepts connections and never answers: every query meets its deadline,
/// and the localizer's scrapes are answered all the same.
#[test]
fn a_prometheus_that_never_answers_does_not_hold_the_localizer() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let localizer = localizer(&silent.local_addr().unwrap().to_string(), "2s");
    let body = scrape_until(&localizer, Duration::from_secs(30), |b| {
        sample(
            b,
            r#"rdma_localization_query_errors_total{reason="timeout"}"#,
        )
        .is_some_and(|n| n >= 2.0)
    });
    assert!(
        sample(
            &body,
            r#"rdma_localization_query_errors_total{reason="timeout"}"#
        )
        .is_some_and(|n| n >= 2.0),
        "{body}"
    );
    assert_eq!(sample(&body, "rdma_localization_up "), Some(0.0), "{body}");
    assert!(!body.contains("rdma_localization_verdict{"), "{body}");
    assert!(
        !body.contains("rdma_localization_last_success_timestamp_seconds"),
        "{body}"
    );
}
