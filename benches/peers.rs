//! Peer discovery at fleet size: what one agent asks of the others over an hour, and what the
//! fleet's agents ask of each other in all, against asking every agent every minute.
//!
//! `cargo bench --bench peers`. BENCH_HOSTS hosts (default 10 000) of 8 ports each, every one
//! named to every agent (a `peers_dns` name or a `peers_file` of the whole fleet). One agent's
//! refreshes ([`PeerBook`], with the plan's [`targets::hosts_reached`] and the shipped
//! periods) run over BENCH_MINUTES simulated minutes (default 120: two hourly rechecks) while
//! a tenth of the fleet restarts, one slice a minute: a restarted host answers with new
//! addresses (a new `ETag`), and is silent to this agent for the minute it restarts if this
//! agent probes it then. Every agent is alike, so the fleet's figures are one agent's times the
//! hosts.
//!
//! Printed: the asks at start and in the steady hour (new answers, 304s), bytes on the wire
//! per agent (requests and answers, HTTP/1.1 head and body, as `/probe-address` writes them),
//! requests a second fleet-wide, the CPU time of a refresh's choice, and the ratio to the old
//! refresh, which asked every agent every minute for its whole answer.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdma_fabric_exporter::probe::peer_book::{self, PeerBook};
use rdma_fabric_exporter::probe::peers::{self, Answer, Published, PublishedPort};
use rdma_fabric_exporter::probe::targets::{self, Port, Settings};
use rdma_fabric_exporter::probe::transport::Address;

mod common;
use common::proc::env_number;

const RAILS: u32 = 8;
const PERIOD: Duration = Duration::from_secs(60);

/// Host `n`'s answer; `incarnation` moves its QPNs as a restart does.
fn published(n: usize, incarnation: u32) -> Published {
    Published {
        host: format!("gpu-{n:05}"),
        ports: (0..RAILS)
            .map(|rail| {
                let mut gid = [0u8; 16];
                gid[10] = 0xff;
                gid[11] = 0xff;
                gid[12] = 10;
                gid[13] = rail as u8;
                gid[14] = (n >> 8) as u8;
                gid[15] = n as u8;
                PublishedPort {
                    device: format!("mlx5_{rail}"),
                    port: 1,
                    rail,
                    leaf: None,
                    address: Address {
                        gid,
                        qpn: 0x100 + 64 * incarnation + rail,
                        qkey: 0x1111_1111,
                        lid: None,
                    },
                }
            })
            .collect(),
    }
}

fn agent_name(n: usize) -> String {
    format!("10.{}.{}.{}:9866", n >> 16, (n >> 8) & 0xff, n & 0xff)
}

/// Bytes of one ask and its answer on the wire, as `/probe-address` answers it (hyper adds a
/// `date` and a `content-length`).
fn wire_bytes(ask: &peers::Ask, published: &Published) -> (usize, Answer) {
    let mut request = format!(
        "GET /probe-address HTTP/1.1\r\nhost: {}\r\naccept: application/json\r\n",
        ask.agent
    );
    if let Some(tag) = &ask.etag {
        request.push_str(&format!("if-none-match: {tag}\r\n"));
    }
    request.push_str("\r\n");
    let held = ask.etag.as_deref().map(str::as_bytes);
    let response = peers::answer(published, held);
    let status = response.status();
    let head: usize = response
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum();
    let date = "date: Mon, 07 Dec 2026 21:50:48 GMT\r\n".len();
    let status_line = format!("HTTP/1.1 {status}\r\n").len();
    let tag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if status == axum::http::StatusCode::NOT_MODIFIED {
        let bytes = request.len() + status_line + head + date + 2;
        return (bytes, Answer::Unchanged);
    }
    let body = serde_json::to_string(published).expect("serializes").len();
    let length = format!("content-length: {body}\r\n").len();
    let bytes = request.len() + status_line + head + date + length + 2 + body;
    let answer = Answer::New {
        published: published.clone(),
        etag: tag,
    };
    (bytes, answer)
}

#[derive(Default)]
struct Tally {
    asks: u64,
    new: u64,
    unchanged: u64,
    bytes: u64,
}

fn main() -> anyhow::Result<()> {
    let hosts = env_number("BENCH_HOSTS", 10_000)? as usize;
    let minutes = env_number("BENCH_MINUTES", 120)?;
    let settings = Settings::default();
    let agents: Vec<String> = (0..hosts).map(agent_name).collect();
    let mut incarnation = vec![0u32; hosts];
    // A tenth of the fleet restarts over the run, the same number each minute.
    let restarting = hosts / 10;
    let per_minute = restarting.div_ceil(minutes.max(1) as usize).max(1);
    let me = 0usize;
    let mut book = PeerBook::for_refresh_period(PERIOD);
    let ahead = peer_book::rounds_ahead(PERIOD, &settings);
    let start = Instant::now();
    let ask_all = |book: &mut PeerBook,
                   at: Instant,
                   reached: &BTreeSet<&str>,
                   silent: &BTreeSet<String>,
                   incarnation: &[u32]|
     -> Tally {
        book.set_agents(&agents);
        let (asks, _) = book.asks(at, reached, silent);
        let mut tally = Tally::default();
        for ask in asks {
            let n: usize = {
                let mut parts = ask.agent.trim_end_matches(":9866").split('.').skip(1);
                let mut n = 0usize;
                for _ in 0..3 {
                    n = (n << 8) | parts.next().unwrap().parse::<usize>().unwrap();
                }
                n
            };
            let (bytes, answer) = wire_bytes(&ask, &published(n, incarnation[n]));
            tally.asks += 1;
            tally.bytes += bytes as u64;
            match answer {
                Answer::New { .. } => tally.new += 1,
                Answer::Unchanged => tally.unchanged += 1,
            }
            book.record(&ask.agent, Ok(answer), at);
        }
        tally
    };
    let none = BTreeSet::new();
    let first = ask_all(&mut book, start, &none, &BTreeSet::new(), &incarnation);
    let ports: Vec<Port> = book.ports();
    let local: Vec<Port> = ports
        .iter()
        .filter(|p| p.host == published(me, 0).host)
        .cloned()
        .collect();
    let mut hour = Tally::default();
    let mut choice = Duration::ZERO;
    let mut reached_total = 0usize;
    for minute in 1..=minutes {
        let at = start + PERIOD * minute as u32;
        let round = minute * PERIOD.as_secs();
        let began = Instant::now();
        let reached = targets::hosts_reached(&local, &ports, round..round + ahead, &settings);
        choice += began.elapsed();
        reached_total += reached.len();
        // This minute's slice restarts; the ones this agent probes go silent to it.
        let slice = (1 + (minute as usize - 1) * per_minute)..(1 + minute as usize * per_minute);
        let mut silent = BTreeSet::new();
        for n in slice.filter(|n| *n < hosts && *n <= restarting) {
            incarnation[n] += 1;
            let host = published(n, 0).host;
            if reached.contains(host.as_str()) {
                silent.insert(host);
            }
        }
        let tally = ask_all(&mut book, at, &reached, &silent, &incarnation);
        hour.asks += tally.asks;
        hour.new += tally.new;
        hour.unchanged += tally.unchanged;
        hour.bytes += tally.bytes;
    }
    let seconds = (minutes * 60) as f64;
    let old_per_agent = hosts as f64
        * wire_bytes(
            &peers::Ask {
                agent: agent_name(1),
                etag: None,
            },
            &published(1, 0),
        )
        .0 as f64
        / 60.0;
    let steady_rate = hour.asks as f64 / seconds;
    println!(
        "peer discovery, {hosts} hosts x {RAILS} ports, refresh {}s, answers stale after {} \
         refreshes, {minutes} simulated minutes, {restarting} hosts restarted",
        PERIOD.as_secs(),
        peer_book::STALE_REFRESHES
    );
    println!(
        "  at start, per agent: {} asks, {:.1} MiB",
        first.asks,
        first.bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  steady, per agent: {} asks in {minutes} min ({} new answers, {} 304s), {:.2} asks/s, \
         {:.0} B/s; hosts its plan reaches in a refresh's look-ahead: {:.0} on average",
        hour.asks,
        hour.new,
        hour.unchanged,
        steady_rate,
        hour.bytes as f64 / seconds,
        reached_total as f64 / minutes as f64
    );
    println!(
        "  a refresh's choice (plan look-ahead of {ahead} rounds and the book): {:.1} ms on average",
        choice.as_secs_f64() * 1e3 / minutes as f64
    );
    println!(
        "  fleet-wide: {:.0} requests/s steady ({:.0} while the whole fleet starts at once over \
         a minute)",
        steady_rate * hosts as f64,
        first.asks as f64 * hosts as f64 / 60.0
    );
    println!(
        "  old refresh (every agent, every minute, whole answers): {:.0} requests/s fleet-wide, \
         {:.0} B/s per agent",
        hosts as f64 * hosts as f64 / 60.0,
        old_per_agent
    );
    println!(
        "  ratio old/new: requests {:.0}x, bytes per agent {:.0}x",
        (hosts as f64 / 60.0) / steady_rate.max(1e-9),
        old_per_agent / (hour.bytes as f64 / seconds).max(1e-9)
    );
    Ok(())
}
