//! Scenarios of the simulated fabric: what each NIC and its switch port go through over time.
//! Every scenario runs a 300-second cycle: 60 s healthy, 180 s of the fault, 60 s of recovery.

/// Length of one scenario cycle and of its healthy lead-in, in simulated seconds.
pub const CYCLE_S: f64 = 300.0;
pub const FAULT_START_S: f64 = 60.0;
pub const FAULT_END_S: f64 = 240.0;

/// The NIC a single-NIC fault hits: host index, NIC index.
pub const PFC_STORM_NIC: (usize, usize) = (0, 2);
pub const FLAPPING_NIC: (usize, usize) = (1, 5);
pub const CNP_IGNORING_NIC: (usize, usize) = (1, 1);
pub const TRANSPORT_ERROR_NIC: (usize, usize) = (1, 0);
/// `nic-optic-failure`: the NIC whose optic fades (gpu-node-02's fourth NIC).
pub const FADING_OPTIC_NIC: (usize, usize) = (1, 3);
/// `two-faults`: the NIC whose optic fades while a leaf uplink drops (gpu-node-01's mlx5_5:
/// another host than `nic-optic-failure`'s, and under another leaf than the lossy uplink's,
/// leaf1, with two leaves as with three).
pub const TWO_FAULTS_OPTIC_NIC: (usize, usize) = (0, 5);
/// `host-cpu-load`: the host whose responders answer late (gpu-node-02).
pub const BUSY_HOST: usize = 1;
/// `optic-fading`: the NIC whose received optical power sinks (gpu-node-02's mlx5_2).
pub const OPTIC_FADING_NIC: (usize, usize) = (1, 2);
/// `pcie-half-width`: the NIC whose PCIe link trained at x8 of x16 (gpu-node-01's mlx5_1).
pub const PCIE_HALF_WIDTH_NIC: (usize, usize) = (0, 1);
/// `gray-nic`: the NIC worse than its rail peers on several signals (gpu-node-03's mlx5_1: a
/// third host, so that its rail has peers enough for a median).
pub const GRAY_NIC: (usize, usize) = (2, 1);
/// `ber-climbing`: the NIC whose link's pre-FEC bit error rate climbs (gpu-node-02's mlx5_4).
pub const BER_CLIMBING_NIC: (usize, usize) = (1, 4);
/// Pre-FEC bit error rate of a healthy link: FEC corrects 1 bit in 1e9 (`sim/fec.rs`).
pub const HEALTHY_PRE_FEC_BER: f64 = 1e-9;
/// Where `ber-climbing`'s BER stops: under RdmaHighBitErrorRate's 1e-5, so that only the trend
/// speaks.
pub const CLIMBED_PRE_FEC_BER: f64 = 3e-6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioName {
    /// Steady all-reduce near line rate: some ECN marks, no PFC.
    Healthy,
    /// One NIC stops draining and pauses its switch port without end; the pause spreads to the
    /// senders behind that switch; pause storm warning, then error events.
    PfcStorm,
    /// ECN threshold above the PFC threshold: PFC pauses climb while ECN marks stay near zero.
    EcnTooHigh,
    /// ECN threshold far too low: no PFC, many marks and CNPs, throughput far below line rate.
    EcnTooLow,
    /// One NIC's link goes down for 5 s every 30 s.
    LinkFlap,
    /// ECN/DCQCN not enabled on one NIC (its reaction point off on the RoCE priority): it
    /// ignores the CNPs its receivers send.
    CnpIgnored,
    /// One NIC's connections see out-of-sequence packets, sequence errors and ACK timeouts.
    TransportErrors,
    /// The InfiniBand subnet (`/ib/metrics`) healthy: every link 4X NDR, no errors.
    IbHealthy,
    /// One leaf-spine InfiniBand link retrains at 2X instead of 4X, with symbol errors.
    IbDegradedLink,
    /// A spine port of the InfiniBand subnet congested: PortXmitWait rising, its feeders busy.
    IbCongestion,
    /// One leaf-to-spine link of the RoCE fabric drops 2 % of the packets it carries, silently:
    /// no error counter moves; only the probes whose flows hash onto it lose.
    LeafSpineLoss,
    /// One NIC's optic fades: half the frames it sends and half of those it receives are lost
    /// (three round trips in four through it fail); its symbol and receive error counters creep
    /// up, its link stays up.
    NicOpticFailure,
    /// One leaf sends every packet that ECMP hashes onto one spine into a black hole (an uplink
    /// it did not withdraw): the probes leaving it for another leaf on that member are lost,
    /// nothing else is, and no counter moves.
    LeafEcmpBlackhole,
    /// One host's CPU is busy: its responders see each probe ~20 ms after it arrived and answer
    /// that late. The responders' delay rises, the network RTT (that delay taken out) does not,
    /// no probe is lost and no counter moves.
    HostCpuLoad,
    /// One NIC's optic receives less and less light (a dirty connector): its module's received
    /// power sinks through the module's own low warning threshold on every lane.
    OpticFading,
    /// One NIC's PCIe link trained at x8 in its x16 slot (at boot, so from the start): half the
    /// host bandwidth, no error counter moves.
    PcieHalfWidth,
    /// A gray failure: one NIC, from the start, worse than its rail peers on several signals
    /// while every threshold stays quiet: a few transport errors a second, three times its
    /// peers' CNPs, paused 4.5 % of the time, twenty times their FEC corrections, 2.6 dB less
    /// light.
    GrayNic,
    /// One link's pre-FEC bit error rate climbs tenfold a minute from the fault's start until
    /// it settles under the alert threshold (FEC still corrects all of it): only its trend
    /// says the link is failing.
    BerClimbing,
    /// Two faults at once: gpu-node-01 mlx5_5's optic fades as in `nic-optic-failure` (half
    /// the frames it sends and half those it receives lost, its symbol and receive errors
    /// creeping up) while leaf1's uplink to spine-02 drops 2 % of what it carries, silently, as
    /// in `leaf-spine-loss`. Both are to be named, and nothing else.
    TwoFaults,
}

impl ScenarioName {
    pub const ALL: [ScenarioName; 19] = [
        ScenarioName::Healthy,
        ScenarioName::PfcStorm,
        ScenarioName::EcnTooHigh,
        ScenarioName::EcnTooLow,
        ScenarioName::LinkFlap,
        ScenarioName::CnpIgnored,
        ScenarioName::TransportErrors,
        ScenarioName::IbHealthy,
        ScenarioName::IbDegradedLink,
        ScenarioName::IbCongestion,
        ScenarioName::LeafSpineLoss,
        ScenarioName::NicOpticFailure,
        ScenarioName::LeafEcmpBlackhole,
        ScenarioName::HostCpuLoad,
        ScenarioName::OpticFading,
        ScenarioName::PcieHalfWidth,
        ScenarioName::GrayNic,
        ScenarioName::BerClimbing,
        ScenarioName::TwoFaults,
    ];

    /// The name as given on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ScenarioName::Healthy => "healthy",
            ScenarioName::PfcStorm => "pfc-storm",
            ScenarioName::EcnTooHigh => "ecn-too-high",
            ScenarioName::EcnTooLow => "ecn-too-low",
            ScenarioName::LinkFlap => "link-flap",
            ScenarioName::CnpIgnored => "cnp-ignored",
            ScenarioName::TransportErrors => "transport-errors",
            ScenarioName::IbHealthy => "ib-healthy",
            ScenarioName::IbDegradedLink => "ib-degraded-link",
            ScenarioName::IbCongestion => "ib-congestion",
            ScenarioName::LeafSpineLoss => "leaf-spine-loss",
            ScenarioName::NicOpticFailure => "nic-optic-failure",
            ScenarioName::LeafEcmpBlackhole => "leaf-ecmp-blackhole",
            ScenarioName::HostCpuLoad => "host-cpu-load",
            ScenarioName::OpticFading => "optic-fading",
            ScenarioName::PcieHalfWidth => "pcie-half-width",
            ScenarioName::GrayNic => "gray-nic",
            ScenarioName::BerClimbing => "ber-climbing",
            ScenarioName::TwoFaults => "two-faults",
        }
    }

    /// What an operator should see in the metrics during the fault.
    pub fn signature(self) -> &'static str {
        match self {
            ScenarioName::Healthy => "rdma_hw_np_ecn_marked_roce_packets_total and rdma_hw_np_cnp_sent_total rise slowly; rdma_pfc_pause_duration_seconds_total flat; ~92% of line rate",
            ScenarioName::PfcStorm => "gpu-node-01 mlx5_2: tx pause duration rises at 1 s/s, pause storm warning then error events; its leaf port's rx PFC frames climb; senders on that leaf are paused (rx pause) and slow down",
            ScenarioName::EcnTooHigh => "rx pause duration on every NIC rises (~15% of the time), switch ports send PFC, ECN marks and CNPs near zero",
            ScenarioName::EcnTooLow => "no PFC; ECN marks and CNPs ~40x healthy; throughput ~35% of line rate",
            ScenarioName::LinkFlap => "gpu-node-02 mlx5_5: port state DOWN 5 s of every 30 s, link_downed and link_down_events_phy count up, switch port oper status 2",
            ScenarioName::CnpIgnored => "gpu-node-02 mlx5_1: rdma_ecn_enabled{point=\"reaction\",priority=\"3\"} 0 (ECN reaction point off), rdma_hw_rp_cnp_ignored_total rises instead of rp_cnp_handled",
            ScenarioName::TransportErrors => "gpu-node-02 mlx5_0: out_of_sequence, packet_seq_err and local_ack_timeout_err rise",
            ScenarioName::IbHealthy => "/ib/metrics: every rdma_ib_link_width_active_lanes 4 and speed 100 Gb/s per lane, error counters flat, PortXmitWait near zero",
            ScenarioName::IbDegradedLink => "/ib/metrics: ib-leaf-01's first uplink to ib-spine-02 (both ends) active 2X of 4X enabled, symbol errors ~12/s, link downed +1 at the fault's start and end",
            ScenarioName::IbCongestion => "/ib/metrics: ib-spine-01's port to ib-leaf-02 waits 45% of the time (PortXmitWait), the leaves' uplinks into ib-spine-01 run at 97% with some wait",
            ScenarioName::LeafSpineLoss => "no counter moves; probes between the leaves whose flow label hashes onto leaf1's uplink to spine-02 lose 2 % (rdma_probe_lost_total, path host and cross_rail; rdma_probe_target_lost_total names the targets)",
            ScenarioName::NicOpticFailure => "gpu-node-02 mlx5_3: ~75 % of the probes to and from it lost (rdma_probe_lost_total on its own paths, rdma_probe_target_lost_total naming it from every host), symbol errors and port_rcv_errors creep up (~2/s, ~1/s), link stays up",
            ScenarioName::LeafEcmpBlackhole => "no counter moves; every probe leaving leaf2 for another leaf whose flow label hashes onto spine-02 is lost (~half of the host and cross_rail probes from leaf2's NICs to other leaves); nothing into leaf2 or inside a leaf is lost",
            ScenarioName::HostCpuLoad => "gpu-node-02's responders answer ~20 ms late: its rdma_probe_answer_delay_seconds ~0.02, every other host's network RTT toward it unchanged (6-12 µs), no probe lost, no counter moves",
            ScenarioName::OpticFading => "gpu-node-02 mlx5_2: rdma_transceiver_rx_power_watts of every lane sinks from ~0.7 mW to 95 µW over the first fault's first half (60-150 s) and stays there: under its module's rdma_transceiver_rx_power_threshold_watts{level=\"low_warning\"} (112.2 µW) from ~142 s, over its low alarm (89.1 µW); RdmaTransceiverRxPowerLow fires 5 minutes later; no counter moves",
            ScenarioName::PcieHalfWidth => "gpu-node-01 mlx5_1: rdma_pcie_link_width_lanes 8 of 16 (rdma_pcie_link_max_width_lanes 16 at both ends with node.pcie.detail), rdma_pcie_link_downtrained 1 from the start, RdmaPcieLinkDowntrained fires; no counter moves",
            ScenarioName::GrayNic => "gpu-node-03 mlx5_1, from the start, against the other hosts' mlx5_1: ~5 transport errors/s (out_of_sequence 4, packet_seq_err 0.8, local_ack_timeout_err 0.08: each under RdmaTransportErrors), 3x their rp_cnp_handled, rx pause 4.5 % of the time, 20x their FEC corrected bits, every lane 2.6 dB less light; no threshold alert fires, RdmaNicPeerOutlier does (needs 3 hosts or more)",
            ScenarioName::BerClimbing => "gpu-node-02 mlx5_4: rdma_fec_corrected_bit_errors_total over the bits received climbs from 1e-9 tenfold a minute from 60 s and settles at 3e-6 (~270 s), under RdmaHighBitErrorRate's 1e-5, and stays; rdma:link_health names ber_trend, RdmaLinkTrendingToFailure fires",
            ScenarioName::TwoFaults => "two faults at once: gpu-node-01 mlx5_5 loses ~75 % of the probes to and from it (its optic; symbol and receive errors creep up, ~2/s, ~1/s, link up), and the probes between leaf1 and the other leaves whose flow label hashes onto leaf1's uplink to spine-02 lose 2 % (no counter moves); localization names that NIC and leaf1's uplinks, nothing else (needs 6 NICs a host, and --leaves 3 or more to tell leaf1's uplinks from the others')",
        }
    }
}

/// What one NIC (and hence its switch port) goes through during a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NicCondition {
    pub link_up: bool,
    /// Share of line rate the NIC would send if never paused.
    pub utilization: f64,
    /// Share of the time the switch pauses this NIC (PFC it receives).
    pub paused_by_switch: f64,
    /// Share of the time this NIC pauses the switch (PFC it sends).
    pub pausing_switch: f64,
    /// Share of the packets this NIC receives that the switch queue ECN-marked.
    pub ecn_mark_fraction: f64,
    /// DCQCN off on this NIC: CNPs for its traffic are ignored, not handled.
    pub ignores_cnps: bool,
    pub transport_errors_per_s: f64,
    /// Physical errors per second on the NIC's receive side (a failing optic or cable).
    pub link_errors_per_s: f64,
    /// Packets the switch drops per second on the queue toward this NIC.
    pub switch_drops_per_s: f64,
    /// How far the NIC's optic has faded (0 healthy, 1 its received power at its floor).
    pub optic_rx_fade: f64,
    /// Share of the packets this NIC sends that queues on their way mark, besides the
    /// receiver's own queue (`ecn_mark_fraction`): its flows cross a congested path, so it
    /// handles more CNPs than its peers.
    pub tx_ecn_mark_fraction: f64,
    /// Bits FEC corrects per bit this NIC receives.
    pub pre_fec_ber: f64,
}

const HEALTHY: NicCondition = NicCondition {
    link_up: true,
    utilization: 0.92,
    paused_by_switch: 0.0,
    pausing_switch: 0.0,
    ecn_mark_fraction: 2e-4,
    ignores_cnps: false,
    transport_errors_per_s: 0.0,
    link_errors_per_s: 0.0,
    switch_drops_per_s: 0.0,
    optic_rx_fade: 0.0,
    tx_ecn_mark_fraction: 0.0,
    pre_fec_ber: HEALTHY_PRE_FEC_BER,
};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scenario {
    pub name: ScenarioName,
    /// The fabric's shape, to find a NIC's leaf and its upstream sender.
    pub hosts: usize,
    pub leaves: usize,
}

impl Scenario {
    /// The scenario on the default fabric shape; `Fabric::new` sets the real one.
    pub fn new(name: ScenarioName) -> Scenario {
        Scenario {
            name,
            hosts: 4,
            leaves: 2,
        }
    }

    /// Whether the fault is on at simulated time `t`.
    pub fn in_fault(t: f64) -> bool {
        let phase = t % CYCLE_S;
        (FAULT_START_S..FAULT_END_S).contains(&phase)
    }

    /// The condition of NIC `nic` of host `host` at simulated time `t`.
    pub fn condition(&self, t: f64, host: usize, nic: usize) -> NicCondition {
        // A small, deterministic wobble so that graphs look alive.
        let wobble = 1.0 + 0.03 * (t / 7.0 + host as f64 * 1.3 + nic as f64 * 0.7).sin();
        let mut c = NicCondition {
            utilization: HEALTHY.utilization * wobble,
            ..HEALTHY
        };
        // A dirty connector does not clean itself: the module's received power sinks over the
        // first fault's first half and stays there (`sim/optics.rs`), long enough for the
        // alerts' `for` windows.
        if self.name == ScenarioName::OpticFading && (host, nic) == OPTIC_FADING_NIC {
            let half_fault = (FAULT_END_S - FAULT_START_S) / 2.0;
            c.optic_rx_fade = ((t - FAULT_START_S) / half_fault).clamp(0.0, 1.0);
        }
        // A gray NIC is so from boot, and stays so.
        if self.name == ScenarioName::GrayNic && (host, nic) == GRAY_NIC {
            c.transport_errors_per_s = 4.0;
            c.tx_ecn_mark_fraction = 2.0 * HEALTHY.ecn_mark_fraction;
            c.paused_by_switch = 0.045;
            c.pre_fec_ber = 20.0 * HEALTHY_PRE_FEC_BER;
            c.optic_rx_fade = 0.3;
        }
        // A degrading link does not heal either: tenfold a minute from the first fault's
        // start, then steady under the alert threshold.
        if self.name == ScenarioName::BerClimbing && (host, nic) == BER_CLIMBING_NIC {
            let decades = ((t - FAULT_START_S) / 60.0).max(0.0);
            c.pre_fec_ber = (HEALTHY_PRE_FEC_BER * 10f64.powf(decades)).min(CLIMBED_PRE_FEC_BER);
        }
        if !Scenario::in_fault(t) {
            return c;
        }
        let me = (host, nic);
        match self.name {
            // The InfiniBand scenarios leave the RoCE hosts healthy (`ib_fabric.rs`).
            ScenarioName::Healthy
            | ScenarioName::IbHealthy
            | ScenarioName::IbDegradedLink
            | ScenarioName::IbCongestion
            // Silent by definition: the probes see them (`probing.rs`), no counter does.
            | ScenarioName::LeafSpineLoss
            | ScenarioName::LeafEcmpBlackhole
            | ScenarioName::HostCpuLoad
            // Fixed from boot: the fabric writes the link's width (`Fabric::new`).
            | ScenarioName::PcieHalfWidth
            // From boot, or from the first fault on: set above.
            | ScenarioName::GrayNic
            | ScenarioName::BerClimbing => {}
            // The probes see the loss (`probing.rs`); the optic's errors show on the NIC.
            ScenarioName::NicOpticFailure => {
                if me == FADING_OPTIC_NIC {
                    c.link_errors_per_s = 2.0;
                }
            }
            // The uplink is silent; the fading optic's errors show on its NIC.
            ScenarioName::TwoFaults => {
                if me == TWO_FAULTS_OPTIC_NIC {
                    c.link_errors_per_s = 2.0;
                }
            }
            // Set above, for all time after the first fault start.
            ScenarioName::OpticFading => {}
            ScenarioName::PfcStorm => {
                let (victim_host, victim_nic) = PFC_STORM_NIC;
                let leaves = self.leaves.max(1);
                // Ring all-reduce: a NIC receives from the same rail of the previous host.
                let feeder = (
                    (victim_host + self.hosts - 1) % self.hosts.max(1),
                    victim_nic,
                );
                if me == PFC_STORM_NIC {
                    // Its receive path is wedged: it pauses the switch all the time.
                    c.pausing_switch = 1.0;
                    c.ecn_mark_fraction = 0.0;
                } else if nic % leaves == victim_nic % leaves {
                    // Same leaf: the switch buffer fills behind the wedged port and the switch
                    // pauses the senders; the one feeding the victim almost all the time.
                    c.paused_by_switch = if me == feeder { 0.97 } else { 0.45 };
                    c.ecn_mark_fraction = 0.0;
                }
            }
            ScenarioName::EcnTooHigh => {
                c.paused_by_switch = 0.15;
                c.ecn_mark_fraction = 1e-7;
                c.utilization *= 0.9;
            }
            ScenarioName::EcnTooLow => {
                c.ecn_mark_fraction = 8e-3;
                c.utilization = 0.35 * wobble;
            }
            ScenarioName::LinkFlap => {
                if me == FLAPPING_NIC && (t % 30.0) < 5.0 {
                    c.link_up = false;
                }
            }
            ScenarioName::CnpIgnored => {
                if me == CNP_IGNORING_NIC {
                    c.ignores_cnps = true;
                }
            }
            ScenarioName::TransportErrors => {
                if me == TRANSPORT_ERROR_NIC {
                    c.transport_errors_per_s = 400.0;
                }
            }
        }
        c
    }
}
