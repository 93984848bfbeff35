//! `rdma-fabric-exporter nccl FILE...`: reads NCCL_DEBUG=INFO logs and tells, per job and rank,
//! which network NCCL chose and whether it fell back to sockets. The same parser feeds the
//! optional `serve` collector of NCCL log directories.
//!
//! line.rs (record prefixes) -> event.rs (what a message says) -> process.rs (per host:pid)
//! -> verdict.rs (per job) -> report.rs (text, JSON); input.rs reads the arguments and
//! collector.rs serves processes as metrics. triage.rs compares runs with and without
//! `NCCL_PROTO=Simple` (proto.rs reads the value). stall.rs (nccl-tests without a result) and
//! hang.rs (a silence after init in the timestamps, PyTorch's watchdog) find runs that made
//! no progress after init.

pub mod collector;
pub mod event;
pub mod hang;
pub mod input;
pub mod line;
pub mod process;
pub mod proto;
pub mod report;
pub mod stall;
pub mod timestamp;
pub mod triage;
pub mod verdict;
pub mod watchdog;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub use process::{Evidence, LogParser, ProcessLog};
pub use verdict::{jobs, Job, VerdictKind};

/// Exit codes: 0 no fallback, 1 a failed run (a socket fallback, a rank without network, a
/// failed verbs call or work completion, an NCCL WARN error, a benchmark with no result after
/// init, a hang: a silence after init or PyTorch's watchdog), 2 unreadable input, 3 no NCCL
/// line in the input (a CI gate on an empty or wrong file must not pass) and no hang: a
/// watchdog timeout in a log without NCCL_DEBUG lines is still a failed run. The Simple triage
/// adds no code of its own: it explains a 1.
const EXIT_FALLBACK: u8 = 1;
const EXIT_INPUT: u8 = 2;
const EXIT_NO_NCCL_LINES: u8 = 3;

use crate::diag::OutputFormat;

#[derive(Debug, Clone, clap::Args)]
pub struct NcclArgs {
    /// NCCL debug log files, directories (every file inside) or globs (`-` for standard input).
    /// Each argument is one run for the NCCL_PROTO=Simple triage.
    #[arg(value_name = "FILE", required_unless_present = "simple")]
    pub files: Vec<PathBuf>,
    /// A run made with NCCL_PROTO=Simple whose log does not show it (NCCL_DEBUG=WARN echoes no
    /// setting): compared with the FILE runs. Repeatable.
    #[arg(long = "simple", value_name = "FILE")]
    pub simple: Vec<PathBuf>,
    /// A silence longer than this after NCCL's init completed, between two adjacent lines
    /// that both carry a timestamp (NCCL's own or a wrapper's), is a hang (exit 1).
    #[arg(long = "hang-threshold", value_name = "DURATION", default_value = "5m", value_parser = crate::yaml::parse_duration)]
    pub hang_threshold: Duration,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

/// One FILE argument's inputs, and whether it was named with `--simple`.
struct RunInputs {
    name: String,
    inputs: Vec<input::Input>,
    named_simple: bool,
}

fn read_runs(args: &NcclArgs) -> Result<Vec<RunInputs>, input::InputError> {
    let named = args
        .files
        .iter()
        .map(|path| (path, false))
        .chain(args.simple.iter().map(|path| (path, true)));
    let mut runs = Vec::new();
    for (path, named_simple) in named {
        runs.push(RunInputs {
            name: path.display().to_string(),
            inputs: input::read_all(std::slice::from_ref(path))?,
            named_simple,
        });
    }
    Ok(runs)
}

/// Runs the command; the exit code says whether any run failed (see the EXIT_ constants).
pub fn main(args: &NcclArgs) -> ExitCode {
    let runs = match read_runs(args) {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    // The jobs read all input together, as one job may span several files; the triage reads
    // each run on its own.
    let mut parser = LogParser::new();
    for input in runs.iter().flat_map(|run| &run.inputs) {
        parser.feed(&input.name, &input.bytes);
    }
    let jobs = jobs(&parser.finish());
    let mut stalls: Vec<stall::Stall> = Vec::new();
    let mut hangs: Vec<hang::Hang> = Vec::new();
    for input in runs.iter().flat_map(|run| &run.inputs) {
        let text = String::from_utf8_lossy(&input.bytes);
        stalls.extend(stall::stalls(&input.name, &text));
        hangs.extend(hang::hangs(&input.name, &text, args.hang_threshold));
    }
    let proto_triage = triage::triage(
        runs.iter()
            .map(|run| {
                let inputs = run
                    .inputs
                    .iter()
                    .map(|i| (i.name.as_str(), i.bytes.as_slice()));
                triage::run(&run.name, inputs, run.named_simple)
            })
            .collect(),
    );
    let run_failed = proto_triage
        .as_ref()
        .is_some_and(|t| t.runs.iter().any(|r| r.failed));
    let exit_code = if !hangs.is_empty() {
        EXIT_FALLBACK
    } else if jobs.is_empty() {
        EXIT_NO_NCCL_LINES
    } else if run_failed || !stalls.is_empty() || jobs.iter().any(Job::failed) {
        EXIT_FALLBACK
    } else {
        0
    };
    let report = report::Report {
        jobs,
        stalls,
        hangs,
        proto_triage,
        exit_code,
    };
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
