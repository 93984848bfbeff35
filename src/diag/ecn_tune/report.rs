//! The report: text for a terminal (one block per port, worst first), or JSON
//! (`--output json`) with every number the verdicts used.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::classify::{self, Class};
use super::evidence::{rtt_text, Evidence, NicRow, Stat, SwitchRow};
use super::thresholds::Suggestion;
use super::window::{rfc3339, Window};

#[derive(Debug, Clone, Serialize)]
pub struct WindowReport {
    pub start: String,
    pub end: String,
    pub start_unix: f64,
    pub end_unix: f64,
    pub seconds: f64,
    pub source: String,
}

impl From<&Window> for WindowReport {
    fn from(w: &Window) -> Self {
        WindowReport {
            start: rfc3339(w.start),
            end: rfc3339(w.end),
            start_unix: w.start,
            end_unix: w.end,
            seconds: w.seconds(),
            source: w.source.clone(),
        }
    }
}

/// The thresholds the verdicts applied, for readers of the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Thresholds {
    pub pfc_significant: f64,
    pub pfc_near_zero: f64,
    pub ecn_feedback_low: f64,
    pub ecn_feedback_high: f64,
    pub far_below_line_rate: f64,
    pub traffic_floor: f64,
}

pub(crate) const THRESHOLDS: Thresholds = Thresholds {
    pfc_significant: classify::PFC_SIGNIFICANT,
    pfc_near_zero: classify::PFC_NEAR_ZERO,
    ecn_feedback_low: classify::ECN_FEEDBACK_LOW,
    ecn_feedback_high: classify::ECN_FEEDBACK_HIGH,
    far_below_line_rate: classify::FAR_BELOW_LINE_RATE,
    traffic_floor: classify::TRAFFIC_FLOOR,
};

/// `--busbw` against the NIC line rate (both in GB/s, as nccl-tests prints busbw).
#[derive(Debug, Clone, Serialize)]
pub struct Busbw {
    pub busbw_gbytes_per_second: f64,
    pub line_rate_gbytes_per_second: Option<f64>,
    pub share_of_line_rate: Option<f64>,
    pub note: String,
}

pub fn busbw(busbw: f64, line_rate_gbps: Option<f64>, evidence: Option<&Evidence>) -> Busbw {
    let line = line_rate_gbps.map(|g| g / 8.0);
    let share = line.filter(|l| *l > 0.0).map(|l| busbw / l);
    let healthy_fabric = evidence.is_some_and(|e| {
        !e.nics.is_empty() && e.nics.iter().all(|n| n.verdict.class == Class::Healthy)
    });
    let note = match share {
        None => "no line rate to compare with: give --line-rate".to_string(),
        Some(s) if s >= classify::FAR_BELOW_LINE_RATE => format!(
            "busbw is {:.0} % of the NIC line rate: near line rate",
            s * 100.0
        ),
        Some(s) if healthy_fabric => format!(
            "busbw is {:.0} % of the NIC line rate while every NIC looks healthy: the bottleneck is not the ECN setting (GPUs, PCIe, NVLink, topology, or the job's size)",
            s * 100.0
        ),
        Some(s) => format!(
            "busbw is {:.0} % of the NIC line rate: far below it",
            s * 100.0
        ),
    };
    Busbw {
        busbw_gbytes_per_second: busbw,
        line_rate_gbytes_per_second: line,
        share_of_line_rate: share,
        note,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowReport>,
    pub thresholds: Thresholds,
    pub nics: Vec<NicRow>,
    pub switch_ports: Vec<SwitchRow>,
    pub notes: Vec<String>,
    /// Ports per class, NICs and switch ports apart.
    pub summary: BTreeMap<&'static str, BTreeMap<&'static str, usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw: Option<Busbw>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starting_thresholds: Option<Suggestion>,
    pub exit_code: u8,
}

pub fn summary(
    nics: &[NicRow],
    switch_ports: &[SwitchRow],
) -> BTreeMap<&'static str, BTreeMap<&'static str, usize>> {
    let count = |classes: Vec<Class>| {
        let mut m = BTreeMap::new();
        for c in classes {
            *m.entry(c.as_str()).or_insert(0) += 1;
        }
        m
    };
    BTreeMap::from([
        (
            "nics",
            count(nics.iter().map(|n| n.verdict.class).collect()),
        ),
        (
            "switch_ports",
            count(switch_ports.iter().map(|p| p.verdict.class).collect()),
        ),
    ])
}

fn label(class: Class) -> &'static str {
    match class {
        Class::TooHigh => "TOO HIGH",
        Class::TooLow => "TOO LOW",
        Class::NoClearPattern => "UNCLEAR",
        Class::InsufficientTraffic => "IDLE",
        Class::Healthy => "HEALTHY",
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{:.2} %", v * 100.0))
}

fn stat_pct(s: &Stat) -> String {
    format!("avg {} max {}", pct(s.avg), pct(s.max))
}

fn num(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| {
        if v != 0.0 && (v.abs() < 0.01 || v.abs() >= 1e6) {
            format!("{v:.2e}")
        } else {
            format!("{v:.1}")
        }
    })
}

fn nic_block(out: &mut String, n: &NicRow) {
    let e = &n.evidence;
    let netdev = n
        .netdev
        .as_ref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    let _ = writeln!(out, "  {:<8}  {}{netdev}", label(n.verdict.class), n.name());
    let _ = writeln!(out, "            {}", n.verdict.reason);
    let priority = e
        .pfc_rx_priority
        .as_ref()
        .map(|p| format!(" (priority {p})"))
        .unwrap_or_default();
    let rate = e
        .line_rate_gbps
        .map_or("line rate".into(), |g| format!("{g:.0} Gb/s"));
    let _ = writeln!(
        out,
        "            PFC paused by the switch {}{priority}, pausing it {}",
        stat_pct(&e.pfc_rx_paused_ratio),
        stat_pct(&e.pfc_tx_paused_ratio)
    );
    let _ = writeln!(
        out,
        "            throughput {} of {rate}",
        stat_pct(&e.tx_utilization)
    );
    let _ = writeln!(
        out,
        "            ECN marks {}/s ({} per packet); CNPs sent {}/s ({} per packet), handled {}/s ({} per packet), ignored {}/s",
        num(e.ecn_marked_per_second),
        num(e.ecn_marked_per_packet),
        num(e.cnp_sent_per_second),
        num(e.cnp_sent_per_packet),
        num(e.cnp_handled_per_second),
        num(e.cnp_handled_per_packet),
        num(e.cnp_ignored_per_second)
    );
    if let Some(settings) = super::nic_settings::line(&e.nic_settings) {
        let _ = writeln!(out, "            {settings}");
    }
    if let Some(rtt) = e.probe_network_rtt_seconds {
        let before = e
            .probe_network_rtt_baseline_seconds
            .map_or("no probes in the hour before".into(), |b| {
                format!("{} at its lowest in the hour before", rtt_text(b))
            });
        let _ = writeln!(
            out,
            "            probe network RTT {} ({before})",
            rtt_text(rtt)
        );
    }
    let _ = writeln!(out, "            move: {}", n.verdict.direction);
    for note in &n.notes {
        let _ = writeln!(out, "            note: {note}");
    }
}

fn switch_block(out: &mut String, p: &SwitchRow) {
    let e = &p.evidence;
    let neighbor = p
        .neighbor
        .as_ref()
        .map(|n| format!(" -> {n}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  {:<8}  {}{neighbor}",
        label(p.verdict.class),
        p.name()
    );
    let _ = writeln!(out, "            {}", p.verdict.reason);
    let rate = match (e.line_rate_gbps, e.line_rate_source) {
        (Some(g), Some(source)) => format!("{g:.0} Gb/s ({source})"),
        _ => "an unknown line rate".into(),
    };
    let _ = writeln!(
        out,
        "            PFC frames sent {}/s (max {}/s, ~{} of the time paused), received {}/s",
        num(e.pfc_frames_sent_per_second.avg),
        num(e.pfc_frames_sent_per_second.max),
        pct(e.paused_ratio_estimate),
        num(e.pfc_frames_received_per_second.avg)
    );
    let _ = writeln!(
        out,
        "            ECN marks {}/s of {} packets/s sent ({} per packet); throughput {} of {rate}",
        num(e.ecn_marked_per_second),
        num(e.transmitted_packets_per_second),
        num(e.ecn_marked_per_packet),
        pct(e.utilization)
    );
    let _ = writeln!(out, "            move: {}", p.verdict.direction);
    for note in &p.notes {
        let _ = writeln!(out, "            note: {note}");
    }
}

fn counts(m: Option<&BTreeMap<&'static str, usize>>) -> String {
    let Some(m) = m.filter(|m| !m.is_empty()) else {
        return "none".into();
    };
    Class::ALL
        .iter()
        .filter_map(|c| m.get(c.as_str()).map(|n| format!("{n} {}", c.as_str())))
        .collect::<Vec<_>>()
        .join(", ")
}

fn kb(bytes: f64) -> String {
    if bytes.abs() >= 1e7 {
        format!("{:.1} MB", bytes / 1e6)
    } else {
        format!("{:.0} KB", bytes / 1e3)
    }
}

pub fn text(r: &Report) -> String {
    let mut out = String::new();
    if let (Some(url), Some(w)) = (&r.prometheus, &r.window) {
        let _ = writeln!(
            out,
            "ecn-tune: {url}, window {} .. {} ({:.0} s, {})",
            w.start, w.end, w.seconds, w.source
        );
        let mut nics: Vec<&NicRow> = r.nics.iter().collect();
        nics.sort_by_key(|n| n.verdict.class);
        let _ = writeln!(out, "\nNICs ({})", counts(r.summary.get("nics")));
        for n in nics {
            nic_block(&mut out, n);
        }
        let mut ports: Vec<&SwitchRow> = r.switch_ports.iter().collect();
        ports.sort_by_key(|p| p.verdict.class);
        let _ = writeln!(
            out,
            "\nSwitch ports ({})",
            counts(r.summary.get("switch_ports"))
        );
        for p in ports {
            switch_block(&mut out, p);
        }
        for note in &r.notes {
            let _ = writeln!(out, "\nnote: {note}");
        }
    }
    if let Some(b) = &r.busbw {
        let _ = writeln!(
            out,
            "\nbusbw {:.2} GB/s: {}",
            b.busbw_gbytes_per_second, b.note
        );
    }
    if let Some(s) = &r.starting_thresholds {
        let _ = writeln!(
            out,
            "\nStarting thresholds for {} ports at {} Gb/s with {} of buffer (rule of thumb, bound by the {}):",
            s.inputs.ports,
            s.inputs.line_rate_gbps,
            kb(s.inputs.buffer_bytes as f64),
            if s.bound_by == "buffer" { "buffer" } else { "line rate" }
        );
        let _ = writeln!(
            out,
            "  Kmin {}  Kmax {}  Pmax {:.0} %   (per-queue share {}, headroom {}, highest xoff {})",
            kb(s.kmin_bytes),
            kb(s.kmax_bytes),
            s.pmax * 100.0,
            kb(s.share_bytes),
            kb(s.headroom_bytes),
            kb(s.xoff_bytes)
        );
        for w in &s.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
        let _ = writeln!(out, "  assumptions:");
        for a in &s.assumptions {
            let _ = writeln!(out, "    - {a}");
        }
        let _ = writeln!(out, "  sources:");
        for source in &s.sources {
            let _ = writeln!(out, "    - {source}");
        }
    }
    let verdict = match r.exit_code {
        0 => "no ECN threshold misconfiguration found",
        _ => "ECN threshold misconfiguration found (exit 1)",
    };
    if r.prometheus.is_some() {
        let _ = writeln!(out, "\n{verdict}");
    }
    out.trim_start().to_string()
}
