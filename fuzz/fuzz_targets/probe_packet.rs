//! Body and properties: `rdma_fabric_exporter::fuzzing::probe_packet`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_fabric_exporter::fuzzing::probe_packet(data));
