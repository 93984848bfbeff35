//! `rdma-fabric-exporter ib-report FILE...`: reads saved outputs of `ibnetdiscover`,
//! `iblinkinfo`, `perfquery` and `ibqueryerrors` (as support bundles hold them), tells each
//! file's tool from its content, merges them (topology from the first two, counters from the
//! others) and reports degraded links, ports with errors and congested ports, naming both ends.
//!
//! Exit codes: 0 nothing found, 1 findings, 2 a file could not be read, 3 a file is not the
//! output of any of the four tools (a gate on an empty or wrong file must not pass).

pub mod findings;
pub mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::diag::OutputFormat;
use crate::ib::diags::detect::{parse_any, Parsed};
use crate::ib::diags::merge::merge;

pub(crate) const EXIT_FINDINGS: u8 = 1;
pub(crate) const EXIT_UNREADABLE: u8 = 2;
pub(crate) const EXIT_NOT_DIAGS: u8 = 3;

#[derive(Debug, Clone, clap::Args)]
pub struct IbReportArgs {
    /// Saved outputs of ibnetdiscover, iblinkinfo, perfquery, ibqueryerrors (`-` for standard
    /// input), in any order.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// A port is congested when its PortXmitWait ticks per transmitted 4-octet word
    /// (PortXmitData) reach this.
    #[arg(long = "congestion-ratio", default_value_t = 0.01, value_parser = positive)]
    pub congestion_ratio: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a ratio above 0 (e.g. 0.01)")),
    }
}

/// One input: its name and what was in it.
pub struct Input {
    pub name: String,
    pub parsed: Parsed,
}

pub fn main(args: &IbReportArgs) -> ExitCode {
    let mut inputs = Vec::new();
    for path in &args.files {
        // The same bounded, non-blocking read as nccl-tests (64 MiB, FIFOs refused).
        let (name, bytes) = match crate::diag::nccl_tests::read_input(path) {
            Ok(input) => input,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_UNREADABLE);
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        match parse_any(&text) {
            Ok(parsed) => inputs.push(Input { name, parsed }),
            Err(e) => {
                eprintln!("error: {name}: {e}");
                return ExitCode::from(EXIT_NOT_DIAGS);
            }
        }
    }
    let parts: Vec<Parsed> = inputs.iter().map(|i| i.parsed.clone()).collect();
    let merged = merge(&parts);
    let found = findings::find(&merged, args.congestion_ratio);
    let report = report::Report::new(&inputs, &merged, found);
    let out = match args.output {
        OutputFormat::Text => report.text(),
        OutputFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(e) => {
                eprintln!("error: encoding JSON: {e}");
                return ExitCode::from(EXIT_UNREADABLE);
            }
        },
    };
    // A closed pipe (`... | head`) is the reader's choice, not a failure to report.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    ExitCode::from(report.exit_code)
}
