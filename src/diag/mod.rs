//! Diagnostics for operators: `doctor` (can this host or pod use its RDMA devices?), `nccl`
//! (did NCCL run over IB/RoCE or fall back to sockets?) and `nccl-tests` (did a benchmark run
//! reach the NIC line rate without data errors?).

pub mod doctor;
pub mod nccl;
pub mod nccl_tests;
