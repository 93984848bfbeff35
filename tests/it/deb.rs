//! The Debian package (`scripts/build-deb`): built from the test build's binary, installed with
//! dpkg into a scratch root (`dpkg --root`, maintainer scripts run outside a chroot, where they
//! must leave the host's systemd alone), its unit accepted by `systemd-analyze verify`, its
//! binary, config, alerts and dashboards the project's; then purged, leaving nothing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::project_root;

const PACKAGE: &str = "rdma-fabric-exporter";

fn text_of(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn dpkg(root: &Path, args: &[&str]) -> Output {
    Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        // Its log too (dpkg writes the host's /var/log/dpkg.log otherwise).
        .arg(format!("--log={}", root.join("var/log/dpkg.log").display()))
        // The scratch root has no shell to chroot into, and no libc6 in its database.
        .args(["--force-script-chrootless", "--force-depends"])
        .args(args)
        .output()
        .unwrap()
}

/// Every regular file below `dir`, relative.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                files.push(entry.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn the_deb_installs_into_a_scratch_root_and_its_unit_verifies() {
    for program in ["dpkg-deb", "systemd-analyze", "objdump"] {
        if Command::new(program).arg("--version").output().is_err() {
            return common::skip_or_fail(&format!("{program} not installed"));
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return common::skip_or_fail("dpkg --root installs files owned by root: needs root");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(project_root().join("scripts/build-deb"))
        .arg("--binary")
        .arg(common::binary())
        .arg("--output")
        .arg(dir.path())
        .env("DEB_COMPRESSION", "none")
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "build-deb: {}", text_of(&out));
    let deb = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        deb.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("{PACKAGE}_{}_", env!("CARGO_PKG_VERSION"))),
        "{}",
        deb.display()
    );

    let info = Command::new("dpkg-deb")
        .arg("--info")
        .arg(&deb)
        .output()
        .unwrap();
    let info = text_of(&info);
    for field in [
        format!("Package: {PACKAGE}"),
        format!("Version: {}", env!("CARGO_PKG_VERSION")),
        "Depends: libc6 (>= 2.".to_string(),
        // Loaded at run time by the probe collector, not linked: recommended, not required.
        "Recommends: libibverbs1, ibverbs-providers".to_string(),
    ] {
        assert!(info.contains(&field), "{field}: {info}");
    }

    // A scratch root with an empty dpkg database.
    let root = dir.path().join("root");
    let admin = root.join("var/lib/dpkg");
    std::fs::create_dir_all(admin.join("info")).unwrap();
    std::fs::create_dir_all(admin.join("updates")).unwrap();
    std::fs::write(admin.join("status"), "").unwrap();
    std::fs::write(admin.join("available"), "").unwrap();
    std::fs::create_dir_all(root.join("var/log")).unwrap();
    let out = dpkg(&root, &["--install", deb.to_str().unwrap()]);
    assert!(out.status.success(), "dpkg --install: {}", text_of(&out));
    let status = dpkg(&root, &["--status", PACKAGE]);
    assert!(
        text_of(&status).contains("Status: install ok installed"),
        "{}",
        text_of(&status)
    );
    let conffiles = text_of(&status);
    assert!(
        conffiles.contains(&format!("/etc/{PACKAGE}/config.yml")),
        "{conffiles}"
    );

    // The files: the project's alerts, dashboards, example and default config as they are.
    let share = root.join("usr/share").join(PACKAGE);
    for (installed, original) in [
        (share.join("alerts/rdma-rules.yml"), "alerts/rdma-rules.yml"),
        (
            share.join("alerts/rdma-alerts.yml"),
            "alerts/rdma-alerts.yml",
        ),
        (
            root.join("etc").join(PACKAGE).join("config.yml"),
            "deploy/systemd/config.yml",
        ),
        (
            root.join("usr/share/doc")
                .join(PACKAGE)
                .join("examples/config.yml"),
            "examples/config.yml",
        ),
    ] {
        assert_eq!(
            std::fs::read(&installed).unwrap_or_default(),
            std::fs::read(project_root().join(original)).unwrap(),
            "{}",
            installed.display()
        );
    }
    // The license: the copyright file names Apache-2.0 and points at Debian's copy of its text
    // (Debian policy: no second copy in the package), which must be the repository's LICENSE.
    let copyright =
        std::fs::read_to_string(root.join("usr/share/doc").join(PACKAGE).join("copyright"))
            .unwrap_or_default();
    let common = "/usr/share/common-licenses/Apache-2.0";
    assert!(
        copyright.contains("License: Apache-2.0") && copyright.contains(common),
        "{copyright}"
    );
    if let Ok(text) = std::fs::read(common) {
        assert_eq!(text, std::fs::read(project_root().join("LICENSE")).unwrap());
    }
    let dashboards = files_below(&share.join("dashboards"));
    let expected: Vec<PathBuf> = files_below(&project_root().join("dashboards"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(dashboards, expected);

    // The installed binary runs and accepts the installed config.
    let binary = root.join("usr/bin").join(PACKAGE);
    let config = root.join("etc").join(PACKAGE).join("config.yml");
    let out = Command::new(&binary)
        .args(["check-config", "--config.file"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text_of(&out));

    // The unit: the repository's, ExecStart on /usr/bin; systemd accepts it (pointed at the
    // binary in the scratch root, the only path that differs from a real install).
    let unit_path = root
        .join("lib/systemd/system")
        .join(format!("{PACKAGE}.service"));
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let original =
        std::fs::read_to_string(project_root().join("deploy/systemd/rdma-fabric-exporter.service"))
            .unwrap();
    let body = |text: &str| text[text.find("[Unit]").unwrap()..].to_string();
    assert_eq!(
        body(&unit),
        body(&original).replace("/usr/local/bin/", "/usr/bin/")
    );
    assert!(unit.contains("ExecStart=/usr/bin/rdma-fabric-exporter serve --config.file=/etc/rdma-fabric-exporter/config.yml"));
    let check = dir.path().join(format!("{PACKAGE}.service"));
    std::fs::write(
        &check,
        unit.replace(&format!("/usr/bin/{PACKAGE}"), binary.to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&check)
        .output()
        .unwrap();
    let text = text_of(&out);
    assert!(
        out.status.success() && !text.contains(&format!("{PACKAGE}.service:")),
        "{text}"
    );

    // The localizer's unit, shipped beside it, on /usr/bin as well.
    let localizer = std::fs::read_to_string(
        root.join("lib/systemd/system")
            .join(format!("{PACKAGE}-localizer.service")),
    )
    .unwrap();
    let original = std::fs::read_to_string(
        project_root().join("deploy/systemd/rdma-fabric-exporter-localizer.service"),
    )
    .unwrap();
    assert_eq!(
        body(&localizer),
        body(&original).replace("/usr/local/bin/", "/usr/bin/")
    );

    // Purged: every file of the package, the conffile included, is gone.
    let out = dpkg(&root, &["--purge", PACKAGE]);
    assert!(out.status.success(), "dpkg --purge: {}", text_of(&out));
    let left: Vec<PathBuf> = files_below(&root)
        .into_iter()
        .filter(|p| !p.starts_with("var/lib/dpkg") && !p.starts_with("var/log"))
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
}
