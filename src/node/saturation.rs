//! InfiniBand PMA counters that stop at their maximum instead of wrapping (IBA 1.3, 16.1.3.5
//! PortCounters). The kernel's `counters/` files read them at their narrow width unless the
//! device has the 64-bit PortCountersExtended (data and packets only): a `link_downed` at 255 or
//! a `symbol_error` at 65535 no longer moves, and rules built on its increase go silent.

/// Counter file name and field width in bits, for the fields with no 64-bit form.
const NARROW: &[(&str, u32)] = &[
    ("excessive_buffer_overrun_errors", 4),
    ("local_link_integrity_errors", 4),
    ("link_downed", 8),
    ("link_error_recovery", 8),
    ("port_rcv_constraint_errors", 8),
    ("port_xmit_constraint_errors", 8),
    ("symbol_error", 16),
    ("port_rcv_errors", 16),
    ("port_rcv_remote_physical_errors", 16),
    ("port_rcv_switch_relay_errors", 16),
    ("port_xmit_discards", 16),
    ("VL15_dropped", 16),
    ("port_xmit_wait", 32),
];

/// Counters read at 32 bits where the device lacks PortCountersExtended, and at 64 bits
/// where it has it: stuck at 2^32-1 only in the first case (a 64-bit counter sitting exactly
/// there is not worth a false alarm).
const DATA_32: &[&str] = &[
    "port_rcv_data",
    "port_xmit_data",
    "port_rcv_packets",
    "port_xmit_packets",
];

/// Whether `counters/<name>` holding `raw` sits at the maximum of its field.
pub fn is_saturated(name: &str, raw: u64) -> bool {
    // Almost every value is no field's maximum: the names are looked at only for those.
    if !matches!(raw, 0xF | 0xFF | 0xFFFF | 0xFFFF_FFFF) {
        return false;
    }
    if let Some((_, bits)) = NARROW.iter().find(|(n, _)| *n == name) {
        return raw == (1u64 << bits) - 1;
    }
    DATA_32.contains(&name) && raw == u64::from(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_counters_at_their_maximum() {
        assert!(is_saturated("link_downed", 255));
        assert!(!is_saturated("link_downed", 254));
        assert!(is_saturated("port_xmit_discards", 65_535));
        assert!(is_saturated("symbol_error", 65_535));
        assert!(is_saturated("local_link_integrity_errors", 15));
        assert!(is_saturated("port_xmit_wait", u64::from(u32::MAX)));
        assert!(is_saturated("port_xmit_data", u64::from(u32::MAX)));
        assert!(!is_saturated("port_xmit_data", u64::from(u32::MAX) + 1));
        // Unknown names and 64-bit-only counters never saturate here.
        assert!(!is_saturated("unicast_xmit_packets", u64::from(u32::MAX)));
        assert!(!is_saturated("something_new", 255));
    }
}
