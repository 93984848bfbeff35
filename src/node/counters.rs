//! Counter values by name, as one read gave them. The names are shared: a kept directory's
//! listing, or a netdev's previous statistic names, so that a scrape allocates no name per
//! counter (a node has hundreds to thousands of them).

use std::sync::Arc;

/// Names in the order their values are read.
pub type Names = Arc<[Box<str>]>;

/// Values paired with `names` by position; `None` where a name has no value in this read (a
/// counter the filter leaves out, or one that could not be read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    names: Names,
    values: Vec<Option<u64>>,
}

impl Counters {
    /// `values[i]` is the value of `names[i]`.
    pub fn new(names: Names, values: Vec<Option<u64>>) -> Counters {
        debug_assert_eq!(names.len(), values.len());
        Counters { names, values }
    }

    /// (name, value) of the counters that have a value, in name-list order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.iter_at().map(|(_, name, value)| (name, value))
    }

    /// (place in [`Counters::names`], name, value) of the counters that have a value: for
    /// what is kept per name list, by place.
    pub(crate) fn iter_at(&self) -> impl Iterator<Item = (usize, &str, u64)> {
        self.names
            .iter()
            .zip(&self.values)
            .enumerate()
            .filter_map(|(at, (name, value))| Some((at, &**name, (*value)?)))
    }

    /// The value of counter `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// How many counters have a value.
    pub fn len(&self) -> usize {
        self.values.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }

    /// The shared name list (values may be missing for some of its names).
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The values, by position in [`Counters::names`].
    pub fn values(&self) -> &[Option<u64>] {
        &self.values
    }
}

impl From<Vec<(String, u64)>> for Counters {
    fn from(pairs: Vec<(String, u64)>) -> Self {
        pairs.into_iter().collect()
    }
}

impl FromIterator<(String, u64)> for Counters {
    fn from_iter<I: IntoIterator<Item = (String, u64)>>(iter: I) -> Self {
        let (names, values): (Vec<Box<str>>, Vec<Option<u64>>) = iter
            .into_iter()
            .map(|(name, value)| (name.into_boxed_str(), Some(value)))
            .unzip();
        Counters::new(names.into(), values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_without_a_value_are_skipped() {
        let names: Names = vec!["a".into(), "b".into(), "c".into()].into();
        let counters = Counters::new(names, vec![Some(1), None, Some(3)]);
        assert_eq!(counters.iter().collect::<Vec<_>>(), [("a", 1), ("c", 3)]);
        assert_eq!(
            counters.iter_at().collect::<Vec<_>>(),
            [(0, "a", 1), (2, "c", 3)]
        );
        assert_eq!(counters.get("b"), None);
        assert_eq!(counters.get("c"), Some(3));
        assert_eq!(counters.len(), 2);
        assert!(!counters.is_empty());
        assert!(Counters::default().is_empty());
        let pairs = Counters::from(vec![("x".to_string(), 9)]);
        assert_eq!(pairs.iter().collect::<Vec<_>>(), [("x", 9)]);
    }
}
