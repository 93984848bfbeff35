//! Why a poll of a switch failed, shared by SNMP, gNMI and the poller.

use std::fmt;

/// Why a poll failed, as the `reason` label of the switch error metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct PollError {
    pub reason: PollErrorReason,
    pub detail: String,
}

/// The `reason` label of `rdma_switch_poll_errors_total`: a closed vocabulary, each value
/// listed in docs/metrics.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PollErrorReason {
    /// The switch refused our credentials (SNMPv3 USM, gNMI Unauthenticated/PermissionDenied).
    Auth,
    /// Settings the client library refused when the poll started (SNMPv3 keys, credentials
    /// that cannot be sent as gRPC metadata, a bad address).
    Config,
    /// An answer that does not decode (SNMP datagrams, gNMI JSON values).
    Decode,
    /// A gRPC status other than the ones with a reason of their own.
    GrpcError,
    /// Connection refused, reset or unreachable.
    Network,
    /// An SNMP client error of no other kind.
    Other,
    /// The whole poll took longer than the target's interval.
    PollTimeout,
    /// A `/probe` poll cut short by the scrape timeout.
    ScrapeTimeout,
    /// The agent answered with an SNMP error status.
    SnmpError,
    /// A gNMI subscription silent, or never in sync, for two intervals plus the timeout.
    Stalled,
    /// The target ended a gNMI subscription.
    StreamClosed,
    /// A request got no answer within the target's timeout.
    Timeout,
    /// TLS: certificates that cannot be read or are refused, handshake failures.
    Tls,
    /// A gNMI target sent more leaves than its profile allows.
    TooManyLeaves,
    /// The gNMI target offers none of the encodings the exporter reads.
    UnsupportedEncoding,
    /// Values the profile could not read (counted per value, the poll itself succeeded).
    Value,
}

impl PollErrorReason {
    pub const ALL: &[Self] = &[
        Self::Auth,
        Self::Config,
        Self::Decode,
        Self::GrpcError,
        Self::Network,
        Self::Other,
        Self::PollTimeout,
        Self::ScrapeTimeout,
        Self::SnmpError,
        Self::Stalled,
        Self::StreamClosed,
        Self::Timeout,
        Self::Tls,
        Self::TooManyLeaves,
        Self::UnsupportedEncoding,
        Self::Value,
    ];

    pub fn as_label(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::Config => "config",
            Self::Decode => "decode",
            Self::GrpcError => "grpc_error",
            Self::Network => "network",
            Self::Other => "other",
            Self::PollTimeout => "poll_timeout",
            Self::ScrapeTimeout => "scrape_timeout",
            Self::SnmpError => "snmp_error",
            Self::Stalled => "stalled",
            Self::StreamClosed => "stream_closed",
            Self::Timeout => "timeout",
            Self::Tls => "tls",
            Self::TooManyLeaves => "too_many_leaves",
            Self::UnsupportedEncoding => "unsupported_encoding",
            Self::Value => "value",
        }
    }
}

impl fmt::Display for PollErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_label())
    }
}

/// Ordered by label, so that series come out in the same order as when reasons were strings.
impl Ord for PollErrorReason {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_label().cmp(other.as_label())
    }
}

impl PartialOrd for PollErrorReason {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_snake_case_and_in_order() {
        let labels: Vec<&str> = PollErrorReason::ALL.iter().map(|r| r.as_label()).collect();
        let mut sorted = labels.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(labels, sorted, "ALL in label order, without duplicates");
        let mut by_ord = PollErrorReason::ALL.to_vec();
        by_ord.sort();
        assert_eq!(by_ord, PollErrorReason::ALL);
        for label in &labels {
            assert!(
                label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{label}"
            );
        }
    }

    #[test]
    fn display_is_the_label() {
        let error = PollError {
            reason: PollErrorReason::TooManyLeaves,
            detail: "more than 10 leaves".into(),
        };
        assert_eq!(error.to_string(), "too_many_leaves: more than 10 leaves");
    }

    /// docs/metrics.md lists every value in the row of `rdma_switch_poll_errors_total`.
    #[test]
    fn docs_list_every_reason() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md");
        let docs = std::fs::read_to_string(path).unwrap();
        let row = docs
            .lines()
            .find(|l| l.starts_with("| `rdma_switch_poll_errors_total"))
            .expect("a row for rdma_switch_poll_errors_total");
        let missing: Vec<&str> = PollErrorReason::ALL
            .iter()
            .map(|r| r.as_label())
            .filter(|label| !row.contains(&format!("`{label}`")))
            .collect();
        assert!(missing.is_empty(), "docs/metrics.md lacks {missing:?}");
    }
}
