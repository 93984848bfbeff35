//! A simulated InfiniBand subnet behind [`FabricSource`], for the demo and the scale bench:
//! hosts with one HCA per GPU, rail-optimized onto leaf switches, leaves cabled to every spine,
//! all 64-port NDR switches (Quantum-2 QM9700 descriptions). Counters are functions of the
//! simulated time, so that every scan reads values that only grow. The `ib-*` scenarios put a
//! fault on it during the fault window of the cycle (`scenario.rs`): a leaf-spine link trained
//! at 2X with symbol errors, or a congested spine port with PortXmitWait rising.

use std::sync::Arc;
use std::time::Instant;

use crate::ib::model::{
    CounterValues, FabricScan, Guid, IbNode, IbPort, LinkSpeed, LinkWidth, NodeKind, PhysState,
    PortState, RemoteEnd,
};
use crate::ib::selection::Selection;
use crate::ib::source::{FabricSource, ScanError, ScanLimits};

use super::scenario::{ScenarioName, CYCLE_S, FAULT_END_S, FAULT_START_S};

/// PortXmitWait ticks per second of waiting that the simulation counts. The IBTA leaves the
/// tick to the implementation; the alert rules assume the same figure (docs/infiniband.md).
pub const XMIT_WAIT_TICKS_PER_SECOND: f64 = 1e9 / 4.0;

/// Ports of every simulated switch.
pub const SWITCH_PORTS: u8 = 64;

/// The degraded link of `ib-degraded-link`: leaf index, and the spine its first uplink to it.
pub const DEGRADED_LINK: (usize, usize) = (0, 1);
/// The congested port of `ib-congestion`: spine index, and the leaf its port leads to.
pub const CONGESTED_SPINE_PORT: (usize, usize) = (0, 1);

/// The subnet's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbShape {
    pub hosts: usize,
    pub hcas_per_host: usize,
    pub leaves: usize,
    pub spines: usize,
}

impl Default for IbShape {
    fn default() -> Self {
        IbShape {
            hosts: 4,
            hcas_per_host: 8,
            leaves: 4,
            spines: 2,
        }
    }
}

/// Simulated seconds since the start of the scenario.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;

/// What a port carries, to integrate its counters over time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Load {
    /// Share of the link's rate sent, outside and during the fault.
    utilization: f64,
    fault_utilization: f64,
    /// Share of the time waiting to send.
    wait: f64,
    fault_wait: f64,
    symbol_errors_per_s: f64,
    fault_symbol_errors_per_s: f64,
    /// The link retrains at the fault's start and end (LinkDownedCounter +1 each).
    retrains: bool,
    degraded: bool,
}

const IDLE: Load = Load {
    utilization: 0.0,
    fault_utilization: 0.0,
    wait: 0.0,
    fault_wait: 0.0,
    symbol_errors_per_s: 0.0,
    fault_symbol_errors_per_s: 0.0,
    retrains: false,
    degraded: false,
};

/// One port of the static topology.
#[derive(Debug, Clone)]
struct SimPort {
    number: u8,
    remote: Option<RemoteEnd>,
    load: Load,
}

#[derive(Debug, Clone)]
struct SimNode {
    guid: Guid,
    kind: NodeKind,
    description: String,
    ports: Vec<SimPort>,
}

/// The simulated subnet.
pub struct SimIbFabric {
    nodes: Vec<SimNode>,
    scenario: ScenarioName,
    clock: Clock,
}

impl std::fmt::Debug for SimIbFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimIbFabric")
            .field("nodes", &self.nodes.len())
            .field("scenario", &self.scenario)
            .finish()
    }
}

pub fn leaf_guid(leaf: usize) -> Guid {
    Guid(0xb83f_d203_0010_0000 + leaf as u64)
}

pub fn spine_guid(spine: usize) -> Guid {
    Guid(0xb83f_d203_0020_0000 + spine as u64)
}

fn hca_guid(host: usize, hca: usize) -> Guid {
    Guid(0xb83f_d203_0030_0000 + ((host as u64) << 4) + hca as u64)
}

pub fn leaf_description(leaf: usize) -> String {
    format!("MF0;ib-leaf-{:02}:MQM9700/U1", leaf + 1)
}

pub fn spine_description(spine: usize) -> String {
    format!("MF0;ib-spine-{:02}:MQM9700/U1", spine + 1)
}

/// A small deterministic spread in [0, 1) so that ports do not all carry the same load.
fn spread(guid: Guid, port: u8) -> f64 {
    let mut z = guid.0 ^ (u64::from(port) << 56);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z >> 11) as f64 / (1u64 << 53) as f64
}

fn healthy(guid: Guid, port: u8) -> Load {
    let u = 0.55 + 0.35 * spread(guid, port);
    Load {
        utilization: u,
        fault_utilization: u,
        wait: 0.002,
        fault_wait: 0.002,
        ..IDLE
    }
}

impl SimIbFabric {
    /// The subnet of `shape` in `scenario`, its time read from `clock`. `hca_guids[host][hca]`,
    /// where given, are the GUIDs the hosts' sysfs shows, so that links join `rdma_port_info`.
    pub fn new(
        shape: IbShape,
        scenario: ScenarioName,
        clock: Clock,
        hca_guids: &[Vec<Guid>],
        host_names: &[String],
    ) -> SimIbFabric {
        let leaves = shape.leaves.max(1);
        let spines = shape.spines;
        let hcas_per_leaf = (shape.hosts * shape.hcas_per_host).div_ceil(leaves);
        // As many uplinks as host ports, spread over the spines, within half the leaf's ports.
        let uplinks = hcas_per_leaf.checked_div(spines).map_or(0, |per_spine| {
            per_spine.min(usize::from(SWITCH_PORTS) / 2 / spines).max(1)
        });
        let hca = |h: usize, n: usize| {
            hca_guids
                .get(h)
                .and_then(|g| g.get(n))
                .copied()
                .unwrap_or_else(|| hca_guid(h, n))
        };
        let host_name = |h: usize| {
            host_names
                .get(h)
                .cloned()
                .unwrap_or_else(|| format!("gpu-node-{:02}", h + 1))
        };
        let mut nodes = Vec::new();
        // Leaf l: host ports first, then `uplinks` ports to each spine.
        let mut leaf_ports = unlinked_switches(leaves);
        let mut next_port = vec![0usize; leaves];
        for h in 0..shape.hosts {
            for n in 0..shape.hcas_per_host {
                let l = n % leaves;
                let index = next_port[l];
                if index >= usize::from(SWITCH_PORTS) {
                    continue;
                }
                next_port[l] += 1;
                let port = &mut leaf_ports[l][index];
                port.remote = Some(RemoteEnd {
                    guid: hca(h, n),
                    port: 1,
                    description: format!("{} mlx5_{n}", host_name(h)),
                    kind: NodeKind::Hca,
                });
                port.load = healthy(leaf_guid(l), port.number);
                let leaf_port = port.number;
                nodes.push(SimNode {
                    guid: hca(h, n),
                    kind: NodeKind::Hca,
                    description: format!("{} mlx5_{n}", host_name(h)),
                    ports: vec![SimPort {
                        number: 1,
                        remote: Some(RemoteEnd {
                            guid: leaf_guid(l),
                            port: leaf_port,
                            description: leaf_description(l),
                            kind: NodeKind::Switch,
                        }),
                        load: healthy(hca(h, n), 1),
                    }],
                });
            }
        }
        let down_ports = hcas_per_leaf.min(usize::from(SWITCH_PORTS));
        let mut spine_ports = unlinked_switches(spines);
        for (l, leaf) in leaf_ports.iter_mut().enumerate() {
            for (s, spine) in spine_ports.iter_mut().enumerate() {
                for k in 0..uplinks {
                    let leaf_index = down_ports + s * uplinks + k;
                    let spine_index = l * uplinks + k;
                    if leaf_index >= usize::from(SWITCH_PORTS)
                        || spine_index >= usize::from(SWITCH_PORTS)
                    {
                        continue;
                    }
                    let leaf_number = leaf[leaf_index].number;
                    let spine_number = spine[spine_index].number;
                    let mut leaf_load = healthy(leaf_guid(l), leaf_number);
                    let mut spine_load = healthy(spine_guid(s), spine_number);
                    match scenario {
                        ScenarioName::IbDegradedLink if (l, s) == DEGRADED_LINK && k == 0 => {
                            for load in [&mut leaf_load, &mut spine_load] {
                                load.degraded = true;
                                load.retrains = true;
                                load.fault_symbol_errors_per_s = 12.0;
                                load.fault_utilization = load.utilization * 0.5;
                            }
                        }
                        ScenarioName::IbCongestion if (s, l) == CONGESTED_SPINE_PORT => {
                            // Every uplink into the spine port's leaf is oversubscribed by
                            // the traffic toward it; the spine port itself waits most.
                            spine_load.fault_utilization = 0.99;
                            spine_load.fault_wait = if k == 0 { 0.45 } else { 0.2 };
                        }
                        ScenarioName::IbCongestion if s == CONGESTED_SPINE_PORT.0 => {
                            leaf_load.fault_utilization = 0.97;
                            leaf_load.fault_wait = 0.05;
                        }
                        _ => {}
                    }
                    leaf[leaf_index].remote = Some(RemoteEnd {
                        guid: spine_guid(s),
                        port: spine_number,
                        description: spine_description(s),
                        kind: NodeKind::Switch,
                    });
                    leaf[leaf_index].load = leaf_load;
                    spine[spine_index].remote = Some(RemoteEnd {
                        guid: leaf_guid(l),
                        port: leaf_number,
                        description: leaf_description(l),
                        kind: NodeKind::Switch,
                    });
                    spine[spine_index].load = spine_load;
                }
            }
        }
        for (l, ports) in leaf_ports.into_iter().enumerate() {
            nodes.push(SimNode {
                guid: leaf_guid(l),
                kind: NodeKind::Switch,
                description: leaf_description(l),
                ports,
            });
        }
        for (s, ports) in spine_ports.into_iter().enumerate() {
            nodes.push(SimNode {
                guid: spine_guid(s),
                kind: NodeKind::Switch,
                description: spine_description(s),
                ports,
            });
        }
        nodes.sort_by_key(|n| n.guid);
        nodes.dedup_by_key(|n| n.guid);
        SimIbFabric {
            nodes,
            scenario,
            clock,
        }
    }

    /// A large healthy fabric for the scale bench: about `switches` 64-port switches, four
    /// leaves per spine, each leaf with 48 HCAs and 16 uplinks, each spine port cabled to a
    /// leaf, so that every switch port is linked and carries counters.
    pub fn scale(switches: usize, clock: Clock) -> SimIbFabric {
        const HCAS_PER_LEAF: usize = 48;
        const UPLINKS: usize = 16;
        let spines = (switches / 5).max(1);
        let leaves = spines * 4;
        let link = |guid: Guid, port: u8, description: String, kind: NodeKind| RemoteEnd {
            guid,
            port,
            description,
            kind,
        };
        let mut nodes = Vec::with_capacity(switches + leaves * HCAS_PER_LEAF);
        let mut spine_nodes: Vec<SimNode> = (0..spines)
            .map(|s| SimNode {
                guid: spine_guid(s),
                kind: NodeKind::Switch,
                description: spine_description(s),
                ports: Vec::with_capacity(64),
            })
            .collect();
        for l in 0..leaves {
            let mut ports = Vec::with_capacity(64);
            for h in 0..HCAS_PER_LEAF {
                let number = (h + 1) as u8;
                let hca = hca_guid(l, h);
                let description = format!("node-{l:05} mlx5_{h}");
                ports.push(SimPort {
                    number,
                    remote: Some(link(hca, 1, description.clone(), NodeKind::Hca)),
                    load: healthy(leaf_guid(l), number),
                });
                nodes.push(SimNode {
                    guid: hca,
                    kind: NodeKind::Hca,
                    description,
                    ports: vec![SimPort {
                        number: 1,
                        remote: Some(link(
                            leaf_guid(l),
                            number,
                            leaf_description(l),
                            NodeKind::Switch,
                        )),
                        load: healthy(hca, 1),
                    }],
                });
            }
            for k in 0..UPLINKS {
                let number = (HCAS_PER_LEAF + k + 1) as u8;
                let j = l * UPLINKS + k;
                let (s, spine_port) = (j / 64, (j % 64 + 1) as u8);
                ports.push(SimPort {
                    number,
                    remote: Some(link(
                        spine_guid(s),
                        spine_port,
                        spine_description(s),
                        NodeKind::Switch,
                    )),
                    load: healthy(leaf_guid(l), number),
                });
                spine_nodes[s].ports.push(SimPort {
                    number: spine_port,
                    remote: Some(link(
                        leaf_guid(l),
                        number,
                        leaf_description(l),
                        NodeKind::Switch,
                    )),
                    load: healthy(spine_guid(s), spine_port),
                });
            }
            nodes.push(SimNode {
                guid: leaf_guid(l),
                kind: NodeKind::Switch,
                description: leaf_description(l),
                ports,
            });
        }
        nodes.extend(spine_nodes);
        nodes.sort_by_key(|n| n.guid);
        SimIbFabric {
            nodes,
            scenario: ScenarioName::IbHealthy,
            clock,
        }
    }

    pub fn scenario(&self) -> ScenarioName {
        self.scenario
    }
}

/// Seconds of fault up to `t`.
fn fault_seconds(t: f64) -> f64 {
    let t = t.max(0.0);
    let cycles = (t / CYCLE_S).floor();
    let phase = t - cycles * CYCLE_S;
    cycles * (FAULT_END_S - FAULT_START_S)
        + (phase - FAULT_START_S).clamp(0.0, FAULT_END_S - FAULT_START_S)
}

/// Times the fault started or ended up to `t`.
fn fault_edges(t: f64) -> u64 {
    let t = t.max(0.0);
    let cycles = (t / CYCLE_S).floor();
    let phase = t - cycles * CYCLE_S;
    let mut edges = cycles as u64 * 2;
    if phase >= FAULT_START_S {
        edges += 1;
    }
    if phase >= FAULT_END_S {
        edges += 1;
    }
    edges
}

fn in_fault(t: f64) -> bool {
    let phase = t.max(0.0) % CYCLE_S;
    (FAULT_START_S..FAULT_END_S).contains(&phase)
}

/// The port's width and speed at `t`: 4X NDR, or 2X while a degraded link is in its fault.
fn trained(load: &Load, t: f64) -> (LinkWidth, LinkSpeed) {
    if load.degraded && in_fault(t) {
        (LinkWidth(2), LinkSpeed::Ndr)
    } else {
        (LinkWidth(4), LinkSpeed::Ndr)
    }
}

/// The IBTA counters of a connected port at `t`, raw as perfquery prints them.
fn counters(load: &Load, t: f64) -> CounterValues {
    let t = t.max(0.0);
    let fault = fault_seconds(t);
    let healthy_s = t - fault;
    let full_rate = 4.0 * LinkSpeed::Ndr.lane_bits_per_second() / 8.0;
    // A degraded link carries at most half its rate: `fault_utilization` already says so.
    let bytes = full_rate * (load.utilization * healthy_s + load.fault_utilization * fault);
    let words = (bytes / 4.0) as u64;
    let packets = (bytes / 4096.0) as u64;
    let wait = XMIT_WAIT_TICKS_PER_SECOND * (load.wait * healthy_s + load.fault_wait * fault);
    let symbol = load.symbol_errors_per_s * healthy_s + load.fault_symbol_errors_per_s * fault;
    let downed = if load.retrains { fault_edges(t) } else { 0 };
    let mut c = CounterValues::default();
    let mut put = |name: &str, value: u64| {
        c.insert(name, value);
    };
    put("PortXmitData", words);
    put("PortRcvData", (words as f64 * 0.98) as u64);
    put("PortXmitPkts", packets);
    put("PortRcvPkts", (packets as f64 * 0.98) as u64);
    put("PortUnicastXmitPkts", packets);
    put("PortUnicastRcvPkts", (packets as f64 * 0.98) as u64);
    put("PortMulticastXmitPkts", 0);
    put("PortMulticastRcvPkts", 0);
    put("PortXmitWait", wait as u64);
    put("SymbolErrorCounter", (symbol as u64).min(0xffff));
    put("LinkErrorRecoveryCounter", downed.min(0xff));
    put("LinkDownedCounter", downed.min(0xff));
    put("PortRcvErrors", 0);
    put("PortRcvRemotePhysicalErrors", 0);
    put("PortRcvSwitchRelayErrors", 0);
    put("PortXmitDiscards", 0);
    put("PortXmitConstraintErrors", 0);
    put("PortRcvConstraintErrors", 0);
    put("LocalLinkIntegrityErrors", 0);
    put("ExcessiveBufferOverrunErrors", 0);
    put("VL15Dropped", 0);
    c.shrink_to_fit();
    c
}

impl FabricSource for SimIbFabric {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn scan(&self, _limits: ScanLimits, selection: &Selection) -> Result<FabricScan, ScanError> {
        let started = Instant::now();
        let t = (self.clock)();
        let nodes = self
            .nodes
            .iter()
            .map(|node| {
                let read = node.kind == NodeKind::Switch
                    && selection.keeps_switch(node.guid, &node.description);
                let ports = node
                    .ports
                    .iter()
                    .map(|port| {
                        let linked = port.remote.is_some();
                        let (width, speed) = trained(&port.load, t);
                        IbPort {
                            number: port.number,
                            state: Some(if linked {
                                PortState::Active
                            } else {
                                PortState::Down
                            }),
                            phys_state: Some(if linked {
                                PhysState::LinkUp
                            } else {
                                PhysState::Polling
                            }),
                            active_width: linked.then_some(width),
                            enabled_width: Some(LinkWidth(4)),
                            active_speed: linked.then_some(speed),
                            enabled_speed: Some(LinkSpeed::Ndr),
                            lid: None,
                            remote: port.remote.clone(),
                            remote_lid_only: None,
                            // Unconnected ports are not read: the tools would show zeros, and the
                            // demo's Prometheus has enough to do without them.
                            counters: if read && linked {
                                counters(&port.load, t)
                            } else {
                                CounterValues::default()
                            },
                        }
                    })
                    .collect();
                IbNode {
                    guid: node.guid,
                    kind: node.kind,
                    description: node.description.clone(),
                    ports,
                }
            })
            .collect();
        Ok(FabricScan {
            nodes,
            failures: Vec::new(),
            duration: started.elapsed(),
        })
    }
}

/// `count` switches of `SWITCH_PORTS` ports each, none linked yet.
fn unlinked_switches(count: usize) -> Vec<Vec<SimPort>> {
    (0..count)
        .map(|_| {
            (1..=SWITCH_PORTS)
                .map(|number| SimPort {
                    number,
                    remote: None,
                    load: IDLE,
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t: f64, scenario: ScenarioName) -> FabricScan {
        let fabric = SimIbFabric::new(IbShape::default(), scenario, Arc::new(move || t), &[], &[]);
        fabric
            .scan(
                ScanLimits {
                    deadline: Instant::now() + Duration::from_secs(5),
                    query_timeout: Duration::from_secs(1),
                },
                &Selection::default(),
            )
            .unwrap()
    }

    fn port(scan: &FabricScan, guid: Guid, remote: Guid) -> IbPort {
        scan.node(guid)
            .unwrap()
            .ports
            .iter()
            .find(|p| p.remote.as_ref().is_some_and(|r| r.guid == remote))
            .unwrap()
            .clone()
    }

    #[test]
    fn the_default_fabric_is_cabled_both_ways() {
        let scan = at(10.0, ScenarioName::IbHealthy);
        assert_eq!(scan.switches().count(), 6);
        assert_eq!(scan.nodes.len(), 6 + 32);
        for node in &scan.nodes {
            for p in &node.ports {
                let Some(remote) = &p.remote else { continue };
                let back = scan.node(remote.guid).unwrap();
                let other = back.ports.iter().find(|q| q.number == remote.port).unwrap();
                let other_remote = other.remote.as_ref().unwrap();
                assert_eq!(
                    (other_remote.guid, other_remote.port),
                    (node.guid, p.number)
                );
            }
        }
        assert!(scan.switches().all(|s| s.ports.len() == 64));
        let big = SimIbFabric::scale(2_000, Arc::new(|| 5.0));
        let switches = big.nodes.iter().filter(|n| n.kind == NodeKind::Switch);
        assert!(switches
            .clone()
            .all(|n| n.ports.len() == 64 && n.ports.iter().all(|p| p.remote.is_some())));
        assert_eq!(switches.count(), 2_000);
    }

    #[test]
    fn counters_only_grow_and_the_faults_show_in_their_window() {
        for scenario in [ScenarioName::IbDegradedLink, ScenarioName::IbCongestion] {
            let mut previous: Option<FabricScan> = None;
            for step in 0..70 {
                let scan = at(f64::from(step) * 9.0, scenario);
                if let Some(before) = &previous {
                    for (a, b) in before.nodes.iter().zip(&scan.nodes) {
                        for (p, q) in a.ports.iter().zip(&b.ports) {
                            for (name, value) in p.counters.iter() {
                                assert!(q.counters[name] >= value, "{scenario:?} {name}");
                            }
                        }
                    }
                }
                previous = Some(scan);
            }
        }
        let (l, s) = DEGRADED_LINK;
        let healthy = port(
            &at(30.0, ScenarioName::IbDegradedLink),
            leaf_guid(l),
            spine_guid(s),
        );
        let faulty = port(
            &at(120.0, ScenarioName::IbDegradedLink),
            leaf_guid(l),
            spine_guid(s),
        );
        assert_eq!(healthy.active_width, Some(LinkWidth(4)));
        assert_eq!(faulty.active_width, Some(LinkWidth(2)));
        assert_eq!(faulty.enabled_width, Some(LinkWidth(4)));
        assert_eq!(faulty.counters["LinkDownedCounter"], 1);
        assert!(faulty.counters["SymbolErrorCounter"] > 500);
        let (s, l) = CONGESTED_SPINE_PORT;
        let w = |t: f64| {
            port(
                &at(t, ScenarioName::IbCongestion),
                spine_guid(s),
                leaf_guid(l),
            )
            .counters["PortXmitWait"] as f64
        };
        let share = (w(160.0) - w(100.0)) / 60.0 / XMIT_WAIT_TICKS_PER_SECOND;
        assert!((share - 0.45).abs() < 0.01, "{share}");
    }

    #[test]
    fn selection_leaves_other_switches_unread() {
        let fabric = SimIbFabric::scale(40, Arc::new(|| 5.0));
        let selection = Selection {
            shard: Some(crate::ib::selection::Shard { index: 0, count: 4 }),
            ..Selection::default()
        };
        let scan = fabric
            .scan(
                ScanLimits {
                    deadline: Instant::now() + Duration::from_secs(5),
                    query_timeout: Duration::from_secs(1),
                },
                &selection,
            )
            .unwrap();
        let read = scan
            .switches()
            .filter(|s| !s.ports[0].counters.is_empty())
            .count();
        assert!(read > 0 && read < 40, "{read}");
    }
}
