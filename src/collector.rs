//! The collector framework, in the pattern of node_exporter's `collector/collector.go`: every
//! source of metric families is a [`Collector`] with a stable name; [`Collectors`] runs the
//! enabled ones (all, those a scrape names with `collect[]`, or all but those it names with
//! `exclude[]`), times each, and writes
//! `rdma_exporter_collector_success` and `rdma_exporter_collector_duration_seconds` once per
//! collector. Collectors never write these two families themselves.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::exposition::body::{Body, BodyWriter, EncodedFamilies, PreEncoded};
use crate::exposition::{Families, Format, Value};

/// Every collector name, enabled or not, in the order they are run and listed. A name here is
/// `--collector.<name>` / `--no-collector.<name>`, `collect[]=<name>` and the `collector` label.
pub const KNOWN: &[&str] = &[
    "sysfs",
    "ethtool",
    "pfc_storm",
    "netlink",
    "fec",
    "transceiver",
    "pods",
    "nccl",
    "switch",
    "ib_fabric",
    "probe",
    "process",
];

/// A source of metric families.
pub trait Collector: Send + Sync + fmt::Debug {
    /// One of [`KNOWN`].
    fn name(&self) -> &'static str;

    /// Collectors whose work this one does in the same pass, each reported with
    /// [`Output::report`]: the sysfs walk reads the `ethtool` statistics on its own workers.
    /// Selecting either name runs the pass.
    fn companions(&self) -> &'static [&'static str] {
        &[]
    }

    /// Reads the source and encodes its families with [`Output::encode`] (or hands over families
    /// encoded ahead of the scrape with [`Output::append`]).
    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, fmt::Error>;

    /// Ends the collector's background work (a thread, tasks): a config reload replaced it.
    /// Scrapes still running on it finish with what it has.
    fn retire(&self) {}
}

/// How a collector's run went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// False when the source as a whole could not be read; single unreadable values are
    /// counted in `rdma_exporter_read_errors_total` instead.
    pub ok: bool,
    /// For sources read in the background (the storm sampler): the duration of their last
    /// round. `None`: the duration of this call, measured by [`Collectors`].
    pub duration: Option<Duration>,
}

impl Outcome {
    pub fn ok(ok: bool) -> Outcome {
        Outcome { ok, duration: None }
    }
}

/// What a collector writes to: the scrape's body, and the runs of its companions.
pub struct Output<'o> {
    body: &'o mut BodyWriter,
    companion_runs: Vec<(&'static str, bool, Duration)>,
}

impl Output<'_> {
    /// Encodes one collector's families. Call it once per collector: a family written twice
    /// would give the text format a second HELP line.
    pub fn encode(&mut self, families: &Families<'_>) -> fmt::Result {
        self.body.write(families);
        Ok(())
    }

    /// Hands over families encoded before the scrape: the body carries them as they are. Their
    /// names must be the collector's own, as with [`Output::encode`].
    pub fn append(&mut self, block: Arc<dyn PreEncoded>) {
        self.body.append(block);
    }

    /// Copies families encoded before the scrape into the body where this collector writes:
    /// for a small block (FEC's few KiB), where [`Output::append`]'s splice would cost the
    /// whole body a copy and its answer a hop to a blocking thread.
    pub fn write_encoded(&mut self, encoded: &EncodedFamilies) {
        self.body.write_encoded(encoded);
    }

    /// Reports a companion's run (one of [`Collector::companions`]).
    pub fn report(&mut self, name: &'static str, ok: bool, duration: Duration) {
        self.companion_runs.push((name, ok, duration));
    }
}

/// A `collect[]` name that is not a collector, or one that is not enabled; an `exclude[]` name
/// that is not a collector or would split a pass; both lists in one scrape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("unknown collector {name:?}; known collectors: {known}", known = KNOWN.join(", "))]
    Unknown { name: String },
    #[error("collector {name:?} is not enabled here; enabled collectors: {enabled}")]
    Disabled { name: String, enabled: String },
    #[error("collector {name:?} runs in one pass with {pass}: exclude all of them or none")]
    SplitPass { name: String, pass: String },
    #[error("collect[] and exclude[] cannot be combined in one scrape")]
    Combined,
}

/// Which collectors a scrape runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Selection {
    #[default]
    All,
    /// Indices into [`Collectors`], in run order, without repeats.
    Only(Vec<usize>),
}

/// The enabled collectors, in [`KNOWN`] order.
#[derive(Debug, Default)]
pub struct Collectors {
    list: Vec<Arc<dyn Collector>>,
}

impl Collectors {
    /// Retires every collector (see [`Collector::retire`]).
    pub fn retire(&self) {
        for collector in &self.list {
            collector.retire();
        }
    }

    /// Orders `list` as [`KNOWN`] lists them.
    ///
    /// # Panics
    /// On a name missing from [`KNOWN`] or given twice: a programming error the tests catch.
    pub fn new(mut list: Vec<Arc<dyn Collector>>) -> Collectors {
        let rank = |c: &Arc<dyn Collector>| {
            KNOWN
                .iter()
                .position(|n| *n == c.name())
                .unwrap_or_else(|| panic!("collector {:?} is not in KNOWN", c.name()))
        };
        list.sort_by_key(rank);
        let mut names: Vec<&str> = list.iter().flat_map(|c| c.all_names()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a collector name is registered twice");
        Collectors { list }
    }

    /// Names of the enabled collectors, companions included, in [`KNOWN`] order.
    pub fn enabled(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.list.iter().flat_map(|c| c.all_names()).collect();
        names.sort_by_key(|n| KNOWN.iter().position(|k| k == n));
        names
    }

    /// The collectors a `collect[]` list names; no names selects all.
    pub fn select<S: AsRef<str>>(&self, names: &[S]) -> Result<Selection, SelectionError> {
        if names.is_empty() {
            return Ok(Selection::All);
        }
        let mut indices = Vec::new();
        for name in names {
            let name = name.as_ref();
            if !KNOWN.contains(&name) {
                return Err(SelectionError::Unknown { name: name.into() });
            }
            let index = self
                .list
                .iter()
                .position(|c| c.all_names().any(|n| n == name))
                .ok_or_else(|| SelectionError::Disabled {
                    name: name.into(),
                    enabled: self.enabled().join(", "),
                })?;
            indices.push(index);
        }
        indices.sort_unstable();
        indices.dedup();
        Ok(Selection::Only(indices))
    }

    /// The selection of a scrape's `collect[]` and `exclude[]` lists, as node_exporter takes
    /// them: neither selects all, both are refused.
    pub fn select_by<S: AsRef<str>>(
        &self,
        collect: &[S],
        exclude: &[S],
    ) -> Result<Selection, SelectionError> {
        match (collect.is_empty(), exclude.is_empty()) {
            (_, true) => self.select(collect),
            (true, false) => self.select_excluding(exclude),
            (false, false) => Err(SelectionError::Combined),
        }
    }

    /// Every enabled collector but those an `exclude[]` list names. A known name that is not
    /// enabled here has nothing to exclude and is accepted, so that one scrape config fits
    /// agents with different collectors on (a fast job takes `pfc_storm`, the full job
    /// excludes it). A name that shares a pass with another (`ethtool` with `sysfs`) can only
    /// go with it: the pass reads both.
    pub fn select_excluding<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<Selection, SelectionError> {
        if names.is_empty() {
            return Ok(Selection::All);
        }
        let excluded = |name: &str| names.iter().any(|n| n.as_ref() == name);
        if let Some(unknown) = names.iter().find(|n| !KNOWN.contains(&n.as_ref())) {
            return Err(SelectionError::Unknown {
                name: unknown.as_ref().into(),
            });
        }
        let mut indices = Vec::new();
        for (index, collector) in self.list.iter().enumerate() {
            let pass: Vec<&'static str> = collector.all_names().collect();
            match pass.iter().find(|n| excluded(n)) {
                None => indices.push(index),
                Some(name) if !pass.iter().all(|n| excluded(n)) => {
                    return Err(SelectionError::SplitPass {
                        name: (*name).into(),
                        pass: pass.join(", "),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(Selection::Only(indices))
    }

    /// True when the selection runs the collector named `name`.
    pub fn selects(&self, selection: &Selection, name: &str) -> bool {
        self.list.iter().enumerate().any(|(index, c)| {
            c.name() == name
                && match selection {
                    Selection::All => true,
                    Selection::Only(indices) => indices.contains(&index),
                }
        })
    }

    /// Runs the selected collectors in order, then writes their success and duration (unless
    /// `self_metrics` is off: `/probe` answers for one switch, not for the exporter).
    pub fn encode(
        &self,
        selection: &Selection,
        self_metrics: bool,
        body: &mut BodyWriter,
    ) -> fmt::Result {
        let mut runs: Vec<(&'static str, bool, Duration)> = Vec::new();
        for (index, collector) in self.list.iter().enumerate() {
            if let Selection::Only(indices) = selection {
                if !indices.contains(&index) {
                    continue;
                }
            }
            let started = Instant::now();
            let mut out = Output {
                body: &mut *body,
                companion_runs: Vec::new(),
            };
            let outcome = collector.collect(&mut out)?;
            let companion_runs = out.companion_runs;
            let duration = outcome.duration.unwrap_or_else(|| started.elapsed());
            runs.push((collector.name(), outcome.ok, duration));
            runs.extend(companion_runs);
        }
        if !self_metrics {
            return Ok(());
        }
        body.write(&run_families(&runs));
        Ok(())
    }
}

impl dyn Collector {
    fn all_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        std::iter::once(self.name()).chain(self.companions().iter().copied())
    }
}

/// The framework's own families: one success and one duration sample per run.
fn run_families(runs: &[(&'static str, bool, Duration)]) -> Families<'static> {
    let mut families = Families::default();
    for &(name, ok, duration) in runs {
        let labels = vec![("collector", Cow::Borrowed(name))];
        families.gauge(
            "rdma_exporter_collector_success",
            "1 if the collector's last run succeeded (individual unreadable values are counted in rdma_exporter_read_errors_total instead).",
            labels.clone(),
            Value::U64(u64::from(ok)),
        );
        families.gauge(
            "rdma_exporter_collector_duration_seconds",
            "Duration of the collector's last run in seconds.",
            labels,
            Value::F64(duration.as_secs_f64()),
        );
    }
    families
}

/// One scrape: these collectors, this selection.
#[derive(Debug)]
pub struct Scrape {
    collectors: Arc<Collectors>,
    selection: Selection,
    self_metrics: bool,
}

impl Scrape {
    pub fn new(collectors: Arc<Collectors>, selection: Selection, self_metrics: bool) -> Scrape {
        Scrape {
            collectors,
            selection,
            self_metrics,
        }
    }

    /// The scrape's body in `format`: `head` (families of the exporter's own, each written as
    /// it is, in order), then the selected collectors' families and blocks.
    pub fn body(&self, format: Format, head: &[Families<'_>]) -> Result<Body, fmt::Error> {
        let mut body = BodyWriter::new(format);
        for families in head {
            body.write(families);
        }
        self.collectors
            .encode(&self.selection, self.self_metrics, &mut body)?;
        Ok(body.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::scrape_selected as encode;

    #[derive(Debug)]
    struct Fixed {
        name: &'static str,
        companions: &'static [&'static str],
        ok: bool,
    }

    impl Collector for Fixed {
        fn name(&self) -> &'static str {
            self.name
        }
        fn companions(&self) -> &'static [&'static str] {
            self.companions
        }
        fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, fmt::Error> {
            let mut families = Families::default();
            let family = format!("test_{}", self.name);
            families
                .add(
                    &family,
                    crate::exposition::Kind::Gauge,
                    "h",
                    vec![],
                    Value::U64(1),
                )
                .unwrap();
            out.encode(&families)?;
            for companion in self.companions {
                out.report(companion, true, Duration::from_millis(1));
            }
            Ok(Outcome::ok(self.ok))
        }
    }

    fn collectors() -> Collectors {
        Collectors::new(vec![
            Arc::new(Fixed {
                name: "nccl",
                companions: &[],
                ok: false,
            }),
            Arc::new(Fixed {
                name: "sysfs",
                companions: &["ethtool"],
                ok: true,
            }),
        ])
    }

    #[test]
    fn every_run_is_reported_once_in_known_order() {
        let text = encode(collectors(), Selection::All);
        let success: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("rdma_exporter_collector_success{"))
            .collect();
        assert_eq!(
            success,
            [
                r#"rdma_exporter_collector_success{collector="sysfs"} 1"#,
                r#"rdma_exporter_collector_success{collector="ethtool"} 1"#,
                r#"rdma_exporter_collector_success{collector="nccl"} 0"#,
            ]
        );
        assert_eq!(
            text.matches("# TYPE rdma_exporter_collector_success")
                .count(),
            1
        );
        assert!(text.contains("test_sysfs 1") && text.contains("test_nccl 1"));
    }

    #[test]
    fn selection_runs_only_the_named_collectors() {
        let set = collectors();
        let selection = set.select(&["ethtool"]).unwrap();
        assert!(set.selects(&selection, "sysfs"));
        assert!(!set.selects(&selection, "nccl"));
        let text = encode(set, selection);
        assert!(text.contains("test_sysfs 1"));
        assert!(!text.contains("test_nccl"), "{text}");
        assert!(!text.contains(r#"collector="nccl""#), "{text}");
    }

    #[test]
    fn unknown_and_disabled_names_are_refused_with_the_lists() {
        let set = collectors();
        let unknown = set.select(&["sysfs", "bogus"]).unwrap_err().to_string();
        assert!(unknown.contains("\"bogus\""), "{unknown}");
        assert!(unknown.contains(&KNOWN.join(", ")), "{unknown}");
        let disabled = set.select(&["switch"]).unwrap_err().to_string();
        assert!(
            disabled.contains("enabled collectors: sysfs, ethtool, nccl"),
            "{disabled}"
        );
        assert_eq!(set.select::<&str>(&[]).unwrap(), Selection::All);
    }

    #[test]
    fn exclusion_runs_every_other_enabled_collector() {
        let set = collectors();
        // `switch` is known but not enabled here: nothing to exclude, not an error.
        let selection = set.select_by(&[], &["nccl", "switch"]).unwrap();
        assert!(set.selects(&selection, "sysfs"));
        assert!(!set.selects(&selection, "nccl"));
        let text = encode(set, selection);
        assert!(text.contains("test_sysfs 1"), "{text}");
        assert!(text.contains(r#"collector="ethtool""#), "{text}");
        assert!(!text.contains(r#"collector="nccl""#), "{text}");
        let set = collectors();
        let whole_pass = set.select_by(&[], &["ethtool", "sysfs"]).unwrap();
        assert!(!set.selects(&whole_pass, "sysfs"));
        assert!(set.selects(&whole_pass, "nccl"));
    }

    #[test]
    fn bad_exclusions_are_refused() {
        let set = collectors();
        let unknown = set.select_by(&[], &["bogus"]).unwrap_err();
        assert!(
            matches!(unknown, SelectionError::Unknown { .. }),
            "{unknown}"
        );
        let split = set.select_by(&[], &["ethtool"]).unwrap_err().to_string();
        assert!(
            split.contains("\"ethtool\" runs in one pass with sysfs, ethtool"),
            "{split}"
        );
        assert_eq!(
            set.select_by(&["sysfs"], &["nccl"]),
            Err(SelectionError::Combined)
        );
        assert_eq!(set.select_by::<&str>(&[], &[]).unwrap(), Selection::All);
    }
}
