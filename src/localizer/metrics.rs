//! The localizer's families (docs/metrics.md, "Localization"): the verdicts the alerts and
//! boards read, and the localizer's own health. Verdicts older than the `max_age` are not
//! served: an alert must not stand on what Prometheus said long ago.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::exposition::{Families, Label, Value};
use crate::probe::localize::{PortId, Verdict};

use super::state::{Snapshot, REASONS};

fn verdict_labels(cluster: &str, v: &Verdict) -> Vec<Label<'static>> {
    let text = |o: &Option<String>| Cow::Owned(o.clone().unwrap_or_default());
    let mut labels: Vec<Label<'static>> = Vec::with_capacity(7);
    if !cluster.is_empty() {
        labels.push(("cluster", Cow::Owned(cluster.to_string())));
    }
    labels.extend([
        ("kind", Cow::Borrowed(v.kind.as_str())),
        ("host", text(&v.host)),
        ("device", text(&v.device)),
        (
            "port",
            Cow::Owned(v.port.map(|p| p.to_string()).unwrap_or_default()),
        ),
        ("switch", text(&v.switch)),
        ("switch_port", text(&v.switch_port)),
    ]);
    labels
}

/// The most NICs a verdict lists one by one in `rdma_localization_hurt_nic_info` (a spine verdict
/// can hurt a fabric's every NIC); `rdma_localization_verdict_hurt_nics` counts them all.
pub(crate) const MAX_HURT_SERIES: usize = 64;

/// A hurt NIC's labels: its own `host`, `device` and `port` (they join with the agents' series,
/// `rdma_device_pod_info` among them), and the verdict's as `verdict_*`.
fn hurt_labels(cluster: &str, v: &Verdict, nic: &PortId) -> Vec<Label<'static>> {
    let mut labels = cluster_labels(cluster);
    labels.extend([
        ("host", Cow::Owned(nic.host.clone())),
        ("device", Cow::Owned(nic.device.clone())),
        ("port", Cow::Owned(nic.port.to_string())),
    ]);
    let verdict = verdict_labels("", v);
    let prefixed = |name: &str| -> &'static str {
        match name {
            "kind" => "verdict_kind",
            "host" => "verdict_host",
            "device" => "verdict_device",
            "port" => "verdict_port",
            "switch" => "verdict_switch",
            _ => "verdict_switch_port",
        }
    };
    labels.extend(
        verdict
            .into_iter()
            .map(|(name, value)| (prefixed(name), value)),
    );
    labels
}

fn cluster_labels(cluster: &str) -> Vec<Label<'static>> {
    if cluster.is_empty() {
        Vec::new()
    } else {
        vec![("cluster", Cow::Owned(cluster.to_string()))]
    }
}

/// The families of `snapshot` at `now`.
pub fn encode(snapshot: &Snapshot, now: Instant, max_age: Duration) -> Families<'static> {
    let mut f = Families::default();
    f.gauge(
        "rdma_localization_up",
        "1 when the localizer's last round read every query from Prometheus; 0 when it could not (rdma_localization_query_errors_total says why) or has not yet.",
        [],
        Value::U64(u64::from(snapshot.up)),
    );
    for reason in REASONS {
        f.counter(
            "rdma_localization_query_errors_total",
            "Rounds of the localizer that could not read Prometheus, by reason (unreachable, timeout, api_error, decode, request).",
            [("reason", Cow::Borrowed(reason))],
            Value::U64(snapshot.errors.get(reason).copied().unwrap_or(0)),
        );
    }
    f.counter(
        "rdma_localization_rounds_total",
        "Rounds of the localizer: reads of Prometheus and, when they succeed, votes.",
        [],
        Value::U64(snapshot.rounds),
    );
    f.gauge(
        "rdma_localization_round_duration_seconds",
        "Duration of the localizer's last round: the queries and the vote.",
        [],
        Value::F64(snapshot.round_seconds),
    );
    f.gauge(
        "rdma_localization_vote_duration_seconds",
        "Duration of the vote in the localizer's last successful round, every cluster together.",
        [],
        Value::F64(snapshot.vote_seconds),
    );
    let Some(last) = &snapshot.last else {
        return f;
    };
    f.gauge(
        "rdma_localization_last_success_timestamp_seconds",
        "When the localizer last read every query from Prometheus (Unix seconds).",
        [],
        Value::F64(last.unix),
    );
    f.gauge(
        "rdma_localization_samples_read",
        "Samples Prometheus answered in the localizer's last successful round, every query together: what a round costs.",
        [],
        Value::U64(last.samples_read as u64),
    );
    let age = now.saturating_duration_since(last.at);
    if age > max_age {
        return f;
    }
    f.gauge(
        "rdma_localization_verdicts_age_seconds",
        "Age of the verdicts served: since the round that read them. Past --max-age none are served.",
        [],
        Value::F64(age.as_secs_f64()),
    );
    for (cluster, c) in &last.clusters {
        let l = &c.localization;
        let labels = cluster_labels(cluster);
        f.gauge(
            "rdma_localization_live_ports",
            "Probing ports the vote took into account: scraped, up, probing.",
            labels.clone(),
            Value::U64(c.live_ports as u64),
        );
        f.gauge(
            "rdma_localization_paths",
            "Paths between live ports that sent or lost probes in the window.",
            labels.clone(),
            Value::U64(l.paths as u64),
        );
        f.gauge(
            "rdma_localization_failing_paths",
            "Failing paths: those through a verdict that lost probes, and those whose loss stands out from the background alone.",
            labels.clone(),
            Value::U64(l.failing.len() as u64),
        );
        f.gauge(
            "rdma_localization_background_loss_ratio",
            "Loss ratio of the probes no verdict explains: the fabric's background.",
            labels,
            Value::F64(l.background_loss),
        );
    }
    for (cluster, c) in &last.clusters {
        for v in &c.localization.verdicts {
            let labels = verdict_labels(cluster, v);
            f.gauge(
                "rdma_localization_verdict",
                "A component the vote names (kind nic, host, leaf, uplink, spine or responder; docs/localization.md); 1 while it stands.",
                labels.clone(),
                Value::U64(1),
            );
            f.gauge(
                "rdma_localization_verdict_confidence",
                "1 less the chance that background loss alone gives the loss through the verdict's component (over all candidates).",
                labels.clone(),
                Value::F64(v.confidence),
            );
            f.gauge(
                "rdma_localization_verdict_failing_paths",
                "Paths through the verdict's component that lost probes in the window (those an earlier verdict explained left out; 0 for responder).",
                labels.clone(),
                Value::U64(v.failing_paths as u64),
            );
            f.gauge(
                "rdma_localization_verdict_explained_ratio",
                "The verdict's lost probes over all lost in the window (0 for responder).",
                labels.clone(),
                Value::F64(v.explained_ratio),
            );
            f.gauge(
                "rdma_localization_verdict_probes_sent",
                "Probes sent through the verdict's component in the window.",
                labels.clone(),
                Value::U64(v.sent),
            );
            f.gauge(
                "rdma_localization_verdict_probes_lost",
                "Probes lost through the verdict's component in the window.",
                labels.clone(),
                Value::U64(v.lost),
            );
            if let Some(loss) = v.mean_path_loss {
                f.gauge(
                    "rdma_localization_verdict_loss_ratio",
                    "Loss ratio of the probes through the verdict's component.",
                    labels.clone(),
                    Value::F64(loss),
                );
            }
            f.gauge(
                "rdma_localization_verdict_background_loss_ratio",
                "Loss ratio of the paths that avoid the verdict's component: what it was weighed against.",
                labels.clone(),
                Value::F64(v.background_loss),
            );
            blast_radius(&mut f, cluster, v, labels);
        }
    }
    f
}

/// What a verdict hurts: the NICs at its end of the failing paths it explains, counted, and the
/// first [`MAX_HURT_SERIES`] one by one.
fn blast_radius(
    f: &mut Families<'static>,
    cluster: &str,
    v: &Verdict,
    labels: Vec<Label<'static>>,
) {
    let hosts: BTreeSet<&str> = v.hurts.iter().map(|p| p.host.as_str()).collect();
    f.gauge(
        "rdma_localization_verdict_hurt_nics",
        "NICs whose failing paths the verdict explains: those at its end of them (its blast radius).",
        labels.clone(),
        Value::U64(v.hurts.len() as u64),
    );
    f.gauge(
        "rdma_localization_verdict_hurt_hosts",
        "Hosts of the NICs the verdict hurts.",
        labels,
        Value::U64(hosts.len() as u64),
    );
    for nic in v.hurts.iter().take(MAX_HURT_SERIES) {
        f.gauge(
            "rdma_localization_hurt_nic_info",
            "A NIC whose failing paths a verdict explains (host, device, port: the NIC; verdict_*: the verdict's labels); at most 64 a verdict.",
            hurt_labels(cluster, v, nic),
            Value::U64(1),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::exposition::body::BodyWriter;
    use crate::exposition::Format;
    use crate::localizer::state::{ClusterVerdicts, Verdicts};
    use crate::probe::localize::{Kind, Localization};

    fn snapshot(at: Instant) -> Snapshot {
        with_hurts(at, Vec::new())
    }

    fn with_hurts(at: Instant, hurts: Vec<PortId>) -> Snapshot {
        let verdict = Verdict {
            kind: Kind::Nic,
            host: Some("h1".into()),
            device: Some("mlx5_0".into()),
            port: Some(1),
            switch: Some("leaf1".into()),
            switch_port: Some("Ethernet1/1".into()),
            failing_paths: 4,
            explained_ratio: 0.9,
            mean_path_loss: Some(0.3),
            sent: 100,
            lost: 30,
            background_loss: 1e-4,
            confidence: 1.0,
            host_ports: None,
            answer_delay_seconds: None,
            hurts,
        };
        let localization = Localization {
            verdicts: vec![verdict],
            failing: Vec::new(),
            paths: 12,
            background_loss: 1e-4,
        };
        Snapshot {
            last: Some(Arc::new(Verdicts {
                at,
                unix: 1.7e9,
                samples_read: 42,
                clusters: BTreeMap::from([(
                    "a".to_string(),
                    ClusterVerdicts {
                        live_ports: 4,
                        localization,
                    },
                )]),
            })),
            up: true,
            rounds: 3,
            ..Snapshot::default()
        }
    }

    fn text(f: &Families<'_>) -> String {
        let mut w = BodyWriter::new(Format::PrometheusText);
        w.write(f);
        w.finish().to_text()
    }

    #[test]
    fn verdicts_are_served_with_their_labels_until_they_are_too_old() {
        let now = Instant::now();
        let fresh = text(&encode(&snapshot(now), now, Duration::from_secs(300)));
        assert!(
            fresh.contains(r#"rdma_localization_verdict{cluster="a",kind="nic",host="h1",device="mlx5_0",port="1",switch="leaf1",switch_port="Ethernet1/1"} 1"#),
            "{fresh}"
        );
        assert!(fresh.contains("rdma_localization_up 1"), "{fresh}");
        let later = now + Duration::from_secs(301);
        let stale = text(&encode(&snapshot(now), later, Duration::from_secs(300)));
        assert!(!stale.contains("rdma_localization_verdict{"), "{stale}");
        assert!(
            !stale.contains("rdma_localization_verdicts_age_seconds"),
            "{stale}"
        );
        assert!(
            stale.contains("rdma_localization_last_success_timestamp_seconds"),
            "{stale}"
        );
    }

    #[test]
    fn a_verdict_counts_what_it_hurts_and_lists_the_first_nics() {
        let nic = |h: usize, d: usize| PortId {
            host: format!("gpu-{h:02}"),
            device: format!("mlx5_{d}"),
            port: 1,
        };
        let hurts: Vec<PortId> = (0..10)
            .flat_map(|h| (0..7).map(move |d| nic(h, d)))
            .collect();
        let now = Instant::now();
        let body = text(&encode(
            &with_hurts(now, hurts),
            now,
            Duration::from_secs(300),
        ));
        let verdict = r#"{cluster="a",kind="nic",host="h1",device="mlx5_0",port="1",switch="leaf1",switch_port="Ethernet1/1"}"#;
        assert!(
            body.contains(&format!("rdma_localization_verdict_hurt_nics{verdict} 70")),
            "{body}"
        );
        assert!(
            body.contains(&format!("rdma_localization_verdict_hurt_hosts{verdict} 10")),
            "{body}"
        );
        let listed: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("rdma_localization_hurt_nic_info{"))
            .collect();
        assert_eq!(listed.len(), MAX_HURT_SERIES);
        assert_eq!(
            listed[0],
            r#"rdma_localization_hurt_nic_info{cluster="a",host="gpu-00",device="mlx5_0",port="1",verdict_kind="nic",verdict_host="h1",verdict_device="mlx5_0",verdict_port="1",verdict_switch="leaf1",verdict_switch_port="Ethernet1/1"} 1"#
        );
    }

    /// docs/metrics.md names every family the localizer serves.
    #[test]
    fn docs_name_every_family() {
        let docs = include_str!("../../docs/metrics.md");
        let now = Instant::now();
        let body = text(&encode(
            &with_hurts(
                now,
                vec![PortId {
                    host: "h2".into(),
                    device: "mlx5_1".into(),
                    port: 1,
                }],
            ),
            now,
            Duration::from_secs(300),
        ));
        let missing: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .filter(|name| !docs.contains(&format!("`{name}")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/metrics.md does not name {missing:?}"
        );
    }
}
