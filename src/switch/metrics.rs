//! Switch snapshots as metric families: the normalized names of the design, one table here.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use super::pfc::{self, PfcConfig};
use super::poller::Poller;
use super::profile::{Metric, Sample, SampleKey, SampleValue};
use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Labels, Value};

/// Where a profile metric is exported. The match in [`export`] is exhaustive: a new `Metric`
/// does not compile until it has a family, so no column a profile walks is dropped unseen.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Export {
    /// A label of `rdma_switch_port_info`.
    Port(PortField),
    /// A label of `rdma_switch_port_neighbor_info`.
    Neighbor(NeighborField),
    /// Read into `rdma_switch_port_pfc_enabled` (`switch::pfc`).
    Pfc,
    /// Exposed name and help (labels beyond switch/port follow from the sample's key).
    Gauge(&'static str, &'static str),
    Counter(&'static str, &'static str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum PortField {
    Name,
    Alias,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum NeighborField {
    Host,
    Port,
    PortDescription,
}

fn export(metric: Metric) -> Export {
    match metric {
        Metric::IfName => Export::Port(PortField::Name),
        Metric::IfAlias => Export::Port(PortField::Alias),
        Metric::LldpRemoteSystemName => Export::Neighbor(NeighborField::Host),
        Metric::LldpRemotePortId => Export::Neighbor(NeighborField::Port),
        Metric::LldpRemotePortDescription => Export::Neighbor(NeighborField::PortDescription),
        Metric::OperStatus => Export::Gauge("rdma_switch_port_oper_status", "IF-MIB ifOperStatus of the switch port (1 up, 2 down, 3 testing, 5 dormant, 6 notPresent, 7 lowerLayerDown)."),
        Metric::InOctets => Export::Counter("rdma_switch_port_received_bytes_total", "Bytes received on the switch port (ifHCInOctets)."),
        Metric::OutOctets => Export::Counter("rdma_switch_port_transmitted_bytes_total", "Bytes transmitted on the switch port (ifHCOutOctets)."),
        Metric::InUcastPackets => Export::Counter("rdma_switch_port_received_unicast_packets_total", "Unicast packets received on the switch port."),
        Metric::OutUcastPackets => Export::Counter("rdma_switch_port_transmitted_unicast_packets_total", "Unicast packets transmitted on the switch port."),
        Metric::InDiscards => Export::Counter("rdma_switch_port_received_discards_total", "Inbound packets discarded by the switch port (ifInDiscards)."),
        Metric::OutDiscards => Export::Counter("rdma_switch_port_transmitted_discards_total", "Outbound packets discarded by the switch port (ifOutDiscards)."),
        Metric::InErrors => Export::Counter("rdma_switch_port_received_errors_total", "Inbound packets with errors (ifInErrors)."),
        Metric::OutErrors => Export::Counter("rdma_switch_port_transmitted_errors_total", "Outbound packets that could not be sent because of errors (ifOutErrors)."),
        Metric::PfcFrames => Export::Counter("rdma_switch_port_pfc_frames_total", "PFC frames per priority: rx = received from the neighbour (it pauses the switch), tx = sent by the switch (it pauses the neighbour)."),
        Metric::PfcFramesAllPriorities => Export::Counter("rdma_switch_port_pfc_frames_all_priorities_total", "PFC frames summed over all priorities (IEEE8021-PFC-MIB, 32-bit)."),
        Metric::PfcPauseSeconds => Export::Counter("rdma_switch_port_pfc_pause_seconds_total", "Time the port was paused by PFC per priority, in seconds."),
        Metric::QueueTransmittedPackets => Export::Counter("rdma_switch_queue_transmitted_packets_total", "Packets transmitted from the egress queue."),
        Metric::QueueDroppedPackets => Export::Counter("rdma_switch_queue_dropped_packets_total", "Packets dropped by the queue (tail or buffer drops)."),
        Metric::QueueWredDroppedPackets => Export::Counter("rdma_switch_queue_wred_dropped_packets_total", "Packets dropped by WRED in the queue."),
        Metric::QueueIngressDroppedPackets => Export::Counter("rdma_switch_queue_ingress_dropped_packets_total", "Packets dropped by the ingress queue."),
        Metric::QueueEcnMarkedPackets => Export::Counter("rdma_switch_queue_ecn_marked_packets_total", "Packets ECN-marked (CE) by the egress queue."),
        Metric::PfcWatchdogStorms => Export::Counter("rdma_switch_pfc_watchdog_storms_total", "PFC storms the switch watchdog detected on the queue (queue stuck or shut down)."),
        Metric::PfcWatchdogRestores => Export::Counter("rdma_switch_pfc_watchdog_restores_total", "Times the PFC watchdog restored the queue after a storm."),
        Metric::PfcWatchdogDroppedPackets => Export::Counter("rdma_switch_pfc_watchdog_dropped_packets_total", "Packets the PFC watchdog dropped while the queue was stormed."),
        Metric::PfcEnabled | Metric::PriorityQueue => Export::Pfc,
    }
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
        snapshots: &'a [(String, PfcConfig, Option<Arc<super::poller::Snapshot>>)],
    ) {
        for (name, pfc, snapshot) in snapshots {
            if let Some(snapshot) = snapshot {
                add_snapshot(families, name, snapshot, *pfc);
            }
        }
    }
}

fn add_snapshot<'a>(
    families: &mut Families<'a>,
    switch: &'a str,
    snapshot: &'a super::poller::Snapshot,
    pfc: PfcConfig,
) {
    let samples = &snapshot.samples;
    // Port label: ifName where the switch gives one, else the ifIndex.
    let mut names: HashMap<u32, &str> = HashMap::new();
    let mut aliases: HashMap<u32, &str> = HashMap::new();
    let mut neighbours: HashMap<u32, Neighbour> = HashMap::new();
    for sample in samples {
        let SampleValue::Text(text) = &sample.value else {
            continue;
        };
        let ifindex = sample.key.ifindex;
        match export(sample.metric) {
            Export::Port(PortField::Name) => {
                names.insert(ifindex, text);
            }
            Export::Port(PortField::Alias) => {
                aliases.insert(ifindex, text);
            }
            Export::Neighbor(field) => neighbours.entry(ifindex).or_default().set(field, text),
            Export::Pfc | Export::Gauge(..) | Export::Counter(..) => {}
        }
    }
    let port = |ifindex: u32| -> Cow<'a, str> {
        names
            .get(&ifindex)
            .map_or_else(|| Cow::Owned(ifindex.to_string()), |n| Cow::Borrowed(*n))
    };
    for (&ifindex, &name) in &names {
        families.info(
            "rdma_switch_port_info",
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
        );
    }
    for (&ifindex, neighbour) in &neighbours {
        families.info(
            "rdma_switch_port_neighbor_info",
            "LLDP neighbour of the switch port: joins switch ports to hosts and their NIC ports.",
            vec![
                ("switch", Cow::Borrowed(switch)),
                ("port", port(ifindex)),
                ("neighbor_host", Cow::Borrowed(neighbour.host)),
                ("neighbor_port", Cow::Borrowed(neighbour.port)),
                (
                    "neighbor_port_description",
                    Cow::Borrowed(neighbour.port_description),
                ),
            ],
        );
    }
    for sample in samples {
        let export = export(sample.metric);
        if matches!(export, Export::Port(_) | Export::Neighbor(_) | Export::Pfc) {
            // In the info series above, or in the PFC family below.
            continue;
        }
        let labels = sample_labels(switch, port(sample.key.ifindex), &sample.key);
        match (export, &sample.value) {
            (Export::Gauge(name, help), SampleValue::Gauge(v)) => {
                families.gauge(name, help, labels, Value::F64(*v as f64))
            }
            (Export::Counter(name, help), SampleValue::Counter(v)) => {
                families.counter(name, help, labels, Value::U64(*v))
            }
            (Export::Counter(name, help), SampleValue::Seconds(v)) => {
                families.counter(name, help, labels, Value::F64(*v))
            }
            // Profiles decode gauges to `Gauge` and counters to `Counter` or `Seconds`.
            _ => {}
        }
    }
    for state in pfc::resolve(samples, pfc) {
        families.gauge(
            "rdma_switch_port_pfc_enabled",
            "1 if PFC (lossless) is enabled for the priority on the switch port, else 0; queue is the egress queue the priority maps to, source who said so (switch: its LLDP-EXT-DOT1-DCBX-MIB tables; config: pfc_priorities and priority_queues of the switch's config entry).",
            vec![
                ("switch", Cow::Borrowed(switch)),
                ("port", port(state.ifindex)),
                ("priority", Cow::Borrowed(PRIORITIES[usize::from(state.priority)])),
                ("queue", Cow::Owned(state.queue.to_string())),
                ("source", Cow::Borrowed(state.source.as_label())),
            ],
            Value::U64(u64::from(state.enabled)),
        );
    }
}

/// What LLDP says of the neighbour on one port; empty where the switch does not say.
#[derive(Debug, Default)]
struct Neighbour<'a> {
    host: &'a str,
    port: &'a str,
    port_description: &'a str,
}

impl<'a> Neighbour<'a> {
    fn set(&mut self, field: NeighborField, text: &'a str) {
        match field {
            NeighborField::Host => self.host = text,
            NeighborField::Port => self.port = text,
            NeighborField::PortDescription => self.port_description = text,
        }
    }
}

/// `switch`, `port`, and the priority, direction and queue of the sample's key.
fn sample_labels<'a>(switch: &'a str, port: Cow<'a, str>, key: &SampleKey) -> Labels<'a> {
    let mut labels: Labels<'a> = vec![("switch", Cow::Borrowed(switch)), ("port", port)];
    if let Some(p) = key.priority {
        labels.push(("priority", Cow::Borrowed(PRIORITIES[usize::from(p)])));
    }
    if let Some(d) = key.direction {
        labels.push(("direction", Cow::Borrowed(d.as_label())));
    }
    if let Some(q) = key.queue {
        labels.push(("queue", Cow::Owned(q.to_string())));
    }
    labels
}

impl Collector for SwitchCollector {
    fn name(&self) -> &'static str {
        "switch"
    }

    /// Serves each switch's last snapshot; the polls themselves run in the background, and a
    /// failing switch shows in `rdma_switch_up`, not as a failed collector.
    fn collect(&self, out: &mut Output<'_>) -> Result<Outcome, std::fmt::Error> {
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
            families.counter(
                "rdma_switch_polls_total",
                "Polls of the switch this exporter started (SNMP walks, gNMI ONCE reads, gNMI subscriptions opened); summed by switch over the replicas of a sharded poller it shows a switch read twice.",
                switch(),
                Value::U64(state.polls),
            );
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
                    "rdma_switch_poll_errors_total",
                    "Failed switch polls by reason (timeout, network, auth, decode, snmp_error, poll_timeout), and values the profile could not read (value).",
                    labels,
                    Value::U64(*count),
                );
            }
            if let Some(snapshot) = &fresh {
                let mut labels = switch();
                labels.push(("source", Cow::Borrowed(pfc_source(&snapshot.samples))));
                families.info(
                    "rdma_switch_pfc_source_info",
                    "Where the switch's PFC counters come from: per_priority (a vendor table or gNMI), all_priorities (the standard IEEE8021-PFC-MIB, summed over priorities; the vendor table is absent on this device) or none (no PFC data: PFC storms on it cannot be seen).",
                    labels,
                );
            }
            snapshots.push((target.name.clone(), target.pfc, fresh));
        }
        self.add_all(&mut families, &snapshots);
        out.encode(&families)?;
        Ok(Outcome::ok(true))
    }
}

/// The finest PFC data in a poll: per priority, summed over priorities, or none.
fn pfc_source(samples: &[Sample]) -> &'static str {
    if samples.iter().any(|s| s.metric == Metric::PfcFrames) {
        "per_priority"
    } else if samples
        .iter()
        .any(|s| s.metric == Metric::PfcFramesAllPriorities)
    {
        "all_priorities"
    } else {
        "none"
    }
}
