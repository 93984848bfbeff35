//! Any bytes through the NCCL log parser and the verdicts: must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_fabric_exporter::diag::nccl::{jobs, LogParser};

fuzz_target!(|data: &[u8]| {
    let mut parser = LogParser::new();
    parser.feed("fuzz", data);
    let _ = jobs(&parser.finish());
});
