//! Hostile switches next to healthy ones, through the real binary: an SNMP agent that answers
//! after the timeout, peers that answer garbage, gNMI servers that say nothing, hang up at once,
//! flood the same leaves, flood new leaves, or send one oversized message. Each is marked down
//! with a reason within a bounded time, the exporter's memory stays bounded, and the healthy
//! switches and the node metrics are served as before.
//!
//! The tests run one at a time, and beside no test of another module that loads the machine
//! (`common::exclusive`): they measure times and memory on a small machine.

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use common::gnmi_target::{serve, Behaviour, FakeSwitch, Transport};
use common::snmp_agent::{
    lying_length, start_agent, udp_peer, with_corrupt_varbinds, with_other_request_id, UdpPeer,
};
use common::*;

/// The leaf cap of the `sonic_capped` test profile.
const CAP: usize = 10_000;

/// Memory growth any hostile peer may cause (the exporter starts at about 25 MiB).
const MEMORY_BOUND_KIB: u64 = 64 * 1024;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The healthy switches every test runs next to: an SNMP leaf and a gNMI SONiC switch.
struct Fleet {
    runtime: tokio::runtime::Runtime,
    agent: async_snmp::agent::Agent,
    sonic_address: String,
    dir: tempfile::TempDir,
}

impl Fleet {
    fn start() -> Fleet {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (agent, _task) = runtime.block_on(start_agent());
        let sonic = FakeSwitch::new(None);
        let sonic_address = runtime.block_on(serve(sonic.clone(), Transport::Plain));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("community"), "leaf1\n").unwrap();
        // SONiC with a 10 000-leaf cap, so that a flood reaches it in a second.
        std::fs::create_dir(dir.path().join("profiles")).unwrap();
        std::fs::write(
            dir.path().join("profiles/sonic_capped.yml"),
            format!("name: sonic_capped\ndescription: SONiC, {CAP} leaves at most\nextends: sonic\ngnmi: {{max_leaves: {CAP}}}\n"),
        )
        .unwrap();
        Fleet {
            runtime,
            agent,
            sonic_address,
            dir,
        }
    }

    fn agent_address(&self) -> std::net::SocketAddr {
        self.agent.local_addr()
    }

    /// An SNMP v2c switch entry for the config, `extra` being YAML flow-map keys.
    fn snmp(&self, name: &str, address: &str, extra: &str) -> String {
        format!(
            "  - {{name: {name}, address: '{address}', profile: arista_eos, snmp: {{version: 2c, community_file: '{}'}}, {extra}}}\n",
            self.dir.path().join("community").display()
        )
    }

    /// A gNMI STREAM switch entry.
    fn gnmi(name: &str, address: &str, profile: &str, extra: &str) -> String {
        format!(
            "  - {{name: {name}, address: '{address}', protocol: gnmi, profile: {profile}, gnmi: {{mode: stream}}, {extra}}}\n"
        )
    }

    /// Starts the exporter on the fixture node with the healthy switches and `hostile` ones.
    fn exporter(&self, hostile: &[String]) -> Exporter {
        let mut text = format!(
            "switch_profiles_dir: '{}'\nswitches:\n",
            self.dir.path().join("profiles").display()
        );
        text.push_str(&self.snmp(
            "leaf1",
            &self.agent_address().to_string(),
            "interval: 1s, timeout: 300ms, retries: 0",
        ));
        text.push_str(&Fleet::gnmi(
            "sonic1",
            &self.sonic_address,
            "sonic",
            "interval: 1s, timeout: 500ms",
        ));
        for entry in hostile {
            text.push_str(entry);
        }
        let config = self.dir.path().join("config.yml");
        std::fs::write(&config, text).unwrap();
        Exporter::on_sysfs(
            &fixture("cx7-roce/sys"),
            &["--config.file", path_str(&config)],
        )
    }
}

fn up(samples: &[Sample], switch: &str) -> Option<f64> {
    value_of(samples, "rdma_switch_up", &[("switch", switch)])
}

fn errors(samples: &[Sample], switch: &str, reason: &str) -> f64 {
    value_of(
        samples,
        "rdma_switch_poll_errors_total",
        &[("switch", switch), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

/// Reasons of `switch`'s errors, for failure messages.
fn reasons(samples: &[Sample], switch: &str) -> Vec<(String, f64)> {
    matching(
        samples,
        "rdma_switch_poll_errors_total",
        &[("switch", switch)],
    )
    .map(|s| (s.labels["reason"].clone(), s.value))
    .collect()
}

fn last_success(samples: &[Sample], switch: &str) -> Option<f64> {
    value_of(
        samples,
        "rdma_switch_last_success_timestamp_seconds",
        &[("switch", switch)],
    )
}

/// The healthy switches are up with data from the last few seconds, and the node is served.
fn assert_healthy(samples: &[Sample]) {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for switch in ["leaf1", "sonic1"] {
        assert_eq!(up(samples, switch), Some(1.0), "{switch} is down");
        let age = now - last_success(samples, switch).expect("a success");
        // Polled every second: 5 s leaves room for a busy machine.
        assert!(age < 5.0, "{switch}'s last success is {age:.1} s old");
    }
    assert_eq!(
        value_of(
            samples,
            "rdma_port_state",
            &[("device", "mlx5_0"), ("port", "1")]
        ),
        Some(4.0),
        "the node metrics are served"
    );
}

/// RSS now and its peak since start, in KiB, once the peak is checked to have grown less than
/// the bound.
fn assert_memory_bounded(exporter: &Exporter, rss_before: u64) -> (u64, u64) {
    let rss_after = memory_kib(exporter.pid(), "VmRSS");
    let peak = memory_kib(exporter.pid(), "VmHWM");
    assert!(
        peak.saturating_sub(rss_before) < MEMORY_BOUND_KIB,
        "peaked at {peak} KiB from {rss_before} KiB"
    );
    (rss_after, peak)
}

/// `switch` failed for `reason` and for no other.
fn assert_only_reason(samples: &[Sample], switch: &str, reason: &str) {
    assert_eq!(
        reasons(samples, switch),
        [(reason.to_string(), errors(samples, switch, reason))],
        "{switch}"
    );
}

#[test]
fn an_snmp_agent_answering_after_the_timeout_is_down_within_its_retries() {
    let _exclusive = common::exclusive(module_path!());
    let _serial = serial();
    let fleet = Fleet::start();
    // Every answer of the real agent, 1.5 s late: after the 200 ms timeout and its one retry.
    let slow: UdpPeer = fleet.runtime.block_on(udp_peer(
        Some(fleet.agent_address()),
        Duration::from_millis(1500),
        Arc::new(|_, relayed| relayed),
    ));
    // A 2 s interval: were the poll bounded by the interval alone, it would take 2 s.
    let exporter = fleet.exporter(&[fleet.snmp(
        "slow",
        &slow.address,
        "interval: 2s, timeout: 200ms, retries: 1",
    )]);
    let (first, took) = wait_for_samples(
        &exporter,
        "a timeout on the slow switch",
        Duration::from_secs(10),
        |s| errors(s, "slow", "timeout") >= 1.0,
    );
    assert_eq!(up(&first, "slow"), Some(0.0));
    let (samples, _) = wait_for_samples(
        &exporter,
        "a second timeout",
        Duration::from_secs(10),
        |s| errors(s, "slow", "timeout") > errors(&first, "slow", "timeout"),
    );
    assert_eq!(up(&samples, "slow"), Some(0.0));
    assert_eq!(last_success(&samples, "slow"), None);
    // timeout x (retries + 1) = 400 ms; 3x for a busy machine, still well under the interval.
    let duration = value_of(
        &samples,
        "rdma_switch_poll_duration_seconds",
        &[("switch", "slow")],
    )
    .unwrap();
    assert!((0.35..1.2).contains(&duration), "poll took {duration} s");
    assert_only_reason(&samples, "slow", "timeout");
    // One request and one retry per poll, no more.
    let polls = errors(&samples, "slow", "timeout") as u64;
    let requests = slow.requests.load(Ordering::Relaxed);
    assert!(
        requests <= 2 * (polls + 1),
        "{requests} requests for {polls} polls"
    );
    assert_healthy(&samples);
    eprintln!("slow SNMP agent: down {took:?} after start, poll {duration:.3} s");
}

/// Deterministic junk.
fn junk(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn snmp_peers_answering_garbage_are_down_with_a_decode_reason() {
    let _exclusive = common::exclusive(module_path!());
    let _serial = serial();
    let fleet = Fleet::start();
    let agent = Some(fleet.agent_address());
    let peer = |relay: bool, answer: Arc<common::snmp_agent::Answer>| {
        let agent = if relay { agent } else { None };
        fleet
            .runtime
            .block_on(udp_peer(agent, Duration::ZERO, answer))
    };
    // Each answers every request at once, with: random bytes; a 60 KB datagram; a BER
    // message whose lengths claim 2 GB; the real answer with its varbind list mangled (its
    // request-id matches); the real answer with another request-id.
    let peers = [
        (
            "garbage",
            "decode",
            peer(false, Arc::new(|_, _| Some(junk(512)))),
        ),
        (
            "oversized",
            "decode",
            peer(false, Arc::new(|_, _| Some(vec![0x30; 60_000]))),
        ),
        (
            "lying",
            "decode",
            peer(false, Arc::new(|request, _| lying_length(request))),
        ),
        (
            "corrupt",
            "decode",
            peer(true, Arc::new(|_, relayed| with_corrupt_varbinds(relayed?))),
        ),
        // Indistinguishable from a late answer to an earlier request: a timeout.
        (
            "wrongid",
            "timeout",
            peer(true, Arc::new(|_, relayed| with_other_request_id(relayed?))),
        ),
    ];
    let timing = "interval: 1s, timeout: 300ms, retries: 1";
    let entries: Vec<String> = peers
        .iter()
        .map(|(name, _, peer)| fleet.snmp(name, &peer.address, timing))
        .collect();
    let exporter = fleet.exporter(&entries);
    let rss_before = memory_kib(exporter.pid(), "VmRSS");
    let (samples, took) = wait_for_samples(
        &exporter,
        "two failed polls of every garbage peer",
        Duration::from_secs(10),
        |s| {
            peers
                .iter()
                .all(|(name, reason, _)| errors(s, name, reason) >= 2.0)
        },
    );
    for (name, reason, peer) in &peers {
        assert_eq!(up(&samples, name), Some(0.0), "{name}");
        assert_only_reason(&samples, name, reason);
        // timeout x (retries + 1) = 600 ms; the interval would cut it at 1 s.
        let duration = value_of(
            &samples,
            "rdma_switch_poll_duration_seconds",
            &[("switch", name)],
        )
        .unwrap();
        assert!((0.5..0.99).contains(&duration), "{name}: {duration} s");
        assert!(
            peer.requests.load(Ordering::Relaxed) > 0,
            "{name} was asked"
        );
    }
    assert_healthy(&samples);
    let growth = memory_kib(exporter.pid(), "VmRSS").saturating_sub(rss_before);
    assert!(growth < MEMORY_BOUND_KIB, "grew by {growth} KiB");
    eprintln!("garbage SNMP peers: two failed polls each within {took:?}; RSS +{growth} KiB");
}

/// A TCP peer that accepts connections and never says a word, not even HTTP/2; returns its
/// address and the number of connections it took.
fn mute_peer(runtime: &tokio::runtime::Runtime) -> (String, Arc<std::sync::atomic::AtomicU64>) {
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                held.push(socket);
            }
        });
        (address, accepted)
    })
}

/// A fake gNMI switch behaving as `behaviour`, served on the fleet's runtime.
fn hostile_switch(fleet: &Fleet, behaviour: Behaviour) -> (FakeSwitch, String) {
    let switch = FakeSwitch::new(None);
    switch.set(behaviour);
    let address = fleet
        .runtime
        .block_on(serve(switch.clone(), Transport::Plain));
    (switch, address)
}

#[test]
fn gnmi_servers_that_say_nothing_or_hang_up_are_retried_with_backoff() {
    let _exclusive = common::exclusive(module_path!());
    let _serial = serial();
    let fleet = Fleet::start();
    // Accepts the subscription, never sends an update or a sync response.
    let (silent, silent_address) = hostile_switch(&fleet, Behaviour::Silent);
    // Sends every sample, never the sync response that completes it.
    let (nosync, nosync_address) = hostile_switch(&fleet, Behaviour::NoSync);
    // Ends every subscription as soon as it is opened.
    let (closing, closing_address) = hostile_switch(&fleet, Behaviour::CloseAtOnce);
    let (mute_address, mute_connections) = mute_peer(&fleet.runtime);
    let timing = "interval: 1s, timeout: 500ms";
    let exporter = fleet.exporter(&[
        Fleet::gnmi("silent", &silent_address, "sonic", timing),
        Fleet::gnmi("nosync", &nosync_address, "sonic", timing),
        Fleet::gnmi("closing", &closing_address, "sonic", timing),
        Fleet::gnmi("mute", &mute_address, "sonic", timing),
    ]);
    let started = Instant::now();
    // Silence for two intervals and the timeout (2.5 s), checked each interval, after a start
    // offset of up to one interval: about 4 s.
    let (samples, stalled) = wait_for_samples(
        &exporter,
        "the silent streams declared stalled",
        Duration::from_secs(12),
        |s| {
            errors(s, "silent", "stalled") >= 1.0
                && errors(s, "nosync", "stalled") >= 1.0
                && errors(s, "closing", "stream_closed") >= 1.0
                && errors(s, "mute", "timeout") >= 1.0
        },
    );
    for (name, reason) in [
        ("silent", "stalled"),
        ("nosync", "stalled"),
        ("closing", "stream_closed"),
        ("mute", "timeout"),
    ] {
        assert_eq!(up(&samples, name), Some(0.0), "{name}");
        assert_only_reason(&samples, name, reason);
    }
    // Ten seconds of retries: the backoff (0.5 s doubling, jittered) allows about five
    // attempts; a hot loop would make thousands.
    std::thread::sleep(Duration::from_secs(10).saturating_sub(started.elapsed()));
    let (samples, _) = timed_scrape(&exporter);
    let counts = [
        (
            "silent",
            silent.subscribed_at.lock().unwrap().len() as u64,
            6,
        ),
        (
            "nosync",
            nosync.subscribed_at.lock().unwrap().len() as u64,
            6,
        ),
        (
            "closing",
            closing.subscribed_at.lock().unwrap().len() as u64,
            8,
        ),
        ("mute", mute_connections.load(Ordering::Relaxed), 8),
    ];
    for (name, count, bound) in counts {
        assert!(
            (2..=bound).contains(&count),
            "{name}: {count} attempts in 10 s"
        );
        assert_eq!(up(&samples, name), Some(0.0), "{name}");
    }
    assert_healthy(&samples);
    eprintln!("silent gNMI: stalled {stalled:?} after start; attempts in 10 s: {counts:?}");
}

#[test]
fn a_gnmi_flood_of_the_same_leaves_leaves_memory_and_the_other_switches_alone() {
    let _exclusive = common::exclusive(module_path!());
    let _serial = serial();
    let fleet = Fleet::start();
    let (flood, flood_address) = hostile_switch(&fleet, Behaviour::FloodSame);
    let exporter = fleet.exporter(&[Fleet::gnmi(
        "flood",
        &flood_address,
        "sonic",
        "interval: 1s, timeout: 500ms",
    )]);
    wait_for_samples(&exporter, "every switch up", Duration::from_secs(10), |s| {
        ["leaf1", "sonic1", "flood"]
            .iter()
            .all(|n| up(s, n) == Some(1.0))
    });
    let rss_before = memory_kib(exporter.pid(), "VmRSS");
    let sent_before = flood.notifications_sent.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut last = Vec::new();
    while started.elapsed() < Duration::from_secs(8) {
        let (samples, took) = timed_scrape(&exporter);
        slowest = slowest.max(took);
        assert_healthy(&samples);
        last = samples;
        std::thread::sleep(Duration::from_millis(200));
    }
    let sent = flood.notifications_sent.load(Ordering::Relaxed) - sent_before;
    let (rss_after, peak) = assert_memory_bounded(&exporter, rss_before);
    // It was a flood: thousands of messages a second (one sample is six).
    assert!(sent > 5_000, "only {sent} notifications");
    assert!(
        slowest < Duration::from_secs(5),
        "a scrape took {slowest:?}"
    );
    let growth = rss_after.saturating_sub(rss_before);
    assert!(growth < MEMORY_BOUND_KIB, "grew by {growth} KiB");
    // The flood is of valid data: the switch stays up, on one subscription.
    assert_eq!(up(&last, "flood"), Some(1.0));
    assert!(
        reasons(&last, "flood").is_empty(),
        "{:?}",
        reasons(&last, "flood")
    );
    assert_eq!(flood.subscribed_at.lock().unwrap().len(), 1);
    eprintln!(
        "flood of the same leaves: {sent} notifications in {:?}; RSS {rss_before} -> {rss_after} KiB (peak {peak}); slowest scrape {slowest:?}",
        started.elapsed()
    );
}

#[test]
fn a_gnmi_flood_of_new_leaves_is_cut_off_at_the_cap() {
    let _exclusive = common::exclusive(module_path!());
    let _serial = serial();
    let fleet = Fleet::start();
    // A stream that syncs, then sends new leaves without end; and one that never syncs, read
    // with Subscribe ONCE.
    let (flood, flood_address) = hostile_switch(&fleet, Behaviour::FloodNew { sync_first: true });
    let (_, once_address) = hostile_switch(&fleet, Behaviour::FloodNew { sync_first: false });
    let timing = "interval: 1s, timeout: 500ms";
    let exporter = fleet.exporter(&[
        Fleet::gnmi("flood", &flood_address, "sonic_capped", timing),
        format!(
            "  - {{name: once, address: '{once_address}', protocol: gnmi, profile: sonic_capped, gnmi: {{mode: once}}, interval: 2s, timeout: 1500ms}}\n"
        ),
    ]);
    let rss_before = memory_kib(exporter.pid(), "VmRSS");
    let (samples, took) = wait_for_samples(
        &exporter,
        "both floods cut off",
        Duration::from_secs(10),
        |s| {
            errors(s, "flood", "too_many_leaves") >= 1.0
                && errors(s, "once", "too_many_leaves") >= 1.0
                && up(s, "flood") == Some(0.0)
        },
    );
    assert_eq!(up(&samples, "once"), Some(0.0));
    // The stream reconnects with a growing backoff (0.5 s doubling, jittered), even though
    // each of its sessions delivered its first sync: not every half second.
    let deadline = Instant::now() + Duration::from_secs(15);
    while flood.subscribed_at.lock().unwrap().len() < 5 {
        assert!(Instant::now() < deadline, "fewer than 5 subscriptions");
        std::thread::sleep(Duration::from_millis(100));
    }
    let at = flood.subscribed_at.lock().unwrap().clone();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // The fourth backoff is 4 s x 0.8 at least; without it 0.6 s and the flood.
    assert!(gaps[3] > Duration::from_secs(3), "{gaps:?}");
    let (samples, _) = timed_scrape(&exporter);
    for name in ["flood", "once"] {
        assert!(errors(&samples, name, "too_many_leaves") >= 2.0, "{name}");
        assert_only_reason(&samples, name, "too_many_leaves");
    }
    assert_healthy(&samples);
    let (rss_after, peak) = assert_memory_bounded(&exporter, rss_before);
    eprintln!(
        "flood of new leaves: cut off {took:?} after start; subscription gaps {gaps:?}; RSS {rss_before} -> {rss_after} KiB (peak {peak})"
    );
}

#[test]
fn oversized_gnmi_messages_are_refused_unparsed() {
    let _exclusive = common::exclusive(module_path!());
    let _serial = serial();
    let fleet = Fleet::start();
    // One 65 MiB message, past the 64 MiB cap, as the first answer of every subscription.
    let (huge, huge_address) = hostile_switch(&fleet, Behaviour::Oversized(65 << 20));
    // A 4 MiB document (within the message cap) of 300 000 values, to a 10 000-leaf cap.
    let (big, big_address) = hostile_switch(&fleet, Behaviour::Oversized(4 << 20));
    // The timeout leaves room to build and send 65 MiB on a loaded machine: a poll that runs
    // out of time is `stalled`, not the refusal this test is about.
    let timing = "interval: 3s, timeout: 2s";
    let exporter = fleet.exporter(&[
        Fleet::gnmi("huge", &huge_address, "sonic", timing),
        Fleet::gnmi("big", &big_address, "sonic_capped", timing),
    ]);
    let rss_before = memory_kib(exporter.pid(), "VmRSS");
    let (samples, took) = wait_for_samples(
        &exporter,
        "the oversized messages refused",
        Duration::from_secs(30),
        |s| errors(s, "huge", "grpc_error") >= 2.0 && errors(s, "big", "too_many_leaves") >= 2.0,
    );
    assert_eq!(up(&samples, "big"), Some(0.0));
    assert_only_reason(&samples, "big", "too_many_leaves");
    assert_eq!(up(&samples, "huge"), Some(0.0));
    assert_only_reason(&samples, "huge", "grpc_error");
    assert!(
        exporter.logs().contains("decoded message length too large"),
        "the log says why"
    );
    assert_healthy(&samples);
    let (rss_after, peak) = assert_memory_bounded(&exporter, rss_before);
    eprintln!(
        "oversized messages: each refused twice {took:?} after start ({} and {} subscriptions); RSS {rss_before} -> {rss_after} KiB (peak {peak})",
        huge.subscribed_at.lock().unwrap().len(),
        big.subscribed_at.lock().unwrap().len()
    );
}
