//! Body and properties: `rdma_fabric_exporter::fuzzing::rdma_netlink`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_fabric_exporter::fuzzing::rdma_netlink(data));
