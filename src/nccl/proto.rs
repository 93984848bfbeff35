//! What an `NCCL_PROTO` value leaves enabled: whether a run was restricted to the Simple
//! protocol, the one the `NCCL_PROTO=Simple` triage compares against.
//!
//! Grammar per NCCL's `parseList` (`src/graph/tuning.cc`): a comma-separated list of `LL`,
//! `LL128`, `Simple` (any case), or `^` and a list to exclude; since v2.24 also
//! `func:list;func:list` per collective.

/// NCCL's protocols, in `ncclProtoStr` order.
const PROTOCOLS: [&str; 3] = ["LL", "LL128", "Simple"];

/// Whether `value` leaves Simple as the only protocol: `Simple`, `simple`, `^LL,LL128`.
///
/// A per-collective value (`allreduce:simple`) does not count: the collectives it does not name
/// keep every protocol. An unknown name does not count either (NCCL rejects the value).
pub(crate) fn only_simple(value: &str) -> bool {
    let value = value.trim().trim_matches(['"', '\'']).trim();
    if value.is_empty() || value.contains([':', ';']) {
        return false;
    }
    let (exclude, list) = match value.strip_prefix('^') {
        Some(list) => (true, list),
        None => (false, value),
    };
    let mut named = [false; PROTOCOLS.len()];
    for token in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match PROTOCOLS.iter().position(|p| p.eq_ignore_ascii_case(token)) {
            Some(index) => named[index] = true,
            None => return false,
        }
    }
    // Excluding nothing (`^`) leaves all three, naming nothing enables nothing: neither counts.
    let enabled = named.map(|is_named| is_named != exclude);
    enabled == [false, false, true]
}

#[cfg(test)]
mod tests {
    use super::only_simple;

    #[test]
    fn simple_alone_in_any_case_and_form() {
        for value in [
            "Simple",
            "simple",
            "SIMPLE",
            " simple ",
            "\"simple\"",
            "^LL,LL128",
            "^ll128,ll",
            "Simple,Simple",
        ] {
            assert!(only_simple(value), "{value}");
        }
    }

    #[test]
    fn other_protocols_left_on_are_not_simple() {
        for value in [
            "LL",
            "LL128",
            "LL,Simple",
            "^LL",
            "^LL128",
            "^",
            "^LL,LL128,Simple",
            "",
            "allreduce:simple",
            "allreduce:simple;broadcast:simple",
            "Simpel",
        ] {
            assert!(!only_simple(value), "{value}");
        }
    }
}
