//! Simulated RDMA hardware: sysfs fixture trees and driver statistics for tests and benchmarks.

pub mod sysfs_tree;
