//! No secret from the configuration ever leaves the process: not the SNMP community, the SNMPv3
//! passwords, the gNMI password, nor the basic-auth password or its hash. The exporter runs at
//! log level trace against switches that fail in every way, and every page, every answer and
//! every log line is searched for each secret.

use crate::common;

use std::time::Duration;

use common::*;

const COMMUNITY: &str = "c0mmunity-S3CRET";
const AUTH_PASSWORD: &str = "auth-S3CRET-pass";
const PRIV_PASSWORD: &str = "priv-S3CRET-pass";
const GNMI_PASSWORD: &str = "gnmi-S3CRET-pass";
const WEB_PASSWORD: &str = "web-S3CRET-pass";

fn get_as(exporter: &Exporter, path: &str, password: &str) -> (u16, String) {
    let response = reqwest::blocking::Client::new()
        .get(exporter.url(path))
        .basic_auth("prometheus", Some(password))
        .timeout(Duration::from_secs(20))
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

#[test]
fn no_secret_appears_in_pages_answers_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let community = write("community", COMMUNITY);
    let auth = write("auth", AUTH_PASSWORD);
    let privacy = write("priv", PRIV_PASSWORD);
    let gnmi = write("gnmi", GNMI_PASSWORD);
    let hash = bcrypt::hash(WEB_PASSWORD, 4).unwrap();
    let web = write(
        "web.yml",
        &format!("basic_auth_users:\n  prometheus: {hash}\n"),
    );
    // Nobody answers: a silent UDP socket (SNMP) and a closed TCP port (gNMI).
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let snmp_address = silent.local_addr().unwrap();
    let config = write(
        "config.yml",
        &format!(
            "switches:\n\
             \x20 - {{name: v2c, address: '{snmp_address}', profile: generic, interval: 1s, timeout: 200ms, retries: 0, snmp: {{version: 2c, community_file: '{}'}}}}\n\
             \x20 - {{name: v3, address: '{snmp_address}', profile: generic, interval: 1s, timeout: 200ms, retries: 0, snmp: {{version: 3, username: monitor, auth_protocol: sha256, auth_password_file: '{}', priv_protocol: aes, priv_password_file: '{}'}}}}\n\
             \x20 - {{name: gnmi, address: '{closed}', protocol: gnmi, profile: sonic, interval: 1s, timeout: 200ms, gnmi: {{username: monitor, password_file: '{}', insecure: true}}}}\n",
            community.display(),
            auth.display(),
            privacy.display(),
            gnmi.display()
        ),
    );
    let sys = fixture("cx7-roce/sys");
    let exporter = Exporter::start(&[
        "--config.file",
        path_str(&config),
        "--web.config.file",
        path_str(&web),
        "--path.sysfs",
        path_str(&sys),
        "--collector.ethtool.source",
        "none",
        "--log.level",
        "trace",
    ]);
    // Let every switch fail a few times (three polls each on an idle machine in 3 s), and the
    // SNMP v2c and gNMI failures be counted, which is asserted below: waited for, since a
    // loaded machine polls later.
    std::thread::sleep(Duration::from_secs(3));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !["v2c", "gnmi"].iter().all(|switch| {
        get_as(&exporter, "/metrics", WEB_PASSWORD)
            .1
            .contains(&format!(
                "rdma_switch_poll_errors_total{{switch=\"{switch}\""
            ))
    }) && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut seen = Vec::new();
    for path in [
        "/metrics",
        "/",
        "/api/v1/fabric",
        "/probe?target=v2c",
        "/probe?target=v3",
        "/probe?target=gnmi",
        "/probe?target=nope",
    ] {
        let (status, body) = get_as(&exporter, path, WEB_PASSWORD);
        assert!(status == 200 || status == 400, "{path}: {status}");
        seen.push((path.to_string(), body));
    }
    let (status, body) = get_as(&exporter, "/metrics", "wrong");
    assert_eq!(status, 401);
    seen.push(("401".into(), body));
    // The switches really failed, so their errors went through the logs.
    let metrics = &seen[0].1;
    assert!(
        metrics.contains("rdma_switch_poll_errors_total{switch=\"v2c\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("rdma_switch_poll_errors_total{switch=\"gnmi\""),
        "{metrics}"
    );

    // Errors at startup name the file, never its content: a secret file that cannot be read.
    let unreadable = dir.path().join("missing-secret");
    let bad = write(
        "bad.yml",
        &format!(
            "switches:\n  - {{name: x, address: 127.0.0.1, profile: generic, snmp: {{version: 2c, community_file: '{}'}}}}\n",
            unreadable.display()
        ),
    );
    let (code, out, err) = run(&[
        "serve",
        "--config.file",
        path_str(&bad),
        "--web.listen-address",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing-secret"), "{err}");
    seen.push(("startup error".into(), format!("{out}{err}")));

    let logs = exporter.logs();
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG"),
        "trace logging is on"
    );
    seen.push(("logs".into(), logs));
    for secret in [
        COMMUNITY,
        AUTH_PASSWORD,
        PRIV_PASSWORD,
        GNMI_PASSWORD,
        WEB_PASSWORD,
        &hash,
    ] {
        for (place, text) in &seen {
            assert!(!text.contains(secret), "{secret:?} leaked into {place}");
        }
    }
}
