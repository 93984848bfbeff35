//! `ib_fabric:` in the config file and `--collector.ib_fabric.*` on the command line: the
//! `ib_fabric` collector, off by default (one or two hosts per subnet run it).

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use super::selection::{Selection, Shard};

/// `ib_fabric`: the subnet scan and what it exports.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IbFabricConfig {
    pub enabled: bool,
    /// Time between the starts of two scans.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub interval: Duration,
    /// The whole scan's deadline (discovery and every switch's counters).
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub timeout: Duration,
    /// The longest one query (one `perfquery` run) may take.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub query_timeout: Duration,
    /// `INDEX/COUNT`: read only the switches whose GUID falls in this shard.
    #[serde(deserialize_with = "shard")]
    pub shard: Option<Shard>,
    /// Read only the switches whose NodeDescription matches (anchored).
    #[serde(deserialize_with = "anchored")]
    pub switch_include: Option<Regex>,
    /// Never read the switches whose NodeDescription matches (anchored).
    #[serde(deserialize_with = "anchored")]
    pub switch_exclude: Option<Regex>,
    /// Export only the error and congestion counters: no data or packet counters.
    pub errors_only: bool,
    /// The `ibnetdiscover` the scan runs (a name is looked up on `PATH`).
    pub ibnetdiscover: PathBuf,
    /// The `perfquery` the scan runs (a name is looked up on `PATH`).
    pub perfquery: PathBuf,
    /// The local HCA the tools use (`-C`), where the host has several: it picks the subnet.
    pub ca: Option<String>,
    /// The port of that HCA (`-P`).
    pub ca_port: Option<u8>,
    /// `perfquery` runs at once.
    pub parallel: usize,
}

impl Default for IbFabricConfig {
    fn default() -> Self {
        IbFabricConfig {
            enabled: false,
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(45),
            query_timeout: Duration::from_secs(10),
            shard: None,
            switch_include: None,
            switch_exclude: None,
            errors_only: false,
            ibnetdiscover: PathBuf::from("ibnetdiscover"),
            perfquery: PathBuf::from("perfquery"),
            ca: None,
            ca_port: None,
            parallel: 4,
        }
    }
}

impl IbFabricConfig {
    /// The arguments every tool gets before its own: `-C <ca> -P <port>` where set.
    pub fn port_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(ca) = &self.ca {
            args.extend(["-C".to_string(), ca.clone()]);
        }
        if let Some(port) = self.ca_port {
            args.extend(["-P".to_string(), port.to_string()]);
        }
        args
    }

    /// The switches this instance reads.
    pub fn selection(&self) -> Selection {
        Selection {
            include: self.switch_include.clone(),
            exclude: self.switch_exclude.clone(),
            shard: self.shard,
        }
    }
}

/// A switch-description pattern, anchored at both ends as the selection expects.
pub fn anchored_regex(text: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{text})$")).map_err(|e| format!("invalid regular expression: {e}"))
}

fn anchored<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Regex>, D::Error> {
    crate::yaml::converted_option(deserializer, "a regular expression", anchored_regex)
}

fn shard<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Shard>, D::Error> {
    crate::yaml::converted_option(deserializer, "INDEX/COUNT", |text| {
        text.parse().map_err(|e| format!("ib_fabric.shard: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_anchored_and_shards_checked() {
        let include = anchored_regex("leaf-0[12]").unwrap();
        assert!(include.is_match("leaf-01"));
        assert!(!include.is_match("MF0;leaf-01:MQM9700/U1"));
        assert!(anchored_regex("(").is_err());
        let config: IbFabricConfig = serde_yaml::from_str(
            "enabled: true\ninterval: 30s\nshard: 1/4\nswitch_exclude: 'spine.*'\nerrors_only: true\n",
        )
        .unwrap();
        assert!(config.enabled && config.errors_only);
        assert_eq!(config.interval, Duration::from_secs(30));
        assert_eq!(config.shard, Some(Shard { index: 1, count: 4 }));
        assert!(!config
            .selection()
            .keeps_switch(crate::ib::model::Guid(1), "spine-01"));
        assert!(serde_yaml::from_str::<IbFabricConfig>("shard: 4/4\n").is_err());
        let tools: IbFabricConfig = serde_yaml::from_str(
            "perfquery: /opt/ofed/sbin/perfquery\nca: mlx5_2\nca_port: 1\nparallel: 8\n",
        )
        .unwrap();
        assert_eq!(tools.perfquery, PathBuf::from("/opt/ofed/sbin/perfquery"));
        assert_eq!(tools.ibnetdiscover, PathBuf::from("ibnetdiscover"));
        assert_eq!(tools.port_args(), ["-C", "mlx5_2", "-P", "1"]);
        assert_eq!(tools.parallel, 8);
        assert!(!IbFabricConfig::default().enabled);
    }
}
