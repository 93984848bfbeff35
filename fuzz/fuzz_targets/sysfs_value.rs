//! Body and properties: `rdma_fabric_exporter::fuzzing::sysfs_value`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_fabric_exporter::fuzzing::sysfs_value(data));
