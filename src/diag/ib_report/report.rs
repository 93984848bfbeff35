//! The report `ib-report` prints: what each file was, the fabric's size, then the findings,
//! as text or as the same document in JSON.

use std::fmt::Write;

use serde::Serialize;

use super::findings::{End, Findings};
use super::{Input, EXIT_FINDINGS};
use crate::ib::diags::merge::Merged;
use crate::ib::model::NodeKind;

#[derive(Debug, Serialize)]
pub struct FileSummary {
    pub name: String,
    pub tool: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub files: Vec<FileSummary>,
    pub switches: usize,
    pub hcas: usize,
    pub routers: usize,
    /// Links seen (each counted once, from either end).
    pub links: usize,
    /// perfquery blocks no topology placed (named by LID).
    pub unplaced_counter_blocks: usize,
    #[serde(flatten)]
    pub findings: Findings,
    pub exit_code: u8,
}

impl Report {
    pub fn new(inputs: &[Input], merged: &Merged, findings: Findings) -> Report {
        let nodes = &merged.scan.nodes;
        let count = |k: NodeKind| nodes.iter().filter(|n| n.kind == k).count();
        let mut ends = 0;
        for node in nodes {
            ends += node.ports.iter().filter(|p| p.remote.is_some()).count();
        }
        // A far end known by LID only is not in the output: its link has one end here.
        let lid_only = nodes
            .iter()
            .flat_map(|n| n.ports.iter())
            .filter(|p| p.remote_lid_only.is_some())
            .count();
        // A link known from one end only is still one link: count ends whose far node is
        // absent once, the others twice (then halve).
        let one_sided = nodes
            .iter()
            .flat_map(|n| n.ports.iter())
            .filter_map(|p| p.remote.as_ref())
            .filter(|r| {
                merged.scan.node(r.guid).is_none_or(|n| {
                    !n.ports
                        .iter()
                        .any(|p| p.number == r.port && p.remote.is_some())
                })
            })
            .count();
        let exit_code = if findings.is_clean() {
            0
        } else {
            EXIT_FINDINGS
        };
        Report {
            files: inputs
                .iter()
                .map(|i| FileSummary {
                    name: i.name.clone(),
                    tool: i.parsed.tool().as_str(),
                })
                .collect(),
            switches: count(NodeKind::Switch),
            hcas: count(NodeKind::Hca),
            routers: count(NodeKind::Router),
            links: (ends + one_sided) / 2 + lid_only,
            unplaced_counter_blocks: merged.unplaced.len(),
            findings,
            exit_code,
        }
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        let tools: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("{} ({})", f.name, f.tool))
            .collect();
        let _ = writeln!(s, "ib-report: {}", tools.join(", "));
        let _ = writeln!(
            s,
            "fabric: {} switches, {} HCAs, {} routers, {} links{}",
            self.switches,
            self.hcas,
            self.routers,
            self.links,
            match (&self.findings.common_width, &self.findings.common_speed) {
                (Some(w), Some(sp)) => format!(" (most at {w} {sp})"),
                _ => String::new(),
            }
        );
        let far = |f: &Option<End>| match f {
            Some(f) => format!(" <-> {}", f.text()),
            None => String::new(),
        };
        let f = &self.findings;
        if !f.degraded_links.is_empty() {
            let _ = writeln!(s, "\ndegraded links ({}):", f.degraded_links.len());
            for d in &f.degraded_links {
                let got = format!(
                    "{} {}",
                    d.width.as_deref().unwrap_or("?"),
                    d.speed.as_deref().unwrap_or("?")
                );
                let want = format!(
                    "{} {}",
                    d.expected_width.as_deref().unwrap_or("?"),
                    d.expected_speed.as_deref().unwrap_or("?")
                );
                let against = match d.compared_with {
                    "enabled" => "enabled",
                    "remote_enabled" => "enabled at the other end",
                    _ => "the fabric's common",
                };
                let _ = writeln!(
                    s,
                    "  {}{}: {got}, {against} {want}",
                    d.near.text(),
                    far(&d.far)
                );
            }
        }
        if !f.error_ports.is_empty() {
            let _ = writeln!(s, "\nports with errors ({}):", f.error_ports.len());
            for e in &f.error_ports {
                let counters: Vec<String> = e
                    .counters
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {}{}",
                            c.name,
                            c.value,
                            if c.saturated { " (saturated)" } else { "" }
                        )
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "  {}{}: {}",
                    e.port.text(),
                    far(&e.far),
                    counters.join(", ")
                );
            }
        }
        if !f.congested_ports.is_empty() {
            let _ = writeln!(s, "\ncongested ports ({}):", f.congested_ports.len());
            for c in &f.congested_ports {
                let what = match (c.wait_per_word, c.xmit_data_words) {
                    (Some(r), Some(d)) => format!("{r:.3} wait ticks per word sent ({d} words)"),
                    _ => "no PortXmitData to compare with".to_owned(),
                };
                let _ = writeln!(
                    s,
                    "  {}{}: PortXmitWait {}{}, {what}",
                    c.port.text(),
                    far(&c.far),
                    c.xmit_wait,
                    if c.xmit_wait_saturated {
                        " (saturated)"
                    } else {
                        ""
                    }
                );
            }
        }
        let _ = writeln!(
            s,
            "\n{}",
            if self.exit_code == 0 {
                "no degraded links, error ports or congestion found"
            } else {
                "findings: exit 1"
            }
        );
        s
    }
}
