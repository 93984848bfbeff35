//! Prometheus under measurement: its HTTP query API, its own `/metrics` (memory, head series,
//! samples appended, rule group durations), and the fleet's series counts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};

pub struct Client {
    http: reqwest::blocking::Client,
    address: String,
    /// The evaluation time of every query once pinned (Unix seconds): the quiet phase asks about
    /// the fleet as it was when its simulators were stopped. `None`: now.
    at: Option<f64>,
}

impl Client {
    pub fn new(address: &str) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()?,
            address: address.to_string(),
            at: None,
        })
    }

    /// Every later query is evaluated at `at` (Unix seconds), range queries end there.
    pub fn pin(&mut self, at: f64) {
        self.at = Some(at);
    }

    /// The time queries are evaluated at: the pinned one, else now.
    fn evaluation_time(&self) -> anyhow::Result<f64> {
        match self.at {
            Some(at) => Ok(at),
            None => Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64()),
        }
    }

    pub fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let url = format!("http://{}/-/ready", self.address);
        while Instant::now() < deadline {
            if self
                .http
                .get(&url)
                .send()
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("Prometheus at {} not ready within {within:?}", self.address)
    }

    /// An API call's `data`, or why it failed.
    fn api(&self, path: &str, params: &[(&str, String)]) -> anyhow::Result<serde_json::Value> {
        let url = format!("http://{}/api/v1/{path}", self.address);
        let response = self.http.get(url).query(params).send()?;
        let status = response.status();
        let body: serde_json::Value = response.json()?;
        if !status.is_success() || body["status"] != "success" {
            bail!("{status}: {}", body["error"]);
        }
        Ok(body["data"].clone())
    }

    /// An instant query's result (a vector's or a matrix's series).
    pub fn query(&self, expr: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let time = format!("{:.3}", self.evaluation_time()?);
        let data = self
            .api("query", &[("query", expr.to_string()), ("time", time)])
            .with_context(|| format!("query {expr}"))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// A range query over the last `range` at Grafana's step for it; returns the series.
    pub fn query_range(&self, expr: &str, range: Duration, step_s: u64) -> anyhow::Result<usize> {
        let end = self.evaluation_time()?;
        let start = end - range.as_secs_f64();
        let data = self
            .api(
                "query_range",
                &[
                    ("query", expr.to_string()),
                    ("start", format!("{start:.3}")),
                    ("end", format!("{end:.3}")),
                    ("step", step_s.to_string()),
                ],
            )
            .with_context(|| format!("query_range {expr}"))?;
        Ok(data["result"].as_array().map_or(0, Vec::len))
    }

    /// A query whose answer is one number (0 when it is empty).
    pub fn scalar(&self, expr: &str) -> anyhow::Result<f64> {
        let result = self.query(expr)?;
        match result.as_slice() {
            [] => Ok(0.0),
            [one] => one["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{expr}: not a number: {one}")),
            more => bail!("{expr}: {} series, one expected", more.len()),
        }
    }

    /// Prometheus' own figures, read from its `/metrics`.
    pub fn self_metrics(&self) -> anyhow::Result<SelfMetrics> {
        let text = self
            .http
            .get(format!("http://{}/metrics", self.address))
            .send()?
            .text()?;
        let at = Instant::now();
        let mut figures = SelfMetrics {
            at,
            resident_bytes: 0.0,
            head_series: 0.0,
            samples_appended: 0.0,
            rule_group_seconds: BTreeMap::new(),
            rule_group_samples: BTreeMap::new(),
        };
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let name = series.split('{').next().unwrap_or_default();
            match name {
                "process_resident_memory_bytes" => figures.resident_bytes = value,
                "prometheus_tsdb_head_series" => figures.head_series = value,
                "prometheus_tsdb_head_samples_appended_total" => figures.samples_appended += value,
                "prometheus_rule_group_last_duration_seconds" => {
                    figures.rule_group_seconds.insert(rule_group(series), value);
                }
                "prometheus_rule_group_last_evaluation_samples" => {
                    figures.rule_group_samples.insert(rule_group(series), value);
                }
                _ => {}
            }
        }
        Ok(figures)
    }
}

/// `file;group` of a rule group series, as `file.yml: group`.
fn rule_group(series: &str) -> String {
    let label = series
        .split("rule_group=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default();
    match label.rsplit_once(';') {
        Some((file, group)) => {
            let file = file.rsplit('/').next().unwrap_or(file);
            format!("{file}: {group}")
        }
        None => label.to_string(),
    }
}

pub struct SelfMetrics {
    pub at: Instant,
    pub resident_bytes: f64,
    pub head_series: f64,
    pub samples_appended: f64,
    /// The last evaluation's duration of each rule group.
    pub rule_group_seconds: BTreeMap<String, f64>,
    /// Samples the last evaluation of each rule group produced.
    pub rule_group_samples: BTreeMap<String, f64>,
}

/// Prometheus' figures over the measured window.
pub struct RuleWindow {
    pub first: SelfMetrics,
    pub last: SelfMetrics,
    /// Every 5 s reading of each group's last evaluation time (seconds).
    pub durations: BTreeMap<String, Vec<f64>>,
}

impl RuleWindow {
    /// Reads each Prometheus' `/metrics` every 5 s (the fastest group's interval) for
    /// `measure`, all of them in the same loop.
    pub fn sample(clients: &[&Client], measure: Duration) -> anyhow::Result<Vec<RuleWindow>> {
        let mut windows = Vec::new();
        for client in clients {
            windows.push(RuleWindow {
                first: client.self_metrics()?,
                last: client.self_metrics()?,
                durations: BTreeMap::new(),
            });
        }
        let started = Instant::now();
        while started.elapsed() < measure {
            std::thread::sleep(Duration::from_secs(5));
            for (client, window) in clients.iter().zip(&mut windows) {
                let now = client.self_metrics()?;
                for (group, seconds) in &now.rule_group_seconds {
                    window
                        .durations
                        .entry(group.clone())
                        .or_default()
                        .push(*seconds);
                }
                window.last = now;
            }
        }
        Ok(windows)
    }

    pub fn samples_per_second(&self) -> f64 {
        (self.last.samples_appended - self.first.samples_appended)
            / self.last.at.duration_since(self.first.at).as_secs_f64()
    }

    /// (group, mean, max) evaluation time in seconds.
    pub fn groups(&self) -> Vec<(String, f64, f64)> {
        self.durations
            .iter()
            .map(|(group, seen)| {
                let mean = seen.iter().sum::<f64>() / seen.len().max(1) as f64;
                let max = seen.iter().copied().fold(0.0, f64::max);
                (group.clone(), mean, max)
            })
            .collect()
    }
}

pub fn print_rule_groups(window: &RuleWindow) {
    println!("\nrule groups (last evaluation time, read every 5 s over the window):");
    println!("| group | mean ms | max ms | samples out |");
    println!("| --- | ---: | ---: | ---: |");
    for (group, mean, max) in window.groups() {
        let samples = window
            .last
            .rule_group_samples
            .get(&group)
            .copied()
            .unwrap_or(0.0);
        println!(
            "| {group} | {:.2} | {:.2} | {samples:.0} |",
            mean * 1000.0,
            max * 1000.0
        );
    }
}

/// Series of every metric whose name starts with `prefix`, with `matchers`: one query per
/// name (an index lookup each; a selector without a name scans every series and timed out
/// at fleet scale).
fn by_name(client: &Client, prefix: &str, matchers: &str) -> anyhow::Result<f64> {
    let names = client.api("label/__name__/values", &[])?;
    let mut total = 0.0;
    for name in names
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str())
    {
        if name.starts_with(prefix) {
            total += client.scalar(&format!("count({name}{{{matchers}}})"))?;
        }
    }
    Ok(total)
}

/// Each rule group's mean evaluation time under both rule sets.
pub fn print_comparison(before: &RuleWindow, after: &RuleWindow) {
    let mut groups: BTreeMap<String, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for (group, mean, _) in before.groups() {
        groups.entry(group).or_default().0 = Some(mean);
    }
    for (group, mean, _) in after.groups() {
        groups.entry(group).or_default().1 = Some(mean);
    }
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}", v * 1000.0));
    let total = |w: &RuleWindow| w.groups().iter().map(|g| g.1).sum::<f64>() * 1000.0;
    println!(
        "
| rule group | before, mean ms | after, mean ms |"
    );
    println!("| --- | ---: | ---: |");
    for (group, (b, a)) in groups {
        println!("| {group} | {} | {} |", ms(b), ms(a));
    }
    println!(
        "| all groups | {:.2} | {:.2} |",
        total(before),
        total(after)
    );
}

/// The fleet's series, by where they come from.
pub struct Counts {
    pub nodes: f64,
    /// Samples per scrape of every node, after metric relabeling.
    pub full_job: f64,
    pub fast_job: f64,
    pub switch_job: f64,
    pub switches: f64,
    pub switch_ports: f64,
    /// Series of the switch job with a `port` label, and with a `switch` but no `port`.
    pub switch_port_series: f64,
    pub switch_level_series: f64,
    /// Recording rules' series with a `switch` label (switch ports) and without (NICs).
    pub recorded_switch: f64,
    pub recorded_node: f64,
    pub alerts: f64,
    pub up: f64,
}

impl Counts {
    pub fn query(client: &Client) -> anyhow::Result<Counts> {
        let q = |expr: &str| client.scalar(expr);
        let samples = |job: &str| {
            q(&format!(
                r#"sum(scrape_samples_post_metric_relabeling{{job="{job}"}})"#
            ))
        };
        let counts = Counts {
            nodes: q(r#"count(up{job="rdma-node"})"#)?,
            full_job: samples("rdma-node")?,
            fast_job: samples("rdma-node-fast")?,
            switch_job: samples("rdma-switches")?,
            switches: q("count(rdma_switch_up)")?,
            switch_ports: q("count(rdma_switch_port_oper_status)")?,
            switch_port_series: by_name(client, "rdma_switch_", r#"port!="""#)?,
            switch_level_series: by_name(client, "rdma_switch_", r#"switch!="", port="""#)?,
            recorded_switch: by_name(client, "rdma:", r#"switch!="""#)?,
            recorded_node: by_name(client, "rdma:", r#"switch="""#)?,
            alerts: q("count(ALERTS)")?,
            up: q("sum(up)")?,
        };
        let targets = q("count(up)")?;
        if counts.up < targets {
            bail!(
                "{} of {targets} targets down: the machine cannot scrape this fleet in time",
                targets - counts.up
            );
        }
        Ok(counts)
    }
}
