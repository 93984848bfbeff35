//! rdma-fabric-exporter: Prometheus metrics for RoCE/InfiniBand fabric health.
//!
//! The binary (`main.rs`) is thin; everything lives here so tests and benches use the same code.

pub mod app;
pub mod bounded_get;
pub mod bounded_read;
pub mod cli;
pub mod collector;
pub mod config;
/// The corpus harness the integration tests use too: samples apart from expectations.
#[cfg(test)]
#[path = "../tests/common/corpus.rs"]
mod corpus;
pub mod diag;
pub mod direction;
pub mod exposition;
pub mod fd_limit;
#[doc(hidden)]
pub mod fuzzing;
/// What `build.rs` watches for a new git revision (tested here: build scripts have no tests).
#[cfg(test)]
#[path = "../build/git_watch.rs"]
mod git_watch;
pub mod host;
pub mod ib;
#[cfg(test)]
mod layering;
pub mod localizer;
#[cfg(test)]
mod metric_docs;
pub mod nccl;
pub mod node;
pub mod periodic;
pub mod pods;
pub mod probe;
pub mod process_metrics;
pub mod prom_query;
pub mod reload;
pub mod server;
pub mod sim;
pub mod switch;
#[cfg(test)]
mod testutil;
pub mod web;
pub mod yaml;

/// Version and build facts for `rdma_exporter_build_info`.
pub mod build {
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    pub const REVISION: &str = env!("RFE_GIT_REVISION");
    pub const RUSTC: &str = env!("RFE_RUSTC_VERSION");
}
