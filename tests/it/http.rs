//! The HTTP surface: content negotiation, health, landing page, telemetry path.

use crate::common;

use common::*;

fn quirks_exporter(extra: &[&str]) -> Exporter {
    Exporter::on_sysfs(&fixture("quirks/sys"), extra)
}

#[test]
fn openmetrics_when_asked_text_otherwise() {
    let exporter = quirks_exporter(&[]);
    let (status, content_type, body) = get_with(
        &exporter.url("/metrics"),
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    );
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    assert!(body.ends_with("# EOF\n"), "OpenMetrics must end with # EOF");
    assert!(
        body.contains("# TYPE rdma_port info\n"),
        "info type in OpenMetrics"
    );
    assert!(body.contains("# TYPE rdma_port_symbol_error counter\n"));

    let (status, content_type, body) = get_with(&exporter.url("/metrics"), &[]);
    assert_eq!(status, 200);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!body.contains("# EOF"));
    assert!(body.contains("# TYPE rdma_port_symbol_error_total counter\n"));
    // Both formats carry the same samples.
    let om = parse_exposition(
        &get_with(
            &exporter.url("/metrics"),
            &[("Accept", "application/openmetrics-text")],
        )
        .2,
    );
    let text = parse_exposition(&body);
    let names = |s: &[Sample]| {
        s.iter()
            .filter(|s| !s.name.contains("duration"))
            .map(|s| (s.name.clone(), s.labels.clone()))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(names(&om), names(&text));
}

#[test]
fn health_and_landing_page() {
    let exporter = quirks_exporter(&[]);
    let (status, _, body) = exporter.get("/healthz");
    assert_eq!((status, body.as_str()), (200, "OK\n"));
    let (status, content_type, page) = exporter.get("/");
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"), "{content_type}");
    assert!(page.contains("href=\"/metrics\""));
    for expected in [
        "qrk_pma0",
        "qrk_nodirs0",
        "4: ACTIVE",
        "100 Gb/s",
        "Recent read errors",
        "not_available",
        "dangling_symlink",
    ] {
        assert!(page.contains(expected), "landing page lacks {expected}");
    }
}

#[test]
fn custom_telemetry_path() {
    let exporter = quirks_exporter(&["--web.telemetry-path", "/rdma"]);
    let (status, _, body) = exporter.get("/rdma");
    assert_eq!(status, 200);
    assert!(body.contains("rdma_devices 3"));
    assert_eq!(exporter.get("/metrics").0, 404);
    assert!(exporter.get("/").2.contains("href=\"/rdma\""));
}

/// Scrapers that arrive while a scrape runs take its result instead of reading the node again:
/// every one is answered in full, and the exporter counts the coalesced ones.
#[test]
fn simultaneous_scrapes_share_one_read() {
    let exporter = Exporter::on_sysfs(&fixture("cx7-roce/sys"), &[]);
    let url = exporter.url("/metrics");
    let mut coalesced = 0.0;
    for _round in 0..20 {
        let bodies: Vec<(u16, String)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    scope.spawn(|| {
                        let (status, _, body) = get_with(&url, &[]);
                        (status, body)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (status, body) in &bodies {
            assert_eq!(*status, 200);
            assert!(
                body.contains("rdma_devices 10"),
                "a shared answer is a whole answer"
            );
        }
        let samples = parse_exposition(&exporter.metrics());
        coalesced = value_of(&samples, "rdma_exporter_coalesced_scrapes_total", &[]).unwrap();
        if coalesced > 0.0 {
            break;
        }
    }
    assert!(coalesced > 0.0, "16 scrapers at once never shared a read");
}

#[test]
fn process_figures_match_the_kernel_view_of_the_exporter() {
    let exporter = Exporter::on_sysfs(&fixture("cx7-roce/sys"), &[]);
    let samples = parse_exposition(&exporter.metrics());
    let pid = exporter.pid();
    let vm_rss_kib = memory_kib(pid, "VmRSS") as f64;
    let rss = value_of(&samples, "process_resident_memory_bytes", &[]).unwrap();
    // Same process, moments apart: within a quarter of each other.
    assert!(
        (rss / (vm_rss_kib * 1024.0) - 1.0).abs() < 0.25,
        "exported RSS {rss} vs VmRSS {vm_rss_kib} KiB"
    );
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as f64;
    let open_fds = value_of(&samples, "process_open_fds", &[]).unwrap();
    assert!((open_fds - fds).abs() <= 4.0, "{open_fds} vs {fds}");
    assert!(value_of(&samples, "process_max_fds", &[]).unwrap() >= open_fds);
    assert!(value_of(&samples, "process_threads", &[]).unwrap() >= 2.0);
    let tasks = value_of(&samples, "rdma_exporter_async_tasks", &[]).unwrap();
    assert!(
        (1.0..100.0).contains(&tasks),
        "{tasks} live tasks on an idle agent"
    );
    let started = value_of(&samples, "process_start_time_seconds", &[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now && started > now - 120.0,
        "started at {started}, now {now}"
    );
}

#[test]
fn unbounded_scrapes_never_share_a_read() {
    // The bench's comparison mode must really switch the bound off.
    let exporter = Exporter::on_sysfs(&fixture("cx7-roce/sys"), &["--debug.no-scrape-coalescing"]);
    let url = exporter.url("/metrics");
    for _round in 0..5 {
        std::thread::scope(|scope| {
            for _ in 0..16 {
                scope.spawn(|| assert_eq!(get_with(&url, &[]).0, 200));
            }
        });
    }
    let samples = parse_exposition(&exporter.metrics());
    assert_eq!(
        value_of(&samples, "rdma_exporter_coalesced_scrapes_total", &[]),
        Some(0.0)
    );
}

/// The cx7 fixture node with every node collector on (the storm sampler included).
fn cx7_exporter(extra: &[&str]) -> Exporter {
    let cx7 = fixture("cx7-roce");
    Exporter::on_node(&cx7.join("sys"), &cx7.join("ethtool"), extra)
}

/// `collector` label values of `rdma_exporter_collector_success` in a body.
fn collectors_reported(body: &str) -> Vec<String> {
    parse_exposition(body)
        .into_iter()
        .filter(|s| s.name == "rdma_exporter_collector_success")
        .filter_map(|s| s.labels.get("collector").cloned())
        .collect()
}

#[test]
fn collect_params_run_only_the_named_collectors() {
    let exporter = cx7_exporter(&[]);
    let all = exporter.metrics();
    assert_eq!(
        collectors_reported(&all),
        ["sysfs", "ethtool", "pfc_storm", "process"]
    );

    let (status, _, storm) = exporter.get("/metrics?collect[]=pfc_storm");
    assert_eq!(status, 200, "{storm}");
    assert_eq!(collectors_reported(&storm), ["pfc_storm"]);
    assert!(!storm.contains("rdma_port_"), "no walk for a storm scrape");
    assert!(!storm.contains("process_"));
    // The exporter's fixed families come with every answer.
    assert!(storm.contains("rdma_exporter_build_info{"));

    let (status, _, two) = exporter.get("/metrics?collect[]=process&collect[]=sysfs");
    assert_eq!(status, 200, "{two}");
    assert_eq!(collectors_reported(&two), ["sysfs", "ethtool", "process"]);
    assert!(two.contains("rdma_port_state{"));
    promtool_check_metrics(&two);
}

#[test]
fn unknown_or_disabled_collect_names_are_a_400_with_the_names() {
    let exporter = cx7_exporter(&["--no-collector.process"]);
    let (status, _, body) = exporter.get("/metrics?collect[]=sysfs&collect[]=bogus");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown collector \"bogus\""), "{body}");
    assert!(
        body.contains("sysfs, ethtool, pfc_storm, nccl, switch, process"),
        "{body}"
    );
    let (status, _, body) = exporter.get("/metrics?collect[]=process");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("enabled collectors: sysfs, ethtool, pfc_storm"),
        "{body}"
    );
}

#[test]
fn no_collector_flags_turn_collectors_off() {
    let exporter = cx7_exporter(&["--no-collector.ethtool", "--no-collector.process"]);
    let body = exporter.metrics();
    // Without driver statistics the storm sampler has nothing to sample.
    assert_eq!(collectors_reported(&body), ["sysfs"]);
    assert!(!body.contains("rdma_pfc_pause_frames_total"));
    assert!(!body.contains("process_open_fds"));

    let exporter = cx7_exporter(&["--no-collector.sysfs", "--collector.sysfs"]);
    assert!(collectors_reported(&exporter.metrics()).contains(&"sysfs".to_string()));

    let (code, _, stderr) = run(&["--collector.nccl", "--path.sysfs", "/nonexistent"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--collector.nccl needs a log directory"),
        "{stderr}"
    );
}

#[test]
fn sighup_neither_kills_serve_nor_demo() {
    for mut exporter in [
        quirks_exporter(&[]),
        Exporter::start_subcommand("demo", &["--hosts", "2", "--nics-per-host", "1"]),
    ] {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(exporter.pid() as i32, libc::SIGHUP) };
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (status, _, _) = exporter.get("/healthz");
        assert_eq!(status, 200, "{}", exporter.logs());
        assert!(exporter.logs().contains("SIGHUP"), "{}", exporter.logs());
        let exit = exporter.terminate(std::time::Duration::from_secs(10));
        assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
    }
}

#[test]
fn hostile_scrape_timeout_headers_get_an_answer() {
    let exporter = quirks_exporter(&[]);
    for hostile in ["1e30", "-5", "NaN", "inf", "1e-300", "99999999999999999999"] {
        let (status, _, body) = get_with(
            &exporter.url("/metrics"),
            &[("X-Prometheus-Scrape-Timeout-Seconds", hostile)],
        );
        assert_eq!(status, 200, "{hostile}: {body}");
        assert!(body.contains("rdma_devices "), "{hostile}");
    }
}

#[test]
fn a_telemetry_path_that_another_route_uses_is_a_config_error() {
    for taken in ["/healthz", "/probe", "/", "/{x}"] {
        let (code, _, stderr) = run(&[
            "--web.telemetry-path",
            taken,
            "--path.sysfs",
            "/nonexistent",
        ]);
        assert_eq!(code, 2, "{taken}: {stderr}");
        assert!(stderr.contains("web.telemetry_path"), "{taken}: {stderr}");
        let (code, _, stderr) = run(&["demo", "--web.telemetry-path", taken]);
        assert_eq!(code, 2, "demo {taken}: {stderr}");
    }
}

/// Connections that send half a request and then nothing, as a slowloris client does.
fn half_open_connections(exporter: &Exporter, count: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    (0..count)
        .filter_map(|_| {
            let mut stream = std::net::TcpStream::connect(&exporter.address).ok()?;
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .ok()?;
            Some(stream)
        })
        .collect()
}

#[test]
fn half_open_connections_neither_lock_out_scrapes_nor_hold_shutdown() {
    let mut exporter = quirks_exporter(&[]);
    // More than the exporter serves at once: the excess is closed at once, the rest when
    // their headers do not arrive in time (10 s).
    let _flood = half_open_connections(&exporter, 700);
    let started = std::time::Instant::now();
    let answered = loop {
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(2))
            .build()
            .unwrap();
        if let Ok(response) = client.get(exporter.url("/metrics")).send() {
            if response.status() == 200 {
                break true;
            }
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        answered,
        "no scrape answered for 30 s behind 700 half-open connections"
    );
    let _more = half_open_connections(&exporter, 50);
    let exit = exporter.terminate(std::time::Duration::from_secs(25));
    assert!(
        exit.is_some_and(|s| s.success()),
        "half-open connections held the process after SIGTERM: {exit:?}"
    );
}
