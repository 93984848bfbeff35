//! Wiring: from a resolved [`Config`] to the collectors, the switch poller and the HTTP state.
//! `serve` goes `main` -> `cli` (flags onto a `Config`) -> here -> `server::router`; `demo`
//! builds one state per simulated host through [`app_state`] too.

use std::path::PathBuf;
use std::sync::Arc;

use crate::collector::{Collector, Collectors};
use crate::config::Config;
use crate::diag::nccl::collector::{LogDir, NcclCollector};
use crate::node::config::EthtoolSourceKind;
use crate::node::ethtool::{EthtoolSource, FileSource, IoctlSource};
use crate::node::storm::StormDetector;
use crate::node::{NodeCollector, NodeCollectorConfig};
use crate::process_metrics::ProcessCollector;
use crate::server::AppState;
use crate::switch::config::{Access, SnmpConfig, SwitchConfig};
use crate::switch::gnmi::GnmiTarget;
use crate::switch::metrics::SwitchCollector;
use crate::switch::poller::{Poller, Source, Target, DEFAULT_CONCURRENCY};
use crate::switch::profile::Profiles;
use crate::switch::secret::{Secret, SecretSource};
use crate::switch::snmp::{Credentials, SnmpTarget, SnmpVersion, Usm};
use crate::yaml::ConfigError;

/// Builds the node collector a config asks for, reading driver statistics from `ethtool`.
fn node_collector(
    config: &Config,
    ethtool: Option<Arc<dyn EthtoolSource>>,
) -> Option<NodeCollector> {
    let node = &config.node;
    if !node.enabled {
        return None;
    }
    Some(NodeCollector::new(NodeCollectorConfig {
        sysfs_root: node.sysfs_path.clone(),
        devices: node.devices.clone(),
        ethtool,
        ethtool_include: node.ethtool.include.clone(),
    }))
}

/// Where driver statistics come from, when they are read.
fn ethtool_source(config: &Config) -> Option<Arc<dyn EthtoolSource>> {
    let ethtool = &config.node.ethtool;
    match ethtool.source {
        EthtoolSourceKind::Ioctl => Some(Arc::new(IoctlSource)),
        EthtoolSourceKind::Files => ethtool
            .stats_dir
            .as_ref()
            .map(|dir| Arc::new(FileSource::new(dir)) as Arc<dyn EthtoolSource>),
        EthtoolSourceKind::None => None,
    }
}

/// Starts the fast PFC storm sampler on the driver statistics, when they are read: it samples
/// the pause counters on its own thread and each scrape serves its findings.
fn storm_detector(
    config: &Config,
    ethtool: Option<Arc<dyn EthtoolSource>>,
) -> Option<Arc<StormDetector>> {
    let node = &config.node;
    if !node.enabled || !node.pfc_storm.enabled {
        return None;
    }
    let source = ethtool?;
    let detector = Arc::new(StormDetector::new(node.pfc_storm));
    match detector.spawn(node.sysfs_path.clone(), node.devices.clone(), source) {
        Ok(_) => Some(detector),
        Err(e) => {
            // Scrapes still carry the cumulative pause counters.
            tracing::error!("the PFC storm sampler did not start: {e}");
            None
        }
    }
}

/// Builds the switch poller: profiles resolved, communities read. Errors name the switch, never
/// the secret.
pub fn switch_poller(config: &Config) -> Result<Option<Arc<Poller>>, ConfigError> {
    if config.switches.is_empty() {
        return Ok(None);
    }
    let invalid = |message: String| ConfigError::Invalid {
        path: PathBuf::from("switches"),
        message,
    };
    let profiles = match &config.switch_profiles_dir {
        Some(dir) => Profiles::with_dir(dir),
        None => Profiles::builtin(),
    }
    .map_err(|e| invalid(e.to_string()))?;
    let mut targets = Vec::new();
    for switch in &config.switches {
        let profile = profiles.get(&switch.profile).ok_or_else(|| {
            invalid(format!(
                "switch {:?}: unknown profile {:?}; known: {}",
                switch.name,
                switch.profile,
                profiles.names().collect::<Vec<_>>().join(", ")
            ))
        })?;
        let secret = |source: &SecretSource, what: &str| {
            source
                .read()
                .map_err(|e| invalid(format!("switch {:?}: {what}: {e}", switch.name)))
        };
        let source = match &switch.access {
            Access::Snmp(snmp) => {
                if profile.columns.is_empty() {
                    return Err(invalid(format!(
                        "switch {:?}: profile {:?} has no SNMP columns; use protocol: gnmi",
                        switch.name, profile.name
                    )));
                }
                Source::Snmp(snmp_target(switch, snmp, &secret)?)
            }
            Access::Gnmi(gnmi) => {
                if profile.gnmi.is_empty() {
                    return Err(invalid(format!(
                        "switch {:?}: profile {:?} has no gNMI paths; use protocol: snmp, or a profile with a `gnmi:` section (sonic, openconfig)",
                        switch.name, profile.name
                    )));
                }
                let credentials = match (&gnmi.username, &gnmi.password) {
                    (Some(user), Some(password)) => {
                        Some((user.clone(), secret(password, "password")?))
                    }
                    _ => None,
                };
                Source::Gnmi {
                    target: GnmiTarget {
                        address: with_default_port(&switch.address, 9339),
                        timeout: switch.timeout,
                        credentials,
                        tls: gnmi.tls.clone(),
                    },
                    mode: gnmi.mode,
                }
            }
        };
        targets.push(Target {
            name: switch.name.clone(),
            profile: profile.clone(),
            source,
            interval: switch.interval,
        });
    }
    Ok(Some(Arc::new(Poller::new(targets, DEFAULT_CONCURRENCY))))
}

fn snmp_target(
    switch: &SwitchConfig,
    snmp: &SnmpConfig,
    secret: &dyn Fn(&SecretSource, &str) -> Result<Secret, ConfigError>,
) -> Result<SnmpTarget, ConfigError> {
    let credentials = match (&snmp.community, &snmp.user) {
        (Some(community), _) if snmp.version == SnmpVersion::V1 => {
            Credentials::V1(secret(community, "community")?)
        }
        (Some(community), _) => Credentials::V2c(secret(community, "community")?),
        (None, Some(user)) => Credentials::V3(Usm {
            username: user.username.clone(),
            auth: (
                user.auth_protocol,
                secret(&user.auth_password, "auth password")?,
            ),
            privacy: match &user.privacy {
                Some((protocol, password)) => Some((*protocol, secret(password, "priv password")?)),
                None => None,
            },
        }),
        (None, None) => unreachable!("SnmpConfig always has a community or a user"),
    };
    Ok(SnmpTarget {
        address: switch.address.clone(),
        credentials,
        timeout: switch.timeout,
        retries: switch.retries,
        max_repetitions: switch.max_repetitions,
    })
}

/// `host` becomes `host:port`; `host:port` and `[v6]:port` stay as they are.
fn with_default_port(address: &str, port: u16) -> String {
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

/// The NCCL log collector, when `nccl.log_dir` is set: its scan thread starts here, and each
/// scrape serves the last finished scan.
fn nccl_collector(config: &Config) -> Option<NcclCollector> {
    let nccl = &config.nccl;
    let limits = nccl.limits();
    let source = Arc::new(LogDir(nccl.log_dir.clone()?));
    match NcclCollector::spawn(source, limits) {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::error!("the NCCL log scan thread did not start: {e}");
            None
        }
    }
}

/// The HTTP state for a resolved config: every collector it enables, in the framework's order.
/// `process` is the process's own figures, for the one state that stands for the process.
pub fn app_state(
    config: &Config,
    switches: Option<Arc<Poller>>,
    process: Option<ProcessCollector>,
) -> AppState {
    // One statistics source for the walk and the storm sampler.
    let ethtool = ethtool_source(config);
    let node = node_collector(config, ethtool.clone()).map(Arc::new);
    let mut collectors: Vec<Arc<dyn Collector>> = Vec::new();
    if let Some(node) = &node {
        collectors.push(node.clone());
    }
    if let Some(storm) = storm_detector(config, ethtool) {
        collectors.push(storm);
    }
    if let Some(nccl) = nccl_collector(config) {
        collectors.push(Arc::new(nccl));
    }
    if let Some(poller) = &switches {
        collectors.push(Arc::new(SwitchCollector {
            poller: poller.clone(),
            only: None,
        }));
    }
    if let Some(process) = process.filter(|_| config.process.enabled) {
        collectors.push(Arc::new(process));
    }
    AppState::new(
        Collectors::new(collectors),
        node,
        switches,
        config
            .web
            .telemetry_path
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_TELEMETRY_PATH.to_string()),
    )
}
