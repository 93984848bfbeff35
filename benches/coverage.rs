//! How long the probe plan takes to cover every leaf pair, at 1 000 and 10 000 hosts.
//!
//! `cargo bench --bench coverage`. A rail-optimized fabric: 8 ports a host, one per rail;
//! BENCH_PER_LEAF hosts (default 32) to a scalable unit, whose rail `r` is cabled to the unit's
//! leaf `r`. Every host plans its rounds with `probe::targets` at the default settings (rounds of
//! 1 s at 10 000 hosts: the rates allow it), its ports' leaves known (`probe.leaves`), and
//! the rounds are counted until every ordered pair of leaves has been probed (a port under the
//! first probed one under the second), then until every pair has been probed with every
//! flow label (the ECMP members between them, as far as the labels spread them).
//!
//! Without leaves (the rail's windows alone) a whole fleet is too slow to plan here for
//! thousands of rounds; the ports under BENCH_SAMPLE leaves (default 4) are planned instead,
//! at 1 000 hosts, until those leaves have reached every other leaf.

use std::time::Instant;

use rdma_fabric_exporter::probe::targets::{Planner, Port, Settings};

mod common;
use common::proc::env_number;

const RAILS: usize = 8;

/// The fabric's ports, host-major, and each port's leaf number.
fn fabric(hosts: usize, per_leaf: usize, leaves_known: bool) -> (Vec<Port>, Vec<u32>) {
    let mut ports = Vec::with_capacity(hosts * RAILS);
    let mut leaf_of = Vec::with_capacity(hosts * RAILS);
    for host in 0..hosts {
        for rail in 0..RAILS {
            let unit = host / per_leaf;
            ports.push(Port {
                host: format!("gpu-{host:05}"),
                device: format!("mlx5_{rail}"),
                port: 1,
                rail: rail as u32,
                leaf: leaves_known.then(|| format!("su{unit:03}-leaf{rail}")),
            });
            leaf_of.push((unit * RAILS + rail) as u32);
        }
    }
    (ports, leaf_of)
}

/// A port's place in `ports` (the plan's targets point into it).
fn index_of(ports: &[Port], port: &Port) -> usize {
    (port as *const Port as usize - ports.as_ptr() as usize) / std::mem::size_of::<Port>()
}

/// Rounds until the ports of `probing` hosts have probed every ordered pair of leaves (from
/// their leaves to every other), and until every such pair has seen every flow label; `None`
/// past `limit` rounds.
fn cover(
    ports: &[Port],
    leaf_of: &[u32],
    probing: &[usize],
    settings: &Settings,
    limit: u64,
    every_label: bool,
) -> (Option<u64>, Option<u64>) {
    let leaves = leaf_of.iter().max().map_or(0, |l| *l as usize + 1);
    let from_leaves: std::collections::BTreeSet<u32> = probing
        .iter()
        .flat_map(|h| leaf_of[h * RAILS..(h + 1) * RAILS].iter().copied())
        .collect();
    let mut rows = vec![usize::MAX; leaves];
    for (row, leaf) in from_leaves.iter().enumerate() {
        rows[*leaf as usize] = row;
    }
    let row = |leaf: u32| rows[leaf as usize];
    let wanted = from_leaves.len() * (leaves - 1);
    let all_labels: u8 = ((1u16 << settings.flow_labels.min(8)) - 1) as u8;
    let mut labels = vec![0u8; from_leaves.len() * leaves];
    let (mut seen, mut full) = (0usize, 0usize);
    let (mut first, mut every) = (None, None);
    let planner = Planner::new(ports);
    for round in 0..limit {
        for &host in probing {
            let local = &ports[host * RAILS..(host + 1) * RAILS];
            for target in planner.plan(local, round, settings) {
                let a = leaf_of[host * RAILS + target.from];
                let b = leaf_of[index_of(ports, target.to)];
                if a == b {
                    continue;
                }
                let slot = &mut labels[row(a) * leaves + b as usize];
                let before = *slot;
                *slot |= 1 << ((target.flow_label - 1) % 8);
                seen += usize::from(before == 0);
                full += usize::from(before != all_labels && *slot == all_labels);
            }
        }
        if first.is_none() && seen == wanted {
            first = Some(round + 1);
            if !every_label {
                break;
            }
        }
        if full == wanted {
            every = Some(round + 1);
            break;
        }
    }
    (first, every)
}

fn say(rounds: Option<u64>, limit: u64) -> String {
    rounds.map_or(format!("more than {limit}"), |r| r.to_string())
}

fn main() -> anyhow::Result<()> {
    let per_leaf = env_number("BENCH_PER_LEAF", 32)? as usize;
    let sample = env_number("BENCH_SAMPLE", 4)? as usize;
    let settings = Settings::default();
    println!(
        "leaf-pair coverage: {RAILS} rails, {per_leaf} hosts a leaf, samples a round: leaf {}, \
         rail {}, cross-rail {}; {} flow labels",
        settings.leaf_sample, settings.rail_sample, settings.cross_sample, settings.flow_labels
    );
    for hosts in [1_000usize, 10_000] {
        let (ports, leaf_of) = fabric(hosts, per_leaf, true);
        let leaves = hosts.div_ceil(per_leaf) * RAILS;
        let everyone: Vec<usize> = (0..hosts).collect();
        let started = Instant::now();
        let limit = 5_000;
        let (first, every) = cover(&ports, &leaf_of, &everyone, &settings, limit, true);
        println!(
            "  {hosts} hosts, {leaves} leaves, leaves known: every ordered leaf pair after {} \
             rounds, with every flow label after {} ({:.1} s to plan)",
            say(first, limit),
            say(every, limit),
            started.elapsed().as_secs_f64()
        );
    }
    let hosts = 1_000;
    let (ports, leaf_of) = fabric(hosts, per_leaf, false);
    let units = hosts.div_ceil(per_leaf);
    // Whole units spread over the fabric: their hosts are what the sampled leaves hold.
    let probing: Vec<usize> = (0..sample)
        .flat_map(|k| {
            let unit = k * units / sample.max(1);
            (unit * per_leaf..((unit + 1) * per_leaf).min(hosts)).collect::<Vec<_>>()
        })
        .collect();
    let started = Instant::now();
    let limit = 20_000;
    let (first, _) = cover(&ports, &leaf_of, &probing, &settings, limit, false);
    println!(
        "  {hosts} hosts, leaves not known (the rail's windows): the {} leaves of {sample} units \
         reach every other leaf after {} rounds ({:.1} s to plan)",
        sample * RAILS,
        say(first, limit),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
