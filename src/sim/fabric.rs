//! A simulated RoCE fabric: hosts with ConnectX-7 GPU NICs, wired rail by rail to leaf switches,
//! running ring all-reduce traffic on the lossless priority. Time advances in steps; each step
//! adds to the counters what the scenario's state at that moment produces, with the coupling of
//! DCQCN: marks at the switch queue, CNPs sent by the receiving NIC and handled by the sender,
//! PFC pause frames and pause time when the queue passes the PFC threshold, throughput that
//! falls with both. Counters only grow; the same seed gives the same fabric.

use std::collections::HashMap;

use super::ecn_tree::EcnSpec;
use super::scenario::{NicCondition, Scenario, ScenarioName, PCIE_HALF_WIDTH_NIC};
use super::sysfs_tree::{connectx7_node, LinkLayer, NicSpec};

/// 400 Gb/s in bytes per second.
pub const LINE_RATE_BYTES: f64 = 400e9 / 8.0;
/// The lossless priority RoCE data uses, and the one PFC pauses.
pub const PFC_PRIORITY: usize = 3;
/// Average RoCE frame on the wire for NCCL traffic: 4096-byte MTU payloads and headers.
const FRAME_BYTES: f64 = 4_160.0;
/// A paused port refreshes XOFF every half pause quantum: 65535 quanta x 512 bit times at
/// 400 Gb/s is 84 µs, so one frame per 42 µs while paused.
const PAUSE_REFRESH_S: f64 = 42e-6;
/// Mean length of one XOFF episode under congestion.
const PAUSE_EPISODE_S: f64 = 250e-6;
/// A notification point sends at most one CNP per QP per 50 µs (mlx5 `min_time_between_cnps`
/// default 4 µs, rate-limited per QP in practice): about half the marks become CNPs here.
const CNP_PER_MARK: f64 = 0.5;
/// mlx5 stall watermarks: a warning event once pausing has lasted this long, an error event
/// (pause transmission turned off) later.
const STORM_WARNING_AFTER_S: f64 = 0.1;
const STORM_ERROR_AFTER_S: f64 = 8.0;

/// The shape of the fabric.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub hosts: usize,
    /// GPU NICs per host (at most 8, the ConnectX-7 node's GPU NICs).
    pub nics_per_host: usize,
    pub leaves: usize,
    pub seed: u64,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            hosts: 4,
            nics_per_host: 8,
            leaves: 2,
            seed: 7,
        }
    }
}

/// One NIC's counters as the node agent will read them, and its place in the fabric.
#[derive(Debug, Clone)]
pub struct Nic {
    pub spec: NicSpec,
    pub leaf: usize,
    /// Index of this NIC's port in `leaves[leaf].ports`.
    pub leaf_port: usize,
    /// Whose traffic this NIC receives (ring all-reduce on the same rail).
    pub upstream: (usize, usize),
    /// How long this NIC has been sending pause continuously (storm detection).
    pause_streak_s: f64,
    /// Fractional parts of counters not yet whole, by counter name.
    carry: HashMap<&'static str, f64>,
    /// Where each counter name sits in its list (None: this NIC has no such counter).
    positions: HashMap<(u8, &'static str), Option<usize>>,
}

#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub nics: Vec<Nic>,
}

/// A leaf switch port, counted the way the switch MIBs count.
#[derive(Debug, Clone, Default)]
pub struct SwitchPort {
    pub name: String,
    pub ifindex: u32,
    /// (host, nic) on the other end of the cable.
    pub neighbor: (usize, usize),
    pub up: bool,
    pub in_octets: u64,
    pub out_octets: u64,
    pub in_packets: u64,
    pub out_packets: u64,
    pub in_discards: u64,
    pub out_discards: u64,
    /// PFC frames per priority the port received from the NIC (the NIC paused the switch).
    pub pfc_rx: [u64; 8],
    /// PFC frames per priority the port sent to the NIC (the switch paused the NIC).
    pub pfc_tx: [u64; 8],
    pub queue_transmitted: [u64; 8],
    pub queue_dropped: [u64; 8],
    pub queue_ecn_marked: [u64; 8],
    carry: HashMap<&'static str, f64>,
}

#[derive(Debug, Clone)]
pub struct Leaf {
    pub name: String,
    pub ports: Vec<SwitchPort>,
}

#[derive(Debug, Clone)]
pub struct Fabric {
    pub hosts: Vec<Host>,
    pub leaves: Vec<Leaf>,
    pub scenario: Scenario,
    /// Simulated seconds since the start.
    pub time_s: f64,
}

impl Fabric {
    pub fn new(shape: Shape, mut scenario: Scenario) -> Fabric {
        let nics = shape.nics_per_host.clamp(1, 8);
        let leaves_n = shape.leaves.max(1);
        let hosts_n = shape.hosts.max(2);
        scenario.hosts = hosts_n;
        scenario.leaves = leaves_n;
        let mut leaves: Vec<Leaf> = (0..leaves_n)
            .map(|l| Leaf {
                name: format!("leaf{}", l + 1),
                ports: Vec::new(),
            })
            .collect();
        let mut hosts = Vec::with_capacity(hosts_n);
        for h in 0..hosts_n {
            let name = format!("gpu-node-{:02}", h + 1);
            let specs = connectx7_node(nics, shape.seed.wrapping_add(h as u64 * 0x9E37_79B9));
            let mut host_nics = Vec::with_capacity(nics);
            for (n, mut spec) in specs.into_iter().enumerate() {
                if scenario.name == ScenarioName::PcieHalfWidth && (h, n) == PCIE_HALF_WIDTH_NIC {
                    spec.pcie.current_width = 8;
                }
                // MLNX_OFED's ECN settings: DCQCN on for the lossless RoCE priority.
                if spec.link_layer == LinkLayer::Ethernet {
                    spec.ecn = Some(EcnSpec::on_priority(PFC_PRIORITY));
                }
                // Rail-optimized: NIC n of every host goes to the same leaf.
                let leaf = n % leaves_n;
                let ports = &mut leaves[leaf].ports;
                let ifindex = ports.len() as u32 + 1;
                ports.push(SwitchPort {
                    name: format!("Ethernet{ifindex}/1"),
                    ifindex,
                    neighbor: (h, n),
                    up: true,
                    ..SwitchPort::default()
                });
                host_nics.push(Nic {
                    spec,
                    leaf,
                    leaf_port: ports.len() - 1,
                    upstream: ((h + hosts_n - 1) % hosts_n, n),
                    pause_streak_s: 0.0,
                    carry: HashMap::new(),
                    positions: HashMap::new(),
                });
            }
            hosts.push(Host {
                name,
                nics: host_nics,
            });
        }
        Fabric {
            hosts,
            leaves,
            scenario,
            time_s: 0.0,
        }
    }

    /// Advances the fabric by `dt` simulated seconds.
    pub fn step(&mut self, dt: f64) {
        if dt <= 0.0 {
            return;
        }
        let t = self.time_s;
        // What each NIC sends this step, before the receivers are updated.
        let conditions: Vec<Vec<NicCondition>> = self
            .hosts
            .iter()
            .enumerate()
            .map(|(h, host)| {
                (0..host.nics.len())
                    .map(|n| self.scenario.condition(t, h, n))
                    .collect()
            })
            .collect();
        let sent_bytes: Vec<Vec<f64>> = conditions
            .iter()
            .map(|host| {
                host.iter()
                    .map(|c| {
                        if c.link_up {
                            c.utilization * (1.0 - c.paused_by_switch) * LINE_RATE_BYTES * dt
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        // CNPs each NIC sends back to its upstream sender, to credit the sender below.
        let mut cnps_to: HashMap<(usize, usize), f64> = HashMap::new();
        for h in 0..self.hosts.len() {
            for n in 0..self.hosts[h].nics.len() {
                let c = conditions[h][n];
                let upstream = self.hosts[h].nics[n].upstream;
                let received = if c.link_up {
                    sent_bytes[upstream.0][upstream.1]
                } else {
                    0.0
                };
                let sent = sent_bytes[h][n];
                // Marked at the receiver's queue, or on the way by a congested path of the
                // sender's.
                let marking =
                    c.ecn_mark_fraction + conditions[upstream.0][upstream.1].tx_ecn_mark_fraction;
                let marks = received / FRAME_BYTES * marking;
                let cnps = marks * CNP_PER_MARK;
                *cnps_to.entry(upstream).or_default() += cnps;
                let leaf = self.hosts[h].nics[n].leaf;
                let port_index = self.hosts[h].nics[n].leaf_port;
                let nic = &mut self.hosts[h].nics[n];
                nic.traffic(sent, received, marks, cnps, c.pre_fec_ber);
                nic.pfc(&c, dt);
                nic.errors(&c, dt);
                let port = &mut self.leaves[leaf].ports[port_index];
                port.up = c.link_up;
                port.account(sent, received, marks, &c, dt);
            }
        }
        for ((h, n), cnps) in cnps_to {
            let ignores = conditions[h][n].ignores_cnps;
            self.hosts[h].nics[n].cnps_received(cnps, ignores);
        }
        for (h, host) in self.hosts.iter_mut().enumerate() {
            for (n, nic) in host.nics.iter_mut().enumerate() {
                nic.link_state(&conditions[h][n]);
                // A NIC that ignores CNPs has its reaction point off on the RoCE priority.
                if let Some(ecn) = &mut nic.spec.ecn {
                    ecn.reaction[PFC_PRIORITY] = !conditions[h][n].ignores_cnps;
                }
            }
        }
        self.time_s += dt;
    }
}

/// Where a counter lives in a NIC spec.
#[derive(Clone, Copy)]
enum Group {
    Counters,
    HwCounters,
    Ethtool,
}

impl Nic {
    /// Adds `delta` (possibly fractional) to a counter; whole units reach the spec.
    fn add(&mut self, group: Group, name: &'static str, delta: f64) {
        if delta <= 0.0 {
            return;
        }
        let carry = self.carry.entry(name).or_default();
        *carry += delta;
        let whole = carry.floor();
        *carry -= whole;
        if whole < 1.0 {
            return;
        }
        let list = match group {
            Group::Counters => &mut self.spec.counters,
            Group::HwCounters => &mut self.spec.hw_counters,
            Group::Ethtool => &mut self.spec.ethtool,
        };
        // Names are looked up once: the lists hold a few hundred entries.
        let position = *self
            .positions
            .entry((group as u8, name))
            .or_insert_with(|| list.iter().position(|(n, _)| n == name));
        if let Some((_, value)) = position.and_then(|i| list.get_mut(i)) {
            *value = value.saturating_add(whole as u64);
        }
    }

    fn traffic(&mut self, sent: f64, received: f64, marks: f64, cnps: f64, pre_fec_ber: f64) {
        let (tx_packets, rx_packets) = (sent / FRAME_BYTES, received / FRAME_BYTES);
        use Group::*;
        // The PMA data counters count 4-octet words.
        self.add(Counters, "port_xmit_data", sent / 4.0);
        self.add(Counters, "port_rcv_data", received / 4.0);
        self.add(Counters, "port_xmit_packets", tx_packets);
        self.add(Counters, "port_rcv_packets", rx_packets);
        self.add(Counters, "unicast_xmit_packets", tx_packets);
        self.add(Counters, "unicast_rcv_packets", rx_packets);
        self.add(Ethtool, "tx_vport_rdma_unicast_bytes", sent);
        self.add(Ethtool, "rx_vport_rdma_unicast_bytes", received);
        self.add(Ethtool, "tx_vport_rdma_unicast_packets", tx_packets);
        self.add(Ethtool, "rx_vport_rdma_unicast_packets", rx_packets);
        self.add(Ethtool, "tx_prio3_bytes", sent);
        self.add(Ethtool, "rx_prio3_bytes", received);
        self.add(Ethtool, "tx_prio3_packets", tx_packets);
        self.add(Ethtool, "rx_prio3_packets", rx_packets);
        self.add(Ethtool, "tx_bytes_phy", sent);
        self.add(Ethtool, "rx_bytes_phy", received);
        self.add(Ethtool, "tx_packets_phy", tx_packets);
        self.add(Ethtool, "rx_packets_phy", rx_packets);
        self.add(Ethtool, "rx_bits_phy", received * 8.0);
        // FEC corrects the link's bit errors (1e-9 of the bits on a healthy link; sim/fec.rs).
        self.add(
            Ethtool,
            "rx_corrected_bits_phy",
            received * 8.0 * pre_fec_ber,
        );
        // Notification point: marked packets seen, CNPs sent (on priority 6).
        self.add(HwCounters, "np_ecn_marked_roce_packets", marks);
        self.add(Ethtool, "rx_prio3_marked", marks);
        self.add(HwCounters, "np_cnp_sent", cnps);
        self.add(Ethtool, "tx_prio6_packets", cnps);
        self.add(HwCounters, "rx_write_requests", received / 262_144.0);
    }

    /// Reaction point: CNPs from the receivers of this NIC's traffic.
    fn cnps_received(&mut self, cnps: f64, ignored: bool) {
        let counter = if ignored {
            "rp_cnp_ignored"
        } else {
            "rp_cnp_handled"
        };
        self.add(Group::HwCounters, counter, cnps);
        self.add(Group::Ethtool, "rx_prio6_packets", cnps);
    }

    fn pfc(&mut self, c: &NicCondition, dt: f64) {
        use Group::Ethtool;
        // Paused by the switch (rx: pause frames received).
        let paused = c.paused_by_switch * dt;
        self.add(Ethtool, "rx_prio3_pause", paused / PAUSE_REFRESH_S);
        self.add(Ethtool, "rx_prio3_pause_duration", paused * 1e6);
        self.add(
            Ethtool,
            "rx_prio3_pause_transition",
            paused / PAUSE_EPISODE_S,
        );
        // Pausing the switch (tx): a NIC that stops draining pauses without end.
        let pausing = c.pausing_switch * dt;
        self.add(Ethtool, "tx_prio3_pause", pausing / PAUSE_REFRESH_S);
        self.add(Ethtool, "tx_prio3_pause_duration", pausing * 1e6);
        if c.pausing_switch >= 0.99 {
            let before = self.pause_streak_s;
            self.pause_streak_s += dt;
            if before < STORM_WARNING_AFTER_S && self.pause_streak_s >= STORM_WARNING_AFTER_S {
                self.add(Ethtool, "tx_pause_storm_warning_events", 1.0);
            }
            if before < STORM_ERROR_AFTER_S && self.pause_streak_s >= STORM_ERROR_AFTER_S {
                self.add(Ethtool, "tx_pause_storm_error_events", 1.0);
            }
        } else {
            self.pause_streak_s = 0.0;
        }
    }

    fn errors(&mut self, c: &NicCondition, dt: f64) {
        use Group::{Counters, Ethtool, HwCounters};
        // A failing optic: symbol errors on the lanes, and the frames they corrupt fail their
        // CRC (RoCE's port_rcv_errors mirrors the PHY's CRC errors).
        let link_errors = c.link_errors_per_s * dt;
        self.add(Counters, "symbol_error", link_errors);
        self.add(Ethtool, "rx_symbol_err_phy", link_errors);
        self.add(Counters, "port_rcv_errors", link_errors * 0.5);
        self.add(Ethtool, "rx_crc_errors_phy", link_errors * 0.5);
        self.add(HwCounters, "out_of_sequence", c.transport_errors_per_s * dt);
        self.add(
            HwCounters,
            "packet_seq_err",
            c.transport_errors_per_s * 0.2 * dt,
        );
        self.add(
            HwCounters,
            "local_ack_timeout_err",
            c.transport_errors_per_s * 0.02 * dt,
        );
    }

    fn link_state(&mut self, c: &NicCondition) {
        let was_up = self.spec.state.starts_with("4:");
        if was_up && !c.link_up {
            self.add(Group::Counters, "link_downed", 1.0);
            self.add(Group::Ethtool, "link_down_events_phy", 1.0);
        }
        if c.link_up {
            self.spec.state = "4: ACTIVE".into();
            self.spec.phys_state = "5: LinkUp".into();
        } else {
            self.spec.state = "1: DOWN".into();
            self.spec.phys_state = "3: Disabled".into();
        }
    }
}

impl SwitchPort {
    fn add(&mut self, name: &'static str, delta: f64) -> u64 {
        let carry = self.carry.entry(name).or_default();
        *carry += delta.max(0.0);
        let whole = carry.floor();
        *carry -= whole;
        whole as u64
    }

    /// `sent` and `received` are the NIC's: the port receives what the NIC sends.
    fn account(&mut self, sent: f64, received: f64, marks: f64, c: &NicCondition, dt: f64) {
        let p = PFC_PRIORITY;
        let v = self.add("in_octets", sent);
        self.in_octets += v;
        let v = self.add("out_octets", received);
        self.out_octets += v;
        let v = self.add("in_packets", sent / FRAME_BYTES);
        self.in_packets += v;
        let v = self.add("out_packets", received / FRAME_BYTES);
        self.out_packets += v;
        self.queue_transmitted[p] += self.add("queue_tx", received / FRAME_BYTES);
        self.queue_ecn_marked[p] += self.add("queue_ecn", marks);
        // The switch pauses the NIC: frames it sends; the NIC pausing it: frames it receives.
        self.pfc_tx[p] += self.add("pfc_tx", c.paused_by_switch * dt / PAUSE_REFRESH_S);
        self.pfc_rx[p] += self.add("pfc_rx", c.pausing_switch * dt / PAUSE_REFRESH_S);
        // A stormed queue drops on the switch once its own watchdog would have kicked in.
        self.queue_dropped[p] += self.add("queue_drop", c.switch_drops_per_s * dt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario::ScenarioName;

    /// Every counter of the fabric, NICs then switch ports, in a fixed order; `named` gives
    /// the names too (for messages; slow).
    fn all_counters(fabric: &Fabric, named: bool) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let name = |text: &dyn Fn() -> String| if named { text() } else { String::new() };
        for host in &fabric.hosts {
            for nic in &host.nics {
                for (group, list) in [
                    ("c", &nic.spec.counters),
                    ("hw", &nic.spec.hw_counters),
                    ("e", &nic.spec.ethtool),
                ] {
                    for (counter, value) in list {
                        out.push((
                            name(&|| format!("{}/{}/{group}/{counter}", host.name, nic.spec.name)),
                            *value,
                        ));
                    }
                }
            }
        }
        for leaf in &fabric.leaves {
            for port in &leaf.ports {
                let key = |what: &str| name(&|| format!("{}/{}/{what}", leaf.name, port.name));
                out.push((key("in_octets"), port.in_octets));
                out.push((key("out_octets"), port.out_octets));
                for p in 0..8 {
                    out.push((key(&format!("pfc_rx{p}")), port.pfc_rx[p]));
                    out.push((key(&format!("pfc_tx{p}")), port.pfc_tx[p]));
                    out.push((key(&format!("ecn{p}")), port.queue_ecn_marked[p]));
                }
            }
        }
        out
    }

    fn value(nic: &Nic, name: &str) -> u64 {
        nic.spec
            .hw_counter(name)
            .or_else(|| nic.spec.ethtool_stat(name))
            .or_else(|| nic.spec.counter(name))
            .unwrap()
    }

    /// Over a long run of every scenario: counters never decrease, pause time never exceeds
    /// the time that passed, a NIC never sends more CNPs than it saw marks, every CNP sent is
    /// handled or ignored by a sender, and no port carries more than its line rate.
    #[test]
    fn invariants_hold_over_long_runs() {
        let dt = 1.0;
        for name in ScenarioName::ALL {
            let mut fabric = Fabric::new(Shape::default(), Scenario::new(name));
            let start = fabric.clone();
            let mut previous = all_counters(&fabric, false);
            for _ in 0..600 {
                fabric.step(dt);
                let now = all_counters(&fabric, false);
                if let Some(i) = (0..now.len()).find(|&i| now[i].1 < previous[i].1) {
                    let names = all_counters(&fabric, true);
                    panic!(
                        "{name:?}: {} went from {} to {}",
                        names[i].0, previous[i].1, now[i].1
                    );
                }
                previous = now;
            }
            let elapsed = fabric.time_s;
            assert_eq!(elapsed, 600.0);
            let (mut cnp_sent, mut cnp_reacted) = (0u64, 0u64);
            for (host, host0) in fabric.hosts.iter().zip(&start.hosts) {
                for (nic, nic0) in host.nics.iter().zip(&host0.nics) {
                    let delta = |name: &str| value(nic, name) - value(nic0, name);
                    for pause in ["rx_prio3_pause_duration", "tx_prio3_pause_duration"] {
                        assert!(
                            delta(pause) as f64 <= elapsed * 1e6 + 1.0,
                            "{name:?}: {pause} {} µs in {elapsed} s",
                            delta(pause)
                        );
                    }
                    assert!(delta("np_cnp_sent") <= delta("np_ecn_marked_roce_packets"));
                    cnp_sent += delta("np_cnp_sent");
                    cnp_reacted += delta("rp_cnp_handled") + delta("rp_cnp_ignored");
                    let bytes = delta("port_xmit_data") as f64 * 4.0;
                    assert!(
                        bytes <= LINE_RATE_BYTES * elapsed,
                        "{name:?}: {bytes} bytes"
                    );
                }
            }
            // Rounding of fractional CNPs per NIC: within one per NIC.
            let nics = fabric.hosts.len() * fabric.hosts[0].nics.len();
            assert!(
                cnp_sent.abs_diff(cnp_reacted) <= nics as u64,
                "{name:?}: {cnp_sent} CNPs sent, {cnp_reacted} handled or ignored"
            );
        }
    }

    #[test]
    fn same_seed_same_fabric_and_rail_wiring() {
        let a = Fabric::new(Shape::default(), Scenario::new(ScenarioName::Healthy));
        let b = Fabric::new(Shape::default(), Scenario::new(ScenarioName::Healthy));
        assert_eq!(all_counters(&a, true), all_counters(&b, true));
        // NIC n of every host is on leaf n % leaves; every leaf port has one neighbour.
        for (h, host) in a.hosts.iter().enumerate() {
            for (n, nic) in host.nics.iter().enumerate() {
                assert_eq!(nic.leaf, n % 2);
                assert_eq!(a.leaves[nic.leaf].ports[nic.leaf_port].neighbor, (h, n));
            }
        }
        assert_eq!(a.leaves[0].ports.len(), 16);
    }
}
