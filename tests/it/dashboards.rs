//! The Grafana dashboards in dashboards/: their structure (provisioning form, the datasource
//! variable, `$__rate_interval` windows, selectors that honour the dashboard variables, only
//! metrics the exporter documents or alerts/rdma-rules.yml records), and every panel query run
//! against a real Prometheus that scrapes the demo fabric in its pfc-storm scenario and evaluates
//! the shipped recording rules: each must return data.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::prometheus::{self, wait_for};
use common::*;
use serde_json::Value;

/// The dashboards this project ships, by uid (= file stem).
pub(crate) const DASHBOARDS: [&str; 6] = [
    "rdma-ecn-tuning",
    "rdma-fabric-overview",
    "rdma-fleet",
    "rdma-ib-fabric",
    "rdma-node",
    "rdma-switch",
];

/// Panels whose queries may rightly return nothing in the pfc-storm demo: (dashboard uid, panel
/// title, why). They still run, and Prometheus must accept them.
pub(crate) const MAY_BE_EMPTY: [(&str, &str, &str); 8] = [
    (
        "rdma-fabric-overview",
        "NICs the suspects hurt",
        "lists what a probe suspect hurts; the pfc-storm demo has no suspect",
    ),
    (
        "rdma-fabric-overview",
        "Pods on the NICs the suspects hurt",
        "lists pods on NICs a probe suspect hurts; the pfc-storm demo has no suspect",
    ),
    (
        "rdma-ib-fabric",
        "Degraded links",
        "lists InfiniBand links below their enabled width or speed; the pfc-storm demo's subnet has none",
    ),
    (
        "rdma-fabric-overview",
        "Links not ACTIVE",
        "lists ports that are not ACTIVE; every port of the pfc-storm demo is",
    ),
    (
        "rdma-fabric-overview",
        "Alerts firing",
        "ALERTS exists only while an alert fires; this test loads the recording rules alone",
    ),
    (
        "rdma-fleet",
        "Alerts firing by cluster",
        "ALERTS exists only while an alert fires; this test loads the recording rules alone",
    ),
    (
        "rdma-fabric-overview",
        "Probe suspects",
        "lists the components failing probe paths share; the pfc-storm demo's probes are not lost",
    ),
    (
        "rdma-fabric-overview",
        "Probe loss by port",
        "draws only ports that lost probes toward live targets; the pfc-storm demo's probes are not lost",
    ),
];

/// What a dashboard variable or Grafana built-in stands for when the test runs a query: every
/// host, device, switch and port; the demo sets no `cluster` label, which `.*` matches; every
/// pod, and the ports without one (the `pod` variable's All).
pub(crate) const SUBSTITUTIONS: [(&str, &str); 9] = [
    ("__rate_interval", "30s"),
    ("__interval", "5s"),
    ("__range", "1m"),
    ("cluster", ".*"),
    ("instance", ".+"),
    ("device", ".+"),
    ("switch", ".+"),
    ("port", ".+"),
    ("pod", ".*"),
];

/// Boards about one host or switch, and the variable that picks it: they open on the first one.
/// At All they would draw every NIC or switch queue of the fleet (the fleet bench timed the
/// switch board's queue drops at All at 36 s for 64 switches).
const ONE_SUBJECT_BOARDS: [(&str, &str); 2] =
    [("rdma-node", "instance"), ("rdma-switch", "switch")];

const BUILTIN_VARIABLES: [&str; 3] = ["__rate_interval", "__interval", "__range"];

pub(crate) struct Dashboard {
    pub(crate) uid: String,
    pub(crate) json: Value,
}

impl Dashboard {
    /// Every panel, those inside collapsed rows included.
    pub(crate) fn panels(&self) -> Vec<&Value> {
        let mut panels = Vec::new();
        for panel in self.json["panels"].as_array().expect("panels") {
            panels.push(panel);
            if let Some(nested) = panel["panels"].as_array() {
                panels.extend(nested);
            }
        }
        panels
    }

    pub(crate) fn variables(&self) -> Vec<&Value> {
        self.json["templating"]["list"]
            .as_array()
            .map(|list| list.iter().collect())
            .unwrap_or_default()
    }

    /// (panel, target) for every query target.
    pub(crate) fn targets(&self) -> Vec<(&Value, &Value)> {
        self.panels()
            .into_iter()
            .flat_map(|panel| {
                panel["targets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(move |target| (panel, target))
            })
            .collect()
    }
}

fn dashboards_dir() -> PathBuf {
    project_root().join("dashboards")
}

pub(crate) fn load_dashboards() -> Vec<Dashboard> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dashboards_dir())
        .expect("dashboards/ exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let json: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not valid JSON: {e}", path.display()));
            let uid = path.file_stem().unwrap().to_str().unwrap().to_string();
            Dashboard { uid, json }
        })
        .collect()
}

pub(crate) fn title(panel: &Value) -> &str {
    panel["title"].as_str().unwrap_or("<untitled>")
}

pub(crate) fn expr(target: &Value) -> &str {
    target["expr"].as_str().unwrap_or_default()
}

pub(crate) fn may_be_empty(uid: &str, panel_title: &str) -> Option<&'static str> {
    MAY_BE_EMPTY
        .iter()
        .find(|(d, p, _)| *d == uid && *p == panel_title)
        .map(|(_, _, why)| *why)
}

/// The metric names the exporter documents (docs/metrics.md), the series alerts/rdma-rules.yml
/// records, and Prometheus' ALERTS.
fn known_metrics() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(project_root().join("docs/metrics.md")).unwrap();
    let names = regex::Regex::new(r"rdma_[a-z0-9_]+").unwrap();
    let mut known: BTreeSet<String> = names
        .find_iter(&docs)
        .map(|m| m.as_str().to_string())
        .collect();
    known.extend(recorded_series());
    known.insert("ALERTS".to_string());
    known
}

pub(crate) fn rules_file() -> PathBuf {
    project_root().join("alerts/rdma-rules.yml")
}

fn recorded_series() -> Vec<String> {
    let text = std::fs::read_to_string(rules_file()).unwrap();
    let rules: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_sequence().unwrap())
        .filter_map(|rule| rule["record"].as_str().map(str::to_string))
        .collect()
}

/// Replaces `$name` and `${name}` (also `${name:format}`) with `value(name)`; names it returns
/// `None` for (and `$1` style regex references) stay as they are.
pub(crate) fn substitute(text: &str, value: impl Fn(&str) -> Option<String>) -> String {
    let pattern = regex::Regex::new(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)").unwrap();
    pattern
        .replace_all(text, |c: &regex::Captures| {
            let name = c.get(1).or_else(|| c.get(2)).unwrap().as_str();
            value(name).unwrap_or_else(|| c[0].to_string())
        })
        .into_owned()
}

fn variable_names(text: &str) -> Vec<String> {
    let names = std::cell::RefCell::new(Vec::new());
    substitute(text, |name| {
        if !name.chars().all(|c| c.is_ascii_digit()) {
            names.borrow_mut().push(name.to_string());
        }
        None
    });
    names.into_inner()
}

fn runnable(text: &str) -> String {
    substitute(text, |name| {
        SUBSTITUTIONS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    })
}

// ------------------------------------------------------------------------------------------
// A small PromQL lexer: enough to find metric selectors and range windows.

#[derive(Debug)]
pub(crate) struct Selector {
    pub(crate) metric: String,
    /// The text between the braces, without spaces; `None` for a bare metric name.
    matchers: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Window {
    /// The innermost function the range selector is an argument of (`rate`, `max_over_time`).
    function: String,
    range: String,
}

const KEYWORDS: [&str; 27] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "inf",
    "nan",
    "limitk",
];
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

pub(crate) fn lex(expr: &str) -> (Vec<Selector>, Vec<Window>) {
    let chars: Vec<char> = expr.chars().collect();
    let (mut selectors, mut windows) = (Vec::new(), Vec::new());
    // The word before each open parenthesis ("" for a plain group).
    let mut calls: Vec<String> = Vec::new();
    let mut i = 0;
    let skip_spaces = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    let until = |from: usize, close: char| {
        let mut j = from;
        while j < chars.len() && chars[j] != close {
            j += 1;
        }
        assert!(j < chars.len(), "unclosed {close:?} in {expr}");
        j
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '#' {
            i = until(i, '\n');
        } else if c == '[' {
            let end = until(i, ']');
            windows.push(Window {
                function: calls.last().cloned().unwrap_or_default(),
                range: chars[i + 1..end]
                    .iter()
                    .collect::<String>()
                    .trim()
                    .to_string(),
            });
            i = end + 1;
        } else if c == '(' {
            calls.push(String::new());
            i += 1;
        } else if c == ')' {
            calls.pop();
            i += 1;
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number: 0.5, 1e-5, 0x1f.
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || chars[i] == '.'
                    || (matches!(chars[i], '+' | '-') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
        } else if c == '$' {
            // A Grafana variable outside a selector or range.
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_spaces(i);
            let in_grouping = calls.last().is_some_and(|f| GROUPING.contains(&f.as_str()));
            if chars.get(next) == Some(&'(') {
                calls.push(word);
                i = next + 1;
            } else if in_grouping || KEYWORDS.contains(&word.as_str()) {
                // A label name in by (...) / on (...), or an operator.
            } else if chars.get(next) == Some(&'{') {
                let end = until(next, '}');
                let matchers: String = chars[next + 1..end]
                    .iter()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                selectors.push(Selector {
                    metric: word,
                    matchers: Some(matchers),
                });
                i = end + 1;
            } else {
                selectors.push(Selector {
                    metric: word,
                    matchers: None,
                });
            }
        } else if c == '{' {
            panic!("a selector without a metric name in {expr}: write metric{{...}}");
        } else {
            i += 1;
        }
    }
    (selectors, windows)
}

/// Metrics from the switches (no host `instance`, no `device`).
fn is_switch_metric(metric: &str) -> bool {
    metric.starts_with("rdma_switch_") || metric.starts_with("rdma:switch_")
}

/// Switch metrics with a `port` label.
fn is_switch_port_metric(metric: &str) -> bool {
    [
        "rdma_switch_port",
        "rdma_switch_queue",
        "rdma:switch_port",
        "rdma:switch_queue",
    ]
    .iter()
    .any(|p| metric.starts_with(p))
}

/// NIC metrics: those with `instance` (the host) and `device` labels.
fn is_nic_metric(metric: &str) -> bool {
    metric.starts_with("rdma:nic_")
        || (metric.starts_with("rdma_")
            && !is_switch_metric(metric)
            && !metric.starts_with("rdma_exporter_")
            && !is_cluster_metric(metric))
}

/// The localizer's: one per cluster, its `instance` the localizer's own, not a host's.
fn is_cluster_metric(metric: &str) -> bool {
    metric.starts_with("rdma_localization_")
}

/// Per-host aggregates of the NIC series (`instance`, no `device`).
fn is_node_metric(metric: &str) -> bool {
    metric.starts_with("rdma:node_")
}

fn is_datasource_variable(value: &Value) -> bool {
    value["type"] == "prometheus" && value["uid"] == "${datasource}"
}

fn overlaps(a: &Value, b: &Value) -> bool {
    let rect = |g: &Value| {
        let n = |k: &str| g[k].as_i64().unwrap();
        (n("x"), n("y"), n("x") + n("w"), n("y") + n("h"))
    };
    let (ax0, ay0, ax1, ay1) = rect(a);
    let (bx0, by0, bx1, by1) = rect(b);
    ax0 < bx1 && bx0 < ax1 && ay0 < by1 && by0 < ay1
}

#[test]
fn dashboards_are_provisionable_and_consistent() {
    let dashboards = load_dashboards();
    let uids: Vec<&str> = dashboards.iter().map(|d| d.uid.as_str()).collect();
    assert_eq!(uids, DASHBOARDS, "dashboards/*.json");
    let known = known_metrics();
    let mut problems = Vec::new();
    for dashboard in &dashboards {
        let json = &dashboard.json;
        let uid = dashboard.uid.as_str();
        let mut problem = |what: String| problems.push(format!("{uid}: {what}"));
        if json["uid"] != uid {
            problem(format!("uid {} is not the file stem", json["uid"]));
        }
        if json.get("__inputs").is_some() || json.get("__requires").is_some() {
            problem(
                "has __inputs/__requires (export for sharing): provisioning form wanted".into(),
            );
        }
        if json["schemaVersion"] != 39 {
            problem(format!("schemaVersion {}", json["schemaVersion"]));
        }
        if json["title"].as_str().unwrap_or_default().is_empty() {
            problem("no title".into());
        }

        // Variables: one datasource variable, query variables on it, known metrics.
        let variables = dashboard.variables();
        let datasources: Vec<&&Value> = variables
            .iter()
            .filter(|v| v["type"] == "datasource")
            .collect();
        if datasources.len() != 1
            || datasources[0]["name"] != "datasource"
            || datasources[0]["query"] != "prometheus"
        {
            problem(format!(
                "wants exactly one datasource variable `datasource` of type prometheus: {datasources:?}"
            ));
        }
        let names: Vec<&str> = variables
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        for variable in &variables {
            let name = variable["name"].as_str().unwrap_or_default();
            if variable["type"] != "query" {
                continue;
            }
            if !is_datasource_variable(&variable["datasource"]) {
                problem(format!(
                    "variable {name}: datasource {}",
                    variable["datasource"]
                ));
            }
            let definition = variable["definition"].as_str().unwrap_or_default();
            let query = variable["query"]["query"]
                .as_str()
                .or(variable["query"].as_str())
                .unwrap_or_default();
            if query.is_empty() || query != definition {
                problem(format!(
                    "variable {name}: query {query:?} vs definition {definition:?}"
                ));
            }
            let metric = query
                .strip_prefix("label_values(")
                .and_then(|rest| rest.split(['{', ',']).next())
                .unwrap_or_default()
                .trim();
            if !known.contains(metric) {
                problem(format!("variable {name}: unknown metric in {query:?}"));
            }
            if name != "cluster" && !query.replace(' ', "").contains("cluster=~\"$cluster\"") {
                problem(format!("variable {name}: {query:?} ignores $cluster"));
            }
            if variable["includeAll"] == true && variable["allValue"].as_str().is_none() {
                problem(format!("variable {name}: includeAll without allValue"));
            }
            let one_subject = ONE_SUBJECT_BOARDS.contains(&(uid, name));
            // No `current` at all: Grafana's schema wants text and value in one, and without
            // it Grafana selects the first value.
            if one_subject && (variable["includeAll"] != false || variable.get("current").is_some())
            {
                problem(format!(
                    "variable {name}: a board about one {name} opens on the first one, not All \
                     (includeAll false, no current)"
                ));
            }
        }
        for (board, subject) in ONE_SUBJECT_BOARDS {
            if board == uid && !names.contains(&subject) {
                problem(format!("no variable {subject}"));
            }
        }

        // Panels.
        let panels = dashboard.panels();
        let mut ids = BTreeSet::new();
        for panel in &panels {
            let t = title(panel);
            let kind = panel["type"].as_str().unwrap_or_default();
            if !ids.insert(panel["id"].as_i64().unwrap_or(-1)) {
                problem(format!(
                    "panel {t:?}: duplicate or missing id {}",
                    panel["id"]
                ));
            }
            let grid = &panel["gridPos"];
            if ["x", "y", "w", "h"]
                .iter()
                .any(|k| grid[k].as_i64().is_none())
                || grid["x"].as_i64().unwrap_or(0) + grid["w"].as_i64().unwrap_or(0) > 24
            {
                problem(format!("panel {t:?}: gridPos {grid}"));
            }
            if kind == "row" || kind == "text" {
                if panel
                    .get("targets")
                    .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
                {
                    problem(format!("{kind} panel {t:?} has targets"));
                }
                continue;
            }
            if !is_datasource_variable(&panel["datasource"]) {
                problem(format!("panel {t:?}: datasource {}", panel["datasource"]));
            }
            if panel["fieldConfig"]["defaults"]["unit"].as_str().is_none()
                && !matches!(kind, "table" | "state-timeline")
            {
                problem(format!("panel {t:?}: no unit"));
            }
            let targets = panel["targets"].as_array().cloned().unwrap_or_default();
            if targets.is_empty() {
                problem(format!("panel {t:?}: no targets"));
            }
            let mut ref_ids = BTreeSet::new();
            for target in &targets {
                let r = target["refId"].as_str().unwrap_or_default();
                if !ref_ids.insert(r.to_string()) {
                    problem(format!("panel {t:?}: duplicate refId {r:?}"));
                }
                if !is_datasource_variable(&target["datasource"]) {
                    problem(format!(
                        "panel {t:?} {r}: datasource {}",
                        target["datasource"]
                    ));
                }
                let e = expr(target);
                if e.trim().is_empty() {
                    problem(format!("panel {t:?} {r}: empty expr"));
                    continue;
                }
                for name in variable_names(e) {
                    if !names.contains(&name.as_str())
                        && !BUILTIN_VARIABLES.contains(&name.as_str())
                    {
                        problem(format!("panel {t:?} {r}: unknown variable ${name}"));
                    }
                }
                let instant = target["instant"] == true && target["range"] != true;
                let (selectors, windows) = lex(e);
                for window in &windows {
                    let allowed: &[&str] = match window.function.as_str() {
                        "rate" | "irate" => &["$__rate_interval"],
                        // A total over the dashboard's time range, in a single-value panel.
                        "increase" if instant => &["$__rate_interval", "$__range"],
                        "increase" => &["$__rate_interval"],
                        _ => &["$__rate_interval", "$__interval", "$__range"],
                    };
                    if !allowed.contains(&window.range.as_str()) {
                        problem(format!(
                            "panel {t:?} {r}: {}(...[{}]) wants one of {allowed:?}",
                            window.function, window.range
                        ));
                    }
                }
                for s in &selectors {
                    if !known.contains(&s.metric) {
                        problem(format!(
                            "panel {t:?} {r}: {} is neither in docs/metrics.md nor recorded by alerts/rdma-rules.yml",
                            s.metric
                        ));
                    }
                    let Some(matchers) = &s.matchers else {
                        problem(format!(
                            "panel {t:?} {r}: bare {} ignores $cluster",
                            s.metric
                        ));
                        continue;
                    };
                    let mut wanted = vec!["cluster"];
                    if is_nic_metric(&s.metric)
                        || is_node_metric(&s.metric)
                        || s.metric.starts_with("rdma_exporter_")
                    {
                        wanted.push("instance");
                    }
                    if is_nic_metric(&s.metric) {
                        wanted.push("device");
                    }
                    if is_switch_metric(&s.metric) {
                        wanted.push("switch");
                    }
                    if is_switch_port_metric(&s.metric) {
                        wanted.push("port");
                    }
                    for label in wanted {
                        let matcher = format!("{label}=~\"${label}\"");
                        if (label == "cluster" || names.contains(&label))
                            && !matchers.contains(&matcher)
                        {
                            problem(format!("panel {t:?} {r}: {} lacks {matcher}", s.metric));
                        }
                    }
                }
            }
        }
        for (i, a) in panels.iter().enumerate() {
            for b in &panels[i + 1..] {
                if a["gridPos"].is_object()
                    && b["gridPos"].is_object()
                    && overlaps(&a["gridPos"], &b["gridPos"])
                {
                    problem(format!("panels {:?} and {:?} overlap", title(a), title(b)));
                }
            }
        }
    }
    // The exceptions name panels that exist.
    for (uid, panel_title, _) in MAY_BE_EMPTY {
        let found = dashboards
            .iter()
            .filter(|d| d.uid == uid)
            .flat_map(|d| d.panels())
            .any(|p| title(p) == panel_title);
        if !found {
            problems.push(format!(
                "MAY_BE_EMPTY names {uid} {panel_title:?}, which does not exist"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_lexer_finds_selectors_and_windows() {
    let (selectors, windows) = lex(
        "sum by (cluster, instance) (rate(a_total{cluster=~\"$cluster\", x=\"{\"}[$__rate_interval]))\n\
         * on (cluster) group_left (switch) label_replace(b:rule, \"y\", \"$1\", \"z\", \"(.*)\") > 1e-5",
    );
    let found: Vec<(&str, Option<&str>)> = selectors
        .iter()
        .map(|s| (s.metric.as_str(), s.matchers.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            ("a_total", Some("cluster=~\"$cluster\",x=\"{\"")),
            ("b:rule", None)
        ]
    );
    assert_eq!(windows.len(), 1);
    assert_eq!(
        (windows[0].function.as_str(), windows[0].range.as_str()),
        ("rate", "$__rate_interval")
    );
}

/// An instant query's result size, or Prometheus' error.
fn instant_query(server: &str, expr: &str) -> Result<usize, String> {
    prometheus::query_at(server, expr, None).map(|answer| answer.len())
}

#[test]
fn every_panel_query_returns_data_from_the_pfc_storm_demo() {
    let _exclusive = common::exclusive(module_path!());
    let rules = rules_file();
    promtool(&["check", "rules", path_str(&rules)]);
    let demo = Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            "pfc-storm",
            "--start-at",
            "60",
            "--speed",
            "1",
            "--switch-interval",
            "1s",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, address) = prometheus::start_with_rules(
        dir.path(),
        &prometheus::demo_sd_job("rdma-demo", &demo.address, None),
        &[&rules],
    );
    let up = wait_for(&address, "up == 1", Duration::from_secs(60), |up| {
        up.len() == 6
    });
    assert_eq!(
        up.len(),
        6,
        "the 4 hosts, the switch poller and the InfiniBand scanner, scraped: {up:?}"
    );
    // Some data for the [1m] and [5m] windows; queries with thresholds get more time below.
    std::thread::sleep(Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(60);

    let dashboards = load_dashboards();
    let mut failures = Vec::new();
    let mut checked = 0;
    for dashboard in &dashboards {
        // Variables other than cluster (the demo sets no cluster label) list something.
        for variable in dashboard.variables() {
            let name = variable["name"].as_str().unwrap_or_default();
            let Some(definition) = variable["definition"].as_str() else {
                continue;
            };
            if variable["type"] != "query" || name == "cluster" {
                continue;
            }
            let (metric, label) = definition
                .strip_prefix("label_values(")
                .and_then(|rest| rest.strip_suffix(')'))
                .and_then(|rest| rest.rsplit_once(','))
                .unwrap_or_else(|| panic!("{}: variable {name}: {definition}", dashboard.uid));
            let expr = runnable(&format!("group by ({label}) ({metric})"));
            match instant_query(&address, &expr) {
                Ok(n) if n > 0 => {}
                other => failures.push(format!(
                    "{} variable {name}: {expr}\n  -> {other:?}",
                    dashboard.uid
                )),
            }
        }
        for (panel, target) in dashboard.targets() {
            let panel_title = title(panel);
            let expr = runnable(expr(target));
            let where_ = format!(
                "{} / {panel_title:?} / {}",
                dashboard.uid,
                target["refId"].as_str().unwrap_or_default()
            );
            checked += 1;
            if let Some(why) = may_be_empty(&dashboard.uid, panel_title) {
                if let Err(e) = instant_query(&address, &expr) {
                    failures.push(format!("{where_} (may be empty: {why}): {e}\n{expr}"));
                }
                continue;
            }
            let outcome = loop {
                match instant_query(&address, &expr) {
                    Ok(0) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(500))
                    }
                    Ok(0) => break Err("no data".to_string()),
                    Ok(_) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            if let Err(e) = outcome {
                failures.push(format!("{where_}: {e}\n{expr}"));
            }
        }
    }
    assert!(checked > 50, "only {checked} queries found");
    assert!(
        failures.is_empty(),
        "{} of {checked} queries failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    let per_dashboard: BTreeMap<&str, usize> = dashboards
        .iter()
        .map(|d| (d.uid.as_str(), d.targets().len()))
        .collect();
    eprintln!("ran {checked} panel queries: {per_dashboard:?}");
}
