//! Every shipped rule group's evaluation cost with the CPU to itself: each rule's expression is
//! evaluated once more through the query API, at the moment the fleet's simulators were stopped,
//! wrapped in `count()` so that the answer is one number (a recording rule serializes nothing
//! either). A group evaluates its rules one after the other, so its cost is their sum; the
//! budget is its interval (Prometheus starts the next evaluation late, and counts a miss in
//! `prometheus_rule_group_iterations_missed_total`, when one evaluation outlasts it).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;

use crate::scrape::Client;

/// Runs of each expression; the median is kept.
const RUNS: usize = 3;

#[derive(Deserialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    name: String,
    interval: Option<String>,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    record: Option<String>,
    alert: Option<String>,
    expr: String,
}

/// One group's evaluation, rule by rule.
pub struct GroupCost {
    /// `<file>: <group>`, as `prometheus_rule_group_last_duration_seconds` names it (file stem).
    pub group: String,
    pub interval: Duration,
    pub rules: Vec<RuleCost>,
}

pub struct RuleCost {
    pub name: String,
    pub median: Duration,
    /// Series the expression returns (recorded series, or pending and firing alerts).
    pub series: f64,
}

impl GroupCost {
    pub fn total(&self) -> Duration {
        self.rules.iter().map(|r| r.median).sum()
    }

    /// Whether the group reads or records switch series (it then grows with switch ports, not
    /// with nodes).
    pub fn is_switch_group(&self) -> bool {
        self.group.contains("switch")
    }

    pub fn slowest(&self) -> Option<&RuleCost> {
        self.rules.iter().max_by_key(|r| r.median)
    }
}

/// Times every rule of `files` on `client` (pinned to the quiet moment).
pub fn time_all(
    client: &Client,
    files: &[&Path],
    default_interval: Duration,
) -> anyhow::Result<Vec<GroupCost>> {
    let mut costs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).with_context(|| file.display().to_string())?;
        let parsed: RuleFile =
            serde_yaml::from_str(&text).with_context(|| file.display().to_string())?;
        let stem = file.file_name().unwrap_or_default().to_string_lossy();
        for group in parsed.groups {
            let interval = match &group.interval {
                Some(text) => parse_interval(text).with_context(|| group.name.clone())?,
                None => default_interval,
            };
            let mut rules = Vec::new();
            for rule in &group.rules {
                let expr = format!("count({})", rule.expr);
                let mut times = Vec::new();
                let mut series = 0.0;
                for _ in 0..RUNS {
                    let started = Instant::now();
                    series = client.scalar(&expr)?;
                    times.push(started.elapsed());
                }
                times.sort();
                rules.push(RuleCost {
                    name: rule
                        .record
                        .clone()
                        .or_else(|| rule.alert.clone())
                        .unwrap_or_default(),
                    median: times[RUNS / 2],
                    series,
                });
            }
            costs.push(GroupCost {
                group: format!("{stem}: {}", group.name),
                interval,
                rules,
            });
        }
    }
    Ok(costs)
}

/// A rule group interval as the shipped files write it (`5s`, `1m`).
fn parse_interval(text: &str) -> anyhow::Result<Duration> {
    let (number, unit) = text.split_at(text.trim_end_matches(char::is_alphabetic).len());
    let number: u64 = number
        .parse()
        .with_context(|| format!("interval {text:?}"))?;
    let seconds = match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => anyhow::bail!("interval {text:?}: unit s, m or h expected"),
    };
    Ok(Duration::from_secs(seconds))
}

pub fn print(costs: &[GroupCost]) {
    println!(
        "\nrule groups with the CPU to themselves (each rule's expression at the quiet moment, median of {RUNS}, summed):"
    );
    println!(
        "| group | interval s | rules | one evaluation, ms | slowest rule | its ms | series out |"
    );
    println!("| --- | ---: | ---: | ---: | --- | ---: | ---: |");
    for cost in costs {
        let slowest = cost.slowest();
        println!(
            "| {} | {} | {} | {:.1} | {} | {:.1} | {:.0} |",
            cost.group,
            cost.interval.as_secs(),
            cost.rules.len(),
            cost.total().as_secs_f64() * 1000.0,
            slowest.map_or("-", |r| r.name.as_str()),
            slowest.map_or(0.0, |r| r.median.as_secs_f64() * 1000.0),
            cost.rules.iter().map(|r| r.series).sum::<f64>()
        );
    }
}

/// Each group's quiet evaluation under both rule sets (a group only one side has shows `-`).
pub fn print_comparison(before: &[GroupCost], after: &[GroupCost]) {
    let ms = |cost: Option<&GroupCost>| {
        cost.map_or("-".to_string(), |c| {
            format!("{:.1}", c.total().as_secs_f64() * 1000.0)
        })
    };
    let mut groups: Vec<&str> = before.iter().map(|c| c.group.as_str()).collect();
    for cost in after {
        if !groups.contains(&cost.group.as_str()) {
            groups.push(&cost.group);
        }
    }
    println!(
        "\n| rule group, CPU to itself | before, one evaluation ms | after, one evaluation ms |"
    );
    println!("| --- | ---: | ---: |");
    for group in groups {
        let before_cost = before.iter().find(|c| c.group == group);
        let after_cost = after.iter().find(|c| c.group == group);
        println!("| {group} | {} | {} |", ms(before_cost), ms(after_cost));
    }
}
