//! Body and properties: `rdma_fabric_exporter::fuzzing::gnmi_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_fabric_exporter::fuzzing::gnmi_json(data));
