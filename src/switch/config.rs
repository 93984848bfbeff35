//! The `switches:` section of the config file: one entry per switch target. Checked while the
//! file is parsed, so mistakes are reported with their line and column.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::snmp::SnmpVersion;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchConfig {
    /// The `switch` label of every series of this target.
    pub name: String,
    /// `host` or `host:port` (SNMP port 161 by default).
    pub address: String,
    #[serde(default)]
    pub protocol: Protocol,
    /// A profile name: built-in (`profiles/`) or from `switch_profiles_dir`.
    pub profile: String,
    pub snmp: SnmpConfig,
    #[serde(
        default = "default_interval",
        deserialize_with = "deserialize_duration"
    )]
    pub interval: Duration,
    #[serde(default = "default_timeout", deserialize_with = "deserialize_duration")]
    pub timeout: Duration,
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default = "default_max_repetitions")]
    pub max_repetitions: u32,
}

fn default_interval() -> Duration {
    Duration::from_secs(30)
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_retries() -> u32 {
    1
}
/// Modest: tooBig recovery does not cover GETBULK in the client library.
fn default_max_repetitions() -> u32 {
    25
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Snmp,
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match String::deserialize(deserializer)?.as_str() {
            "snmp" => Ok(Protocol::Snmp),
            "gnmi" => Err(serde::de::Error::custom(
                "protocol gnmi is not supported yet; use snmp",
            )),
            other => Err(serde::de::Error::custom(format!(
                "unknown protocol {other:?}; expected snmp"
            ))),
        }
    }
}

/// Where the community comes from. Never inline: config files get pasted into tickets.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawSnmpConfig")]
pub struct SnmpConfig {
    pub version: SnmpVersion,
    pub community: CommunitySource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommunitySource {
    File(PathBuf),
    Env(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSnmpConfig {
    version: String,
    community_file: Option<PathBuf>,
    community_env: Option<String>,
}

impl TryFrom<RawSnmpConfig> for SnmpConfig {
    type Error = String;
    fn try_from(raw: RawSnmpConfig) -> Result<Self, Self::Error> {
        let version = match raw.version.as_str() {
            "1" => SnmpVersion::V1,
            "2c" => SnmpVersion::V2c,
            "3" => return Err("SNMP version 3 is not supported yet; use 1 or 2c".into()),
            other => return Err(format!("unknown SNMP version {other:?}; expected 1 or 2c")),
        };
        let community = match (raw.community_file, raw.community_env) {
            (Some(file), None) => CommunitySource::File(file),
            (None, Some(var)) => CommunitySource::Env(var),
            _ => return Err("set exactly one of community_file and community_env".into()),
        };
        Ok(SnmpConfig { version, community })
    }
}

fn deserialize_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
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
    let duration = match unit {
        "ms" => Duration::from_millis(value),
        "s" => Duration::from_secs(value),
        "m" => Duration::from_secs(value * 60),
        "h" => Duration::from_secs(value * 3600),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
