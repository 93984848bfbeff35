//! The `fec` collector end to end. The demo's hosts expose FEC through it: each simulated NIC's
//! FEC_GET answer is written beside its statistics (`src/sim/fec.rs`) and decoded as the
//! kernel's. A healthy fabric corrects a little and loses nothing; the failing optic of
//! `nic-optic-failure` loses blocks on its own NIC only. The flags, on the bundled node.

use crate::common::{self, demo_hosts_samples, parse_exposition, Exporter, Sample, DEMO_HOSTS};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn demo(scenario: &str) -> Exporter {
    Exporter::start_subcommand(
        "demo",
        &["--scenario", scenario, "--speed", "10", "--start-at", "70"],
    )
}

/// `host device` -> value of `name`.
fn by_nic(samples: &[Sample], name: &str) -> BTreeMap<String, f64> {
    common::demo_values_by_nic(samples, name)
        .into_iter()
        .collect()
}

/// Samples once every host has served FEC series, then again `apart` later, and after that
/// until `moved(before, after)` (for at most 30 s): the FEC thread reads on its own interval,
/// which a loaded machine stretches, so the second reading waits for what the test looks at.
fn two_readings(
    demo: &Exporter,
    apart: Duration,
    moved: impl Fn(&[Sample], &[Sample]) -> bool,
) -> (Vec<Sample>, Vec<Sample>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let before = loop {
        let samples = demo_hosts_samples(demo);
        let hosts_with_fec = by_nic(&samples, "rdma_fec_corrected_bit_errors_total")
            .keys()
            .map(|k| k.split(' ').next().unwrap().to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        if hosts_with_fec == DEMO_HOSTS.len() {
            break samples;
        }
        assert!(Instant::now() < deadline, "no FEC series from every host");
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(apart);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let after = demo_hosts_samples(demo);
        if moved(&before, &after) || Instant::now() > deadline {
            return (before, after);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How many NICs' `name` grew from `before` to `after`, and of how many.
fn grown(before: &[Sample], after: &[Sample], name: &str) -> (usize, usize) {
    let (before, after) = (by_nic(before, name), by_nic(after, name));
    let grew = after
        .iter()
        .filter(|(nic, v)| before.get(*nic).is_some_and(|b| *v > b))
        .count();
    (grew, after.len())
}

#[test]
fn healthy_hosts_correct_a_little_and_lose_nothing() {
    let demo = demo("healthy");
    let (before, after) = two_readings(&demo, Duration::from_secs(3), |before, after| {
        let (grew, of) = grown(before, after, "rdma_fec_corrected_bit_errors_total");
        grew * 2 > of
    });
    let roce_ports = after
        .iter()
        .filter(|s| s.name == "rdma_port_info" && s.labels["link_layer"] == "Ethernet")
        .count();
    assert!(roce_ports >= DEMO_HOSTS.len(), "{roce_ports}");
    for name in [
        "rdma_fec_corrected_bit_errors_total",
        "rdma_fec_corrected_blocks_total",
        "rdma_fec_uncorrectable_blocks_total",
        "rdma_fec_mode_info",
    ] {
        assert_eq!(
            by_nic(&after, name).len(),
            roce_ports,
            "{name} on every RoCE port"
        );
    }
    assert!(after
        .iter()
        .filter(|s| s.name == "rdma_fec_mode_info")
        .all(|s| s.labels["mode"] == "rs" && s.labels.contains_key("netdev")));
    assert!(by_nic(&after, "rdma_fec_uncorrectable_blocks_total")
        .values()
        .all(|v| *v == 0.0));
    assert!(common::matching(
        &after,
        "rdma_exporter_collector_success",
        &[("collector", "fec")]
    )
    .all(|s| s.value == 1.0));
    // Corrected bits rise slowly with the traffic: below 1e-6 of the bits received, never down.
    let (bits_before, bits_after) = (
        by_nic(&before, "rdma_fec_corrected_bit_errors_total"),
        by_nic(&after, "rdma_fec_corrected_bit_errors_total"),
    );
    let (rx_before, rx_after) = (
        by_nic(&before, "rdma_port_rcv_data_bytes_total"),
        by_nic(&after, "rdma_port_rcv_data_bytes_total"),
    );
    let mut rising = 0;
    for (nic, after) in &bits_after {
        let grew = after - bits_before[nic];
        assert!(grew >= 0.0, "{nic}");
        let received_bits = (rx_after[nic] - rx_before[nic]) * 8.0;
        assert!(
            grew <= received_bits * 1e-6 + 1.0,
            "{nic}: {grew} of {received_bits}"
        );
        rising += usize::from(grew > 0.0);
    }
    assert!(
        rising * 2 > bits_after.len(),
        "most links correct some bits: {rising}"
    );
}

#[test]
fn the_failing_optic_loses_blocks_on_its_own_nic_only() {
    let demo = demo("nic-optic-failure");
    let (before, after) = two_readings(&demo, Duration::from_secs(3), |before, after| {
        grown(before, after, "rdma_fec_uncorrectable_blocks_total").0 > 0
    });
    let (lost_before, lost_after) = (
        by_nic(&before, "rdma_fec_uncorrectable_blocks_total"),
        by_nic(&after, "rdma_fec_uncorrectable_blocks_total"),
    );
    let losing: Vec<&String> = lost_after
        .iter()
        .filter(|(nic, v)| **v > lost_before[*nic])
        .map(|(nic, _)| nic)
        .collect();
    assert_eq!(losing, ["gpu-node-02 mlx5_3"], "{lost_after:?}");
}

/// The flags on the bundled node (its `<netdev>.fec` files): off, the opt-in series, and no FEC
/// without driver statistics.
#[test]
fn the_collector_flags_turn_it_off_and_add_the_bins() {
    let cx7 = common::project_root().join("tests/fixtures/cx7-roce");
    let (sys, ethtool) = (cx7.join("sys"), cx7.join("ethtool"));
    let base = ["--no-collector.pfc-storm", "--no-collector.netlink"];
    let scrape = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        parse_exposition(&Exporter::on_node(&sys, &ethtool, &args).metrics())
    };
    let off = scrape(&["--no-collector.fec"]);
    assert!(off.iter().all(|s| !s.name.starts_with("rdma_fec_")
        && s.labels.get("collector").map(String::as_str) != Some("fec")));
    let detailed = scrape(&["--collector.fec.per-lane", "--collector.fec.histogram"]);
    let bins = common::matching(
        &detailed,
        "rdma_fec_histogram_codewords_total",
        &[("device", "mlx5_0")],
    )
    .count();
    assert_eq!(bins, 16, "RS(544,514): 0 to 15 bit errors per codeword");
    // RS-FEC corrects across lanes: totals only, so no lane series even when asked.
    assert!(detailed
        .iter()
        .all(|s| !s.name.starts_with("rdma_fec_lane_")));
    // Asked for without driver statistics: refused before listening (port 1 is never bound).
    let (code, _, stderr) = common::run(&[
        "serve",
        "--web.listen-address",
        "127.0.0.1:1",
        "--no-collector.ethtool",
        "--collector.fec",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--collector.fec reads beside the driver statistics"),
        "{stderr}"
    );
}
