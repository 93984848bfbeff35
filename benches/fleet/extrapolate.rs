//! From the simulated fleet to 1 000 and 10 000 GPU nodes of 8 NICs with their leaf/spine
//! switches: series, samples per second and Prometheus head memory, linear in nodes and switch
//! ports (every series the exporter and the rules make belongs to one NIC, one switch port or
//! one switch); rule and dashboard times scaled the same way, as an estimate. 10 000 nodes are
//! the deployment docs/deploy.md describes: one Prometheus per cluster of 1 000 nodes (with its
//! share of the switches), each evaluating every rule and serving every board for its cluster.

use std::time::Duration;

use crate::fleet::{Plan, NICS, SWITCH_INTERVAL_S};
use crate::panels::{per_dashboard, Timing};
use crate::rules::GroupCost;
use crate::scrape::{Counts, RuleWindow, SelfMetrics};

const NODE_INTERVAL_S: f64 = 15.0;
const FAST_INTERVAL_S: f64 = 5.0;
const RULE_INTERVAL_S: f64 = 15.0;
/// Series Prometheus adds to every target (up, scrape_duration_seconds, scrape_samples_scraped,
/// scrape_samples_post_metric_relabeling, scrape_series_added): a node is two targets.
const SCRAPE_SERIES: f64 = 5.0;
/// 400G switches with 128 ports (51.2 Tb/s): a leaf has 64 ports down to NICs and 64 up.
const SWITCH_RADIX: f64 = 128.0;
/// The fleets of the table.
const FLEETS: [f64; 2] = [1000.0, 10000.0];
/// Nodes per Prometheus: one per cluster of at most this many (docs/deploy.md, "Large clusters").
const NODES_PER_PROMETHEUS: f64 = 1000.0;
/// Prometheus' default `--query.timeout`: a panel query that takes longer fails.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Measured {
    pub nodes: f64,
    pub switches: f64,
    pub switch_ports: f64,
    pub full_per_node: f64,
    pub fast_per_node: f64,
    pub recorded_per_node: f64,
    pub per_switch: f64,
    pub per_switch_port: f64,
    pub recorded_per_switch_port: f64,
    /// The switch poller endpoints' own series (process, build, scrape figures), per cluster.
    pub poller_series: f64,
    /// Clusters, each with its own switch poller endpoint.
    pub clusters: f64,
    pub head_series: f64,
    pub samples_per_s: f64,
    pub bytes_per_series: f64,
    pub alerts: f64,
}

impl Measured {
    pub fn new(
        plan: &Plan,
        counts: &Counts,
        baseline: &SelfMetrics,
        window: &RuleWindow,
    ) -> anyhow::Result<Measured> {
        if counts.nodes < 1.0 || counts.switch_ports < 1.0 || counts.switches < 1.0 {
            anyhow::bail!(
                "no nodes or switches scraped ({} nodes, {} switches, {} ports)",
                counts.nodes,
                counts.switches,
                counts.switch_ports
            );
        }
        if counts.nodes as usize != plan.nodes() {
            anyhow::bail!("{} of {} nodes scraped", counts.nodes, plan.nodes());
        }
        let clusters = (plan.demos * plan.replicas) as f64;
        Ok(Measured {
            nodes: counts.nodes,
            switches: counts.switches,
            switch_ports: counts.switch_ports,
            full_per_node: counts.full_job / counts.nodes,
            fast_per_node: counts.fast_job / counts.nodes,
            recorded_per_node: counts.recorded_node / counts.nodes,
            per_switch: counts.switch_level_series / counts.switches,
            per_switch_port: counts.switch_port_series / counts.switch_ports,
            recorded_per_switch_port: counts.recorded_switch / counts.switch_ports,
            poller_series: (counts.switch_job
                - counts.switch_port_series
                - counts.switch_level_series)
                / clusters,
            clusters,
            head_series: window.last.head_series,
            samples_per_s: window.samples_per_second(),
            bytes_per_series: (window.last.resident_bytes - baseline.resident_bytes)
                / window.last.head_series.max(1.0),
            alerts: counts.alerts,
        })
    }

    pub fn print(&self) {
        println!(
            "\nmeasured: {} nodes ({} NIC ports), {} switches with {} ports, {} series in the head, {} alert series",
            self.nodes,
            self.nodes * NICS as f64,
            self.switches,
            self.switch_ports,
            self.head_series,
            self.alerts
        );
        println!(
            "  per node: {:.0} series (full job every 15 s) + {:.0} (storm sampler every 5 s) + {:.0} recorded",
            self.full_per_node, self.fast_per_node, self.recorded_per_node
        );
        println!(
            "  per switch: {:.0} series + {:.1} per port ({:.0} ports each) + {:.1} recorded per port; {:.0} of the poller's own per endpoint",
            self.per_switch,
            self.per_switch_port,
            self.switch_ports / self.switches,
            self.recorded_per_switch_port,
            self.poller_series
        );
        println!(
            "  samples/s ingested: {:.0} measured, {:.0} from the per-node and per-port figures",
            self.samples_per_s,
            self.samples_per_s_at(&Fleet::measured(self))
        );
        println!(
            "  Prometheus resident memory: {:.0} bytes per head series (above its memory without targets)",
            self.bytes_per_series
        );
    }

    fn series_at(&self, fleet: &Fleet) -> (f64, f64, f64) {
        let nodes = fleet.nodes * (self.full_per_node + self.fast_per_node + 2.0 * SCRAPE_SERIES);
        let switches = fleet.switches * self.per_switch + fleet.switch_ports * self.per_switch_port;
        let recorded = fleet.nodes * self.recorded_per_node
            + fleet.switch_ports * self.recorded_per_switch_port;
        (nodes, switches, recorded)
    }

    fn samples_per_s_at(&self, fleet: &Fleet) -> f64 {
        fleet.nodes
            * ((self.full_per_node + SCRAPE_SERIES) / NODE_INTERVAL_S
                + (self.fast_per_node + SCRAPE_SERIES) / FAST_INTERVAL_S
                + self.recorded_per_node / RULE_INTERVAL_S)
            + (fleet.switches * self.per_switch
                + fleet.switch_ports * self.per_switch_port
                + fleet.pollers * self.poller_series)
                / SWITCH_INTERVAL_S
            + fleet.switch_ports * self.recorded_per_switch_port / RULE_INTERVAL_S
    }
}

/// A fleet's shape: nodes, their NIC ports, the switches that carry them.
struct Fleet {
    nodes: f64,
    nic_ports: f64,
    switches: f64,
    switch_ports: f64,
    pollers: f64,
    tiers: &'static str,
    /// Prometheus servers sharing it, one per cluster.
    prometheus: f64,
}

impl Fleet {
    /// What one of its Prometheus holds: its cluster's nodes and share of the switches.
    fn per_prometheus(&self) -> Fleet {
        let n = self.prometheus;
        Fleet {
            nodes: self.nodes / n,
            nic_ports: self.nic_ports / n,
            switches: self.switches / n,
            switch_ports: self.switch_ports / n,
            pollers: (self.pollers / n).ceil(),
            tiers: self.tiers,
            prometheus: 1.0,
        }
    }

    fn measured(m: &Measured) -> Fleet {
        Fleet {
            nodes: m.nodes,
            nic_ports: m.nodes * NICS as f64,
            switches: m.switches,
            switch_ports: m.switch_ports,
            pollers: m.clusters,
            tiers: "rail leaves only",
            prometheus: 1.0,
        }
    }

    /// Non-blocking: every NIC port needs a leaf port down and one up; two tiers while one
    /// spine reaches every leaf (leaves <= radix), else a third (super-spines).
    fn of(nodes: f64) -> Fleet {
        let nic_ports = nodes * NICS as f64;
        let half = SWITCH_RADIX / 2.0;
        let leaves = (nic_ports / half).ceil();
        let (switches, tiers) = if leaves <= SWITCH_RADIX {
            (
                leaves + (leaves * half / SWITCH_RADIX).ceil(),
                "leaf + spine",
            )
        } else {
            let spines = leaves;
            let supers = (spines * half / SWITCH_RADIX).ceil();
            (leaves + spines + supers, "leaf + spine + super-spine")
        };
        Fleet {
            nodes,
            nic_ports,
            switches,
            switch_ports: switches * SWITCH_RADIX,
            // One poller endpoint per 500 switches (docs/deploy.md shards them with hashmod).
            pollers: (switches / 500.0).ceil(),
            tiers,
            prometheus: (nodes / NODES_PER_PROMETHEUS).ceil(),
        }
    }
}

fn si(value: f64) -> String {
    match value {
        v if v >= 1e9 => format!("{:.1} G", v / 1e9),
        v if v >= 1e6 => format!("{:.2} M", v / 1e6),
        v if v >= 1e4 => format!("{:.0} k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / (1u64 << 30) as f64)
}

/// A column of the table: a fleet and what one of its Prometheus holds.
struct Column {
    title: String,
    fleet: Fleet,
    /// Whether the column is one Prometheus (rule and panel times apply to it).
    one_prometheus: bool,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

pub fn print_table(m: &Measured, rule_costs: &[GroupCost], timings: &[Timing]) {
    let mut columns = vec![Column {
        title: "measured".to_string(),
        fleet: Fleet::measured(m),
        one_prometheus: true,
    }];
    for nodes in FLEETS {
        let fleet = Fleet::of(nodes);
        if fleet.prometheus > 1.0 {
            columns.push(Column {
                title: format!(
                    "{} nodes, each of {} Prometheus",
                    si(nodes),
                    fleet.prometheus
                ),
                fleet: fleet.per_prometheus(),
                one_prometheus: true,
            });
            columns.push(Column {
                title: format!("{} nodes, all of them", si(nodes)),
                fleet,
                one_prometheus: false,
            });
        } else {
            columns.push(Column {
                title: format!("{} nodes, one Prometheus", si(nodes)),
                fleet,
                one_prometheus: true,
            });
        }
    }
    println!(
        "\nextrapolated ({SWITCH_RADIX}-port switches, non-blocking, rail-optimized leaves; linear in nodes and switch ports; one Prometheus per cluster of up to {NODES_PER_PROMETHEUS} nodes):"
    );
    let titles: Vec<&str> = columns.iter().map(|c| c.title.as_str()).collect();
    println!("| | {} |", titles.join(" | "));
    println!("|---{}|", " | ---:".repeat(columns.len()));
    let row = |name: &str, f: &dyn Fn(&Column) -> String| {
        let cells: Vec<String> = columns.iter().map(f).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("nodes (8 NICs each)", &|c| si(c.fleet.nodes));
    row("NIC ports", &|c| si(c.fleet.nic_ports));
    row("switches", &|c| {
        format!("{} ({})", si(c.fleet.switches), c.fleet.tiers)
    });
    row("switch ports", &|c| si(c.fleet.switch_ports));
    row("series from nodes", &|c| si(m.series_at(&c.fleet).0));
    row("series from switches", &|c| si(m.series_at(&c.fleet).1));
    row("recorded series", &|c| si(m.series_at(&c.fleet).2));
    let total = |f: &Fleet| {
        let (a, b, c) = m.series_at(f);
        a + b + c
    };
    row("head series", &|c| si(total(&c.fleet)));
    row("samples/s", &|c| si(m.samples_per_s_at(&c.fleet)));
    row("head memory (RSS)", &|c| {
        gib(total(&c.fleet) * m.bytes_per_series)
    });
    // Node groups scale with nodes, switch groups with switch ports.
    let scale = |switch: bool, f: &Fleet| {
        if switch {
            f.switch_ports / m.switch_ports
        } else {
            f.nodes / m.nodes
        }
    };
    let mut over_budget = Vec::new();
    for cost in rule_costs {
        row(
            &format!(
                "{}, one evaluation ms (budget {} s)",
                cost.group,
                cost.interval.as_secs()
            ),
            &|c| {
                if !c.one_prometheus {
                    return "-".to_string();
                }
                let estimate = ms(cost.total()) * scale(cost.is_switch_group(), &c.fleet);
                thousands(estimate)
            },
        );
        for column in columns.iter().filter(|c| c.one_prometheus) {
            let estimate = ms(cost.total()) * scale(cost.is_switch_group(), &column.fleet);
            if estimate > ms(cost.interval) {
                over_budget.push(format!("{} at {}", cost.group, column.title));
            }
        }
    }
    // A panel about one host or switch costs the same in any fleet; the others scale.
    let panel_ms = |t: &Timing, dashboard: &str, f: &Fleet| {
        let factor = if t.panel.grows_with_fleet {
            scale(dashboard.contains("switch"), f)
        } else {
            1.0
        };
        ms(t.median) * factor
    };
    for (dashboard, _, _, _, _) in per_dashboard(timings) {
        let panels: Vec<&Timing> = timings
            .iter()
            .filter(|t| t.panel.dashboard == dashboard)
            .collect();
        let opened_on_one = panels.iter().any(|t| !t.panel.grows_with_fleet);
        let name = if opened_on_one {
            format!("dashboard {dashboard}: one refresh, slowest panel ms (opened on one host or switch)")
        } else {
            format!("dashboard {dashboard}: one refresh, slowest panel ms")
        };
        row(&name, &|c| {
            if !c.one_prometheus {
                return "-".to_string();
            }
            let each: Vec<f64> = panels
                .iter()
                .map(|t| panel_ms(t, &dashboard, &c.fleet))
                .collect();
            let slowest = each.iter().copied().fold(0.0, f64::max);
            format!("{}, {}", thousands(each.iter().sum()), thousands(slowest))
        });
        for column in columns.iter().filter(|c| c.one_prometheus) {
            for t in &panels {
                if panel_ms(t, &dashboard, &column.fleet) > ms(QUERY_TIMEOUT) {
                    over_budget.push(format!(
                        "{dashboard}: {} at {}",
                        t.panel.title, column.title
                    ));
                }
            }
        }
    }
    if over_budget.is_empty() {
        println!(
            "\nwithin budget: every rule group evaluates within its interval and every panel within the {} s query timeout, in every column",
            QUERY_TIMEOUT.as_secs()
        );
    } else {
        println!("\nover budget (a group longer than its interval, a panel longer than the query timeout):");
        for what in over_budget {
            println!("  - {what}");
        }
    }
}
