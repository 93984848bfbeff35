//! Every dashboard panel query, run as Grafana runs it over the fleet when a board is opened:
//! variables at All (their `allValue`) where they have it, else at their first value (the
//! host and switch boards open on one host or switch), `$__rate_interval` 1m and `$__interval`
//! 15s (Prometheus' 15 s scrape), range queries at a 15 s step over the time the fleet has been
//! scraped, instant ones for the targets that ask for it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::scrape::Client;

/// Grafana's step and `$__interval` for a 1 h dashboard at the scrape interval.
const STEP_S: u64 = 15;
/// Runs of each query; the median is kept.
const RUNS: usize = 3;

pub struct Panel {
    pub dashboard: String,
    pub title: String,
    pub expr: String,
    pub instant: bool,
    /// False when the query selects one host or switch (a variable at its first value): its
    /// cost then does not grow with the fleet.
    pub grows_with_fleet: bool,
}

pub struct Timing {
    pub panel: Panel,
    pub median: Duration,
    pub series: usize,
}

/// Every panel target of every dashboard in `dir`, its variables substituted as the board
/// opens (first values asked of `client`).
pub fn load(dir: &Path, client: &Client) -> anyhow::Result<Vec<Panel>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut panels = Vec::new();
    for file in files {
        let json: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)
            .with_context(|| format!("{}", file.display()))?;
        let dashboard = json["uid"].as_str().unwrap_or_default().to_string();
        let mut all_values: BTreeMap<String, String> = BTreeMap::new();
        let mut first_values = Vec::new();
        // In order: a variable's query may use the ones before it.
        for variable in json["templating"]["list"].as_array().into_iter().flatten() {
            let Some(name) = variable["name"].as_str() else {
                continue;
            };
            let value = match variable["allValue"].as_str() {
                Some(all) => all.to_string(),
                None if variable["type"] == "query" => {
                    first_values.push(name.to_string());
                    first_value(client, variable, &all_values)
                        .with_context(|| format!("{dashboard}: variable {name}"))?
                }
                None => continue,
            };
            all_values.insert(name.to_string(), value);
        }
        let mut found = Vec::new();
        collect_targets(&json, &mut found);
        for (title, target) in found {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            panels.push(Panel {
                dashboard: dashboard.clone(),
                title,
                expr: substitute(expr, &all_values)
                    .with_context(|| format!("{dashboard}: {expr}"))?,
                instant: target["instant"].as_bool().unwrap_or(false),
                grows_with_fleet: !first_values.iter().any(|name| uses_variable(expr, name)),
            });
        }
    }
    Ok(panels)
}

/// A variable reference as Grafana writes it: `${name}`, `${name:format}` or `$name`.
static VARIABLE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)").expect("a valid regex"));

/// The name of a [`VARIABLE`] match.
fn variable_name<'t>(reference: &regex::Captures<'t>) -> &'t str {
    reference
        .get(1)
        .or_else(|| reference.get(2))
        .map_or("", |m| m.as_str())
}

/// Whether `expr` refers to variable `name`.
fn uses_variable(expr: &str, name: &str) -> bool {
    VARIABLE
        .captures_iter(expr)
        .any(|reference| variable_name(&reference) == name)
}

/// The first of a `label_values(selector, label)` variable's values (sorted, as the shipped
/// variables are), as a regex matcher's text inside a PromQL string.
fn first_value(
    client: &Client,
    variable: &Value,
    known: &BTreeMap<String, String>,
) -> anyhow::Result<String> {
    let definition = variable["definition"].as_str().unwrap_or_default();
    let Some((selector, label)) = definition
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|rest| rest.rsplit_once(','))
    else {
        bail!("not a label_values(selector, label) query: {definition:?}");
    };
    let label = label.trim();
    let expr = format!("group by ({label}) ({})", substitute(selector, known)?);
    let first = client
        .query(&expr)?
        .iter()
        .filter_map(|series| series["metric"][label].as_str().map(str::to_string))
        .min()
        .with_context(|| format!("no values: {expr}"))?;
    // Regex-escaped, then the backslashes escaped again for the PromQL string.
    Ok(regex::escape(&first).replace('\\', "\\\\"))
}

/// (panel title, target) of every panel, those inside collapsed rows included.
fn collect_targets<'a>(value: &'a Value, found: &mut Vec<(String, &'a Value)>) {
    if let Some(panels) = value["panels"].as_array() {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or_default();
            for target in panel["targets"].as_array().into_iter().flatten() {
                found.push((title.to_string(), target));
            }
            collect_targets(panel, found);
        }
    }
}

fn substitute(expr: &str, all_values: &BTreeMap<String, String>) -> anyhow::Result<String> {
    let mut unknown = None;
    let text = VARIABLE.replace_all(expr, |c: &regex::Captures| {
        match variable_name(c) {
            "__rate_interval" => "1m".to_string(),
            "__interval" => format!("{STEP_S}s"),
            // The 1 h dashboard range; the fleet has less history, which costs no more.
            "__range" => "1h".to_string(),
            // `$1` in label_replace.
            n if n.chars().all(|c| c.is_ascii_digit()) => c[0].to_string(),
            n => all_values.get(n).cloned().unwrap_or_else(|| {
                unknown = Some(n.to_string());
                String::new()
            }),
        }
    });
    if let Some(name) = unknown {
        bail!("unknown variable ${name}");
    }
    Ok(text.into_owned())
}

/// Runs each query `RUNS` times over the last `range`; keeps the median time.
pub fn time_all(client: &Client, panels: &[Panel], range: Duration) -> anyhow::Result<Vec<Timing>> {
    let mut timings = Vec::new();
    for panel in panels {
        let mut times = Vec::new();
        let mut series = 0;
        for _ in 0..RUNS {
            let started = Instant::now();
            series = if panel.instant {
                client.query(&panel.expr)?.len()
            } else {
                client.query_range(&panel.expr, range, STEP_S)?
            };
            times.push(started.elapsed());
        }
        times.sort();
        timings.push(Timing {
            panel: Panel {
                dashboard: panel.dashboard.clone(),
                title: panel.title.clone(),
                expr: panel.expr.clone(),
                instant: panel.instant,
                grows_with_fleet: panel.grows_with_fleet,
            },
            median: times[RUNS / 2],
            series,
        });
    }
    Ok(timings)
}

/// Each dashboard's total (one refresh runs every query) and its slowest panel.
pub fn per_dashboard(timings: &[Timing]) -> Vec<(String, usize, Duration, String, Duration)> {
    let mut dashboards: BTreeMap<&str, Vec<&Timing>> = BTreeMap::new();
    for t in timings {
        dashboards.entry(&t.panel.dashboard).or_default().push(t);
    }
    dashboards
        .into_iter()
        .map(|(name, ts)| {
            let total = ts.iter().map(|t| t.median).sum();
            let slowest = ts.iter().max_by_key(|t| t.median).expect("a panel");
            (
                name.to_string(),
                ts.len(),
                total,
                slowest.panel.title.clone(),
                slowest.median,
            )
        })
        .collect()
}

pub fn print(timings: &[Timing]) {
    println!(
        "\ndashboard panel queries (median of {RUNS}; range at a {STEP_S} s step unless instant):"
    );
    println!("| dashboard | panel | kind | ms | series |");
    println!("| --- | --- | --- | ---: | ---: |");
    for t in timings {
        println!(
            "| {} | {} | {} | {:.1} | {} |",
            t.panel.dashboard,
            t.panel.title,
            if t.panel.instant { "instant" } else { "range" },
            t.median.as_secs_f64() * 1000.0,
            t.series
        );
    }
    println!("\n| dashboard | queries | one refresh, ms | slowest panel | its ms |");
    println!("| --- | ---: | ---: | --- | ---: |");
    for (name, queries, total, slowest, its) in per_dashboard(timings) {
        println!(
            "| {name} | {queries} | {:.0} | {slowest} | {:.1} |",
            total.as_secs_f64() * 1000.0,
            its.as_secs_f64() * 1000.0
        );
    }
}

/// Each dashboard's refresh, and every panel whose query changed, under both checkouts.
pub fn print_comparison(before: &[Timing], after: &[Timing]) {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    println!("\n| dashboard | before, one refresh ms | after, one refresh ms |");
    println!("| --- | ---: | ---: |");
    let after_totals = per_dashboard(after);
    for (name, _, total, _, _) in per_dashboard(before) {
        let now = after_totals
            .iter()
            .find(|a| a.0 == name)
            .map_or("-".to_string(), |a| ms(a.2));
        println!("| {name} | {} | {now} |", ms(total));
    }
    println!("\n| dashboard | changed panel | before ms | after ms | series before / after |");
    println!("| --- | --- | ---: | ---: | ---: |");
    // The same dashboard, title and position among that title's targets.
    let key = |ts: &[Timing], i: usize| {
        let t = &ts[i];
        let nth = ts[..i]
            .iter()
            .filter(|o| o.panel.dashboard == t.panel.dashboard && o.panel.title == t.panel.title)
            .count();
        (t.panel.dashboard.clone(), t.panel.title.clone(), nth)
    };
    for i in 0..before.len() {
        let wanted = key(before, i);
        let Some(j) = (0..after.len()).find(|&j| key(after, j) == wanted) else {
            continue;
        };
        if before[i].panel.expr != after[j].panel.expr {
            println!(
                "| {} | {} | {} | {} | {} / {} |",
                wanted.0,
                wanted.1,
                ms(before[i].median),
                ms(after[j].median),
                before[i].series,
                after[j].series
            );
        }
    }
}
