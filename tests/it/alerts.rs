//! The shipped rules: promtool checks them and runs their unit tests; every alert follows the
//! monitoring-mixin conventions, has a firing and a silent unit test and a runbook section; every
//! metric the rules use is one the exporter emits.

use crate::common;

use std::collections::BTreeSet;

use common::{project_root, promtool};

fn yaml(path: &str) -> serde_yaml::Value {
    let text = std::fs::read_to_string(project_root().join(path)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// Every rule of a rule file, as (group, rule) mappings.
fn rules(path: &str) -> Vec<serde_yaml::Value> {
    let file = yaml(path);
    file["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

fn text<'a>(value: &'a serde_yaml::Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_default()
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let out = promtool(&[
        "check",
        "rules",
        "alerts/rdma-rules.yml",
        "alerts/rdma-alerts.yml",
    ]);
    assert!(out.contains("SUCCESS"), "{out}");
    let files = unit_test_files();
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let out = promtool(&args);
    assert_eq!(out.matches("SUCCESS").count(), files.len(), "{out}");
}

/// Every promtool unit test file: `rdma-alerts.test.yml` at the default 15 s evaluation
/// interval, `rdma-pfc-storm.test.yml` at the 5 s of the storm group, `rdma-rules.test.yml` the
/// recording rules the dashboards and alerts read instead of raw series.
fn unit_test_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(project_root().join("alerts/tests"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".test.yml"))
        .map(|name| format!("alerts/tests/{name}"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    files
}

#[test]
fn every_alert_follows_the_conventions_and_is_tested_both_ways() {
    let mut firing = BTreeSet::new();
    let mut silent = BTreeSet::new();
    let files: Vec<serde_yaml::Value> = unit_test_files().iter().map(|f| yaml(f)).collect();
    for test in files.iter().flat_map(|f| f["tests"].as_sequence().unwrap()) {
        // (`rdma-rules.test.yml` tests recording rules alone: no alert_rule_test.)
        for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = text(case, "alertname").to_string();
            let expects = case["exp_alerts"]
                .as_sequence()
                .is_some_and(|a| !a.is_empty());
            if expects {
                firing.insert(name);
            } else {
                silent.insert(name);
            }
        }
    }
    let runbooks = std::fs::read_to_string(project_root().join("docs/runbooks.md")).unwrap();
    let name_shape = regex::Regex::new("^Rdma([A-Z][a-z0-9]+)+$").unwrap();
    for group in yaml("alerts/rdma-alerts.yml")["groups"]
        .as_sequence()
        .unwrap()
    {
        assert!(text(group, "name").len() <= 40);
        assert!(group["rules"].as_sequence().unwrap().len() <= 20);
    }
    for rule in rules("alerts/rdma-alerts.yml") {
        let name = text(&rule, "alert");
        assert!(name_shape.is_match(name) && name.len() <= 40, "{name}");
        let severity = text(&rule["labels"], "severity");
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: {severity}"
        );
        let annotations = &rule["annotations"];
        let summary = text(annotations, "summary");
        assert!(
            summary.ends_with('.')
                && !summary.contains("{{")
                && summary.starts_with(char::is_uppercase),
            "{name}: summary {summary:?}"
        );
        assert!(text(annotations, "description").contains("{{"), "{name}");
        let anchor = format!("#{}", name.to_lowercase());
        assert!(
            text(annotations, "runbook_url").ends_with(&anchor),
            "{name}"
        );
        assert!(
            runbooks.contains(&format!("## {name}")),
            "docs/runbooks.md has no section for {name}"
        );
        assert!(firing.contains(name), "{name} has no firing unit test");
        assert!(silent.contains(name), "{name} has no silent unit test");
    }
}

/// Metric names in the rules are emitted by the exporter (docs/metrics.md lists every family
/// the exporter serves; another test holds it to that) or recorded by the shipped rules.
#[test]
fn rules_use_only_metrics_the_exporter_emits() {
    let documented = std::fs::read_to_string(project_root().join("docs/metrics.md")).unwrap();
    let recorded: BTreeSet<String> = rules("alerts/rdma-rules.yml")
        .iter()
        .map(|r| text(r, "record").to_string())
        .collect();
    let name = regex::Regex::new(r"\b(rdma[_:][a-z0-9_:]+)").unwrap();
    let mut checked = 0;
    for file in ["alerts/rdma-rules.yml", "alerts/rdma-alerts.yml"] {
        for rule in rules(file) {
            for found in name.captures_iter(text(&rule, "expr")) {
                let metric = &found[1];
                checked += 1;
                if metric.contains(':') {
                    assert!(
                        recorded.contains(metric),
                        "{file}: {metric} is not recorded"
                    );
                } else {
                    assert!(
                        documented.contains(&format!("`{metric}"))
                            || documented.contains(&format!(" {metric}")),
                        "{file}: {metric} is not a metric the exporter emits"
                    );
                }
            }
        }
    }
    assert!(checked > 40, "{checked}");
}
