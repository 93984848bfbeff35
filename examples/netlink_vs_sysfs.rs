//! One port's hardware counters two ways, user-space cost only: decoding a `CMD_STAT_GET`
//! answer against reading the same counters as `ports/1/hw_counters/*` files of a fixture tree
//! (a ConnectX-7 node from `sim::sysfs_tree`, as benches/scrape.rs builds). The kernel's side
//! of the netlink request (the driver's counter query) cannot be measured on a machine without
//! NETLINK_RDMA, and a real sysfs read also runs a driver callback per file: both are left out.
//!
//! `cargo run --release --example netlink_vs_sysfs`. Prints figures; asserts only that both
//! ways read the same values.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use rdma_fabric_exporter::node::rdma_netlink::{decode, nldev, wire};
use rdma_fabric_exporter::sim::sysfs_tree::{connectx7_node, write_tree};

const ROUNDS: usize = 2000;

/// A `CMD_STAT_GET` answer as the kernel lays it out (stat_get_doit_default_counter), followed
/// by the acknowledgement.
fn stat_answer(counters: &[(String, u64)]) -> Vec<u8> {
    fn attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(wire::align(out.len()), 0);
    }
    let mut table = Vec::new();
    for (name, value) in counters {
        let mut entry = Vec::new();
        attr(
            &mut entry,
            nldev::ATTR_STAT_HWCOUNTER_ENTRY_NAME,
            format!("{name}\0").as_bytes(),
        );
        attr(
            &mut entry,
            nldev::ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
            &value.to_ne_bytes(),
        );
        attr(
            &mut table,
            nldev::ATTR_STAT_HWCOUNTER_ENTRY | wire::NLA_F_NESTED,
            &entry,
        );
    }
    let mut payload = Vec::new();
    attr(&mut payload, nldev::ATTR_DEV_INDEX, &0u32.to_ne_bytes());
    attr(&mut payload, nldev::ATTR_DEV_NAME, b"mlx5_0\0");
    attr(&mut payload, nldev::ATTR_PORT_INDEX, &1u32.to_ne_bytes());
    attr(
        &mut payload,
        nldev::ATTR_STAT_HWCOUNTERS | wire::NLA_F_NESTED,
        &table,
    );
    let mut out = message(nldev::msg_type(nldev::CMD_STAT_GET), &payload);
    out.extend(message(wire::NLMSG_ERROR, &[0; 20]));
    out
}

fn message(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((wire::NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&7u32.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(wire::align(out.len()), 0);
    out
}

/// What a scrape does per port: list the directory, read and parse every file.
fn read_dir_counters(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("hw_counters") {
        let entry = entry.expect("an entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        // Not a counter (the cache lifetime in ms), and not in the netlink answer.
        if name == "lifespan" {
            continue;
        }
        let text = rdma_fabric_exporter::bounded_read::read_to_string(&entry.path(), 64)
            .expect("a counter file");
        out.push((name, text.trim().parse().expect("a number")));
    }
    out
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> Duration {
    let samples = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn main() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let nics = connectx7_node(1, 42);
    write_tree(tmp.path(), &nics).expect("the fixture tree");
    let dir = nics[0].device_dir(tmp.path()).join("ports/1/hw_counters");
    let mut files = read_dir_counters(&dir);
    files.sort();

    let answer = stat_answer(&files);
    let decode_once = || {
        decode::decode_answer(nldev::CMD_STAT_GET, &answer, None, decode::port_statistics)
            .expect("the answer decodes")
    };
    let mut decoded = decode_once()[0].counters.clone();
    decoded.sort();
    assert_eq!(decoded, files, "both ways read the same counters");

    let hundred: Vec<(String, u64)> = (0..100)
        .map(|i| (format!("hw_counter_{i:03}"), i))
        .collect();
    let answer_100 = stat_answer(&hundred);
    // The fixture port has fewer files than a fully enabled mlx5 port: 100 like-sized files
    // for the comparison at equal counts.
    let dir_100 = tmp.path().join("hw_counters_100");
    std::fs::create_dir(&dir_100).expect("a directory");
    for (name, value) in &hundred {
        std::fs::write(dir_100.join(name), format!("{value}\n")).expect("a counter file");
    }

    let sysfs = time(ROUNDS, || read_dir_counters(&dir));
    let netlink = time(ROUNDS * 10, decode_once);
    let netlink_100 = time(ROUNDS * 10, || {
        decode::decode_answer(
            nldev::CMD_STAT_GET,
            &answer_100,
            None,
            decode::port_statistics,
        )
        .expect("the answer decodes")
    });
    println!(
        "one ConnectX-7 port, {} hw_counters files in {}",
        files.len(),
        dir.display()
    );
    println!("  sysfs files (readdir + open/read/parse each): median {sysfs:?}");
    println!(
        "  netlink STAT_GET answer ({} bytes) decoded:     median {netlink:?}",
        answer.len()
    );
    println!(
        "  netlink STAT_GET answer of 100 counters ({} bytes): median {netlink_100:?}",
        answer_100.len()
    );
    let sysfs_100 = time(ROUNDS, || read_dir_counters(&dir_100));
    println!("  100 counter files (readdir + open/read/parse each): median {sysfs_100:?}");
    println!(
        "  ratio files / netlink decode: {:.0}x at {} counters, {:.0}x at 100 \
         (kernel-side cost of the request not included)",
        sysfs.as_secs_f64() / netlink.as_secs_f64(),
        files.len(),
        sysfs_100.as_secs_f64() / netlink_100.as_secs_f64()
    );
}
