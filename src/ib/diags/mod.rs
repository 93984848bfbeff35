//! The infiniband-diags side: parsers of the text `ibnetdiscover`, `iblinkinfo`, `perfquery`
//! and `ibqueryerrors` print (one module each), the detection of which tool wrote a text
//! ([`detect`]), the merge of several outputs into one [`FabricScan`](crate::ib::model::FabricScan)
//! ([`merge`]), and [`source::DiagsSource`], which runs the tools with bounded time and output.
//!
//! Every parser takes any text without panicking: what it does not recognise it skips and
//! counts; a text with nothing of its tool in it is [`NotThisTool`].

pub mod detect;
pub mod iblinkinfo;
pub mod ibnetdiscover;
pub mod ibqueryerrors;
pub mod merge;
pub mod nodes;
pub mod perfquery;
pub mod run;
pub mod source;
pub mod words;

/// The text holds nothing the parser's tool prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not {0} output")]
pub struct NotThisTool(pub &'static str);

/// The IBTA name for a counter: perfquery and ibqueryerrors print IBTA names
/// (`SymbolErrorCounter`), perfquery 1.x (OFED 1.4 era) printed short ones (`SymbolErrors`,
/// `XmtData`); both become the model's key.
pub(crate) fn canonical_counter(name: &str) -> &str {
    match name {
        "SymbolErrors" => "SymbolErrorCounter",
        "LinkRecovers" => "LinkErrorRecoveryCounter",
        "LinkDowned" => "LinkDownedCounter",
        "RcvErrors" => "PortRcvErrors",
        "RcvRemotePhysErrors" => "PortRcvRemotePhysicalErrors",
        "RcvSwRelayErrors" => "PortRcvSwitchRelayErrors",
        "XmtDiscards" => "PortXmitDiscards",
        "XmtConstraintErrors" => "PortXmitConstraintErrors",
        "RcvConstraintErrors" => "PortRcvConstraintErrors",
        "LinkIntegrityErrors" => "LocalLinkIntegrityErrors",
        "ExcBufOverrunErrors" => "ExcessiveBufferOverrunErrors",
        "XmtData" => "PortXmitData",
        "RcvData" => "PortRcvData",
        "XmtPkts" => "PortXmitPkts",
        "RcvPkts" => "PortRcvPkts",
        "XmtWait" => "PortXmitWait",
        other => other,
    }
}

/// The width in bits of a PortCounters field (IBTA vol. 1, 16.1.3.5), for telling a counter
/// stuck at its maximum from a real count; `None` for the 64-bit extended ones and unknown
/// names. PortXmitWait is 32 bits in PortCounters (perfquery without `-x` and ibqueryerrors).
pub(crate) fn counter_bits(name: &str) -> Option<u32> {
    Some(match name {
        "SymbolErrorCounter"
        | "PortRcvErrors"
        | "PortRcvRemotePhysicalErrors"
        | "PortRcvSwitchRelayErrors"
        | "PortXmitDiscards"
        | "VL15Dropped" => 16,
        "LinkErrorRecoveryCounter"
        | "LinkDownedCounter"
        | "PortXmitConstraintErrors"
        | "PortRcvConstraintErrors" => 8,
        "LocalLinkIntegrityErrors" | "ExcessiveBufferOverrunErrors" => 4,
        "PortXmitWait" => 32,
        _ => return None,
    })
}

/// Whether `value` is the maximum of the counter's width: it stopped counting there (the
/// IBTA counters saturate instead of wrapping), so the true count is at least that.
pub fn is_saturated(name: &str, value: u64) -> bool {
    counter_bits(name).is_some_and(|bits| value == (1u64 << bits) - 1)
}
