//! Building the model's nodes from pieces: each parser learns a port here, its remote end
//! there; [`Nodes`] keeps one node per GUID and one port per number, filling what is still
//! unknown and never overwriting what an earlier piece said.

use std::collections::BTreeMap;

use crate::ib::model::{Guid, IbNode, IbPort, NodeKind, RemoteEnd};

#[derive(Debug, Default, Clone)]
pub struct Nodes {
    nodes: BTreeMap<Guid, IbNode>,
}

impl Nodes {
    /// The node, created with `kind` and `description` when new; an empty description is
    /// filled by a later non-empty one.
    pub fn node(&mut self, guid: Guid, kind: NodeKind, description: &str) -> &mut IbNode {
        let node = self.nodes.entry(guid).or_insert_with(|| IbNode {
            guid,
            kind,
            description: description.to_owned(),
            ports: Vec::new(),
        });
        if node.description.is_empty() && !description.is_empty() {
            node.description = description.to_owned();
        }
        node
    }

    pub fn get(&self, guid: Guid) -> Option<&IbNode> {
        self.nodes.get(&guid)
    }

    pub fn get_mut(&mut self, guid: Guid) -> Option<&mut IbNode> {
        self.nodes.get_mut(&guid)
    }

    pub fn iter(&self) -> impl Iterator<Item = &IbNode> {
        self.nodes.values()
    }

    /// Merges `port` into the node's port of the same number: fields still `None` are taken,
    /// counters are added (a later value of the same counter wins: the later output).
    pub(crate) fn merge_port(
        &mut self,
        guid: Guid,
        kind: NodeKind,
        description: &str,
        port: IbPort,
    ) {
        let node = self.node(guid, kind, description);
        let slot = port_slot(node, port.number);
        fill(slot, port);
    }

    /// Records the link from both ends: the far end's port learns its remote too, unless it
    /// already knows one.
    pub fn link(&mut self, near: (Guid, NodeKind, &str), mut port: IbPort, far: RemoteEnd) {
        let mirror = IbPort {
            number: far.port,
            state: port.state,
            phys_state: port.phys_state,
            active_width: port.active_width,
            active_speed: port.active_speed,
            remote: Some(RemoteEnd {
                guid: near.0,
                port: port.number,
                description: near.2.to_owned(),
                kind: near.1,
            }),
            ..IbPort::default()
        };
        let (far_guid, far_kind, far_desc) = (far.guid, far.kind, far.description.clone());
        port.remote = Some(far);
        self.merge_port(near.0, near.1, near.2, port);
        self.merge_port(far_guid, far_kind, &far_desc, mirror);
    }

    /// The merged nodes, sorted by GUID, with ports in ascending order and each remote's
    /// description taken from the remote node where the link line had none.
    pub(crate) fn into_nodes(self) -> Vec<IbNode> {
        let descriptions: BTreeMap<Guid, String> = self
            .nodes
            .values()
            .map(|n| (n.guid, n.description.clone()))
            .collect();
        let mut nodes: Vec<IbNode> = self.nodes.into_values().collect();
        for node in &mut nodes {
            node.ports.sort_by_key(|p| p.number);
            for port in &mut node.ports {
                if let Some(remote) = &mut port.remote {
                    if remote.description.is_empty() {
                        if let Some(d) = descriptions.get(&remote.guid) {
                            remote.description = d.clone();
                        }
                    }
                }
            }
        }
        nodes
    }
}

fn port_slot(node: &mut IbNode, number: u8) -> &mut IbPort {
    let index = match node.ports.iter().position(|p| p.number == number) {
        Some(i) => i,
        None => {
            node.ports.push(IbPort {
                number,
                ..IbPort::default()
            });
            node.ports.len() - 1
        }
    };
    &mut node.ports[index]
}

fn fill(slot: &mut IbPort, port: IbPort) {
    slot.state = slot.state.or(port.state);
    slot.phys_state = slot.phys_state.or(port.phys_state);
    slot.active_width = slot.active_width.or(port.active_width);
    slot.enabled_width = slot.enabled_width.or(port.enabled_width);
    slot.active_speed = slot.active_speed.or(port.active_speed);
    slot.enabled_speed = slot.enabled_speed.or(port.enabled_speed);
    slot.lid = slot.lid.or(port.lid);
    if slot.remote.is_none() {
        slot.remote = port.remote;
    }
    if slot.remote.is_some() {
        slot.remote_lid_only = None;
    } else if slot.remote_lid_only.is_none() {
        slot.remote_lid_only = port.remote_lid_only;
    }
    slot.counters.extend(port.counters);
}
