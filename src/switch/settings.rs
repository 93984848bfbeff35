//! The columns that change rarely (LLDP neighbours, PFC settings: `Metric::changes_rarely`)
//! are walked every `settings_interval` of the switch (default
//! [`DEFAULT_SETTINGS_INTERVAL`]), not at every poll: a switch's CPU answers every
//! varbind, and on a 64-port switch with DCBX those columns are about 1 200 of them. The polls
//! in between serve the settings kept from the last walk of every column. A switch whose
//! ifName by ifIndex changed (a reboot, a line card) has its settings walked again in the same
//! poll: kept rows would name the old ports.
//!
//! A gNMI switch's settings live apart from its counters (SONiC keeps PFC settings in
//! CONFIG_DB, its counters in COUNTERS_DB): its profile's `settings_paths` are read with a
//! request of their own every `settings_interval` ([`GnmiSettings`]), and their leaves are
//! decoded with each view of the counters. A switch that refuses them keeps its counters.

use std::time::{Duration, Instant};

use super::gnmi::GnmiUpdate;
use super::profile::{Metric, Sample, SampleValue};

/// How long kept settings are served before every column is walked again, unless the switch's
/// config says (`settings_interval`).
pub const DEFAULT_SETTINGS_INTERVAL: Duration = Duration::from_secs(300);

/// The settings of one switch's last walk of them.
#[derive(Debug)]
pub struct KeptSwitchSettings {
    walked_at: Instant,
    samples: Vec<Sample>,
    port_names: Vec<(u32, String)>,
}

impl KeptSwitchSettings {
    /// Keeps the settings of `samples`, a walk that read them at `at`, and the port names they
    /// belong to.
    pub fn of(samples: &[Sample], at: Instant) -> KeptSwitchSettings {
        KeptSwitchSettings {
            walked_at: at,
            samples: samples
                .iter()
                .filter(|s| s.metric.changes_rarely())
                .cloned()
                .collect(),
            port_names: port_names(samples),
        }
    }

    /// Whether the next poll walks every column: nothing kept, or kept for `every` (zero:
    /// every poll walks them).
    pub fn due(kept: Option<&KeptSwitchSettings>, now: Instant, every: Duration) -> bool {
        kept.is_none_or(|k| now.saturating_duration_since(k.walked_at) >= every)
    }

    /// Whether these settings still describe the ports of `counters`, a walk without them.
    pub fn fits(&self, counters: &[Sample]) -> bool {
        port_names(counters) == self.port_names
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }
}

/// A gNMI switch's settings leaves from its last read of them.
#[derive(Debug, Default)]
pub struct GnmiSettings {
    /// When they were last asked for, answered or not: a refusal is not asked again at once.
    pub asked_at: Option<Instant>,
    /// The leaves of the last answer that the profile maps.
    pub updates: Vec<GnmiUpdate>,
    /// The last read failed (logged once until one succeeds again).
    pub failing: bool,
}

impl GnmiSettings {
    /// Whether they are asked for again: never asked, or asked `every` ago (zero: at every
    /// poll; a subscribed switch's own loop waits at least its `interval` between reads).
    pub fn due(&self, now: Instant, every: Duration) -> bool {
        self.asked_at
            .is_none_or(|at| now.saturating_duration_since(at) >= every)
    }
}

/// (ifIndex, ifName) of a walk, in order.
fn port_names(samples: &[Sample]) -> Vec<(u32, String)> {
    let mut names: Vec<(u32, String)> = samples
        .iter()
        .filter_map(|s| match (&s.metric, &s.value) {
            (Metric::IfName, SampleValue::Text(name)) => Some((s.key.ifindex, name.clone())),
            _ => None,
        })
        .collect();
    names.sort_unstable();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::profile::SampleKey;

    fn sample(metric: Metric, ifindex: u32, value: SampleValue) -> Sample {
        Sample {
            metric,
            key: SampleKey {
                ifindex,
                ..SampleKey::default()
            },
            value,
        }
    }

    #[test]
    fn settings_are_due_when_none_are_kept_or_they_are_old() {
        let at = Instant::now();
        let walk = [
            sample(Metric::IfName, 1, SampleValue::Text("Ethernet1".into())),
            sample(Metric::InOctets, 1, SampleValue::Counter(5)),
            sample(
                Metric::LldpRemoteSystemName,
                1,
                SampleValue::Text("host".into()),
            ),
        ];
        let kept = KeptSwitchSettings::of(&walk, at);
        assert_eq!(kept.samples().len(), 1, "only the settings are kept");
        assert!(KeptSwitchSettings::due(None, at, DEFAULT_SETTINGS_INTERVAL));
        assert!(!KeptSwitchSettings::due(
            Some(&kept),
            at + DEFAULT_SETTINGS_INTERVAL / 2,
            DEFAULT_SETTINGS_INTERVAL
        ));
        assert!(KeptSwitchSettings::due(
            Some(&kept),
            at + DEFAULT_SETTINGS_INTERVAL,
            DEFAULT_SETTINGS_INTERVAL
        ));
        assert!(KeptSwitchSettings::due(Some(&kept), at, Duration::ZERO));
        assert!(kept.fits(&walk[..2]));
        let renamed = [sample(
            Metric::IfName,
            1,
            SampleValue::Text("Ethernet9".into()),
        )];
        assert!(!kept.fits(&renamed));
        let another_port = [
            walk[0].clone(),
            sample(Metric::IfName, 2, SampleValue::Text("Ethernet2".into())),
        ];
        assert!(!kept.fits(&another_port));
    }
}
