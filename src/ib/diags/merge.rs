//! Several tools' outputs into one [`FabricScan`]: the topology (nodes, ports, links, widths,
//! speeds) from ibnetdiscover and iblinkinfo, the counters from perfquery (placed by LID and
//! port) and ibqueryerrors (placed by GUID and port). Counters that no topology places (a
//! perfquery output given alone) are kept apart, named by LID and port.

use std::collections::BTreeMap;

use super::detect::Parsed;
use super::nodes::Nodes;
use super::perfquery::PortCounters;
use crate::ib::model::{FabricScan, Guid, IbPort, NodeKind, RemoteEnd};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    pub scan: FabricScan,
    /// perfquery blocks whose LID no topology output gave, or summed over all ports (`-a`).
    pub unplaced: Vec<PortCounters>,
}

pub fn merge(parts: &[Parsed]) -> Merged {
    let mut nodes = Nodes::default();
    for part in parts {
        let topology = match part {
            Parsed::Ibnetdiscover(d) => &d.nodes,
            Parsed::Iblinkinfo(l) => &l.nodes,
            _ => continue,
        };
        for node in topology {
            nodes.node(node.guid, node.kind, &node.description);
            for port in &node.ports {
                nodes.merge_port(node.guid, node.kind, &node.description, port.clone());
            }
        }
    }
    for part in parts {
        if let Parsed::Ibqueryerrors(q) = part {
            for node in &q.nodes {
                for port in &node.ports {
                    let Some(number) = port.port else { continue };
                    let (guid, kind) = match node.switch_guid {
                        // Port 0 is the switch's management port, not a link.
                        Some(_) if number == 0 => continue,
                        Some(g) => (g, NodeKind::Switch),
                        None => (ca_node_guid(&nodes, port.guid, number), NodeKind::Hca),
                    };
                    let mut ib_port = IbPort {
                        number,
                        counters: port.counters.clone(),
                        ..IbPort::default()
                    };
                    let mut far = None;
                    if let Some(row) = &port.link {
                        ib_port.state = row.state;
                        ib_port.phys_state = row.phys_state;
                        ib_port.active_width = row.active_width;
                        ib_port.active_speed = row.active_speed;
                        ib_port.enabled_width = row.could_be_width;
                        ib_port.enabled_speed = row.could_be_speed;
                        ib_port.lid = row.lid;
                        far = row.remote.as_ref().and_then(|r| {
                            let g = r.guid?;
                            let k = nodes.get(g).map_or(NodeKind::Switch, |n| n.kind);
                            Some(RemoteEnd {
                                guid: g,
                                port: r.port,
                                description: r.description.clone(),
                                kind: k,
                            })
                        });
                    }
                    match far {
                        Some(far) => nodes.link((guid, kind, &node.description), ib_port, far),
                        None => nodes.merge_port(guid, kind, &node.description, ib_port),
                    }
                }
            }
        }
    }
    // LID -> node, for perfquery. A switch answers for all its ports at its one LID.
    let mut by_lid: BTreeMap<u16, (Guid, NodeKind, String, Option<u8>)> = BTreeMap::new();
    for node in nodes.iter() {
        for port in &node.ports {
            if let Some(lid) = port.lid {
                let port_of_lid = (node.kind != NodeKind::Switch).then_some(port.number);
                by_lid.entry(lid).or_insert((
                    node.guid,
                    node.kind,
                    node.description.clone(),
                    port_of_lid,
                ));
            }
        }
    }
    let mut unplaced = Vec::new();
    for part in parts {
        let Parsed::Perfquery(p) = part else { continue };
        for block in &p.blocks {
            let placed = block.lid.and_then(|lid| by_lid.get(&lid)).and_then(
                |(guid, kind, desc, port_of_lid)| {
                    let number = block.port.or(*port_of_lid)?;
                    Some((*guid, *kind, desc.clone(), number))
                },
            );
            match placed {
                Some((guid, kind, desc, number)) => nodes.merge_port(
                    guid,
                    kind,
                    &desc,
                    IbPort {
                        number,
                        counters: block.counters.clone(),
                        ..IbPort::default()
                    },
                ),
                None => unplaced.push(block.clone()),
            }
        }
    }
    Merged {
        scan: FabricScan {
            nodes: nodes.into_nodes(),
            failures: Vec::new(),
            duration: std::time::Duration::ZERO,
        },
        unplaced,
    }
}

/// ibqueryerrors names a CA's port by its port GUID. ConnectX HCAs number port GUIDs from
/// the node GUID (port n = node + n): a node the topology knows by that port GUID (ibnetdiscover
/// `-p` keys CAs so) keeps it; otherwise the port belongs to node GUID = port GUID - n, which
/// also keeps both ports of a dual-port HCA on one node when no topology was given.
fn ca_node_guid(nodes: &Nodes, port_guid: Guid, number: u8) -> Guid {
    if nodes.get(port_guid).is_some() {
        return port_guid;
    }
    match port_guid.0.checked_sub(u64::from(number)) {
        Some(g) => Guid(g),
        None => port_guid,
    }
}
