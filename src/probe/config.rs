//! `probe:` in the config file and `--collector.probe*` on the command line: the `probe`
//! collector, off by default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::agent;
use super::responder::Limits;
use super::targets;
use super::transport::SendOptions;

/// `probe`: which ports probe, whom, how fast, and what is served.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    pub enabled: bool,
    /// This host's name in the probe series of its peers; the system's host name when unset.
    pub host: Option<String>,
    /// The RDMA devices that probe (anchored regex on the device name); every device when unset.
    pub device_include: Option<String>,
    /// The rail of each device by name. Unset, a device's rail is the index of the accelerator
    /// beside it in the PCI tree (NIC i beside GPU i, as rail-optimized servers pair them); a
    /// device beside none is off the rails (100 and on); without accelerators, its place in
    /// the sorted device list ([`super::rails`]).
    pub rails: BTreeMap<String, u32>,
    /// The leaf switch each device is cabled to, by device name (`mlx5_0: su1-leaf0`).
    /// Published with the port's address: ports that know their leaf probe their leaf's
    /// other hosts (`leaf_sample`) and cover the leaf pairs ([`super::targets`]).
    pub leaves: BTreeMap<String, String>,
    /// The fleet's leaves in one file, for one config everywhere (a ConfigMap): a YAML map of
    /// host name to `{device: leaf}`; this host's entries are read at startup, and `leaves`
    /// wins over them.
    pub leaves_file: Option<PathBuf>,
    /// The Q_Key every probe endpoint uses: peers must agree on it.
    pub qkey: u32,
    /// A probe without its answer after this long is lost.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub timeout: Duration,
    /// Same-rail ports on other hosts probed per round, per local port (with leaves known:
    /// other leaves of the rail).
    pub rail_sample: usize,
    /// With leaves known: other hosts' ports under the same leaf probed per round, per port.
    pub leaf_sample: usize,
    /// Other-rail ports on other hosts probed per round, per local port.
    pub cross_rail_sample: usize,
    /// Flow labels (UDP source ports) rotated over, to cover ECMP members.
    pub flow_labels: u32,
    /// Probes a second one local port may send.
    pub per_port_rate: u32,
    /// Probes a second the host may send.
    pub total_rate: u32,
    /// The shortest round: a path is probed at most once a round.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub min_round: Duration,
    /// The GRH traffic class of probes and answers (DSCP << 2). Unset: each port's RoCE class,
    /// as MLNX_OFED's global class or the NIC's DSCP trust and PFC priorities say, else DSCP 26
    /// (104), so that probes ride the RDMA priority ([`super::class`]).
    pub traffic_class: Option<u8>,
    /// The service level of probes and answers.
    pub service_level: u8,
    /// Answers a second to one source, and in total.
    pub answers_per_source: u32,
    pub answers_total: u32,
    /// Serve per-target series for every target, not only the losing ones (small fabrics).
    pub per_target: bool,
    /// Peer agents: `host:port` of their HTTP endpoints, whose `/probe-address` lists their ports.
    pub peers: Vec<String>,
    /// A file of peer agents, one `host:port` a line or a Prometheus file-SD document
    /// (`- targets: [...]`), read again at every refresh.
    pub peers_file: Option<PathBuf>,
    /// A DNS name whose addresses are the peer agents (a Kubernetes headless Service),
    /// `name:port`, resolved again at every refresh.
    pub peers_dns: Option<String>,
    /// Time between two refreshes of the peers' addresses.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub peers_refresh: Duration,
    /// `/probe-ping` may probe a GID and QPN outside the peer set (off: on-demand probes reach
    /// only the ports this agent already probes).
    pub ping_unlisted: bool,
    /// How long probes to a peer whose agent went wholly silent wait to be told a restart's
    /// (not lost) from a fault's (lost): longer than the agents take to restart.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub restart_grace: Duration,
    /// On SIGTERM or SIGINT, how long the agent keeps serving until a scrape has carried
    /// `rdma_probe_leaving` 1, so that the localizer tells a restart from a dead host; 0 stops at
    /// once. With the HTTP shutdown's grace, under the pod's terminationGracePeriodSeconds.
    #[serde(deserialize_with = "crate::yaml::duration_or_zero")]
    pub leave_wait: Duration,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        let targets = targets::Settings::default();
        let limits = Limits::default();
        ProbeConfig {
            enabled: false,
            host: None,
            device_include: None,
            rails: Default::default(),
            leaves: Default::default(),
            leaves_file: None,
            qkey: DEFAULT_QKEY,
            timeout: agent::Settings::default().timeout,
            rail_sample: targets.rail_sample,
            leaf_sample: targets.leaf_sample,
            cross_rail_sample: targets.cross_sample,
            flow_labels: targets.flow_labels,
            per_port_rate: targets.per_port_rate,
            total_rate: targets.total_rate,
            min_round: targets.min_round,
            traffic_class: None,
            service_level: 0,
            answers_per_source: limits.per_source,
            answers_total: limits.total,
            per_target: false,
            peers: Vec::new(),
            peers_file: None,
            peers_dns: None,
            peers_refresh: Duration::from_secs(60),
            ping_unlisted: false,
            restart_grace: agent::Settings::default().restart_grace,
            leave_wait: DEFAULT_LEAVE_WAIT,
        }
    }
}

/// Longer than a 15 s scrape interval, and with the HTTP shutdown's 10 s under Kubernetes'
/// default 30 s terminationGracePeriodSeconds (the chart sets 40).
pub(crate) const DEFAULT_LEAVE_WAIT: Duration = Duration::from_secs(20);

/// "RFEP" in ASCII: a Q_Key no other UD user of the port is likely to pick.
pub(crate) const DEFAULT_QKEY: u32 = 0x5246_4550;

impl ProbeConfig {
    /// Each local device's leaf for `host`: `leaves_file`'s entries for it under `leaves`.
    pub fn leaves_of(&self, host: &str) -> Result<BTreeMap<String, String>, String> {
        let mut leaves = BTreeMap::new();
        let mut problem = Ok(());
        if let Some(path) = &self.leaves_file {
            let read = std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    serde_yaml::from_str::<BTreeMap<String, BTreeMap<String, String>>>(&text)
                        .map_err(|e| e.to_string())
                });
            match read {
                Ok(mut fleet) => leaves = fleet.remove(host).unwrap_or_default(),
                Err(e) => problem = Err(format!("probe.leaves_file {}: {e}", path.display())),
            }
        }
        leaves.extend(self.leaves.iter().map(|(d, l)| (d.clone(), l.clone())));
        problem.map(|()| leaves)
    }

    /// The loop's settings.
    pub fn settings(&self) -> agent::Settings {
        agent::Settings {
            targets: targets::Settings {
                rail_sample: self.rail_sample,
                leaf_sample: self.leaf_sample,
                cross_sample: self.cross_rail_sample,
                flow_labels: self.flow_labels,
                per_port_rate: self.per_port_rate,
                total_rate: self.total_rate,
                min_round: self.min_round,
            },
            timeout: self.timeout,
            send: SendOptions {
                flow_label: 0,
                traffic_class: self
                    .traffic_class
                    .unwrap_or(super::class::DEFAULT_TRAFFIC_CLASS),
                service_level: self.service_level,
                peer: false,
            },
            responder: Limits {
                per_source: self.answers_per_source,
                total: self.answers_total,
                ..Limits::default()
            },
            restart_grace: self.restart_grace,
        }
    }

    /// What is wrong with the values, each as `probe.<key>: <why>`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if let Some(pattern) = &self.device_include {
            if let Err(e) = regex::Regex::new(&format!("^(?:{pattern})$")) {
                problems.push(("device_include", format!("probe.device_include: {e}")));
            }
        }
        for (key, value) in [
            ("per_port_rate", self.per_port_rate),
            ("total_rate", self.total_rate),
            ("flow_labels", self.flow_labels),
            ("answers_per_source", self.answers_per_source),
            ("answers_total", self.answers_total),
        ] {
            if value == 0 {
                problems.push((key, format!("probe.{key}: must be at least 1")));
            }
        }
        if self.flow_labels > 0xF_FFFF {
            problems.push((
                "flow_labels",
                "probe.flow_labels: a flow label has 20 bits".to_string(),
            ));
        }
        if self.timeout.is_zero() {
            problems.push(("timeout", "probe.timeout: must be above 0".to_string()));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `leave_wait` is 20 s unless set; `0` turns the wait off.
    #[test]
    fn leave_wait_defaults_to_20s_and_0_turns_it_off() {
        let parse = |text: &str| {
            serde_yaml::from_str::<ProbeConfig>(text)
                .unwrap()
                .leave_wait
        };
        assert_eq!(parse("enabled: true"), Duration::from_secs(20));
        assert_eq!(parse("leave_wait: 5s"), Duration::from_secs(5));
        assert_eq!(parse("leave_wait: 0"), Duration::ZERO);
        assert!(serde_yaml::from_str::<ProbeConfig>("leave_wait: soon").is_err());
    }

    /// One file for the fleet: each host takes its own entries, the config's `leaves` win, and
    /// a file that cannot be read or parsed is an error naming it.
    #[test]
    fn a_host_takes_its_leaves_from_the_fleets_file_under_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leaves.yml");
        std::fs::write(
            &file,
            "gpu-01: {mlx5_0: su1-leaf0, mlx5_1: su1-leaf1}\ngpu-40: {mlx5_0: su2-leaf0}\n",
        )
        .unwrap();
        let mut config = ProbeConfig {
            leaves_file: Some(file.clone()),
            ..ProbeConfig::default()
        };
        config.leaves.insert("mlx5_1".into(), "spare-leaf".into());
        let mine = config.leaves_of("gpu-01").unwrap();
        assert_eq!(mine["mlx5_0"], "su1-leaf0");
        assert_eq!(mine["mlx5_1"], "spare-leaf");
        assert_eq!(config.leaves_of("gpu-99").unwrap().len(), 1);
        std::fs::write(&file, "gpu-01: [not, a, map]\n").unwrap();
        let error = config.leaves_of("gpu-01").unwrap_err();
        assert!(error.contains("leaves.yml"), "{error}");
        config.leaves_file = Some(dir.path().join("gone.yml"));
        assert!(config.leaves_of("gpu-01").unwrap_err().contains("gone.yml"));
    }
}
