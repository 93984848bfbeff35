//! Replays every saved input of `fuzz/regressions/<target>/` (crashes the fuzzers found, and
//! hand-picked hostile inputs) through the function its fuzz target calls, on the stable
//! toolchain, so that a fixed crash stays fixed without cargo-fuzz.

use std::path::{Path, PathBuf};

use rdma_fabric_exporter::fuzzing::TARGETS;

fn regressions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions")
}

fn replay(target: &str) {
    let (_, run) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let dir = regressions().join(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{}: no saved inputs", dir.display());
    let failed: Vec<String> = inputs
        .iter()
        .filter(|input| {
            let data = std::fs::read(input).expect("a readable input");
            std::panic::catch_unwind(|| run(&data)).is_err()
        })
        .map(|input| input.display().to_string())
        .collect();
    assert!(failed.is_empty(), "inputs that fail {target}: {failed:#?}");
}

#[test]
fn sysfs_value() {
    replay("sysfs_value");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn nccl_log() {
    replay("nccl_log");
}

#[test]
fn ib_diags_text() {
    replay("ib_diags_text");
}

#[test]
fn ethtool_strings() {
    replay("ethtool_strings");
}

#[test]
fn ethtool_text() {
    replay("ethtool_text");
}

#[test]
fn snmp_values() {
    replay("snmp_values");
}

#[test]
fn gnmi_values() {
    replay("gnmi_values");
}

#[test]
fn gnmi_json() {
    replay("gnmi_json");
}

#[test]
fn rdma_netlink() {
    replay("rdma_netlink");
}

/// Each target has a test above and a directory; a directory of a renamed target would
/// otherwise replay nothing, silently.
#[test]
fn directories_and_targets_match() {
    let mut dirs: Vec<String> = std::fs::read_dir(regressions())
        .expect("fuzz/regressions")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut targets: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    targets.sort();
    assert_eq!(dirs, targets);
    let source = include_str!("fuzz_regressions.rs");
    for target in targets {
        assert!(
            source.contains(&format!("replay(\"{target}\")")),
            "no test replays {target}"
        );
    }
}

/// The fuzz workspace has its own lock file, and CI builds it `--locked`: a new dependency of
/// the main crate that is not in `fuzz/Cargo.lock` fails CI before any test runs (it did, three
/// times). Resolving it here makes a plain `cargo test` catch that.
#[test]
fn the_fuzz_lock_file_resolves_the_main_crates_dependencies() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml");
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--locked", "--offline", "--format-version", "1"])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "fuzz/Cargo.lock is stale; run `cargo update --offline -w --manifest-path fuzz/Cargo.toml`:\n{stderr}"
    );
}
