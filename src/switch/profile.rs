//! Vendor profiles: YAML files (`profiles/*.yml`, embedded at build time, overridable from a
//! directory) that map each vendor's SNMP columns to one normalized set of switch metrics. A new
//! vendor is a new file, not new code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::gnmi_map::{GnmiProfile, GnmiSectionFile};
pub use crate::direction::Direction;

/// The profiles shipped with the exporter.
const BUILTIN: &[(&str, &str)] = &[
    ("if_mib", include_str!("../../profiles/if_mib.yml")),
    ("generic", include_str!("../../profiles/generic.yml")),
    ("sonic", include_str!("../../profiles/sonic.yml")),
    ("cisco_nxos", include_str!("../../profiles/cisco_nxos.yml")),
    ("arista_eos", include_str!("../../profiles/arista_eos.yml")),
    (
        "nvidia_cumulus",
        include_str!("../../profiles/nvidia_cumulus.yml"),
    ),
    (
        "juniper_junos",
        include_str!("../../profiles/juniper_junos.yml"),
    ),
    ("openconfig", include_str!("../../profiles/openconfig.yml")),
];

/// What a column measures, whatever the vendor calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    IfName,
    IfAlias,
    OperStatus,
    InOctets,
    OutOctets,
    InUcastPackets,
    OutUcastPackets,
    InDiscards,
    OutDiscards,
    InErrors,
    OutErrors,
    LldpRemotePortId,
    LldpRemotePortDescription,
    LldpRemoteSystemName,
    /// Per-priority PFC frames.
    PfcFrames,
    /// PFC frames over all priorities (IEEE8021-PFC-MIB).
    PfcFramesAllPriorities,
    /// Time paused by PFC per priority; the column's `unit` says how the switch counts it.
    PfcPauseSeconds,
    QueueTransmittedPackets,
    QueueDroppedPackets,
    QueueWredDroppedPackets,
    QueueIngressDroppedPackets,
    QueueEcnMarkedPackets,
    PfcWatchdogStorms,
    PfcWatchdogRestores,
    PfcWatchdogDroppedPackets,
    /// Whether PFC is enabled for a priority on the port (LLDP-EXT-DOT1-DCBX-MIB TruthValue:
    /// 1 true, 2 false; gNMI: a bool).
    PfcEnabled,
    /// The egress queue (802.1Q traffic class) a priority maps to on the port.
    PriorityQueue,
}

impl Metric {
    /// Text attributes of a port or its neighbour, as opposed to counters.
    pub fn is_text(self) -> bool {
        matches!(
            self,
            Metric::IfName
                | Metric::IfAlias
                | Metric::LldpRemotePortId
                | Metric::LldpRemotePortDescription
                | Metric::LldpRemoteSystemName
        )
    }

    /// What describes the wiring and the configuration (the LLDP neighbour, the PFC settings),
    /// as opposed to counters and port state: an SNMP poller walks it every few minutes, not
    /// at every poll (`switch::settings`).
    pub fn changes_rarely(self) -> bool {
        matches!(
            self,
            Metric::LldpRemotePortId
                | Metric::LldpRemotePortDescription
                | Metric::LldpRemoteSystemName
                | Metric::PfcEnabled
                | Metric::PriorityQueue
        )
    }

    /// The port's PFC configuration, as opposed to counters: read as small numbers.
    pub(crate) fn is_setting(self) -> bool {
        matches!(self, Metric::PfcEnabled | Metric::PriorityQueue)
    }

    fn needs_priority(self) -> bool {
        matches!(
            self,
            Metric::PfcFrames
                | Metric::PfcPauseSeconds
                | Metric::PfcEnabled
                | Metric::PriorityQueue
        )
    }

    fn needs_direction(self) -> bool {
        matches!(
            self,
            Metric::PfcFrames | Metric::PfcFramesAllPriorities | Metric::PfcPauseSeconds
        )
    }

    fn needs_queue(self) -> bool {
        matches!(
            self,
            Metric::QueueTransmittedPackets
                | Metric::QueueDroppedPackets
                | Metric::QueueWredDroppedPackets
                | Metric::QueueIngressDroppedPackets
                | Metric::QueueEcnMarkedPackets
                | Metric::PfcWatchdogStorms
                | Metric::PfcWatchdogRestores
                | Metric::PfcWatchdogDroppedPackets
        )
    }

    fn is_lldp(self) -> bool {
        matches!(
            self,
            Metric::LldpRemotePortId
                | Metric::LldpRemotePortDescription
                | Metric::LldpRemoteSystemName
        )
    }
}

/// One component of a column's index suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexPart {
    IfIndex,
    /// LLDP local port number (the ifIndex on the platforms profiled).
    LocalPort,
    Priority,
    Queue,
    /// Present, value ignored.
    Any,
    /// Must equal this value; rows with another value belong to other columns.
    Equals(u32),
}

impl<'de> Deserialize<'de> for IndexPart {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u32),
            Name(String),
        }
        Ok(match Raw::deserialize(deserializer)? {
            Raw::Number(n) => IndexPart::Equals(n),
            Raw::Name(name) => match name.as_str() {
                "ifindex" => IndexPart::IfIndex,
                "local_port" => IndexPart::LocalPort,
                "priority" => IndexPart::Priority,
                "queue" => IndexPart::Queue,
                "any" => IndexPart::Any,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "unknown index part {other:?}; expected ifindex, local_port, priority, queue, any or a number"
                    )))
                }
            },
        })
    }
}

/// Labels fixed by the column rather than read from the index (Cumulus: priority in the column).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedLabels {
    pub direction: Option<Direction>,
    pub priority: Option<u8>,
    pub queue: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    Microseconds,
    Milliseconds,
    Seconds,
}

impl TimeUnit {
    pub(crate) fn seconds(self, value: u64) -> f64 {
        match self {
            TimeUnit::Microseconds => value as f64 / 1e6,
            TimeUnit::Milliseconds => value as f64 / 1e3,
            TimeUnit::Seconds => value as f64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    /// The MIB object name, for humans and error messages.
    pub name: String,
    #[serde(deserialize_with = "deserialize_oid")]
    pub oid: Vec<u32>,
    pub metric: Metric,
    pub index: Vec<IndexPart>,
    #[serde(default)]
    pub labels: FixedLabels,
    /// Queue numbers in the index start at this value (CISCO-SWITCH-QOS-MIB counts from 1);
    /// exported queue labels start at 0.
    #[serde(default)]
    pub queue_base: u32,
    /// Required for `pfc_pause_seconds`.
    pub unit: Option<TimeUnit>,
    /// Walked only when the poll's other columns gave no sample of this metric: the standard
    /// per-interface PFC table for a device whose OS lacks the vendor's per-priority one.
    #[serde(default)]
    pub fallback_for: Option<Metric>,
}

fn deserialize_oid<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<u32>, D::Error> {
    crate::yaml::converted(
        deserializer,
        "an OID such as 1.3.6.1.2.1.2.2.1.8",
        parse_oid,
    )
}

/// Parses a dotted numeric OID (`1.3.6.1.2.1.31.1.1.1.6`, a leading dot allowed).
pub fn parse_oid(text: &str) -> Result<Vec<u32>, String> {
    let trimmed = text.trim().trim_start_matches('.');
    let arcs: Result<Vec<u32>, _> = trimmed.split('.').map(str::parse::<u32>).collect();
    match arcs {
        Ok(arcs) if arcs.len() >= 2 => Ok(arcs),
        _ => Err(format!(
            "invalid OID {text:?}: expected dotted numbers like 1.3.6.1.2.1"
        )),
    }
}

/// A profile file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    description: String,
    extends: Option<String>,
    /// SNMP columns.
    #[serde(default)]
    columns: Vec<Column>,
    /// gNMI paths and leaves.
    #[serde(default)]
    gnmi: GnmiSectionFile,
}

/// A resolved profile: its own columns plus those of the profile it extends.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub columns: Vec<Column>,
    pub gnmi: GnmiProfile,
}

/// The OIDs to walk and how to read what comes back.
impl Profile {
    /// Distinct column OIDs to walk (several columns may share one table column, told apart
    /// by `Equals` index parts).
    pub fn walk_roots(&self) -> Vec<Vec<u32>> {
        self.walk_roots_of(|_| true)
    }

    /// [`Profile::walk_roots`] of the columns whose metric `wanted` accepts.
    pub(crate) fn walk_roots_of(&self, wanted: impl Fn(Metric) -> bool) -> Vec<Vec<u32>> {
        roots(
            self.columns
                .iter()
                .filter(|c| c.fallback_for.is_none() && wanted(c.metric)),
        )
    }

    /// Fallback column OIDs to walk once [`Profile::walk_roots`] gave no sample of the metric
    /// they stand in for (`found` tells which metrics came back).
    pub(crate) fn fallback_roots(&self, found: impl Fn(Metric) -> bool) -> Vec<Vec<u32>> {
        roots(
            self.columns
                .iter()
                .filter(|c| c.fallback_for.is_some_and(|metric| !found(metric))),
        )
    }

    /// Decodes one varbind into a sample, if a column of this profile claims it.
    pub fn decode(&self, oid: &[u32], value: &SnmpValue) -> Option<Result<Sample, DecodeError>> {
        self.columns.iter().find_map(|column| {
            let suffix = oid.strip_prefix(column.oid.as_slice())?;
            let key = column.match_index(suffix)?;
            Some(column.sample(key, value))
        })
    }
}

/// Distinct OIDs of `columns`, sorted.
fn roots<'a>(columns: impl Iterator<Item = &'a Column>) -> Vec<Vec<u32>> {
    let mut roots: Vec<Vec<u32>> = columns.map(|c| c.oid.clone()).collect();
    roots.sort();
    roots.dedup();
    roots
}

/// Where a sample belongs, read from the index and the column's fixed labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SampleKey {
    pub ifindex: u32,
    pub priority: Option<u8>,
    pub queue: Option<u32>,
    pub direction: Option<Direction>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SampleValue {
    Counter(u64),
    Seconds(f64),
    Gauge(i64),
    Text(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub metric: Metric,
    pub key: SampleKey,
    pub value: SampleValue,
}

/// An SNMP value, independent of the client library.
#[derive(Debug, Clone, PartialEq)]
pub enum SnmpValue {
    Counter32(u32),
    Counter64(u64),
    Gauge32(u32),
    Integer(i64),
    OctetString(Vec<u8>),
    /// noSuchObject, noSuchInstance, endOfMibView, or a type no column expects.
    Other(String),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{column}: {reason}")]
pub struct DecodeError {
    pub column: String,
    pub reason: String,
}

impl Column {
    /// Reads the index suffix; `None` when the row belongs to another column or is malformed.
    fn match_index(&self, suffix: &[u32]) -> Option<SampleKey> {
        if suffix.len() != self.index.len() {
            return None;
        }
        let mut key = SampleKey {
            priority: self.labels.priority,
            queue: self.labels.queue,
            direction: self.labels.direction,
            ..SampleKey::default()
        };
        for (part, &arc) in self.index.iter().zip(suffix) {
            match part {
                IndexPart::IfIndex | IndexPart::LocalPort => key.ifindex = arc,
                IndexPart::Priority => {
                    key.priority = Some(u8::try_from(arc).ok().filter(|p| *p < 8)?)
                }
                IndexPart::Queue => key.queue = Some(arc.checked_sub(self.queue_base)?),
                IndexPart::Any => {}
                IndexPart::Equals(expected) if *expected == arc => {}
                IndexPart::Equals(_) => return None,
            }
        }
        Some(key)
    }

    fn sample(&self, key: SampleKey, value: &SnmpValue) -> Result<Sample, DecodeError> {
        let error = |reason: String| DecodeError {
            column: self.name.clone(),
            reason,
        };
        let value = match (self.metric, value) {
            (metric, SnmpValue::OctetString(bytes)) if metric.is_text() => {
                SampleValue::Text(String::from_utf8_lossy(bytes).trim().to_string())
            }
            (Metric::OperStatus, SnmpValue::Integer(v)) => SampleValue::Gauge(*v),
            (Metric::PfcEnabled, SnmpValue::Integer(v)) => SampleValue::Gauge(
                truth_value(*v).ok_or_else(|| error(format!("{v} is not a TruthValue (1, 2)")))?,
            ),
            (Metric::PriorityQueue, SnmpValue::Gauge32(v)) => SampleValue::Gauge(i64::from(*v)),
            (Metric::PriorityQueue, SnmpValue::Integer(v)) if *v >= 0 => SampleValue::Gauge(*v),
            (metric, v) if metric.is_setting() => {
                return Err(error(format!("expected a small number, got {v:?}")))
            }
            (metric, v) if !metric.is_text() && metric != Metric::OperStatus => {
                let raw = match v {
                    SnmpValue::Counter32(v) | SnmpValue::Gauge32(v) => u64::from(*v),
                    SnmpValue::Counter64(v) => *v,
                    // Some agents type watchdog counts as Integer32.
                    SnmpValue::Integer(v) if *v >= 0 => *v as u64,
                    other => return Err(error(format!("expected a counter, got {other:?}"))),
                };
                match self.unit {
                    Some(unit) => SampleValue::Seconds(unit.seconds(raw)),
                    None => SampleValue::Counter(raw),
                }
            }
            (_, other) => return Err(error(format!("unexpected value {other:?}"))),
        };
        Ok(Sample {
            metric: self.metric,
            key,
            value,
        })
    }

    fn validate(&self) -> Result<(), String> {
        if self.fallback_for == Some(self.metric) {
            return Err(
                "`fallback_for` names another metric, the one this column stands in for".into(),
            );
        }
        let has = |part: IndexPart| self.index.contains(&part);
        let port_parts = self
            .index
            .iter()
            .filter(|p| matches!(p, IndexPart::IfIndex | IndexPart::LocalPort))
            .count();
        if port_parts != 1 {
            return Err("the index needs exactly one `ifindex` (or `local_port` for LLDP)".into());
        }
        if self.metric.is_lldp() != has(IndexPart::LocalPort) {
            return Err("LLDP columns use `local_port`, all others `ifindex`".into());
        }
        check_shape(
            self.metric,
            has(IndexPart::Priority),
            has(IndexPart::Queue),
            &self.labels,
            self.unit,
        )
    }
}

/// SNMPv2-TC TruthValue as 1 (true) or 0 (false).
fn truth_value(value: i64) -> Option<i64> {
    match value {
        1 => Some(1),
        2 => Some(0),
        _ => None,
    }
}

/// Checks that a column (SNMP) or leaf (gNMI) yields the labels its metric needs: a priority,
/// queue or direction from exactly one place (`in_key`: the index or the path; or `labels`),
/// and a time unit for pause time only.
pub(crate) fn check_shape(
    metric: Metric,
    priority_in_key: bool,
    queue_in_key: bool,
    labels: &FixedLabels,
    unit: Option<TimeUnit>,
) -> Result<(), String> {
    let priority = priority_in_key as u8 + labels.priority.is_some() as u8;
    if metric.needs_priority() && priority != 1 {
        return Err("needs the priority either in the index or in `labels`, once".into());
    }
    if !metric.needs_priority() && priority != 0 {
        return Err(format!("{metric:?} has no priority"));
    }
    let queue = queue_in_key as u8 + labels.queue.is_some() as u8;
    if metric.needs_queue() != (queue == 1) || queue > 1 {
        return Err("queue metrics need the queue once (index or `labels`), others none".into());
    }
    if metric.needs_direction() != labels.direction.is_some() {
        return Err("PFC metrics need `labels.direction`, others none".into());
    }
    if (metric == Metric::PfcPauseSeconds) != unit.is_some() {
        return Err("`unit` is required for pfc_pause_seconds and only there".into());
    }
    if let Some(p) = labels.priority.filter(|p| *p > 7) {
        return Err(format!("priority {p} is outside 0-7"));
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile {origin}: {line}:{column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("profile {origin}: column {column}: {message}")]
    Invalid {
        origin: String,
        column: String,
        message: String,
    },
    #[error("profile {origin}: {message}")]
    Structure { origin: String, message: String },
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// All known profiles by name: the built-in ones, replaced or extended by `*.yml` files of an
/// operator's directory.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    by_name: BTreeMap<String, Profile>,
}

impl Profiles {
    pub fn builtin() -> Result<Profiles, ProfileError> {
        Profiles::load(
            BUILTIN
                .iter()
                .map(|(name, text)| (format!("{name} (built in)"), text.to_string())),
        )
    }

    /// Built-in profiles, then every `*.yml` in `dir` (a file named like a built-in replaces it).
    pub(crate) fn with_dir(dir: &Path) -> Result<Profiles, ProfileError> {
        let read = |path: &Path| {
            crate::bounded_read::read_to_string(path, crate::yaml::MAX_FILE_BYTES).map_err(
                |source| ProfileError::Read {
                    path: path.to_path_buf(),
                    source,
                },
            )
        };
        let mut sources: Vec<(String, String)> = BUILTIN
            .iter()
            .map(|(name, text)| (format!("{name} (built in)"), text.to_string()))
            .collect();
        let entries = std::fs::read_dir(dir).map_err(|source| ProfileError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
            .collect();
        paths.sort();
        for path in paths {
            sources.push((path.display().to_string(), read(&path)?));
        }
        Profiles::load(sources.into_iter())
    }

    fn load(sources: impl Iterator<Item = (String, String)>) -> Result<Profiles, ProfileError> {
        let mut files: BTreeMap<String, (String, ProfileFile)> = BTreeMap::new();
        for (origin, text) in sources {
            let file: ProfileFile = serde_yaml::from_str(&text).map_err(|e| {
                let (line, column, message) = crate::yaml::yaml_error_parts(&e);
                ProfileError::Syntax {
                    origin: origin.clone(),
                    line,
                    column,
                    message,
                }
            })?;
            for column in &file.columns {
                column.validate().map_err(|message| ProfileError::Invalid {
                    origin: origin.clone(),
                    column: column.name.clone(),
                    message,
                })?;
            }
            file.gnmi
                .check()
                .map_err(|(column, message)| ProfileError::Invalid {
                    origin: origin.clone(),
                    column,
                    message,
                })?;
            files.insert(file.name.clone(), (origin, file));
        }
        let mut by_name = BTreeMap::new();
        for name in files.keys() {
            by_name.insert(name.clone(), resolve(&files, name, 0)?);
        }
        Ok(Profiles { by_name })
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}

/// Follows `extends` (at most a few levels; a cycle is an error).
fn resolve(
    files: &BTreeMap<String, (String, ProfileFile)>,
    name: &str,
    depth: usize,
) -> Result<Profile, ProfileError> {
    let (origin, file) = &files[name];
    if depth > 8 {
        return Err(ProfileError::Structure {
            origin: origin.clone(),
            message: "`extends` goes in a circle".into(),
        });
    }
    let (mut columns, mut gnmi) = match &file.extends {
        Some(parent) if files.contains_key(parent) => {
            let parent = resolve(files, parent, depth + 1)?;
            (parent.columns, parent.gnmi)
        }
        Some(parent) => {
            return Err(ProfileError::Structure {
                origin: origin.clone(),
                message: format!("extends unknown profile {parent:?}"),
            })
        }
        None => (Vec::new(), GnmiProfile::default()),
    };
    columns.extend(file.columns.iter().cloned());
    if !file.gnmi.is_empty() {
        gnmi.extend(&file.gnmi);
        gnmi.check_one_target()
            .map_err(|message| ProfileError::Structure {
                origin: origin.clone(),
                message,
            })?;
    }
    Ok(Profile {
        name: file.name.clone(),
        description: file.description.clone(),
        columns,
        gnmi,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(name: &str) -> Profile {
        Profiles::builtin().unwrap().get(name).unwrap().clone()
    }

    fn oid(text: &str) -> Vec<u32> {
        parse_oid(text).unwrap()
    }

    fn decode(profile: &Profile, row: &str, value: SnmpValue) -> Option<Sample> {
        profile.decode(&oid(row), &value).map(|r| r.unwrap())
    }

    #[test]
    fn every_builtin_profile_loads_and_extends_if_mib() {
        let profiles = Profiles::builtin().unwrap();
        let names: Vec<_> = profiles.names().collect();
        assert_eq!(
            names,
            [
                "arista_eos",
                "cisco_nxos",
                "generic",
                "if_mib",
                "juniper_junos",
                "nvidia_cumulus",
                "openconfig",
                "sonic"
            ]
        );
        for name in names.into_iter().filter(|n| *n != "openconfig") {
            let profile = profiles.get(name).unwrap();
            assert!(
                profile.columns.iter().any(|c| c.metric == Metric::IfName),
                "{name}"
            );
        }
    }

    #[test]
    fn cumulus_priority_comes_from_the_column() {
        let cumulus = builtin("nvidia_cumulus");
        let sample = decode(
            &cumulus,
            "1.3.6.1.4.1.40310.2.2.3.1.10.17",
            SnmpValue::Counter64(5),
        )
        .unwrap();
        assert_eq!(sample.metric, Metric::PfcFrames);
        assert_eq!(
            sample.key,
            SampleKey {
                ifindex: 17,
                priority: Some(3),
                queue: None,
                direction: Some(Direction::Rx)
            }
        );
        let tx = decode(
            &cumulus,
            "1.3.6.1.4.1.40310.2.2.3.1.11.17",
            SnmpValue::Counter64(6),
        )
        .unwrap();
        assert_eq!(
            (tx.key.priority, tx.key.direction),
            (Some(3), Some(Direction::Tx))
        );
    }

    #[test]
    fn sonic_uses_the_per_priority_table_and_egress_queues() {
        let sonic = builtin("sonic");
        // cpfcIfRequests returns priority 3 only on SONiC: not claimed by the profile.
        assert_eq!(
            decode(
                &sonic,
                "1.3.6.1.4.1.9.9.813.1.1.1.1.5",
                SnmpValue::Counter64(1)
            ),
            None
        );
        let pfc = decode(
            &sonic,
            "1.3.6.1.4.1.9.9.813.1.2.1.3.5.3",
            SnmpValue::Counter64(42),
        )
        .unwrap();
        assert_eq!(
            (pfc.key.ifindex, pfc.key.priority, pfc.key.direction),
            (5, Some(3), Some(Direction::Rx))
        );
        // Egress (2), queue 4 of 1-based numbering, type 5 = ucastDroppedPkts.
        let drop = decode(
            &sonic,
            "1.3.6.1.4.1.9.9.580.1.5.5.1.4.5.2.4.5",
            SnmpValue::Counter64(9),
        )
        .unwrap();
        assert_eq!(
            (drop.metric, drop.key.queue),
            (Metric::QueueDroppedPackets, Some(3))
        );
        // Ingress rows and stats types no column asks for are ignored.
        assert_eq!(
            decode(
                &sonic,
                "1.3.6.1.4.1.9.9.580.1.5.5.1.4.5.1.4.5",
                SnmpValue::Counter64(9)
            ),
            None
        );
        assert_eq!(
            decode(
                &sonic,
                "1.3.6.1.4.1.9.9.580.1.5.5.1.4.5.2.4.6",
                SnmpValue::Counter64(9)
            ),
            None
        );
        // Three columns share one table column: it is walked once.
        let csq = oid("1.3.6.1.4.1.9.9.580.1.5.5.1.4");
        assert_eq!(sonic.walk_roots().iter().filter(|r| **r == csq).count(), 1);
    }

    #[test]
    fn arista_ecn_marks_per_queue() {
        let arista = builtin("arista_eos");
        let ecn = decode(
            &arista,
            "1.3.6.1.4.1.30065.3.13.1.9.1.4.9.3",
            SnmpValue::Counter64(77),
        )
        .unwrap();
        assert_eq!(ecn.metric, Metric::QueueEcnMarkedPackets);
        assert_eq!((ecn.key.ifindex, ecn.key.queue), (9, Some(3)));
        assert_eq!(ecn.value, SampleValue::Counter(77));
    }

    #[test]
    fn cisco_pause_time_in_seconds() {
        let cisco = builtin("cisco_nxos");
        let wait = decode(
            &cisco,
            "1.3.6.1.4.1.9.9.813.1.4.1.3.7.3",
            SnmpValue::Counter64(1_500_000),
        )
        .unwrap();
        assert_eq!(wait.metric, Metric::PfcPauseSeconds);
        assert_eq!(wait.value, SampleValue::Seconds(1.5));
        assert_eq!(wait.key.direction, Some(Direction::Tx));
    }

    #[test]
    fn if_mib_and_lldp() {
        let generic = builtin("generic");
        let name = decode(
            &generic,
            "1.3.6.1.2.1.31.1.1.1.1.12",
            SnmpValue::OctetString(b"Ethernet44".to_vec()),
        )
        .unwrap();
        assert_eq!(
            (name.metric, name.value),
            (Metric::IfName, SampleValue::Text("Ethernet44".into()))
        );
        let neighbour = decode(
            &generic,
            "1.0.8802.1.1.2.1.4.1.1.9.0.12.1",
            SnmpValue::OctetString(b"gpu-node-01".to_vec()),
        )
        .unwrap();
        assert_eq!(
            (neighbour.metric, neighbour.key.ifindex),
            (Metric::LldpRemoteSystemName, 12)
        );
        let discards = decode(
            &generic,
            "1.3.6.1.2.1.2.2.1.13.12",
            SnmpValue::Counter32(u32::MAX),
        )
        .unwrap();
        assert_eq!(discards.value, SampleValue::Counter(u64::from(u32::MAX)));
        let all = decode(
            &generic,
            "1.3.111.2.802.1.1.21.1.1.1.2.12",
            SnmpValue::Counter32(3),
        )
        .unwrap();
        assert_eq!(
            (all.metric, all.key.direction),
            (Metric::PfcFramesAllPriorities, Some(Direction::Tx))
        );
    }

    #[test]
    fn dcbx_pfc_enable_and_traffic_class_in_every_snmp_profile() {
        for name in ["generic", "sonic", "arista_eos"] {
            let profile = builtin(name);
            let on = decode(
                &profile,
                "1.3.111.2.802.1.1.13.1.5.32962.5.1.2.3.2.1.2.7.3",
                SnmpValue::Integer(1),
            )
            .unwrap();
            assert_eq!(
                (on.metric, on.key.ifindex, on.key.priority, on.value),
                (Metric::PfcEnabled, 7, Some(3), SampleValue::Gauge(1)),
                "{name}"
            );
            let off = decode(
                &profile,
                "1.3.111.2.802.1.1.13.1.5.32962.5.1.2.3.2.1.2.7.4",
                SnmpValue::Integer(2),
            )
            .unwrap();
            assert_eq!(off.value, SampleValue::Gauge(0));
            let class = decode(
                &profile,
                "1.3.111.2.802.1.1.13.1.5.32962.5.1.2.1.2.1.2.7.3",
                SnmpValue::Gauge32(5),
            )
            .unwrap();
            assert_eq!(
                (class.metric, class.key.priority, class.value),
                (Metric::PriorityQueue, Some(3), SampleValue::Gauge(5))
            );
        }
        // TruthValue has only 1 and 2; a counter is not a setting.
        let generic = builtin("generic");
        for value in [SnmpValue::Integer(0), SnmpValue::Counter64(1)] {
            let bad = generic.decode(
                &oid("1.3.111.2.802.1.1.13.1.5.32962.5.1.2.3.2.1.2.7.3"),
                &value,
            );
            assert!(
                bad.unwrap()
                    .unwrap_err()
                    .to_string()
                    .contains("lldpXdot1dcbxLocPFCEnableEnabled"),
                "{value:?}"
            );
        }
    }

    #[test]
    fn malformed_rows_and_values() {
        let arista = builtin("arista_eos");
        // Priority 9 does not exist; a short index is not a row of the column.
        assert_eq!(
            decode(
                &arista,
                "1.3.6.1.4.1.30065.3.11.1.1.1.3.5.9",
                SnmpValue::Counter64(1)
            ),
            None
        );
        assert_eq!(
            decode(
                &arista,
                "1.3.6.1.4.1.30065.3.11.1.1.1.3.5",
                SnmpValue::Counter64(1)
            ),
            None
        );
        // A counter column answering a string, or noSuchInstance, is a decode error.
        let bad = arista.decode(
            &oid("1.3.6.1.4.1.30065.3.11.1.1.1.3.5.3"),
            &SnmpValue::OctetString(b"x".to_vec()),
        );
        assert!(matches!(bad, Some(Err(DecodeError { .. }))));
        let missing = arista.decode(
            &oid("1.3.6.1.4.1.30065.3.11.1.1.1.3.5.3"),
            &SnmpValue::Other("noSuchInstance".into()),
        );
        assert!(missing
            .unwrap()
            .unwrap_err()
            .to_string()
            .contains("aristaPfcPriorityRequests"));
    }

    fn load_one(text: &str) -> Result<Profiles, ProfileError> {
        Profiles::load([("test.yml".to_string(), text.to_string())].into_iter())
    }

    #[test]
    fn profile_errors_say_where() {
        let err = load_one("name: x\ndescription: d\ncolumns:\n  - {name: a, oid: 1.3.6, metric: pfc_framez, index: [ifindex]}\n").unwrap_err();
        assert!(err.to_string().starts_with("profile test.yml: 4:"), "{err}");
        let err = load_one("name: x\ndescription: d\ncolumns:\n  - {name: a, oid: 1.x.6, metric: in_octets, index: [ifindex]}\n").unwrap_err();
        assert!(err.to_string().contains("invalid OID"), "{err}");
        let err = load_one("name: x\ndescription: d\ncolumns:\n  - {name: a, oid: 1.3.6, metric: pfc_frames, index: [ifindex, priority]}\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("column a: PFC metrics need `labels.direction`"),
            "{err}"
        );
        let err = load_one("name: x\ndescription: d\ncolumns:\n  - {name: a, oid: 1.3.6, metric: in_octets, index: [ifindex, slot]}\n").unwrap_err();
        assert!(
            err.to_string().contains("unknown index part \"slot\""),
            "{err}"
        );
        let err = load_one("name: x\ndescription: d\nextends: nope\ncolumns: []\n").unwrap_err();
        assert!(err.to_string().contains("extends unknown profile"), "{err}");
    }

    #[test]
    fn a_directory_adds_vendors_and_replaces_builtins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("acme.yml"),
            "name: acme\ndescription: Acme OS\nextends: if_mib\ncolumns:\n  - {name: acmePfcTx, oid: 1.3.6.1.4.1.99999.1.2, metric: pfc_frames, index: [ifindex, priority], labels: {direction: tx}}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("generic.yml"),
            "name: generic\ndescription: replaced\ncolumns: []\n",
        )
        .unwrap();
        let profiles = Profiles::with_dir(dir.path()).unwrap();
        let acme = profiles.get("acme").unwrap();
        let sample = acme
            .decode(&oid("1.3.6.1.4.1.99999.1.2.4.6"), &SnmpValue::Counter64(1))
            .unwrap()
            .unwrap();
        assert_eq!((sample.key.ifindex, sample.key.priority), (4, Some(6)));
        assert_eq!(profiles.get("generic").unwrap().description, "replaced");
    }

    #[test]
    fn a_profile_can_lower_the_gnmi_leaf_cap_of_the_one_it_extends() {
        use crate::switch::gnmi::session::MAX_LEAVES;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("small.yml"),
            "name: small\ndescription: SONiC, at most 20 000 leaves\nextends: sonic\ngnmi: {max_leaves: 20000}\n",
        )
        .unwrap();
        let profiles = Profiles::with_dir(dir.path()).unwrap();
        let (small, sonic) = (
            profiles.get("small").unwrap(),
            profiles.get("sonic").unwrap(),
        );
        assert_eq!(small.gnmi.max_leaves(), 20_000);
        assert_eq!(small.gnmi.path_texts, sonic.gnmi.path_texts);
        assert_eq!(sonic.gnmi.max_leaves(), MAX_LEAVES);
        let err = load_one("name: x\ndescription: d\ngnmi: {max_leaves: 0}\n").unwrap_err();
        assert!(
            err.to_string().contains("max_leaves: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn a_profile_whose_gnmi_paths_name_two_targets_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("qos.yml"),
            "name: qos\ndescription: SONiC and its PFC settings\nextends: sonic\ngnmi: {paths: ['CONFIG_DB:PORT_QOS_MAP']}\n",
        )
        .unwrap();
        let err = Profiles::with_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("profile"), "{err}");
        assert!(
            err.contains(r#"["CONFIG_DB", "COUNTERS_DB"]"#) && err.contains("prefix"),
            "{err}"
        );
    }
}
