//! Keeps docs/metrics.md true to the code: it lists every value of every closed label vocabulary,
//! and every metric name it gives can be found, with its `_total`/`_info` suffix, in the one
//! source file that produces it.

use std::path::{Path, PathBuf};

use crate::direction::Direction;
use crate::nccl::verdict::Gdr;
use crate::node::ethtool_map::StormSeverity;
use crate::node::rdma_netlink::{NetlinkError, QpState, QpType};
use crate::node::reason::ReadErrorReason;
use crate::switch::pfc::PfcSource;

const DOCS: &str = include_str!("../docs/metrics.md");

/// `reason` values of `rdma_switch_poll_errors_total`: the reasons of `PollError` (built in
/// switch/snmp.rs, switch/gnmi/ and switch/poller.rs) and the poller's own `value`. `PollError`
/// has no list of its reasons yet: this one is to be replaced by its enum's `ALL` when it gets
/// one. `subscribed` is left out: the poller never counts it.
const POLL_ERROR_REASONS: &[&str] = &[
    "timeout",
    "network",
    "auth",
    "decode",
    "snmp_error",
    "other",
    "config",
    "poll_timeout",
    "scrape_timeout",
    "value",
    "tls",
    "grpc_error",
    "stream_closed",
    "stalled",
    "too_many_leaves",
    "unsupported_encoding",
];

/// `collector` values: the framework's names.
const COLLECTORS: &[&str] = crate::collector::KNOWN;

/// The known values of the netlink enums are static names.
fn cow_label(label: std::borrow::Cow<'static, str>) -> &'static str {
    match label {
        std::borrow::Cow::Borrowed(name) => name,
        std::borrow::Cow::Owned(name) => panic!("{name} is not a known value"),
    }
}

fn labels<T: Copy>(all: &[T], as_label: fn(T) -> &'static str) -> Vec<&'static str> {
    all.iter().map(|value| as_label(*value)).collect()
}

/// The part of the docs that `marker` introduces: its table row, or its paragraph.
fn passage(marker: &str) -> &'static str {
    let paragraph = DOCS
        .split("\n\n")
        .find(|p| p.contains(marker))
        .unwrap_or_else(|| panic!("docs/metrics.md has no {marker}"));
    if paragraph.starts_with('|') {
        paragraph.lines().find(|l| l.contains(marker)).unwrap()
    } else {
        paragraph
    }
}

#[test]
fn docs_list_every_label_value() {
    let vocabularies = [
        (
            "| `direction` |",
            labels(Direction::ALL, Direction::as_label),
        ),
        (
            "| `severity` |",
            labels(StormSeverity::ALL, StormSeverity::as_label),
        ),
        ("| `collector` |", COLLECTORS.to_vec()),
        (
            "`reason` values:",
            labels(ReadErrorReason::ALL, ReadErrorReason::as_label),
        ),
        (
            "`rdma_switch_poll_errors_total{switch,reason}`",
            POLL_ERROR_REASONS.to_vec(),
        ),
        ("`rdma_nccl_process_info`", labels(Gdr::ALL, Gdr::as_label)),
        (
            "`rdma_switch_port_pfc_enabled`",
            labels(PfcSource::ALL, PfcSource::as_label),
        ),
        (
            "`qp_type` values:",
            QpType::ALL
                .iter()
                .map(|t| cow_label(t.as_label()))
                .collect(),
        ),
        (
            "`qp_type` values:",
            QpState::ALL
                .iter()
                .map(|s| cow_label(s.as_label()))
                .collect(),
        ),
        ("Netlink error reasons", NetlinkError::REASONS.to_vec()),
        (
            "FEC error reasons",
            crate::node::ethtool_netlink::EthtoolNlError::REASONS.to_vec(),
        ),
        (
            "Transceiver read error reasons",
            labels(
                &crate::node::optics::ReadFailure::ALL,
                crate::node::optics::ReadFailure::as_label,
            ),
        ),
        (
            "Threshold `level` values:",
            crate::node::optics::Levels {
                high_alarm: 0.0,
                high_warning: 0.0,
                low_warning: 0.0,
                low_alarm: 0.0,
            }
            .labelled()
            .iter()
            .map(|(level, _)| *level)
            .collect(),
        ),
        (
            "| `rdma_ecn_enabled` |",
            labels(
                &crate::node::ecn_settings::Point::ALL,
                crate::node::ecn_settings::Point::as_label,
            ),
        ),
        (
            "`rdma_ib_fabric_query_failures{reason}`",
            labels(
                crate::ib::model::QueryFailureReason::ALL.as_slice(),
                crate::ib::model::QueryFailureReason::as_label,
            ),
        ),
        (
            "| `rdma_probe_port_info{",
            labels(
                crate::probe::rtt::Timestamps::ALL,
                crate::probe::rtt::Timestamps::as_str,
            ),
        ),
        (
            "`rdma_ib_fabric_nodes{kind}`",
            [
                crate::ib::model::NodeKind::Switch,
                crate::ib::model::NodeKind::Hca,
                crate::ib::model::NodeKind::Router,
            ]
            .iter()
            .map(|k| k.as_label())
            .collect(),
        ),
    ];
    let mut missing = Vec::new();
    for (marker, values) in vocabularies {
        let mut distinct = values.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), values.len(), "{marker}: {values:?}");
        let passage = passage(marker);
        missing.extend(
            values
                .iter()
                .filter(|value| !passage.contains(&format!("`{value}`")))
                .map(|value| format!("{marker} {value}")),
        );
    }
    assert!(
        missing.is_empty(),
        "docs/metrics.md does not list: {missing:#?}"
    );
}

/// A family whose names are built at run time, as the docs write it: `rdma_hw_<name>_total`.
struct Pattern {
    written: &'static str,
    prefix: &'static str,
    suffix: &'static str,
}

impl Pattern {
    fn matches(&self, name: &str) -> bool {
        name.len() > self.prefix.len() + self.suffix.len()
            && name.starts_with(self.prefix)
            && name.ends_with(self.suffix)
    }
}

/// Metric names in backquotes (`rdma_port_info{device,...}`), and the patterns of names built at
/// run time.
fn documented_names() -> (Vec<&'static str>, Vec<Pattern>) {
    let mut names = Vec::new();
    let mut patterns = Vec::new();
    for quoted in DOCS.split('`').skip(1).step_by(2) {
        if !quoted.starts_with("rdma_") && !quoted.starts_with("process_") {
            continue;
        }
        let end = quoted
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(quoted.len());
        let (name, rest) = quoted.split_at(end);
        if rest.starts_with('<') {
            let written = quoted.split('{').next().unwrap();
            patterns.push(Pattern {
                written,
                prefix: name,
                suffix: written.rsplit_once('>').unwrap().1,
            });
        } else {
            names.push(name);
        }
    }
    names.sort_unstable();
    names.dedup();
    (names, patterns)
}

/// Every `.rs` file below `src/` (this one aside), relative path and text up to its unit tests.
fn production_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    walk(&root.join("src"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let production = text.split("\n#[cfg(test)]").next().unwrap().to_string();
            (relative, production)
        })
        .filter(|(relative, _)| relative != file!() && !READERS.contains(&relative.as_str()))
        .collect()
}

/// Files that read metric families from an exporter's scrape instead of producing them.
const READERS: [&str; 1] = ["src/diag/doctor/probe.rs"];

/// Files whose code (not comments: those use backquotes) holds `"literal"`.
fn files_with_literal<'a>(sources: &'a [(String, String)], literal: &str) -> Vec<&'a str> {
    let quoted = format!("\"{literal}\"");
    sources
        .iter()
        .filter(|(_, text)| text.contains(&quoted))
        .map(|(path, _)| path.as_str())
        .collect()
}

#[test]
fn every_documented_name_is_found_where_it_is_produced() {
    let sources = production_sources();
    let (names, patterns) = documented_names();
    assert!(names.len() > 100 && patterns.len() >= 3, "{names:?}");
    let mut wrong = Vec::new();
    for pattern in &patterns {
        // The docs say which file builds the names; its prefix is there, and only there.
        let files: Vec<&str> = passage(pattern.written)
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|q| q.starts_with("src/") && q.ends_with(".rs"))
            .collect();
        let producers = files_with_literal(&sources, pattern.prefix);
        if files.is_empty() || producers != files {
            wrong.push(format!(
                "{}: docs say {files:?}, built in {producers:?}",
                pattern.written
            ));
        }
    }
    for name in names {
        let producers = files_with_literal(&sources, name);
        let found = match producers.len() {
            0 => patterns.iter().any(|p| p.matches(name)),
            1 => true,
            _ => false,
        };
        if !found {
            wrong.push(format!("{name}: produced in {producers:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/metrics.md names that are not written as one literal in one file under src/: {wrong:#?}"
    );
}
