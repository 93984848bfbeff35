//! The command's output: text for people, JSON (`--output json`) for machines. Both carry the
//! verdict, the figures it rests on and how the expectation was computed.

use std::fmt::Write as _;

use serde::Serialize;

use super::line_rate::LineRate;
use super::parse::{Device, Parameters, Row, Run, SkippedLine};
use super::verdict::{Expectation, Judgement, Verdict};

/// The JSON document (field names are the interface; see README).
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub input: &'a str,
    pub verdict: Verdict,
    pub exit_code: u8,
    pub summary: &'a str,
    pub collective: Option<&'a str>,
    pub nccl_tests_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rccl_tests_version: Option<&'a str>,
    pub nccl_version: Option<&'a str>,
    pub parameters: &'a Parameters,
    pub hosts: Vec<&'a str>,
    pub ranks: usize,
    pub devices: &'a [Device],
    pub columns: &'a [String],
    pub rows: &'a [Row],
    /// The footer's `# Avg bus bandwidth`, GB/s as nccl-tests prints it.
    pub avg_busbw_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_busbw_check: Option<&'a str>,
    pub out_of_bounds: Option<u64>,
    /// Sum of every row's `#wrong`.
    pub wrong: u64,
    /// Some `#wrong` read `N/A` (validation off) or the version printed `error` instead.
    pub wrong_unknown: bool,
    pub complete: bool,
    pub line_rate: Option<&'a LineRate>,
    pub expectation: Option<&'a Expectation>,
    pub not_judged_because: Option<&'a str>,
    pub notes: &'a [String],
    pub skipped_lines: &'a [SkippedLine],
    pub skipped_total: usize,
}

impl<'a> Report<'a> {
    pub fn new(
        input: &'a str,
        run: &'a Run,
        line_rate: Option<&'a LineRate>,
        judgement: &'a Judgement,
    ) -> Report<'a> {
        Report {
            input,
            verdict: judgement.verdict,
            exit_code: judgement.verdict.exit_code(),
            summary: &judgement.summary,
            collective: run.collective.as_deref(),
            nccl_tests_version: run.nccl_tests_version.as_deref(),
            rccl_tests_version: run.rccl_tests_version.as_deref(),
            nccl_version: run.nccl_version.as_deref(),
            parameters: &run.parameters,
            hosts: run.hosts(),
            ranks: run.devices.len(),
            devices: &run.devices,
            columns: &run.columns,
            rows: &run.rows,
            avg_busbw_gbps: run.footer.avg_busbw_gbps,
            avg_busbw_check: run.footer.avg_busbw_check.as_deref(),
            out_of_bounds: run.footer.out_of_bounds,
            wrong: run.wrong_total(),
            wrong_unknown: run.wrong_unknown(),
            complete: run.is_complete(),
            line_rate,
            expectation: judgement.expectation.as_ref(),
            not_judged_because: judgement.not_judged_because.as_deref(),
            notes: &judgement.notes,
            skipped_lines: &run.skipped_lines,
            skipped_total: run.skipped_total,
        }
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        let what = self.collective.unwrap_or("nccl-tests run");
        let mut versions = Vec::new();
        if let Some(v) = self.nccl_tests_version {
            versions.push(format!("nccl-tests {v}"));
        }
        if let Some(v) = self.rccl_tests_version {
            versions.push(format!("rccl-tests {v}"));
        }
        if let Some(v) = self.nccl_version {
            versions.push(format!("NCCL {v}"));
        }
        let versions = if versions.is_empty() {
            String::new()
        } else {
            format!(" ({})", versions.join(", "))
        };
        let hosts = match self.hosts.len() {
            0 => "hosts unknown".to_string(),
            n => format!("{n} host(s), {} rank(s)", self.ranks),
        };
        let _ = writeln!(
            out,
            "{}: {what}{versions}: {hosts}, {} row(s)",
            self.input,
            self.rows.len()
        );
        if let Some(largest) = self.rows.iter().max_by_key(|r| r.size_bytes) {
            let _ = writeln!(
                out,
                "  largest message {} bytes: busbw {:.2} GB/s out-of-place, {:.2} GB/s in-place",
                largest.size_bytes, largest.out_of_place.busbw_gbps, largest.in_place.busbw_gbps
            );
        }
        match self.avg_busbw_gbps {
            Some(avg) => {
                let _ = writeln!(out, "  avg bus bandwidth {avg} GB/s (footer)");
            }
            None => out.push_str("  no `# Avg bus bandwidth` footer\n"),
        }
        let unknown = if self.wrong_unknown {
            " (some rows not checked: N/A or an old `error` column)"
        } else {
            ""
        };
        let oob = self
            .out_of_bounds
            .map_or("not printed".to_string(), |n| n.to_string());
        let _ = writeln!(out, "  wrong {}{unknown}, out of bounds {oob}", self.wrong);
        if let Some(rate) = self.line_rate {
            let _ = writeln!(
                out,
                "  line rate {:.0} Gb/s per GPU = {:.2} GB/s: {}",
                rate.per_gpu_gbit_per_s,
                rate.per_gpu_gbyte_per_s(),
                rate.how
            );
        }
        for skipped in self.skipped_lines {
            let _ = writeln!(
                out,
                "  line {}: not a row: {}",
                skipped.line, skipped.reason
            );
        }
        if self.skipped_total > self.skipped_lines.len() {
            let _ = writeln!(
                out,
                "  ... {} more line(s) not rows",
                self.skipped_total - self.skipped_lines.len()
            );
        }
        let _ = writeln!(out, "verdict: {}", self.summary);
        match (self.expectation, self.not_judged_because) {
            (Some(e), _) => {
                let _ = writeln!(out, "  bandwidth: {}", e.how);
            }
            (None, Some(reason)) => {
                let _ = writeln!(out, "  bandwidth not judged: {reason}");
            }
            (None, None) => {}
        }
        for note in self.notes {
            let _ = writeln!(out, "  note: {note}");
        }
        out
    }
}

/// The reports of every run of one input. One run prints as before (its report is the whole
/// JSON document); several print one after the other, and in JSON as
/// `{"input", "exit_code", "runs": [...]}`. The exit code is the worst run's.
#[derive(Debug, Serialize)]
pub struct Runs<'a> {
    pub input: &'a str,
    pub exit_code: u8,
    pub runs: Vec<Report<'a>>,
}

impl<'a> Runs<'a> {
    pub fn new(input: &'a str, runs: Vec<Report<'a>>) -> Runs<'a> {
        let exit_code = runs.iter().map(|r| r.exit_code).max().unwrap_or(0);
        Runs {
            input,
            exit_code,
            runs,
        }
    }

    pub fn text(&self) -> String {
        let texts: Vec<String> = self.runs.iter().map(Report::text).collect();
        let mut out = texts.join("\n");
        if self.runs.len() > 1 {
            let _ = writeln!(
                out,
                "\n{}: {} runs, exit {} (the worst run's)",
                self.input,
                self.runs.len(),
                self.exit_code
            );
        }
        out
    }

    pub fn json(&self) -> Result<String, serde_json::Error> {
        match self.runs.as_slice() {
            [one] => serde_json::to_string_pretty(one),
            _ => serde_json::to_string_pretty(self),
        }
    }
}
