//! SIGHUP re-reads the config file: a good one is in force for the next request (on the same
//! keep-alive connection too), a broken one keeps the running config and logs every error at
//! its line and column, and the replaced collectors' threads end.

use std::time::{Duration, Instant};

use crate::common;

use common::*;

/// The config of the node with driver statistics (the storm sampler's thread runs) and the NCCL
/// collector (its scan thread runs), at `path`.
fn node_with_threads(path: &str) -> String {
    let root = project_root();
    format!(
        "web:\n  telemetry_path: {path}\nnode:\n  sysfs_path: {sys}\n  ethtool:\n    source: files\n    stats_dir: {stats}\nnccl:\n  log_dir: {nccl}\n",
        sys = root.join("tests/fixtures/cx7-roce/sys").display(),
        stats = root.join("tests/fixtures/cx7-roce/ethtool").display(),
        nccl = root.join("tests/fixtures/nccl").display(),
    )
}

/// The quirks node (three devices), no driver statistics, at `path`.
fn quirks_node(path: &str) -> String {
    format!(
        "web:\n  telemetry_path: {path}\nnode:\n  sysfs_path: {}\n  ethtool:\n    source: none\n",
        fixture("quirks/sys").display()
    )
}

fn hangup(exporter: &Exporter) {
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &exporter.pid().to_string()])
        .status()
        .unwrap()
        .success());
}

/// The process's own named threads (collectors, samplers, scanners), not tokio's: its
/// blocking pool keeps idle threads for 10 s and grows with load, which is no pile-up.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| !name.starts_with("tokio"))
        .count()
}

/// Polls `path` until it answers `status`, for up to 10 s.
fn until_status(exporter: &Exporter, path: &str, status: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (got, _, body) = exporter.get(path);
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} answered {got}, not {status}:\n{}",
            exporter.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_reloads_the_config_and_keeps_it_when_broken() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(&config, node_with_threads("/a")).unwrap();
    let mut exporter = Exporter::start(&["--config.file", path_str(&config)]);
    let body = until_status(&exporter, "/a", 200);
    assert!(body.contains("rdma_pfc_storm") || body.contains("collector=\"pfc_storm\""));
    assert!(body.contains("collector=\"nccl\""), "{body}");
    // A keep-alive client, as Prometheus is: it must see the reload too.
    let client = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    assert_eq!(client.get(exporter.url("/a")).send().unwrap().status(), 200);

    std::fs::write(&config, quirks_node("/b")).unwrap();
    hangup(&exporter);
    let body = until_status(&exporter, "/b", 200);
    assert!(body.contains("rdma_devices 3"), "{body}");
    assert!(!body.contains("collector=\"nccl\""), "{body}");
    assert_eq!(exporter.get("/a").0, 404);
    assert_eq!(
        client.get(exporter.url("/b")).send().unwrap().status(),
        200,
        "the keep-alive connection answers with the new config"
    );

    // Broken: every error logged at its place, the running config stays.
    std::fs::write(
        &config,
        "web:\n  telemetry_path: /healthz\nnode:\n  sysfs_path: /sys\n  devcies: {}\n",
    )
    .unwrap();
    hangup(&exporter);
    let path = path_str(&config).to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exporter.logs().contains("was not reloaded") {
        assert!(Instant::now() < deadline, "{}", exporter.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        exporter.logs().contains(&format!("{path}:5:3: ")),
        "{}",
        exporter.logs()
    );
    assert_eq!(exporter.get("/b").0, 200);

    // Reloads retire the replaced collectors: their threads end, none pile up.
    std::fs::write(&config, node_with_threads("/a")).unwrap();
    hangup(&exporter);
    until_status(&exporter, "/a", 200);
    std::thread::sleep(Duration::from_millis(500));
    let before = threads(exporter.pid());
    for round in 0..6 {
        let (text, path) = if round % 2 == 0 {
            (quirks_node("/b"), "/b")
        } else {
            (node_with_threads("/a"), "/a")
        };
        std::fs::write(&config, text).unwrap();
        hangup(&exporter);
        until_status(&exporter, path, 200);
    }
    // The sampler ends within a round (200 ms), the NCCL scan thread at once: on a loaded
    // machine later, so their end is waited for (the bound is what a pile-up would break).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut after = threads(exporter.pid());
    while after > before + 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = threads(exporter.pid());
    }
    assert!(
        after <= before + 1,
        "threads grew from {before} to {after} over six reloads"
    );
    let status = exporter
        .terminate(Duration::from_secs(10))
        .expect("exits on SIGTERM");
    assert!(status.success(), "{status}");
}
