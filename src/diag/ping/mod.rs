//! `rdma-fabric-exporter ping TARGET`: asks one path now, like `ib_send_lat`, through the agent
//! already running on this host (or any agent, or one of the demo's hosts): N probes from one
//! of its ports to a port of its peer set, the loss, and the network RTT and the responder's
//! delay apart. The agent's probe loop sends them (`/probe-ping`), so nothing here opens a
//! device or needs privilege.
//!
//! Exit status: 0 when the loss is within `--max-loss`, 1 above it (no answer at all says
//! so: a stopped agent or a dead path), 2 when the ping could not run (the agent unreachable,
//! the target unknown to it, probing off there).

pub mod summary;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::diag::ecn_tune::query::{form_encode, Client, Endpoint, QueryError};
use crate::diag::OutputFormat;
use crate::probe::ping::{self, Outcome, Report};

pub use summary::{Spread, Summary};

const EXIT_LOSS: u8 = 1;
const EXIT_COULD_NOT_PING: u8 = 2;

#[derive(Debug, Clone, clap::Args)]
pub struct PingArgs {
    /// The peer port to probe: HOST (its port on the local port's rail), HOST/DEVICE,
    /// HOST/DEVICE/PORT, or a GID as sysfs prints it.
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// The agent that sends the probes: its HTTP address, with a path prefix where it has one
    /// (the demo's hosts: http://127.0.0.1:9866/hosts/gpu-node-01).
    #[arg(long, value_name = "URL", default_value = concat!("http://127.0.0.1:", crate::default_port!()))]
    pub agent: String,
    /// The agent's port to probe from: DEVICE, DEVICE/PORT or a GID [default: the one on the
    /// target's rail].
    #[arg(long, value_name = "PORT")]
    pub from: Option<String>,
    /// Probes to send (at most 1000).
    #[arg(short = 'c', long, default_value_t = ping::DEFAULT_COUNT)]
    pub count: u32,
    /// Time between two probes (at least 10ms).
    #[arg(short = 'i', long, default_value = "100ms", value_parser = crate::yaml::parse_duration)]
    pub interval: Duration,
    /// One flow label (UDP source port) for every probe, to follow one ECMP path [default:
    /// rotate over the agent's probe.flow_labels].
    #[arg(long = "flow-label", value_name = "LABEL")]
    pub flow_label: Option<u32>,
    /// The target's QPN: only for a GID outside the agent's peer set, which the agent probes
    /// only with `probe.ping_unlisted: true`.
    #[arg(long, value_name = "QPN")]
    pub qpn: Option<u32>,
    /// The share of probes that may be lost with exit status 0, in percent.
    #[arg(long = "max-loss", value_name = "PERCENT", default_value_t = 0.0, value_parser = percent)]
    pub max_loss: f64,
    /// Only the summary, not a line per probe.
    #[arg(short, long)]
    pub quiet: bool,
    #[arg(long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

fn percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a percentage from 0 to 100")),
    }
}

pub fn main(args: &PingArgs) -> ExitCode {
    let report = match ask(args) {
        Ok(report) => report,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(EXIT_COULD_NOT_PING);
        }
    };
    let summary = Summary::of(&report.probes);
    match args.output {
        OutputFormat::Text => print!("{}", text(&report, &summary, args.quiet)),
        OutputFormat::Json => {
            let both = serde_json::json!({ "report": report, "summary": summary });
            println!("{both:#}");
        }
    }
    match verdict(&report, &summary, args.max_loss) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(EXIT_LOSS)
        }
    }
}

/// The agent's report, or why there is none.
fn ask(args: &PingArgs) -> Result<Report, String> {
    let endpoint = Endpoint::parse_flag("--agent", &args.agent).map_err(|e| e.to_string())?;
    // The agent answers once the last probe is answered or lost (its own wait is bounded).
    let timeout = args.interval.saturating_mul(args.count) + Duration::from_secs(30);
    let client = Client::new(endpoint, timeout)
        .map_err(|e| e.to_string())?
        .with_tool("ping");
    let mut path = format!(
        "{}?to={}&count={}&interval={}ms",
        ping::PATH,
        form_encode(&args.target),
        args.count,
        args.interval.as_millis()
    );
    for (key, value) in [
        ("from", args.from.clone()),
        ("flow_label", args.flow_label.map(|l| l.to_string())),
        ("qpn", args.qpn.map(|q| q.to_string())),
    ] {
        if let Some(value) = value {
            let _ = write!(path, "&{key}={}", form_encode(&value));
        }
    }
    let (status, body) = client
        .get_path(&path, "application/json")
        .map_err(|e| match e {
            QueryError::Unreachable { url, message } => format!(
                "cannot reach the agent at {url}: {message} (is rdma-fabric-exporter running \
                 there with --collector.probe?)"
            ),
            other => other.to_string(),
        })?;
    if status != 200 {
        let text = String::from_utf8_lossy(&body);
        return Err(format!(
            "the agent at {} refused: HTTP {status}: {}",
            client.url(),
            text.trim()
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| format!("{} answered no ping report: {e}", client.url()))
}

/// Exit 0, or the reason for exit 1.
fn verdict(report: &Report, summary: &Summary, max_loss: f64) -> Result<(), String> {
    let to = report.to.name();
    let to_address = format!("GID {}, QPN {}", report.to.gid, report.to.qpn);
    if summary.sent == 0 {
        let reasons: Vec<String> = reasons(report);
        return Err(format!(
            "no probe to {to} could be sent ({})",
            reasons.join(", ")
        ));
    }
    if summary.answered == 0 && summary.bad == 0 {
        return Err(format!(
            "no answer from {to} ({to_address}): all {} probes lost. Its agent may be stopped \
             or restarting (does {}'s /probe-address answer, with this QPN?), or the path is \
             down (rdma_probe_up and rdma_probe_lost_total on both hosts tell which)",
            summary.sent,
            if report.to.host.is_empty() {
                "the target"
            } else {
                &report.to.host
            }
        ));
    }
    let loss = summary.loss * 100.0;
    if loss > max_loss {
        return Err(format!(
            "{} of {} probes to {to} lost ({loss:.1} %), above --max-loss {max_loss} %",
            summary.lost, summary.sent
        ));
    }
    Ok(())
}

/// Why probes were not sent, with how many each.
fn reasons(report: &Report) -> Vec<String> {
    let mut counts = std::collections::BTreeMap::new();
    for probe in &report.probes {
        if let Outcome::NotSent { reason } = &probe.outcome {
            *counts.entry(reason.as_str()).or_insert(0) += 1;
        }
    }
    counts.iter().map(|(r, n)| format!("{r} x{n}")).collect()
}

/// Nanoseconds as µs below a millisecond, else ms.
fn duration(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

fn spread(name: &str, spread: Option<Spread>) -> String {
    match spread {
        Some(s) => format!(
            "{name}: min {}, p50 {}, p90 {}, p99 {}, max {}\n",
            duration(s.min),
            duration(s.p50),
            duration(s.p90),
            duration(s.p99),
            duration(s.max)
        ),
        None => format!("{name}: no answer\n"),
    }
}

/// The report as `ping` prints it.
pub fn text(report: &Report, summary: &Summary, quiet: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PING {} (GID {}, QPN {}) from {}: {} {} path, traffic class {}, {} probes every {}",
        report.to.name(),
        report.to.gid,
        report.to.qpn,
        report.from.name(),
        if report.listed { "peer" } else { "unlisted" },
        report.path,
        report.traffic_class,
        report.count,
        duration(report.interval_ns)
    );
    if !quiet {
        for probe in &report.probes {
            let what = match &probe.outcome {
                Outcome::Answered {
                    network_rtt_ns,
                    responder_delay_ns,
                } => format!(
                    "network RTT {}, responder delay {}",
                    duration(*network_rtt_ns),
                    duration(*responder_delay_ns)
                ),
                Outcome::Lost => format!("lost (no answer in {})", duration(report.timeout_ns)),
                Outcome::Bad { reason } => format!("answered with impossible times ({reason})"),
                Outcome::NotSent { reason } => format!("not sent ({reason})"),
            };
            let _ = writeln!(
                out,
                "probe {} flow label {}: {what}",
                probe.n, probe.flow_label
            );
        }
    }
    let _ = writeln!(out, "--- {} ---", report.to.name());
    let _ = write!(
        out,
        "{} sent, {} answered, {} lost, {:.1} % loss",
        summary.sent,
        summary.answered,
        summary.lost,
        summary.loss * 100.0
    );
    if summary.bad > 0 {
        let _ = write!(out, ", {} with impossible times", summary.bad);
    }
    if summary.not_sent > 0 {
        let _ = write!(
            out,
            ", {} not sent ({})",
            summary.not_sent,
            reasons(report).join(", ")
        );
    }
    out.push('\n');
    out.push_str(&spread("network RTT", summary.network_rtt_ns));
    out.push_str(&spread("responder delay", summary.responder_delay_ns));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ping::{PortView, ProbeResult};

    fn report(outcomes: Vec<Outcome>) -> Report {
        let port = |host: &str| PortView {
            host: host.into(),
            device: "mlx5_1".into(),
            port: 1,
            rail: 1,
            gid: "0000:0000:0000:0000:0000:ffff:0a01:0101".into(),
            qpn: 2,
        };
        Report {
            from: port("gpu-1"),
            to: port("gpu-2"),
            path: "rail".into(),
            listed: true,
            count: outcomes.len() as u32,
            interval_ns: 100_000_000,
            timeout_ns: 500_000_000,
            traffic_class: 104,
            probes: outcomes
                .into_iter()
                .zip(1..)
                .map(|(outcome, n)| ProbeResult {
                    n,
                    flow_label: n,
                    outcome,
                })
                .collect(),
        }
    }

    fn answered(us: u64) -> Outcome {
        Outcome::Answered {
            network_rtt_ns: us * 1_000,
            responder_delay_ns: 500,
        }
    }

    #[test]
    fn the_exit_status_follows_the_loss() {
        let healthy = report(vec![answered(12), answered(14)]);
        assert_eq!(
            verdict(&healthy, &Summary::of(&healthy.probes), 0.0),
            Ok(())
        );
        let text = text(&healthy, &Summary::of(&healthy.probes), false);
        assert!(
            text.contains("probe 2 flow label 2: network RTT 14.0 µs, responder delay 0.5 µs"),
            "{text}"
        );
        assert!(
            text.contains("2 sent, 2 answered, 0 lost, 0.0 % loss"),
            "{text}"
        );
        assert!(
            text.contains("network RTT: min 12.0 µs, p50 12.0 µs"),
            "{text}"
        );

        let some = report(vec![
            answered(12),
            Outcome::Lost,
            answered(12),
            answered(12),
        ]);
        let summary = Summary::of(&some.probes);
        let message = verdict(&some, &summary, 0.0).unwrap_err();
        assert!(
            message.contains("1 of 4 probes to gpu-2/mlx5_1 port 1 lost (25.0 %)"),
            "{message}"
        );
        assert_eq!(verdict(&some, &summary, 25.0), Ok(()));

        let dead = report(vec![Outcome::Lost, Outcome::Lost]);
        let message = verdict(&dead, &Summary::of(&dead.probes), 100.0).unwrap_err();
        assert!(
            message.starts_with("no answer from gpu-2/mlx5_1 port 1"),
            "{message}"
        );
        assert!(message.contains("agent may be stopped"), "{message}");

        let unsent = report(vec![Outcome::NotSent {
            reason: "address_pending".into(),
        }]);
        let message = verdict(&unsent, &Summary::of(&unsent.probes), 100.0).unwrap_err();
        assert!(message.contains("address_pending x1"), "{message}");
    }
}
