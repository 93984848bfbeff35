//! `--web.config.file`: TLS, client certificates, basic auth, headers and reloads, against the
//! real binary, reqwest, curl and a real Prometheus.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{fixture, path_str, prometheus, Exporter};

const PASSWORD: &str = "correct-horse-battery";

/// A CA, a server certificate for `localhost`/127.0.0.1 and a client certificate, as PEM files.
/// Unlike `gnmi_target::Pki` every certificate has its own subject: OpenSSL (curl) takes a leaf
/// whose subject equals its issuer's for self-signed.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    pub(crate) ca_pem: String,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
        let params = |names: Vec<String>, common_name: &str| {
            let mut params = CertificateParams::new(names).unwrap();
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
            params
        };
        let mut ca_params = params(Vec::new(), "test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        for (name, sans) in [
            (
                "server",
                vec!["localhost".to_string(), "127.0.0.1".to_string()],
            ),
            ("client", vec!["scraper".to_string()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let cert = params(sans, name).signed_by(&key, &ca).unwrap();
            write(&format!("{name}.pem"), &cert.pem());
            write(&format!("{name}.key"), &key.serialize_pem());
        }
        write("ca.pem", &ca.pem());
        Pki {
            ca_pem: ca.pem(),
            dir,
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Certificates, a bcrypt hash of `PASSWORD` (cost 4: fast), and the web config file beside them.
struct Setup {
    pki: Pki,
    hash: String,
    web_config: PathBuf,
}

impl Setup {
    fn new(web_yaml: impl Fn(&str) -> String) -> Setup {
        let pki = Pki::new();
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        let web_config = pki.path("web.yml");
        std::fs::write(&web_config, web_yaml(&hash)).unwrap();
        Setup {
            pki,
            hash,
            web_config,
        }
    }

    fn start(&self) -> Exporter {
        Exporter::on_sysfs(
            &fixture("quirks/sys"),
            &["--web.config.file", path_str(&self.web_config)],
        )
    }

    fn client(&self, with_client_cert: bool, exporter: &Exporter) -> reqwest::blocking::Client {
        let ca = reqwest::Certificate::from_pem(self.pki.ca_pem.as_bytes()).unwrap();
        let mut builder = reqwest::blocking::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .resolve("localhost", exporter.address.parse().unwrap());
        if with_client_cert {
            let mut pem = std::fs::read(self.pki.path("client.pem")).unwrap();
            pem.extend(std::fs::read(self.pki.path("client.key")).unwrap());
            builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
        }
        builder.build().unwrap()
    }
}

fn https(exporter: &Exporter, path: &str) -> String {
    let port = exporter.address.rsplit_once(':').unwrap().1;
    format!("https://localhost:{port}{path}")
}

fn tls_auth_yaml(hash: &str) -> String {
    format!(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=31536000\n\
         basic_auth_users:\n  alice: {hash}\n"
    )
}

/// Cases 1, 3, 4, 8: TLS and basic auth through reqwest and curl, headers on every response,
/// and neither the hash nor the password ever shown.
#[test]
fn tls_with_basic_auth() {
    let setup = Setup::new(tls_auth_yaml);
    let exporter = setup.start();
    let client = setup.client(false, &exporter);
    let url = https(&exporter, "/metrics");

    let response = client
        .get(&url)
        .basic_auth("alice", Some(PASSWORD))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-frame-options"], "deny");
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    assert_eq!(
        response.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    let body = response.text().unwrap();
    assert!(body.contains("rdma_exporter_build_info"), "{body}");

    let mut bodies = String::new();
    for (user, password) in [
        (Some("alice"), "wrong"),
        (Some("mallory"), PASSWORD),
        (None, ""),
    ] {
        let mut request = client.get(&url);
        if let Some(user) = user {
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().unwrap();
        assert_eq!(response.status(), 401, "{user:?}");
        assert_eq!(response.headers()["www-authenticate"], "Basic");
        assert_eq!(response.headers()["x-frame-options"], "deny");
        bodies.push_str(&response.text().unwrap());
    }
    // Every path is protected, /healthz included.
    assert_eq!(
        client
            .get(https(&exporter, "/healthz"))
            .send()
            .unwrap()
            .status(),
        401
    );

    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = reqwest::blocking::Client::new()
        .get(exporter.url("/metrics"))
        .basic_auth("alice", Some(PASSWORD))
        .send();
    assert!(plain.is_err(), "{plain:?}");

    let curl = |password: &str| {
        let port = exporter.address.rsplit_once(':').unwrap().1;
        let output = std::process::Command::new("/usr/bin/curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
            .args(["--cacert", path_str(&setup.pki.path("ca.pem"))])
            .args(["-u", &format!("alice:{password}")])
            .arg(&url)
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    assert_eq!(curl(PASSWORD), "200");
    assert_eq!(curl("nope"), "401");

    let logs = exporter.logs();
    for secret in [PASSWORD, setup.hash.as_str()] {
        assert!(!logs.contains(secret), "secret in the logs:\n{logs}");
        assert!(!bodies.contains(secret) && !body.contains(secret));
    }
}

/// Case 2: `RequireAndVerifyClientCert` refuses the handshake without a certificate.
#[test]
fn client_certificate_required() {
    let setup = Setup::new(|_| {
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  min_version: TLS12\n"
            .to_string()
    });
    let exporter = setup.start();
    let url = https(&exporter, "/metrics");
    let without = setup.client(false, &exporter).get(&url).send();
    assert!(without.is_err(), "{without:?}");
    let with = setup.client(true, &exporter).get(&url).send().unwrap();
    assert_eq!(with.status(), 200);
}

/// Case 5: a real Prometheus scrapes over TLS with basic auth.
#[test]
fn prometheus_scrapes_over_tls_with_basic_auth() {
    let setup = Setup::new(tls_auth_yaml);
    let exporter = setup.start();
    let port = exporter.address.rsplit_once(':').unwrap().1;
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, address) = prometheus::start(
        dir.path(),
        &format!(
            "  - job_name: rdma\n    scheme: https\n    tls_config:\n      ca_file: {}\n      server_name: localhost\n    basic_auth:\n      username: alice\n      password: {PASSWORD}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
            path_str(&setup.pki.path("ca.pem"))
        ),
    );
    let up = prometheus::wait_for(
        &address,
        "up{job=\"rdma\"}",
        Duration::from_secs(60),
        |up| up.first().is_some_and(|(_, v)| *v == 1.0),
    );
    assert_eq!(up.first().map(|(_, v)| *v), Some(1.0), "{up:?}");
}

/// Case 6: SIGHUP reloads; a broken file keeps the config in force; a changed file reloads.
#[test]
fn sighup_reloads_users() {
    let setup = Setup::new(tls_auth_yaml);
    let exporter = setup.start();
    let client = setup.client(false, &exporter);
    let url = https(&exporter, "/metrics");
    let status = |user: &str| {
        client
            .get(&url)
            .basic_auth(user, Some(PASSWORD))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status("alice"), 200);
    let hup = || {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(exporter.pid() as i32, libc::SIGHUP) };
    };

    std::fs::write(&setup.web_config, "basic_auth_users: [oops\n").unwrap();
    hup();
    wait_until(|| exporter.logs().contains("web config not reloaded"));
    assert_eq!(status("alice"), 200);

    std::fs::write(
        &setup.web_config,
        tls_auth_yaml(&setup.hash).replace("alice:", "bob:"),
    )
    .unwrap();
    hup();
    wait_until(|| exporter.logs().contains("web config reloaded"));
    assert_eq!(status("bob"), 200);
    assert_eq!(status("alice"), 401);

    // A changed file is picked up without a signal (looked at once a second).
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(
        &setup.web_config,
        tls_auth_yaml(&setup.hash).replace("alice:", "carol:"),
    )
    .unwrap();
    // Picked up at the next look: waited for, since a loaded machine looks later.
    wait_until(|| status("carol") == 200);
    assert_eq!(status("bob"), 401);
    let logs = exporter.logs();
    assert!(
        !logs.contains(&setup.hash) && !logs.contains(PASSWORD),
        "{logs}"
    );
}

/// Case 7: a typo in a key stops startup with exit 2 and the line and column.
#[test]
fn typo_in_web_config_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yml");
    std::fs::write(
        &file,
        "tls_server_config:\n  cert_file: a.pem\n  key_fil: a.key\n",
    )
    .unwrap();
    let (code, _, stderr) = common::run(&[
        "serve",
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.config.file",
        path_str(&file),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("web.yml:3:3: "), "{stderr}");
    assert!(stderr.contains("key_fil"), "{stderr}");
}

/// Certificate and key files are read like every other file: a FIFO in place of the
/// certificate is a config error naming it, at once, not a startup that hangs in `open`.
#[test]
fn a_fifo_as_the_tls_certificate_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("server.pem");
    assert!(std::process::Command::new("mkfifo")
        .arg(&cert)
        .status()
        .unwrap()
        .success());
    std::fs::write(dir.path().join("server.key"), "not used").unwrap();
    let file = dir.path().join("web.yml");
    std::fs::write(
        &file,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(common::binary())
        .args(["serve", "--web.listen-address", "127.0.0.1:0"])
        .arg("--web.config.file")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            common::stop(&mut child);
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = status.unwrap_or_else(|| panic!("still starting after 10 s: {stderr}"));
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("server.pem") && stderr.contains("not a regular file"),
        "{stderr}"
    );
}

fn wait_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The exporter on plain HTTP with `basic_auth_users` of one user whose hash has `cost`.
fn plain_auth_exporter(cost: u32) -> (tempfile::TempDir, Exporter) {
    let dir = tempfile::tempdir().unwrap();
    let web_config = dir.path().join("web.yml");
    let hash = bcrypt::hash(PASSWORD, cost).unwrap();
    std::fs::write(&web_config, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
    let exporter = Exporter::on_sysfs(
        &fixture("quirks/sys"),
        &["--web.config.file", path_str(&web_config)],
    );
    (dir, exporter)
}

/// The CPU time (user and system, in clock ticks of 10 ms) the process has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the exporter's stat");
    // Fields after the command name, which may hold spaces: state is the first, utime the 12th.
    let after_name = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The exporter's CPU ticks spent on one request with these credentials, and its status.
/// CPU time, not wall time: a busy machine stretches wall time at random (a CI run saw an
/// unknown user take 2.7 times a wrong password's wall time with both at the same cost), but
/// not the work bcrypt does.
fn cpu_spent(
    exporter: &Exporter,
    client: &reqwest::blocking::Client,
    url: &str,
    user: &str,
    password: &str,
) -> (u64, u16) {
    let before = cpu_ticks(exporter.pid());
    let status = client
        .get(url)
        .basic_auth(user, Some(password))
        .send()
        .unwrap_or_else(|e| panic!("no answer: {e}"))
        .status()
        .as_u16();
    (cpu_ticks(exporter.pid()) - before, status)
}

/// An unknown user costs the exporter the work of a wrong password, whatever the configured
/// cost (the check against a dummy hash used a fixed cost of 10 before: with cost 8, an
/// unknown user cost about 4 times as much).
#[test]
fn an_unknown_user_takes_as_long_as_a_wrong_password() {
    let _exclusive = common::exclusive(module_path!());
    // Enough requests that the 10 ms tick is small beside the total (cost 8 is ~20 ms each).
    for (cost, requests) in [(8, 24), (11, 6)] {
        let (_dir, exporter) = plain_auth_exporter(cost);
        let client = reqwest::blocking::Client::new();
        let url = exporter.url("/healthz");
        let (mut unknown, mut wrong) = (0, 0);
        // Interleaved, so that the exporter's own background work falls on both alike.
        for i in 0..requests {
            let (ticks, status) = cpu_spent(&exporter, &client, &url, "mallory", &format!("g{i}"));
            assert_eq!(status, 401);
            unknown += ticks;
            let (ticks, status) = cpu_spent(&exporter, &client, &url, "alice", &format!("g{i}"));
            assert_eq!(status, 401);
            wrong += ticks;
        }
        let ratio = unknown as f64 / wrong.max(1) as f64;
        eprintln!(
            "cost {cost}: {requests} unknown users {unknown} ticks, wrong passwords {wrong} ticks, ratio {ratio:.2}"
        );
        assert!(
            wrong >= requests as u64,
            "cost {cost}: bcrypt should cost a tick or more each, got {wrong} ticks for {requests}"
        );
        assert!(
            (0.5..2.0).contains(&ratio),
            "cost {cost}: unknown users {unknown} ticks, wrong passwords {wrong} ticks"
        );
    }
}

/// How long one request with these credentials takes, and its status.
fn timed(
    client: &reqwest::blocking::Client,
    url: &str,
    user: &str,
    password: &str,
) -> (Duration, u16) {
    let started = std::time::Instant::now();
    let status = client
        .get(url)
        .basic_auth(user, Some(password))
        .send()
        .unwrap_or_else(|e| panic!("no answer after {:?}: {e}", started.elapsed()))
        .status()
        .as_u16();
    (started.elapsed(), status)
}

/// A flood of wrong passwords from one host neither starves a legitimate scraper's first
/// verification (no host takes more than half the bcrypt slots; attempts that find none are
/// refused at once with a 429) nor its later scrapes (a verified scraper needs no bcrypt).
/// Before, every attempt queued behind one verification at a time: the scraper's first
/// verification waited behind the whole flood.
#[test]
fn a_correct_scrape_gets_through_an_auth_flood() {
    let _exclusive = common::exclusive(module_path!());
    let (_dir, exporter) = plain_auth_exporter(10);
    let url = exporter.url("/metrics");
    let flooders = 64;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let refused = std::sync::atomic::AtomicU64::new(0);
    let denied = std::sync::atomic::AtomicU64::new(0);
    let flood_from: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    std::thread::scope(|scope| {
        for flooder in 0..flooders {
            let (url, stop, refused, denied) = (&url, &stop, &refused, &denied);
            scope.spawn(move || {
                let client = reqwest::blocking::Client::builder()
                    .local_address(flood_from)
                    .timeout(Duration::from_secs(15))
                    .build()
                    .unwrap();
                let mut attempt = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    attempt += 1;
                    let Ok(response) = client
                        .get(url)
                        .basic_auth("alice", Some(format!("guess-{flooder}-{attempt}")))
                        .send()
                    else {
                        continue;
                    };
                    match response.status().as_u16() {
                        429 => refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        401 => denied.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        other => panic!("a wrong password got {other}"),
                    };
                }
            });
        }
        // A failing scraper stops the flood too, or the scope would wait for it for ever.
        let _stop_on_exit = StopOnDrop(&stop);
        // The flood is on before the scraper's first request.
        std::thread::sleep(Duration::from_secs(2));
        let scraper = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut latencies = Vec::new();
        for _ in 0..10 {
            let (time, status) = timed(&scraper, &url, "alice", PASSWORD);
            latencies.push(time);
            assert_eq!(
                status, 200,
                "a correct scrape after {time:?} during the flood"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let first = latencies[0];
        let later = latencies[1..].iter().max().unwrap();
        eprintln!(
            "auth flood of {flooders} clients: first (verified) scrape {first:?}, later (cached) scrapes at most {later:?}; flood answers: {} x 401, {} x 429",
            denied.load(std::sync::atomic::Ordering::Relaxed),
            refused.load(std::sync::atomic::Ordering::Relaxed)
        );
    });
    assert!(
        refused.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the flood was never refused unverified"
    );
}

struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Authorization values no client should send are a 401, never a dropped connection.
#[test]
fn hostile_authorization_values_are_a_401() {
    use std::io::{Read, Write};
    let (_dir, exporter) = plain_auth_exporter(4);
    let long = format!("Basic {}", "QUFB".repeat(10_000));
    let values: Vec<&[u8]> = vec![
        b"Basic",
        b"Basic ",
        b"Basic !!!!",
        b"Basic \xff\xfe",
        b"Basic /w==",     // one byte, 0xff: not UTF-8
        b"Basic YWxpY2U=", // "alice": no colon
        b"Bearer abc",
        b"basic\tYWxpY2U6eA==",
        long.as_bytes(),
    ];
    for value in values {
        let mut stream = std::net::TcpStream::connect(&exporter.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut request =
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ".to_vec();
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n\r\n");
        stream.write_all(&request).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 401"),
            "{:?}: {:?}",
            String::from_utf8_lossy(&value[..value.len().min(40)]),
            answer.lines().next()
        );
    }
}

/// TLS mode has the same bounds as plain HTTP: connections that never finish their handshake
/// and kept-alive TLS connections do not keep the process from exiting on SIGTERM: handshakes
/// in progress are dropped at once, answered connections get the shutdown grace.
#[test]
fn tls_connections_left_open_do_not_hold_shutdown() {
    let setup = Setup::new(tls_auth_yaml);
    let mut exporter = setup.start();
    // Silent TCP connections (the handshake never starts) and one whose handshake stops after
    // half a ClientHello.
    let mut silent: Vec<std::net::TcpStream> = (0..50)
        .filter_map(|_| std::net::TcpStream::connect(&exporter.address).ok())
        .collect();
    let mut half = std::net::TcpStream::connect(&exporter.address).unwrap();
    std::io::Write::write_all(&mut half, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
    silent.push(half);
    // A kept-alive TLS connection that has been answered.
    let client = setup.client(false, &exporter);
    let response = client
        .get(https(&exporter, "/healthz"))
        .basic_auth("alice", Some(PASSWORD))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let started = std::time::Instant::now();
    let exit = exporter.terminate(Duration::from_secs(25));
    let took = started.elapsed();
    assert!(
        exit.is_some_and(|s| s.success()),
        "open TLS connections held the process after SIGTERM: {exit:?}"
    );
    eprintln!("TLS mode exited {took:?} after SIGTERM");
    // Before, a connection in its handshake held the shutdown for the 10 s handshake timeout.
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    drop(silent);
}
