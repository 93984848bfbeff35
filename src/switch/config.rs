//! The `switches:` section of the config file: one entry per switch target. Checked while the
//! file is parsed, so mistakes are reported with their line and column.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::gnmi::GnmiTls;
use super::pfc::{PfcConfig, PfcPriorities, PriorityQueues};
use super::secret::{read_value_file, SecretSource};
use super::snmp::{AuthAlgorithm, PrivAlgorithm, SnmpVersion};

#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawSwitchConfig")]
pub struct SwitchConfig {
    /// The `switch` label of every series of this target.
    pub name: String,
    /// `host` or `host:port` (SNMP port 161, gNMI port 9339 by default).
    pub address: String,
    /// A profile name: built-in (`profiles/`) or from `switch_profiles_dir`.
    pub profile: String,
    /// How to read the switch, with the protocol's settings.
    pub access: Access,
    pub interval: Duration,
    pub timeout: Duration,
    pub retries: u32,
    pub max_repetitions: u32,
    /// Lossless priorities and their queues, for ports the switch does not describe.
    pub pfc: PfcConfig,
    /// How often the LLDP neighbours and PFC settings are walked (SNMP), or a gNMI profile's
    /// `settings_paths` read (`switch::settings`).
    pub settings_interval: Duration,
}

#[derive(Debug, Clone)]
pub enum Access {
    Snmp(SnmpConfig),
    Gnmi(GnmiConfig),
}

impl SwitchConfig {
    pub fn protocol(&self) -> Protocol {
        match self.access {
            Access::Snmp(_) => Protocol::Snmp,
            Access::Gnmi(_) => Protocol::Gnmi,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitchConfig {
    name: String,
    address: String,
    #[serde(default)]
    protocol: Protocol,
    profile: String,
    snmp: Option<SnmpConfig>,
    gnmi: Option<GnmiConfig>,
    #[serde(
        default = "default_interval",
        deserialize_with = "crate::yaml::duration"
    )]
    interval: Duration,
    #[serde(
        default = "default_timeout",
        deserialize_with = "crate::yaml::duration"
    )]
    timeout: Duration,
    #[serde(default = "default_retries")]
    retries: u32,
    #[serde(default = "default_max_repetitions")]
    max_repetitions: u32,
    #[serde(
        default = "default_settings_interval",
        deserialize_with = "crate::yaml::duration_or_zero"
    )]
    settings_interval: Duration,
    pfc_priorities: Option<PfcPriorities>,
    #[serde(default)]
    priority_queues: PriorityQueues,
}

impl TryFrom<RawSwitchConfig> for SwitchConfig {
    type Error = String;
    fn try_from(raw: RawSwitchConfig) -> Result<Self, Self::Error> {
        let access = match (raw.protocol, raw.snmp, raw.gnmi) {
            (Protocol::Snmp, Some(snmp), None) => Access::Snmp(snmp),
            (Protocol::Gnmi, None, Some(gnmi)) => Access::Gnmi(gnmi),
            (Protocol::Snmp, None, _) => {
                return Err(format!(
                    "switch {:?}: protocol snmp needs an `snmp:` section",
                    raw.name
                ))
            }
            (Protocol::Gnmi, _, None) => {
                return Err(format!(
                    "switch {:?}: protocol gnmi needs a `gnmi:` section",
                    raw.name
                ))
            }
            (Protocol::Snmp, Some(_), Some(_)) => {
                return Err(format!(
                    "switch {:?}: `gnmi:` is for protocol: gnmi",
                    raw.name
                ))
            }
            (Protocol::Gnmi, Some(_), Some(_)) => {
                return Err(format!(
                    "switch {:?}: `snmp:` is for protocol: snmp",
                    raw.name
                ))
            }
        };
        if raw.timeout >= raw.interval {
            return Err(format!(
                "switch {:?}: timeout {:?} must be shorter than the interval {:?}",
                raw.name, raw.timeout, raw.interval
            ));
        }
        Ok(SwitchConfig {
            name: raw.name,
            address: raw.address,
            profile: raw.profile,
            access,
            interval: raw.interval,
            timeout: raw.timeout,
            retries: raw.retries,
            max_repetitions: raw.max_repetitions,
            pfc: PfcConfig {
                priorities: raw.pfc_priorities,
                queues: raw.priority_queues,
            },
            settings_interval: raw.settings_interval,
        })
    }
}

fn default_settings_interval() -> Duration {
    super::settings::DEFAULT_SETTINGS_INTERVAL
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Snmp,
    Gnmi,
}

/// gNMI settings. The password comes from a file or an environment variable; credentials are
/// only sent over TLS unless the operator says `insecure: true` (a lab without certificates).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawGnmiConfig")]
pub struct GnmiConfig {
    pub mode: GnmiMode,
    pub username: Option<String>,
    pub password: Option<SecretSource>,
    pub tls: Option<GnmiTls>,
}

/// How the exporter reads a gNMI target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GnmiMode {
    /// Subscribe STREAM with SAMPLE at the interval: the target pushes.
    #[default]
    Stream,
    /// Subscribe POLL: one open stream, polled every interval.
    Poll,
    /// Subscribe ONCE (or Get) every interval on a fresh connection.
    Once,
}

/// `gnmi.tls` as written; checked with the rest of `gnmi:` (whose location errors carry).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTlsConfig {
    /// CA bundle for the switch's certificate; the system roots when unset.
    ca_file: Option<PathBuf>,
    /// Client certificate and key, for targets that require mutual TLS.
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    /// Name in the switch's certificate, when it differs from the address.
    server_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGnmiConfig {
    #[serde(default)]
    mode: GnmiMode,
    username: Option<String>,
    username_file: Option<PathBuf>,
    password_file: Option<PathBuf>,
    password_env: Option<String>,
    tls: Option<RawTlsConfig>,
    #[serde(default)]
    insecure: bool,
}

impl TryFrom<RawGnmiConfig> for GnmiConfig {
    type Error = String;
    fn try_from(raw: RawGnmiConfig) -> Result<Self, Self::Error> {
        let password = SecretSource::from_pair(raw.password_file, raw.password_env, "password")?;
        let username = match (raw.username, raw.username_file) {
            (Some(name), None) => Some(name),
            (None, Some(path)) => {
                Some(read_value_file(&path).map_err(|e| format!("username_file: {e}"))?)
            }
            (None, None) => None,
            (Some(_), Some(_)) => return Err("set only one of username and username_file".into()),
        };
        if username.is_some() != password.is_some() {
            return Err("username and password_file/password_env go together".into());
        }
        let tls = match raw.tls {
            Some(tls) => {
                if tls.cert_file.is_some() != tls.key_file.is_some() {
                    return Err("tls.cert_file and tls.key_file go together".into());
                }
                if raw.insecure {
                    return Err("insecure: true turns TLS off; remove it or the tls section".into());
                }
                Some(GnmiTls {
                    ca_file: tls.ca_file,
                    client_cert: tls.cert_file.zip(tls.key_file),
                    server_name: tls.server_name,
                })
            }
            None => None,
        };
        if tls.is_none() && password.is_some() && !raw.insecure {
            return Err(
                "the password would cross the network in clear: add a `tls:` section, or set insecure: true for a lab target"
                    .into(),
            );
        }
        Ok(GnmiConfig {
            mode: raw.mode,
            username,
            password,
            tls,
        })
    }
}

/// SNMP settings. Secrets (community, v3 passwords) come from files or environment variables,
/// never from the config file itself: config files get pasted into tickets.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawSnmpConfig")]
pub struct SnmpConfig {
    pub version: SnmpVersion,
    /// v1 and v2c.
    pub community: Option<SecretSource>,
    /// v3.
    pub user: Option<UsmConfig>,
}

/// An SNMPv3 user: authNoPriv, or authPriv when `priv_protocol` is set.
#[derive(Debug, Clone)]
pub struct UsmConfig {
    pub username: String,
    pub auth_protocol: AuthAlgorithm,
    pub auth_password: SecretSource,
    pub privacy: Option<(PrivAlgorithm, SecretSource)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSnmpConfig {
    version: VersionText,
    community_file: Option<PathBuf>,
    community_env: Option<String>,
    username: Option<String>,
    auth_protocol: Option<AuthAlgorithm>,
    auth_password_file: Option<PathBuf>,
    auth_password_env: Option<String>,
    priv_protocol: Option<PrivAlgorithm>,
    priv_password_file: Option<PathBuf>,
    priv_password_env: Option<String>,
}

/// `version: 1`, `version: 2c` and `version: 3` (YAML reads 1 and 3 as numbers).
#[derive(Deserialize)]
#[serde(untagged)]
enum VersionText {
    Number(u32),
    Text(String),
}

impl TryFrom<RawSnmpConfig> for SnmpConfig {
    type Error = String;
    fn try_from(raw: RawSnmpConfig) -> Result<Self, Self::Error> {
        let version = match raw.version {
            VersionText::Number(1) => SnmpVersion::V1,
            VersionText::Text(t) if t == "1" => SnmpVersion::V1,
            VersionText::Text(t) if t == "2c" => SnmpVersion::V2c,
            VersionText::Number(3) => SnmpVersion::V3,
            VersionText::Text(t) if t == "3" => SnmpVersion::V3,
            _ => return Err("unknown SNMP version; expected 1, 2c or 3".into()),
        };
        let community =
            SecretSource::from_pair(raw.community_file, raw.community_env, "community")?;
        let auth = SecretSource::from_pair(
            raw.auth_password_file,
            raw.auth_password_env,
            "auth_password",
        )?;
        let privacy = SecretSource::from_pair(
            raw.priv_password_file,
            raw.priv_password_env,
            "priv_password",
        )?;
        let v3_fields = raw.username.is_some()
            || raw.auth_protocol.is_some()
            || auth.is_some()
            || raw.priv_protocol.is_some()
            || privacy.is_some();
        match version {
            SnmpVersion::V1 | SnmpVersion::V2c => {
                if v3_fields {
                    return Err(
                        "username, auth_* and priv_* are SNMPv3 settings; set version: 3".into(),
                    );
                }
                let community = community.ok_or(
                    "set community_file or community_env (inline communities are not accepted)",
                )?;
                Ok(SnmpConfig {
                    version,
                    community: Some(community),
                    user: None,
                })
            }
            SnmpVersion::V3 => {
                if community.is_some() {
                    return Err("SNMPv3 uses username and passwords, not a community".into());
                }
                let username = raw.username.ok_or("SNMPv3 needs username")?;
                // noAuthNoPriv would send counters in clear with no authentication: refused.
                let auth_protocol = raw.auth_protocol.ok_or(
                    "SNMPv3 needs auth_protocol (md5, sha, sha224, sha256, sha384, sha512)",
                )?;
                let auth_password =
                    auth.ok_or("SNMPv3 needs auth_password_file or auth_password_env")?;
                let privacy = match (raw.priv_protocol, privacy) {
                    (Some(protocol), Some(password)) => Some((protocol, password)),
                    (None, None) => None,
                    _ => return Err("priv_protocol and priv_password_file/_env go together".into()),
                };
                Ok(SnmpConfig {
                    version,
                    community: None,
                    user: Some(UsmConfig {
                        username,
                        auth_protocol,
                        auth_password,
                        privacy,
                    }),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gnmi(text: &str) -> Result<GnmiConfig, String> {
        serde_yaml::from_str::<GnmiConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn gnmi_modes_credentials_and_tls() {
        let plain = gnmi("{}").unwrap();
        assert_eq!(plain.mode, GnmiMode::Stream);
        assert!(plain.tls.is_none() && plain.password.is_none());
        let tls = gnmi("{mode: poll, username: mon, password_env: P, tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem}}").unwrap();
        assert_eq!(tls.mode, GnmiMode::Poll);
        assert_eq!(tls.password, Some(SecretSource::Env("P".into())));
        let files = tls.tls.unwrap();
        assert_eq!(files.ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            files.client_cert,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        assert!(gnmi("{mode: once, username: mon, password_env: P, insecure: true}").is_ok());
        for (text, expected) in [
            ("{username: mon, password_env: P}", "in clear"),
            ("{username: mon}", "go together"),
            ("{password: x}", "unknown field `password`"),
            ("{tls: {cert_file: /c.pem}}", "cert_file and tls.key_file"),
            ("{tls: {}, insecure: true}", "turns TLS off"),
            ("{mode: sample}", "unknown variant `sample`"),
        ] {
            let err = gnmi(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    fn snmp(text: &str) -> Result<SnmpConfig, String> {
        serde_yaml::from_str::<SnmpConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn snmp_versions_and_secrets() {
        let v1 = snmp("{version: 1, community_file: /c}").unwrap();
        assert_eq!(v1.version, SnmpVersion::V1);
        assert_eq!(v1.community, Some(SecretSource::File("/c".into())));
        assert_eq!(
            snmp("{version: 2c, community_env: C}").unwrap().version,
            SnmpVersion::V2c
        );
        let v3 = snmp("{version: 3, username: mon, auth_protocol: sha256, auth_password_env: A, priv_protocol: aes, priv_password_file: /p}").unwrap();
        let user = v3.user.unwrap();
        assert_eq!(
            (user.username.as_str(), user.auth_protocol),
            ("mon", AuthAlgorithm::Sha256)
        );
        assert_eq!(
            user.privacy,
            Some((PrivAlgorithm::Aes, SecretSource::File("/p".into())))
        );
        for (text, expected) in [
            ("{version: 2c, community: public}", "unknown field `community`"),
            ("{version: 2c}", "set community_file or community_env"),
            ("{version: 2c, community_file: /a, community_env: B}", "only one of community_file and community_env"),
            ("{version: 3, username: mon}", "needs auth_protocol"),
            ("{version: 3, username: mon, auth_protocol: sha, auth_password_env: A, priv_protocol: aes}", "go together"),
            ("{version: 3, community_env: C}", "not a community"),
            ("{version: 2c, community_env: C, username: mon}", "set version: 3"),
            ("{version: 4, community_env: C}", "expected 1, 2c or 3"),
        ] {
            let err = snmp(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
