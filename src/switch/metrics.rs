//! Switch snapshots as metric families: the normalized names of the design, one table here.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use super::poller::Poller;
use super::profile::{Metric, SampleValue};
use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Labels, Value};

/// Name and help of each counter-like metric (labels beyond switch/port follow from the key).
fn family(metric: Metric) -> Option<(&'static str, &'static str)> {
    Some(match metric {
        Metric::InOctets => ("rdma_switch_port_received_bytes", "Bytes received on the switch port (ifHCInOctets)."),
        Metric::OutOctets => ("rdma_switch_port_transmitted_bytes", "Bytes transmitted on the switch port (ifHCOutOctets)."),
        Metric::InUcastPackets => ("rdma_switch_port_received_unicast_packets", "Unicast packets received on the switch port."),
        Metric::OutUcastPackets => ("rdma_switch_port_transmitted_unicast_packets", "Unicast packets transmitted on the switch port."),
        Metric::InDiscards => ("rdma_switch_port_received_discards", "Inbound packets discarded by the switch port (ifInDiscards)."),
        Metric::OutDiscards => ("rdma_switch_port_transmitted_discards", "Outbound packets discarded by the switch port (ifOutDiscards)."),
        Metric::InErrors => ("rdma_switch_port_received_errors", "Inbound packets with errors (ifInErrors)."),
        Metric::OutErrors => ("rdma_switch_port_transmitted_errors", "Outbound packets that could not be sent because of errors (ifOutErrors)."),
        Metric::PfcFrames => ("rdma_switch_port_pfc_frames", "PFC frames per priority: rx = received from the neighbour (it pauses the switch), tx = sent by the switch (it pauses the neighbour)."),
        Metric::PfcFramesAllPriorities => ("rdma_switch_port_pfc_frames_all_priorities", "PFC frames summed over all priorities (IEEE8021-PFC-MIB, 32-bit)."),
        Metric::PfcPauseSeconds => ("rdma_switch_port_pfc_pause_seconds", "Time the port was paused by PFC per priority, in seconds."),
        Metric::QueueTransmittedPackets => ("rdma_switch_queue_transmitted_packets", "Packets transmitted from the egress queue."),
        Metric::QueueDroppedPackets => ("rdma_switch_queue_dropped_packets", "Packets dropped by the queue (tail or buffer drops)."),
        Metric::QueueWredDroppedPackets => ("rdma_switch_queue_wred_dropped_packets", "Packets dropped by WRED in the queue."),
        Metric::QueueIngressDroppedPackets => ("rdma_switch_queue_ingress_dropped_packets", "Packets dropped by the ingress queue."),
        Metric::QueueEcnMarkedPackets => ("rdma_switch_queue_ecn_marked_packets", "Packets ECN-marked (CE) by the egress queue."),
        Metric::PfcWatchdogStorms => ("rdma_switch_pfc_watchdog_storms", "PFC storms the switch watchdog detected on the queue (queue stuck or shut down)."),
        Metric::PfcWatchdogRestores => ("rdma_switch_pfc_watchdog_restores", "Times the PFC watchdog restored the queue after a storm."),
        Metric::PfcWatchdogDroppedPackets => ("rdma_switch_pfc_watchdog_dropped_packets", "Packets the PFC watchdog dropped while the queue was stormed."),
        _ => return None,
    })
}

const PRIORITIES: [&str; 8] = ["0", "1", "2", "3", "4", "5", "6", "7"];

/// Encodes every configured switch at each scrape from its last snapshot.
#[derive(Debug)]
pub struct SwitchCollector {
    pub poller: Arc<Poller>,
    /// Encode only this target (the `/probe` endpoint); all when `None`.
    pub only: Option<usize>,
}

impl SwitchCollector {
    fn add_all<'a>(
        &self,
        families: &mut Families<'a>,
        snapshots: &'a [(String, Option<Arc<super::poller::Snapshot>>)],
    ) {
        for (name, snapshot) in snapshots {
            if let Some(snapshot) = snapshot {
                add_snapshot(families, name, snapshot);
            }
        }
    }
}

fn add_snapshot<'a>(
    families: &mut Families<'a>,
    switch: &'a str,
    snapshot: &'a super::poller::Snapshot,
) {
    let samples = &snapshot.samples;
    // Port label: ifName where the switch gives one, else the ifIndex.
    let mut names: HashMap<u32, &str> = HashMap::new();
    let mut aliases: HashMap<u32, &str> = HashMap::new();
    let mut neighbours: HashMap<u32, (Option<&str>, Option<&str>)> = HashMap::new();
    for sample in samples {
        if let SampleValue::Text(text) = &sample.value {
            let ifindex = sample.key.ifindex;
            match sample.metric {
                Metric::IfName => {
                    names.insert(ifindex, text);
                }
                Metric::IfAlias => {
                    aliases.insert(ifindex, text);
                }
                Metric::LldpRemoteSystemName => {
                    neighbours.entry(ifindex).or_default().0 = Some(text)
                }
                Metric::LldpRemotePortId => neighbours.entry(ifindex).or_default().1 = Some(text),
                _ => {}
            }
        }
    }
    let port = |ifindex: u32| -> Cow<'a, str> {
        names
            .get(&ifindex)
            .map_or_else(|| Cow::Owned(ifindex.to_string()), |n| Cow::Borrowed(*n))
    };
    for (&ifindex, &name) in &names {
        let added = families.add(
            "rdma_switch_port",
            crate::exposition::Kind::Info,
            "Switch port identity: ifName, ifIndex (empty over gNMI) and ifAlias (the description).",
            vec![
                ("switch", Cow::Borrowed(switch)),
                ("port", Cow::Borrowed(name)),
                // gNMI names ports: no ifIndex to show.
                (
                    "ifindex",
                    if snapshot.synthetic_ifindex {
                        Cow::Borrowed("")
                    } else {
                        Cow::Owned(ifindex.to_string())
                    },
                ),
                (
                    "alias",
                    Cow::Borrowed(aliases.get(&ifindex).copied().unwrap_or_default()),
                ),
            ],
            Value::U64(1),
        );
        debug_assert!(added.is_ok());
    }
    for (&ifindex, &(host, neighbour_port)) in &neighbours {
        let added = families.add(
            "rdma_switch_port_neighbor",
            crate::exposition::Kind::Info,
            "LLDP neighbour of the switch port: joins switch ports to hosts and their NIC ports.",
            vec![
                ("switch", Cow::Borrowed(switch)),
                ("port", port(ifindex)),
                ("neighbor_host", Cow::Borrowed(host.unwrap_or_default())),
                (
                    "neighbor_port",
                    Cow::Borrowed(neighbour_port.unwrap_or_default()),
                ),
            ],
            Value::U64(1),
        );
        debug_assert!(added.is_ok());
    }
    for sample in samples {
        let mut labels: Labels<'a> = vec![
            ("switch", Cow::Borrowed(switch)),
            ("port", port(sample.key.ifindex)),
        ];
        if let Some(p) = sample.key.priority {
            labels.push(("priority", Cow::Borrowed(PRIORITIES[usize::from(p)])));
        }
        if let Some(d) = sample.key.direction {
            labels.push(("direction", Cow::Borrowed(d.label())));
        }
        if let Some(q) = sample.key.queue {
            labels.push(("queue", Cow::Owned(q.to_string())));
        }
        match (&sample.value, sample.metric) {
            (SampleValue::Gauge(v), Metric::OperStatus) => families.gauge(
                "rdma_switch_port_oper_status",
                "IF-MIB ifOperStatus of the switch port (1 up, 2 down, 3 testing, 5 dormant, 6 notPresent, 7 lowerLayerDown).",
                labels,
                Value::F64(*v as f64),
            ),
            (SampleValue::Counter(v), metric) => {
                if let Some((name, help)) = family(metric) {
                    families.counter(name, help, labels, Value::U64(*v));
                }
            }
            (SampleValue::Seconds(v), metric) => {
                if let Some((name, help)) = family(metric) {
                    families.counter(name, help, labels, Value::F64(*v));
                }
            }
            _ => {}
        }
    }
}

impl Collector for SwitchCollector {
    fn name(&self) -> &'static str {
        "switch"
    }

    /// Serves each switch's last snapshot; the polls themselves run in the background, and a
    /// failing switch shows in `rdma_switch_up`, not as a failed collector.
    fn collect(&self, out: &mut Output<'_, '_>) -> Result<Outcome, std::fmt::Error> {
        let mut families = Families::default();
        // Snapshots are cloned out (Arc) so that no poll waits on an encoding scrape.
        let mut snapshots = Vec::with_capacity(self.poller.targets.len());
        let selected = self
            .poller
            .targets
            .iter()
            .enumerate()
            .filter(|(index, _)| self.only.is_none_or(|only| only == *index));
        for (_, (target, state)) in selected {
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            let fresh = state.fresh_snapshot(target.interval).cloned();
            let switch = || vec![("switch", Cow::Owned(target.name.clone()))];
            families.gauge(
                "rdma_switch_up",
                "1 if the switch's last poll succeeded and its data is fresh (younger than two poll intervals).",
                switch(),
                Value::U64(u64::from(fresh.is_some() && state.last_error.is_none())),
            );
            if let Some(at) = state.last_success {
                let seconds = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                families.gauge(
                    "rdma_switch_last_success_timestamp_seconds",
                    "Unix time of the switch's last successful poll.",
                    switch(),
                    Value::F64(seconds),
                );
            }
            if let Some(duration) = state.last_duration {
                families.gauge(
                    "rdma_switch_poll_duration_seconds",
                    "Duration of the switch's last poll.",
                    switch(),
                    Value::F64(duration.as_secs_f64()),
                );
            }
            for (reason, count) in &state.errors {
                let mut labels = switch();
                labels.push(("reason", Cow::Borrowed(reason.as_label())));
                families.counter(
                    "rdma_switch_poll_errors",
                    "Failed switch polls by reason (timeout, network, auth, decode, snmp_error, poll_timeout), and values the profile could not read (value).",
                    labels,
                    Value::U64(*count),
                );
            }
            snapshots.push((target.name.clone(), fresh));
        }
        self.add_all(&mut families, &snapshots);
        out.encode(&families)?;
        Ok(Outcome::ok(true))
    }
}
