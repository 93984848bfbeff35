//! What every YAML file of the exporter shares (the config file, `--web.config.file`, vendor
//! profiles, and the sections each domain owns): errors that name the file, line and column,
//! Prometheus-style durations, and regular expressions compiled while the file is parsed.
//!
//! A leaf: it imports nothing from the crate, so that `node`, `switch` and `diag` can derive
//! `Deserialize` on their own config types without depending on `config`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::Deserializer;

/// The largest profile file read; the built-in ones are a few KiB.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Errors of a YAML file the exporter reads (the config file, the web config file).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A problem at a place in the file: a syntax or type error, or one found after parsing
    /// and placed by [`locate`].
    #[error("{path}:{line}:{column}: {message}")]
    At {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Parses a document; a failure is a [`ConfigError::At`] at its line and column of `path`
/// (used in the message only).
pub fn from_str<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_yaml::from_str(text).map_err(|e| {
        let (line, column, message) = yaml_error_parts(&e);
        ConfigError::At {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    })
}

/// Several problems of one file, reported together (one per line) so that a config is fixed
/// in one round.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

/// Line, column and message of a YAML error. yaml_serde appends " at line L column C" to its
/// message; callers print the location first, so it is cut from the message.
pub fn yaml_error_parts(e: &serde_yaml::Error) -> (usize, usize, String) {
    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
    let message = e.to_string();
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    (line, column, message)
}

/// Prometheus-style durations: `500ms`, `30s`, `2m`, `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 500ms, 30s, 2m"))?;
    // Checked: a wrapped product would turn a huge interval into an arbitrary short one.
    let seconds = |factor: u64| {
        value
            .checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("duration {text:?} is too long"))
    };
    let duration = match unit {
        "ms" => Duration::from_millis(value),
        "s" => Duration::from_secs(value),
        "m" => seconds(60)?,
        "h" => seconds(3600)?,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: unit must be ms, s, m or h"
            ))
        }
    };
    if duration.is_zero() {
        return Err(format!("duration {text:?} must be positive"));
    }
    Ok(duration)
}

/// A string converted by `parse` while the scalar is being read: an error made there is given
/// the scalar's line and column. (Made after `String::deserialize` returned, it would be given
/// those of the enclosing mapping.)
struct Converted<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

impl<'de, T> serde::de::Visitor<'de> for Converted<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(E::custom)
    }
}

/// As [`Converted`], for an optional value: `None` when absent or null.
struct ConvertedOption<T>(Converted<T>);

impl<'de, T> serde::de::Visitor<'de> for ConvertedOption<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.0.expecting)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
        deserializer.deserialize_str(self.0).map(Some)
    }
}

/// A string `parse` converts while the value is read, so that its error is placed at the
/// value's line and column: for `deserialize_with` functions and `Deserialize` impls.
pub fn converted<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    deserializer.deserialize_str(Converted { expecting, parse })
}

/// [`converted`] for an optional value: `None` when absent or null.
pub fn converted_option<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<T>, D::Error> {
    deserializer.deserialize_option(ConvertedOption(Converted { expecting, parse }))
}

const DURATION: &str = "a duration such as 500ms, 30s, 2m or 1h";

/// `#[serde(deserialize_with = "crate::yaml::duration")]`: a [`parse_duration`] string.
pub fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    converted(deserializer, DURATION, parse_duration)
}

/// `#[serde(deserialize_with = "crate::yaml::duration_or_zero")]`: as [`duration`], and `0`
/// (or `0s`, `0ms`...) where zero means "every time".
pub fn duration_or_zero<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    converted(deserializer, DURATION, |text| {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let zero = !digits.is_empty() && digits.bytes().all(|b| b == b'0');
        if zero && matches!(unit, "" | "ms" | "s" | "m" | "h") {
            return Ok(Duration::ZERO);
        }
        parse_duration(text)
    })
}

/// `#[serde(deserialize_with = "crate::yaml::regex")]` on an `Option<Regex>`: compiled while the
/// file is parsed, so that a bad pattern is reported at its line and column. Unanchored, as
/// Prometheus exporters' include/exclude flags.
pub fn regex<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Regex>, D::Error> {
    converted_option(deserializer, "a regular expression", |text| {
        Regex::new(text).map_err(|e| format!("invalid regular expression: {e}"))
    })
}

/// One step of a path into a YAML document: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(&'static str),
    Index(usize),
}

/// A problem of a parsed config: what is wrong, and the places in the file that may hold it
/// (the first found is reported; a key can come from the file or a flag).
#[derive(Debug)]
pub struct Problem {
    pub at: Vec<Vec<Step>>,
    pub message: String,
}

impl Problem {
    pub fn at(path: Vec<Step>, message: impl Into<String>) -> Problem {
        Problem {
            at: vec![path],
            message: message.into(),
        }
    }
}

/// Line and column (1-based) of the node at `path` in `text`, for errors found after parsing
/// (a switch's unknown profile, a missing secret file). The parser keeps no positions in the
/// typed config, so the text is walked again and stopped at the node: the parser's error then
/// carries the position. `None` when the path is not in the text (a default, a flag).
pub fn locate(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    let Err(e) = serde::de::DeserializeSeed::deserialize(
        Seek { path },
        serde_yaml::Deserializer::from_str(text),
    ) else {
        return None;
    };
    let location = e.location()?;
    e.to_string()
        .contains(FOUND)
        .then(|| (location.line(), location.column()))
}

/// The error a [`Seek`] raises on reaching its node.
const FOUND: &str = "rfe-locate-found";

struct Seek<'p> {
    path: &'p [Step],
}

impl<'de> serde::de::DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.path.is_empty() {
            // Raised from the node's own visitor, the error carries the node's position (raised
            // here, it would carry the enclosing mapping's).
            return deserializer.deserialize_any(Found);
        }
        deserializer.deserialize_any(self)
    }
}

/// Fails on whatever node it visits.
struct Found;

impl<'de> serde::de::Visitor<'de> for Found {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(FOUND)
    }
}

impl<'de> serde::de::Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a mapping or a sequence on the path")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Step::Key(wanted), rest)) = self.path.split_first() else {
            return Ok(());
        };
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            if key.as_str() == Some(wanted) {
                return map.next_value_seed(Seek { path: rest });
            }
            map.next_value::<serde::de::IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Step::Index(wanted), rest)) = self.path.split_first() else {
            return Ok(());
        };
        let mut index = 0;
        loop {
            if index == *wanted {
                return seq.next_element_seed(Seek { path: rest }).map(|_| ());
            }
            if seq.next_element::<serde::de::IgnoredAny>()?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    // Scalars are not on any path: the node is not in the text.
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
        assert_eq!(
            parse_duration("5124095576030431h"),
            Ok(Duration::from_secs(5124095576030431 * 3600))
        );
        assert!(parse_duration("5124095576030432h").is_err());
        assert!(parse_duration("307445734561825861m").is_err());
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Doc {
        #[serde(deserialize_with = "duration")]
        every: Duration,
        inner: Inner,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Inner {
        #[serde(deserialize_with = "regex")]
        pattern: Option<Regex>,
    }

    #[test]
    fn errors_carry_file_line_and_column() {
        let doc: Doc = from_str(Path::new("d.yml"), "every: 2m\ninner: {pattern: '^a'}\n").unwrap();
        assert!(doc.inner.pattern.unwrap().is_match("ab"));
        assert_eq!(doc.every, Duration::from_secs(120));
        let none: Doc = from_str(Path::new("d.yml"), "inner:\n  pattern: null\n").unwrap();
        assert!(none.inner.pattern.is_none());
        // A value's error is placed at the value (it was placed at the start of the mapping
        // that holds it: 3:3 here).
        let err = from_str::<Doc>(Path::new("d.yml"), "every: 1s\ninner:\n  pattern: 'a('\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("d.yml:3:12: "), "{err}");
        assert!(err.contains("invalid regular expression"), "{err}");
        let err = from_str::<Doc>(Path::new("d.yml"), "inner: {}\nevery: 0s\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("d.yml:2:8: ") && err.contains("must be positive"),
            "{err}"
        );
        let err = from_str::<Doc>(Path::new("d.yml"), "inner: {}\nevery: 5 minutes\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("d.yml:2:8: ") && err.contains("unit must be"),
            "{err}"
        );
    }

    #[test]
    fn zero_is_a_duration_where_it_means_every_time() {
        #[derive(Debug, Deserialize)]
        struct Every {
            #[serde(deserialize_with = "duration_or_zero")]
            every: Duration,
        }
        let every = |text: &str| from_str::<Every>(Path::new("d.yml"), text).map(|e| e.every);
        for zero in ["every: 0s", "every: 0", "every: 00ms"] {
            assert_eq!(every(zero).unwrap(), Duration::ZERO, "{zero}");
        }
        assert_eq!(every("every: 5m").unwrap(), Duration::from_secs(300));
        assert!(every("every: 0x").is_err());
        let err = every("every: soon").unwrap_err().to_string();
        assert!(err.starts_with("d.yml:1:8: "), "{err}");
    }

    #[test]
    fn locate_finds_keys_and_items() {
        let text = "web:\n  listen_address: ':1'\nswitches:\n  - name: a\n    profile: x\n  - name: b\n    profile: y\n";
        // A mapping is found at its first key.
        assert_eq!(locate(text, &[Step::Key("web")]), Some((2, 3)));
        assert_eq!(
            locate(
                text,
                &[Step::Key("switches"), Step::Index(1), Step::Key("profile")]
            ),
            Some((7, 14))
        );
        assert_eq!(
            locate(text, &[Step::Key("switches"), Step::Index(0)]).map(|p| p.0),
            Some(4)
        );
        assert_eq!(locate(text, &[Step::Key("switches"), Step::Index(2)]), None);
        assert_eq!(locate(text, &[Step::Key("nccl")]), None);
        assert_eq!(locate("[1, 2", &[Step::Key("a")]), None);
    }
}
