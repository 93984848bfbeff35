//! `Accept` and `Accept-Encoding` read by their q-values (RFC 9110 §12.4), for any header a
//! client may send: an element that does not parse is skipped, never a panic or an error, and
//! the answer falls back to what a client that sent nothing gets (text 0.0.4, no compression).

use crate::exposition::Format;

/// One element of a comma-separated header list: `value;param=x;q=0.5`.
struct Element<'a> {
    /// The media range or content coding, trimmed; compare it case-insensitively.
    value: &'a str,
    /// Parameters other than `q`, as written (names compared case-insensitively).
    params: Vec<(&'a str, &'a str)>,
    /// The q-value in thousandths (0..=1000); 0 means "not acceptable".
    q: u16,
}

/// The elements of a header list, in header order; unparsable ones are dropped.
fn elements(header: &str) -> impl Iterator<Item = Element<'_>> {
    header.split(',').filter_map(|element| {
        let mut parts = element.split(';');
        let value = parts.next()?.trim();
        if value.is_empty() {
            return None;
        }
        let mut params = Vec::new();
        let mut q = 1000;
        for param in parts {
            let (name, v) = param.split_once('=')?;
            let (name, v) = (name.trim(), v.trim().trim_matches('"'));
            if name.eq_ignore_ascii_case("q") {
                q = qvalue(v)?;
            } else {
                params.push((name, v));
            }
        }
        Some(Element { value, params, q })
    })
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths. Anything else
/// (`NaN`, `inf`, `2`, `-1`, `0.0001`) is `None`: the element is dropped.
fn qvalue(text: &str) -> Option<u16> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: u16 = format!("{frac:0<3}").parse().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

impl Element<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    /// The format this media range asks for, if one we write; ranges with a wildcard get the
    /// default text format.
    fn format(&self) -> Option<Format> {
        let (kind, subtype) = self.value.split_once('/')?;
        let (kind, subtype) = (kind.trim(), subtype.trim());
        let version = self.param("version");
        if subtype == "*" && (kind == "*" || kind.eq_ignore_ascii_case("text")) {
            return Some(Format::PrometheusText);
        }
        if kind.eq_ignore_ascii_case("application")
            && subtype.eq_ignore_ascii_case("openmetrics-text")
            // 0.0.1 is what Prometheus 2 asks for; prometheus-client writes 1.0.0, a superset.
            && matches!(version, None | Some("1.0.0" | "0.0.1"))
        {
            return Some(Format::OpenMetrics);
        }
        if kind.eq_ignore_ascii_case("text")
            && subtype.eq_ignore_ascii_case("plain")
            // text 1.0.0 (UTF-8 names, Prometheus 3) is not written here: skipped.
            && matches!(version, None | Some("0.0.4"))
        {
            return Some(Format::PrometheusText);
        }
        None
    }

    /// Exact types before `type/*` before `*/*`, as RFC 9110 orders precedence.
    fn specificity(&self) -> u8 {
        match self.value.split_once('/') {
            Some(("*", _)) => 0,
            Some((_, "*")) => 1,
            _ => 2,
        }
    }
}

/// The format to answer with: the acceptable media range of highest q (more specific first on
/// a tie, then header order, as Prometheus' own `expfmt.Negotiate`) that names a format written
/// here. Without one, text 0.0.4, as client_golang does: a scraper is never refused.
pub fn format(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::PrometheusText;
    };
    let mut ranges: Vec<Element> = elements(accept).filter(|e| e.q > 0).collect();
    // Stable: equal q and specificity keep header order.
    ranges.sort_by_key(|e| (std::cmp::Reverse(e.q), std::cmp::Reverse(e.specificity())));
    ranges
        .iter()
        .find_map(Element::format)
        .unwrap_or(Format::PrometheusText)
}

/// Whether to gzip the answer: `gzip` (or its alias `x-gzip`, else `*`) has a q above 0, and not
/// below an explicitly listed `identity`.
pub fn gzip(accept_encoding: Option<&str>) -> bool {
    let Some(header) = accept_encoding else {
        return false;
    };
    let (mut gzip, mut any, mut identity) = (None, None, None);
    for e in elements(header) {
        let slot = if e.value.eq_ignore_ascii_case("gzip") || e.value.eq_ignore_ascii_case("x-gzip")
        {
            &mut gzip
        } else if e.value == "*" {
            &mut any
        } else if e.value.eq_ignore_ascii_case("identity") {
            &mut identity
        } else {
            continue;
        };
        // A coding listed twice counts at its highest q.
        *slot = Some(slot.unwrap_or(0).max(e.q));
    }
    let q = gzip.or(any).unwrap_or(0);
    q > 0 && q >= identity.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Format::{OpenMetrics as Om, PrometheusText as Text};

    #[test]
    fn formats_by_q() {
        for (accept, want) in [
            (None, Text),
            (Some(""), Text),
            // Prometheus 3's default.
            (Some("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"), Om),
            // Prometheus 2's default.
            (Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Om),
            // A scrape config that prefers text.
            (Some("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"), Text),
            (Some("application/openmetrics-text;q=0.5, text/plain;q=0.9"), Text),
            (Some("text/plain;q=0.1, application/openmetrics-text;q=0.2"), Om),
            (Some("application/openmetrics-text;q=0, */*"), Text),
            (Some("application/openmetrics-text;q=0"), Text),
            (Some("*/*"), Text),
            (Some("text/*;q=0.5, application/openmetrics-text;q=0.4"), Text),
            (Some("APPLICATION/OpenMetrics-Text; Version=1.0.0"), Om),
            // Versions not written here are skipped.
            (Some("application/openmetrics-text;version=2.0.0, text/plain;q=0.1"), Text),
            (Some("text/plain;version=1.0.0, application/openmetrics-text;q=0.5"), Om),
            // Equal q: the exact type over the wildcard, then header order.
            (Some("*/*, application/openmetrics-text"), Om),
            (Some("application/openmetrics-text, text/plain"), Om),
            (Some("text/plain, application/openmetrics-text"), Text),
            // Empty parameters are junk, not a reason to drop the range.
            (Some("application/openmetrics-text;=;="), Om),
        ] {
            assert_eq!(format(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn hostile_or_odd_accept_values_never_panic() {
        let long = "application/openmetrics-text;q=0.5,".repeat(10_000);
        for accept in [
            ";;;,,,",
            "/",
            "*/",
            "/*",
            "application/openmetrics-text;q",
            "application/openmetrics-text;q=",
            "application/openmetrics-text;q=NaN",
            "application/openmetrics-text;q=inf",
            "application/openmetrics-text;q=-1",
            "application/openmetrics-text;q=1.5",
            "application/openmetrics-text;q=0.0001",
            "application/openmetrics-text;q=1e-3",
            "application/openmetrics-text;q=99999999999999999999",
            "application/openmetrics-text;version=\"",
            "\u{1F600}/\u{1F600};q=0.\u{0661}",
            "application/openmetrics-text;q=0.\u{0661}",
            long.as_str(),
        ] {
            // A range with a bad q is dropped: none of these asks for OpenMetrics validly, but
            // the long one does.
            let want = if accept == long { Om } else { Text };
            assert_eq!(format(Some(accept)), want, "{accept:.80}");
        }
    }

    #[test]
    fn qvalues() {
        for (text, want) in [
            ("1", Some(1000)),
            ("1.000", Some(1000)),
            ("0", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.", Some(0)),
            ("1.001", None),
            ("0.1234", None),
            ("+0.5", None),
            ("", None),
            (".5", None),
            ("0x1", None),
        ] {
            assert_eq!(qvalue(text), want, "{text:?}");
        }
    }

    #[test]
    fn gzip_by_q() {
        for (header, want) in [
            (None, false),
            (Some(""), false),
            (Some("gzip"), true),
            // Prometheus' own.
            (Some("gzip"), true),
            (Some("GZIP;q=0.5"), true),
            (Some("x-gzip"), true),
            (Some("gzip;q=0"), false),
            (Some("gzip;q=0.0"), false),
            (Some("*"), true),
            (Some("*;q=0"), false),
            (Some("gzip;q=0, *"), false),
            (Some("br, deflate"), false),
            (Some("identity"), false),
            (Some("gzip;q=0.5, identity"), false),
            (Some("gzip, identity;q=0.5"), true),
            (Some("gzip;q=NaN"), false),
            (Some("gzip;q=2"), false),
            (Some(";,;q=,gzip;q=0.001"), true),
        ] {
            assert_eq!(gzip(header), want, "{header:?}");
        }
    }
}
