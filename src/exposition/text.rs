//! The exposition text of [`Families`], written straight into the body's buffer in either
//! format: byte for byte what prometheus-client 0.26 writes for the same families (the tests
//! compare the two on every kind, label escaping, non-finite values and histograms), without
//! its per-label `fmt::Write` calls and dynamic dispatch, which took a fifth of a node scrape's
//! CPU.
//!
//! What differs between the formats, as prometheus-client writes them:
//! - HELP and TYPE name the family by its base name in OpenMetrics (`x`, type `counter`), by its
//!   exposed name in text 0.0.4 (`x_total`); an info family is a gauge there, and an untyped one
//!   `untyped` (OpenMetrics: `unknown`);
//! - text 0.0.4 escapes `\` and newlines in HELP; OpenMetrics writes HELP as it is;
//! - a non-finite float is `+Inf`/`-Inf`/`NaN` in text 0.0.4 and `inf`/`-inf`/`NaN` in
//!   OpenMetrics (dtoa's spelling);
//! - a histogram is `_sum`, `_count`, then the buckets with `le` first among the labels in
//!   OpenMetrics; the buckets (`le` last, Go's float spelling), `_sum`, `_count` in text 0.0.4.

use std::borrow::Cow;

use super::{Blocks, Families, Family, Format, HistogramValue, Kind, Label, Value};

impl Families<'_> {
    /// Appends every family, sorted by exposed name, in `format`.
    pub fn write(&self, format: Format, out: &mut Vec<u8>) {
        let written = self.order.iter().map(|&i| &self.families[i]);
        for family in written.filter(|f| f.has_samples()) {
            write_family(family, &self.blocks, format, out);
        }
    }

    /// The families' text in `format`, for tests and small bodies.
    pub fn text(&self, format: Format) -> String {
        let mut out = Vec::new();
        self.write(format, &mut out);
        String::from_utf8(out).expect("the exposition is UTF-8: names and labels are str")
    }
}

fn write_family(family: &Family, blocks: &Blocks, format: Format, out: &mut Vec<u8>) {
    header(out, format, &family.exposed, family.kind, &family.help);
    for (block, labels, value) in family.samples() {
        let labels = Labelled {
            block: block.map_or(&[][..], |b| blocks.text(b)),
            own: labels,
        };
        match family.kind {
            Kind::Histogram => {
                let Value::U64(index) = value else { continue };
                if let Some(histogram) = family.histograms.get(index as usize) {
                    write_histogram(out, format, &family.exposed, labels, histogram);
                }
            }
            _ => {
                series(out, &family.exposed, "", labels, None);
                out.push(b' ');
                write_value(out, format, value);
                out.push(b'\n');
            }
        }
    }
}

/// The HELP and TYPE lines of a family exposed as `exposed`.
pub fn header(out: &mut Vec<u8>, format: Format, exposed: &str, kind: Kind, help: &str) {
    let (name, type_name) = match format {
        Format::OpenMetrics => (
            &exposed[..exposed.len() - kind.suffix().len()],
            match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Info => "info",
                Kind::Untyped => "unknown",
                Kind::Histogram => "histogram",
            },
        ),
        Format::PrometheusText => (
            exposed,
            match kind {
                Kind::Counter => "counter",
                Kind::Gauge | Kind::Info => "gauge",
                Kind::Untyped => "untyped",
                Kind::Histogram => "histogram",
            },
        ),
    };
    out.extend_from_slice(b"# HELP ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    match format {
        Format::OpenMetrics => out.extend_from_slice(help.as_bytes()),
        Format::PrometheusText => escape_help(out, help),
    }
    out.extend_from_slice(b"\n# TYPE ");
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(type_name.as_bytes());
    out.push(b'\n');
}

/// A sample's labels: its block's pairs, written once a scrape (`device="d",port="1"`), then
/// its own.
#[derive(Clone, Copy)]
struct Labelled<'s, 'a> {
    block: &'s [u8],
    own: &'s [Label<'a>],
}

/// `key="value"` (the value escaped), after a comma unless it is the `first` pair.
pub(super) fn push_pair(out: &mut Vec<u8>, first: &mut bool, key: &str, value: &str) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"=\"");
    out.extend_from_slice(escape_label_value(value).as_bytes());
    out.push(b'"');
}

/// `name` `suffix` `{labels}`; `le`, a histogram bucket's bound, goes first among the labels in
/// OpenMetrics and last in text 0.0.4 (the format given with it).
fn series(
    out: &mut Vec<u8>,
    name: &str,
    suffix: &str,
    labels: Labelled<'_, '_>,
    le: Option<(&str, Format)>,
) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(suffix.as_bytes());
    if labels.block.is_empty() && labels.own.is_empty() && le.is_none() {
        return;
    }
    out.push(b'{');
    let mut first = true;
    if let Some((bound, Format::OpenMetrics)) = le {
        push_pair(out, &mut first, "le", bound);
    }
    if !labels.block.is_empty() {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(labels.block);
    }
    for (key, value) in labels.own {
        push_pair(out, &mut first, key, value);
    }
    if let Some((bound, Format::PrometheusText)) = le {
        push_pair(out, &mut first, "le", bound);
    }
    out.push(b'}');
}

fn write_value(out: &mut Vec<u8>, format: Format, value: Value) {
    match value {
        Value::U64(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
        Value::F64(v) => write_float(out, format, v),
    }
}

fn write_float(out: &mut Vec<u8>, format: Format, v: f64) {
    let mut buffer = dtoa::Buffer::new();
    let text = match format {
        // dtoa spells the non-finite values `inf`, `-inf` and `NaN`.
        Format::OpenMetrics => buffer.format(v),
        Format::PrometheusText if v.is_finite() => buffer.format_finite(v),
        Format::PrometheusText => non_finite(v),
    };
    out.extend_from_slice(text.as_bytes());
}

fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

fn write_histogram(
    out: &mut Vec<u8>,
    format: Format,
    name: &str,
    labels: Labelled<'_, '_>,
    histogram: &HistogramValue,
) {
    let sum_and_count = |out: &mut Vec<u8>| {
        series(out, name, "_sum", labels, None);
        out.push(b' ');
        write_float(out, format, histogram.sum);
        out.push(b'\n');
        series(out, name, "_count", labels, None);
        out.push(b' ');
        write_value(out, format, Value::U64(histogram.count));
        out.push(b'\n');
    };
    if format == Format::OpenMetrics {
        sum_and_count(out);
    }
    let mut cumulative = 0u64;
    let mut infinity_written = false;
    for &(bound, count) in &histogram.buckets {
        cumulative += count;
        let spelled = bucket_bound(format, bound);
        infinity_written |= bound == f64::INFINITY;
        series(out, name, "_bucket", labels, Some((&spelled, format)));
        out.push(b' ');
        write_value(out, format, Value::U64(cumulative));
        out.push(b'\n');
    }
    if format == Format::PrometheusText {
        // Text 0.0.4 always ends the buckets with `+Inf`.
        if !infinity_written {
            series(out, name, "_bucket", labels, Some(("+Inf", format)));
            out.push(b' ');
            write_value(out, format, Value::U64(histogram.count));
            out.push(b'\n');
        }
        sum_and_count(out);
    }
}

/// A bucket's `le`: dtoa's spelling in OpenMetrics (`0.001`, `1.0`), Go's `%g` in text 0.0.4
/// (`1`, `1e-05`), as client_golang writes it; `+Inf` in both.
fn bucket_bound(format: Format, bound: f64) -> String {
    if bound == f64::INFINITY {
        return "+Inf".to_owned();
    }
    match format {
        Format::OpenMetrics => dtoa::Buffer::new().format(bound).to_owned(),
        Format::PrometheusText => go_float(bound),
    }
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)` for the shortest digits: a whole number below
/// 1e6 as an integer, |v| in [1e-4, 1e6) in plain decimals, anything else in exponent form with a
/// signed exponent of at least two digits (`1e-05`, `2.5e+06`).
fn go_float(v: f64) -> String {
    if !v.is_finite() {
        return non_finite(v).to_owned();
    }
    if v.fract() == 0.0 && v.abs() < 1e6 {
        return itoa::Buffer::new().format(v as i64).to_owned();
    }
    if (1e-4..1e6).contains(&v.abs()) {
        return format!("{v}");
    }
    let scientific = format!("{v:e}");
    match scientific.split_once('e') {
        Some((mantissa, exponent)) => {
            let exponent: i32 = exponent.parse().unwrap_or(0);
            format!("{mantissa}e{exponent:+03}")
        }
        None => scientific,
    }
}

/// A label value with `\`, `"` and newline escaped, as both formats write it (the pre-encoded
/// IB families too); borrowed when it has none of them, as most values.
pub fn escape_label_value(value: &str) -> Cow<'_, str> {
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Text 0.0.4's HELP escaping: `\` and newline.
fn escape_help(out: &mut Vec<u8>, help: &str) {
    // Help texts rarely hold either byte: then they are copied whole.
    if !help.bytes().any(|b| matches!(b, b'\\' | b'\n')) {
        out.extend_from_slice(help.as_bytes());
        return;
    }
    for b in help.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    use crate::exposition::prometheus_client_text as by_prometheus_client;

    fn every_kind() -> Families<'static> {
        let mut families = Families::default();
        let port = |device: &'static str, port: &'static str| {
            [
                ("device", Cow::Borrowed(device)),
                ("port", Cow::Borrowed(port)),
            ]
        };
        families.counter(
            "b_bytes_total",
            "Bytes.",
            port("mlx5_0", "1"),
            Value::U64(0),
        );
        families.counter(
            "b_bytes_total",
            "Bytes.",
            port("mlx5_1", "1"),
            Value::U64(u64::MAX),
        );
        families.counter("c_seconds_total", "Seconds.", [], Value::F64(1.5));
        families.gauge(
            "a_ratio",
            "Help with a \\ and a\nnewline.",
            [],
            Value::F64(2.0),
        );
        for v in [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e21,
            1e-7,
            -0.0,
            0.1,
        ] {
            families.gauge("d_value", "Odd floats.", port("x", "1"), Value::F64(v));
        }
        families.gauge(
            "e_escaped",
            "Escaped label values.",
            [
                ("switch", Cow::Borrowed("leaf \"1\"\\a\nb")),
                ("port", Cow::Borrowed("é")),
            ],
            Value::U64(7),
        );
        families.info(
            "f_info",
            "An info.",
            [
                ("version", Cow::Borrowed("1.0")),
                ("empty", Cow::Borrowed("")),
            ],
        );
        let _ = families.add("g_untyped", Kind::Untyped, "Untyped.", [], Value::U64(3));
        for (target, sum) in [("a", 0.0055), ("b", 12.5)] {
            families.histogram(
                "h_rtt_seconds",
                "Round trips.",
                [("target", Cow::Borrowed(target))],
                HistogramValue {
                    buckets: vec![
                        (1e-5, 1),
                        (0.001, 2),
                        (1.0, 0),
                        (2.5e6, 1),
                        (f64::INFINITY, 1),
                    ],
                    sum,
                    count: 5,
                },
            );
        }
        // Labels rendered once in a block, escaped as any label value, then a sample's own.
        let port = families.block([
            ("device", Cow::Borrowed("mlx5_\"0\"\\\n")),
            ("port", Cow::Borrowed("1")),
        ]);
        families.counter_in("j_in_block_total", "In a block.", port, [], Value::U64(9));
        families.counter_in(
            "j_in_block_total",
            "In a block.",
            port,
            [("priority", Cow::Borrowed("3"))],
            Value::U64(10),
        );
        let empty = families.block([]);
        let own = [("x", Cow::Borrowed("y"))];
        families.gauge_in(
            "k_empty_block",
            "An empty block.",
            empty,
            own,
            Value::U64(1),
        );
        families.gauge_in("k_empty_block", "An empty block.", empty, [], Value::U64(2));
        families.histogram(
            "i_no_inf",
            "A histogram without its +Inf bucket and without labels.",
            [],
            HistogramValue {
                buckets: vec![(0.5, 1), (10.0, 2)],
                sum: 3.0,
                count: 4,
            },
        );
        families
    }

    #[test]
    fn every_kind_is_written_as_prometheus_client_writes_it_in_both_formats() {
        for format in [Format::OpenMetrics, Format::PrometheusText] {
            let expected = by_prometheus_client(every_kind(), format);
            assert!(expected.contains("h_rtt_seconds_bucket"), "{expected}");
            assert!(expected.contains("leaf \\\"1\\\"\\\\a\\nb"), "{expected}");
            assert_eq!(every_kind().text(format), expected, "{format:?}");
        }
    }

    #[test]
    fn the_formats_differ_where_prometheus_client_makes_them_differ() {
        let om = every_kind().text(Format::OpenMetrics);
        let text = every_kind().text(Format::PrometheusText);
        assert!(om.contains("# TYPE b_bytes counter\n"), "{om}");
        assert!(text.contains("# TYPE b_bytes_total counter\n"), "{text}");
        assert!(om.contains("# TYPE f info\n") && text.contains("# TYPE f_info gauge\n"));
        assert!(
            om.contains("d_value{device=\"x\",port=\"1\"} inf\n"),
            "{om}"
        );
        assert!(
            text.contains("d_value{device=\"x\",port=\"1\"} +Inf\n"),
            "{text}"
        );
        assert!(
            om.contains("h_rtt_seconds_bucket{le=\"0.00001\",target=\"a\"} 1\n"),
            "{om}"
        );
        assert!(
            text.contains("h_rtt_seconds_bucket{target=\"a\",le=\"1e-05\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("i_no_inf_bucket{le=\"+Inf\"} 4\n"), "{text}");
        for written in [&om, &text] {
            assert!(
                written.contains(
                    "j_in_block_total{device=\"mlx5_\\\"0\\\"\\\\\\n\",port=\"1\",priority=\"3\"} 10\n"
                ),
                "{written}"
            );
            assert!(written.contains("k_empty_block{x=\"y\"} 1\nk_empty_block 2\n"));
        }
        assert!(om.contains("a \\ and a\nnewline.\n"), "{om}");
        assert!(text.contains("a \\\\ and a\\nnewline.\n"), "{text}");
    }

    #[test]
    fn go_floats_are_spelled_as_go_spells_them() {
        for (v, go) in [
            (1.0, "1"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (2.5e6, "2.5e+06"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (0.0001, "0.0001"),
            (1e21, "1e+21"),
        ] {
            assert_eq!(go_float(v), go, "{v}");
        }
    }
}
