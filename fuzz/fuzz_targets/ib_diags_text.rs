//! Body and properties: `rdma_fabric_exporter::fuzzing::ib_diags_text`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_fabric_exporter::fuzzing::ib_diags_text(data));
