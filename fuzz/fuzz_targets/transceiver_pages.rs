//! Body and properties: `rdma_fabric_exporter::fuzzing::transceiver_pages`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_fabric_exporter::fuzzing::transceiver_pages(data));
