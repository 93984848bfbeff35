//! The command's output: text for people, JSON (`--output json`) for machines.

use std::fmt::Write;

use super::verdict::{Job, Transport};

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub jobs: Vec<Job>,
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
            let _ = writeln!(
                out,
                "  failed: {} ({}:{}); check {}",
                f.call, f.evidence.file, f.evidence.line, f.hint
            );
        }
        for w in &job.warnings {
            let _ = writeln!(
                out,
                "  warning: {}={} {} ({}:{})",
                w.setting, w.value, w.message, w.evidence.file, w.evidence.line
            );
        }
    }
    out
}
