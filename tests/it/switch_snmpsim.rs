//! Every vendor profile against a real SNMP agent: snmpsim (PyPI, installed by scripts/test into
//! /opt/snmpsim) serves recorded walks (`tests/fixtures/snmprec/<profile>.snmprec`, community =
//! profile name), and what the exporter decodes must equal what the recordings hold.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rdma_fabric_exporter::switch::profile::{parse_oid, Profile, Profiles, SnmpValue};
use rdma_fabric_exporter::switch::secret::Secret;
use rdma_fabric_exporter::switch::snmp::{walk, Credentials, SnmpTarget};

const PROFILES: &[&str] = &[
    "generic",
    "sonic",
    "cisco_nxos",
    "arista_eos",
    "nvidia_cumulus",
    "juniper_junos",
];

fn responder() -> PathBuf {
    let path = std::env::var_os("SNMPSIM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/snmpsim/bin/snmpsim-command-responder"));
    assert!(
        path.exists(),
        "{} not found: scripts/test installs snmpsim there",
        path.display()
    );
    path
}

/// The rows of a recording, as the profile should decode them.
fn recorded(path: &Path) -> Vec<(Vec<u32>, SnmpValue)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, '|');
            let (oid, kind, value) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let value = match kind {
                "2" => SnmpValue::Integer(value.parse().unwrap()),
                "4" => SnmpValue::OctetString(value.as_bytes().to_vec()),
                "65" => SnmpValue::Counter32(value.parse().unwrap()),
                "70" => SnmpValue::Counter64(value.parse().unwrap()),
                other => panic!("type {other} not used in the recordings"),
            };
            (parse_oid(oid).unwrap(), value)
        })
        .collect()
}

fn decoded(profile: &Profile, rows: &[(Vec<u32>, SnmpValue)]) -> BTreeSet<String> {
    rows.iter()
        .map(|(oid, value)| {
            let sample = profile
                .decode(oid, value)
                .expect("every recorded row belongs to a column")
                .unwrap();
            format!("{sample:?}")
        })
        .collect()
}

#[test]
fn every_profile_decodes_its_recorded_walk() {
    let responder = responder();
    let data = tempfile::tempdir().unwrap();
    let cache = data.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    for name in PROFILES {
        let file = format!("{name}.snmprec");
        std::fs::copy(fixture("snmprec").join(&file), data.path().join(&file)).unwrap();
    }
    // snmpsim drops root privileges to nobody, who must read the recordings and write the cache.
    let open = |path: &Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(data.path(), 0o755);
    open(&cache, 0o777);
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _agent = ChildGuard(
        Command::new(&responder)
            .arg(format!("--data-dir={}", data.path().display()))
            .arg(format!("--agent-udpv4-endpoint=127.0.0.1:{port}"))
            .args(["--process-user=nobody", "--process-group=nogroup"])
            .arg(format!("--cache-dir={}", cache.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting snmpsim"),
    );

    let profiles = Profiles::builtin().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for name in PROFILES {
        let profile = profiles.get(name).unwrap();
        let target = SnmpTarget {
            address: format!("127.0.0.1:{port}"),
            credentials: Credentials::V2c(Secret::new(*name)),
            timeout: Duration::from_millis(500),
            retries: 0,
            max_repetitions: 10,
        };
        // snmpsim indexes its recordings at start-up: retry until it answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        let result = loop {
            match runtime.block_on(walk(&target, profile)) {
                Ok(result) if !result.samples.is_empty() => break result,
                outcome => {
                    assert!(
                        Instant::now() < deadline,
                        "{name}: snmpsim never answered: {outcome:?}"
                    );
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        };
        assert!(
            result.decode_errors.is_empty(),
            "{name}: {:?}",
            result.decode_errors
        );
        let rows = recorded(&fixture("snmprec").join(format!("{name}.snmprec")));
        let expected = decoded(profile, &rows);
        let got: BTreeSet<String> = result.samples.iter().map(|s| format!("{s:?}")).collect();
        assert_eq!(
            got, expected,
            "{name}: walked samples differ from the recording"
        );
        // The recording covers every column of the profile.
        for column in &profile.columns {
            assert!(
                rows.iter().any(
                    |(oid, v)| oid.starts_with(&column.oid) && profile.decode(oid, v).is_some()
                ),
                "{name}: no recorded row for {}",
                column.name
            );
        }
    }
}
