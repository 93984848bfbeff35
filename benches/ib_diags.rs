//! infiniband-diags costs, to choose between running the tools and native MADs (docs/infiniband.md):
//! the parse cost per port of `perfquery -x` and `ibnetdiscover` text for a fabric of 2 000
//! switches x 64 ports written here in the tools' formats, and the cost of one bounded tool run
//! (`src/ib/diags/run.rs`: spawn, pipes, wait, process-group kill) for `/bin/true`, a stand-in
//! that prints one switch's perfquery output, and the real `perfquery -V` when installed.
//! Prints figures, never fails on them. `cargo bench --bench ib_diags` (BENCH_RUNS=N runs per
//! spawn figure, default 200).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdma_fabric_exporter::ib::diags::run::{run, RunLimits};
use rdma_fabric_exporter::ib::diags::{ibnetdiscover, perfquery};

const SWITCHES: usize = 2_000;
const PORTS: usize = 64;

fn perfquery_text(lid: usize) -> String {
    let mut s = String::new();
    for port in 1..=PORTS {
        let _ = writeln!(
            s,
            "# Port extended counters: Lid {lid} port {port} (CapMask: 0x5A00 CapMask2: 0x0000002)"
        );
        let _ = writeln!(
            s,
            "PortSelect:......................{port}\nCounterSelect:...................0x0000"
        );
        for (i, name) in [
            "PortXmitData",
            "PortRcvData",
            "PortXmitPkts",
            "PortRcvPkts",
            "PortUnicastXmitPkts",
            "PortUnicastRcvPkts",
            "PortMulticastXmitPkts",
            "PortMulticastRcvPkts",
        ]
        .iter()
        .enumerate()
        {
            let _ = writeln!(
                s,
                "{name}:{}{}",
                ".".repeat(32 - name.len()),
                178_791_657_177_235u64 + i as u64 * lid as u64
            );
        }
        let _ = writeln!(s, "CounterSelect2:..................0x00000000");
        for name in [
            "SymbolErrorCounter",
            "LinkErrorRecoveryCounter",
            "LinkDownedCounter",
            "PortRcvErrors",
            "PortRcvRemotePhysicalErrors",
            "PortRcvSwitchRelayErrors",
            "PortXmitDiscards",
            "PortXmitConstraintErrors",
            "PortRcvConstraintErrors",
            "LocalLinkIntegrityErrors",
            "ExcessiveBufferOverrunErrors",
            "VL15Dropped",
            "PortXmitWait",
            "QP1Dropped",
        ] {
            let _ = writeln!(s, "{name}:{}{}", ".".repeat(32 - name.len()), port * 3);
        }
    }
    s
}

fn topology_text() -> String {
    let mut s = String::new();
    for sw in 0..SWITCHES {
        let guid = 0xb83f_d203_0000_0000u64 + sw as u64;
        let _ = writeln!(
            s,
            "vendid=0x2c9\ndevid=0xd2f0\nsysimgguid=0x{guid:x}\nswitchguid=0x{guid:x}({guid:x})"
        );
        let _ = writeln!(s, "Switch\t{PORTS} \"S-{guid:016x}\"\t\t# \"MF0;sw-{sw:04}:MQM9700/U1\" enhanced port 0 lid {} lmc 0", sw + 1);
        for port in 1..=PORTS {
            let peer = 0xb83f_d203_0000_0000u64 + ((sw + port) % SWITCHES) as u64;
            let _ = writeln!(
                s,
                "[{port}]\t\"S-{peer:016x}\"[{port}]\t\t# \"MF0;sw-x:MQM9700/U1\" lid {} 4xNDR",
                (sw + port) % SWITCHES + 1
            );
        }
    }
    s
}

fn per(d: Duration, n: usize) -> String {
    format!("{:.2} us", d.as_secs_f64() * 1e6 / n as f64)
}

fn spawn_cost(program: &Path, args: &[String], runs: usize) -> Option<Duration> {
    let limits = || RunLimits {
        timeout: Duration::from_secs(10),
        deadline: Instant::now() + Duration::from_secs(10),
        max_output_bytes: 16 << 20,
    };
    run(program, args, limits()).ok()?;
    let started = Instant::now();
    for _ in 0..runs {
        run(program, args, limits()).ok()?;
    }
    Some(started.elapsed() / runs as u32)
}

fn main() -> ExitCode {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // Parse: one switch's perfquery -x -l output, 200 times; the whole topology once.
    let pq = perfquery_text(48);
    let started = Instant::now();
    let mut blocks = 0;
    for _ in 0..200 {
        blocks += perfquery::parse(&pq).map(|p| p.blocks.len()).unwrap_or(0);
    }
    let pq_time = started.elapsed();
    let topo = topology_text();
    let started = Instant::now();
    let nodes = ibnetdiscover::parse(&topo)
        .map(|d| d.nodes.len())
        .unwrap_or(0);
    let topo_time = started.elapsed();
    println!(
        "fabric: {SWITCHES} switches x {PORTS} ports = {} ports",
        SWITCHES * PORTS
    );
    println!(
        "perfquery -x parse: {} per port ({} bytes per switch, {blocks} blocks parsed)",
        per(pq_time, blocks),
        pq.len()
    );
    println!(
        "ibnetdiscover parse: {:.1} ms for {} bytes, {nodes} nodes ({} per port)",
        topo_time.as_secs_f64() * 1e3,
        topo.len(),
        per(topo_time, SWITCHES * PORTS)
    );
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ib_diags bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sample = dir.path().join("perfquery.txt");
    let standin = dir.path().join("perfquery-standin");
    let ok = std::fs::write(&sample, &pq).is_ok()
        && std::fs::write(
            &standin,
            format!("#!/bin/sh\nexec cat '{}'\n", sample.display()),
        )
        .is_ok()
        && {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&standin, std::fs::Permissions::from_mode(0o755)).is_ok()
        };
    if !ok {
        eprintln!("ib_diags bench: could not write the stand-in");
        return ExitCode::FAILURE;
    }
    let real = PathBuf::from("/usr/sbin/perfquery");
    let cases: [(&str, PathBuf, Vec<String>); 3] = [
        ("/bin/true", PathBuf::from("/bin/true"), vec![]),
        (
            "stand-in printing one switch's perfquery -x -l",
            standin,
            vec![],
        ),
        ("perfquery -V (infiniband-diags)", real, vec!["-V".into()]),
    ];
    for (what, program, args) in cases {
        match spawn_cost(&program, &args, runs) {
            Some(d) => println!(
                "bounded run of {what}: {:.2} ms per run ({runs} runs); {SWITCHES} switches: {:.1} s sequential",
                d.as_secs_f64() * 1e3,
                d.as_secs_f64() * SWITCHES as f64
            ),
            None => println!("bounded run of {what}: not available here"),
        }
    }
    ExitCode::SUCCESS
}
