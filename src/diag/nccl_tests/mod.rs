//! `rdma-fabric-exporter nccl-tests FILE|-`: reads the output of one nccl-tests run (any binary,
//! any version, rccl-tests too), finds data errors and a run that did not finish, and judges the
//! bus bandwidth of its largest messages against the NIC line rate each GPU has.
//!
//! parse.rs (text -> `Run`) -> line_rate.rs (`--line-rate` or this host's RDMA ports) ->
//! verdict.rs (`Judgement`) -> report.rs (text, JSON).

pub mod line_rate;
pub mod parse;
pub mod report;
pub mod verdict;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::diag::OutputFormat;

pub use line_rate::LineRate;
pub use parse::{parse, parse_runs, ParseError, Run};
pub use verdict::{judge, Judgement, Verdict};

/// Exit codes: 0 healthy or not judged, 1 below expectation, data errors or an unfinished run
/// (verdict.rs), 2 unreadable input, 3 no nccl-tests output in it (as `nccl` exits 3 for no
/// NCCL line: a CI gate on an empty or wrong file must not pass).
const EXIT_UNREADABLE: u8 = 2;
const EXIT_NOT_NCCL_TESTS: u8 = 3;

/// Larger inputs are refused: a run with NCCL_DEBUG=INFO of a large job stays far below it.
pub(crate) const MAX_INPUT_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, clap::Args)]
pub struct NcclTestsArgs {
    /// The output of one nccl-tests run (`-` for standard input).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// NIC bandwidth per GPU in Gb/s (e.g. 400; 2 x 200G NICs per GPU: 400). Default: this
    /// host's active RDMA ports (the fastest ones) shared among the run's GPUs per node.
    #[arg(long = "line-rate", value_name = "GBPS", value_parser = positive_rate)]
    pub line_rate: Option<f64>,
    /// Healthy when the largest messages' busbw is at least this fraction of the line rate.
    #[arg(long = "min-fraction", default_value_t = 0.8, value_parser = fraction)]
    pub min_fraction: f64,
    /// sysfs mount point, read for the line rate without --line-rate (a fixture tree in tests).
    #[arg(long = "path.sysfs", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a rate in Gb/s above 0 (e.g. 400)")),
    }
}

fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{text:?} is not a fraction in (0, 1] (e.g. 0.8)")),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{name}: {source}")]
    Read {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// The input's name for the report and its bytes, bounded by `MAX_INPUT_BYTES`.
pub(crate) fn read_input(path: &Path) -> Result<(String, Vec<u8>), InputError> {
    if path.as_os_str() == "-" {
        let name = "<stdin>".to_string();
        let mut bytes = Vec::new();
        let read = std::io::stdin()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes);
        return match read {
            Ok(_) if bytes.len() as u64 > MAX_INPUT_BYTES => Err(InputError::Read {
                name,
                source: too_large(),
            }),
            Ok(_) => Ok((name, bytes)),
            Err(source) => Err(InputError::Read { name, source }),
        };
    }
    let name = path.display().to_string();
    crate::bounded_read::read(path, MAX_INPUT_BYTES)
        .map(|bytes| (name.clone(), bytes))
        .map_err(|source| InputError::Read { name, source })
}

fn too_large() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("larger than {MAX_INPUT_BYTES} bytes"),
    )
}

/// The line rate to judge against: the flag, else this host's ports.
pub fn line_rate(args: &NcclTestsArgs, run: &Run) -> Option<LineRate> {
    match args.line_rate {
        Some(gbps) => Some(LineRate::from_flag(gbps)),
        None => line_rate::from_sysfs(&args.sysfs, run.ranks_per_host()),
    }
}

/// Runs the command; see the exit codes above.
pub fn main(args: &NcclTestsArgs) -> ExitCode {
    let (name, bytes) = match read_input(&args.file) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_UNREADABLE);
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let runs = match parse_runs(&text) {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("error: {name}: {e}");
            return ExitCode::from(match e {
                ParseError::NotNcclTests => EXIT_NOT_NCCL_TESTS,
                ParseError::SeveralRuns { .. } => EXIT_UNREADABLE,
            });
        }
    };
    // Each run is judged on its own, under its own name when the input holds several.
    let names: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, (line, _))| match runs.len() {
            1 => name.clone(),
            n => format!("{name}, run {} of {n} (line {line})", i + 1),
        })
        .collect();
    let judged: Vec<(Option<LineRate>, Judgement)> = runs
        .iter()
        .map(|(_, run)| {
            let rate = line_rate(args, run);
            let judgement = judge(run, rate.as_ref(), args.min_fraction);
            (rate, judgement)
        })
        .collect();
    let reports: Vec<report::Report> = runs
        .iter()
        .zip(&judged)
        .zip(&names)
        .map(|(((_, run), (rate, judgement)), name)| {
            report::Report::new(name, run, rate.as_ref(), judgement)
        })
        .collect();
    let several = report::Runs::new(&name, reports);
    let encoded = match args.output {
        OutputFormat::Text => Ok(several.text()),
        OutputFormat::Json => several.json().map(|json| json + "\n"),
    };
    let out = match encoded {
        Ok(out) => out,
        Err(e) => {
            eprintln!("error: encoding JSON: {e}");
            return ExitCode::from(EXIT_UNREADABLE);
        }
    };
    // A closed pipe (`... | head`) is the reader's choice, not a failure to report.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    ExitCode::from(several.exit_code)
}
