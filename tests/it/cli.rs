//! Command-line behaviour: config errors exit 2 with file, line, column; flags override the file.

use crate::common;

use common::*;

fn write_config(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new().suffix(".yml").tempfile().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

#[test]
fn check_config_accepts_the_examples() {
    for example in ["examples/config.yml", "examples/fixture-node.yml"] {
        let path = project_root().join(example);
        let (code, stdout, stderr) = run(&["check-config", "--config.file", path_str(&path)]);
        assert_eq!(code, 0, "{example}: {stderr}");
        assert!(stdout.contains("OK"));
    }
}

#[test]
fn typo_names_key_line_and_column_and_exits_2() {
    let config = write_config("web:\n  listen_address: :9866\nnode:\n  sysfs_path: /sys\n  devcies:\n    exclude: mlx5_0\n");
    let path = path_str(config.path()).to_string();
    let (code, _, stderr) = run(&["check-config", "--config.file", &path]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&format!("{path}:5:3:")), "{stderr}");
    assert!(stderr.contains("devcies"), "{stderr}");

    // serve refuses to start on the same file: exit 2 and nothing listening.
    let (code, _, stderr) = run(&[
        "serve",
        "--config.file",
        &path,
        "--web.listen-address",
        "127.0.0.1:1",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
}

#[test]
fn bad_regex_in_config_and_flag() {
    let config = write_config("node:\n  ethtool:\n    include: '(rx'\n");
    let (code, _, stderr) = run(&["check-config", "--config.file", path_str(config.path())]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains(":3:") && stderr.contains("invalid regular expression"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["serve", "--collector.infiniband.device-include", "(mlx"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("device-include"), "{stderr}");
}

/// check-config runs serve's validation: every problem at once (profiles, secret files and
/// variables, SNMPv3 password lengths, path conflicts), each at its line and column, never a
/// secret's value; serve refuses the same file with the same errors.
#[test]
fn check_config_reports_every_problem_serve_would() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "tiny12\n").unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let text = format!(
        "web:\n  telemetry_path: /probe\nswitches:\n\
         \x20 - name: a\n    address: 127.0.0.1\n    profile: acme\n    snmp: {{version: 2c, community_file: {missing}}}\n\
         \x20 - name: b\n    address: 127.0.0.1\n    profile: sonic\n    snmp: {{version: 2c, community_env: RFE_TEST_UNSET_VARIABLE}}\n\
         \x20 - name: c\n    address: 127.0.0.1\n    profile: sonic\n    snmp:\n      version: 3\n      username: mon\n      auth_protocol: sha\n      auth_password_file: {short}\n      priv_protocol: aes\n      priv_password_file: {fifo}\n",
        missing = dir.path().join("missing").display(),
        short = short.display(),
        fifo = fifo.display(),
    );
    let config = write_config(&text);
    let path = path_str(config.path()).to_string();
    let (code, stdout, stderr) = run(&["check-config", "--config.file", &path]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    for expected in [
        format!("{path}:2:19: web.telemetry_path"),
        format!("{path}:6:14: switch \"a\": unknown profile \"acme\""),
        format!("{path}:7:41: switch \"a\": community: "),
        format!("{path}:11:40: switch \"b\": community: environment variable RFE_TEST_UNSET_VARIABLE is not set"),
        format!("{path}:19:27: switch \"c\": auth password is shorter than the 8 characters"),
        format!("{path}:21:27: switch \"c\": priv password: "),
    ] {
        assert!(stderr.contains(&expected), "{expected}\nin\n{stderr}");
    }
    assert_eq!(stderr.lines().count(), 6, "{stderr}");
    assert!(
        !stderr.contains("tiny12"),
        "a secret's value was printed: {stderr}"
    );

    let (code, _, serve_stderr) = run(&[
        "serve",
        "--config.file",
        &path,
        "--web.listen-address",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2, "{serve_stderr}");
    let errors = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("error: "))
            .map(String::from)
            .collect()
    };
    assert_eq!(errors(&serve_stderr), errors(&stderr));
}

#[test]
fn check_config_reads_stdin() {
    use std::io::Write;
    let mut child = std::process::Command::new(binary())
        .args(["check-config", "--config.file", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"node:\n  enabled: perhaps\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("<stdin>:2:"));
}

#[test]
fn flags_override_the_file() {
    let config = write_config(
        "web:\n  telemetry_path: /from-file\nnode:\n  sysfs_path: /nonexistent\n  ethtool:\n    source: none\n",
    );
    let exporter = Exporter::start(&[
        "--config.file",
        path_str(config.path()),
        "--path.sysfs",
        path_str(&fixture("quirks/sys")),
    ]);
    let (status, _, body) = exporter.get("/from-file");
    assert_eq!(status, 200);
    assert!(
        body.contains("rdma_devices 3"),
        "flag --path.sysfs must override node.sysfs_path"
    );
}

#[test]
fn stats_dir_without_files_source_is_refused() {
    let config = write_config("node:\n  ethtool:\n    stats_dir: /tmp\n");
    let (code, _, stderr) = run(&["check-config", "--config.file", path_str(config.path())]);
    assert_eq!(code, 2);
    assert!(stderr.contains("source"), "{stderr}");
}

#[test]
fn listens_on_the_default_port_when_not_told_otherwise() {
    use std::io::BufRead;
    let empty = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(binary())
        .args(["--path.sysfs", path_str(empty.path())])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let line = std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("address=") || l.contains("ERROR"))
        .unwrap_or_default();
    stop(&mut child);
    let expected = format!(":{}", rdma_fabric_exporter::config::DEFAULT_PORT);
    assert!(line.contains(&format!("{expected} ")), "{line}");
    assert_eq!(rdma_fabric_exporter::config::DEFAULT_PORT, 9866);
}
