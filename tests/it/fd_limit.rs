//! The soft descriptor limit `serve` starts with: raised toward what the kept sysfs trees need,
//! as systemd and container runtimes start services at a soft 1 024 under a higher hard limit.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::common::{fixture, path_str, Exporter};

/// `serve` on the ConnectX-7 fixture node, started with these `RLIMIT_NOFILE` limits.
fn serve_with_nofile(soft: u64, hard: u64) -> Exporter {
    let node = fixture("cx7-roce");
    let (sys, ethtool) = (node.join("sys"), node.join("ethtool"));
    let args = [
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.source",
        "files",
        "--collector.ethtool.stats-dir",
        path_str(&ethtool),
    ];
    Exporter::start_configured("serve", &args, move |command: &mut Command| {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
}

/// (soft, hard) `RLIMIT_NOFILE` of a running process, from `/proc/<pid>/limits`.
fn nofile_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("{limits}"));
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// This process's hard limit: a child may be given no more without CAP_SYS_RESOURCE.
fn own_hard_limit() -> u64 {
    nofile_limits(std::process::id()).1
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Two scrapes: the first opens and keeps, the second reads through what was kept.
fn scrape_twice(exporter: &Exporter) {
    for _ in 0..2 {
        assert!(exporter.metrics().contains("rdma_port_info{"));
    }
}

#[test]
fn a_soft_limit_of_1024_is_raised_and_the_whole_node_is_kept() {
    let hard = own_hard_limit();
    assert!(
        hard >= 2048,
        "the tests' hard RLIMIT_NOFILE is {hard}: this test needs 2 048 to show a raise"
    );
    let exporter = serve_with_nofile(1024, hard);
    let pid = exporter.pid();
    assert_eq!(nofile_limits(pid), (hard.min(16_384), hard));
    scrape_twice(&exporter);
    // The fixture node keeps about 680 descriptors: more than half of 1 024.
    let open = open_descriptors(pid);
    assert!(open > 600, "{open} descriptors open");
    // Raised as asked, and the trees never filled their half: nothing to say.
    assert!(
        !exporter.logs().contains("RLIMIT_NOFILE"),
        "{}",
        exporter.logs()
    );
}

#[test]
fn a_hard_limit_of_1024_keeps_half_of_it_and_warns_once_when_that_is_full() {
    let exporter = serve_with_nofile(1024, 1024);
    let pid = exporter.pid();
    assert_eq!(nofile_limits(pid), (1024, 1024));
    scrape_twice(&exporter);
    // Half the limit for the kept trees, the rest for sockets and files read once.
    let open = open_descriptors(pid);
    assert!((512..600).contains(&open), "{open} descriptors open");
    // Said at start, and warned about once the trees fill their half.
    let logs = exporter.logs();
    assert!(
        logs.contains("the hard RLIMIT_NOFILE caps the soft one"),
        "{logs}"
    );
    let full: Vec<_> = logs
        .lines()
        .filter(|l| l.contains("the kept sysfs trees hold all the descriptors they may"))
        .collect();
    assert_eq!(full.len(), 1, "once, not at each scrape:\n{logs}");
    assert!(full[0].contains(" WARN "), "{logs}");
}
