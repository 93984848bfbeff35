//! The simulated fabric probes too: every NIC of every host answers and sends probes through
//! an in-memory fabric ([`MemoryFabric`]) whose delays follow the topology (a NIC's leaf, and
//! the spine between the leaves) and whose losses and lags follow the scenario, during its
//! fault only: `leaf-spine-loss` (one leaf's uplink to one spine drops 2 %),
//! `nic-optic-failure` (one NIC loses half of what it sends and half of what it receives),
//! `leaf-ecmp-blackhole` (one leaf drops all it sends toward one spine), `host-cpu-load`
//! (one host's responders see their probes 20 ms late) and `two-faults` (a NIC's fading optic
//! and another leaf's lossy uplink at once). Besides any scenario, every packet (a probe or
//! its answer) on every path may be lost with a small chance, all the time: the background
//! loss of a real fleet (`demo --probe-background-loss`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use crate::probe::agent::LocalPort;
use crate::probe::memory::MemoryFabric;
use crate::probe::targets::Port;
use crate::probe::transport::{Address, SendOptions};

use super::fabric::Fabric;
use super::scenario::{Scenario, ScenarioName, BUSY_HOST, FADING_OPTIC_NIC, TWO_FAULTS_OPTIC_NIC};

/// One way through one leaf (NIC, leaf, NIC): two links and a cut-through switch.
const SAME_LEAF_NS: u64 = 3_000;
/// One way over the spine: four links and three switches.
const OVER_SPINE_NS: u64 = 6_000;
/// Spines the leaves' uplinks are spread over; a flow label picks one (ECMP).
pub const SPINES: u32 = 2;
/// `leaf-spine-loss`: the leaf whose uplink drops, the spine it leads to, and how much.
pub const LOSSY_UPLINK: (usize, u32) = (0, 1);
pub const UPLINK_LOSS: f64 = 0.02;
/// `two-faults`: the lossy uplink (leaf1's to spine-02, as in `leaf-spine-loss`); the fading
/// optic is [`TWO_FAULTS_OPTIC_NIC`]'s, under another leaf.
pub const TWO_FAULTS_UPLINK: (usize, u32) = LOSSY_UPLINK;
/// `nic-optic-failure`: the share of the frames the fading NIC sends, and of those it
/// receives, that are lost.
pub const OPTIC_LOSS: f64 = 0.5;
/// `leaf-ecmp-blackhole`: the leaf (`leaf2`) and the spine whose ECMP member it drops every
/// packet into (`flow_label % SPINES`).
pub const BLACKHOLE: (usize, u32) = (1, 1);
/// `host-cpu-load`: how long the busy host's responders take to see a probe that arrived.
pub const CPU_LAG_NS: u64 = 20_000_000;
/// The queue pairs of a simulated port: its responder's and its prober's.
pub const RESPONDER_QPN: u32 = 2;
pub const PROBER_QPN: u32 = 3;

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

/// The fabric's simulated time as the probes see it, read without waiting: the demo holds
/// the fabric's lock while it steps the model and rewrites every host's files (milliseconds in
/// a debug build), and a probe loop waiting on it would count that wait as its responders'
/// delay. A send that finds the lock taken uses the time the last one read.
struct SimClock {
    fabric: Arc<Mutex<Fabric>>,
    /// The last time read, as `f64` bits.
    last: AtomicU64,
}

impl SimClock {
    fn new(fabric: Arc<Mutex<Fabric>>) -> SimClock {
        let time_s = fabric.lock().unwrap_or_else(|p| p.into_inner()).time_s;
        SimClock {
            fabric,
            last: AtomicU64::new(time_s.to_bits()),
        }
    }

    fn time_s(&self) -> f64 {
        let read = match self.fabric.try_lock() {
            Ok(fabric) => Some(fabric.time_s),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner().time_s),
            Err(TryLockError::WouldBlock) => None,
        };
        match read {
            Some(time_s) => {
                self.last.store(time_s.to_bits(), Ordering::Relaxed);
                time_s
            }
            None => f64::from_bits(self.last.load(Ordering::Relaxed)),
        }
    }

    fn in_fault(&self) -> bool {
        Scenario::in_fault(self.time_s())
    }
}

/// A small deterministic generator (xorshift64) of uniform draws in [0, 1), for the random
/// drops: the same sends in the same order lose the same packets.
struct Draws(Mutex<u64>);

impl Draws {
    fn new(seed: u64) -> Draws {
        Draws(Mutex::new(seed.max(1)))
    }

    /// Whether an event of probability `chance` happens, with 53 bits of resolution (a
    /// background loss of 1e-6 is not rounded to 0).
    fn happens(&self, chance: f64) -> bool {
        if chance <= 0.0 {
            return false;
        }
        let mut x = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        ((*x >> 11) as f64 / (1u64 << 53) as f64) < chance
    }
}

/// Loss on every path, besides the scenario's (`demo --probe-background-loss`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BackgroundLoss {
    /// The chance that any one packet (a probe or its answer) is lost, `0 <= chance < 1`.
    pub chance: f64,
    /// Seeds the draws (the demo's `--seed`): the same sends in the same order lose the same
    /// packets.
    pub seed: u64,
}

/// The in-memory fabric of `fabric`'s hosts. The wiring and the scenario are read once (they
/// never change), the simulated time at each send without waiting ([`SimClock`]). Every packet
/// is also lost with `background`'s chance, in every scenario and at every phase of it.
pub fn memory_fabric(fabric: Arc<Mutex<Fabric>>, background: BackgroundLoss) -> MemoryFabric {
    let (name, leaves) = {
        let fabric = fabric.lock().unwrap_or_else(|p| p.into_inner());
        let leaves: Vec<Vec<usize>> = fabric
            .hosts
            .iter()
            .map(|h| h.nics.iter().map(|n| n.leaf).collect())
            .collect();
        (fabric.scenario.name, leaves)
    };
    let clock = Arc::new(SimClock::new(fabric));
    // The scenarios whose fault drops probes.
    let drops = matches!(
        name,
        ScenarioName::LeafSpineLoss
            | ScenarioName::NicOpticFailure
            | ScenarioName::LeafEcmpBlackhole
            | ScenarioName::TwoFaults
    );
    let lag = {
        let clock = clock.clone();
        move |to: &Address| -> u64 {
            let busy = name == ScenarioName::HostCpuLoad
                && to.qpn == RESPONDER_QPN
                && nic_of(to).0 == BUSY_HOST;
            if busy && clock.in_fault() {
                CPU_LAG_NS
            } else {
                0
            }
        }
    };
    // The scenario's drops and the background's draw apart: switching the background on
    // does not change which of a fault's packets are lost for a given order of sends.
    let faults = Draws::new(0x9e37_79b9_7f4a_7c15);
    let background_draws = Draws::new(background.seed ^ 0xb5ad_4ece_da1c_e2a9);
    let background_loss = background.chance.clamp(0.0, 1.0);
    MemoryFabric::new(Box::new(move |from, to, options: &SendOptions| {
        let (a, b) = (nic_of(from), nic_of(to));
        let leaf = |(host, nic): (usize, usize)| leaves.get(host)?.get(nic).copied();
        let (leaf_a, leaf_b) = (leaf(a)?, leaf(b)?);
        let fault = drops && clock.in_fault();
        let spine = options.flow_label % SPINES;
        let crosses = leaf_a != leaf_b;
        // Each frame through the fading optic, out and in, is a coin toss.
        let optic = |nic| {
            fault
                && match name {
                    ScenarioName::NicOpticFailure => nic == FADING_OPTIC_NIC,
                    ScenarioName::TwoFaults => nic == TWO_FAULTS_OPTIC_NIC,
                    _ => false,
                }
        };
        let uplink = match name {
            ScenarioName::LeafSpineLoss => Some(LOSSY_UPLINK),
            ScenarioName::TwoFaults => Some(TWO_FAULTS_UPLINK),
            _ => None,
        };
        let chances = [
            (optic(a), OPTIC_LOSS),
            (optic(b), OPTIC_LOSS),
            (
                uplink.is_some_and(|(lossy_leaf, lossy_spine)| {
                    fault
                        && crosses
                        && spine == lossy_spine
                        && (leaf_a == lossy_leaf || leaf_b == lossy_leaf)
                }),
                UPLINK_LOSS,
            ),
            // Toward the spine only: what comes down into the leaf is forwarded.
            (
                name == ScenarioName::LeafEcmpBlackhole
                    && fault
                    && crosses
                    && leaf_a == BLACKHOLE.0
                    && spine == BLACKHOLE.1,
                1.0,
            ),
        ];
        for (applies, chance) in chances {
            if applies && faults.happens(chance) {
                return None;
            }
        }
        if background_draws.happens(background_loss) {
            return None;
        }
        Some(if crosses { OVER_SPINE_NS } else { SAME_LEAF_NS })
    }))
    .with_lag(Box::new(lag))
}

/// Host `host`'s probing ports on `memory`: each NIC port 1, rail = its index, its probes on
/// `traffic_class`.
pub fn local_ports(
    memory: &MemoryFabric,
    fabric: &Fabric,
    host: usize,
    qkey: u32,
    traffic_class: u8,
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
                leaf: None,
            },
            // The NIC's own netdev: the one its leaf port's LLDP neighbour names.
            netdev: nic.spec.netdev.clone().unwrap_or_default(),
            traffic_class,
            responder: Box::new(memory.endpoint(gid(host, n), RESPONDER_QPN, qkey)),
            prober: Box::new(memory.endpoint(gid(host, n), PROBER_QPN, qkey)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::probe::agent::{Agent, Peer};
    use crate::probe::stats::Stats;
    use crate::probe::transport::{Endpoint, Event};
    use crate::sim::fabric::Shape;
    use crate::testutil::wait_for;

    /// The small shape of the end-to-end tests: `demo --hosts 2 --nics-per-host 6 --leaves 3`.
    fn small() -> Shape {
        Shape {
            hosts: 2,
            nics_per_host: 6,
            leaves: 3,
            ..Shape::default()
        }
    }

    fn memory_of(shape: Shape, name: ScenarioName, time_s: f64) -> MemoryFabric {
        let mut fabric = Fabric::new(shape, Scenario::new(name));
        fabric.time_s = time_s;
        memory_fabric(Arc::new(Mutex::new(fabric)), BackgroundLoss::default())
    }

    fn memory(name: ScenarioName, time_s: f64) -> MemoryFabric {
        memory_of(Shape::default(), name, time_s)
    }

    fn label(flow_label: u32) -> SendOptions {
        SendOptions {
            flow_label,
            ..SendOptions::default()
        }
    }

    /// Sends `count` packets from NIC `from`'s prober to NIC `to`'s responder with `options`;
    /// how many arrived.
    fn sent_between(
        memory: &MemoryFabric,
        from: (usize, usize),
        to: (usize, usize),
        options: SendOptions,
        count: usize,
    ) -> usize {
        let mut from = memory.endpoint(gid(from.0, from.1), PROBER_QPN, 1);
        let mut to = memory.endpoint(gid(to.0, to.1), RESPONDER_QPN, 1);
        for _ in 0..count {
            from.send(to.address(), options, b"x", 1).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut events = Vec::new();
        to.poll(&mut events, Duration::ZERO).unwrap();
        events.len()
    }

    /// [`sent_between`] from host 0 NIC 0.
    fn delivered(
        memory: &MemoryFabric,
        to: (usize, usize),
        options: SendOptions,
        count: usize,
    ) -> usize {
        sent_between(memory, (0, 0), to, options, count)
    }

    /// Every NIC's condition in `name` is healthy's, at every phase of the cycle.
    fn no_nic_notices(shape: Shape, name: ScenarioName) {
        let fabric = Fabric::new(shape, Scenario::new(name));
        let healthy = Fabric::new(shape, Scenario::new(ScenarioName::Healthy));
        for t in [0.0, 61.0, 100.0, 200.0, 239.0, 250.0] {
            for h in 0..fabric.hosts.len() {
                for n in 0..fabric.hosts[h].nics.len() {
                    assert_eq!(
                        fabric.scenario.condition(t, h, n),
                        healthy.scenario.condition(t, h, n),
                        "{name:?} at {t} s: host {h} NIC {n}"
                    );
                }
            }
        }
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
        no_nic_notices(Shape::default(), ScenarioName::LeafSpineLoss);
    }

    /// With three leaves (the end-to-end shape) the lossy uplink is still leaf1's: paths
    /// with an end on leaf1 lose on its spine, paths between leaf2 and leaf3 do not.
    #[test]
    fn the_lossy_uplink_is_leaf1s_with_three_leaves() {
        let lossy = memory_of(small(), ScenarioName::LeafSpineLoss, 100.0);
        // NIC n is on leaf n % 3: NIC 0 on leaf1, 1 on leaf2, 2 on leaf3.
        let arrived = sent_between(&lossy, (0, 0), (1, 2), label(LOSSY_UPLINK.1), 10_000);
        assert!((9_700..9_900).contains(&arrived), "{arrived} of 10 000");
        let arrived = sent_between(&lossy, (1, 1), (0, 3), label(LOSSY_UPLINK.1), 10_000);
        assert!((9_700..9_900).contains(&arrived), "{arrived} of 10 000");
        assert_eq!(
            sent_between(&lossy, (0, 1), (1, 2), label(LOSSY_UPLINK.1), 5_000),
            5_000
        );
        assert_eq!(
            sent_between(&lossy, (0, 0), (1, 3), label(LOSSY_UPLINK.1), 5_000),
            5_000
        );
        no_nic_notices(small(), ScenarioName::LeafSpineLoss);
    }

    /// In `nic-optic-failure`, during the fault, gpu-node-02's NIC 3 loses half of what it
    /// sends and half of what it receives, on every flow label, inside its leaf and over the
    /// spine; nothing else loses, before the fault nothing does; its symbol and receive error
    /// counters creep up (a few a second) while its link stays up, and no other NIC's moves.
    #[test]
    fn the_fading_optic_loses_half_each_way_and_only_its_errors_rise() {
        assert_eq!(FADING_OPTIC_NIC, (1, 3));
        for shape in [Shape::default(), small()] {
            let optic = memory_of(shape, ScenarioName::NicOpticFailure, 100.0);
            let peers = [(0, 0), (0, 1), (0, 3), (1, 0), (1, 5)];
            for (peer, flow_label) in peers.into_iter().zip(0..) {
                for (from, to) in [(FADING_OPTIC_NIC, peer), (peer, FADING_OPTIC_NIC)] {
                    let arrived = sent_between(&optic, from, to, label(flow_label), 4_000);
                    assert!(
                        (1_800..2_200).contains(&arrived),
                        "{shape:?}: {from:?} to {to:?}: {arrived} of 4 000"
                    );
                }
            }
            for (from, to) in [((0, 0), (1, 2)), ((1, 2), (0, 3)), ((0, 3), (1, 4))] {
                assert_eq!(
                    sent_between(&optic, from, to, label(1), 2_000),
                    2_000,
                    "{shape:?}: {from:?} to {to:?}"
                );
            }
            for time_s in [10.0, 250.0] {
                let outside = memory_of(shape, ScenarioName::NicOpticFailure, time_s);
                assert_eq!(
                    sent_between(&outside, FADING_OPTIC_NIC, (0, 0), label(0), 2_000),
                    2_000
                );
                assert_eq!(
                    sent_between(&outside, (0, 0), FADING_OPTIC_NIC, label(0), 2_000),
                    2_000
                );
            }

            let mut fabric = Fabric::new(shape, Scenario::new(ScenarioName::NicOpticFailure));
            let before = fabric.clone();
            for _ in 0..300 {
                fabric.step(1.0);
            }
            for (h, host) in fabric.hosts.iter().enumerate() {
                for (n, nic) in host.nics.iter().enumerate() {
                    let rose = |name: &str| {
                        let then = &before.hosts[h].nics[n].spec;
                        nic.spec
                            .counter(name)
                            .zip(then.counter(name))
                            .map(|(now, then)| now - then)
                            .or_else(|| {
                                nic.spec
                                    .ethtool_stat(name)
                                    .zip(then.ethtool_stat(name))
                                    .map(|(now, then)| now - then)
                            })
                            .unwrap()
                    };
                    let errors = [
                        rose("symbol_error"),
                        rose("port_rcv_errors"),
                        rose("rx_symbol_err_phy"),
                        rose("rx_crc_errors_phy"),
                    ];
                    if (h, n) == FADING_OPTIC_NIC {
                        // 180 s of fault: ~2 symbol errors and ~1 CRC error a second.
                        assert_eq!(errors, [360, 180, 360, 180], "{shape:?}");
                    } else {
                        assert_eq!(errors, [0; 4], "{shape:?}: host {h} NIC {n}");
                    }
                    assert_eq!(rose("link_downed"), 0);
                    assert!(nic.spec.state.starts_with("4:"), "{}", nic.spec.state);
                }
            }
            for t in [10.0, 100.0, 250.0] {
                let c = fabric.scenario.condition(t, 1, 3);
                assert!(c.link_up);
                assert_eq!(c.link_errors_per_s > 0.0, Scenario::in_fault(t));
            }
        }
    }

    /// In `leaf-ecmp-blackhole`, during the fault, leaf2 drops every packet it sends toward the
    /// spine on the member `flow_label % SPINES == 1` picks: what leaves leaf2 for another
    /// leaf on that member is lost, what leaves on the other member, comes down into leaf2 or
    /// stays inside a leaf arrives; outside the fault nothing is lost; no NIC notices.
    #[test]
    fn the_blackhole_swallows_only_what_leaf2_sends_onto_one_spine() {
        for shape in [Shape::default(), small()] {
            let fabric = Fabric::new(shape, Scenario::new(ScenarioName::LeafEcmpBlackhole));
            let leaves = fabric.leaves.len();
            let on_leaf = |leaf: usize, host: usize| -> (usize, usize) {
                let n = (0..fabric.hosts[host].nics.len())
                    .find(|&n| fabric.hosts[host].nics[n].leaf == leaf)
                    .unwrap();
                (host, n)
            };
            assert_eq!(fabric.leaves[BLACKHOLE.0].name, "leaf2");
            let hole = memory_of(shape, ScenarioName::LeafEcmpBlackhole, 100.0);
            let sender = on_leaf(BLACKHOLE.0, 0);
            for other in (0..leaves).filter(|&l| l != BLACKHOLE.0) {
                let target = on_leaf(other, 1);
                for flow_label in 0..8 {
                    let arrived = sent_between(&hole, sender, target, label(flow_label), 500);
                    let expected = if flow_label % SPINES == BLACKHOLE.1 {
                        0
                    } else {
                        500
                    };
                    assert_eq!(
                        arrived,
                        expected,
                        "{shape:?}: leaf2 to leaf{} on label {flow_label}",
                        other + 1
                    );
                }
            }
            // From any other leaf, into leaf2 or not, and inside leaf2: delivered.
            for from in (0..leaves).filter(|&l| l != BLACKHOLE.0) {
                for to in (0..leaves).filter(|&l| l != from) {
                    assert_eq!(
                        sent_between(
                            &hole,
                            on_leaf(from, 0),
                            on_leaf(to, 1),
                            label(BLACKHOLE.1),
                            500
                        ),
                        500,
                        "{shape:?}: leaf{} to leaf{}",
                        from + 1,
                        to + 1
                    );
                }
            }
            assert_eq!(
                sent_between(&hole, sender, on_leaf(BLACKHOLE.0, 1), label(1), 500),
                500
            );
            for time_s in [10.0, 250.0] {
                let outside = memory_of(shape, ScenarioName::LeafEcmpBlackhole, time_s);
                let target = on_leaf(0, 1);
                assert_eq!(
                    sent_between(&outside, sender, target, label(BLACKHOLE.1), 500),
                    500
                );
            }
            no_nic_notices(shape, ScenarioName::LeafEcmpBlackhole);
        }
    }

    /// `--probe-background-loss`: every packet on every path, in every scenario and at every
    /// phase of its cycle, is lost with the chance given, and with none without it; the same
    /// seed loses the same packets of the same sends.
    #[test]
    fn background_loss_drops_its_share_everywhere_and_is_seeded() {
        let with = |name, time_s, chance, seed| {
            let mut fabric = Fabric::new(small(), Scenario::new(name));
            fabric.time_s = time_s;
            memory_fabric(
                Arc::new(Mutex::new(fabric)),
                BackgroundLoss { chance, seed },
            )
        };
        // Inside a leaf and over the spine, on either spine, before, in and after the fault.
        let paths = [((0, 0), (1, 0)), ((0, 1), (1, 2)), ((1, 4), (0, 2))];
        for (name, time_s) in [
            (ScenarioName::Healthy, 10.0),
            (ScenarioName::Healthy, 100.0),
            (ScenarioName::PfcStorm, 250.0),
        ] {
            let noisy = with(name, time_s, 0.01, 7);
            for ((from, to), flow_label) in paths.into_iter().zip(0..) {
                let arrived = sent_between(&noisy, from, to, label(flow_label), 10_000);
                assert!(
                    (9_850..9_950).contains(&arrived),
                    "{name:?} at {time_s} s, {from:?} to {to:?}: {arrived} of 10 000"
                );
            }
            let quiet = with(name, time_s, 0.0, 7);
            assert_eq!(sent_between(&quiet, (0, 0), (1, 2), label(1), 5_000), 5_000);
        }
        // A small chance is not rounded away.
        let rare = with(ScenarioName::Healthy, 100.0, 1e-3, 7);
        let arrived = sent_between(&rare, (0, 0), (1, 2), label(1), 50_000);
        assert!((49_900..49_990).contains(&arrived), "{arrived} of 50 000");
        // Seeded: the same sends lose the same packets; another seed others.
        let lost_at = |seed| -> Vec<usize> {
            let memory = with(ScenarioName::Healthy, 100.0, 0.05, seed);
            let mut from = memory.endpoint(gid(0, 0), PROBER_QPN, 1);
            let mut to = memory.endpoint(gid(1, 2), RESPONDER_QPN, 1);
            for i in 0..400u32 {
                from.send(to.address(), label(1), &i.to_be_bytes(), 1)
                    .unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
            let mut events = Vec::new();
            to.poll(&mut events, Duration::ZERO).unwrap();
            let arrived: Vec<usize> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Received { payload, .. } => {
                        Some(u32::from_be_bytes(payload[..4].try_into().unwrap()) as usize)
                    }
                    _ => None,
                })
                .collect();
            (0..400).filter(|i| !arrived.contains(i)).collect()
        };
        assert!(!lost_at(7).is_empty());
        assert_eq!(lost_at(7), lost_at(7));
        assert_ne!(lost_at(7), lost_at(8));
    }

    /// In `two-faults`, during the fault, gpu-node-01's mlx5_5 loses half of what it sends and
    /// receives (as `nic-optic-failure`'s NIC does) and leaf1's uplink to spine-02 drops 2 %
    /// (as `leaf-spine-loss`'s does), on another leaf than the NIC's with two leaves as with
    /// three; nothing else is lost, nothing before the fault; only that NIC's error counters
    /// move.
    #[test]
    fn two_faults_lose_at_the_optic_and_the_uplink_and_nowhere_else() {
        use crate::sim::scenario::TWO_FAULTS_OPTIC_NIC;
        assert_eq!(TWO_FAULTS_OPTIC_NIC, (0, 5));
        for shape in [Shape::default(), small()] {
            let fabric = Fabric::new(shape, Scenario::new(ScenarioName::TwoFaults));
            let leaf = |(h, n): (usize, usize)| fabric.hosts[h].nics[n].leaf;
            assert_ne!(leaf(TWO_FAULTS_OPTIC_NIC), TWO_FAULTS_UPLINK.0, "{shape:?}");
            let on_leaf =
                |l: usize, host: usize| (host, (0..6).find(|&n| leaf((host, n)) == l).unwrap());
            let uplink_leaf = on_leaf(TWO_FAULTS_UPLINK.0, 1);
            // Under neither the optic's leaf nor the uplink's: only with three leaves.
            let elsewhere = (0..fabric.leaves.len())
                .find(|&l| l != TWO_FAULTS_UPLINK.0 && l != leaf(TWO_FAULTS_OPTIC_NIC))
                .map(|l| on_leaf(l, 1));
            let two = memory_of(shape, ScenarioName::TwoFaults, 100.0);
            for (peer, flow_label) in [(1, 0), (1, 5), (0, 1)].into_iter().zip(0..) {
                for (from, to) in [(TWO_FAULTS_OPTIC_NIC, peer), (peer, TWO_FAULTS_OPTIC_NIC)] {
                    // Paths onto leaf1's lossy uplink lose a little more: keep to spine-01.
                    let flow_label = flow_label * SPINES;
                    let arrived = sent_between(&two, from, to, label(flow_label), 4_000);
                    assert!(
                        (1_800..2_200).contains(&arrived),
                        "{shape:?}: {from:?} to {to:?}: {arrived} of 4 000"
                    );
                }
            }
            // Between leaf1 and leaf2 (no end on the optic), on spine-02: 2 %; on spine-01:
            // nothing.
            let other = on_leaf(1, 1);
            assert_ne!(other, TWO_FAULTS_OPTIC_NIC);
            let arrived =
                sent_between(&two, other, uplink_leaf, label(TWO_FAULTS_UPLINK.1), 10_000);
            assert!(
                (9_700..9_900).contains(&arrived),
                "{shape:?}: {other:?} to {uplink_leaf:?}: {arrived} of 10 000"
            );
            assert_eq!(
                sent_between(
                    &two,
                    other,
                    uplink_leaf,
                    label(TWO_FAULTS_UPLINK.1 + 1),
                    5_000
                ),
                5_000
            );
            // Inside leaf1, and between the other leaves, nothing is lost.
            assert_eq!(
                sent_between(
                    &two,
                    on_leaf(TWO_FAULTS_UPLINK.0, 0),
                    uplink_leaf,
                    label(1),
                    5_000
                ),
                5_000
            );
            if let Some(elsewhere) = elsewhere {
                let away = on_leaf(leaf(TWO_FAULTS_OPTIC_NIC), 1);
                assert_eq!(sent_between(&two, elsewhere, away, label(1), 5_000), 5_000);
            }
            for time_s in [10.0, 250.0] {
                let outside = memory_of(shape, ScenarioName::TwoFaults, time_s);
                assert_eq!(
                    sent_between(&outside, TWO_FAULTS_OPTIC_NIC, uplink_leaf, label(1), 2_000),
                    2_000
                );
            }
            for t in [10.0, 100.0, 250.0] {
                for h in 0..fabric.hosts.len() {
                    for n in 0..fabric.hosts[h].nics.len() {
                        let c = fabric.scenario.condition(t, h, n);
                        let erring = (h, n) == TWO_FAULTS_OPTIC_NIC && Scenario::in_fault(t);
                        assert_eq!(c.link_errors_per_s > 0.0, erring, "{t} s: host {h} NIC {n}");
                        assert!(c.link_up);
                    }
                }
            }
        }
    }

    /// Sends one packet from NIC `from`'s prober to NIC `to`'s endpoint `qpn` and polls until
    /// it is seen: (the send's time, the arrival it is stamped with, when it was first seen).
    fn first_seen(
        memory: &MemoryFabric,
        from: (usize, usize),
        to: (usize, usize),
        qpn: u32,
    ) -> (u64, u64, u64) {
        let mut from = memory.endpoint(gid(from.0, from.1), PROBER_QPN, 1);
        let mut to = memory.endpoint(gid(to.0, to.1), qpn, 1);
        let sent = from.send(to.address(), label(0), b"x", 1).unwrap();
        let mut events = Vec::new();
        loop {
            to.poll(&mut events, Duration::from_millis(100)).unwrap();
            if let Some(Event::Received { at_ns, .. }) = events.first() {
                return (sent, *at_ns, to.now_ns());
            }
            assert!(to.now_ns() - sent < 1_000_000_000, "never seen");
        }
    }

    /// In `host-cpu-load`, during the fault, gpu-node-02's responders see each probe 20 ms
    /// after it arrived, stamped with its arrival (so the responder's reported delay holds the
    /// 20 ms and the network RTT does not); its probers and every other host's responders see
    /// theirs at once; nothing is lost; no NIC notices.
    #[test]
    fn the_busy_hosts_responders_see_their_probes_late_stamped_on_arrival() {
        for shape in [Shape::default(), small()] {
            let busy = memory_of(shape, ScenarioName::HostCpuLoad, 100.0);
            for (from, to) in [((0, 0), (BUSY_HOST, 0)), ((0, 1), (BUSY_HOST, 4))] {
                let (sent, at, seen) = first_seen(&busy, from, to, RESPONDER_QPN);
                assert!(at - sent <= OVER_SPINE_NS, "stamped {} ns on", at - sent);
                assert!(seen - at >= CPU_LAG_NS, "seen {} ns after", seen - at);
            }
            for (to, qpn) in [
                ((BUSY_HOST, 0), PROBER_QPN),
                ((0, 1), RESPONDER_QPN),
                ((0, 2), PROBER_QPN),
            ] {
                let (_, at, seen) = first_seen(&busy, (0, 0), to, qpn);
                assert!(
                    seen - at < CPU_LAG_NS,
                    "{to:?} {qpn}: seen {} ns after",
                    seen - at
                );
            }
            for time_s in [10.0, 250.0] {
                let outside = memory_of(shape, ScenarioName::HostCpuLoad, time_s);
                let (_, at, seen) = first_seen(&outside, (0, 0), (BUSY_HOST, 0), RESPONDER_QPN);
                assert!(
                    seen - at < CPU_LAG_NS,
                    "at {time_s} s: seen {} ns after",
                    seen - at
                );
            }
            // Late, not lost.
            let mut from = busy.endpoint(gid(0, 0), PROBER_QPN, 1);
            let mut to = busy.endpoint(gid(BUSY_HOST, 1), RESPONDER_QPN, 1);
            for _ in 0..2_000 {
                from.send(to.address(), label(1), b"x", 1).unwrap();
            }
            std::thread::sleep(Duration::from_nanos(CPU_LAG_NS * 3));
            let mut events = Vec::new();
            to.poll(&mut events, Duration::ZERO).unwrap();
            assert_eq!(events.len(), 2_000);
            no_nic_notices(shape, ScenarioName::HostCpuLoad);
        }
    }

    /// Host `host`'s probing ports, as [`local_ports`] makes them but at the queue pairs a
    /// start of its agent gets: `start` 0 is the demo's, each later start new ones.
    fn ports_of_start(
        memory: &MemoryFabric,
        fabric: &Fabric,
        host: usize,
        start: u32,
    ) -> Vec<LocalPort> {
        let mut ports = local_ports(memory, fabric, host, QKEY, 104);
        if start > 0 {
            for (n, port) in ports.iter_mut().enumerate() {
                let qpn = 100 * start + 2 * n as u32;
                port.responder = Box::new(memory.endpoint(gid(host, n), qpn, QKEY));
                port.prober = Box::new(memory.endpoint(gid(host, n), qpn + 1, QKEY));
            }
        }
        ports
    }

    const QKEY: u32 = 0x5246_4550;
    /// How long the fabric may take to settle after a change: a loaded machine is slow.
    const SETTLE_WAIT: Duration = Duration::from_secs(30);

    /// The peers of `host`: every other agent's ports, as their `/probe-address` says now.
    fn peers_of(agents: &[Option<Agent>], host: usize) -> Vec<Peer> {
        agents
            .iter()
            .enumerate()
            .filter(|(h, _)| *h != host)
            .filter_map(|(_, a)| a.as_ref())
            .flat_map(Agent::addresses)
            .collect()
    }

    /// Probes answered by `host`'s ports, as `stats` counts them.
    fn answered_by(stats: &Stats, host: &str) -> u64 {
        stats
            .all_targets()
            .filter(|(k, _)| k.to.host == host)
            .map(|(_, t)| t.answered)
            .sum()
    }

    /// The page's localization (`probe::localize`) over the counts since their start of the
    /// agents `live` (whose ports are the live ones) and of `everything` (their paths, with
    /// those of agents that stopped), each port under its leaf in `fabric`.
    fn localize_stats(
        fabric: &Fabric,
        names: &[String],
        live: &[Stats],
        everything: &[&Stats],
    ) -> crate::probe::localize::Localization {
        use crate::probe::localize::{localize, Leaf, LivePort, PathCounts, PortId};
        let id = |p: &crate::probe::targets::Port| PortId {
            host: p.host.clone(),
            device: p.device.clone(),
            port: p.port,
        };
        let ports: Vec<LivePort> = live
            .iter()
            .flat_map(|s| &s.ports)
            .map(|p| {
                let (h, n) = (
                    names.iter().position(|n| *n == p.port.host).unwrap(),
                    p.port.rail as usize,
                );
                LivePort {
                    id: id(&p.port),
                    leaf: Some(Leaf {
                        switch: format!("leaf{}", fabric.hosts[h].nics[n].leaf + 1),
                        switch_port: None,
                    }),
                    sent: p.sent.iter().sum(),
                    lost: p.lost.iter().sum(),
                    answer_delay_seconds: None,
                }
            })
            .collect();
        let paths: Vec<PathCounts> = everything
            .iter()
            .flat_map(|s| {
                s.all_targets().map(|(k, t)| PathCounts {
                    from: id(&s.ports[k.from].port),
                    to: id(&k.to),
                    sent: t.sent,
                    lost: t.lost,
                })
            })
            .collect();
        localize(&ports, &paths)
    }

    /// Agents on every host of the end-to-end tests' small fabric in `name`'s fault, with
    /// `background` loss on every path, probing for `seconds` (rounds of 100 ms, ten times the
    /// demo's); the page's localization of all they counted.
    fn probe_and_localize(
        name: ScenarioName,
        background: f64,
        seconds: u64,
    ) -> crate::probe::localize::Localization {
        use crate::probe::agent::Settings;
        let mut fabric = Fabric::new(small(), Scenario::new(name));
        fabric.time_s = 100.0;
        let memory = memory_fabric(
            Arc::new(Mutex::new(fabric.clone())),
            BackgroundLoss {
                chance: background,
                seed: 7,
            },
        );
        let settings = Settings {
            targets: crate::probe::targets::Settings {
                min_round: Duration::from_millis(100),
                ..Default::default()
            },
            // A loaded test machine's late answers are not lost.
            timeout: Duration::from_secs(2),
            ..Settings::default()
        };
        let names: Vec<String> = fabric.hosts.iter().map(|h| h.name.clone()).collect();
        let agents: Vec<Option<Agent>> = (0..fabric.hosts.len())
            .map(|h| Some(Agent::spawn(ports_of_start(&memory, &fabric, h, 0), settings).unwrap()))
            .collect();
        for (h, agent) in agents.iter().enumerate() {
            agent.as_ref().unwrap().set_peers(peers_of(&agents, h));
        }
        std::thread::sleep(Duration::from_secs(seconds));
        let stats: Vec<Stats> = agents.iter().flatten().map(Agent::stats).collect();
        drop(agents);
        let everything: Vec<&Stats> = stats.iter().collect();
        localize_stats(&fabric, &names, &stats, &everything)
    }

    /// Each verdict that names the network, as (kind, host/device or switch).
    fn network_verdicts(found: &crate::probe::localize::Localization) -> Vec<(String, String)> {
        use crate::probe::localize::Kind;
        let mut named: Vec<(String, String)> = found
            .verdicts
            .iter()
            .filter(|v| v.kind != Kind::Responder)
            .map(|v| {
                let what = match (&v.host, &v.device, &v.switch) {
                    (Some(h), Some(d), _) => format!("{h}/{d}"),
                    (Some(h), None, _) => h.clone(),
                    (None, _, Some(s)) => s.clone(),
                    (None, _, None) => String::new(),
                };
                (v.kind.as_str().to_string(), what)
            })
            .collect();
        named.sort();
        named
    }

    /// Issue 61, item 9: in `two-faults` the page's vote names both faults, gpu-node-01's
    /// mlx5_5 (a NIC) and leaf1's uplinks, and nothing else, with background loss on every
    /// path too (1e-4 a packet, the example of `--probe-background-loss`).
    #[test]
    fn the_page_names_both_of_two_faults_and_nothing_else() {
        let found = probe_and_localize(ScenarioName::TwoFaults, 1e-4, 15);
        assert_eq!(
            network_verdicts(&found),
            [
                ("nic".to_string(), "gpu-node-01/mlx5_5".to_string()),
                ("uplink".to_string(), "leaf1".to_string()),
            ],
            "{:#?}",
            found.verdicts
        );
        // Issue 61, item 8: the NIC hurts itself alone; the uplink the NICs under leaf1 whose
        // paths across it fail, not the fading NIC, whose paths the NIC's verdict explains.
        let hurts = |kind: &str| {
            let v = found
                .verdicts
                .iter()
                .find(|v| v.kind.as_str() == kind)
                .unwrap();
            v.hurts
                .iter()
                .map(|p| format!("{}/{}", p.host, p.device))
                .collect::<Vec<_>>()
        };
        assert_eq!(hurts("nic"), ["gpu-node-01/mlx5_5"]);
        let uplink = hurts("uplink");
        assert!(
            !uplink.is_empty() && !uplink.contains(&"gpu-node-01/mlx5_5".to_string()),
            "{uplink:?}"
        );
    }

    /// Background loss alone, ten times the flag's example (1e-3 a packet), on the healthy
    /// fabric: the page's vote names nothing.
    #[test]
    fn the_page_names_nothing_on_background_loss_alone() {
        let found = probe_and_localize(ScenarioName::Healthy, 1e-3, 15);
        assert_eq!(network_verdicts(&found), [], "{:#?}", found.verdicts);
        assert!(
            found.background_loss > 0.0,
            "no probe was lost: the background loss was not applied"
        );
    }

    /// Issue 60, item 4: a rolling restart of half the demo's agents, one after the other, each
    /// silent for 3 s and back on new queue pairs, while the others' peer sets still name
    /// the old ones (their refresh is a minute away). Each is answered again within seconds
    /// (its first probes say where it answers), nothing is counted lost, what went unanswered
    /// while it restarted is counted apart, and localization names no path and no verdict.
    #[test]
    fn a_rolling_restart_of_half_the_agents_is_no_loss_and_no_verdict() {
        use crate::probe::agent::Settings;

        let shape = Shape {
            hosts: 4,
            nics_per_host: 4,
            leaves: 2,
            ..Shape::default()
        };
        let fabric = Fabric::new(shape, Scenario::new(ScenarioName::Healthy));
        let memory = memory_fabric(
            Arc::new(Mutex::new(fabric.clone())),
            BackgroundLoss::default(),
        );
        let settings = Settings {
            targets: crate::probe::targets::Settings {
                min_round: Duration::from_millis(200),
                ..Default::default()
            },
            // Long enough that a loaded test machine's late answers are not lost (no
            // timeouts but the restarts'); the grace is the default's.
            timeout: Duration::from_secs(2),
            ..Settings::default()
        };
        let names: Vec<String> = fabric.hosts.iter().map(|h| h.name.clone()).collect();
        let mut agents: Vec<Option<Agent>> = (0..shape.hosts)
            .map(|h| Some(Agent::spawn(ports_of_start(&memory, &fabric, h, 0), settings).unwrap()))
            .collect();
        for h in 0..shape.hosts {
            let peers = peers_of(&agents, h);
            agents[h].as_ref().unwrap().set_peers(peers);
        }
        let stats = |agents: &[Option<Agent>]| -> Vec<Stats> {
            agents.iter().flatten().map(Agent::stats).collect()
        };
        // Every agent answers every other before the first restart.
        let all_answer = |agents: &[Option<Agent>]| {
            stats(agents).iter().all(|s| {
                let own = &s.ports[0].port.host;
                names
                    .iter()
                    .filter(|n| *n != own)
                    .all(|n| answered_by(s, n) >= 10)
            })
        };
        wait_for("the fabric to settle", SETTLE_WAIT, || all_answer(&agents));

        // Counts of the agents that restarted, as they were when they stopped.
        let mut stopped: Vec<Stats> = Vec::new();
        for (start, h) in (0..shape.hosts / 2).enumerate() {
            let before: Vec<u64> = stats(&agents)
                .iter()
                .map(|s| answered_by(s, &names[h]))
                .collect();
            let old = agents[h].take().unwrap();
            stopped.push(old.stats());
            drop(old);
            // Down for longer than the probe timeout (probes to it time out meanwhile), then
            // back on new QPNs, with its peers' addresses as its start reads them; theirs of
            // it stay old.
            std::thread::sleep(settings.timeout + Duration::from_secs(1));
            let new = Agent::spawn(
                ports_of_start(&memory, &fabric, h, start as u32 + 1),
                settings,
            )
            .unwrap();
            new.set_peers(peers_of(&agents, h));
            agents[h] = Some(new);
            let answered_again = || {
                stats(&agents)
                    .iter()
                    .zip(&before)
                    .filter(|(s, _)| s.ports[0].port.host != names[h])
                    .all(|(s, before)| answered_by(s, &names[h]) >= before + 10)
            };
            let what = format!("{} to be answered again at its new QPNs", names[h]);
            wait_for(&what, SETTLE_WAIT, answered_again);
        }
        // Every probe in flight has settled.
        let settled = |agents: &[Option<Agent>]| {
            let before: Vec<u64> = stats(agents)
                .iter()
                .map(|s| s.ports.iter().map(|p| p.answered.iter().sum::<u64>()).sum())
                .collect();
            std::thread::sleep(settings.timeout * 2);
            stats(agents).iter().zip(before).all(|(s, before)| {
                s.ports
                    .iter()
                    .map(|p| p.answered.iter().sum::<u64>())
                    .sum::<u64>()
                    > before
            })
        };
        assert!(settled(&agents));
        let last = stats(&agents);
        let everything: Vec<&Stats> = last.iter().chain(&stopped).collect();
        // Localization over every agent's paths, counted since the start.
        let found = localize_stats(&fabric, &names, &last, &everything);
        assert!(found.failing.is_empty(), "{:?}", found.failing);
        assert!(found.verdicts.is_empty(), "{:?}", found.verdicts);
        for s in &everything {
            for port in &s.ports {
                assert_eq!(port.lost, [0; 3], "{}/{}", port.port.host, port.port.device);
            }
            assert_eq!(s.losing_targets().count(), 0);
        }
        let restart_unanswered: u64 = everything
            .iter()
            .flat_map(|s| &s.ports)
            .map(|p| p.restart_unanswered.iter().sum::<u64>())
            .sum();
        assert!(
            restart_unanswered > 0,
            "no probe went to a restarting agent: the test restarted nothing"
        );
    }
}
