//! The gNMI half of a vendor profile: which paths to subscribe to, and which leaves of the
//! answers become which normalized metric. Leaves are matched by a regular expression over the
//! rendered path (`/COUNTERS/Ethernet*/Ethernet0/SAI_PORT_STAT_PFC_3_RX_PKTS`); its named groups
//! `port`, `priority` and `queue` give the labels, so a new platform is a new YAML file.

use std::collections::HashMap;

use regex::{Regex, RegexSet};
use serde::Deserialize;

use super::gnmi::session::MAX_LEAVES;
use super::gnmi::{parse_path, proto, GnmiUpdate, GnmiValue};
use super::profile::{
    check_shape, DecodeError, FixedLabels, Metric, Sample, SampleKey, SampleValue, TimeUnit,
};

/// One leaf mapping as written in a profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeafFile {
    name: String,
    #[serde(rename = "match")]
    pattern: String,
    metric: Metric,
    #[serde(default)]
    labels: FixedLabels,
    #[serde(default)]
    queue_base: u32,
    unit: Option<TimeUnit>,
    /// The value lists the PFC-enabled priorities (SONiC's `pfc_enable: "3,4"`): a
    /// `pfc_enabled` sample for each of the eight, 1 where listed.
    #[serde(default)]
    priority_list: bool,
}

/// The `gnmi:` section of a profile file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GnmiSectionFile {
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    leaves: Vec<LeafFile>,
    /// Leaves a subscription may hold before the session ends with `too_many_leaves`.
    max_leaves: Option<usize>,
    /// Paths of settings that change rarely (SONiC's CONFIG_DB `PORT_QOS_MAP`), read with a
    /// request of their own every `settings_interval` of the switch. Their target may differ
    /// from the counters'; a switch that refuses them keeps its counters.
    #[serde(default)]
    settings_paths: Vec<String>,
}

#[derive(Debug, Clone)]
struct Leaf {
    name: String,
    pattern: Regex,
    metric: Metric,
    labels: FixedLabels,
    queue_base: u32,
    unit: Option<TimeUnit>,
    priority_list: bool,
}

/// A resolved gNMI mapping: its own paths and leaves after those of the profile it extends.
#[derive(Debug, Clone, Default)]
pub struct GnmiProfile {
    /// Subscription paths as written (`COUNTERS_DB:COUNTERS/Ethernet*`).
    pub path_texts: Vec<String>,
    /// Settings paths as written (`CONFIG_DB:PORT_QOS_MAP`).
    pub settings_path_texts: Vec<String>,
    leaves: Vec<Leaf>,
    /// All leaf patterns, to find the candidates for an update in one pass.
    set: Option<RegexSet>,
    /// Set by the profile or the one it extends; `MAX_LEAVES` when neither says.
    max_leaves: Option<usize>,
}

impl PartialEq for GnmiProfile {
    fn eq(&self, other: &Self) -> bool {
        self.path_texts == other.path_texts
            && self.max_leaves == other.max_leaves
            && self.leaves.len() == other.leaves.len()
            && self
                .leaves
                .iter()
                .zip(&other.leaves)
                .all(|(a, b)| a.name == b.name && a.pattern.as_str() == b.pattern.as_str())
    }
}

/// What one update decodes to: the error names the leaf mapping, never a credential.
pub struct Decoded {
    pub samples: Vec<Sample>,
    pub errors: Vec<DecodeError>,
}

impl GnmiSectionFile {
    pub(crate) fn is_empty(&self) -> bool {
        self.paths.is_empty()
            && self.settings_paths.is_empty()
            && self.leaves.is_empty()
            && self.max_leaves.is_none()
    }

    /// Checks the section; the error names the path or leaf at fault.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        for path in self.paths.iter().chain(&self.settings_paths) {
            parse_path(path).map_err(|e| (format!("path {path:?}"), e))?;
        }
        if self.max_leaves == Some(0) {
            return Err(("max_leaves".into(), "must be at least 1".into()));
        }
        for leaf in &self.leaves {
            let at = |message: String| (format!("leaf {}", leaf.name), message);
            let pattern = Regex::new(&leaf.pattern).map_err(|e| at(e.to_string()))?;
            let groups: Vec<&str> = pattern.capture_names().flatten().collect();
            if let Some(unknown) = groups
                .iter()
                .find(|g| !matches!(**g, "port" | "priority" | "queue"))
            {
                return Err(at(format!(
                    "unknown group {unknown:?}; the groups are port, priority and queue"
                )));
            }
            if !groups.contains(&"port") {
                return Err(at("the pattern needs a `(?P<port>...)` group".into()));
            }
            if leaf.priority_list
                && (leaf.metric != Metric::PfcEnabled || groups.contains(&"priority"))
            {
                return Err(at(
                    "`priority_list` is for pfc_enabled leaves without a priority group".into(),
                ));
            }
            check_shape(
                leaf.metric,
                groups.contains(&"priority") || leaf.priority_list,
                groups.contains(&"queue"),
                &leaf.labels,
                leaf.unit,
            )
            .map_err(at)?;
        }
        Ok(())
    }
}

impl GnmiProfile {
    /// Appends a checked section (a profile's own after its parent's).
    pub(crate) fn extend(&mut self, file: &GnmiSectionFile) {
        self.path_texts.extend(file.paths.iter().cloned());
        self.settings_path_texts
            .extend(file.settings_paths.iter().cloned());
        self.max_leaves = file.max_leaves.or(self.max_leaves);
        self.leaves.extend(file.leaves.iter().map(|leaf| Leaf {
            name: leaf.name.clone(),
            pattern: Regex::new(&leaf.pattern).expect("checked when the profile was loaded"),
            metric: leaf.metric,
            labels: leaf.labels.clone(),
            queue_base: leaf.queue_base,
            unit: leaf.unit,
            priority_list: leaf.priority_list,
        }));
        self.set = Some(
            RegexSet::new(self.leaves.iter().map(|l| l.pattern.as_str()))
                .expect("each pattern compiled alone"),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.path_texts.is_empty()
    }

    /// Leaves one subscription may hold: the profile's `max_leaves`, else `MAX_LEAVES`.
    pub fn max_leaves(&self) -> usize {
        self.max_leaves.unwrap_or(MAX_LEAVES)
    }

    /// Fails when the paths name more than one target (`COUNTERS_DB:` and `CONFIG_DB:`): a
    /// request carries one, in its prefix ([`super::gnmi::prefixed`]).
    pub(crate) fn check_one_target(&self) -> Result<(), String> {
        for (what, paths) in [
            ("paths", self.paths()),
            ("settings_paths", self.settings_paths()),
        ] {
            let mut targets: Vec<String> = paths.into_iter().map(|p| p.target).collect();
            targets.sort();
            targets.dedup();
            if targets.len() > 1 {
                return Err(format!(
                    "the gNMI {what} name targets {targets:?}: a request carries one target, \
                     in its prefix, so a profile's {what} name the same one (or none)"
                ));
            }
        }
        Ok(())
    }

    /// Whether a leaf of the profile maps `path`.
    pub fn maps(&self, path: &str) -> bool {
        self.set.as_ref().is_some_and(|set| set.is_match(path))
    }

    /// The subscription paths.
    pub fn paths(&self) -> Vec<proto::Path> {
        parsed(&self.path_texts)
    }

    /// The settings paths, read with a request of their own.
    pub(crate) fn settings_paths(&self) -> Vec<proto::Path> {
        parsed(&self.settings_path_texts)
    }

    /// Turns the leaves of one read into samples. gNMI names ports rather than numbering them,
    /// so each port gets a number for this read (in order of appearance) and an `if_name`
    /// sample that carries its name.
    pub fn decode(&self, updates: &[GnmiUpdate]) -> Decoded {
        let mut decoded = Decoded {
            samples: Vec::new(),
            errors: Vec::new(),
        };
        let Some(set) = &self.set else {
            return decoded;
        };
        let mut ports: HashMap<String, u32> = HashMap::new();
        for update in updates {
            let Some(index) = set.matches(&update.path).into_iter().next() else {
                continue;
            };
            let leaf = &self.leaves[index];
            let Some(captures) = leaf.pattern.captures(&update.path) else {
                continue;
            };
            let port_name = &captures["port"];
            let next = ports.len() as u32 + 1;
            let ifindex = *ports.entry(port_name.to_string()).or_insert_with(|| {
                decoded.samples.push(Sample {
                    metric: Metric::IfName,
                    key: SampleKey {
                        ifindex: next,
                        ..SampleKey::default()
                    },
                    value: SampleValue::Text(port_name.to_string()),
                });
                next
            });
            let sampled = if leaf.priority_list {
                leaf.priority_samples(ifindex, &update.value)
                    .map(|samples| decoded.samples.extend(samples))
            } else {
                leaf.sample(ifindex, &captures, &update.value)
                    .map(|sample| decoded.samples.push(sample))
            };
            if let Err(reason) = sampled {
                decoded.errors.push(DecodeError {
                    column: leaf.name.clone(),
                    reason: format!("{}: {reason}", update.path),
                });
            }
        }
        decoded
    }
}

fn parsed(texts: &[String]) -> Vec<proto::Path> {
    texts
        .iter()
        .map(|p| parse_path(p).expect("checked when the profile was loaded"))
        .collect()
}

impl Leaf {
    /// A `pfc_enabled` sample for each priority: 1 where the value lists it (`"3,4"`; empty:
    /// PFC off on the port).
    fn priority_samples(&self, ifindex: u32, value: &GnmiValue) -> Result<Vec<Sample>, String> {
        let GnmiValue::Text(text) = value else {
            return Err(format!("expected a list of priorities, got {value:?}"));
        };
        let mut enabled = [false; 8];
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let priority = item
                .parse::<usize>()
                .ok()
                .filter(|p| *p < 8)
                .ok_or_else(|| format!("priority {item:?} in {text:?} is not 0-7"))?;
            enabled[priority] = true;
        }
        Ok((0u8..8)
            .map(|priority| Sample {
                metric: Metric::PfcEnabled,
                key: SampleKey {
                    ifindex,
                    priority: Some(priority),
                    ..SampleKey::default()
                },
                value: SampleValue::Gauge(i64::from(enabled[usize::from(priority)])),
            })
            .collect())
    }

    fn sample(
        &self,
        ifindex: u32,
        captures: &regex::Captures<'_>,
        value: &GnmiValue,
    ) -> Result<Sample, String> {
        let mut key = SampleKey {
            ifindex,
            priority: self.labels.priority,
            queue: self.labels.queue,
            direction: self.labels.direction,
        };
        if let Some(priority) = captures.name("priority") {
            key.priority = Some(
                priority
                    .as_str()
                    .parse::<u8>()
                    .ok()
                    .filter(|p| *p < 8)
                    .ok_or_else(|| format!("priority {:?} is not 0-7", priority.as_str()))?,
            );
        }
        if let Some(queue) = captures.name("queue") {
            key.queue = Some(
                queue
                    .as_str()
                    .parse::<u32>()
                    .ok()
                    .and_then(|q| q.checked_sub(self.queue_base))
                    .ok_or_else(|| format!("queue {:?} is not a queue number", queue.as_str()))?,
            );
        }
        let value = if self.metric.is_text() {
            match value {
                GnmiValue::Text(text) => SampleValue::Text(text.trim().to_string()),
                other => return Err(format!("expected text, got {other:?}")),
            }
        } else if self.metric == Metric::OperStatus {
            SampleValue::Gauge(
                oper_status(value)
                    .ok_or_else(|| format!("expected an interface status, got {value:?}"))?,
            )
        } else if self.metric.is_setting() {
            SampleValue::Gauge(
                setting(value)
                    .ok_or_else(|| format!("expected a bool or a number, got {value:?}"))?,
            )
        } else {
            let raw = value
                .as_counter()
                .ok_or_else(|| format!("expected a counter, got {value:?}"))?;
            match self.unit {
                Some(unit) => SampleValue::Seconds(unit.seconds(raw)),
                None => SampleValue::Counter(raw),
            }
        };
        Ok(Sample {
            metric: self.metric,
            key,
            value,
        })
    }
}

/// A PFC setting: a bool (PFC enabled) or a small number (a queue), as a gauge.
fn setting(value: &GnmiValue) -> Option<i64> {
    match value {
        GnmiValue::Bool(enabled) => Some(i64::from(*enabled)),
        other => other.as_counter().and_then(|v| i64::try_from(v).ok()),
    }
}

/// OpenConfig `oper-status` names (and SONiC's lower-case ones) as IF-MIB ifOperStatus numbers,
/// so that SNMP and gNMI switches share one `rdma_switch_port_oper_status`.
fn oper_status(value: &GnmiValue) -> Option<i64> {
    match value {
        GnmiValue::Uint(v) => i64::try_from(*v).ok(),
        GnmiValue::Int(v) => Some(*v),
        GnmiValue::Text(text) => Some(match text.trim().to_ascii_uppercase().as_str() {
            "UP" => 1,
            "DOWN" => 2,
            "TESTING" => 3,
            "UNKNOWN" => 4,
            "DORMANT" => 5,
            "NOT_PRESENT" => 6,
            "LOWER_LAYER_DOWN" => 7,
            _ => return None,
        }),
        GnmiValue::Float(_) | GnmiValue::Bool(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::profile::{Direction, Profiles};

    fn update(path: &str, value: GnmiValue) -> GnmiUpdate {
        GnmiUpdate {
            path: path.into(),
            value,
        }
    }

    fn text(v: &str) -> GnmiValue {
        GnmiValue::Text(v.into())
    }

    fn port_of(decoded: &Decoded, ifindex: u32) -> String {
        decoded
            .samples
            .iter()
            .find_map(|s| match (&s.metric, &s.value) {
                (Metric::IfName, SampleValue::Text(t)) if s.key.ifindex == ifindex => {
                    Some(t.clone())
                }
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn sonic_counters_db_documents() {
        let profiles = Profiles::builtin().unwrap();
        let sonic = &profiles.get("sonic").unwrap().gnmi;
        assert_eq!(sonic.paths()[0].target, "COUNTERS_DB");
        let decoded = sonic.decode(&[
            update(
                "/COUNTERS/Ethernet*/Ethernet8/SAI_PORT_STAT_PFC_3_RX_PKTS",
                text("12345"),
            ),
            update(
                "/COUNTERS/Ethernet*/Ethernet8/SAI_PORT_STAT_PFC_3_ON2OFF_RX_PKTS",
                text("9"),
            ),
            update(
                "/COUNTERS/Ethernet*/Ethernet8/SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US",
                text("2500000"),
            ),
            update(
                "/COUNTERS/Ethernet*/Queues/Ethernet8:3/SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
                text("77"),
            ),
            update(
                "/COUNTERS/Ethernet*/Pfcwd/Ethernet12:4/PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED",
                text("2"),
            ),
            update(
                "/COUNTERS/Ethernet*/Ethernet8/SAI_PORT_STAT_IF_IN_OCTETS",
                text("lots"),
            ),
        ]);
        let metric = |m: Metric| decoded.samples.iter().find(|s| s.metric == m).unwrap();
        let pfc = metric(Metric::PfcFrames);
        assert_eq!(port_of(&decoded, pfc.key.ifindex), "Ethernet8");
        assert_eq!(
            (pfc.key.priority, pfc.key.direction, &pfc.value),
            (Some(3), Some(Direction::Rx), &SampleValue::Counter(12345))
        );
        assert_eq!(
            metric(Metric::PfcPauseSeconds).value,
            SampleValue::Seconds(2.5)
        );
        let ecn = metric(Metric::QueueEcnMarkedPackets);
        assert_eq!((ecn.key.ifindex, ecn.key.queue), (pfc.key.ifindex, Some(3)));
        let storm = metric(Metric::PfcWatchdogStorms);
        assert_eq!(port_of(&decoded, storm.key.ifindex), "Ethernet12");
        // ON2OFF is not mapped; a non-number is a value error naming the leaf, not a crash.
        assert_eq!(
            decoded
                .samples
                .iter()
                .filter(|s| s.metric == Metric::PfcFrames)
                .count(),
            1
        );
        assert_eq!(decoded.errors.len(), 1);
        assert!(decoded.errors[0]
            .to_string()
            .contains("SAI_PORT_STAT_IF_IN_OCTETS"));
    }

    #[test]
    fn openconfig_leaves() {
        let profiles = Profiles::builtin().unwrap();
        let oc = &profiles.get("openconfig").unwrap().gnmi;
        let decoded = oc.decode(&[
            update("/interfaces/interface[name=Ethernet1/1]/state/oper-status", text("LOWER_LAYER_DOWN")),
            update("/interfaces/interface[name=Ethernet1/1]/state/counters/in-octets", GnmiValue::Uint(5)),
            update("/qos/interfaces/interface[interface-id=Ethernet1/1]/output/queues/queue[name=3]/state/ecn-marked-pkts", GnmiValue::Uint(8)),
            update("/lldp/interfaces/interface[name=Ethernet1/1]/neighbors/neighbor[id=x]/state/system-name", text("gpu-node-01")),
        ]);
        assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
        let status = decoded
            .samples
            .iter()
            .find(|s| s.metric == Metric::OperStatus)
            .unwrap();
        assert_eq!(status.value, SampleValue::Gauge(7));
        assert_eq!(port_of(&decoded, status.key.ifindex), "Ethernet1/1");
        // One port, one number, one if_name.
        assert!(decoded
            .samples
            .iter()
            .all(|s| s.key.ifindex == status.key.ifindex));
        assert_eq!(
            decoded
                .samples
                .iter()
                .filter(|s| s.metric == Metric::IfName)
                .count(),
            1
        );
    }

    #[test]
    fn pfc_settings_from_bools_and_numbers() {
        let mut profile = GnmiProfile::default();
        profile.extend(
            &serde_yaml::from_str::<GnmiSectionFile>(
                "{leaves: [{name: pfc, match: '^/pfc/(?P<port>[^/]+)/(?P<priority>[0-7])/enabled$', metric: pfc_enabled}, {name: tc, match: '^/pfc/(?P<port>[^/]+)/(?P<priority>[0-7])/queue$', metric: priority_queue}]}",
            )
            .unwrap(),
        );
        let decoded = profile.decode(&[
            update("/pfc/Ethernet0/3/enabled", GnmiValue::Bool(true)),
            update("/pfc/Ethernet0/4/enabled", GnmiValue::Bool(false)),
            update("/pfc/Ethernet0/3/queue", text("6")),
            update("/pfc/Ethernet0/5/queue", text("x")),
        ]);
        let values: Vec<_> = decoded
            .samples
            .iter()
            .filter(|s| s.metric != Metric::IfName)
            .map(|s| (s.metric, s.key.priority, s.value.clone()))
            .collect();
        assert_eq!(
            values,
            [
                (Metric::PfcEnabled, Some(3), SampleValue::Gauge(1)),
                (Metric::PfcEnabled, Some(4), SampleValue::Gauge(0)),
                (Metric::PriorityQueue, Some(3), SampleValue::Gauge(6)),
            ]
        );
        assert_eq!(decoded.errors.len(), 1, "{:?}", decoded.errors);
    }

    #[test]
    fn leaf_errors_name_the_leaf() {
        let check = |yaml: &str| {
            serde_yaml::from_str::<GnmiSectionFile>(yaml)
                .unwrap()
                .check()
                .unwrap_err()
        };
        let (at, message) = check("{leaves: [{name: a, match: '/x/(?P<port>.+)/pfc', metric: pfc_frames, labels: {direction: rx}}]}");
        assert_eq!(at, "leaf a");
        assert!(message.contains("priority"), "{message}");
        let (_, message) = check("{leaves: [{name: a, match: '/x/(.+)', metric: in_octets}]}");
        assert!(message.contains("(?P<port>"), "{message}");
        let (_, message) =
            check("{leaves: [{name: a, match: '/x/(?P<port>.+)/(?P<slot>.)', metric: in_octets}]}");
        assert!(message.contains("unknown group \"slot\""), "{message}");
        let (at, _) = check("{paths: ['/a/b[c]']}");
        assert!(at.starts_with("path"), "{at}");
        let (at, _) = check("{settings_paths: ['CONFIG_DB:/a/b[c]']}");
        assert!(at.starts_with("path"), "{at}");
        let (_, message) = check("{leaves: [{name: a, match: '/x/(?P<port>.+)', metric: in_octets, priority_list: true}]}");
        assert!(message.contains("priority_list"), "{message}");
        let (_, message) = check("{leaves: [{name: a, match: '/x/(?P<port>.+)/(?P<priority>.)', metric: pfc_enabled, priority_list: true}]}");
        assert!(message.contains("priority_list"), "{message}");
    }

    #[test]
    fn sonic_config_db_pfc_enable_lists_the_lossless_priorities() {
        let profiles = Profiles::builtin().unwrap();
        let sonic = &profiles.get("sonic").unwrap().gnmi;
        let settings = sonic.settings_paths();
        assert_eq!(
            (
                settings[0].target.as_str(),
                crate::switch::gnmi::render(None, Some(&settings[0]))
            ),
            ("CONFIG_DB", "/PORT_QOS_MAP".to_string())
        );
        // A CONFIG_DB document as sonic-gnmi flattens it: keys after `PORT_QOS_MAP|`.
        let decoded = sonic.decode(&[
            update("/PORT_QOS_MAP/Ethernet0/pfc_enable", text("3,4")),
            update("/PORT_QOS_MAP/Ethernet0/pfc_to_queue_map", text("AZURE")),
            update("/PORT_QOS_MAP/Ethernet8/pfc_enable", text("")),
            update("/PORT_QOS_MAP/Ethernet16/pfc_enable", text("3,9")),
        ]);
        let enabled = |port: &str| -> Vec<(u8, i64)> {
            decoded
                .samples
                .iter()
                .filter(|s| {
                    s.metric == Metric::PfcEnabled && port_of(&decoded, s.key.ifindex) == port
                })
                .map(|s| match s.value {
                    SampleValue::Gauge(v) => (s.key.priority.unwrap(), v),
                    ref other => panic!("{other:?}"),
                })
                .collect()
        };
        let expected = |on: &[u8]| -> Vec<(u8, i64)> {
            (0..8).map(|p| (p, i64::from(on.contains(&p)))).collect()
        };
        assert_eq!(enabled("Ethernet0"), expected(&[3, 4]));
        assert_eq!(enabled("Ethernet8"), expected(&[]), "empty: PFC off");
        assert_eq!(enabled("Ethernet16"), [], "a bad list is no sample");
        assert_eq!(decoded.errors.len(), 1, "{:?}", decoded.errors);
        assert!(
            decoded.errors[0].reason.contains("\"9\""),
            "{:?}",
            decoded.errors
        );
    }
}
