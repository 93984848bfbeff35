//! Which priorities are lossless (PFC-enabled) on each switch port, and which egress queue each
//! priority uses. The switch says so where its profile reads it (the standard
//! LLDP-EXT-DOT1-DCBX-MIB local PFC and ETS tables); otherwise the operator states it in the
//! switch's config (`pfc_priorities`, `priority_queues`). Alerts compare it with the priorities
//! NICs send RDMA on, and with the drops of the queues it names.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::profile::{Metric, Sample, SampleValue};

/// What the operator states for one switch; applies to ports the switch does not describe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PfcConfig {
    /// `pfc_priorities`: the priorities with PFC on every port; `None` when not stated.
    pub priorities: Option<PfcPriorities>,
    /// `priority_queues`: the egress queue of each priority (the priority's own number unless
    /// stated).
    pub queues: PriorityQueues,
}

/// An 802.1p priority, checked where it is written (so that an error points at it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "u8")]
pub struct Priority(u8);

impl TryFrom<u8> for Priority {
    type Error = String;
    fn try_from(value: u8) -> Result<Self, Self::Error> {
        if value < 8 {
            Ok(Priority(value))
        } else {
            Err(format!("priority {value} is outside 0-7"))
        }
    }
}

/// `pfc_priorities: [3, 4]`: distinct priorities 0-7; `[]` states a lossy switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<Priority>")]
pub struct PfcPriorities([bool; 8]);

impl PfcPriorities {
    /// The set of `priorities`, checked as the config's list is.
    pub fn from_priorities(priorities: impl IntoIterator<Item = u8>) -> Result<Self, String> {
        let list: Result<Vec<Priority>, String> =
            priorities.into_iter().map(Priority::try_from).collect();
        PfcPriorities::try_from(list?)
    }

    pub fn enabled(self, priority: u8) -> bool {
        self.0[usize::from(priority)]
    }
}

impl TryFrom<Vec<Priority>> for PfcPriorities {
    type Error = String;
    fn try_from(list: Vec<Priority>) -> Result<Self, Self::Error> {
        let mut set = [false; 8];
        for Priority(priority) in list {
            let slot = &mut set[usize::from(priority)];
            if *slot {
                return Err(format!(
                    "pfc_priorities: priority {priority} is listed twice"
                ));
            }
            *slot = true;
        }
        Ok(PfcPriorities(set))
    }
}

/// `priority_queues: {3: 3, 4: 4}`: priority → egress queue, unstated ones on their own number
/// (the usual identity map of SONiC's `TC_TO_QUEUE_MAP` and of 802.1Q's traffic classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(from = "BTreeMap<Priority, u32>")]
pub struct PriorityQueues([u32; 8]);

impl Default for PriorityQueues {
    fn default() -> Self {
        PriorityQueues([0, 1, 2, 3, 4, 5, 6, 7])
    }
}

impl PriorityQueues {
    pub fn queue(self, priority: u8) -> u32 {
        self.0[usize::from(priority)]
    }
}

impl From<BTreeMap<Priority, u32>> for PriorityQueues {
    fn from(map: BTreeMap<Priority, u32>) -> Self {
        let mut queues = PriorityQueues::default();
        for (Priority(priority), queue) in map {
            queues.0[usize::from(priority)] = queue;
        }
        queues
    }
}

/// Who said a priority is (or is not) lossless on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PfcSource {
    /// The switch's own answer (its operational state).
    Switch,
    /// The switch's config entry in the exporter.
    Config,
}

impl PfcSource {
    pub const ALL: &'static [PfcSource] = &[PfcSource::Switch, PfcSource::Config];

    pub fn as_label(self) -> &'static str {
        match self {
            PfcSource::Switch => "switch",
            PfcSource::Config => "config",
        }
    }
}

/// One priority of one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityPfc {
    pub ifindex: u32,
    pub priority: u8,
    pub enabled: bool,
    pub queue: u32,
    pub source: PfcSource,
}

/// The PFC state of every port a poll tells of, in (ifindex, priority) order. The switch's
/// answer wins priority by priority: it is what the hardware does, and a mismatch with the
/// operator's intent is what the alerts are for. The config covers the ports where the switch
/// shows PFC frames or queue counters (its physical, QoS-capable ports, not VLANs or
/// loopbacks) and the priorities the switch did not answer for.
pub fn resolve(samples: &[Sample], config: PfcConfig) -> Vec<PriorityPfc> {
    let mut enabled: BTreeMap<(u32, u8), bool> = BTreeMap::new();
    let mut queues: BTreeMap<(u32, u8), u32> = BTreeMap::new();
    let mut qos_ports: BTreeSet<u32> = BTreeSet::new();
    for sample in samples {
        let (ifindex, priority) = (sample.key.ifindex, sample.key.priority);
        match (sample.metric, priority, &sample.value) {
            (Metric::PfcEnabled, Some(p), SampleValue::Gauge(v)) => {
                enabled.insert((ifindex, p), *v != 0);
            }
            (Metric::PriorityQueue, Some(p), SampleValue::Gauge(q)) => {
                if let Ok(q) = u32::try_from(*q) {
                    queues.insert((ifindex, p), q);
                }
            }
            (metric, _, _) if shows_qos(metric) => {
                qos_ports.insert(ifindex);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let ports: BTreeSet<u32> = qos_ports
        .into_iter()
        .chain(enabled.keys().map(|(ifindex, _)| *ifindex))
        .collect();
    for ifindex in ports {
        for priority in 0..8u8 {
            let stated = match enabled.get(&(ifindex, priority)) {
                Some(on) => Some((*on, PfcSource::Switch)),
                None => config
                    .priorities
                    .map(|set| (set.enabled(priority), PfcSource::Config)),
            };
            let Some((on, source)) = stated else {
                continue;
            };
            let queue = queues
                .get(&(ifindex, priority))
                .copied()
                .unwrap_or_else(|| config.queues.queue(priority));
            out.push(PriorityPfc {
                ifindex,
                priority,
                enabled: on,
                queue,
                source,
            });
        }
    }
    out
}

/// Counters a switch keeps only on ports where PFC can apply.
fn shows_qos(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::PfcFrames
            | Metric::PfcFramesAllPriorities
            | Metric::PfcPauseSeconds
            | Metric::QueueTransmittedPackets
            | Metric::QueueDroppedPackets
            | Metric::QueueWredDroppedPackets
            | Metric::QueueIngressDroppedPackets
            | Metric::QueueEcnMarkedPackets
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::profile::SampleKey;

    fn sample(metric: Metric, ifindex: u32, priority: Option<u8>, value: SampleValue) -> Sample {
        Sample {
            metric,
            key: SampleKey {
                ifindex,
                priority,
                ..SampleKey::default()
            },
            value,
        }
    }

    fn config(text: &str) -> Result<PfcConfig, String> {
        #[derive(Deserialize)]
        struct Raw {
            pfc_priorities: Option<PfcPriorities>,
            #[serde(default)]
            priority_queues: PriorityQueues,
        }
        let raw: Raw = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        Ok(PfcConfig {
            priorities: raw.pfc_priorities,
            queues: raw.priority_queues,
        })
    }

    #[test]
    fn priorities_and_queues_parse_and_are_checked() {
        let stated = config("{pfc_priorities: [3, 4], priority_queues: {3: 5}}").unwrap();
        let set = stated.priorities.unwrap();
        assert!(set.enabled(3) && set.enabled(4) && !set.enabled(0));
        assert_eq!((stated.queues.queue(3), stated.queues.queue(4)), (5, 4));
        let lossy = config("{pfc_priorities: []}").unwrap();
        assert!((0..8).all(|p| !lossy.priorities.unwrap().enabled(p)));
        assert_eq!(config("{}").unwrap(), PfcConfig::default());
        for (text, expected) in [
            ("{pfc_priorities: [8]}", "priority 8 is outside 0-7"),
            ("{pfc_priorities: [3, 3]}", "priority 3 is listed twice"),
            ("{priority_queues: {9: 1}}", "priority 9 is outside 0-7"),
            ("{pfc_priorities: 3}", "invalid type"),
        ] {
            let err = config(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn the_switch_wins_and_the_config_covers_qos_ports_it_does_not_describe() {
        let samples = vec![
            // Port 1: the switch says PFC on 3 only, and priority 3 uses queue 6.
            sample(Metric::PfcEnabled, 1, Some(3), SampleValue::Gauge(1)),
            sample(Metric::PfcEnabled, 1, Some(4), SampleValue::Gauge(0)),
            sample(Metric::PriorityQueue, 1, Some(3), SampleValue::Gauge(6)),
            // Port 2: queue counters, no DCBX answer.
            sample(
                Metric::QueueDroppedPackets,
                2,
                None,
                SampleValue::Counter(0),
            ),
            // Port 9 (a VLAN): only its name; no PFC can apply.
            sample(Metric::IfName, 9, None, SampleValue::Text("Vlan9".into())),
        ];
        let stated = config("{pfc_priorities: [3, 4], priority_queues: {4: 2}}").unwrap();
        let got = resolve(&samples, stated);
        let find = |ifindex, priority| {
            got.iter()
                .find(|p| p.ifindex == ifindex && p.priority == priority)
                .copied()
        };
        let p1_3 = find(1, 3).unwrap();
        assert_eq!(
            (p1_3.enabled, p1_3.queue, p1_3.source),
            (true, 6, PfcSource::Switch)
        );
        // The switch says off where the operator says on: the switch's answer is exported.
        let p1_4 = find(1, 4).unwrap();
        assert_eq!(
            (p1_4.enabled, p1_4.queue, p1_4.source),
            (false, 2, PfcSource::Switch)
        );
        // Priorities the switch left out come from the config.
        assert_eq!(find(1, 0).unwrap().source, PfcSource::Config);
        let p2_4 = find(2, 4).unwrap();
        assert_eq!(
            (p2_4.enabled, p2_4.queue, p2_4.source),
            (true, 2, PfcSource::Config)
        );
        assert!(!find(2, 5).unwrap().enabled);
        assert_eq!(got.iter().filter(|p| p.ifindex == 2).count(), 8);
        assert!(find(9, 3).is_none());
    }

    #[test]
    fn nothing_is_invented_without_a_statement() {
        let samples = vec![
            sample(
                Metric::QueueDroppedPackets,
                2,
                None,
                SampleValue::Counter(0),
            ),
            sample(Metric::PfcEnabled, 1, Some(3), SampleValue::Gauge(1)),
        ];
        let got = resolve(&samples, PfcConfig::default());
        assert_eq!(
            got,
            vec![PriorityPfc {
                ifindex: 1,
                priority: 3,
                enabled: true,
                queue: 3,
                source: PfcSource::Switch
            }]
        );
    }
}
