//! Metric families built at each scrape (or recycled from the last one: `Families::recycle`) and
//! written by the exporter's own writer (`text.rs`, byte for byte prometheus-client's) in
//! OpenMetrics or the Prometheus text format 0.0.4 (which one a scraper gets: `web::negotiate`).

use std::borrow::Cow;
use std::sync::Arc;

use rustc_hash::FxHashMap;

pub mod body;
pub mod gzip;
mod text;

pub use text::{escape_label_value, header};

pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Exposed as `<base>_info ... 1`.
    Info,
    Untyped,
    /// Each sample a [`HistogramValue`] (`<base>_bucket`, `_sum`, `_count`).
    Histogram,
}

/// One histogram sample: counts per bucket (not cumulative), the last bucket's bound
/// `f64::INFINITY` (written `+Inf`), the sum and the count.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    U64(u64),
    F64(f64),
}

/// One label pair; the value borrows from the snapshot where it can, so a scrape does not copy
/// every device name once per series.
pub type Label<'a> = (&'static str, Cow<'a, str>);

/// Label pairs of one sample.
pub type Labels<'a> = Vec<Label<'a>>;

/// Label pairs that many samples share (a port's `device` and `port`), rendered once a scrape
/// by [`Families::block`] instead of once a sample: a node scrape writes a thousand samples of a
/// dozen ports. A sample's own labels follow its block's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelBlock(usize);

/// The blocks of one scrape.
#[derive(Debug, Default)]
struct Blocks<'a> {
    /// Each block's pairs as the writer writes them (`device="mlx5_0",port="1"`), one block
    /// after another.
    text: Vec<u8>,
    /// The pairs themselves, for [`Families::samples`] and the reference encoder.
    labels: Vec<Label<'a>>,
    /// Each block: where its text and its labels end.
    ends: Vec<(usize, usize)>,
}

impl<'a> Blocks<'a> {
    fn starts(&self, block: LabelBlock) -> (usize, usize) {
        match block.0.checked_sub(1) {
            Some(before) => self.ends[before],
            None => (0, 0),
        }
    }

    fn text(&self, block: LabelBlock) -> &[u8] {
        let (start, _) = self.starts(block);
        &self.text[start..self.ends[block.0].0]
    }

    fn labels(&self, block: LabelBlock) -> &[Label<'a>] {
        let (_, start) = self.starts(block);
        &self.labels[start..self.ends[block.0].1]
    }

    fn recycle<'b>(self) -> Blocks<'b> {
        let mut text = self.text;
        text.clear();
        let mut ends = self.ends;
        ends.clear();
        Blocks {
            text,
            labels: emptied(self.labels),
            ends,
        }
    }
}

/// `labels` emptied and retyped for another scrape's lifetime: collected in place, the same
/// allocation.
fn emptied<'b>(mut labels: Vec<Label<'_>>) -> Vec<Label<'b>> {
    labels.clear();
    labels
        .into_iter()
        .map(|_| unreachable!("cleared"))
        .collect()
}

/// One sample: where its own labels end in its family's `labels`, its block, its value.
#[derive(Debug, Clone, Copy)]
struct Sample {
    labels_end: usize,
    block: Option<LabelBlock>,
    value: Value,
}

#[derive(Debug)]
struct Family<'a> {
    /// The exposed name (`_total`/`_info` included); also the key of [`Families::exposed`].
    exposed: Arc<str>,
    help: Cow<'static, str>,
    kind: Kind,
    /// Every sample's own labels, one sample after another: one buffer per family that grows,
    /// instead of a vector per sample (a node scrape has about a thousand samples).
    labels: Vec<Label<'a>>,
    samples: Vec<Sample>,
    /// A histogram family's samples, `Value::U64(i)` indexing them.
    histograms: Vec<HistogramValue>,
}

impl<'a> Family<'a> {
    /// The name prometheus-client is given: it appends `_total`/`_info` itself.
    #[cfg(test)]
    fn base(&self) -> &str {
        &self.exposed[..self.exposed.len() - self.kind.suffix().len()]
    }

    /// This family without its samples, for another scrape: the name, help and kind stay, and
    /// so does the buffers' capacity (the labels' buffer is collected in place: the same
    /// allocation, retyped for the new lifetime).
    fn recycle<'b>(self) -> Family<'b> {
        let mut samples = self.samples;
        samples.clear();
        let mut histograms = self.histograms;
        histograms.clear();
        Family {
            exposed: self.exposed,
            help: self.help,
            kind: self.kind,
            labels: emptied(self.labels),
            samples,
            histograms,
        }
    }

    fn has_samples(&self) -> bool {
        !self.samples.is_empty()
    }

    /// Each sample's block, own labels and value.
    fn samples(&self) -> impl Iterator<Item = (Option<LabelBlock>, &[Label<'a>], Value)> {
        let mut start = 0;
        self.samples.iter().map(move |sample| {
            let labels = &self.labels[start..sample.labels_end];
            start = sample.labels_end;
            (sample.block, labels, sample.value)
        })
    }
}

/// Metric families of one scrape. Encoded sorted by exposed name (`_total`/`_info` included), so
/// output is deterministic and a counter `x_total` can never merge with a gauge `x`. A family
/// exists once it has a sample; [`Families::recycle`] keeps the families of one scrape, empty,
/// for the next, and a family that gets no sample there is not written.
///
/// Families are named by their exposed name (`rdma_pfc_pause_frames_total`, `rdma_port_info`)
/// where they are produced, so that grep finds the producer of any name a scraper sees.
#[derive(Debug, Default)]
pub struct Families<'a> {
    families: Vec<Family<'a>>,
    /// Exposed name -> family index: lookups by `&str` allocate nothing, and a second family
    /// under a taken name is refused.
    /// Keys are the exporter's own metric names (hashed once per sample: Fx, not SipHash).
    exposed: FxHashMap<Arc<str>, usize>,
    /// Family indices sorted by exposed name: the order they are written in.
    order: Vec<usize>,
    blocks: Blocks<'a>,
}

/// Why a sample was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FamilyError {
    /// The family already exists with another type.
    #[error("metric {0} already exists with another type")]
    TypeConflict(String),
    /// A counter not named `..._total`, or an info not named `..._info`: a programming error.
    #[error("metric {name}: a {kind:?} family's name must end in {suffix:?}")]
    MissingSuffix {
        name: String,
        kind: Kind,
        suffix: &'static str,
    },
}

impl Kind {
    /// What the exposed name of a family of this kind ends with.
    pub fn suffix(self) -> &'static str {
        match self {
            Kind::Counter => "_total",
            Kind::Info => "_info",
            Kind::Gauge | Kind::Untyped | Kind::Histogram => "",
        }
    }
}

/// The name prometheus-client is given for a family exposed as `exposed`: it appends `_total` to
/// counters and `_info` to info metrics itself.
pub fn base_name(exposed: &str, kind: Kind) -> Result<&str, FamilyError> {
    let suffix = kind.suffix();
    exposed
        .strip_suffix(suffix)
        .filter(|base| !base.is_empty())
        .ok_or_else(|| FamilyError::MissingSuffix {
            name: exposed.to_string(),
            kind,
            suffix,
        })
}

impl<'a> Families<'a> {
    /// These families emptied of their samples, for the next scrape (whose samples borrow from
    /// another snapshot): a scrape like the last one then creates no family and grows no
    /// buffer, where it made hundreds of allocations.
    pub fn recycle<'b>(self) -> Families<'b> {
        Families {
            // Collected in place: the same allocation.
            families: self.families.into_iter().map(Family::recycle).collect(),
            exposed: self.exposed,
            order: self.order,
            blocks: self.blocks.recycle(),
        }
    }

    /// `labels` rendered once, for the samples of [`Families::add_in`] that share them.
    pub fn block(&mut self, labels: impl IntoIterator<Item = Label<'a>>) -> LabelBlock {
        let blocks = &mut self.blocks;
        let start = blocks.labels.len();
        blocks.labels.extend(labels);
        let mut first = true;
        for (key, value) in &blocks.labels[start..] {
            text::push_pair(&mut blocks.text, &mut first, key, value);
        }
        blocks.ends.push((blocks.text.len(), blocks.labels.len()));
        LabelBlock(blocks.ends.len() - 1)
    }

    /// Adds one sample to the family exposed as `exposed` (`..._total` for a counter, `..._info`
    /// for an info), creating the family on its first sample.
    pub fn add(
        &mut self,
        exposed: &str,
        kind: Kind,
        help: impl Into<Cow<'static, str>>,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) -> Result<(), FamilyError> {
        self.push(exposed, kind, help, None, labels, value)
    }

    /// [`Families::add`] for a sample whose labels are `block`'s, then `labels`.
    pub fn add_in(
        &mut self,
        exposed: &str,
        kind: Kind,
        help: impl Into<Cow<'static, str>>,
        block: LabelBlock,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) -> Result<(), FamilyError> {
        self.push(exposed, kind, help, Some(block), labels, value)
    }

    fn push(
        &mut self,
        exposed: &str,
        kind: Kind,
        help: impl Into<Cow<'static, str>>,
        block: Option<LabelBlock>,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) -> Result<(), FamilyError> {
        let index = match self.exposed.get(exposed) {
            Some(&index) if self.families[index].kind == kind => {
                let family = &mut self.families[index];
                if !family.has_samples() {
                    // Kept from an earlier scrape: this scrape's first sample sets the help.
                    family.help = help.into();
                }
                index
            }
            // A family kept empty from an earlier scrape takes this scrape's kind.
            Some(&index) if !self.families[index].has_samples() => {
                base_name(exposed, kind)?;
                let family = &mut self.families[index];
                family.kind = kind;
                family.help = help.into();
                index
            }
            Some(_) => return Err(FamilyError::TypeConflict(exposed.to_string())),
            None => self.create(exposed, kind, help.into())?,
        };
        let family = &mut self.families[index];
        family.labels.extend(labels);
        family.samples.push(Sample {
            labels_end: family.labels.len(),
            block,
            value,
        });
        Ok(())
    }

    fn create(
        &mut self,
        exposed: &str,
        kind: Kind,
        help: Cow<'static, str>,
    ) -> Result<usize, FamilyError> {
        base_name(exposed, kind)?;
        let index = self.families.len();
        let at = self
            .order
            .partition_point(|&i| *self.families[i].exposed < *exposed);
        self.order.insert(at, index);
        let exposed: Arc<str> = Arc::from(exposed);
        self.exposed.insert(exposed.clone(), index);
        self.families.push(Family {
            exposed,
            help,
            kind,
            labels: Vec::new(),
            samples: Vec::new(),
            histograms: Vec::new(),
        });
        Ok(index)
    }

    /// A sample of a counter family; `exposed` ends in `_total`.
    pub fn counter(
        &mut self,
        exposed: &str,
        help: &'static str,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) {
        self.push_known(exposed, Kind::Counter, help, None, labels, value);
    }

    /// [`Families::counter`] in `block`.
    pub fn counter_in(
        &mut self,
        exposed: &str,
        help: &'static str,
        block: LabelBlock,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) {
        self.push_known(exposed, Kind::Counter, help, Some(block), labels, value);
    }

    pub fn gauge(
        &mut self,
        exposed: &str,
        help: &'static str,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) {
        self.push_known(exposed, Kind::Gauge, help, None, labels, value);
    }

    /// [`Families::gauge`] in `block`.
    pub fn gauge_in(
        &mut self,
        exposed: &str,
        help: &'static str,
        block: LabelBlock,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) {
        self.push_known(exposed, Kind::Gauge, help, Some(block), labels, value);
    }

    /// A sample of a family the exporter names itself: static names never conflict, so a
    /// conflict here is a programming error, caught by tests.
    fn push_known(
        &mut self,
        exposed: &str,
        kind: Kind,
        help: &'static str,
        block: Option<LabelBlock>,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: Value,
    ) {
        let added = self.push(exposed, kind, help, block, labels, value);
        debug_assert!(added.is_ok(), "{added:?}");
    }

    /// An info series (value 1); `exposed` ends in `_info`.
    pub fn info(
        &mut self,
        exposed: &str,
        help: &'static str,
        labels: impl IntoIterator<Item = Label<'a>>,
    ) {
        self.push_known(exposed, Kind::Info, help, None, labels, Value::U64(1));
    }

    /// A sample of a histogram family.
    pub fn histogram(
        &mut self,
        exposed: &str,
        help: &'static str,
        labels: impl IntoIterator<Item = Label<'a>>,
        value: HistogramValue,
    ) {
        let index = match self.exposed.get(exposed) {
            Some(&index) => self.families[index].histograms.len(),
            None => 0,
        };
        let added = self.add(
            exposed,
            Kind::Histogram,
            help,
            labels,
            Value::U64(index as u64),
        );
        debug_assert!(added.is_ok(), "{added:?}");
        if added.is_ok() {
            let family = self.exposed[exposed];
            self.families[family].histograms.push(value);
        }
    }

    /// The labels of the last sample added to the family exposed as `exposed`.
    pub fn last_labels(&self, exposed: &str) -> Option<Cow<'_, [Label<'a>]>> {
        let (last, own) = self.last_sample(exposed)?;
        Some(self.labels_of(last.block, own))
    }

    /// The block of the last sample added to the family exposed as `exposed`, when that sample
    /// has no labels of its own.
    pub fn last_block(&self, exposed: &str) -> Option<LabelBlock> {
        let (last, own) = self.last_sample(exposed)?;
        last.block.filter(|_| own.is_empty())
    }

    /// The last sample of the family exposed as `exposed`, with its own labels.
    fn last_sample(&self, exposed: &str) -> Option<(Sample, &[Label<'a>])> {
        let family = &self.families[*self.exposed.get(exposed)?];
        let last = *family.samples.last()?;
        let start = family
            .samples
            .iter()
            .rev()
            .nth(1)
            .map_or(0, |s| s.labels_end);
        Some((last, &family.labels[start..last.labels_end]))
    }

    /// A sample's whole label set: its block's, then its own.
    fn labels_of<'s>(
        &'s self,
        block: Option<LabelBlock>,
        own: &'s [Label<'a>],
    ) -> Cow<'s, [Label<'a>]> {
        match block {
            None => Cow::Borrowed(own),
            Some(block) => Cow::Owned(
                self.blocks
                    .labels(block)
                    .iter()
                    .chain(own)
                    .cloned()
                    .collect(),
            ),
        }
    }

    /// Whether the family exposed as `exposed` has a sample.
    pub fn contains(&self, exposed: &str) -> bool {
        self.exposed
            .get(exposed)
            .is_some_and(|&i| self.families[i].has_samples())
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        !self.families.iter().any(Family::has_samples)
    }

    /// Every sample as (exposed name, labels, value), families in the order they were created.
    pub fn samples(&self) -> impl Iterator<Item = (&str, Cow<'_, [Label<'a>]>, Value)> {
        self.families.iter().flat_map(move |family| {
            family.samples().map(move |(block, labels, value)| {
                (&*family.exposed, self.labels_of(block, labels), value)
            })
        })
    }

    /// For unit tests: each sample as `name{key=value,...} value`, in the order added.
    #[cfg(test)]
    pub fn sample_lines(&self) -> Vec<String> {
        self.samples()
            .map(|(name, labels, value)| {
                let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let value = match value {
                    Value::U64(v) => v.to_string(),
                    Value::F64(v) => v.to_string(),
                };
                format!("{name}{{{}}} {value}", labels.join(","))
            })
            .collect()
    }

    /// Encodes every family, sorted by exposed name, with prometheus-client: the reference
    /// [`Families::write`] is compared with.
    #[cfg(test)]
    pub fn encode_with_prometheus_client(
        &self,
        encoder: &mut prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;
        let mut order: Vec<&Family> = self.families.iter().filter(|f| f.has_samples()).collect();
        order.sort_by(|a, b| a.exposed.cmp(&b.exposed));
        for family in order {
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
                Kind::Untyped => MetricType::Unknown,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric =
                encoder.encode_descriptor(family.base(), &family.help, None, metric_type)?;
            for (block, labels, value) in family.samples() {
                let labels = self.labels_of(block, labels);
                let labels: &[Label] = &labels;
                match family.kind {
                    Kind::Info => metric.encode_info(&labels)?,
                    Kind::Counter => {
                        let sample = metric.encode_family(&labels)?;
                        match value {
                            Value::U64(v) => ConstCounter::new(v).encode(sample)?,
                            Value::F64(v) => ConstCounter::new(v).encode(sample)?,
                        }
                    }
                    Kind::Histogram => {
                        let Value::U64(index) = value else {
                            continue;
                        };
                        let h = &family.histograms[index as usize];
                        let mut sample = metric.encode_family(&labels)?;
                        sample.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                            h.sum, h.count, &h.buckets, None,
                        )?;
                    }
                    Kind::Gauge | Kind::Untyped => {
                        let sample = metric.encode_family(&labels)?;
                        match value {
                            Value::U64(v) => ConstGauge::new(v).encode(sample)?,
                            Value::F64(v) => ConstGauge::new(v).encode(sample)?,
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Lowercases and replaces every character outside `[a-z0-9_]` with `_`, so that driver counter
/// names (`SDMAIdInt1,32`, `VL15_dropped`) become valid metric name parts.
pub fn sanitize_name_part(raw: &str) -> String {
    raw.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect()
}

/// Exposition formats a scraper can ask for (chosen by `web::negotiate::format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    PrometheusText,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The families as prometheus-client encodes them (OpenMetrics without its `# EOF`): the
/// reference the exposition writer's bytes are compared with.
#[cfg(test)]
pub fn prometheus_client_text(families: Families<'static>, format: Format) -> String {
    #[derive(Debug)]
    struct Once(Families<'static>);
    impl prometheus_client::collector::Collector for Once {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> std::fmt::Result {
            self.0.encode_with_prometheus_client(&mut encoder)
        }
    }
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Once(families)));
    let mut text = String::new();
    match format {
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode(&mut text, &registry)
                .expect("encoding into a String");
            text.truncate(text.len() - "# EOF\n".len());
        }
        Format::PrometheusText => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
                .expect("encoding into a String")
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recycled families keep their buffers, write only the families that get a sample again,
    /// and write those as fresh families would.
    #[test]
    fn recycled_families_keep_their_buffers_and_write_only_what_gets_samples() {
        let first_device = String::from("mlx5_0");
        let mut families = Families::default();
        for port in ["1", "2"] {
            let labels = [
                ("device", Cow::Borrowed(first_device.as_str())),
                ("port", Cow::Borrowed(port)),
            ];
            families.counter("rdma_x_total", "X.", labels, Value::U64(1));
        }
        families.gauge("rdma_b", "B.", [], Value::U64(2));
        let buffer = families.families[0].labels.as_ptr() as usize;
        let capacity = families.families[0].labels.capacity();
        assert!(capacity >= 4);

        let second_device = String::from("mlx5_1");
        let mut next: Families<'_> = families.recycle();
        drop(first_device);
        assert_eq!(next.families[0].labels.as_ptr() as usize, buffer);
        assert_eq!(next.families[0].labels.capacity(), capacity);
        assert!(next.is_empty());
        assert_eq!(next.samples().count(), 0);
        assert!(!next.contains("rdma_x_total"));
        assert_eq!(next.text(Format::PrometheusText), "");

        let labels = [("device", Cow::Borrowed(second_device.as_str()))];
        next.counter("rdma_x_total", "X again.", labels.clone(), Value::U64(3));
        // A family kept empty may come back as another kind.
        next.add("rdma_b", Kind::Untyped, "B untyped.", [], Value::U64(4))
            .unwrap();
        next.gauge("rdma_a", "A.", [], Value::U64(5));
        let mut fresh = Families::default();
        fresh.counter("rdma_x_total", "X again.", labels, Value::U64(3));
        fresh
            .add("rdma_b", Kind::Untyped, "B untyped.", [], Value::U64(4))
            .unwrap();
        fresh.gauge("rdma_a", "A.", [], Value::U64(5));
        for format in [Format::OpenMetrics, Format::PrometheusText] {
            assert_eq!(next.text(format), fresh.text(format));
        }
        assert!(next
            .text(Format::PrometheusText)
            .starts_with("# HELP rdma_a A."));
        // Once it has a sample again, its kind holds.
        assert!(matches!(
            next.add("rdma_b", Kind::Gauge, "B.", [], Value::U64(6)),
            Err(FamilyError::TypeConflict(_))
        ));
    }

    /// A histogram sample is written byte for byte as prometheus-client writes its own
    /// `Histogram` with the same observations, in both formats.
    #[test]
    fn histograms_encode_as_prometheus_clients_own() {
        use prometheus_client::metrics::histogram::Histogram;

        let bounds = [0.001, 0.01];
        let observations = [0.0005, 0.002, 0.003, 5.0];
        let theirs = Histogram::new(bounds);
        for v in observations {
            theirs.observe(v);
        }
        let mut reference = prometheus_client::registry::Registry::default();
        // register() ends the help with a period.
        reference.register("probe_rtt_seconds", "Round trips", theirs);

        let mut families = Families::default();
        families.histogram(
            "probe_rtt_seconds",
            "Round trips.",
            [],
            HistogramValue {
                buckets: vec![(0.001, 1), (0.01, 2), (f64::INFINITY, 1)],
                sum: observations.iter().sum(),
                count: 4,
            },
        );
        for format in [Format::OpenMetrics, Format::PrometheusText] {
            let mut expected = String::new();
            match format {
                Format::OpenMetrics => {
                    prometheus_client::encoding::text::encode(&mut expected, &reference).unwrap();
                    expected.truncate(expected.len() - "# EOF\n".len());
                }
                Format::PrometheusText => {
                    prometheus_client::encoding::prometheus_text::encode(&mut expected, &reference)
                        .unwrap()
                }
            }
            assert!(
                expected.contains("probe_rtt_seconds_bucket{le=\"+Inf\"} 4"),
                "{expected}"
            );
            assert_eq!(families.text(format), expected);
        }
    }

    #[test]
    fn sanitizes_driver_names() {
        assert_eq!(sanitize_name_part("VL15_dropped"), "vl15_dropped");
        assert_eq!(sanitize_name_part("SDMAIdInt1,32"), "sdmaidint1_32");
        assert_eq!(sanitize_name_part("vport_rx-bytes"), "vport_rx_bytes");
    }

    #[test]
    fn a_recycled_scrape_gives_the_same_samples_without_growing() {
        let build = |families: &mut Families<'static>| {
            for port in ["1", "2", "3"] {
                let labels = [
                    ("device", Cow::Borrowed("d0")),
                    ("port", Cow::Borrowed(port)),
                ];
                families.counter("a_total", "h", labels, Value::U64(1));
            }
            families.gauge("b", "h", [], Value::U64(2));
        };
        let all = |f: &Families| {
            f.samples()
                .map(|(n, l, v)| format!("{n}{l:?}{v:?}"))
                .collect::<Vec<_>>()
        };
        let mut first = Families::default();
        build(&mut first);
        let first_samples = all(&first);
        let mut second = first.recycle();
        let capacity = |f: &Families| {
            let a = &f.families[f.exposed["a_total"]];
            (a.labels.capacity(), a.samples.capacity())
        };
        let kept = capacity(&second);
        assert!(kept.0 >= 6 && kept.1 >= 3, "{kept:?}");
        build(&mut second);
        assert_eq!(capacity(&second), kept);
        assert_eq!(all(&second), first_samples);
        assert_eq!(
            second.last_labels("a_total").as_deref(),
            Some(
                &[
                    ("device", Cow::Borrowed("d0")),
                    ("port", Cow::Borrowed("3"))
                ][..]
            )
        );
    }

    #[test]
    fn blocks_are_a_scrape_s_own_and_give_the_labels_they_were_made_of() {
        let build = |families: &mut Families<'static>| {
            for port in ["1", "2"] {
                let block = families.block([
                    ("device", Cow::Borrowed("d0")),
                    ("port", Cow::Borrowed(port)),
                ]);
                families.counter_in("a_total", "h", block, [], Value::U64(1));
                let own = [("priority", Cow::Borrowed("3"))];
                families.counter_in("b_total", "h", block, own, Value::U64(2));
                assert_eq!(families.last_block("a_total"), Some(block));
                assert_eq!(families.last_block("b_total"), None, "own labels too");
            }
        };
        let mut first = Families::default();
        build(&mut first);
        let text = first.text(Format::PrometheusText);
        assert!(
            text.contains("a_total{device=\"d0\",port=\"2\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("b_total{device=\"d0\",port=\"1\",priority=\"3\"} 2\n"));
        let labels: Vec<_> = first.samples().map(|(_, l, _)| l.into_owned()).collect();
        assert_eq!(
            labels[3],
            [
                ("device", Cow::Borrowed("d0")),
                ("port", Cow::Borrowed("2")),
                ("priority", Cow::Borrowed("3"))
            ]
        );
        let mut second = first.recycle();
        assert!(second.blocks.ends.is_empty() && second.blocks.text.is_empty());
        let kept = second.blocks.text.capacity();
        build(&mut second);
        assert_eq!(second.text(Format::PrometheusText), text);
        assert_eq!(second.blocks.text.capacity(), kept);
    }

    #[test]
    fn type_conflict_is_refused() {
        let mut families = Families::default();
        families
            .add("x", Kind::Gauge, "h", vec![], Value::U64(1))
            .unwrap();
        assert!(families
            .add("x", Kind::Untyped, "h", vec![], Value::U64(1))
            .is_err());
        // A gauge named like a counter's exposed name is refused too.
        families
            .add("y_total", Kind::Counter, "h", vec![], Value::U64(1))
            .unwrap();
        assert_eq!(
            families.add("y_total", Kind::Gauge, "h", vec![], Value::U64(1)),
            Err(FamilyError::TypeConflict("y_total".into()))
        );
        // A counter `x_total` is a different family from the gauge `x`.
        families
            .add("x_total", Kind::Counter, "h", vec![], Value::U64(1))
            .unwrap();
        assert_eq!(families.len(), 3);
    }

    #[test]
    fn counters_and_infos_are_named_with_their_suffix() {
        let mut families = Families::default();
        for (name, kind) in [
            ("c", Kind::Counter),
            ("i", Kind::Info),
            ("_total", Kind::Counter),
        ] {
            assert!(
                matches!(
                    families.add(name, kind, "h", vec![], Value::U64(1)),
                    Err(FamilyError::MissingSuffix { .. })
                ),
                "{name}"
            );
        }
        assert!(families.is_empty());
        assert_eq!(base_name("a_total", Kind::Counter), Ok("a"));
        assert_eq!(base_name("a_info", Kind::Info), Ok("a"));
        assert_eq!(base_name("a_total", Kind::Gauge), Ok("a_total"));
    }
}
