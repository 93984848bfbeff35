//! The InfiniBand fabric side: what a scan of a subnet found ([`model`]), the sources that scan
//! it ([`source`]: infiniband-diags tools on a host, or the simulated fabric of the demo).
//!
//! Switch ports become `rdma_ib_switch_port_*` metrics, links `rdma_ib_link_info`; the names are
//! in docs/metrics.md. A source fills a [`model::FabricScan`]; everything after it (metrics,
//! selection of switches, `ib-report` findings) reads only the model.

pub mod collector;
pub mod config;
pub mod counters;
pub mod detail;
pub mod diags;
pub mod encoded;
pub mod metrics;
pub mod model;
pub mod selection;
pub mod source;
