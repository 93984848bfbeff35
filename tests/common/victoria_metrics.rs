//! A real `victoria-metrics` (Debian's single-node package) on a loopback port, its data in a
//! directory: the central store of the fleet test (`tests/it/fleet_store.rs`) and of the fleet
//! bench (`benches/fleet/store.rs`, which includes this file). It names `super::ChildGuard`
//! and `super::prometheus`, as the other shared helpers do.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::prometheus::free_port;
use super::ChildGuard;

/// The program (`apt-get install victoria-metrics`; scripts/test installs it).
pub const PROGRAM: &str = "victoria-metrics";

/// Whether the program can be run here.
pub fn installed() -> bool {
    Command::new(PROGRAM)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Starts a store with its data in `dir` and waits until `/health` answers: the process and its
/// address, or why not.
pub fn start(dir: &Path) -> Result<(ChildGuard, String), String> {
    let address = format!("127.0.0.1:{}", free_port());
    let child = Command::new(PROGRAM)
        .arg(format!("-storageDataPath={}", dir.display()))
        .arg(format!("-httpListenAddr={address}"))
        .arg("-retentionPeriod=1d")
        // A sample is queryable as soon as it is stored (30 s later by default), and answers
        // are computed afresh, not from the response cache (which would serve one query's
        // answer for another timestamp's, or a timed run's answer from an earlier one).
        .arg("-search.latencyOffset=0s")
        .arg("-search.disableCache")
        .arg("-loggerLevel=ERROR")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{PROGRAM} (Debian package `victoria-metrics`): {e}"))?;
    let store = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reqwest::blocking::get(format!("http://{address}/health"))
        .is_ok_and(|r| r.status().is_success())
    {
        if Instant::now() > deadline {
            return Err(format!("{PROGRAM} did not start on {address}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((store, address))
}
