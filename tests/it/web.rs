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
struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
}

impl Pki {
    fn new() -> Pki {
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

    fn path(&self, name: &str) -> PathBuf {
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
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(status("carol"), 200);
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

fn wait_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(50));
    }
}
