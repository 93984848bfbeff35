//! `NCCL_PROTO=Simple` triage: compares runs restricted to the Simple protocol with runs on the
//! default protocols. Simple working where the default fails puts the fault on the advanced
//! path (GPUDirect RDMA, LL/LL128, driver/firmware compatibility); Simple failing too puts it
//! on RDMA connectivity itself (driver, subnet manager, PFC/ECN).
//!
//! A run is one FILE argument (a file, a directory of per-process files, a glob, `-`), parsed
//! on its own so that two runs never merge their processes. It is a Simple run when one of its
//! processes echoes an `NCCL_PROTO` that leaves only Simple (`proto.rs`), or when it was named
//! with `--simple` (a log at NCCL_DEBUG=WARN echoes no setting). It failed when one of its jobs
//! failed (`Job::failed`).

use serde::Serialize;

use super::process::{Evidence, LogParser};
use super::verdict::{jobs, Job};

/// Evidence lines quoted per run: enough to show what broke, short enough to read.
const MAX_RUN_EVIDENCE: usize = 6;
/// The version banner, printed at every NCCL_DEBUG level from VERSION up.
const BANNER: &[u8] = b"NCCL version ";

/// How a run was known to use only the Simple protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimpleBy {
    /// Its log echoes `NCCL_PROTO` (NCCL's `set by environment`, or a net plugin setting it).
    Setting,
    /// Named with `--simple`.
    Flag,
}

/// One run as the triage sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The FILE argument as given.
    pub name: String,
    /// Whether its log holds any NCCL line (a record or the version banner, all that
    /// NCCL_DEBUG=WARN prints for a run that works). A run without is left out of the
    /// comparison: an empty or wrong file must not pass for a run that works.
    pub nccl_lines: bool,
    /// The `NCCL_PROTO` value its log echoes, if any.
    pub proto: Option<String>,
    pub simple: bool,
    pub simple_by: Option<SimpleBy>,
    /// The line that set NCCL_PROTO (first process that echoed it).
    pub simple_evidence: Option<Evidence>,
    pub failed: bool,
    /// Whether it got onto IB/RoCE: a process chose it, or a verbs call or work completion
    /// failed. A run that failed without it fell back to sockets or chose no network.
    pub rdma: bool,
    /// The verdicts of its jobs, one line each.
    pub summary: Vec<String>,
    /// Lines that show the failure (when failed) or the network in use (when not).
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Conclusion {
    /// Simple works where the default protocols fail.
    AdvancedPath,
    /// A Simple run fails too (or alone).
    RdmaConnectivity,
    /// Only default runs, one failing on IB/RoCE: the comparison is still to be made.
    RerunWithSimple,
    /// The failing default runs never got onto IB/RoCE: NCCL_PROTO does not choose the
    /// transport, the fallback is the fault to fix first.
    NoRdmaPath,
    /// Simple runs that work and no failing default run to compare with.
    NothingToCompare,
}

impl Conclusion {
    pub fn message(self) -> &'static str {
        match self {
            Conclusion::AdvancedPath => {
                "advanced path at fault (GPUDirect RDMA, LL/LL128 protocols, driver/firmware compatibility): NCCL_PROTO=Simple works where the default protocols fail"
            }
            Conclusion::RdmaConnectivity => {
                "RDMA connectivity itself (driver, subnet manager, PFC/ECN): the run with NCCL_PROTO=Simple fails too"
            }
            Conclusion::RerunWithSimple => {
                "re-run with NCCL_PROTO=Simple and give both logs (name the Simple one with --simple if its log does not show NCCL_PROTO): Simple working points at the advanced path (GPUDirect RDMA, LL/LL128, driver/firmware), Simple failing at RDMA connectivity (driver, subnet manager, PFC/ECN)"
            }
            Conclusion::NoRdmaPath => {
                "no RDMA path to triage: the failing run never used IB/RoCE (socket fallback or no network, see its verdict); NCCL_PROTO does not choose the transport, fix the fallback first"
            }
            Conclusion::NothingToCompare => {
                "the run with NCCL_PROTO=Simple works; no failing default run to compare it with (a hang prints no error line: name that run's log too)"
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ProtoTriage {
    pub conclusion: Conclusion,
    pub message: &'static str,
    pub runs: Vec<Run>,
}

/// Judges one run from its inputs (name, bytes); `named_simple` for `--simple`.
pub fn run<'a>(
    name: &str,
    inputs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    named_simple: bool,
) -> Run {
    let mut parser = LogParser::new();
    let mut banner = false;
    for (source, bytes) in inputs {
        parser.feed(source, bytes);
        banner |= bytes.windows(BANNER.len()).any(|w| w == BANNER);
    }
    let processes = parser.finish();
    let setting = processes
        .iter()
        .find_map(|p| p.settings.get("NCCL_PROTO"))
        .cloned();
    let from_setting = setting
        .as_ref()
        .is_some_and(|(value, _)| super::proto::only_simple(value));
    let simple_by = if from_setting {
        Some(SimpleBy::Setting)
    } else if named_simple {
        Some(SimpleBy::Flag)
    } else {
        None
    };
    let jobs = jobs(&processes);
    let failed = jobs.iter().any(Job::failed);
    let rdma = jobs.iter().any(|job| {
        !job.failures.is_empty()
            || job
                .processes
                .iter()
                .any(|p| p.transport == super::verdict::Transport::Rdma)
    });
    let mut evidence: Vec<Evidence> = jobs
        .iter()
        .flat_map(|job| {
            if failed {
                failure_evidence(job)
            } else {
                network_evidence(job)
            }
        })
        .collect();
    evidence.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    evidence.dedup();
    evidence.truncate(MAX_RUN_EVIDENCE);
    let (proto, simple_evidence) = match setting {
        Some((value, line)) => (Some(value), from_setting.then_some(line)),
        None => (None, None),
    };
    Run {
        name: name.to_string(),
        nccl_lines: banner || !processes.is_empty(),
        proto,
        simple: simple_by.is_some(),
        simple_by,
        simple_evidence,
        failed,
        rdma,
        summary: jobs.iter().map(|job| job.summary.clone()).collect(),
        evidence,
    }
}

/// What made a failed job fail: failed calls, WARN lines, then the fallback's own lines.
fn failure_evidence(job: &Job) -> Vec<Evidence> {
    let mut lines: Vec<Evidence> = job.failures.iter().map(|f| f.evidence.clone()).collect();
    lines.extend(job.errors.iter().cloned());
    if job.verdict.is_failure() {
        lines.extend(
            job.processes
                .iter()
                .filter(|p| p.transport != super::verdict::Transport::Rdma)
                .flat_map(|p| p.evidence.iter().take(2).cloned()),
        );
    }
    lines
}

/// The line of the first process that shows its network: that the run got onto it.
fn network_evidence(job: &Job) -> Vec<Evidence> {
    job.processes
        .iter()
        .find_map(|p| p.evidence.first().cloned())
        .into_iter()
        .collect()
}

/// The triage over all runs; `None` when no run failed and none was a Simple run (nothing to
/// say, the report stays as it was).
pub fn triage(runs: Vec<Run>) -> Option<ProtoTriage> {
    let read = || runs.iter().filter(|r| r.nccl_lines);
    let simple_failed = read().any(|r| r.simple && r.failed);
    let simple_ok = read().any(|r| r.simple && !r.failed);
    let default_failed_on_rdma = read().any(|r| !r.simple && r.failed && r.rdma);
    let default_fell_back = read().any(|r| !r.simple && r.failed && !r.rdma);
    let conclusion = if simple_failed {
        Conclusion::RdmaConnectivity
    } else if simple_ok && default_failed_on_rdma {
        Conclusion::AdvancedPath
    } else if default_failed_on_rdma {
        Conclusion::RerunWithSimple
    } else if default_fell_back {
        Conclusion::NoRdmaPath
    } else if simple_ok {
        Conclusion::NothingToCompare
    } else {
        return None;
    };
    Some(ProtoTriage {
        conclusion,
        message: conclusion.message(),
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const IB_OK: &str =
        "h1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>\n\
        h1:10:10 [0] NCCL INFO Using network IB\n\
        h1:10:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n";
    const IB_FAILS: &str = "h1:10:10 [0] NCCL INFO Using network IB\n\
        h1:10:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n\
        h1:10:13 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4242> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n";
    const SIMPLE: &str = "h1:20:20 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n";

    fn one(name: &str, text: &str, named_simple: bool) -> Run {
        run(name, [(name, text.as_bytes())], named_simple)
    }

    #[test]
    fn a_run_is_simple_by_its_setting_or_the_flag() {
        let by_setting = one("s.log", &format!("{SIMPLE}{IB_OK}"), false);
        assert_eq!(by_setting.simple_by, Some(SimpleBy::Setting));
        assert_eq!(by_setting.proto.as_deref(), Some("Simple"));
        assert_eq!(by_setting.simple_evidence.as_ref().map(|e| e.line), Some(1));
        let by_flag = one("w.log", IB_OK, true);
        assert_eq!(by_flag.simple_by, Some(SimpleBy::Flag));
        let default = one("d.log", IB_OK, false);
        assert!(!default.simple && default.proto.is_none());
        // NCCL_PROTO set to something else is a default run for the triage.
        let ll = one(
            "ll.log",
            "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL128\n",
            false,
        );
        assert!(!ll.simple);
        assert_eq!(ll.proto.as_deref(), Some("LL128"));
    }

    #[test]
    fn a_failed_run_quotes_the_failure() {
        let failed = one("d.log", IB_FAILS, false);
        assert!(failed.failed);
        assert_eq!(failed.evidence.len(), 1);
        assert_eq!(failed.evidence[0].line, 3);
        assert!(failed.evidence[0].text.contains("Got completion"));
        let ok = one("s.log", IB_OK, false);
        assert!(!ok.failed);
        assert!(
            ok.evidence[0].text.contains("NET/IB : Using"),
            "{:?}",
            ok.evidence
        );
    }

    #[test]
    fn the_rule() {
        let conclusion = |runs: Vec<Run>| triage(runs).map(|t| t.conclusion);
        assert_eq!(
            conclusion(vec![one("d", IB_FAILS, false), one("s", IB_OK, true)]),
            Some(Conclusion::AdvancedPath)
        );
        assert_eq!(
            conclusion(vec![one("d", IB_FAILS, false), one("s", IB_FAILS, true)]),
            Some(Conclusion::RdmaConnectivity)
        );
        assert_eq!(
            conclusion(vec![one("s", IB_FAILS, true)]),
            Some(Conclusion::RdmaConnectivity)
        );
        assert_eq!(
            conclusion(vec![one("d", IB_FAILS, false)]),
            Some(Conclusion::RerunWithSimple)
        );
        assert_eq!(
            conclusion(vec![one("s", IB_OK, true)]),
            Some(Conclusion::NothingToCompare)
        );
        assert_eq!(
            conclusion(vec![one("d", IB_OK, false), one("s", IB_OK, true)]),
            Some(Conclusion::NothingToCompare)
        );
        assert_eq!(conclusion(vec![one("d", IB_OK, false)]), None);
        // NCCL_DEBUG=WARN prints only the banner for a run that works; a file without any
        // NCCL line is no run that works.
        let warn_level = "NCCL version 2.21.5+cuda12.4\n";
        assert_eq!(
            conclusion(vec![one("d", IB_FAILS, false), one("s", warn_level, true)]),
            Some(Conclusion::AdvancedPath)
        );
        assert_eq!(
            conclusion(vec![
                one("d", IB_FAILS, false),
                one("s", "Epoch 1 loss 0.3\n", true)
            ]),
            Some(Conclusion::RerunWithSimple)
        );
        // Sockets: the Simple comparison has no RDMA path to judge, even beside a Simple run.
        let socket = "h:1:1 [0] NCCL INFO NET/IB : No device found.\n\
            h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n\
            h:1:1 [0] NCCL INFO Using network Socket\n";
        assert_eq!(
            conclusion(vec![one("d", socket, false)]),
            Some(Conclusion::NoRdmaPath)
        );
        assert_eq!(
            conclusion(vec![one("d", socket, false), one("s", IB_OK, true)]),
            Some(Conclusion::NoRdmaPath)
        );
        // A Simple run that falls back fails too: IB does not even start.
        assert_eq!(
            conclusion(vec![one("d", IB_FAILS, false), one("s", socket, true)]),
            Some(Conclusion::RdmaConnectivity)
        );
        assert_eq!(conclusion(Vec::new()), None);
    }
}
