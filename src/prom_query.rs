//! A small blocking client for Prometheus' instant-query API (`GET /api/v1/query`), on the
//! hyper the exporter already serves with (`crate::bounded_get`): one HTTP/1.1 connection per
//! query, a deadline per query, a bound on the answer. `ecn-tune`, `doctor` and the `localize`
//! role read Prometheus with it. Answers are decoded into instant vectors; every other shape
//! or an error envelope is a [`QueryError`] that says which query and why.
//!
//! `http://[user:password@]host[:port][/prefix]` only: the password is sent as basic auth and
//! never printed (the URL is shown without it).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;

use crate::bounded_get::{self, GetError};

/// A Prometheus answer larger than this is not one these queries produce.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Label set of one series, `__name__` included when Prometheus keeps it.
pub type Labels = BTreeMap<String, String>;

/// One sample of an instant vector. `value` is `None` for NaN and ±Inf (0/0 on an idle port,
/// a ratio over a counter that did not move).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Labels,
    pub value: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Url(String),
    #[error("cannot reach Prometheus at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("Prometheus at {url} did not answer {query} within {timeout:?}")]
    Timeout {
        url: String,
        query: String,
        timeout: Duration,
    },
    #[error("Prometheus at {url} refused {query}: HTTP {status}: {message}")]
    Api {
        url: String,
        query: String,
        status: u16,
        message: String,
    },
    #[error("{url} does not answer like Prometheus' query API ({query}): {message}")]
    NotPrometheus {
        url: String,
        query: String,
        message: String,
    },
}

/// Where Prometheus is, parsed once.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    host: String,
    port: u16,
    /// Path prefix before `/api/v1` (a Prometheus behind `--web.route-prefix`), no trailing `/`.
    prefix: String,
    authorization: Option<String>,
    /// The URL without credentials, for messages.
    pub display: String,
}

impl Endpoint {
    /// `--prometheus URL`.
    pub fn parse(url: &str) -> Result<Endpoint, QueryError> {
        Endpoint::parse_flag("--prometheus", url)
    }

    /// The URL given to `flag`, which messages about it name.
    pub fn parse_flag(flag: &str, url: &str) -> Result<Endpoint, QueryError> {
        let bad = |why: &str| QueryError::Url(format!("{flag}: {why}"));
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(bad(
                "https is not supported: give the plain http address (from inside the cluster, or through `kubectl port-forward`)",
            ));
        } else {
            return Err(bad("expected http://host:port"));
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, ""),
        };
        if path.contains(['?', '#']) {
            return Err(bad("no query string or fragment: give the base URL"));
        }
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| {
            bad("expected http://host[:port] (an IPv6 address in brackets: http://[::1]:9090)")
        })?;
        let authorization = userinfo.map(|u| {
            let decoded = percent_decode(u);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(decoded)
            )
        });
        let prefix = path.trim_end_matches('/').to_string();
        let display = format!("http://{hostport}{prefix}");
        Ok(Endpoint {
            host,
            port,
            prefix,
            authorization,
            display,
        })
    }

    fn host_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn split_host_port(hostport: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &rest[..end];
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 80,
            None => return None,
        };
        (host.to_string(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), port.parse().ok()?),
            None => (hostport.to_string(), 80),
        }
    };
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_' | '%'));
    valid.then_some((host, port))
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// `application/x-www-form-urlencoded` value: unreserved characters kept, the rest %XX.
pub fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs instant queries against one Prometheus (or GETs other paths of a server: `doctor`
/// scrapes the exporter with it).
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
    runtime: tokio::runtime::Runtime,
    /// The command named in the User-Agent.
    tool: &'static str,
}

impl Client {
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Result<Client, QueryError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| QueryError::Unreachable {
                url: endpoint.display.clone(),
                message: format!("starting the async runtime: {e}"),
            })?;
        Ok(Client {
            endpoint,
            timeout,
            runtime,
            tool: "ecn-tune",
        })
    }

    /// The command the User-Agent names (`ecn-tune` unless told).
    pub fn with_tool(mut self, tool: &'static str) -> Client {
        self.tool = tool;
        self
    }

    pub fn url(&self) -> &str {
        &self.endpoint.display
    }

    /// `expr` evaluated at `time` (Unix seconds): its instant vector.
    pub fn query(&self, expr: &str, time: f64) -> Result<Vec<Sample>, QueryError> {
        let path = format!("/api/v1/query?query={}&time={time:.3}", form_encode(expr));
        let (status, body) = self
            .get_path(&path, "application/json")
            .map_err(|e| match e {
                QueryError::Timeout { url, timeout, .. } => QueryError::Timeout {
                    url,
                    query: expr.to_string(),
                    timeout,
                },
                other => other,
            })?;
        decode_vector(&body, status).map_err(|failure| match failure {
            Failure::Api { status, message } => QueryError::Api {
                url: self.endpoint.display.clone(),
                query: expr.to_string(),
                status,
                message,
            },
            Failure::Shape(message) => QueryError::NotPrometheus {
                url: self.endpoint.display.clone(),
                query: expr.to_string(),
                message,
            },
        })
    }

    /// GET `path_and_query` below the endpoint's prefix, accepting `accept`: the status and the
    /// body, within the deadline (a [`QueryError::Timeout`] naming the path past it).
    pub fn get_path(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<(u16, Vec<u8>), QueryError> {
        let path = format!("{}{path_and_query}", self.endpoint.prefix);
        let user_agent = format!(
            "rdma-fabric-exporter/{} {}",
            env!("CARGO_PKG_VERSION"),
            self.tool
        );
        let mut headers = vec![(hyper::header::USER_AGENT, user_agent.as_str())];
        if let Some(authorization) = &self.endpoint.authorization {
            headers.push((hyper::header::AUTHORIZATION, authorization.as_str()));
        }
        let host = self.endpoint.host_header();
        let get = bounded_get::Get {
            path: &path,
            host: &host,
            accept,
            headers: &headers,
            max_bytes: MAX_RESPONSE_BYTES,
            timeout: self.timeout,
        };
        let address = (self.endpoint.host.as_str(), self.endpoint.port);
        let display = || self.endpoint.display.clone();
        match self.runtime.block_on(bounded_get::get(address, &get)) {
            Ok((status, body)) => Ok((status.as_u16(), body)),
            Err(GetError::Timeout(timeout)) => Err(QueryError::Timeout {
                url: display(),
                query: path_and_query.to_string(),
                timeout,
            }),
            Err(GetError::Request(e)) => Err(QueryError::Url(format!("{}: {e}", display()))),
            Err(e) => Err(QueryError::Unreachable {
                url: display(),
                message: e.to_string(),
            }),
        }
    }
}

/// `{a="b",c=~"d"}` from fixed matchers and the user's selector.
pub fn selector(fixed: &str, user: &str) -> String {
    let parts: Vec<&str> = [fixed, user]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// `--selector '{cluster="a"}'` or `cluster="a"`: the matchers, without braces.
pub fn user_matchers(text: &str) -> Result<String, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or(t)
        .trim();
    if inner.contains(['{', '}']) {
        return Err(format!(
            "--selector {text:?}: give label matchers only, e.g. '{{cluster=\"a\",instance=~\"gpu-.*\"}}'"
        ));
    }
    if !inner.is_empty() && !inner.contains(['=', '!']) {
        return Err(format!(
            "--selector {text:?}: no matcher in it (label=\"value\", label=~\"regex\")"
        ));
    }
    Ok(inner.trim_end_matches(',').to_string())
}

#[derive(Debug, PartialEq)]
pub enum Failure {
    /// Prometheus answered with its error envelope (or a non-2xx status).
    Api { status: u16, message: String },
    /// Not the query API's JSON, or not an instant vector.
    Shape(String),
}

/// The instant vector in a query answer with HTTP status `status`.
pub fn decode_vector(body: &[u8], status: u16) -> Result<Vec<Sample>, Failure> {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) if (200..300).contains(&status) => {
            return Err(Failure::Shape(format!("the answer is not JSON: {e}")))
        }
        Err(_) => {
            return Err(Failure::Api {
                status,
                message: excerpt(body),
            })
        }
    };
    if value["status"] != "success" || !(200..300).contains(&status) {
        let message = match (value["errorType"].as_str(), value["error"].as_str()) {
            (Some(kind), Some(error)) => format!("{kind}: {error}"),
            (None, Some(error)) => error.to_string(),
            _ => excerpt(body),
        };
        return Err(Failure::Api { status, message });
    }
    let data = &value["data"];
    match data["resultType"].as_str() {
        Some("vector") => {}
        Some(other) => {
            return Err(Failure::Shape(format!(
                "expected an instant vector, got a {other}"
            )))
        }
        None => return Err(Failure::Shape("no data.resultType in the answer".into())),
    }
    let Some(result) = data["result"].as_array() else {
        return Err(Failure::Shape("data.result is not a list".into()));
    };
    result.iter().map(sample).collect()
}

fn sample(item: &serde_json::Value) -> Result<Sample, Failure> {
    let shape = |why: &str| Failure::Shape(format!("a vector sample {why}: {item}"));
    let labels = item["metric"]
        .as_object()
        .ok_or_else(|| shape("has no metric labels"))?
        .iter()
        .map(|(k, v)| {
            v.as_str()
                .map(|v| (k.clone(), v.to_string()))
                .ok_or_else(|| shape("has a label value that is not a string"))
        })
        .collect::<Result<Labels, Failure>>()?;
    let pair = item["value"]
        .as_array()
        .filter(|pair| pair.len() == 2 && pair[0].is_number())
        .ok_or_else(|| shape("has no [time, value] pair"))?;
    let text = pair[1]
        .as_str()
        .ok_or_else(|| shape("has a value that is not a string"))?;
    let value = match text {
        "NaN" | "+Inf" | "-Inf" | "Inf" => None,
        _ => Some(
            text.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| shape("has a value that is not a number"))?,
        ),
    };
    Ok(Sample { labels, value })
}

/// The start of a body that is not the API's JSON, printable and bounded.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.is_empty() {
        "empty answer".into()
    } else {
        flat.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://prometheus:9090").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("prometheus", 9090, "")
        );
        assert_eq!(e.display, "http://prometheus:9090");
        let e = Endpoint::parse("http://10.0.0.1/prom/").unwrap();
        assert_eq!((e.port, e.prefix.as_str()), (80, "/prom"));
        let e = Endpoint::parse("http://[::1]:9090").unwrap();
        assert_eq!(
            (e.host.as_str(), e.host_header()),
            ("::1", "[::1]:9090".to_string())
        );
        for bad in [
            "prometheus:9090",
            "https://p:9090",
            "http://",
            "http://p:port",
            "http://p:99999",
            "http://p:9090/?x=1",
            "http://[::1",
            "http://a b:9090",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        // doctor's --exporter: the same URLs, its own flag in the messages.
        match Endpoint::parse_flag("--exporter", "https://node:9866") {
            Err(QueryError::Url(m)) => assert!(m.starts_with("--exporter: https"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn credentials_go_to_the_header_and_never_to_the_display() {
        let e = Endpoint::parse("http://ops:s3cr%40t@prom:9090").unwrap();
        assert_eq!(e.display, "http://prom:9090");
        assert_eq!(
            e.authorization.as_deref(),
            Some(
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("ops:s3cr@t")
                )
                .as_str()
            )
        );
        assert!(
            !format!("{e:?}").contains("s3cr"),
            "Debug leaks nothing either: only the base64"
        );
    }

    #[test]
    fn form_encoding() {
        assert_eq!(
            form_encode(r#"max_over_time(a{b="c"}[60s])"#),
            "max_over_time%28a%7Bb%3D%22c%22%7D%5B60s%5D%29"
        );
        assert_eq!(form_encode("a b+c/é"), "a%20b%2Bc%2F%C3%A9");
    }

    #[test]
    fn vectors_and_special_values() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"a"},"value":[1.5,"0.25"]},
            {"metric":{"instance":"b"},"value":[1.5,"NaN"]},
            {"metric":{"instance":"c"},"value":[1.5,"+Inf"]}]}}"#;
        let v = decode_vector(body, 200).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].value, Some(0.25));
        assert_eq!(v[0].labels["instance"], "a");
        assert_eq!((v[1].value, v[2].value), (None, None));
    }

    #[test]
    fn errors_keep_prometheus_words() {
        let body = br#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:5: parse error: unclosed left parenthesis"}"#;
        match decode_vector(body, 400) {
            Err(Failure::Api { status, message }) => {
                assert_eq!(status, 400);
                assert!(
                    message.starts_with("bad_data: invalid parameter"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_vector(b"<html>Grafana</html>", 200),
            Err(Failure::Shape(_))
        ));
        assert_eq!(
            decode_vector(b"404 page not found\n", 404),
            Err(Failure::Api {
                status: 404,
                message: "404 page not found".into()
            })
        );
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#;
        assert!(
            matches!(decode_vector(scalar, 200), Err(Failure::Shape(m)) if m.contains("scalar"))
        );
        let bad_value = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}"#;
        assert!(matches!(
            decode_vector(bad_value, 200),
            Err(Failure::Shape(_))
        ));
        let no_pair = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}"#;
        assert!(matches!(
            decode_vector(no_pair, 200),
            Err(Failure::Shape(_))
        ));
    }
}
