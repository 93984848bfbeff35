//! A port's PortCounters/PortCountersExtended values, kept compact: a subnet of 2 000 switches
//! has 128 000 ports of about 21 counters each, and a scan keeps them all until it is encoded.
//! As a `BTreeMap<String, u64>` that was 2.7 million owned names and tree nodes, about 1.9 KB a
//! port; here a port is one vector of (name id, value) pairs, 16 bytes a counter.
//!
//! A name is a [`CounterName`]: an index into [`KNOWN`] (what perfquery and ibqueryerrors print)
//! or, for a name not in it, into a process-wide interner. Interned names live as long as the
//! process, so their number is bounded ([`MAX_INTERNED`]): a tool printing ever new names cannot
//! grow the exporter; a name past the bound is not kept ([`CounterValues::insert`]).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

/// The IBTA field names the tools print, sorted: PortCounters, PortCountersExtended, and the
/// PortRcvErrorDetails/PortXmitDiscardDetails fields of the same port.
pub const KNOWN: [&str; 33] = [
    "ExcessiveBufferOverrunErrors",
    "LinkDownedCounter",
    "LinkErrorRecoveryCounter",
    "LocalLinkIntegrityErrors",
    "PortBufferOverrunErrors",
    "PortDLIDMappingErrors",
    "PortInactiveDiscards",
    "PortLocalPhysicalErrors",
    "PortLoopingErrors",
    "PortMalformedPktErrors",
    "PortMulticastRcvPkts",
    "PortMulticastXmitPkts",
    "PortNeighborMTUDiscards",
    "PortRcvConstraintErrors",
    "PortRcvData",
    "PortRcvErrors",
    "PortRcvPkts",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortSwHOQLifetimeLimitDiscards",
    "PortSwLifetimeLimitDiscards",
    "PortUnicastRcvPkts",
    "PortUnicastXmitPkts",
    "PortVLMappingErrors",
    "PortXmitConstraintErrors",
    "PortXmitData",
    "PortXmitDiscards",
    "PortXmitPkts",
    "PortXmitWait",
    "QP1Dropped",
    "SymbolErrorCounter",
    "VL15Dropped",
    "XmitWaitExtended",
];

/// Names not in [`KNOWN`] the process keeps at most.
pub(crate) const MAX_INTERNED: usize = 1024;

/// A counter's IBTA name, as an id: equal names have equal ids in the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CounterName(u16);

#[derive(Default)]
struct Interned {
    names: Vec<&'static str>,
    ids: HashMap<&'static str, u16>,
}

fn interned() -> &'static RwLock<Interned> {
    static INTERNED: OnceLock<RwLock<Interned>> = OnceLock::new();
    INTERNED.get_or_init(RwLock::default)
}

impl CounterName {
    /// The id of `name`: from the table, or interned; `None` once [`MAX_INTERNED`] other names
    /// are taken.
    pub fn of(name: &str) -> Option<CounterName> {
        if let Some(id) = CounterName::find(name) {
            return Some(id);
        }
        let offset = KNOWN.len() as u16;
        let mut table = interned().write().unwrap_or_else(|p| p.into_inner());
        if let Some(&i) = table.ids.get(name) {
            return Some(CounterName(offset + i));
        }
        if table.names.len() >= MAX_INTERNED {
            return None;
        }
        // Leaked on purpose: at most MAX_INTERNED short names for the process' life.
        let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
        let i = table.names.len() as u16;
        table.names.push(name);
        table.ids.insert(name, i);
        Some(CounterName(offset + i))
    }

    /// The id of `name` if it has one (never interns).
    pub fn find(name: &str) -> Option<CounterName> {
        if let Ok(i) = KNOWN.binary_search(&name) {
            return Some(CounterName(i as u16));
        }
        let offset = KNOWN.len() as u16;
        read(interned())
            .ids
            .get(name)
            .map(|&i| CounterName(offset + i))
    }

    /// The order of the names' text. Two names of the table compare by id, which is the same
    /// order (the table is sorted): no string is compared for the names the tools print.
    fn cmp_name(self, other: CounterName) -> Ordering {
        let known = KNOWN.len() as u16;
        if self.0 < known && other.0 < known {
            self.0.cmp(&other.0)
        } else {
            self.as_str().cmp(other.as_str())
        }
    }

    pub fn as_str(self) -> &'static str {
        let i = usize::from(self.0);
        match KNOWN.get(i) {
            Some(name) => name,
            None => read(interned()).names[i - KNOWN.len()],
        }
    }

    /// A dense index (`KNOWN` first), for tables indexed by counter.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

fn read(lock: &RwLock<Interned>) -> std::sync::RwLockReadGuard<'_, Interned> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

/// One port's counters by name, raw values, iterated in name order (as a `BTreeMap<String, _>`
/// is, so outputs built from them keep their order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterValues {
    /// Sorted by name (the text, not the id).
    entries: Vec<(CounterName, u64)>,
}

impl CounterValues {
    /// Sets `name` to `value`. False when the name could not be interned (see the module doc):
    /// the value is not kept.
    pub fn insert(&mut self, name: &str, value: u64) -> bool {
        let Some(id) = CounterName::of(name) else {
            return false;
        };
        self.set(id, value);
        true
    }

    fn set(&mut self, id: CounterName, value: u64) {
        match self.position(id) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (id, value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        let i = self.position(CounterName::find(name)?).ok()?;
        Some(self.entries[i].1)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// `(name, value)` in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.into_iter()
    }

    /// `(id, value)` in name order, for tables keyed by counter.
    pub fn ids(&self) -> impl Iterator<Item = (CounterName, u64)> + '_ {
        self.entries.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes every value of `other`, replacing those of the same name.
    pub fn extend(&mut self, other: CounterValues) {
        if self.entries.is_empty() {
            self.entries = other.entries;
            return;
        }
        for (id, value) in other.entries {
            self.set(id, value);
        }
    }

    /// Frees the room the vector grew into: a scan keeps one per port.
    pub fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
    }

    fn position(&self, id: CounterName) -> Result<usize, usize> {
        self.entries.binary_search_by(|&(e, _)| e.cmp_name(id))
    }
}

impl<S: AsRef<str>> FromIterator<(S, u64)> for CounterValues {
    fn from_iter<I: IntoIterator<Item = (S, u64)>>(iter: I) -> CounterValues {
        let mut values = CounterValues::default();
        for (name, value) in iter {
            values.insert(name.as_ref(), value);
        }
        values.shrink_to_fit();
        values
    }
}

/// `for (name, value) in &counters`, in name order.
impl<'a> IntoIterator for &'a CounterValues {
    type Item = (&'static str, u64);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (CounterName, u64)>,
        fn(&(CounterName, u64)) -> (&'static str, u64),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|&(id, value)| (id.as_str(), value))
    }
}

/// `counters["PortXmitWait"]`, panicking on a missing name as a map's index does.
impl std::ops::Index<&str> for CounterValues {
    type Output = u64;

    fn index(&self, name: &str) -> &u64 {
        match CounterName::find(name).map(|id| self.position(id)) {
            Some(Ok(i)) => &self.entries[i].1,
            _ => panic!("no counter {name:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_known_table_is_sorted_and_without_repeats() {
        assert!(KNOWN.windows(2).all(|w| w[0] < w[1]), "{KNOWN:?}");
    }

    #[test]
    fn values_iterate_in_name_order_as_a_btreemap_of_strings_does() {
        let pairs = [
            ("PortXmitWait", 7),
            ("SymbolErrorCounter", 2),
            ("VendorSpecificThing", 9),
            ("PortXmitData", 10),
            ("AVendorCounter", 1),
            ("PortXmitWait", 8),
        ];
        let map: BTreeMap<String, u64> = pairs.iter().map(|&(n, v)| (n.to_owned(), v)).collect();
        let values: CounterValues = pairs.iter().copied().collect();
        let ours: Vec<(&str, u64)> = values.iter().collect();
        let theirs: Vec<(&str, u64)> = map.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        assert_eq!(ours, theirs);
        assert_eq!(values.get("PortXmitWait"), Some(8));
        assert_eq!(values["VendorSpecificThing"], 9);
        assert!(values.contains("AVendorCounter") && !values.contains("PortRcvData"));
        assert_eq!(values.len(), 5);
    }

    #[test]
    fn a_name_has_one_id_in_the_process_and_reads_back() {
        for name in [
            "PortXmitWait",
            "ExcessiveBufferOverrunErrors",
            "SomeVendorName",
        ] {
            let id = CounterName::of(name).unwrap();
            assert_eq!(CounterName::of(name), Some(id));
            assert_eq!(id.as_str(), name);
        }
        assert!(CounterName::of("PortXmitData").unwrap().index() < KNOWN.len());
    }

    #[test]
    fn extend_replaces_and_merges_in_order() {
        let mut a: CounterValues = [("PortXmitWait", 1), ("SymbolErrorCounter", 2)]
            .into_iter()
            .collect();
        a.extend(
            [("PortXmitWait", 5), ("LinkDownedCounter", 3)]
                .into_iter()
                .collect(),
        );
        let got: Vec<(&str, u64)> = a.iter().collect();
        assert_eq!(
            got,
            [
                ("LinkDownedCounter", 3),
                ("PortXmitWait", 5),
                ("SymbolErrorCounter", 2)
            ]
        );
    }

    #[test]
    fn a_counter_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<(CounterName, u64)>(), 16);
    }
}
