//! Integrity of a whole exposition: no two samples with the same name and label set (issue 14,
//! item 6). Prometheus keeps one of two such samples and drops the other without a word, so
//! every end-to-end and golden test checks the whole body.

use std::collections::BTreeMap;

use super::parse_exposition;

/// Panics naming every series that appears more than once in `body` (a text exposition, 0.0.4
/// or OpenMetrics), with how many times. Labels are compared as a set: their order in the line
/// does not matter.
#[track_caller]
pub fn assert_no_duplicate_series(body: &str) {
    let duplicates = duplicate_series(body);
    assert!(
        duplicates.is_empty(),
        "{} duplicate series in the exposition:\n{}",
        duplicates.len(),
        duplicates.join("\n")
    );
}

/// Each series of `body` seen more than once, as `name{labels} (N times)`, in series order.
pub fn duplicate_series(body: &str) -> Vec<String> {
    let mut seen: BTreeMap<(String, BTreeMap<String, String>), usize> = BTreeMap::new();
    for sample in parse_exposition(body) {
        *seen.entry((sample.name, sample.labels)).or_default() += 1;
    }
    seen.into_iter()
        .filter(|(_, count)| *count > 1)
        .map(|((name, labels), count)| format!("{name}{labels:?} ({count} times)"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: &str = "# HELP a_total A.\n# TYPE a_total counter\n\
        a_total{device=\"mlx5_0\",port=\"1\"} 1\na_total{device=\"mlx5_0\",port=\"2\"} 2\nb 3\n";

    #[test]
    fn distinct_series_pass() {
        assert!(duplicate_series(CLEAN).is_empty());
        assert_no_duplicate_series(CLEAN);
    }

    #[test]
    fn a_repeated_series_is_named_whatever_its_label_order() {
        let body = format!("{CLEAN}a_total{{port=\"2\",device=\"mlx5_0\"}} 5\nb 4\nb 4\n");
        assert_eq!(
            duplicate_series(&body),
            [
                "a_total{\"device\": \"mlx5_0\", \"port\": \"2\"} (2 times)",
                "b{} (3 times)"
            ]
        );
        let caught = std::panic::catch_unwind(|| assert_no_duplicate_series(&body));
        let message = *caught.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("2 duplicate series"), "{message}");
        assert!(message.contains("a_total"), "{message}");
    }
}
