//! `DiagsSource` (src/ib/diags/source.rs) with the real infiniband-diags tools, which on this
//! machine (no InfiniBand device, no umad) must fail as a clean `ScanError::Discovery` carrying
//! the tool's own message; and with stand-in scripts in a temporary directory that print a
//! corpus file, sleep, print garbage or print without end, to prove per-query timeouts (the
//! child and its children killed), the scan deadline, partial scans, the output cap and the
//! selection.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdma_fabric_exporter::ib::diags::source::{DiagsOptions, DiagsSource};
use rdma_fabric_exporter::ib::model::{Guid, QueryFailureReason};
use rdma_fabric_exporter::ib::selection::Selection;
use rdma_fabric_exporter::ib::source::{FabricSource, ScanError, ScanLimits};

use crate::common::skip_or_fail;

fn corpus(name: &str) -> PathBuf {
    crate::common::corpus::corpus("infiniband-diags").sample(name)
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn limits(timeout_ms: u64, deadline_ms: u64) -> ScanLimits {
    ScanLimits {
        deadline: Instant::now() + Duration::from_millis(deadline_ms),
        query_timeout: Duration::from_millis(timeout_ms),
    }
}

fn installed(tool: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

#[test]
fn the_real_tools_without_an_ib_device_fail_discovery_with_their_message() {
    let (Some(ibnetdiscover), Some(perfquery)) =
        (installed("ibnetdiscover"), installed("perfquery"))
    else {
        return skip_or_fail("infiniband-diags is not installed (scripts/test installs it)");
    };
    let source = DiagsSource::new(DiagsOptions {
        ibnetdiscover,
        perfquery,
        ..DiagsOptions::default()
    });
    assert_eq!(source.name(), "diags");
    match source.scan(limits(2_000, 20_000), &Selection::default()) {
        Err(ScanError::Discovery(message)) => {
            // libibmad's ibwarn line (stderr) and iberror's last word.
            assert!(message.contains("ibnetdiscover"), "{message}");
            assert!(
                message.contains("can't open") || message.contains("discover failed"),
                "{message}"
            );
        }
        other => panic!("expected a discovery failure on a host without IB: {other:?}"),
    }
}

/// Switches of the corpus topology: ec8240 (LID 48) and ec8480 (LID 23) have blocks, ec81e0
/// (LID 21) and ec8200 (LID 25) are known as their remotes.
#[test]
fn a_switch_that_hangs_and_one_that_answers_garbage_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let topology = corpus("ibnetdiscover-switchib-edr-one-ddr-link.txt");
    let counters = corpus("perfquery-x-treydock-edr-two-ports.out");
    let pidfile = dir.path().join("sleeper.pid");
    let ibnetdiscover = script(
        dir.path(),
        "ibnetdiscover",
        &format!("exec cat '{}'", topology.display()),
    );
    // Not `exec sleep`: the shell waits on a child that holds stdout open, as a wrapper would.
    let perfquery = script(
        dir.path(),
        "perfquery",
        &format!(
            "for a in \"$@\"; do lid=$a; done\n\
             case \"$lid\" in\n\
               21) sleep 600 & echo $! > '{}'; wait ;;\n\
               25) echo 'perfquery: garbage %%% ###'; exit 0 ;;\n\
             esac\n\
             exec cat '{}'",
            pidfile.display(),
            counters.display()
        ),
    );
    let source = DiagsSource::new(DiagsOptions {
        ibnetdiscover,
        perfquery,
        parallel: 2,
        ..DiagsOptions::default()
    });
    let scan = source
        .scan(limits(400, 30_000), &Selection::default())
        .unwrap();
    assert!(
        scan.duration < Duration::from_secs(20),
        "{:?}",
        scan.duration
    );
    let failures: Vec<(Guid, QueryFailureReason)> =
        scan.failures.iter().map(|f| (f.node, f.reason)).collect();
    assert_eq!(
        failures,
        [
            (Guid(0xec0d_9a03_00ec_81e0), QueryFailureReason::Timeout),
            (Guid(0xec0d_9a03_00ec_8200), QueryFailureReason::Malformed),
        ],
        "{:?}",
        scan.failures
    );
    for guid in [Guid(0xec0d_9a03_00ec_8240), Guid(0xec0d_9a03_00ec_8480)] {
        let node = scan.node(guid).unwrap();
        let port1 = node.ports.iter().find(|p| p.number == 1).unwrap();
        assert_eq!(
            port1.counters.get("PortXmitWait"),
            Some(22_730_501),
            "{guid}"
        );
        assert!(port1.remote.is_some());
    }
    // The hung switch's node is still in the scan (its links are), without counters.
    let hung = scan.node(Guid(0xec0d_9a03_00ec_81e0)).unwrap();
    assert!(hung.ports.iter().all(|p| p.counters.is_empty()));
    // The sleeping grandchild did not outlive its query.
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let alive = state
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next())
        .is_some_and(|s| s != "Z" && s != "X");
    assert!(!alive, "sleep {pid} still runs: {state}");
}

#[test]
fn the_deadline_ends_the_scan_and_names_what_was_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let topology = corpus("ibnetdiscover-switchib-edr-one-ddr-link.txt");
    let ibnetdiscover = script(
        dir.path(),
        "ibnetdiscover",
        &format!("exec cat '{}'", topology.display()),
    );
    let perfquery = script(dir.path(), "perfquery", "exec sleep 600");
    let source = DiagsSource::new(DiagsOptions {
        ibnetdiscover,
        perfquery,
        parallel: 1,
        ..DiagsOptions::default()
    });
    let started = Instant::now();
    let scan = source
        .scan(limits(60_000, 1_500), &Selection::default())
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(scan.failures.len(), 4, "{:?}", scan.failures);
    assert!(
        scan.failures
            .iter()
            .all(|f| f.reason == QueryFailureReason::Deadline),
        "{:?}",
        scan.failures
    );
    assert_eq!(scan.switches().count(), 4);
}

#[test]
fn unselected_switches_are_not_queried_and_discovery_output_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let topology = corpus("ibnetdiscover-p-treydock-edr-mixed.out");
    let ibnetdiscover = script(
        dir.path(),
        "ibnetdiscover",
        &format!("exec cat '{}'", topology.display()),
    );
    let marker = dir.path().join("perfquery-ran");
    let perfquery = script(
        dir.path(),
        "perfquery",
        &format!("touch '{}'; exit 1", marker.display()),
    );
    let none = Selection {
        exclude: Some(regex::Regex::new("^(?:.*)$").unwrap()),
        ..Selection::default()
    };
    let source = DiagsSource::new(DiagsOptions {
        ibnetdiscover,
        perfquery: perfquery.clone(),
        ..DiagsOptions::default()
    });
    let scan = source.scan(limits(1_000, 10_000), &none).unwrap();
    assert_eq!(scan.switches().count(), 4);
    assert!(scan.failures.is_empty());
    assert!(!marker.exists(), "perfquery ran for an excluded switch");

    // A tool that exits non-zero: its stderr is the failure's detail.
    let scan = source
        .scan(limits(1_000, 10_000), &Selection::default())
        .unwrap();
    assert_eq!(scan.failures.len(), 4);
    assert!(scan
        .failures
        .iter()
        .all(|f| f.reason == QueryFailureReason::Other && f.detail.contains("perfquery")));

    let endless = script(
        dir.path(),
        "endless",
        "exec yes 'SW  1719 10 0x7cfe9003009ce5b0 4x EDR'",
    );
    let source = DiagsSource::new(DiagsOptions {
        ibnetdiscover: endless,
        perfquery: perfquery.clone(),
        max_output_bytes: 1 << 20,
        ..DiagsOptions::default()
    });
    match source.scan(limits(1_000, 10_000), &Selection::default()) {
        Err(ScanError::Discovery(m)) => {
            assert!(m.contains("printed more than 1048576 bytes"), "{m}")
        }
        other => panic!("{other:?}"),
    }

    let garbage = script(dir.path(), "garbage", "echo 'no topology here'");
    let source = DiagsSource::new(DiagsOptions {
        ibnetdiscover: garbage,
        perfquery,
        ..DiagsOptions::default()
    });
    match source.scan(limits(1_000, 10_000), &Selection::default()) {
        Err(ScanError::Discovery(m)) => assert!(m.contains("printed no topology"), "{m}"),
        other => panic!("{other:?}"),
    }

    let missing = DiagsSource::new(DiagsOptions {
        ibnetdiscover: dir.path().join("not-installed"),
        ..DiagsOptions::default()
    });
    match missing.scan(limits(1_000, 10_000), &Selection::default()) {
        Err(ScanError::Discovery(m)) => assert!(m.contains("could not start"), "{m}"),
        other => panic!("{other:?}"),
    }
}
