//! What each counter file is exported as: its metric name, help text and unit, derived once
//! per directory listing and kept while the listing is. A kept directory's listing is one
//! shared [`Names`] across scrapes, so a scrape looks its names up instead of building a metric
//! name, checking it for the lint and searching the help tables for every counter of every
//! port (a fifth of the node's families' cost before).

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::counters::Names;
use crate::exposition::sanitize_name_part;

/// Kernel data counters count 4-octet words (IBA PortCounters); exported in bytes.
const DATA_COUNTERS: &[&str] = &["port_rcv_data", "port_xmit_data"];

/// The directory a listing comes from: how its names become metric names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listing {
    /// `ports/<n>/counters/`: `rdma_port_<name>_total`.
    PortCounters,
    /// `ports/<n>/counters_ext/` (legacy 64-bit files): named as the `counters/` file each
    /// stands for.
    CountersExt,
    /// `ports/<n>/hw_counters/`: `rdma_hw_<name>_total`.
    PortHw,
    /// `<device>/hw_counters/`: `rdma_device_hw_<name>_total`.
    DeviceHw,
}

/// What one counter of a listing is exported as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    Counter {
        /// The family's exposed name (`..._total`).
        exposed: Box<str>,
        help: &'static str,
        /// A data counter: the kernel counts 4-octet words, exported in bytes.
        words: bool,
    },
    /// `hw_counters/lifespan`: how long the driver caches the values, not a counter.
    Lifespan,
    /// A driver counter whose sanitized name another of the listing has (the clean one keeps
    /// it): not exported, reported.
    Collision,
}

/// The help text of a counter of a listing, by its kernel name.
pub(crate) type HelpOf = fn(Listing, &str) -> &'static str;

/// Each listing's slots, kept while a scrape meets the listing.
#[derive(Debug, Default)]
pub(crate) struct CounterNames {
    /// Keyed by the listing's address; the entry holds the listing, so the address is not
    /// reused while it is kept.
    kept: FxHashMap<(usize, Listing), Kept>,
}

#[derive(Debug)]
struct Kept {
    names: Names,
    slots: Arc<[Slot]>,
    /// Met since the last [`CounterNames::forget_unmet`].
    met: bool,
}

impl CounterNames {
    /// The slots of `names` (one per name, in its order) as a `listing` directory's.
    pub fn slots(&mut self, names: &Names, listing: Listing, help_of: HelpOf) -> Arc<[Slot]> {
        let key = (Arc::as_ptr(names).cast::<u8>() as usize, listing);
        if let Some(kept) = self.kept.get_mut(&key) {
            if Arc::ptr_eq(&kept.names, names) {
                kept.met = true;
                return kept.slots.clone();
            }
        }
        let slots: Arc<[Slot]> = derive(names, listing, help_of).into();
        let kept = Kept {
            names: names.clone(),
            slots: slots.clone(),
            met: true,
        };
        self.kept.insert(key, kept);
        slots
    }

    /// Drops the listings no scrape met since the last call: a directory that changed or went
    /// away is not kept for the process's life.
    pub(crate) fn forget_unmet(&mut self) {
        self.kept.retain(|_, kept| std::mem::take(&mut kept.met));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.len()
    }
}

fn derive(names: &[Box<str>], listing: Listing, help_of: HelpOf) -> Vec<Slot> {
    match listing {
        Listing::PortCounters | Listing::CountersExt => names
            .iter()
            .map(|raw| {
                let name = match listing {
                    Listing::CountersExt => counters_ext_equivalent(raw),
                    _ => raw,
                };
                Slot::Counter {
                    exposed: port_counter_name(name).into(),
                    help: help_of(listing, name),
                    words: DATA_COUNTERS.contains(&name),
                }
            })
            .collect(),
        Listing::PortHw | Listing::DeviceHw => {
            let prefix = match listing {
                Listing::PortHw => "rdma_hw_",
                _ => "rdma_device_hw_",
            };
            let mut unique = UniqueNames::new(names);
            names
                .iter()
                .map(|raw| {
                    if &**raw == "lifespan" {
                        return Slot::Lifespan;
                    }
                    let mut exposed = String::from(prefix);
                    if !unique.push(&mut exposed, raw) {
                        return Slot::Collision;
                    }
                    exposed.push_str("_total");
                    Slot::Counter {
                        exposed: exposed.into(),
                        help: help_of(listing, raw),
                        words: false,
                    }
                })
                .collect()
        }
    }
}

/// Exposed name of a `counters/` file (`rdma_port_<name>_total`): lowercased, leading `port_`
/// dropped, data in bytes.
pub(crate) fn port_counter_name(kernel_name: &str) -> String {
    let mut out = String::from("rdma_port_");
    let short = kernel_name.strip_prefix("port_").unwrap_or(kernel_name);
    push_driver_counter_name(&mut out, short);
    if DATA_COUNTERS.contains(&kernel_name) {
        out.push_str("_bytes");
    }
    out.push_str("_total");
    out
}

/// The `counters/` name a legacy `counters_ext/` file stands for (`port_rcv_data_64` ->
/// `port_rcv_data`, `port_unicast_xmit_packets` -> `unicast_xmit_packets`).
pub(crate) fn counters_ext_equivalent(ext_name: &str) -> &str {
    let name = ext_name.strip_suffix("_64").unwrap_or(ext_name);
    if name.starts_with("port_unicast_") || name.starts_with("port_multicast_") {
        &name["port_".len()..]
    } else {
        name
    }
}

/// Metric name part for a driver counter: sanitized, and the word `counter` becomes `count`
/// because Prometheus' lint rejects counters named after their type (`..._counter_total`).
pub(crate) fn driver_counter_name(raw: &str) -> String {
    let mut out = String::new();
    push_driver_counter_name(&mut out, raw);
    out
}

/// Already a valid metric name part that the lint accepts: used as it is.
fn is_clean_name(raw: &str) -> bool {
    raw.bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && !raw.contains("counter")
}

fn push_driver_counter_name(out: &mut String, raw: &str) {
    if is_clean_name(raw) {
        out.push_str(raw);
        return;
    }
    let sanitized = sanitize_name_part(raw);
    for (i, token) in sanitized.split('_').enumerate() {
        if i > 0 {
            out.push('_');
        }
        out.push_str(if token == "counter" { "count" } else { token });
    }
}

/// Keeps driver counter names unique after sanitizing. Clean names (already valid metric name
/// parts) always win; a name that needed sanitizing is dropped if it lands on a taken name.
/// Decided over the whole listing, so a counter's name does not depend on which others could
/// be read at a scrape.
struct UniqueNames<'a> {
    names: &'a [Box<str>],
    /// The clean names, collected at the first name that needs sanitizing (mlx5's are all
    /// clean: most listings never build it).
    clean: Option<FxHashSet<&'a str>>,
    sanitized: FxHashSet<String>,
}

impl<'a> UniqueNames<'a> {
    fn new(names: &'a [Box<str>]) -> Self {
        UniqueNames {
            names,
            clean: None,
            sanitized: FxHashSet::default(),
        }
    }

    /// Appends the metric name part of `raw` to `out`; `false` when it collides.
    fn push(&mut self, out: &mut String, raw: &str) -> bool {
        if is_clean_name(raw) {
            out.push_str(raw);
            return true;
        }
        let part = driver_counter_name(raw);
        let names = self.names;
        let clean = self.clean.get_or_insert_with(|| {
            names
                .iter()
                .map(|n| &**n)
                .filter(|n| is_clean_name(n))
                .collect()
        });
        if clean.contains(part.as_str()) || !self.sanitized.insert(part.clone()) {
            return false;
        }
        out.push_str(&part);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(names: &[&str]) -> Names {
        names
            .iter()
            .map(|n| Box::from(*n))
            .collect::<Vec<_>>()
            .into()
    }

    fn no_help(_: Listing, _: &str) -> &'static str {
        "help"
    }

    fn exposed(slots: &[Slot]) -> Vec<Option<&str>> {
        slots
            .iter()
            .map(|slot| match slot {
                Slot::Counter { exposed, .. } => Some(&**exposed),
                Slot::Lifespan | Slot::Collision => None,
            })
            .collect()
    }

    #[test]
    fn port_counter_names_follow_the_design() {
        assert_eq!(
            port_counter_name("symbol_error"),
            "rdma_port_symbol_error_total"
        );
        assert_eq!(
            port_counter_name("port_xmit_wait"),
            "rdma_port_xmit_wait_total"
        );
        assert_eq!(
            port_counter_name("VL15_dropped"),
            "rdma_port_vl15_dropped_total"
        );
        assert_eq!(
            port_counter_name("port_xmit_data"),
            "rdma_port_xmit_data_bytes_total"
        );
        assert_eq!(
            port_counter_name("port_rcv_data"),
            "rdma_port_rcv_data_bytes_total"
        );
    }

    #[test]
    fn driver_names_are_lint_clean() {
        assert_eq!(driver_counter_name("brand_new_counter"), "brand_new_count");
        assert_eq!(driver_counter_name("counter_x"), "count_x");
        assert_eq!(driver_counter_name("SDMAIdInt1,32"), "sdmaidint1_32");
        assert_eq!(driver_counter_name("encounters"), "encounters");
        for (raw, clean) in [
            ("np_cnp_sent", true),
            ("rx_vport_rdma_unicast_bytes", true),
            ("encounters", false),
            ("c", true),
            ("", true),
            ("count", true),
            ("x_counter", false),
            ("counter", false),
            ("x_counte", true),
            ("Rx", false),
            ("Rx_bytes", false),
            ("rx-bytes", false),
        ] {
            assert_eq!(is_clean_name(raw), clean, "{raw}");
        }
    }

    #[test]
    fn legacy_names_map_to_plain_ones() {
        assert_eq!(counters_ext_equivalent("port_rcv_data_64"), "port_rcv_data");
        assert_eq!(
            counters_ext_equivalent("port_xmit_packets_64"),
            "port_xmit_packets"
        );
        assert_eq!(
            counters_ext_equivalent("port_unicast_rcv_packets"),
            "unicast_rcv_packets"
        );
        assert_eq!(
            counters_ext_equivalent("port_multicast_xmit_packets"),
            "multicast_xmit_packets"
        );
    }

    /// Each listing's slots: data counters in bytes, legacy files under the plain name,
    /// `lifespan` apart, and a sanitized name that lands on a clean one dropped wherever it
    /// stands in the listing.
    #[test]
    fn slots_name_each_counter_of_a_listing() {
        let mut names = CounterNames::default();
        let plain = listing(&["port_rcv_data", "symbol_error"]);
        let slots = names.slots(&plain, Listing::PortCounters, no_help);
        assert_eq!(
            exposed(&slots),
            [
                Some("rdma_port_rcv_data_bytes_total"),
                Some("rdma_port_symbol_error_total")
            ]
        );
        assert!(matches!(slots[0], Slot::Counter { words: true, .. }));
        assert!(matches!(slots[1], Slot::Counter { words: false, .. }));
        let ext = listing(&["port_unicast_rcv_packets", "port_xmit_data_64"]);
        let slots = names.slots(&ext, Listing::CountersExt, no_help);
        assert_eq!(
            exposed(&slots),
            [
                Some("rdma_port_unicast_rcv_packets_total"),
                Some("rdma_port_xmit_data_bytes_total")
            ]
        );
        assert!(matches!(slots[1], Slot::Counter { words: true, .. }));
        let hw = listing(&["RX-Bytes", "lifespan", "rx.bytes", "rx_bytes", "x_counter"]);
        let slots = names.slots(&hw, Listing::PortHw, no_help);
        assert_eq!(
            exposed(&slots),
            [
                None,
                None,
                None,
                Some("rdma_hw_rx_bytes_total"),
                Some("rdma_hw_x_count_total")
            ]
        );
        assert_eq!(slots[0], Slot::Collision);
        assert_eq!(slots[1], Slot::Lifespan);
        let slots = names.slots(&hw, Listing::DeviceHw, no_help);
        assert_eq!(exposed(&slots)[3], Some("rdma_device_hw_rx_bytes_total"));
    }

    /// A listing met again is looked up, not derived; one no scrape met is forgotten.
    #[test]
    fn a_kept_listing_is_derived_once_and_forgotten_when_gone() {
        let mut names = CounterNames::default();
        let kept = listing(&["a", "b"]);
        let first = names.slots(&kept, Listing::PortHw, no_help);
        let again = names.slots(&kept, Listing::PortHw, no_help);
        assert!(Arc::ptr_eq(&first, &again), "derived once");
        // An equal listing read afresh (a directory that changed) is another listing.
        let fresh = listing(&["a", "b"]);
        let other = names.slots(&fresh, Listing::PortHw, no_help);
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(names.len(), 2);
        names.forget_unmet();
        assert_eq!(names.len(), 2, "both met since the last call");
        names.slots(&fresh, Listing::PortHw, no_help);
        names.forget_unmet();
        assert_eq!(names.len(), 1, "the first listing was not met");
        let after = names.slots(&kept, Listing::PortHw, no_help);
        assert!(!Arc::ptr_eq(&first, &after), "derived again once forgotten");
        assert_eq!(exposed(&after), exposed(&first));
    }
}
