//! `rdma-fabric-exporter ecn-tune`: the reading half of the ECN tuning loop. Given Prometheus
//! and the window of an nccl-tests run, it reads the exporter's recording rules and says, for
//! every NIC and switch port, whether the ECN marking threshold is too high (PFC pauses while
//! ECN stays silent: lower Kmin/Kmax), too low (no PFC, many CNPs, throughput far below line
//! rate: raise them), healthy, or that there was too little traffic to tell; with the evidence.
//! `--buffer-bytes` and `--ports` add the rule of thumb for the thresholds to start from.
//!
//! window.rs, nccl_window.rs (the window) -> query.rs (Prometheus' API) -> evidence.rs (rules
//! to rows) -> classify.rs (the verdicts) -> report.rs; thresholds.rs the starting values.

pub mod classify;
pub mod evidence;
pub mod nccl_window;
pub mod nic_settings;
pub use crate::prom_query as query;
pub mod report;
pub mod thresholds;
pub mod window;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use evidence::{Ask, Evidence, Source};

/// Exit codes: 0 nothing misconfigured (healthy, idle or unclear ports), 1 an ECN threshold
/// too high or too low somewhere, 2 could not tell (Prometheus unreachable or without the
/// series, bad arguments).
const EXIT_MISCONFIGURED: u8 = 1;
const EXIT_COULD_NOT_QUERY: u8 = 2;

use super::OutputFormat;

#[derive(Debug, Clone, clap::Args)]
pub struct EcnTuneArgs {
    /// Prometheus that scrapes the exporters and evaluates alerts/rdma-rules.yml
    /// (http://host:9090; user:password@ for basic auth).
    #[arg(long, value_name = "URL", required_unless_present = "buffer_bytes")]
    pub prometheus: Option<String>,
    /// The window: the last DURATION (e.g. 10m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = crate::yaml::parse_duration, conflicts_with_all = ["start", "nccl_tests"])]
    pub last: Option<Duration>,
    /// The window's start: RFC 3339 (2025-10-14T12:00:00Z) or Unix seconds.
    #[arg(long, value_name = "TIME", conflicts_with = "nccl_tests")]
    pub start: Option<String>,
    /// The window's end [default: now].
    #[arg(long, value_name = "TIME", requires = "start")]
    pub end: Option<String>,
    /// The window from an nccl-tests output run with -S 1 (timestamped rows) or its -J JSON
    /// report (`-` for standard input); its times are local time (set TZ if it ran elsewhere).
    #[arg(long = "nccl-tests", value_name = "FILE")]
    pub nccl_tests: Option<PathBuf>,
    /// Label matchers every query gets, e.g. '{cluster="a",instance=~"gpu-0.*"}'.
    #[arg(long, value_name = "MATCHERS")]
    pub selector: Option<String>,
    /// The run's bus bandwidth in GB/s (nccl-tests' busbw), compared with the NIC line rate.
    #[arg(long, value_name = "GBPS", value_parser = positive)]
    pub busbw: Option<f64>,
    /// Line rate in Gb/s: of switch ports whose LLDP neighbour is unknown, and for the rule of
    /// thumb [default: the fastest NIC in Prometheus].
    #[arg(long = "line-rate", value_name = "GBPS", value_parser = positive)]
    pub line_rate: Option<f64>,
    /// Rule of thumb: the switch buffer available to lossless traffic (64MB, 32MiB, bytes).
    #[arg(long = "buffer-bytes", value_name = "SIZE", value_parser = thresholds::parse_bytes, requires = "ports")]
    pub buffer_bytes: Option<u64>,
    /// Rule of thumb: ports carrying lossless traffic.
    #[arg(long, value_name = "N", requires = "buffer_bytes", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub ports: Option<u32>,
    /// Rule of thumb: PFC-enabled priorities per port.
    #[arg(long = "lossless-priorities", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub lossless_priorities: u32,
    /// Rule of thumb: the largest frame on the wire, bytes.
    #[arg(long, default_value_t = 4200, value_parser = clap::value_parser!(u32).range(64..=16384))]
    pub mtu: u32,
    /// Rule of thumb: the longest cable to a neighbour, metres.
    #[arg(long = "cable-metres", default_value_t = 100.0, value_parser = non_negative)]
    pub cable_metres: f64,
    /// Deadline of each query.
    #[arg(long, default_value = "30s", value_parser = crate::yaml::parse_duration)]
    pub timeout: Duration,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..1e6).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a length in metres")),
    }
}

/// Why no report could be made (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum EcnTuneError {
    #[error("give the window: --last DURATION, --start TIME [--end TIME], or --nccl-tests FILE")]
    NoWindow,
    #[error(transparent)]
    Window(#[from] window::WindowError),
    #[error(transparent)]
    NcclWindow(#[from] nccl_window::NcclWindowError),
    #[error("{0}")]
    Selector(String),
    #[error(transparent)]
    Query(#[from] query::QueryError),
    #[error(transparent)]
    Thresholds(#[from] thresholds::ThresholdError),
    #[error("no series of the exporter's recording rules in {url} for {window}{selector}: {why}")]
    NoSeries {
        url: String,
        window: String,
        selector: String,
        why: String,
    },
    #[error("the rule of thumb needs a line rate: give --line-rate (or --prometheus, whose fastest NIC it takes)")]
    NoLineRate,
}

fn window_of(args: &EcnTuneArgs, now: f64) -> Result<window::Window, EcnTuneError> {
    let w = if let Some(last) = args.last {
        window::last(last, now)
    } else if let Some(start) = &args.start {
        let start_unix = window::parse_time("--start", start)?;
        let end_unix = match &args.end {
            Some(end) => window::parse_time("--end", end)?,
            None => now,
        };
        window::Window {
            start: start_unix,
            end: end_unix,
            source: "--start/--end".into(),
        }
    } else if let Some(path) = &args.nccl_tests {
        nccl_window::read(path)?
    } else {
        return Err(EcnTuneError::NoWindow);
    };
    Ok(w.checked(now)?)
}

/// Why the window holds nothing: the exporter's raw series present (rules not loaded) or not.
fn no_series(source: &dyn Source, w: &window::Window, matchers: &str, url: &str) -> EcnTuneError {
    let raw = format!(
        "count(last_over_time(rdma_port_xmit_data_bytes_total{}[{}]))",
        evidence::selector("", matchers),
        w.range()
    );
    let why = match source.query(&raw, w.end) {
        Ok(v) if v.iter().any(|s| s.value.is_some_and(|c| c > 0.0)) => {
            "the exporter's metrics are there but not its recording rules: load alerts/rdma-rules.yml into this Prometheus (rule_files)".to_string()
        }
        Ok(_) => "not even the exporter's own metrics (rdma_port_xmit_data_bytes_total): is the exporter scraped by this Prometheus, in this window, and does the selector match?".to_string(),
        Err(e) => e.to_string(),
    };
    EcnTuneError::NoSeries {
        url: url.to_string(),
        window: format!("{} .. {}", window::rfc3339(w.start), window::rfc3339(w.end)),
        selector: if matchers.is_empty() {
            String::new()
        } else {
            format!(" matching {{{matchers}}}")
        },
        why,
    }
}

/// The report, or why none could be made.
pub fn report(args: &EcnTuneArgs) -> Result<report::Report, EcnTuneError> {
    let now = window::now();
    let mut evidence: Option<Evidence> = None;
    let mut prometheus = None;
    let mut window_report = None;
    if let Some(url) = &args.prometheus {
        let w = window_of(args, now)?;
        let matchers = match &args.selector {
            Some(s) => evidence::user_matchers(s).map_err(EcnTuneError::Selector)?,
            None => String::new(),
        };
        let client = query::Client::new(query::Endpoint::parse(url)?, args.timeout)?;
        let ask = Ask {
            window: &w,
            matchers: &matchers,
            line_rate_gbps: args.line_rate,
        };
        let gathered = evidence::gather(&client, &ask)?;
        if gathered.rule_series == 0 {
            return Err(no_series(&client, &w, &matchers, client.url()));
        }
        prometheus = Some(client.url().to_string());
        window_report = Some(report::WindowReport::from(&w));
        evidence = Some(gathered);
    }
    let line_rate = args
        .line_rate
        .or_else(|| evidence.as_ref().and_then(|e| e.fastest_nic_gbps));
    let starting_thresholds = match (args.buffer_bytes, args.ports) {
        (Some(buffer_bytes), Some(ports)) => {
            let line_rate_gbps = line_rate.ok_or(EcnTuneError::NoLineRate)?;
            Some(thresholds::suggest(thresholds::Inputs {
                buffer_bytes,
                ports,
                lossless_priorities: args.lossless_priorities,
                line_rate_gbps,
                mtu_bytes: args.mtu,
                cable_metres: args.cable_metres,
            })?)
        }
        _ => None,
    };
    let busbw = args
        .busbw
        .map(|b| report::busbw(b, line_rate, evidence.as_ref()));
    let Evidence {
        nics,
        switch_ports,
        notes,
        ..
    } = evidence.unwrap_or_default();
    let misconfigured = nics.iter().any(|n| n.verdict.class.is_misconfiguration())
        || switch_ports
            .iter()
            .any(|p| p.verdict.class.is_misconfiguration());
    Ok(report::Report {
        prometheus,
        window: window_report,
        thresholds: report::THRESHOLDS,
        summary: report::summary(&nics, &switch_ports),
        nics,
        switch_ports,
        notes,
        busbw,
        starting_thresholds,
        exit_code: if misconfigured { EXIT_MISCONFIGURED } else { 0 },
    })
}

/// Runs the command; the exit code says whether a threshold is misconfigured.
pub fn main(args: &EcnTuneArgs) -> ExitCode {
    let report = match report(args) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_COULD_NOT_QUERY);
        }
    };
    match args.output {
        OutputFormat::Text => print!("{}", report::text(&report)),
        OutputFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: encoding JSON: {e}");
                return ExitCode::from(EXIT_COULD_NOT_QUERY);
            }
        },
    }
    ExitCode::from(report.exit_code)
}
