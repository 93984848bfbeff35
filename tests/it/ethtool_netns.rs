//! Compares the SIOCETHTOOL reader with the `ethtool -S` command on interfaces this test creates:
//! a veth pair (driver statistics) and a dummy or bridge device (no statistics set).
//!
//! Needs root, `ip` and `ethtool`; without them each test prints `skipped: ...` and passes, or
//! fails when `CI` is set (`common::skip_or_fail`).
//! The interfaces are local-only, have no addresses and IPv6 disabled before they come up, so
//! nothing is sent on them (which also keeps the veth counters still while we compare).

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use common::{ip, skip_or_fail};
use rdma_fabric_exporter::node::ethtool::EthtoolError;
use rdma_fabric_exporter::node::ethtool_ioctl::{read_stats, read_stats_sharing};

/// Environment variable that turns `unprivileged_helper` from a no-op into the reader side of
/// `veth_stats_match_ethtool` running as `nobody`.
const HELPER_ENV: &str = "RFE_ETHTOOL_HELPER_NETDEV";
const NOBODY: u32 = 65534;

/// Deletes the interface on drop (deleting one end of a veth pair deletes both).
struct Link(String);

impl Drop for Link {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

/// Unique per test process, at most 8 bytes (IFNAMSIZ is 16).
fn link_name(suffix: char) -> String {
    format!("rfe{:04}{suffix}", std::process::id() % 10000)
}

/// Creates `name` with `ip link add name <spec...>`, after removing a leftover from an earlier
/// crashed run that had the same pid.
fn add_link(name: &str, spec: &[&str]) -> Result<Link, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root, cannot create interfaces".into());
    }
    let _ = ip(&["link", "del", name]);
    let mut args = vec!["link", "add", name];
    args.extend_from_slice(spec);
    ip(&args)?;
    Ok(Link(name.to_string()))
}

/// Disables IPv6 (no link-local address, DAD, MLD or router solicitations), then sets `up`.
fn quiet_up(name: &str) -> Result<(), String> {
    let sysctl = format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6");
    if Path::new(&sysctl).exists() {
        std::fs::write(&sysctl, "1").map_err(|e| format!("{sysctl}: {e}"))?;
    }
    ip(&["link", "set", name, "up"])
}

fn ethtool_path() -> Option<&'static str> {
    ["/usr/sbin/ethtool", "/sbin/ethtool", "/usr/bin/ethtool"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// What `ethtool -S` said: the statistics, or its stderr when it failed.
fn ethtool_s(ethtool: &str, netdev: &str) -> Result<Vec<(String, u64)>, String> {
    let out = Command::new(ethtool)
        .args(["-S", netdev])
        .output()
        .expect("run ethtool");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).expect("ethtool output is UTF-8");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("NIC statistics:"), "{text}");
    Ok(lines
        .map(|line| {
            // ethtool prints "     %.*s: %llu"; names may contain ": " themselves.
            let line = line.strip_prefix("     ").unwrap_or(line);
            let (name, value) = line.rsplit_once(": ").expect("name: value");
            (name.to_string(), value.parse().expect("u64 value"))
        })
        .collect())
}

#[test]
fn veth_stats_match_ethtool() {
    let Some(ethtool) = ethtool_path() else {
        return skip_or_fail("ethtool not installed (apt-get install -y ethtool)");
    };
    let (a, b) = (link_name('a'), link_name('b'));
    let link = match add_link(&a, &["type", "veth", "peer", "name", &b]) {
        Ok(link) => link,
        Err(why) => return skip_or_fail(&format!("veth_stats_match_ethtool: {why}")),
    };
    quiet_up(&a).unwrap();
    quiet_up(&b).unwrap();

    for netdev in [&a, &b] {
        let ours = read_stats(netdev).unwrap();
        let theirs = ethtool_s(ethtool, netdev).unwrap();
        assert!(
            !ours.is_empty(),
            "veth {netdev} should have driver statistics"
        );
        assert_eq!(ours, theirs, "{netdev}: reader vs ethtool -S");
        // A second read sees the same set: nothing changes while the link is idle.
        assert_eq!(read_stats(netdev).unwrap(), ours, "{netdev}: second read");
        // The scrape's read shares the previous read's name list when GSTRINGS is unchanged.
        let first = read_stats_sharing(netdev, None).unwrap();
        let second = read_stats_sharing(netdev, Some(first.names())).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(first.names(), second.names()),
            "{netdev}: the second read allocates its own names"
        );
        let pairs: Vec<(String, u64)> = second.iter().map(|(n, v)| (n.to_string(), v)).collect();
        assert_eq!(pairs, ours, "{netdev}: shared read vs plain read");
    }
    // The first veth statistic is the peer's ifindex: a real value, not a zeroed buffer.
    let peer_ifindex = std::fs::read_to_string(format!("/sys/class/net/{b}/ifindex")).unwrap();
    assert_eq!(
        read_stats(&a).unwrap()[0],
        (
            "peer_ifindex".to_string(),
            peer_ifindex.trim().parse().unwrap()
        )
    );

    check_unprivileged(&a);
    drop(link);
    assert!(matches!(read_stats(&a), Err(EthtoolError::NoDevice { .. })));
}

/// Re-runs this test binary as `nobody` (no capabilities) to read `netdev` and compares. The
/// binary runs from a directory of its own that `nobody` can enter (the target directory may be
/// below one it cannot, such as `/root`): a hard link to it, or a copy.
fn check_unprivileged(netdev: &str) {
    let dir = tempfile::Builder::new()
        .prefix("rfe-it-nobody-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("it");
    let built = std::env::current_exe().unwrap();
    if std::fs::hard_link(&built, &exe).is_err() {
        std::fs::copy(&built, &exe).unwrap();
    }
    let out = match Command::new(&exe)
        .uid(NOBODY)
        .gid(NOBODY)
        .args([
            "--exact",
            "ethtool_netns::unprivileged_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, netdev)
        .output()
    {
        Ok(out) => out,
        // Typically a temporary directory below one that `nobody` cannot traverse.
        Err(e) => {
            return skip_or_fail(&format!(
                "unprivileged read: cannot run {exe:?} as nobody: {e}"
            ))
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helper failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unprivileged: Vec<(String, u64)> = stdout
        .lines()
        // libtest may print `test ethtool_netns::unprivileged_helper ... ` in front of the first
        // line.
        .filter_map(|line| line.split_once("STAT\t").map(|(_, stat)| stat))
        .map(|line| {
            let (name, value) = line.rsplit_once('\t').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect();
    assert_eq!(unprivileged, read_stats(netdev).unwrap(), "read as nobody");
}

/// Not a test on its own: the child side of `check_unprivileged`.
#[test]
fn unprivileged_helper() {
    let Ok(netdev) = std::env::var(HELPER_ENV) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        NOBODY,
        "helper must run as nobody"
    );
    for (name, value) in read_stats(&netdev).unwrap() {
        println!("STAT\t{name}\t{value}");
    }
}

#[test]
fn no_stats_set_matches_ethtool() {
    let Some(ethtool) = ethtool_path() else {
        return skip_or_fail("ethtool not installed (apt-get install -y ethtool)");
    };
    let mut netdevs = vec!["lo".to_string()];
    let name = link_name('d');
    // Kernels built without the dummy driver still have bridges, which have no stats set either.
    let link = add_link(&name, &["type", "dummy"]).or_else(|why| {
        let bridge = add_link(&name, &["type", "bridge"]);
        if bridge.is_ok() {
            eprintln!("note: testing a bridge instead of a dummy device: {why}");
        }
        bridge
    });
    match &link {
        Ok(_) => netdevs.push(name.clone()),
        Err(why) => skip_or_fail(&format!(
            "no_stats_set_matches_ethtool on dummy/bridge: {why}"
        )),
    }
    for netdev in &netdevs {
        let err = ethtool_s(ethtool, netdev).unwrap_err();
        assert!(err.contains("no stats available"), "{netdev}: {err}");
        let ours = read_stats(netdev);
        assert!(
            matches!(ours, Err(EthtoolError::NotSupported { .. })),
            "{netdev}: {ours:?}"
        );
    }
}
