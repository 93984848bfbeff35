//! The simulated fleet: the demo processes, the clusters each is scraped as, and the
//! Prometheus configuration that scrapes them as shipped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::bail;
use serde_yaml::Value;

use crate::alerting;
use crate::common::server::Server;

/// The demo's largest shape is `--hosts` 64, `--nics-per-host` 8, `--leaves` 8.
pub const MAX_HOSTS: usize = 64;
pub const NICS: usize = 8;
/// One leaf per rail (NIC n of every host on leaf n), as GPU fabrics are cabled.
pub const LEAVES: usize = 8;
/// The shipped `rdma-switches` job's interval.
pub const SWITCH_INTERVAL_S: f64 = 30.0;
/// Each demo its own scenario, so that the rules see faults as well as a healthy fabric.
const SCENARIOS: [&str; 4] = ["pfc-storm", "healthy", "ecn-too-high", "link-flap"];

/// How the requested node count is laid out.
pub struct Plan {
    pub demos: usize,
    pub hosts: usize,
    /// Clusters each demo is scraped as.
    pub replicas: usize,
    pub leaves: usize,
}

impl Plan {
    /// `nodes` over `demos` processes of at most `max_hosts` hosts each (a 64-host demo takes
    /// about 40 % of a core to simulate), each scraped as enough clusters to make up the rest.
    pub fn new(nodes: usize, demos: usize, max_hosts: usize) -> anyhow::Result<Plan> {
        if demos > SCENARIOS.len() {
            bail!("FLEET_DEMOS={demos}: at most {}", SCENARIOS.len());
        }
        let hosts = nodes
            .div_ceil(demos)
            .clamp(2, max_hosts.clamp(2, MAX_HOSTS));
        let replicas = nodes.div_ceil(demos * hosts).max(1);
        Ok(Plan {
            demos,
            hosts,
            replicas,
            leaves: LEAVES,
        })
    }

    pub fn nodes(&self) -> usize {
        self.demos * self.hosts * self.replicas
    }

    /// (demo index, cluster label) of every simulated cluster.
    fn clusters(&self) -> Vec<(usize, String)> {
        (0..self.demos)
            .flat_map(|d| (0..self.replicas).map(move |r| (d, format!("fleet-{d}-{r:03}"))))
            .collect()
    }
}

pub struct Fleet {
    demos: Vec<Server>,
    clusters: Vec<(usize, String)>,
    node_targets: PathBuf,
    switch_targets: PathBuf,
}

impl Fleet {
    /// Starts the demos; no target is listed yet (Prometheus' baseline comes first).
    pub fn start(plan: &Plan, dir: &Path) -> anyhow::Result<Fleet> {
        let mut demos = Vec::new();
        for (index, scenario) in SCENARIOS.iter().take(plan.demos).enumerate() {
            let hosts = plan.hosts.to_string();
            let nics = NICS.to_string();
            let leaves = plan.leaves.to_string();
            let seed = (index + 1).to_string();
            let args: [&str; 12] = [
                "--scenario",
                scenario,
                "--hosts",
                &hosts,
                "--nics-per-host",
                &nics,
                "--leaves",
                &leaves,
                "--switch-interval",
                "30s",
                "--seed",
                &seed,
            ];
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            demos.push(Server::start_rfe_subcommand("demo", "demo", &args)?);
        }
        let fleet = Fleet {
            demos,
            clusters: plan.clusters(),
            node_targets: dir.join("nodes.json"),
            switch_targets: dir.join("switches.json"),
        };
        write_whole(&fleet.node_targets, "[]")?;
        write_whole(&fleet.switch_targets, "[]")?;
        Ok(fleet)
    }

    /// Lists every cluster's hosts and switch endpoint in the file_sd files.
    pub fn list_targets(&self) -> anyhow::Result<()> {
        let pairs: Vec<(&str, &str)> = self
            .clusters
            .iter()
            .map(|(d, c)| (self.demos[*d].address.as_str(), c.as_str()))
            .collect();
        alerting::write_demo_targets(&self.node_targets, &pairs);
        let switches: Vec<serde_json::Value> = pairs
            .iter()
            .map(|(address, cluster)| {
                serde_json::json!({
                    "targets": [address],
                    "labels": {"instance": "switch-poller", "cluster": cluster},
                })
            })
            .collect();
        write_whole(
            &self.switch_targets,
            &serde_json::Value::Array(switches).to_string(),
        )
    }

    /// The shipped node jobs and rule files, the switches every 30 s, Prometheus' default 15 s
    /// elsewhere; no Alertmanager (the alerts are evaluated all the same).
    pub fn prometheus_config(&self, rule_files: &[PathBuf]) -> String {
        let mut jobs = alerting::shipped_node_jobs(&self.node_targets);
        let switches = serde_json::json!({
            "job_name": "rdma-switches",
            "scrape_interval": format!("{SWITCH_INTERVAL_S}s"),
            "scrape_timeout": "25s",
            "file_sd_configs": [{"files": [self.switch_targets], "refresh_interval": "2s"}],
        });
        jobs.push(serde_json::from_value(switches).expect("a valid job"));
        let config = serde_json::json!({
            "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
            "rule_files": rule_files,
        });
        let mut config: Value = serde_json::from_value(config).expect("a valid config");
        config
            .as_mapping_mut()
            .expect("a mapping")
            .insert("scrape_configs".into(), Value::Sequence(jobs));
        serde_yaml::to_string(&config).expect("YAML")
    }

    /// Stops or resumes every demo ([`Server::set_paused`]).
    pub fn set_paused(&self, paused: bool) -> anyhow::Result<()> {
        self.demos.iter().try_for_each(|d| d.set_paused(paused))
    }

    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.demos.iter_mut().try_for_each(Server::check_alive)
    }
}

/// Written whole and renamed into place: Prometheus reads a file_sd file when it changes.
fn write_whole(path: &Path, text: &str) -> anyhow::Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)?;
    Ok(())
}
