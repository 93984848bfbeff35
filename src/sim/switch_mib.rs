//! A simulated leaf switch as SNMP rows: every column of a vendor profile, filled from the
//! fabric model's port counters. Driven by the profile's own description of its index and
//! labels, so the demo can speak any SNMP profile the poller knows.

use crate::switch::profile::{Column, Direction, IndexPart, Metric, Profile, SnmpValue};

use super::fabric::{Fabric, SwitchPort};

/// Every row of `profile` for leaf `leaf` of the fabric, sorted by OID.
pub fn leaf_rows(profile: &Profile, fabric: &Fabric, leaf: usize) -> Vec<(Vec<u32>, SnmpValue)> {
    let mut rows = Vec::new();
    for port in &fabric.leaves[leaf].ports {
        let (host, nic) = port.neighbor;
        let neighbour = &fabric.hosts[host];
        let spec = &neighbour.nics[nic].spec;
        for column in &profile.columns {
            for (suffix, priority, queue) in suffixes(column, port.ifindex) {
                let text = |t: String| Some(SnmpValue::OctetString(t.into_bytes()));
                let value = match column.metric {
                    Metric::IfName => text(port.name.clone()),
                    Metric::IfAlias => text(format!("{} {}", neighbour.name, spec.name)),
                    Metric::OperStatus => Some(SnmpValue::Integer(if port.up { 1 } else { 2 })),
                    Metric::LldpRemoteSystemName => text(neighbour.name.clone()),
                    Metric::LldpRemotePortId => text(spec.netdev.clone().unwrap_or_default()),
                    Metric::LldpRemotePortDescription => text(spec.name.clone()),
                    metric => counter(metric, column, port, priority, queue),
                };
                if let Some(value) = value {
                    let mut oid = column.oid.clone();
                    oid.extend_from_slice(&suffix);
                    rows.push((oid, value));
                }
            }
        }
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.dedup_by(|a, b| a.0 == b.0);
    rows
}

/// The index suffixes of one port's rows of `column`, with the priority and queue each holds.
fn suffixes(column: &Column, ifindex: u32) -> Vec<(Vec<u32>, Option<u8>, Option<u32>)> {
    let mut rows = vec![(Vec::new(), column.labels.priority, column.labels.queue)];
    let mut anys = 0;
    for part in &column.index {
        let mut next = Vec::new();
        for (suffix, priority, queue) in rows {
            let push = |next: &mut Vec<_>, arc: u32, priority, queue| {
                let mut suffix: Vec<u32> = suffix.clone();
                suffix.push(arc);
                next.push((suffix, priority, queue));
            };
            match part {
                IndexPart::IfIndex | IndexPart::LocalPort => {
                    push(&mut next, ifindex, priority, queue)
                }
                IndexPart::Priority => {
                    for p in 0..8u8 {
                        push(&mut next, u32::from(p), Some(p), queue);
                    }
                }
                IndexPart::Queue => {
                    for q in 0..8u32 {
                        push(&mut next, q + column.queue_base, priority, Some(q));
                    }
                }
                IndexPart::Equals(n) => push(&mut next, *n, priority, queue),
                // LLDP: timeMark 0, then remote index 1.
                IndexPart::Any => push(&mut next, anys.min(1), priority, queue),
            }
        }
        if matches!(part, IndexPart::Any) {
            anys += 1;
        }
        rows = next;
    }
    rows
}

fn counter(
    metric: Metric,
    column: &Column,
    port: &SwitchPort,
    priority: Option<u8>,
    queue: Option<u32>,
) -> Option<SnmpValue> {
    let p = priority.map(usize::from);
    let q = queue.map(|q| q as usize).filter(|q| *q < 8);
    let value = match metric {
        Metric::InOctets => port.in_octets,
        Metric::OutOctets => port.out_octets,
        Metric::InUcastPackets => port.in_packets,
        Metric::OutUcastPackets => port.out_packets,
        Metric::InDiscards => port.in_discards,
        Metric::OutDiscards => port.out_discards,
        Metric::InErrors | Metric::OutErrors => 0,
        Metric::PfcFrames => match column.labels.direction? {
            Direction::Rx => port.pfc_rx[p?],
            Direction::Tx => port.pfc_tx[p?],
        },
        Metric::PfcFramesAllPriorities => match column.labels.direction? {
            Direction::Rx => port.pfc_rx.iter().sum(),
            Direction::Tx => port.pfc_tx.iter().sum(),
        },
        Metric::QueueTransmittedPackets => port.queue_transmitted[q?],
        Metric::QueueDroppedPackets => port.queue_dropped[q?],
        Metric::QueueEcnMarkedPackets => port.queue_ecn_marked[q?],
        Metric::QueueWredDroppedPackets
        | Metric::QueueIngressDroppedPackets
        | Metric::PfcWatchdogStorms
        | Metric::PfcWatchdogRestores
        | Metric::PfcWatchdogDroppedPackets => 0,
        // Pause time: the modelled switch reports none (most SNMP MIBs have no such column).
        _ => return None,
    };
    // ifTable columns are 32-bit and wrap, as on a real switch.
    Some(if column.oid.starts_with(&[1, 3, 6, 1, 2, 1, 2, 2, 1]) {
        SnmpValue::Counter32(value as u32)
    } else {
        SnmpValue::Counter64(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::fabric::Shape;
    use crate::sim::scenario::{Scenario, ScenarioName};
    use crate::switch::profile::{Profiles, SampleValue};

    /// The rows decode, through the same profile, into the model's own values.
    #[test]
    fn rows_decode_to_the_model_through_the_profile() {
        let mut fabric = Fabric::new(Shape::default(), Scenario::new(ScenarioName::EcnTooHigh));
        for _ in 0..200 {
            fabric.step(1.0);
        }
        let profiles = Profiles::builtin().unwrap();
        for name in [
            "arista_eos",
            "sonic",
            "nvidia_cumulus",
            "cisco_nxos",
            "juniper_junos",
        ] {
            let profile = profiles.get(name).unwrap();
            let rows = leaf_rows(profile, &fabric, 0);
            let mut pfc_tx_port3 = None;
            let mut names = 0;
            for (oid, value) in &rows {
                let sample = profile
                    .decode(oid, value)
                    .expect("a column claims it")
                    .unwrap();
                if sample.metric == Metric::IfName {
                    names += 1;
                }
                if sample.metric == Metric::PfcFrames
                    && sample.key.ifindex == 3
                    && sample.key.priority == Some(3)
                    && sample.key.direction == Some(Direction::Tx)
                {
                    pfc_tx_port3 = Some(sample.value);
                }
            }
            assert_eq!(names, 16, "{name}");
            let expected = fabric.leaves[0].ports[2].pfc_tx[3];
            assert!(expected > 0);
            assert_eq!(pfc_tx_port3, Some(SampleValue::Counter(expected)), "{name}");
        }
    }
}
