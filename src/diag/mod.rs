//! Diagnostics for operators: `doctor` (can this host or pod use its RDMA devices?) and `nccl`
//! (did NCCL run over IB/RoCE or fall back to sockets?).

pub mod doctor;
pub mod nccl;
