//! Which `hw_counters` files the walk reads, by name: `node.hw_counters.include/exclude` and
//! `--collector.sysfs.hw-counters-include/exclude`. The patterns are anchored (the whole name
//! must match, as in Prometheus relabeling), and a counter left out is never opened, so a
//! large fleet that drops families it does not use also saves their syscalls.

use regex::Regex;
use serde::Deserialize;

/// Port and device `hw_counters` to read. The default reads every one.
#[derive(Debug, Clone, Default)]
pub struct CounterFilter {
    include: Option<Regex>,
    exclude: Option<Regex>,
}

/// A pattern that is not a regular expression; names the flag or key it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: invalid regular expression: {detail}")]
pub(crate) struct CounterPatternError {
    pub what: &'static str,
    pub detail: String,
}

/// `pattern` anchored at both ends.
pub fn anchored(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

impl CounterFilter {
    /// Reads every counter.
    pub const ALL: CounterFilter = CounterFilter {
        include: None,
        exclude: None,
    };

    pub fn new(include: Option<Regex>, exclude: Option<Regex>) -> CounterFilter {
        CounterFilter { include, exclude }
    }

    /// From pattern texts (anchored here); the error names `include` or `exclude`.
    pub(crate) fn from_patterns(
        include: Option<&str>,
        exclude: Option<&str>,
    ) -> Result<CounterFilter, CounterPatternError> {
        let compile = |what: &'static str, pattern: Option<&str>| {
            pattern
                .map(|p| {
                    anchored(p).map_err(|e| CounterPatternError {
                        what,
                        detail: e.to_string(),
                    })
                })
                .transpose()
        };
        Ok(CounterFilter {
            include: compile("hw_counters.include", include)?,
            exclude: compile("hw_counters.exclude", exclude)?,
        })
    }

    pub fn set_include(&mut self, include: Regex) {
        self.include = Some(include);
    }

    pub fn set_exclude(&mut self, exclude: Regex) {
        self.exclude = Some(exclude);
    }

    /// True when the counter named `name` (its file name) is read.
    pub fn allows(&self, name: &str) -> bool {
        self.include.as_ref().is_none_or(|re| re.is_match(name))
            && !self.exclude.as_ref().is_some_and(|re| re.is_match(name))
    }

    /// True when every counter is read.
    #[cfg(test)]
    pub(crate) fn is_all(&self) -> bool {
        self.include.is_none() && self.exclude.is_none()
    }
}

/// `node.hw_counters` as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawCounterFilter {
    include: Option<String>,
    exclude: Option<String>,
}

impl<'de> Deserialize<'de> for CounterFilter {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawCounterFilter::deserialize(deserializer)?;
        CounterFilter::from_patterns(raw.include.as_deref(), raw.exclude.as_deref())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_anchored_and_exclude_wins() {
        let filter =
            CounterFilter::from_patterns(Some("np_.*|rp_.*|lifespan"), Some("rp_cnp_ignored"))
                .unwrap();
        assert!(filter.allows("np_cnp_sent"));
        assert!(filter.allows("lifespan"));
        assert!(!filter.allows("rp_cnp_ignored"), "exclude wins");
        // Anchored: `np_.*` does not match inside a name.
        assert!(!filter.allows("req_np_x"));
        assert!(!filter.allows("out_of_sequence"));
        assert!(CounterFilter::ALL.allows("anything") && CounterFilter::ALL.is_all());
        let exclude_only = CounterFilter::from_patterns(None, Some("req_.*")).unwrap();
        assert!(!exclude_only.allows("req_cqe_error"));
        assert!(exclude_only.allows("out_of_sequence"));
    }

    #[test]
    fn a_bad_pattern_names_its_side() {
        let err = CounterFilter::from_patterns(Some("ok"), Some("rp_(")).unwrap_err();
        assert_eq!(err.what, "hw_counters.exclude");
        assert!(
            err.to_string()
                .starts_with("hw_counters.exclude: invalid regular expression"),
            "{err}"
        );
    }
}
