//! Why a poll of a switch failed, shared by SNMP, gNMI and the poller.

/// Why a poll failed, as the `reason` label of the switch error metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct PollError {
    pub reason: &'static str,
    pub detail: String,
}
