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
use rdma_fabric_exporter::switch::pfc::{resolve, PfcConfig, PfcSource};
use rdma_fabric_exporter::switch::profile::{parse_oid, Metric, Profile, Profiles, SnmpValue};
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
                "66" => SnmpValue::Gauge32(value.parse().unwrap()),
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
    // An EOS that serves the standard IEEE8021-PFC-MIB but not ARISTA-PFC-MIB, as older
    // releases (a 7150S on EOS 4.20) do: the Arista walk without its PFC rows, plus the
    // standard table's rows of the generic recording.
    let without_vendor_pfc: String = [("arista_eos", false), ("generic", true)]
        .iter()
        .flat_map(|(name, ieee)| {
            std::fs::read_to_string(fixture("snmprec").join(format!("{name}.snmprec")))
                .unwrap()
                .lines()
                .filter(|line| {
                    let is_ieee = line.starts_with("1.3.111.2.802.1.1.21.");
                    let is_arista_pfc = line.starts_with("1.3.6.1.4.1.30065.3.11.");
                    if *ieee {
                        is_ieee
                    } else {
                        !is_arista_pfc
                    }
                })
                .map(|line| format!("{line}\n"))
                .collect::<Vec<_>>()
        })
        .collect();
    // snmpsim wants the rows in OID order.
    let mut rows: Vec<&str> = without_vendor_pfc.lines().collect();
    rows.sort_by_key(|line| parse_oid(line.split('|').next().unwrap()).unwrap());
    std::fs::write(
        data.path().join("eos_without_vendor_pfc.snmprec"),
        rows.join("\n") + "\n",
    )
    .unwrap();
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
        // The vendor's PFC table is there: the standard one is not walked.
        assert!(
            result
                .samples
                .iter()
                .all(|s| s.metric != Metric::PfcFramesAllPriorities || *name == "generic"),
            "{name}: the fallback columns were walked although the vendor table answered"
        );
        // The standard DCBX tables (recorded: PFC on priority 3 of port 1 only, priority 3 of
        // port 2 on traffic class 5) give each port's lossless priorities and their queues.
        let states = resolve(&result.samples, PfcConfig::default());
        let state = |ifindex, priority| {
            states
                .iter()
                .find(|s| (s.ifindex, s.priority) == (ifindex, priority))
                .map(|s| (s.enabled, s.queue, s.source))
        };
        assert_eq!(state(1, 3), Some((true, 3, PfcSource::Switch)), "{name}");
        assert_eq!(state(1, 0), Some((false, 0, PfcSource::Switch)), "{name}");
        assert_eq!(state(2, 3), Some((false, 5, PfcSource::Switch)), "{name}");
        // The recording covers every column of the profile but its fallbacks.
        for column in profile.columns.iter().filter(|c| c.fallback_for.is_none()) {
            assert!(
                rows.iter().any(
                    |(oid, v)| oid.starts_with(&column.oid) && profile.decode(oid, v).is_some()
                ),
                "{name}: no recorded row for {}",
                column.name
            );
        }
    }

    // Without the vendor table, the standard one is walked: PFC data summed over priorities.
    let target = SnmpTarget {
        address: format!("127.0.0.1:{port}"),
        credentials: Credentials::V2c(Secret::new("eos_without_vendor_pfc")),
        timeout: Duration::from_millis(500),
        retries: 0,
        max_repetitions: 10,
    };
    let result = runtime
        .block_on(walk(&target, profiles.get("arista_eos").unwrap()))
        .unwrap();
    let pfc: Vec<_> = result
        .samples
        .iter()
        .filter(|s| matches!(s.metric, Metric::PfcFrames | Metric::PfcFramesAllPriorities))
        .collect();
    assert!(
        !pfc.is_empty()
            && pfc
                .iter()
                .all(|s| s.metric == Metric::PfcFramesAllPriorities),
        "{pfc:?}"
    );
}
