//! The command's output: text for people, JSON (`--output json`) for machines.

use std::fmt::Write;

use super::triage::{ProtoTriage, SimpleBy};
use super::verdict::{Job, Transport};

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub jobs: Vec<Job>,
    /// Benchmarks in the input that printed no result after NCCL's init.
    pub stalls: Vec<super::stall::Stall>,
    /// Hang evidence: a silence after NCCL's init in the timestamps, PyTorch's watchdog.
    pub hangs: Vec<super::hang::Hang>,
    /// Present when a run failed or a run used only Simple.
    pub proto_triage: Option<ProtoTriage>,
    pub exit_code: u8,
}

pub fn text(report: &Report) -> String {
    let mut out = String::new();
    if report.jobs.is_empty() {
        out.push_str("no NCCL log lines found (was NCCL_DEBUG=INFO set?)\n");
    }
    for job in &report.jobs {
        let id = job.comm_id.as_deref().unwrap_or("(all input)");
        let _ = writeln!(out, "job {id}: {}", job.summary);
        for p in &job.processes {
            let ranks: Vec<String> = p.ranks.iter().map(u32::to_string).collect();
            let network = match p.transport {
                Transport::None => "no network chosen".to_string(),
                Transport::Socket => format!("Socket {}", p.socket_interfaces.join(" ")),
                Transport::Rdma => {
                    let hcas: Vec<String> = p
                        .hcas
                        .iter()
                        .map(|h| format!("{}:{}/{}", h.name, h.port, h.link_layer))
                        .collect();
                    format!("{} {} GDR {}", p.network, hcas.join(" "), p.gdr.as_label())
                }
            };
            let _ = writeln!(
                out,
                "  {}:{} rank {} NCCL {}: {}",
                p.host,
                p.pid,
                if ranks.is_empty() {
                    "?".into()
                } else {
                    ranks.join(",")
                },
                p.nccl_version.as_deref().unwrap_or("?"),
                network.trim_end()
            );
            for evidence in &p.evidence {
                let _ = writeln!(out, "    {evidence}");
            }
        }
        for f in &job.failures {
            let detail = f
                .detail
                .as_deref()
                .map(|d| format!(", {d}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  failed: {}{detail} ({}:{}); check {}",
                f.call, f.evidence.file, f.evidence.line, f.hint
            );
        }
        for e in &job.errors {
            let _ = writeln!(out, "  error: NCCL WARN ({}:{})", e.file, e.line);
        }
        for w in &job.warnings {
            let _ = writeln!(
                out,
                "  warning: {}={} {} ({}:{})",
                w.setting, w.value, w.message, w.evidence.file, w.evidence.line
            );
        }
    }
    for stall in &report.stalls {
        let _ = writeln!(
            out,
            "no progress after init: {}:{}: {}{}",
            stall.file,
            stall.line,
            stall
                .collective
                .as_deref()
                .map(|c| format!("{c}: "))
                .unwrap_or_default(),
            stall.detail
        );
    }
    for hang in &report.hangs {
        let _ = writeln!(out, "hang: {}:{}: {}", hang.file, hang.line, hang.detail);
        for evidence in &hang.evidence {
            let _ = writeln!(out, "    {evidence}");
        }
    }
    if let Some(triage) = &report.proto_triage {
        triage_text(&mut out, triage);
    }
    out
}

/// The triage: the conclusion, then each run with the lines that decided its side.
fn triage_text(out: &mut String, triage: &ProtoTriage) {
    let _ = writeln!(out, "NCCL_PROTO=Simple triage: {}", triage.message);
    for run in &triage.runs {
        let kind = if run.simple {
            "Simple run"
        } else {
            "default run"
        };
        let why = match (run.simple_by, &run.simple_evidence) {
            (Some(SimpleBy::Setting), Some(e)) => format!(
                " (NCCL_PROTO={} at {}:{})",
                run.proto.as_deref().unwrap_or("Simple"),
                e.file,
                e.line
            ),
            (Some(SimpleBy::Flag), _) => " (named with --simple)".to_string(),
            _ => match &run.proto {
                Some(proto) => format!(" (NCCL_PROTO={proto})"),
                None => String::new(),
            },
        };
        let state = if !run.nccl_lines {
            "no NCCL line in it, left out (was NCCL_DEBUG set?)"
        } else if run.failed {
            "FAILS"
        } else {
            "works"
        };
        let _ = writeln!(out, "  {kind} {}{why}: {state}", run.name);
        for summary in &run.summary {
            let _ = writeln!(out, "    {summary}");
        }
        for evidence in run.simple_evidence.iter().chain(&run.evidence) {
            let _ = writeln!(out, "    {evidence}");
        }
    }
}
