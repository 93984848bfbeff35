//! From the `switches:` of a config to poll targets: profiles resolved, secrets read, addresses
//! completed. Every problem of every switch is reported at once, each placed at the key that
//! causes it; errors name the switch and the secret's file or variable, never its value.

use std::path::Path;

use super::config::{Access, SnmpConfig, SwitchConfig};
use super::gnmi::GnmiTarget;
use super::poller::{Source, Target};
use super::profile::{Profile, Profiles};
use super::secret::{Secret, SecretSource};
use super::snmp::{Credentials, SnmpTarget, SnmpVersion, Usm};
use crate::yaml::{Problem, Step};

/// RFC 3414 11.2: an SNMPv3 password shorter than this is refused by agents (and by net-snmp
/// tools), so the switch would answer every poll with an authentication error.
pub(crate) const MIN_USM_PASSWORD_CHARS: usize = 8;

/// The targets of every switch that is right, and the problems of the others.
pub fn build(
    switches: &[SwitchConfig],
    profiles_dir: Option<&Path>,
) -> (Vec<Target>, Vec<Problem>) {
    let mut problems = Vec::new();
    if switches.is_empty() {
        return (Vec::new(), problems);
    }
    let profiles = match profiles_dir {
        Some(dir) => Profiles::with_dir(dir),
        None => Profiles::builtin(),
    };
    let profiles = match profiles {
        Ok(profiles) => profiles,
        Err(e) => {
            problems.push(Problem::at(
                vec![Step::Key("switch_profiles_dir")],
                format!("switch_profiles_dir: {e}"),
            ));
            return (Vec::new(), problems);
        }
    };
    let mut targets = Vec::new();
    for (index, switch) in switches.iter().enumerate() {
        let mut of_switch = SwitchProblems {
            index,
            name: &switch.name,
            problems: Vec::new(),
        };
        if let Some(target) = target(switch, &profiles, &mut of_switch) {
            targets.push(target);
        }
        problems.extend(of_switch.problems);
    }
    (targets, problems)
}

/// The problems of one switch, placed under `switches[index]`.
struct SwitchProblems<'a> {
    index: usize,
    name: &'a str,
    problems: Vec<Problem>,
}

impl SwitchProblems<'_> {
    fn push(&mut self, keys: &[&'static str], message: String) {
        self.push_any(&[keys], message);
    }

    /// A problem that one of several keys may hold (a secret's `_file` or `_env`).
    fn push_any(&mut self, places: &[&[&'static str]], message: String) {
        let at = places
            .iter()
            .map(|keys| {
                let mut path = vec![Step::Key("switches"), Step::Index(self.index)];
                path.extend(keys.iter().map(|k| Step::Key(k)));
                path
            })
            .collect();
        self.problems.push(Problem {
            at,
            message: format!("switch {:?}: {message}", self.name),
        });
    }

    /// Reads a secret; a problem names its file or variable.
    fn secret(
        &mut self,
        section: &'static str,
        key: SecretKey,
        source: &SecretSource,
    ) -> Option<Secret> {
        match source.read() {
            Ok(secret) => Some(secret),
            Err(e) => {
                self.push(&[section, key.field(source)], format!("{}: {e}", key.what));
                None
            }
        }
    }

    /// An SNMPv3 password, which must be long enough to derive a key from.
    fn usm_password(&mut self, key: SecretKey, source: &SecretSource) -> Option<Secret> {
        let secret = self.secret("snmp", key, source)?;
        if secret.expose().chars().count() < MIN_USM_PASSWORD_CHARS {
            // The length is not said: it is a fact about the secret.
            self.push(
                &["snmp", key.field(source)],
                format!(
                    "{} is shorter than the {MIN_USM_PASSWORD_CHARS} characters SNMPv3 requires (RFC 3414)",
                    key.what
                ),
            );
            return None;
        }
        Some(secret)
    }
}

/// Where a secret is set: the keys of its file and its variable, and what to call it.
#[derive(Clone, Copy)]
struct SecretKey {
    file: &'static str,
    env: &'static str,
    what: &'static str,
}

impl SecretKey {
    /// The key that sets `source`: the file's or the variable's.
    fn field(self, source: &SecretSource) -> &'static str {
        match source {
            SecretSource::File(_) => self.file,
            SecretSource::Env(_) => self.env,
        }
    }
}

const COMMUNITY: SecretKey = SecretKey {
    file: "community_file",
    env: "community_env",
    what: "community",
};
const AUTH_PASSWORD: SecretKey = SecretKey {
    file: "auth_password_file",
    env: "auth_password_env",
    what: "auth password",
};
const PRIV_PASSWORD: SecretKey = SecretKey {
    file: "priv_password_file",
    env: "priv_password_env",
    what: "priv password",
};
const GNMI_PASSWORD: SecretKey = SecretKey {
    file: "password_file",
    env: "password_env",
    what: "password",
};

fn target(switch: &SwitchConfig, profiles: &Profiles, out: &mut SwitchProblems) -> Option<Target> {
    let Some(profile) = profiles.get(&switch.profile) else {
        out.push(
            &["profile"],
            format!(
                "unknown profile {:?}; known: {}",
                switch.profile,
                profiles.names().collect::<Vec<_>>().join(", ")
            ),
        );
        // The secrets are still checked, so that one run reports them too.
        let _ = source(switch, None, out);
        return None;
    };
    let source = source(switch, Some(profile), out)?;
    Some(Target {
        name: switch.name.clone(),
        profile: profile.clone(),
        source,
        interval: switch.interval,
        pfc: switch.pfc,
        settings_interval: switch.settings_interval,
    })
}

/// How the switch is read; `profile` is `None` when it is unknown (secrets checked only).
fn source(
    switch: &SwitchConfig,
    profile: Option<&Profile>,
    out: &mut SwitchProblems,
) -> Option<Source> {
    match &switch.access {
        Access::Snmp(snmp) => {
            if profile.is_some_and(|p| p.columns.is_empty()) {
                out.push(
                    &["profile"],
                    format!(
                        "profile {:?} has no SNMP columns; use protocol: gnmi",
                        switch.profile
                    ),
                );
            }
            let target = snmp_target(switch, snmp, out);
            profile?;
            Some(Source::Snmp(target?))
        }
        Access::Gnmi(gnmi) => {
            if profile.is_some_and(|p| p.gnmi.is_empty()) {
                out.push(
                    &["profile"],
                    format!(
                        "profile {:?} has no gNMI paths; use protocol: snmp, or a profile with a `gnmi:` section (sonic, openconfig)",
                        switch.profile
                    ),
                );
            }
            let credentials = match (&gnmi.username, &gnmi.password) {
                (Some(user), Some(password)) => {
                    Some((user.clone(), out.secret("gnmi", GNMI_PASSWORD, password)?))
                }
                _ => None,
            };
            profile.filter(|p| !p.gnmi.is_empty())?;
            Some(Source::Gnmi {
                target: GnmiTarget {
                    address: with_default_port(&switch.address, 9339),
                    timeout: switch.timeout,
                    credentials,
                    tls: gnmi.tls.clone(),
                },
                mode: gnmi.mode,
            })
        }
    }
}

fn snmp_target(
    switch: &SwitchConfig,
    snmp: &SnmpConfig,
    out: &mut SwitchProblems,
) -> Option<SnmpTarget> {
    let credentials = match (&snmp.community, &snmp.user) {
        (Some(community), _) => {
            let community = out.secret("snmp", COMMUNITY, community)?;
            if snmp.version == SnmpVersion::V1 {
                Credentials::V1(community)
            } else {
                Credentials::V2c(community)
            }
        }
        (None, Some(user)) => {
            // Both passwords are checked before giving up, so that both are reported.
            let auth = out.usm_password(AUTH_PASSWORD, &user.auth_password);
            let privacy = match &user.privacy {
                Some((protocol, password)) => {
                    Some((*protocol, out.usm_password(PRIV_PASSWORD, password)?))
                }
                None => None,
            };
            Credentials::V3(Usm {
                username: user.username.clone(),
                auth: (user.auth_protocol, auth?),
                privacy,
            })
        }
        (None, None) => {
            out.push(&["snmp"], "no community and no user".into());
            return None;
        }
    };
    Some(SnmpTarget {
        address: switch.address.clone(),
        credentials,
        timeout: switch.timeout,
        retries: switch.retries,
        max_repetitions: switch.max_repetitions,
    })
}

/// `host` becomes `host:port`; `host:port` and `[v6]:port` stay as they are.
pub(crate) fn with_default_port(address: &str, port: u16) -> String {
    let has_port = match address.rsplit_once(':') {
        Some((host, p)) => p.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']')),
        None => false,
    };
    if has_port {
        address.to_string()
    } else if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}
