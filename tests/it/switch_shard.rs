//! Switch polling split over two replicas of the poller (issue 18, item 4): a real Prometheus
//! with the shipped sharded scrape config (`deploy/prometheus/scrape-config-sharded.yml`), two
//! exporters sharing one config with `--switch.shard 0/2` and `1/2`, eight SNMP agents. Every
//! switch is scraped by exactly one job, polled by exactly one replica (its `/metrics`, and the
//! requests its agent saw), and the replica of the other shard refuses it.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::prometheus::{self, wait_for};
use common::snmp_agent::{start_agent, udp_peer, UdpPeer};
use common::*;
use rdma_fabric_exporter::switch::shard::hashmod;

const SWITCHES: [&str; 8] = [
    "leaf1", "leaf2", "leaf3", "leaf4", "leaf5", "leaf6", "spine1", "spine2",
];

/// The shipped config with the test's replicas, switches and 1 s intervals.
fn scrape_config(replicas: &[&Exporter; 2]) -> String {
    let shipped =
        std::fs::read_to_string(project_root().join("deploy/prometheus/scrape-config-sharded.yml"))
            .unwrap();
    let targets = "[leaf1, leaf2, leaf3, leaf4, spine1, spine2]";
    assert!(shipped.contains(targets), "the shipped target list moved");
    let mut config = shipped
        .replace(targets, &format!("[{}]", SWITCHES.join(", ")))
        .replace("scrape_interval: 30s", "scrape_interval: 1s")
        .replace("scrape_timeout: 25s", "scrape_timeout: 1s");
    for (i, replica) in replicas.iter().enumerate() {
        let shipped_address = format!("switch-poller-{i}.example.net:9866");
        assert!(config.contains(&shipped_address), "{shipped_address}");
        config = config.replace(&shipped_address, &replica.address);
    }
    format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n{config}")
}

/// Which scrape pool holds each active `/probe` target, from Prometheus' targets API.
fn pools_by_switch(prometheus: &str) -> BTreeMap<String, Vec<String>> {
    let targets: serde_json::Value =
        reqwest::blocking::get(format!("http://{prometheus}/api/v1/targets?state=active"))
            .unwrap()
            .json()
            .unwrap();
    let mut pools: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for target in targets["data"]["activeTargets"].as_array().unwrap() {
        let pool = target["scrapePool"].as_str().unwrap();
        if !pool.starts_with("rdma-switches-") {
            continue;
        }
        let switch = target["labels"]["instance"].as_str().unwrap();
        pools
            .entry(switch.to_string())
            .or_default()
            .push(pool.to_string());
    }
    pools
}

#[test]
fn two_replicas_cover_every_switch_exactly_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // One agent per switch, each behind a relay that counts the requests it gets.
    let mut agents = Vec::new();
    let mut peers: Vec<UdpPeer> = Vec::new();
    for _ in SWITCHES {
        let (agent, task) = runtime.block_on(start_agent());
        let relay: Arc<common::snmp_agent::Answer> = Arc::new(|_, relayed| relayed);
        peers.push(runtime.block_on(udp_peer(Some(agent.local_addr()), Duration::ZERO, relay)));
        agents.push((agent, task));
    }
    let dir = tempfile::tempdir().unwrap();
    let community = dir.path().join("community");
    std::fs::write(&community, "leaf1\n").unwrap();
    let mut config = String::from("node: {enabled: false}\nswitch_polling: on_demand\nswitches:\n");
    for (name, peer) in SWITCHES.iter().zip(&peers) {
        config.push_str(&format!(
            "  - {{name: {name}, address: '{}', profile: arista_eos, interval: 1s, timeout: 500ms, snmp: {{version: 2c, community_file: '{}'}}}}\n",
            peer.address,
            community.display()
        ));
    }
    let config_path = dir.path().join("config.yml");
    std::fs::write(&config_path, config).unwrap();
    let replica = |shard: &str| {
        Exporter::start(&[
            "--config.file",
            path_str(&config_path),
            "--switch.shard",
            shard,
        ])
    };
    let replicas = [replica("0/2"), replica("1/2")];
    let owner = |switch: &str| hashmod(switch, 2) as usize;
    let owned: Vec<usize> = (0..2)
        .map(|i| SWITCHES.iter().filter(|s| owner(s) == i).count())
        .collect();
    assert!(
        owned.iter().all(|&n| n > 0),
        "both shards hold switches: {owned:?}"
    );

    let (_prometheus, address) =
        prometheus::launch(dir.path(), &scrape_config(&[&replicas[0], &replicas[1]]));
    // Every switch up, and scraped a few times.
    let up = wait_for(
        &address,
        r#"up{job="rdma-switches"} == 1 and on (instance) count_over_time(up{job="rdma-switches"}[1m]) >= 3"#,
        Duration::from_secs(60),
        |v| v.len() == SWITCHES.len(),
    );
    let up_switches: BTreeSet<&str> = up.iter().map(|(l, _)| l["instance"].as_str()).collect();
    assert_eq!(up_switches, SWITCHES.into_iter().collect(), "{up:?}");

    // One `up` and one `rdma_switch_up` series per switch: no switch is scraped twice.
    for expr in [
        r#"count by (instance) (up{job="rdma-switches"})"#,
        r#"count by (switch) (rdma_switch_up{job="rdma-switches"} == 1)"#,
    ] {
        let counts = prometheus::query(&address, expr);
        assert_eq!(counts.len(), SWITCHES.len(), "{expr}: {counts:?}");
        assert!(counts.iter().all(|(_, n)| *n == 1.0), "{expr}: {counts:?}");
    }
    // The job that keeps each switch is the one of the replica that owns it by the exporter's
    // hash: Prometheus' hashmod and `--switch.shard` agree.
    let pools = pools_by_switch(&address);
    for switch in SWITCHES {
        assert_eq!(
            pools.get(switch),
            Some(&vec![format!("rdma-switches-{}", owner(switch))]),
            "{switch}: {pools:?}"
        );
    }

    // Stop the scrapes, then compare what each replica polled with what each agent saw.
    drop(_prometheus);
    std::thread::sleep(Duration::from_millis(300));
    let requests: Vec<u64> = peers
        .iter()
        .map(|p| p.requests.load(Ordering::Relaxed))
        .collect();
    for (i, replica) in replicas.iter().enumerate() {
        let samples = parse_exposition(&replica.metrics());
        for (switch, seen) in SWITCHES.iter().zip(&requests) {
            let polls = value_of(&samples, "rdma_switch_polls_total", &[("switch", switch)]);
            if owner(switch) == i {
                assert!(
                    polls.is_some_and(|n| n >= 3.0),
                    "{switch} on replica {i}: {polls:?}"
                );
                assert!(*seen >= 3, "{switch}: its agent saw {seen} requests");
            } else {
                assert_eq!(
                    polls, None,
                    "{switch} is not replica {i}'s, yet it polled it"
                );
            }
        }
    }

    // A probe at the wrong replica names the owner and sends the switch nothing.
    let switch = SWITCHES[0];
    let other = 1 - owner(switch);
    let before = peers[0].requests.load(Ordering::Relaxed);
    let (status, _, body) = replicas[other].get(&format!("/probe?target={switch}"));
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains(&format!("belongs to shard {}/2", owner(switch))),
        "{body}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(peers[0].requests.load(Ordering::Relaxed), before);
}
