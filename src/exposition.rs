//! Metric families built fresh at each scrape and encoded with prometheus-client, plus content
//! negotiation between OpenMetrics and the Prometheus text format 0.0.4.

use std::borrow::Cow;
use std::collections::HashMap;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Exposed as `<base>_info ... 1`.
    Info,
    Untyped,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    U64(u64),
    F64(f64),
}

/// Label pairs of one sample; values borrow from the snapshot where they can, so a scrape does
/// not copy every device name once per series.
pub type Labels<'a> = Vec<(&'static str, Cow<'a, str>)>;

#[derive(Debug)]
struct Family<'a> {
    base: String,
    exposed: String,
    help: Cow<'static, str>,
    kind: Kind,
    samples: Vec<(Labels<'a>, Value)>,
}

/// Metric families of one scrape. Encoded sorted by exposed name (`_total`/`_info` included), so
/// output is deterministic and a counter `x_total` can never merge with a gauge `x`.
#[derive(Debug, Default)]
pub struct Families<'a> {
    families: Vec<Family<'a>>,
    /// Base name -> family index per kind: lookups by `&str` allocate nothing.
    by_base: HashMap<String, [Option<usize>; 4]>,
    /// Exposed names already taken, to refuse a second family under the same name.
    exposed: HashMap<String, usize>,
}

/// A sample was dropped because its family already exists with another type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metric {0} already exists with another type")]
pub struct TypeConflict(pub String);

impl Kind {
    fn slot(self) -> usize {
        match self {
            Kind::Counter => 0,
            Kind::Gauge => 1,
            Kind::Info => 2,
            Kind::Untyped => 3,
        }
    }
}

impl<'a> Families<'a> {
    /// The name a family of `kind` with base name `base` is exposed under.
    pub fn exposed_name(base: &str, kind: Kind) -> String {
        match kind {
            Kind::Counter => format!("{base}_total"),
            Kind::Info => format!("{base}_info"),
            Kind::Gauge | Kind::Untyped => base.to_string(),
        }
    }

    pub fn add(
        &mut self,
        base: &str,
        kind: Kind,
        help: impl Into<Cow<'static, str>>,
        labels: Labels<'a>,
        value: Value,
    ) -> Result<(), TypeConflict> {
        let existing = self.by_base.get(base).and_then(|slots| slots[kind.slot()]);
        let index = match existing {
            Some(index) => index,
            None => self.create(base, kind, help.into())?,
        };
        self.families[index].samples.push((labels, value));
        Ok(())
    }

    fn create(
        &mut self,
        base: &str,
        kind: Kind,
        help: Cow<'static, str>,
    ) -> Result<usize, TypeConflict> {
        let exposed = Self::exposed_name(base, kind);
        if self.exposed.contains_key(&exposed) {
            return Err(TypeConflict(exposed));
        }
        let index = self.families.len();
        self.exposed.insert(exposed.clone(), index);
        self.by_base.entry(base.to_string()).or_default()[kind.slot()] = Some(index);
        self.families.push(Family {
            base: base.to_string(),
            exposed,
            help,
            kind,
            samples: Vec::new(),
        });
        Ok(index)
    }

    pub fn counter(&mut self, base: &str, help: &'static str, labels: Labels<'a>, value: Value) {
        // Static names never conflict; a conflict here is a programming error caught by tests.
        let added = self.add(base, Kind::Counter, help, labels, value);
        debug_assert!(added.is_ok(), "{added:?}");
    }

    pub fn gauge(&mut self, base: &str, help: &'static str, labels: Labels<'a>, value: Value) {
        let added = self.add(base, Kind::Gauge, help, labels, value);
        debug_assert!(added.is_ok(), "{added:?}");
    }

    pub fn contains(&self, exposed: &str) -> bool {
        self.exposed.contains_key(exposed)
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// Encodes every family, sorted by exposed name.
    pub fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut order: Vec<&Family> = self.families.iter().collect();
        order.sort_by(|a, b| a.exposed.cmp(&b.exposed));
        for family in order {
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
                Kind::Untyped => MetricType::Unknown,
            };
            let mut metric =
                encoder.encode_descriptor(&family.base, &family.help, None, metric_type)?;
            for (labels, value) in &family.samples {
                match family.kind {
                    Kind::Info => metric.encode_info(labels)?,
                    Kind::Counter => {
                        let sample = metric.encode_family(labels)?;
                        match *value {
                            Value::U64(v) => ConstCounter::new(v).encode(sample)?,
                            Value::F64(v) => ConstCounter::new(v).encode(sample)?,
                        }
                    }
                    Kind::Gauge | Kind::Untyped => {
                        let sample = metric.encode_family(labels)?;
                        match *value {
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

/// Exposition formats a scraper can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    PrometheusText,
}

impl Format {
    /// Picks OpenMetrics when the `Accept` header asks for it, as Prometheus does by default;
    /// everything else (curl, browsers, old scrapers) gets text 0.0.4.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }

    pub fn encode(self, registry: &Registry) -> Result<String, std::fmt::Error> {
        let mut body = String::with_capacity(64 * 1024);
        match self {
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut body, registry)?,
            Format::PrometheusText => {
                prometheus_client::encoding::prometheus_text::encode(&mut body, registry)?
            }
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes_driver_names() {
        assert_eq!(sanitize_name_part("VL15_dropped"), "vl15_dropped");
        assert_eq!(sanitize_name_part("SDMAIdInt1,32"), "sdmaidint1_32");
        assert_eq!(sanitize_name_part("vport_rx-bytes"), "vport_rx_bytes");
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
            .add("y", Kind::Counter, "h", vec![], Value::U64(1))
            .unwrap();
        assert!(families
            .add("y_total", Kind::Gauge, "h", vec![], Value::U64(1))
            .is_err());
        // A counter `x` is exposed as `x_total`: a different family.
        families
            .add("x", Kind::Counter, "h", vec![], Value::U64(1))
            .unwrap();
        assert_eq!(families.len(), 3);
    }

    #[test]
    fn negotiation() {
        assert_eq!(Format::negotiate(None), Format::PrometheusText);
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("text/plain")),
            Format::PrometheusText
        );
    }
}
