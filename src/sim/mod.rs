//! Simulated RDMA hardware: sysfs fixture trees and driver statistics for tests and benchmarks,
//! a whole simulated fabric (hosts, NICs, leaf switches, scenarios) for `demo`, and a kubelet's
//! pod-resources API.

pub mod demo;
pub mod demo_page;
pub mod ecn_tree;
pub mod fabric;
pub mod fec;
pub mod ib_fabric;
pub mod optics;
pub mod pcie_tree;
pub mod pod_resources_server;
pub mod probing;
pub mod scenario;
pub mod snmp_agent;
pub mod switch_mib;
pub mod sysfs_tree;
pub mod workload;
