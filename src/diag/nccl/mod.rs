//! `rdma-fabric-exporter nccl FILE...`: reads NCCL_DEBUG=INFO logs and tells, per job and rank,
//! which network NCCL chose and whether it fell back to sockets. The same parser feeds the
//! optional `serve` collector of NCCL log directories.
//!
//! line.rs (record prefixes) -> event.rs (what a message says) -> process.rs (per host:pid)
//! -> verdict.rs (per job) -> report.rs (text, JSON); input.rs reads the arguments and
//! collector.rs serves processes as metrics.

pub mod collector;
pub mod event;
pub mod input;
pub mod line;
pub mod process;
pub mod report;
pub mod verdict;

use std::path::PathBuf;
use std::process::ExitCode;

pub use process::{Evidence, LogParser, ProcessLog};
pub use verdict::{jobs, Job, VerdictKind};

/// Exit codes: 0 no fallback, 1 a socket fallback (or a rank without network, or a failed
/// verbs call), 2 unreadable input, 3 no NCCL line in the input (a CI gate on an empty or
/// wrong file must not pass).
const EXIT_FALLBACK: u8 = 1;
const EXIT_INPUT: u8 = 2;
const EXIT_NO_NCCL_LINES: u8 = 3;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct NcclArgs {
    /// NCCL debug log files, directories (every file inside) or globs (`-` for standard input).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

/// Parses every input and judges the jobs found.
pub fn analyze(inputs: &[input::Input]) -> Vec<Job> {
    let mut parser = LogParser::new();
    for input in inputs {
        parser.feed(&input.name, &input.bytes);
    }
    jobs(&parser.finish())
}

/// Runs the command; the exit code says whether any rank fell back to sockets.
pub fn main(args: &NcclArgs) -> ExitCode {
    let inputs = match input::read_all(&args.files) {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let jobs = analyze(&inputs);
    let exit_code = if jobs.is_empty() {
        EXIT_NO_NCCL_LINES
    } else if jobs.iter().any(Job::failed) {
        EXIT_FALLBACK
    } else {
        0
    };
    let report = report::Report { jobs, exit_code };
    match args.output {
        OutputFormat::Text => print!("{}", report::text(&report)),
        OutputFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: encoding JSON: {e}");
                return ExitCode::from(EXIT_INPUT);
            }
        },
    }
    ExitCode::from(report.exit_code)
}
