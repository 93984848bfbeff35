//! `--web.config.file`: TLS, basic auth and response headers, in the format of the Prometheus
//! exporter-toolkit (`docs/web-configuration.md`), so one file serves every exporter on a host.
//!
//! The file is re-read when it (or a certificate it names) changes, checked at most once a
//! second as connections arrive, and on SIGHUP. A broken new file keeps the old config.

//!
//! Beside it, what every listener does whatever the config: `serve` (the accept loop),
//! `negotiate` (`Accept`, `Accept-Encoding`), `panic_guard`, `probe_gate` (the
//! bound on `/probe` polls) and `probe_ping` (`/probe-ping`, an operator's on-demand ping); and the landing page every listener serves: `fabric_page` (the
//! HTML and its embedded script), `fabric_json` (`/api/v1/fabric`), `fabric_rates`,
//! `fabric_probes` (the probes' failing paths and verdicts).

pub mod auth;
pub(crate) mod client_share;
pub mod fabric_json;
pub mod fabric_page;
pub(crate) mod fabric_peers;
pub(crate) mod fabric_probes;
pub mod fabric_rates;
pub mod negotiate;
pub mod panic_guard;
pub mod probe_gate;
pub mod probe_ping;
pub mod serve;
pub mod tls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;

/// Changes to the file are looked for at most this often.
const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Errors of the web config file: the same shapes as the main config's (file:line:column).
pub use crate::yaml::ConfigError as WebConfigError;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebConfigFile {
    #[serde(default)]
    pub tls_server_config: Option<tls::TlsServerConfig>,
    #[serde(default)]
    pub http_server_config: HttpServerConfig,
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, auth::BcryptHash>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpServerConfig {
    /// Accepted for compatibility; only HTTP/1.1 is served.
    #[serde(default)]
    #[allow(dead_code)]
    pub http2: Option<bool>,
    #[serde(default)]
    pub headers: Headers,
}

/// The headers exporter-toolkit allows (others are refused, as there).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Headers {
    #[serde(rename = "Content-Security-Policy")]
    pub content_security_policy: Option<String>,
    #[serde(rename = "X-Frame-Options")]
    pub x_frame_options: Option<String>,
    #[serde(rename = "X-Content-Type-Options")]
    pub x_content_type_options: Option<String>,
    #[serde(rename = "X-XSS-Protection")]
    pub x_xss_protection: Option<String>,
    #[serde(rename = "Strict-Transport-Security")]
    pub strict_transport_security: Option<String>,
}

/// A loaded, validated config, ready to serve with.
pub struct WebConfig {
    /// `None`: plain HTTP (a file with only basic auth or headers).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub users: BTreeMap<String, auth::BcryptHash>,
    /// What an unknown user's password is checked against (`None`: no users).
    pub unknown_user: Option<auth::BcryptHash>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The files whose change triggers a reload, with their modification times at load.
    watched: Vec<(PathBuf, Option<SystemTime>)>,
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reads and validates a web config file; relative paths in it are relative to its directory.
pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
    let modified = mtime(path);
    // Bounded and non-blocking like every file the exporter reads: a FIFO here would hang the
    // reload on SIGHUP.
    let text = crate::bounded_read::read_to_string(path, 1 << 20).map_err(|source| {
        WebConfigError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let file: WebConfigFile = if text.trim().is_empty() {
        WebConfigFile::default()
    } else {
        crate::yaml::from_str(path, &text)?
    };
    let invalid = |message: String| WebConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut watched = vec![(path.to_path_buf(), modified)];
    let tls = match &file.tls_server_config {
        Some(config) => {
            let (server, files) = tls::server_config(config, base).map_err(invalid)?;
            watched.extend(files.into_iter().map(|f| {
                let m = mtime(&f);
                (f, m)
            }));
            Some(Arc::new(server))
        }
        None => None,
    };
    for (user, hash) in &file.basic_auth_users {
        hash.check()
            .map_err(|e| invalid(format!("basic_auth_users: user {user:?}: {e}")))?;
    }
    let headers = headers(&file.http_server_config.headers).map_err(invalid)?;
    Ok(WebConfig {
        tls,
        unknown_user: auth::unknown_user_hash(&file.basic_auth_users),
        users: file.basic_auth_users,
        headers,
        watched,
    })
}

fn headers(h: &Headers) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    if let Some(v) = &h.x_frame_options {
        if !v.eq_ignore_ascii_case("deny") && !v.eq_ignore_ascii_case("sameorigin") {
            return Err(format!(
                "http_server_config.headers: X-Frame-Options must be deny or sameorigin, not {v:?}"
            ));
        }
    }
    if let Some(v) = &h.x_content_type_options {
        if !v.eq_ignore_ascii_case("nosniff") {
            return Err(format!(
                "http_server_config.headers: X-Content-Type-Options must be nosniff, not {v:?}"
            ));
        }
    }
    [
        ("content-security-policy", &h.content_security_policy),
        ("x-frame-options", &h.x_frame_options),
        ("x-content-type-options", &h.x_content_type_options),
        ("x-xss-protection", &h.x_xss_protection),
        ("strict-transport-security", &h.strict_transport_security),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, value.as_ref()?)))
    .map(|(name, value)| {
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("http_server_config.headers: {name}: not a valid header value"))?;
        Ok((HeaderName::from_static(name), value))
    })
    .collect()
}

/// The config in force, swapped on reload.
pub struct LiveWebConfig {
    path: PathBuf,
    current: RwLock<Arc<WebConfig>>,
    checks: Mutex<Checks>,
}

struct Checks {
    last: Instant,
    /// Modification times of the watched files when a reload last failed: a broken file is
    /// reported once, not every second.
    failed_at: Option<Vec<Option<SystemTime>>>,
}

impl LiveWebConfig {
    pub fn new(path: PathBuf, config: WebConfig) -> Arc<LiveWebConfig> {
        Arc::new(LiveWebConfig {
            path,
            current: RwLock::new(Arc::new(config)),
            checks: Mutex::new(Checks {
                last: Instant::now(),
                failed_at: None,
            }),
        })
    }

    pub fn current(&self) -> Arc<WebConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the file; on error the old config stays and the error is logged.
    pub fn reload(&self) -> bool {
        match load(&self.path) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                tracing::info!(file = %self.path.display(), "web config reloaded");
                true
            }
            Err(e) => {
                tracing::error!("web config not reloaded, the previous one stays: {e}");
                false
            }
        }
    }

    /// Reloads when a watched file changed; looks at most once per `RELOAD_CHECK_INTERVAL`.
    pub(crate) fn reload_if_changed(&self) {
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        if checks.last.elapsed() < RELOAD_CHECK_INTERVAL {
            return;
        }
        checks.last = Instant::now();
        let current = self.current();
        let now: Vec<Option<SystemTime>> = current.watched.iter().map(|(p, _)| mtime(p)).collect();
        let unchanged = current
            .watched
            .iter()
            .zip(&now)
            .all(|((_, at_load), now)| at_load == now);
        if unchanged || checks.failed_at.as_ref() == Some(&now) {
            return;
        }
        checks.failed_at = if self.reload() { None } else { Some(now) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        std::fs::write(&path, text).unwrap();
        load(&path)
    }

    #[test]
    fn unknown_key_names_line_and_column() {
        let e = parse("http_server_config:\n  headerz: {}\n").err().unwrap();
        let text = e.to_string();
        assert!(text.contains("web.yml:2:3: "), "{text}");
        assert!(text.contains("headerz"), "{text}");
    }

    #[test]
    fn headers_are_checked() {
        let e = parse("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
            .err()
            .unwrap();
        assert!(e.to_string().contains("deny or sameorigin"), "{e}");
        let ok = parse("http_server_config:\n  headers:\n    X-Frame-Options: deny\n").unwrap();
        assert_eq!(ok.headers.len(), 1);
        assert!(ok.tls.is_none());
    }

    #[test]
    fn a_bad_hash_is_refused_without_being_shown() {
        let e = parse("basic_auth_users:\n  alice: notahash-s3cr3t\n")
            .err()
            .unwrap();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        assert!(e.to_string().contains("alice"), "{e}");
    }
}
