//! Diagnostics for operators: `doctor` (can this host or pod use its RDMA devices?), `nccl`
//! (did NCCL run over IB/RoCE or fall back to sockets?), `nccl-tests` (did a benchmark run
//! reach the NIC line rate without data errors?), `ecn-tune` (is the switch's ECN threshold
//! too high or too low, from Prometheus over an nccl-tests run?), `ib-report` (degraded
//! links, error ports and congestion in saved infiniband-diags outputs) and `ping` (one path
//! now, through the running agent's probe loop).

pub mod doctor;
pub mod ecn_tune;
pub mod hw_counters;
pub mod ib_report;
pub mod nccl_tests;
pub mod ping;

/// `--output` of every diagnostic: a report for people, or the same report as JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}
