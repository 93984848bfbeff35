//! What the NIC itself is set to, as `ecn-tune` evidence: DCQCN's reaction and notification
//! points per priority (`rdma_ecn_enabled`, from MLNX_OFED's `ecn/`; the agent exports the
//! priorities with PFC, else those with traffic) and a few DCQCN parameters where the agent
//! exports them (`node.ecn_settings.parameters`). Nothing where the NIC does not report them:
//! a setting that is not known is never read as off.

use std::collections::BTreeMap;

use serde::Serialize;

use super::query::{Labels, QueryError, Sample};

/// DCQCN's two ends on one priority over the window; `None`: not reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PrioritySetting {
    pub priority: String,
    /// Sender: slows down on CNPs. Off if it was off at any time in the window.
    pub reaction: Option<bool>,
    /// Receiver: answers ECN marks with CNPs.
    pub notification: Option<bool>,
}

/// One DCQCN parameter at the window's end, in the metric's base unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parameter {
    pub name: &'static str,
    pub value: f64,
}

/// The NIC's settings as far as it reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NicSettings {
    pub ecn: Vec<PrioritySetting>,
    pub parameters: Vec<Parameter>,
}

impl NicSettings {
    pub fn is_empty(&self) -> bool {
        self.ecn.is_empty() && self.parameters.is_empty()
    }
}

/// How a parameter is shown: its query, its name in the text, and how to print its value.
struct Shown {
    template: &'static str,
    name: &'static str,
    unit: Unit,
}

#[derive(Clone, Copy)]
enum Unit {
    /// Bytes per second, shown in Mb/s as the driver and NVIDIA's tables give them.
    Mbits,
    /// Seconds, shown in µs.
    Micros,
}

/// The parameters that say how hard and how fast DCQCN reacts: the floor it cuts to, how fast
/// it climbs back, and how often a receiver may send CNPs.
const SHOWN: [Shown; 5] = [
    Shown {
        template: "last_over_time(rdma_dcqcn_rp_min_rate_bytes_per_second%S[%W])",
        name: "min rate",
        unit: Unit::Mbits,
    },
    Shown {
        template: "last_over_time(rdma_dcqcn_rp_ai_rate_bytes_per_second%S[%W])",
        name: "additive increase",
        unit: Unit::Mbits,
    },
    Shown {
        template: "last_over_time(rdma_dcqcn_rp_hai_rate_bytes_per_second%S[%W])",
        name: "hyper increase",
        unit: Unit::Mbits,
    },
    Shown {
        template: "last_over_time(rdma_dcqcn_rp_time_reset_seconds%S[%W])",
        name: "rate increase period",
        unit: Unit::Micros,
    },
    Shown {
        template: "last_over_time(rdma_dcqcn_np_min_time_between_cnps_seconds%S[%W])",
        name: "min time between CNPs",
        unit: Unit::Micros,
    },
];

/// Every NIC's settings, keyed as `key` names ports. `run` answers a query template (`%S`
/// the selector, `%W` the window).
pub fn gather(
    run: &dyn Fn(&str) -> Result<Vec<Sample>, QueryError>,
    key: &dyn Fn(&Labels) -> Labels,
) -> Result<BTreeMap<Labels, NicSettings>, QueryError> {
    let mut by_nic: BTreeMap<Labels, NicSettings> = BTreeMap::new();
    // The lowest over the window: a point off at any time of the run was off for it.
    for sample in run("min_over_time(rdma_ecn_enabled%S[%W])")? {
        let (Some(value), Some(priority), Some(point)) = (
            sample.value,
            sample.labels.get("priority"),
            sample.labels.get("point"),
        ) else {
            continue;
        };
        let settings = by_nic.entry(key(&sample.labels)).or_default();
        let at = match settings.ecn.iter().position(|s| &s.priority == priority) {
            Some(at) => at,
            None => {
                settings.ecn.push(PrioritySetting {
                    priority: priority.clone(),
                    ..PrioritySetting::default()
                });
                settings.ecn.len() - 1
            }
        };
        let on = Some(value >= 1.0);
        match point.as_str() {
            "reaction" => settings.ecn[at].reaction = on,
            "notification" => settings.ecn[at].notification = on,
            _ => {}
        }
    }
    for shown in &SHOWN {
        for sample in run(shown.template)? {
            if let Some(value) = sample.value {
                by_nic
                    .entry(key(&sample.labels))
                    .or_default()
                    .parameters
                    .push(Parameter {
                        name: shown.name,
                        value,
                    });
            }
        }
    }
    for settings in by_nic.values_mut() {
        settings.ecn.sort_by(|a, b| a.priority.cmp(&b.priority));
    }
    Ok(by_nic)
}

fn on_off(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "on",
        Some(false) => "off",
        None => "not reported",
    }
}

/// The evidence line: what the NIC is set to. `None` where it reports nothing.
pub fn line(settings: &NicSettings) -> Option<String> {
    if settings.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = settings
        .ecn
        .iter()
        .map(|s| {
            format!(
                "priority {}: ECN reaction point {}, notification point {}",
                s.priority,
                on_off(s.reaction),
                on_off(s.notification)
            )
        })
        .collect();
    let parameters: Vec<String> = settings
        .parameters
        .iter()
        .map(|p| {
            let unit = SHOWN
                .iter()
                .find(|s| s.name == p.name)
                .map_or(Unit::Mbits, |s| s.unit);
            match unit {
                Unit::Mbits => format!("{} {} Mb/s", p.name, fmt(p.value * 8.0 / 1e6)),
                Unit::Micros => format!("{} {} µs", p.name, fmt(p.value * 1e6)),
            }
        })
        .collect();
    if !parameters.is_empty() {
        parts.push(format!("DCQCN {}", parameters.join(", ")));
    }
    Some(format!("NIC settings: {}", parts.join("; ")))
}

/// A number without a trailing `.0`.
fn fmt(v: f64) -> String {
    let rounded = (v * 1000.0).round() / 1000.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0}")
    } else {
        format!("{rounded}")
    }
}

/// Notes for the points that are off: they explain a verdict before any threshold does.
pub fn notes(settings: &NicSettings) -> Vec<String> {
    let mut notes = Vec::new();
    for s in &settings.ecn {
        if s.reaction == Some(false) {
            notes.push(format!(
                "ECN reaction point off on priority {}: DCQCN cannot slow this sender (rdma_ecn_enabled; RdmaTrafficOnPriorityWithoutEcn); enable it before moving any threshold",
                s.priority
            ));
        }
        if s.notification == Some(false) {
            notes.push(format!(
                "ECN notification point off on priority {}: the ECN marks this NIC receives send no CNP to its senders (rdma_ecn_enabled; RdmaTrafficOnPriorityWithoutEcn); enable it before moving any threshold",
                s.priority
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: Some(value),
        }
    }

    fn port_key(labels: &Labels) -> Labels {
        labels
            .iter()
            .filter(|(k, _)| ["instance", "device", "port"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    #[test]
    fn settings_are_gathered_per_port_and_shown_in_words() {
        let nic = [
            ("instance", "gpu-node-02"),
            ("device", "mlx5_1"),
            ("port", "1"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = nic.to_vec();
            v.extend_from_slice(extra);
            v
        };
        let run = |template: &str| -> Result<Vec<Sample>, QueryError> {
            Ok(if template.contains("rdma_ecn_enabled") {
                vec![
                    sample(&with(&[("priority", "3"), ("point", "reaction")]), 0.0),
                    sample(&with(&[("priority", "3"), ("point", "notification")]), 1.0),
                ]
            } else if template.contains("rdma_dcqcn_rp_ai_rate_bytes_per_second") {
                vec![sample(&nic, 625_000.0)]
            } else if template.contains("rdma_dcqcn_rp_time_reset_seconds") {
                vec![sample(&nic, 300e-6)]
            } else {
                vec![]
            })
        };
        let by_nic = gather(&run, &port_key).unwrap();
        assert_eq!(by_nic.len(), 1);
        let settings = by_nic.values().next().unwrap();
        assert_eq!(
            line(settings).as_deref(),
            Some("NIC settings: priority 3: ECN reaction point off, notification point on; DCQCN additive increase 5 Mb/s, rate increase period 300 µs")
        );
        let notes = notes(settings);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0]
                .starts_with("ECN reaction point off on priority 3: DCQCN cannot slow this sender"),
            "{notes:?}"
        );
    }

    #[test]
    fn nothing_reported_is_no_line_and_no_note() {
        let run = |_: &str| -> Result<Vec<Sample>, QueryError> { Ok(vec![]) };
        let by_nic = gather(&run, &port_key).unwrap();
        assert!(by_nic.is_empty());
        let unknown = NicSettings::default();
        assert_eq!(line(&unknown), None);
        assert!(notes(&unknown).is_empty());
        // Both points on: a line, no note.
        let on = NicSettings {
            ecn: vec![PrioritySetting {
                priority: "3".into(),
                reaction: Some(true),
                notification: Some(true),
            }],
            parameters: vec![],
        };
        assert!(line(&on).unwrap().contains("reaction point on"));
        assert!(notes(&on).is_empty());
    }
}
