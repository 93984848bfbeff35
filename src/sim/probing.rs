//! The simulated fabric probes too: every NIC of every host answers and sends probes through
//! an in-memory fabric ([`MemoryFabric`]) whose delays follow the topology (a NIC's leaf, and
//! the spine between the leaves) and whose losses follow the scenario (`leaf-spine-loss`).

use std::sync::{Arc, Mutex};

use crate::probe::agent::LocalPort;
use crate::probe::memory::MemoryFabric;
use crate::probe::targets::Port;
use crate::probe::transport::{Address, SendOptions};

use super::fabric::Fabric;
use super::scenario::{Scenario, ScenarioName};

/// One way through one leaf (NIC, leaf, NIC): two links and a cut-through switch.
const SAME_LEAF_NS: u64 = 3_000;
/// One way over the spine: four links and three switches.
const OVER_SPINE_NS: u64 = 6_000;
/// Spines the leaves' uplinks are spread over; a flow label picks one (ECMP).
pub const SPINES: u32 = 2;
/// `leaf-spine-loss`: the leaf whose uplink drops, the spine it leads to, and how much.
pub const LOSSY_UPLINK: (usize, u32) = (0, 1);
pub const UPLINK_LOSS: f64 = 0.02;

/// The probe GID of NIC `nic` of host `host`: `::ffff:10.<host>.<nic>.1`.
pub fn gid(host: usize, nic: usize) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12] = 10;
    gid[13] = host as u8;
    gid[14] = nic as u8;
    gid[15] = 1;
    gid
}

fn nic_of(address: &Address) -> (usize, usize) {
    (usize::from(address.gid[13]), usize::from(address.gid[14]))
}

/// The in-memory fabric of `fabric`'s hosts.
pub fn memory_fabric(fabric: Arc<Mutex<Fabric>>) -> MemoryFabric {
    // A small deterministic generator for the lossy uplink's drops.
    let state = Mutex::new(0x9e37_79b9_7f4a_7c15_u64);
    MemoryFabric::new(Box::new(move |from, to, options: &SendOptions| {
        let (a, b) = (nic_of(from), nic_of(to));
        let fabric = fabric.lock().unwrap_or_else(|p| p.into_inner());
        let leaf = |(host, nic): (usize, usize)| {
            fabric
                .hosts
                .get(host)
                .and_then(|h| h.nics.get(nic))
                .map(|n| n.leaf)
        };
        let (leaf_a, leaf_b) = (leaf(a)?, leaf(b)?);
        if leaf_a == leaf_b {
            return Some(SAME_LEAF_NS);
        }
        let spine = options.flow_label % SPINES;
        let lossy = fabric.scenario.name == ScenarioName::LeafSpineLoss
            && Scenario::in_fault(fabric.time_s)
            && spine == LOSSY_UPLINK.1
            && (leaf_a == LOSSY_UPLINK.0 || leaf_b == LOSSY_UPLINK.0);
        drop(fabric);
        if lossy {
            let mut x = state.lock().unwrap_or_else(|p| p.into_inner());
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            if (*x % 10_000) as f64 / 10_000.0 < UPLINK_LOSS {
                return None;
            }
        }
        Some(OVER_SPINE_NS)
    }))
}

/// Host `host`'s probing ports on `memory`: each NIC port 1, rail = its index.
pub fn local_ports(
    memory: &MemoryFabric,
    fabric: &Fabric,
    host: usize,
    qkey: u32,
) -> Vec<LocalPort> {
    let Some(h) = fabric.hosts.get(host) else {
        return Vec::new();
    };
    h.nics
        .iter()
        .enumerate()
        .map(|(n, nic)| LocalPort {
            port: Port {
                host: h.name.clone(),
                device: nic.spec.name.clone(),
                port: 1,
                rail: n as u32,
            },
            // The NIC's own netdev: the one its leaf port's LLDP neighbour names.
            netdev: nic.spec.netdev.clone().unwrap_or_default(),
            responder: Box::new(memory.endpoint(gid(host, n), 2, qkey)),
            prober: Box::new(memory.endpoint(gid(host, n), 3, qkey)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::probe::transport::Endpoint;
    use crate::sim::fabric::Shape;

    fn memory(name: ScenarioName, time_s: f64) -> MemoryFabric {
        let mut fabric = Fabric::new(Shape::default(), Scenario::new(name));
        fabric.time_s = time_s;
        memory_fabric(Arc::new(Mutex::new(fabric)))
    }

    fn label(flow_label: u32) -> SendOptions {
        SendOptions {
            flow_label,
            ..SendOptions::default()
        }
    }

    /// Sends `count` packets from host 0 NIC 0 to `to` with `options`; how many arrived.
    fn delivered(
        memory: &MemoryFabric,
        to: (usize, usize),
        options: SendOptions,
        count: usize,
    ) -> usize {
        let mut from = memory.endpoint(gid(0, 0), 3, 1);
        let mut to = memory.endpoint(gid(to.0, to.1), 2, 1);
        for _ in 0..count {
            from.send(to.address(), options, b"x", 1).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut events = Vec::new();
        to.poll(&mut events, Duration::ZERO).unwrap();
        events.len()
    }

    /// In `leaf-spine-loss`, during the fault, about 2 % of the packets between the leaves
    /// whose flow label picks the lossy uplink are dropped, and nothing else; every NIC stays
    /// as healthy as in `healthy`.
    #[test]
    fn only_the_lossy_uplink_drops_and_no_nic_notices() {
        let fabric = Fabric::new(Shape::default(), Scenario::new(ScenarioName::Healthy));
        let leaf = |n: usize| fabric.hosts[1].nics[n].leaf;
        let home = fabric.hosts[0].nics[0].leaf;
        let same_leaf = (1, (0..8).find(|&n| leaf(n) == home).unwrap());
        let other_leaf = (1, (0..8).find(|&n| leaf(n) != home).unwrap());
        let lossy = memory(ScenarioName::LeafSpineLoss, 100.0);
        let arrived = delivered(&lossy, other_leaf, label(LOSSY_UPLINK.1), 10_000);
        assert!(
            (9_700..9_900).contains(&arrived),
            "{arrived} of 10 000 over the lossy uplink"
        );
        assert_eq!(
            delivered(&lossy, other_leaf, label(LOSSY_UPLINK.1 + 1), 5_000),
            5_000
        );
        assert_eq!(
            delivered(&lossy, same_leaf, label(LOSSY_UPLINK.1), 5_000),
            5_000
        );
        // Outside the fault, and in another scenario, nothing is dropped.
        let before = memory(ScenarioName::LeafSpineLoss, 10.0);
        assert_eq!(
            delivered(&before, other_leaf, label(LOSSY_UPLINK.1), 5_000),
            5_000
        );
        let healthy = memory(ScenarioName::Healthy, 100.0);
        assert_eq!(
            delivered(&healthy, other_leaf, label(LOSSY_UPLINK.1), 5_000),
            5_000
        );
        // The scenario moves no counter: every NIC's condition is healthy's.
        let lossy = Scenario::new(ScenarioName::LeafSpineLoss);
        let healthy = Scenario::new(ScenarioName::Healthy);
        for t in [0.0, 100.0, 200.0] {
            for (h, n) in [(0, 0), (1, 5), (3, 7)] {
                assert_eq!(lossy.condition(t, h, n), healthy.condition(t, h, n));
            }
        }
    }
}
