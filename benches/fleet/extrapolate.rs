//! From the simulated fleet to 1 000 and 10 000 GPU nodes of 8 NICs with their leaf/spine
//! switches: series, samples per second and Prometheus head memory, linear in nodes and switch
//! ports (every series the exporter and the rules make belongs to one NIC, one switch port or
//! one switch); rule and dashboard times scaled the same way, as an estimate.

use crate::fleet::{Plan, NICS, SWITCH_INTERVAL_S};
use crate::panels::{per_dashboard, Timing};
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
}

impl Fleet {
    fn measured(m: &Measured) -> Fleet {
        Fleet {
            nodes: m.nodes,
            nic_ports: m.nodes * NICS as f64,
            switches: m.switches,
            switch_ports: m.switch_ports,
            pollers: m.clusters,
            tiers: "rail leaves only",
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

pub fn print_table(m: &Measured, window: &RuleWindow, timings: &[Timing]) {
    let measured = Fleet::measured(m);
    let fleets: Vec<Fleet> = FLEETS.iter().map(|n| Fleet::of(*n)).collect();
    let all: Vec<&Fleet> = std::iter::once(&measured).chain(fleets.iter()).collect();
    println!(
        "\nextrapolated ({SWITCH_RADIX}-port switches, non-blocking, rail-optimized leaves; linear in nodes and switch ports):"
    );
    println!(
        "| | measured | {} nodes | {} nodes |",
        si(FLEETS[0]),
        si(FLEETS[1])
    );
    println!("| --- | ---: | ---: | ---: |");
    let row = |name: &str, f: &dyn Fn(&Fleet) -> String| {
        let cells: Vec<String> = all.iter().map(|fleet| f(fleet)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("nodes (8 NICs each)", &|f| si(f.nodes));
    row("NIC ports", &|f| si(f.nic_ports));
    row("switches", &|f| format!("{} ({})", si(f.switches), f.tiers));
    row("switch ports", &|f| si(f.switch_ports));
    row("series from nodes", &|f| si(m.series_at(f).0));
    row("series from switches", &|f| si(m.series_at(f).1));
    row("recorded series", &|f| si(m.series_at(f).2));
    let total = |f: &Fleet| {
        let (a, b, c) = m.series_at(f);
        a + b + c
    };
    row("head series", &|f| si(total(f)));
    row("samples/s", &|f| si(m.samples_per_s_at(f)));
    row("head memory (RSS)", &|f| gib(total(f) * m.bytes_per_series));
    // Node groups scale with nodes, switch groups with switch ports.
    let scale = |group: &str, f: &Fleet| {
        if group.contains("switch") {
            f.switch_ports / m.switch_ports
        } else {
            f.nodes / m.nodes
        }
    };
    for (group, mean, _) in window.groups() {
        row(&format!("rule group {group}, ms"), &|f| {
            format!("{:.0}", mean * 1000.0 * scale(&group, f))
        });
    }
    // A panel about one host or switch costs the same in any fleet; the others scale.
    for (dashboard, _, _, _, _) in per_dashboard(timings) {
        let panels: Vec<&Timing> = timings
            .iter()
            .filter(|t| t.panel.dashboard == dashboard)
            .collect();
        let name = if panels.iter().any(|t| !t.panel.grows_with_fleet) {
            format!("dashboard {dashboard} refresh, ms (opened on one host or switch)")
        } else {
            format!("dashboard {dashboard} refresh, ms")
        };
        row(&name, &|f| {
            let ms: f64 = panels
                .iter()
                .map(|t| {
                    let factor = if t.panel.grows_with_fleet {
                        scale(&dashboard, f)
                    } else {
                        1.0
                    };
                    t.median.as_secs_f64() * 1000.0 * factor
                })
                .sum();
            format!("{ms:.0}")
        });
    }
}
