//! The central store of many clusters (issue 46, docs/deploy.md "A global view of many
//! clusters"): two demo fabrics ("clusters" a and b), each scraped by its own real Prometheus
//! with the shipped recording rules and remote-writing, with `external_labels: {cluster: ...}`,
//! into real `victoria-metrics` processes (Debian's package): one gets everything, one only what
//! the shipped `deploy/prometheus/remote-write.yml` keeps. Every panel query of every dashboard
//! and every rule's expression (recording and alerting) is then evaluated at one timestamp on
//! the store (the cluster picked) and on that cluster's Prometheus, and the answers must agree:
//! same label sets, values within `close`'s tolerance, except where a series that starts
//! differently at a query's window's start makes MetricsQL differ by design (`Starts`).

use crate::common;
use crate::dashboards;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::prometheus::{self, wait_for};
use common::{project_root, victoria_metrics, ChildGuard, Exporter};
use serde_yaml::Value as Yaml;

/// Debian's single-node VictoriaMetrics server (`apt-get install victoria-metrics`).
const STORE: &str = victoria_metrics::PROGRAM;

/// The two clusters (the same host names in both, as clusters built alike have): name, the demo's scenario (PFC and ECN trouble in one, flapping links
/// in the other, so that both rankings of the fleet board have something to rank).
const CLUSTERS: [(&str, &str); 2] = [("a", "pfc-storm"), ("b", "link-flap")];

/// What the dashboard variables stand for here. Windows are shorter than the dashboards test's:
/// a rate over a window longer than the series' history differs by design (Prometheus divides
/// the increase it extrapolates by the whole window, VictoriaMetrics by the span it has; see
/// `WINDOW`), and this test keeps its history under a minute.
const SUBSTITUTIONS: [(&str, &str); 3] = [
    ("__rate_interval", "30s"),
    ("__interval", "5s"),
    ("__range", "30s"),
];

/// Recording rules' windows are cut to this in both queries. The rules' 5m, 2m, 10m and 1h
/// windows would need that much history; what is compared here is how the expressions
/// (joins, `label_replace`, `topk`, `and`/`or`/`unless`, offsets) evaluate, not the windows.
const WINDOW: &str = "30s";

/// History before the comparison: the 30 s windows covered, with room.
const HISTORY: Duration = Duration::from_secs(45);

/// Two answers agree when their values differ by at most this share of the larger one (or
/// `ABSOLUTE`). Why not exactly: at the same timestamp both read the same samples, but a rate
/// is computed differently. Prometheus takes the samples inside the window and extrapolates
/// their increase to the window's edges; VictoriaMetrics (MetricsQL's `rate`, `increase`) does
/// not extrapolate and starts from the last sample before the window (rollupDelta and
/// rollupDeriv in app/vmselect/promql/rollup.go). So the two differ by up to one step of the
/// counter in the window: a NIC counter read at each 1 s scrape moves in small steps, but a
/// switch counter moves once per switch poll (1 s asked, a few seconds on a loaded 2-core
/// machine), and one such step is up to a fifth of a 30 s window (seen: 18 %).
const RELATIVE: f64 = 0.25;
const ABSOLUTE: f64 = 1e-6;

/// Queries whose answers rightly differ between the store and Prometheus, whenever they are
/// compared: (dashboard uid, `rules` or `alerts`; panel title, recorded series or alert; why).
/// Also listed in docs/deploy.md. The difference that comes and goes with timing (a series that
/// starts differently at a window's start) is not listed: it is recognized by its cause, see
/// `Starts`.
const KNOWN_DIFFERENCES: [(&str, &str, &str); 1] = [(
    "rules",
    "rdma:nic_ecn_diagnosis:ratio_rate5m",
    "`a or on (...) b` where a comparison inside `a` filtered a port out: VictoriaMetrics \
     1.79 keeps the emptied series of `a` and fills it with `b`'s value, under `a`'s labels \
     (diagnosis Idle; binaryOpOr in app/vmselect/promql/binary_op.go; later releases drop \
     emptied series first, their changelog's `or` fix of issues 7640 and 7759). Prometheus \
     evaluates the rule in the cluster; the store only stores its output, which the ECN \
     tuning board reads, and that agrees",
)];

/// Of the answers compared on the full store (604 in all), at least this many must have data on
/// both sides: a comparison of empty answers proves nothing. (About 350 have: the rest are
/// panels about faults the two scenarios do not have, or joins on what the demo has not.)
const MIN_NON_EMPTY: usize = 300;
/// The same for the store fed by the shipped selection (104 answers compared, about 90 with
/// data).
const MIN_NON_EMPTY_SELECTED: usize = 80;

/// A `victoria-metrics` process on a loopback port with its data in `dir`; `None` when the
/// program is not installed.
fn start_store(dir: &Path) -> Option<(ChildGuard, String)> {
    if !victoria_metrics::installed() {
        return None;
    }
    Some(victoria_metrics::start(dir).unwrap_or_else(|e| panic!("{e}")))
}

/// `deploy/prometheus/remote-write.yml`: its `remote_write` entry and external label names.
struct Shipped {
    entry: Yaml,
    external_labels: Vec<String>,
    /// The `keep` regex of its `write_relabel_configs`, anchored as Prometheus anchors it.
    keep: regex::Regex,
}

fn shipped() -> Shipped {
    let text =
        std::fs::read_to_string(project_root().join("deploy/prometheus/remote-write.yml")).unwrap();
    let config: Yaml = serde_yaml::from_str(&text).unwrap();
    let entries = config["remote_write"].as_sequence().expect("remote_write");
    assert_eq!(entries.len(), 1, "one store: {entries:?}");
    let entry = entries[0].clone();
    let relabel = entry["write_relabel_configs"]
        .as_sequence()
        .expect("write_relabel_configs");
    assert_eq!(relabel.len(), 1, "{relabel:?}");
    assert_eq!(relabel[0]["action"], "keep");
    assert_eq!(relabel[0]["source_labels"][0], "__name__");
    let keep = regex::Regex::new(&format!(
        "^(?:{})$",
        relabel[0]["regex"].as_str().expect("regex")
    ))
    .unwrap();
    let external_labels = config["global"]["external_labels"]
        .as_mapping()
        .expect("external_labels")
        .keys()
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();
    Shipped {
        entry,
        external_labels,
        keep,
    }
}

/// A cluster's Prometheus: 1 s scrapes of its demo, the shipped recording rules every second,
/// `cluster` as external label, everything to `full` and the shipped selection to `fleet`.
fn cluster_prometheus(
    dir: &Path,
    cluster: &str,
    demo: &str,
    shipped: &Shipped,
    full: &str,
    fleet: &str,
) -> (ChildGuard, String) {
    let mut fleet_entry = shipped.entry.clone();
    fleet_entry["url"] = format!("http://{fleet}/api/v1/write").into();
    let mut full_entry = Yaml::Mapping(Default::default());
    full_entry["url"] = format!("http://{full}/api/v1/write").into();
    let mut remote_write = Vec::new();
    for mut entry in [full_entry, fleet_entry] {
        // Sent within a second, not five: the test waits for it.
        let queue: Yaml = serde_yaml::from_str("batch_send_deadline: 1s").unwrap();
        entry["queue_config"] = queue;
        remote_write.push(entry);
    }
    let jobs: Yaml =
        serde_yaml::from_str(&prometheus::demo_sd_job("rdma-demo", demo, None)).unwrap();
    let rules = dashboards::rules_file();
    let config = serde_json::json!({
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
            "external_labels": {"cluster": cluster},
        },
        "rule_files": [rules],
    });
    let mut config: Yaml = serde_json::from_value(config).unwrap();
    config["remote_write"] = Yaml::Sequence(remote_write);
    config["scrape_configs"] = jobs;
    prometheus::launch(dir, &serde_yaml::to_string(&config).unwrap())
}

/// An instant query's answer at `time`: each series' labels and value, or the server's error.
fn query_at(server: &str, expr: &str, time: f64) -> Result<Vec<(Labels, f64)>, String> {
    prometheus::query_at(server, expr, Some(time))
}

type Labels = BTreeMap<String, String>;

/// An answer keyed by label set, for comparison: the store's with `cluster` removed (the
/// cluster's own Prometheus adds its external labels only to what it sends), NaN left out
/// (VictoriaMetrics drops NaN from answers, Prometheus returns them: 0/0 on an idle port).
fn keyed(answer: Vec<(Labels, f64)>, cluster: Option<&str>) -> BTreeMap<Labels, f64> {
    answer
        .into_iter()
        .filter(|(labels, _)| cluster.is_none_or(|c| labels.get("cluster").is_none_or(|l| l == c)))
        .filter(|(_, value)| !value.is_nan())
        .map(|(mut labels, value)| {
            labels.remove("cluster");
            (labels, value)
        })
        .collect()
}

/// Whether two values agree within the tolerance.
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= ABSOLUTE.max(RELATIVE * a.abs().max(b.abs()))
}

/// An answer without `__name__`: a recording rule names its output itself (an alert has
/// `alertname`), and MetricsQL keeps or drops the input's name where PromQL does the other
/// (`keeps_name`).
fn nameless(answer: BTreeMap<Labels, f64>) -> BTreeMap<Labels, f64> {
    answer
        .into_iter()
        .map(|(mut labels, value)| {
            labels.remove("__name__");
            (labels, value)
        })
        .collect()
}

/// Whether the query's outer function is a rollup MetricsQL keeps the metric name of and
/// PromQL drops it (`rollupFuncsKeepMetricName` in app/vmselect/promql/rollup.go, 1.79):
/// a legend or table shows the name from the store and not from Prometheus, nothing else.
fn keeps_name(expr: &str) -> bool {
    regex::Regex::new(r"^\s*(avg|first|last|max|min|quantile)_over_time\(")
        .unwrap()
        .is_match(expr)
}

/// One way two answers disagree: the label set it is about and what, in words.
struct Problem {
    labels: Labels,
    kind: &'static str,
    text: String,
}

/// Where two answers disagree; empty when they agree.
fn disagreements(
    store: &BTreeMap<Labels, f64>,
    prometheus: &BTreeMap<Labels, f64>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut problem = |labels: &Labels, kind, text| {
        problems.push(Problem {
            labels: labels.clone(),
            kind,
            text,
        })
    };
    for (labels, value) in prometheus {
        match store.get(labels) {
            None => problem(labels, "only Prometheus", format!("{labels:?} {value}")),
            Some(stored) if !close(*stored, *value) => problem(
                labels,
                "different values",
                format!("{labels:?}: store {stored}, Prometheus {value}"),
            ),
            Some(_) => {}
        }
    }
    for (labels, value) in store {
        if !prometheus.contains_key(labels) {
            problem(labels, "only the store", format!("{labels:?} {value}"));
        }
    }
    problems
}

/// Problems in words, a few of each kind.
fn describe(problems: &[&Problem]) -> String {
    let mut lines = Vec::new();
    for kind in ["only Prometheus", "only the store", "different values"] {
        let list: Vec<&str> = problems
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.text.as_str())
            .collect();
        if !list.is_empty() {
            lines.push(format!(
                "{kind} ({}): {}",
                list.len(),
                list[..list.len().min(3)].join("; ")
            ));
        }
    }
    lines.join("\n    ")
}

/// Seconds in a PromQL duration (`30s`, `5m`, `1m30s`).
fn seconds(duration: &str) -> f64 {
    let part = regex::Regex::new(r"(\d+)(ms|s|m|h|d|w|y)").unwrap();
    assert!(
        part.replace_all(duration, "").is_empty(),
        "not a duration: {duration}"
    );
    part.captures_iter(duration)
        .map(|c| {
            let n: f64 = c[1].parse().unwrap();
            n * match &c[2] {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3_600.0,
                "d" => 86_400.0,
                "w" => 604_800.0,
                _ => 31_536_000.0,
            }
        })
        .sum()
}

/// The range selectors of an expression: each one's function (when the selector is its first
/// argument), metric name and window in seconds. Instant selectors are left out: both sides
/// read the same last sample of a series, however young. Subqueries and `offset` would move a
/// window; no panel or rule has them, and this refuses them rather than guess.
fn range_selectors(expr: &str) -> Vec<(String, String, f64)> {
    // String literals emptied first: label values and label_replace regexes hold brackets.
    let strings = regex::Regex::new(r#""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"#).unwrap();
    let bare = strings.replace_all(expr, "\"\"");
    assert!(
        !moves_windows(&bare),
        "a subquery or offset: teach range_selectors its windows\n{expr}"
    );
    let selector = regex::Regex::new(
        r"(?:([a-z_]+)\s*\(\s*)?([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^{}]*\})?\s*\[\s*([0-9a-z]+)\s*\]",
    )
    .unwrap();
    selector
        .captures_iter(&bare)
        .map(|c| {
            let function = c.get(1).map_or("", |f| f.as_str());
            (function.to_string(), c[2].to_string(), seconds(&c[3]))
        })
        .collect()
}

/// Whether an expression (its strings emptied) has a subquery or an `offset`.
fn moves_windows(expr: &str) -> bool {
    regex::Regex::new(r"\)\s*\[|\boffset\b")
        .unwrap()
        .is_match(expr)
}

/// MetricsQL's `increase` and `rate` start from the last sample before the window (looked for
/// up to five scrape intervals back: getMaxPrevInterval in app/vmselect/promql/rollup.go), or
/// from 0 when there is none (rollupDelta); PromQL's start from the first sample inside the
/// window and extrapolate to its edges. On a counter that moves steadily the two agree within
/// `close`'s tolerance. They differ by more, by design, where a series starts differently at
/// the window's start:
/// - it has no sample in those five intervals: born inside the window (a series that appears
///   at a port's first PFC storm, or later than its target's first scrape on a loaded
///   machine), or back from a gap (failed scrapes). MetricsQL counts its first value as an
///   increase from 0, divides a rate by the span it has, and answers with one sample in the
///   window where Prometheus answers nothing;
/// - the counter stepped between those two samples by a sizable share (`STEP_SHARE`) of its
///   change in the window: a counter that moves rarely (PFC storms, link downs) and moved
///   right at the window's start counts that step in MetricsQL, not in PromQL.
///
/// Which series that strikes, and so which panel or rule, depends on when the demo's sampler
/// counts and on the machine's load: it changes from run to run, so a list of panel names
/// cannot follow it. Choosing a compared moment where no windowed series of any of the 600
/// answers starts differently cannot be guaranteed either (storms come when the sampler sees
/// them) and would need this same check to find it. So the cause is checked at the compared
/// moment, from the cluster's own samples: a disagreement is excused only for an answer's
/// series that such a series can have fed (`may_come_from`); every other one must agree, and
/// every excuse is printed.
struct Starts {
    prometheus: String,
    time: f64,
    /// (metric, window in ms) -> the labels of its series that start differently.
    known: BTreeMap<(String, u64), Vec<Labels>>,
}

/// How far back MetricsQL looks for the sample before a window: five scrape intervals of 1 s.
const PREVIOUS_SAMPLE: &str = "5s";
/// A step across a window's start counts when it is this share of the counter's change in the
/// window (a counter moving steadily steps about 1/30 of it in one 1 s interval of 30 s).
const STEP_SHARE: f64 = 0.1;

impl Starts {
    fn new(prometheus: &str, time: f64) -> Starts {
        Starts {
            prometheus: prometheus.to_string(),
            time,
            known: BTreeMap::new(),
        }
    }

    /// The series of `metric` that start differently in a `window` (seconds) ending at the
    /// compared moment, by Prometheus' samples (the store holds the same ones).
    fn of(&mut self, metric: &str, window: f64) -> &[Labels] {
        let ms = (window * 1000.0).round() as u64;
        let (prometheus, time) = (&self.prometheus, self.time);
        self.known
            .entry((metric.to_string(), ms))
            .or_insert_with(|| {
                let (w, p) = (format!("{ms}ms"), PREVIOUS_SAMPLE);
                let before = format!("max_over_time({metric}[{p}] offset {w})");
                let expr = format!(
                    "(count_over_time({metric}[{w}]) unless count_over_time({metric}[{p}] offset {w})) \
                     or ((min_over_time({metric}[{w}]) - {before}) \
                         > {STEP_SHARE} * (max_over_time({metric}[{w}]) - {before}))"
                );
                query_at(prometheus, &expr, time)
                    .unwrap_or_else(|e| panic!("{expr}: {e}"))
                    .into_iter()
                    .map(|(labels, _)| labels)
                    .collect()
            })
    }

    /// The counters read by `rate`, `irate` or `increase` in `expr` that start differently in
    /// that selector's window: (metric, labels). (`*_over_time` rollups read the same samples
    /// on both sides and are not excused.)
    fn in_windows(&mut self, expr: &str) -> Vec<(String, Labels)> {
        let mut found = Vec::new();
        for (function, metric, window) in range_selectors(expr) {
            if !["rate", "irate", "increase"].contains(&function.as_str()) {
                continue;
            }
            for labels in self.of(&metric, window) {
                found.push((metric.clone(), labels.clone()));
            }
        }
        found
    }
}

/// Whether a series of an answer can have been computed from series `input`: they agree on
/// every label both have (an aggregation drops labels, a join adds some).
fn may_come_from(answer: &Labels, input: &Labels) -> bool {
    answer
        .iter()
        .filter(|(name, _)| *name != "__name__")
        .all(|(name, value)| input.get(name).is_none_or(|v| v == value))
}

/// `topk` and `bottomk` pick any of the series tied at the k-th value, and Prometheus and
/// VictoriaMetrics pick differently (the demo's idle ports tie at 0): for them, the k values
/// are compared, not which series carry them.
fn ranks(expr: &str) -> bool {
    let expr = expr.trim_start();
    expr.starts_with("topk(") || expr.starts_with("bottomk(")
}

/// An answer's values in order, keyed by their rank, for `ranks` queries.
fn by_rank(answer: BTreeMap<Labels, f64>) -> BTreeMap<Labels, f64> {
    let mut values: Vec<f64> = answer.into_values().collect();
    values.sort_by(|a, b| b.total_cmp(a));
    values
        .into_iter()
        .enumerate()
        .map(|(rank, value)| {
            (
                Labels::from([("rank".to_string(), rank.to_string())]),
                value,
            )
        })
        .collect()
}

/// A dashboard query made runnable: the test's windows, and `cluster` as given.
fn runnable(expr: &str, cluster: &str) -> String {
    dashboards::substitute(expr, |name| {
        if name == "cluster" {
            return Some(cluster.to_string());
        }
        SUBSTITUTIONS
            .iter()
            .chain(dashboards::SUBSTITUTIONS.iter())
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    })
}

/// Every rule's expression as (`rules` or `alerts`, the recorded series or alert, expression
/// with its windows cut to `WINDOW`): the recording rules of alerts/rdma-rules.yml and the
/// alerts of alerts/rdma-alerts.yml (evaluated on a store that holds several clusters, a join
/// that forgets `cluster` fails there: many-to-many matching).
fn rule_expressions() -> Vec<(&'static str, String, String)> {
    let window = regex::Regex::new(r"\[\d+[smhd]\]").unwrap();
    let mut found = Vec::new();
    for (place, file, key) in [
        ("rules", dashboards::rules_file(), "record"),
        (
            "alerts",
            project_root().join("alerts/rdma-alerts.yml"),
            "alert",
        ),
    ] {
        let text = std::fs::read_to_string(file).unwrap();
        let rules: Yaml = serde_yaml::from_str(&text).unwrap();
        for rule in rules["groups"]
            .as_sequence()
            .unwrap()
            .iter()
            .flat_map(|group| group["rules"].as_sequence().unwrap())
        {
            let (Some(name), Some(expr)) = (rule[key].as_str(), rule["expr"].as_str()) else {
                continue;
            };
            let expr = window.replace_all(expr, format!("[{WINDOW}]")).into_owned();
            found.push((place, name.to_string(), expr));
        }
    }
    found
}

fn known_difference(place: &str, what: &str) -> Option<&'static str> {
    KNOWN_DIFFERENCES
        .iter()
        .find(|(p, w, _)| *p == place && *w == what)
        .map(|(_, _, why)| *why)
}

/// Waits until every remote-write queue of `prometheus` has sent samples newer than `time`
/// (Prometheus' own metrics: it does not scrape itself here).
fn wait_until_sent(prometheus: &str, time: f64) {
    let name = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds{";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = reqwest::blocking::get(format!("http://{prometheus}/metrics"))
            .and_then(|r| r.text())
            .unwrap_or_default();
        let sent: Vec<f64> = body
            .lines()
            .filter(|line| line.starts_with(name))
            .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
            .collect();
        if sent.len() == 2 && sent.iter().all(|t| *t > time) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{prometheus}: remote write behind {time}: {sent:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until `store` holds the samples of `metric` from `cluster` that the cluster's
/// Prometheus holds in the 10 s up to `time`, counted (`count_over_time`: staleness markers,
/// which the two treat differently in instant queries, are not samples to either). The store's
/// window leaves out a sample exactly at its start, Prometheus' takes it: `edge` allows those.
fn wait_until_stored(store: &str, cluster: &str, prometheus: &str, metric: &str, time: f64) {
    let one = |server: &str, expr: String| {
        query_at(server, &expr, time)
            .unwrap_or_default()
            .first()
            .map_or(0.0, |(_, v)| *v)
    };
    let expected = one(prometheus, format!("sum(count_over_time({metric}[10s]))"));
    let edge = one(
        prometheus,
        format!("sum(count_over_time({metric}[1ms] offset 10s))"),
    );
    let selector = format!("{metric}{{cluster=\"{cluster}\"}}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stored = one(store, format!("sum(count_over_time({selector}[10s]))"));
        if stored >= expected - edge {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{store}: {stored} samples of {metric} of cluster {cluster} in the 10 s to {time}, \
             Prometheus {expected}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_shipped_remote_write_keeps_the_fleet_view_and_labels_the_cluster() {
    let shipped = shipped();
    assert_eq!(shipped.external_labels, ["cluster"]);
    // The fleet board reads only series the selection keeps...
    let fleet = dashboards::load_dashboards()
        .into_iter()
        .find(|d| d.uid == "rdma-fleet")
        .expect("dashboards/rdma-fleet.json");
    let mut read = std::collections::BTreeSet::new();
    for (_, target) in fleet.targets() {
        read.extend(
            dashboards::lex(dashboards::expr(target))
                .0
                .into_iter()
                .map(|s| s.metric),
        );
    }
    for variable in fleet.variables() {
        if let Some(definition) = variable["definition"].as_str() {
            let metric = definition
                .strip_prefix("label_values(")
                .and_then(|rest| rest.split(['{', ',']).next())
                .unwrap_or_else(|| panic!("{definition}"));
            read.insert(metric.trim().to_string());
        }
    }
    assert!(read.len() >= 5, "{read:?}");
    let dropped: Vec<&String> = read.iter().filter(|m| !shipped.keep.is_match(m)).collect();
    assert!(
        dropped.is_empty(),
        "the fleet board reads series the store is not sent: {dropped:?}"
    );
    // ...and raw counters stay in the cluster.
    for raw in [
        "rdma_port_xmit_data_bytes_total",
        "rdma_pfc_pause_duration_seconds_total",
        "rdma_switch_port_received_bytes_total",
    ] {
        assert!(!shipped.keep.is_match(raw), "{raw} is sent");
    }
    // The kube-prometheus-stack example says the same in prometheus-operator's spelling.
    let text = std::fs::read_to_string(
        project_root().join("deploy/helm/kube-prometheus-stack-remote-write.yaml"),
    )
    .unwrap();
    let values: Yaml = serde_yaml::from_str(&text).unwrap();
    let spec = &values["prometheus"]["prometheusSpec"];
    let labels: Vec<&str> = spec["externalLabels"]
        .as_mapping()
        .expect("externalLabels")
        .keys()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(labels, ["cluster"]);
    let relabel = &spec["remoteWrite"][0]["writeRelabelConfigs"][0];
    assert_eq!(
        relabel["regex"],
        shipped.entry["write_relabel_configs"][0]["regex"]
    );
    assert_eq!(relabel["action"], "keep");
    assert_eq!(relabel["sourceLabels"][0], "__name__");
}

#[test]
fn every_panel_query_and_rule_expression_agree_between_the_store_and_each_cluster() {
    let _exclusive = common::exclusive(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let Some((_full_store, full)) = start_store(&dir.path().join("full")) else {
        return common::skip_or_fail(&format!(
            "{STORE} not installed (Debian package `victoria-metrics`; scripts/test installs it)"
        ));
    };
    let (_fleet_store, fleet) = start_store(&dir.path().join("fleet")).expect("second store");
    let shipped = shipped();
    let mut clusters = Vec::new();
    for (cluster, scenario) in CLUSTERS {
        let demo = Exporter::start_subcommand(
            "demo",
            &[
                "--scenario",
                scenario,
                "--start-at",
                "60",
                "--switch-interval",
                "1s",
            ],
        );
        let data = dir.path().join(cluster);
        std::fs::create_dir_all(&data).unwrap();
        let (process, address) =
            cluster_prometheus(&data, cluster, &demo.address, &shipped, &full, &fleet);
        clusters.push((cluster, demo, process, address));
    }
    for (cluster, _, _, address) in &clusters {
        let up = wait_for(address, "up == 1", Duration::from_secs(60), |up| {
            up.len() == 6
        });
        assert_eq!(
            up.len(),
            6,
            "cluster {cluster}: the demo's 6 targets: {up:?}"
        );
    }
    let started = Instant::now();
    std::thread::sleep(HISTORY);
    // One moment for every query: a little in the past, once every store has it.
    let time = unix_now() - 3.0;
    for (_, _, _, address) in &clusters {
        wait_until_sent(address, time + 1.0);
    }
    // What was sent is searchable once the store has added it to its in-memory parts (every
    // second; later on a loaded machine): waited for, series by series, on both stores.
    for (cluster, _, _, prometheus) in &clusters {
        for (store, metric) in [
            (&full, "up"),
            (&full, "rdma:node_pfc_paused_ratio:max_rate1m"),
            (&fleet, "rdma_port_info"),
            (&fleet, "rdma:node_pfc_paused_ratio:max_rate1m"),
        ] {
            wait_until_stored(store, cluster, prometheus, metric, time);
        }
    }

    let mut failures = Vec::new();
    let mut starts: BTreeMap<&str, Starts> = clusters
        .iter()
        .map(|(cluster, _, _, prometheus)| (*cluster, Starts::new(prometheus, time)))
        .collect();
    let (mut compared, mut non_empty, mut on_fleet_store, mut selected_non_empty) = (0, 0, 0, 0);
    let mut compare = |place: &str,
                       what: &str,
                       store: &str,
                       store_expr: &str,
                       cluster: &str,
                       prometheus: &str,
                       prometheus_expr: &str|
     -> Option<bool> {
        compared += 1;
        // Both at once: the test's wall time is mostly these queries.
        let answers = std::thread::scope(|scope| {
            let stored = scope.spawn(|| query_at(store, store_expr, time));
            let local = query_at(prometheus, prometheus_expr, time);
            (stored.join().expect("store query thread"), local)
        });
        let (stored, local) = match answers {
            (Ok(s), Ok(p)) if ranks(store_expr) => {
                (by_rank(keyed(s, Some(cluster))), by_rank(keyed(p, None)))
            }
            (Ok(s), Ok(p)) if place == "rules" || place == "alerts" || keeps_name(store_expr) => {
                (nameless(keyed(s, Some(cluster))), nameless(keyed(p, None)))
            }
            (Ok(s), Ok(p)) => (keyed(s, Some(cluster)), keyed(p, None)),
            (s, p) => {
                failures.push(format!(
                    "{place} / {what} (cluster {cluster}): store {:?}, Prometheus {:?}\n  {store_expr}",
                    s.err(),
                    p.err()
                ));
                return None;
            }
        };
        let found = !stored.is_empty() && !local.is_empty();
        let problems = disagreements(&stored, &local);
        if problems.is_empty() {
            return Some(found);
        }
        if let Some(why) = known_difference(place, what) {
            eprintln!("{place} / {what}: differs as known ({why})");
            return Some(found);
        }
        let starts = starts
            .get_mut(cluster)
            .expect("every cluster's series")
            .in_windows(prometheus_expr);
        let (excused, unexplained): (Vec<&Problem>, Vec<&Problem>) = problems
            .iter()
            .partition(|p| starts.iter().any(|(_, s)| may_come_from(&p.labels, s)));
        if !excused.is_empty() {
            let (metric, labels) = &starts[0];
            eprintln!(
                "{place} / {what} (cluster {cluster}, store {store}): differs where a series \
                 starts differently at its window's start ({} series, e.g. {metric}{labels:?}), \
                 as MetricsQL differs by design:\n    {}",
                starts.len(),
                describe(&excused)
            );
        }
        if !unexplained.is_empty() {
            failures.push(format!(
                "{place} / {what} (cluster {cluster}, store {store}):\n    {}\n  {store_expr}",
                describe(&unexplained)
            ));
        }
        Some(found)
    };
    let dashboards = dashboards::load_dashboards();
    for (cluster, _, _, prometheus) in &clusters {
        for dashboard in &dashboards {
            for (panel, target) in dashboard.targets() {
                let text = dashboards::expr(target);
                let what = dashboards::title(panel);
                let store_expr = runnable(text, cluster);
                let local_expr = runnable(text, ".*");
                if compare(
                    &dashboard.uid,
                    what,
                    &full,
                    &store_expr,
                    cluster,
                    prometheus,
                    &local_expr,
                ) == Some(true)
                {
                    non_empty += 1;
                }
                // The store fed by the shipped selection answers whatever reads only the
                // series it keeps (the fleet board, and the other boards' recorded panels).
                let (selectors, _) = dashboards::lex(text);
                if selectors.iter().all(|s| shipped.keep.is_match(&s.metric)) {
                    on_fleet_store += 1;
                    let found = compare(
                        &dashboard.uid,
                        what,
                        &fleet,
                        &store_expr,
                        cluster,
                        prometheus,
                        &local_expr,
                    );
                    if found == Some(true) {
                        selected_non_empty += 1;
                    }
                }
            }
        }
        for (place, name, expr) in rule_expressions() {
            if compare(place, &name, &full, &expr, cluster, prometheus, &expr) == Some(true) {
                non_empty += 1;
            }
        }
    }
    // Raw counters did not reach the fleet store; recorded series and info series did.
    let raw = query_at(&fleet, r#"count({__name__=~"rdma_.+_total"})"#, time).unwrap();
    assert!(raw.is_empty(), "raw counters in the fleet store: {raw:?}");
    for kept in ["rdma:node_pfc_paused_ratio:max_rate1m", "rdma_port_info"] {
        let clusters = query_at(&fleet, &format!("count by (cluster) ({kept})"), time).unwrap();
        assert_eq!(
            clusters.len(),
            2,
            "{kept} of both clusters in the fleet store: {clusters:?}"
        );
    }
    eprintln!(
        "compared {compared} answers ({non_empty} with data on both sides; {on_fleet_store} on the \
         store fed the shipped selection, {selected_non_empty} with data) in {:?}",
        started.elapsed() - HISTORY
    );
    assert!(
        failures.is_empty(),
        "{} of {compared} answers disagree:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        non_empty >= MIN_NON_EMPTY,
        "only {non_empty} of {compared} answers had data on both sides"
    );
    assert!(
        selected_non_empty >= MIN_NON_EMPTY_SELECTED,
        "only {selected_non_empty} of {on_fleet_store} answers of the shipped selection had data"
    );
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn range_selectors_name_each_windowed_metric_and_its_window() {
    assert_eq!(
        range_selectors(
            r#"increase(a_total{x=~"[^:]+", y="}"}[30s]) unless on (d) b_info{z="[5m]"} / rate(c:d[1m30s])"#
        ),
        [
            ("increase".to_string(), "a_total".to_string(), 30.0),
            ("rate".to_string(), "c:d".to_string(), 90.0)
        ]
    );
    assert!(moves_windows("max_over_time(rate(a[1m])[5m:])"));
    assert!(moves_windows("rate(a[1m] offset 5m)"));
    assert!(!moves_windows("rate(a_offset_b{c=~\"\"}[1m])"));
    let born = Labels::from([
        ("device".into(), "mlx5_2".into()),
        ("job".into(), "fast".into()),
    ]);
    assert!(may_come_from(&Labels::new(), &born));
    assert!(may_come_from(
        &Labels::from([
            ("device".into(), "mlx5_2".into()),
            ("pod".into(), "p".into())
        ]),
        &born
    ));
    assert!(!may_come_from(
        &Labels::from([("device".into(), "mlx5_1".into())]),
        &born
    ));
}
