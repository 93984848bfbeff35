//! The container image, built and run for real: `scripts/build-image` (buildah, from `scratch`,
//! no daemon, no base image) in a container store of the test's own, then podman runs it as
//! Kubernetes would run the chart's pods (read-only root filesystem, every capability dropped,
//! no new privileges): in `demo` mode, scraped; and as the node agent on the ConnectX-7 fixture
//! mounted read-only at `/host/sys`, whose `/metrics` must be the golden file's, and with the
//! args the Helm chart's DaemonSet gives it; and as the InfiniBand scanner, which finds
//! infiniband-diags' tools in it; and with the probe collector on, which loads libibverbs in
//! it. The image holds the binary, those tools, libibverbs with its providers and driver files,
//! the libraries `ldd` names for all these, passwd/group and the CA bundle, nothing else, and
//! runs as 65534.
//!
//! The binary is the test build's (debug, its debug info stripped by scripts/image-rootfs), or
//! `$RFE_IMAGE_BINARY` (a release build, to measure the shipped image). Needs root, buildah,
//! podman and runc (Debian packages; crun, podman's default, refuses this kernel's hybrid
//! cgroups).

use crate::common;
use crate::golden;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::project_root;

const TAG: &str = "localhost/rdma-fabric-exporter:it";
/// infiniband-diags' tools the ib_fabric collector runs, in the image at these paths.
const IB_TOOLS: [&str; 2] = ["/usr/sbin/ibnetdiscover", "/usr/sbin/perfquery"];

/// A container store of the test's own under a temporary directory: its containers and images
/// are removed, and the directory with them, when it is dropped (a failing test's too).
struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn new() -> Store {
        Store {
            dir: tempfile::Builder::new()
                .prefix("rfe-image-")
                .tempdir()
                .unwrap(),
        }
    }

    /// The options both buildah and podman take to use this store.
    fn storage_options(&self) -> Vec<String> {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        vec![
            "--root".into(),
            path("root"),
            "--runroot".into(),
            path("run"),
            "--storage-driver".into(),
            "vfs".into(),
        ]
    }

    fn podman(&self, args: &[&str]) -> Output {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        // podman's default locks live in /dev/shm/libpod_lock, which outlives the store: file
        // locks stay in it (`lock_type`, containers.conf).
        let conf = path("containers.conf");
        if !Path::new(&conf).exists() {
            std::fs::write(&conf, "[engine]\nlock_type = \"file\"\n").unwrap();
        }
        Command::new("podman")
            .env("CONTAINERS_CONF", &conf)
            .args(self.storage_options())
            .args(["--tmpdir", &path("tmp")])
            .args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"])
            .args(["--runtime", "runc"])
            .args(args)
            .output()
            .unwrap()
    }

    /// `podman ARGS`, asserted to succeed; its standard output.
    fn podman_ok(&self, args: &[&str]) -> String {
        let out = self.podman(args);
        assert!(out.status.success(), "podman {args:?}: {}", text_of(&out));
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.podman(&["rm", "--all", "--force", "--time", "0"]);
        let _ = self.podman(&["rmi", "--all", "--force"]);
        // A container's exit makes conmon run `podman container cleanup` with this store's
        // options, which may still be writing into it (a CI run found the store recreated
        // after it was removed): the directory goes once no process names it.
        let dir = self.dir.path().display().to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && Command::new("pgrep")
                .args(["-f", &dir])
                .output()
                .is_ok_and(|o| o.status.success())
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn text_of(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A loopback port nobody listens on now (the container shares the host network: `--network
/// host`, so that no bridge or NAT is set up).
/// GET /metrics until it answers 200 (the container takes a moment to start).
fn scrape(port: u16, store: &Store, name: &str) -> String {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = reqwest::blocking::get(&url) {
            if response.status().as_u16() == 200 {
                return response.text().unwrap();
            }
        }
        if Instant::now() > deadline {
            let logs = store.podman(&["logs", name]);
            panic!("{name} did not answer on {url}:\n{}", text_of(&logs));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The process of a running container, as the host sees it: its user and capabilities.
fn assert_unprivileged(store: &Store, name: &str) {
    let pid = store
        .podman_ok(&["inspect", name, "--format", "{{.State.Pid}}"])
        .trim()
        .to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(field("Uid:"), ["65534"; 4], "{name}: {status}");
    assert_eq!(field("Gid:"), ["65534"; 4], "{name}: {status}");
    assert_eq!(field("CapEff:"), ["0000000000000000"], "{name}");
    assert_eq!(field("NoNewPrivs:"), ["1"], "{name}");
    assert_eq!(
        store
            .podman_ok(&[
                "inspect",
                name,
                "--format",
                "{{.HostConfig.ReadonlyRootfs}}"
            ])
            .trim(),
        "true"
    );
}

/// `podman run -d` with the pod security the chart sets, on the host network.
fn run(store: &Store, name: &str, volumes: &[String], args: &[&str]) {
    let mut command: Vec<&str> = vec![
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
        // The sandbox refuses podman's default limits (above its own hard limits).
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
    ];
    for volume in volumes {
        command.extend(["--volume", volume]);
    }
    command.push(TAG);
    command.extend(args);
    store.podman_ok(&command);
}

/// What the probe collector loads at run time, which `ldd` of the binary does not list: the
/// path ld.so.cache gives for libibverbs.so.1, its providers (`libibverbs/` beside the
/// library's real file) and /etc/libibverbs.d's driver files.
fn verbs_files() -> (String, Vec<String>, Vec<String>) {
    let cache = Command::new("/sbin/ldconfig").arg("-p").output().unwrap();
    let libibverbs = String::from_utf8(cache.stdout)
        .unwrap()
        .lines()
        .find_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (words.first() == Some(&"libibverbs.so.1")).then(|| words.last().unwrap().to_string())
        })
        .expect("libibverbs.so.1 in ld.so.cache (apt-get install libibverbs1 ibverbs-providers)");
    let files_of = |dir: &Path, keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| keep(&p.file_name().unwrap().to_string_lossy()))
            .map(|p| p.display().to_string())
            .collect();
        files.sort();
        files
    };
    let real = std::fs::canonicalize(&libibverbs).unwrap();
    let providers = files_of(&real.parent().unwrap().join("libibverbs"), &|name| {
        name.starts_with("lib") && name.contains("-rdmav") && name.ends_with(".so")
    });
    let drivers = files_of(Path::new("/etc/libibverbs.d"), &|name| {
        name.ends_with(".driver")
    });
    (libibverbs, providers, drivers)
}

/// The files a built image must hold: the binary, libibverbs with its providers and driver
/// files, the libraries `ldd` lists for all these, passwd and group, the CA bundle when the
/// build host has one; and the directories above them.
fn expected_files(binary: &Path) -> BTreeSet<String> {
    let (libibverbs, providers, drivers) = verbs_files();
    let ldd = Command::new("ldd")
        .arg(binary)
        .args(IB_TOOLS)
        .arg(&libibverbs)
        .args(&providers)
        .output()
        .unwrap();
    let mut files: BTreeSet<String> = String::from_utf8(ldd.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [_, "=>", path, ..] if path.starts_with('/') => Some(path.to_string()),
                // The loader; `FILE:` heads each file's list when ldd is given several.
                [path, ..] if path.starts_with('/') && !path.ends_with(':') => {
                    Some(path.to_string())
                }
                _ => None,
            }
        })
        .collect();
    assert!(
        files.iter().any(|f| f.contains("libc.so")),
        "ldd: {files:?}"
    );
    assert!(
        files.iter().any(|f| f.contains("libibmad.so")),
        "ldd: {files:?}"
    );
    files.insert("/usr/local/bin/rdma-fabric-exporter".into());
    files.extend(IB_TOOLS.iter().map(|t| t.to_string()));
    files.insert(libibverbs);
    files.extend(providers);
    files.extend(drivers);
    files.insert("/etc/passwd".into());
    files.insert("/etc/group".into());
    if Path::new("/etc/ssl/certs/ca-certificates.crt").is_file() {
        files.insert("/etc/ssl/certs/ca-certificates.crt".into());
    }
    let mut with_dirs = files.clone();
    for file in &files {
        let mut dir = Path::new(file).parent();
        while let Some(d) = dir.filter(|d| *d != Path::new("/")) {
            with_dirs.insert(format!("{}/", d.display()));
            dir = d.parent();
        }
    }
    with_dirs
}

#[test]
fn the_image_builds_from_scratch_and_runs_the_demo_and_the_node_agent_unprivileged() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return common::skip_or_fail("building and running the image needs root (podman, buildah)");
    }
    if IB_TOOLS.iter().any(|t| !Path::new(t).is_file()) {
        return common::skip_or_fail(
            "infiniband-diags not installed (the image carries ibnetdiscover and perfquery)",
        );
    }
    for program in ["buildah", "podman", "runc"] {
        if !installed(program) {
            return common::skip_or_fail(&format!(
                "{program} not installed (Debian package `{program}`; scripts/test installs it)"
            ));
        }
    }
    let _exclusive = common::exclusive(module_path!());
    let binary = std::env::var_os("RFE_IMAGE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(common::binary);
    let store = Store::new();

    let mut build = Command::new(project_root().join("scripts/build-image"));
    build
        .arg("--binary")
        .arg(&binary)
        .args(["--tag", TAG, "--"])
        .args(store.storage_options())
        .env("TMPDIR", store.dir.path());
    let started = Instant::now();
    let out = build.output().unwrap();
    assert!(
        out.status.success(),
        "build-image ({}, after {:.1} s): {}",
        out.status,
        started.elapsed().as_secs_f64(),
        text_of(&out)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().last(),
        Some(TAG)
    );
    let size = store.podman_ok(&["image", "inspect", TAG, "--format", "{{.Size}}"]);
    eprintln!(
        "image {TAG} of {}: {} bytes, built in {:.1} s",
        binary.display(),
        size.trim(),
        started.elapsed().as_secs_f64()
    );

    // What Kubernetes reads from the image: user, entrypoint, default command, port.
    let config = store.podman_ok(&[
        "image",
        "inspect",
        TAG,
        "--format",
        "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{json .Config.ExposedPorts}}|{{json .Config.Env}}",
    ]);
    assert_eq!(
        config.trim(),
        r#"65534:65534|["/usr/local/bin/rdma-fabric-exporter"]|["serve"]|{"9866/tcp":{}}|["PATH=/usr/local/bin:/usr/sbin"]"#
    );

    // The license it is under (the repository's LICENSE), for scanners that read the label.
    let licenses = store.podman_ok(&[
        "image",
        "inspect",
        TAG,
        "--format",
        "{{index .Labels \"org.opencontainers.image.licenses\"}}",
    ]);
    assert_eq!(licenses.trim(), "Apache-2.0");
    assert!(std::fs::read_to_string(project_root().join("LICENSE"))
        .unwrap()
        .contains("Apache License\n                           Version 2.0, January 2004"));

    // Every file of the image, and nothing else: no shell, no package manager.
    let container = store.podman_ok(&["create", TAG]);
    let exported = store.dir.path().join("export.tar");
    store.podman_ok(&[
        "export",
        "--output",
        common::path_str(&exported),
        container.trim(),
    ]);
    let listing = Command::new("tar")
        .args(["--list", "--verbose", "--numeric-owner", "--file"])
        .arg(&exported)
        .output()
        .unwrap();
    assert!(listing.status.success(), "{}", text_of(&listing));
    std::fs::remove_file(&exported).unwrap();
    let mut files = BTreeSet::new();
    // `-rwxr-xr-x 0/0 18817632 1970-01-01 00:00 usr/local/bin/rdma-fabric-exporter`
    for line in String::from_utf8(listing.stdout).unwrap().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (mode, owner, name) = (fields[0], fields[1], fields[fields.len() - 1]);
        let path = format!("/{}", name.trim_start_matches("./").trim_start_matches('/'));
        assert_eq!(
            owner, "0/0",
            "{path}: owned by root, read-only to the exporter's user"
        );
        assert!(
            !mode.starts_with('l') && mode.as_bytes()[5] != b'w' && mode.as_bytes()[8] != b'w',
            "{line}: no symlink, not writable by group or others"
        );
        if path != "/" {
            files.insert(path);
        }
    }
    store.podman_ok(&["rm", container.trim()]);
    // What probing loads, which no `ldd` shows: libibverbs, the providers (soft-RoCE's at
    // least) and the driver files that name them.
    assert!(
        files.iter().any(|f| f.ends_with("/libibverbs.so.1")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|f| f
            .rsplit_once("/libibverbs/librxe-rdmav")
            .is_some_and(|(_, version)| version.ends_with(".so"))),
        "{files:?}"
    );
    assert!(files.contains("/etc/libibverbs.d/rxe.driver"), "{files:?}");
    assert_eq!(files, expected_files(&binary));

    // The demo, scraped.
    let port = common::prometheus::free_port();
    let demo = format!("rfe-image-demo-{}", std::process::id());
    run(
        &store,
        &demo,
        &[],
        &[
            "demo",
            &format!("--web.listen-address=127.0.0.1:{port}"),
            "--hosts",
            "2",
            "--nics-per-host",
            "2",
        ],
    );
    let body = scrape(port, &store, &demo);
    let samples = common::parse_exposition(&body);
    assert!(
        samples
            .iter()
            .any(|s| s.name == "rdma_switch_port_up" || s.name.starts_with("rdma_switch_")),
        "{body}"
    );
    assert_unprivileged(&store, &demo);
    // SIGTERM: the demo removes its fabric and exits 0, inside the container as outside.
    store.podman_ok(&["stop", "--time", "10", &demo]);
    assert_eq!(
        store
            .podman_ok(&["inspect", &demo, "--format", "{{.State.ExitCode}}"])
            .trim(),
        "0",
        "{}",
        text_of(&store.podman(&["logs", &demo]))
    );

    // The node agent on the fixture node, /sys read-only as the DaemonSet mounts it.
    let fixture = common::fixture("cx7-roce");
    let port = common::prometheus::free_port();
    let agent = format!("rfe-image-agent-{}", std::process::id());
    run(
        &store,
        &agent,
        &[
            format!("{}:/host/sys:ro", fixture.join("sys").display()),
            format!("{}:/host/ethtool:ro", fixture.join("ethtool").display()),
        ],
        &[
            "serve",
            &format!("--web.listen-address=127.0.0.1:{port}"),
            "--path.sysfs=/host/sys",
            "--collector.ethtool.source=files",
            "--collector.ethtool.stats-dir=/host/ethtool",
            "--no-collector.pfc-storm",
            "--no-collector.netlink",
        ],
    );
    let body = scrape(port, &store, &agent);
    assert_unprivileged(&store, &agent);
    common::assert_no_duplicate_series(&body);
    let golden_file = project_root().join("tests/golden/cx7-roce.prom");
    let expected = std::fs::read_to_string(&golden_file).unwrap();
    let got = golden::normalize(&body);
    if got != expected {
        let first = got
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "the agent in the image serves other metrics than {} from line {}:\n  got:      {:?}\n  expected: {:?}",
            golden_file.display(),
            first + 1,
            got.lines().nth(first),
            expected.lines().nth(first)
        );
    }
    // The node agent as the chart's DaemonSet runs it (its args, /sys at /host/sys), but for
    // the listen address: the host's network is this machine's.
    if let Some(helm) = crate::helm::helm() {
        let objects = crate::helm::template(&helm, &[], &[]).unwrap();
        let daemonset = objects.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
        let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
        let sysfs = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
        let port = common::prometheus::free_port();
        let listen = format!("--web.listen-address=127.0.0.1:{port}");
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .map(|a| {
                if a.starts_with("--web.listen-address=") {
                    listen.as_str()
                } else {
                    a
                }
            })
            .collect();
        assert!(
            args.contains(&format!("--path.sysfs={sysfs}").as_str()),
            "{args:?}"
        );
        let chart_agent = format!("rfe-image-chart-agent-{}", std::process::id());
        run(
            &store,
            &chart_agent,
            &[format!("{}:{sysfs}:ro", fixture.join("sys").display())],
            &args,
        );
        let samples = common::parse_exposition(&scrape(port, &store, &chart_agent));
        assert_eq!(
            common::value_of(
                &samples,
                "rdma_exporter_collector_success",
                &[("collector", "sysfs")]
            ),
            Some(1.0)
        );
        assert!(
            samples.iter().any(|s| s.name == "rdma_port_state"),
            "no port of the fixture read"
        );
        assert_unprivileged(&store, &chart_agent);
    }

    // The probe collector loads libibverbs and its providers from the image: probing is off for
    // want of RDMA devices in the container, not of the library.
    let port = common::prometheus::free_port();
    let prober = format!("rfe-image-probe-{}", std::process::id());
    run(
        &store,
        &prober,
        &[],
        &[
            "serve",
            &format!("--web.listen-address=127.0.0.1:{port}"),
            "--no-collector.netlink",
            "--collector.probe",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let logs = text_of(&store.podman(&["logs", &prober]));
        if logs.contains("probing is off") {
            assert!(!logs.contains("libibverbs not found"), "{logs}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing said about probing:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_unprivileged(&store, &prober);

    // The InfiniBand scanner: ibnetdiscover is found on the image's PATH and runs (it gets as
    // far as opening a UMAD port, which this machine has none of).
    let port = common::prometheus::free_port();
    let scanner = format!("rfe-image-ib-{}", std::process::id());
    run(
        &store,
        &scanner,
        &[],
        &[
            "serve",
            &format!("--web.listen-address=127.0.0.1:{port}"),
            "--no-collector.sysfs",
            "--no-collector.netlink",
            "--collector.ib_fabric",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let logs = text_of(&store.podman(&["logs", &scanner]));
        assert!(!logs.contains("could not start ibnetdiscover"), "{logs}");
        if logs.contains("ibnetdiscover failed (exit status") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no scan result in the logs:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The scan's counter appears once the first scan has ended, a moment after its log line
    // (a scrape right after the start found none in one CI run).
    loop {
        let body = scrape(port, &store, &scanner);
        if body
            .lines()
            .any(|l| l.starts_with("rdma_ib_fabric_scans_total "))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no finished scan served:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The Dockerfile (for users with a registry and a daemon; not buildable here) makes the same
/// image: its final stage is `scratch` plus scripts/image-rootfs's tree, with the user,
/// entrypoint, command, PATH and port that scripts/build-image sets (the test above checks
/// those on the built image).
#[test]
fn the_dockerfile_builds_the_same_layout_as_build_image() {
    let dockerfile = std::fs::read_to_string(project_root().join("Dockerfile")).unwrap();
    let instructions: Vec<&str> = dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect();
    let last_from = instructions
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .unwrap();
    let final_stage = &instructions[last_from..];
    assert_eq!(final_stage[0], "FROM scratch");
    assert!(
        dockerfile.contains("scripts/image-rootfs target/release/rdma-fabric-exporter /rootfs"),
        "{dockerfile}"
    );
    let build_image = std::fs::read_to_string(project_root().join("scripts/build-image")).unwrap();
    for (docker, buildah) in [
        ("COPY --from=build /rootfs/ /", "\"$rootfs/\" /"),
        ("USER 65534:65534", "--user 65534:65534"),
        (
            "ENV PATH=/usr/local/bin:/usr/sbin",
            "--env PATH=/usr/local/bin:/usr/sbin",
        ),
        ("EXPOSE 9866/tcp", "--port 9866/tcp"),
        (
            r#"ENTRYPOINT ["/usr/local/bin/rdma-fabric-exporter"]"#,
            r#"--entrypoint '["/usr/local/bin/rdma-fabric-exporter"]'"#,
        ),
        (r#"CMD ["serve"]"#, "--cmd serve"),
    ] {
        assert!(final_stage.contains(&docker), "Dockerfile lacks {docker}");
        assert!(
            build_image.contains(buildah),
            "scripts/build-image lacks {buildah}"
        );
    }
    assert_eq!(final_stage.len(), 7, "{final_stage:?}");
}
