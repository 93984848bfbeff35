//! Diagnostics for operators: `doctor` (can this host or pod use its RDMA devices?) and `nccl`
//! (did NCCL run over IB/RoCE or fall back to sockets?), `ecn-tune` (is the switch's ECN threshold
//! too high or too low, from Prometheus over an nccl-tests run?).

pub mod doctor;
pub mod ecn_tune;
pub mod nccl;
