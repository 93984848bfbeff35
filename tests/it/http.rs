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

/// The async runtime runs one thread on a node agent (node_exporter's `--runtime.gomaxprocs`
/// is 1 too), and as many as `--runtime.worker-threads` asks for. Counted before any scrape:
/// a scrape's blocking task would add a thread of the same name.
#[test]
fn a_node_agent_runs_one_runtime_thread_unless_told_otherwise() {
    let runtime_threads = |exporter: &Exporter| {
        let (status, _, _) = exporter.get("/healthz");
        assert_eq!(status, 200);
        threads(exporter.pid(), "tokio-rt-worker").0
    };
    assert_eq!(runtime_threads(&quirks_exporter(&[])), 1);
    let three = quirks_exporter(&["--runtime.worker-threads", "3"]);
    assert_eq!(runtime_threads(&three), 3);
    let (code, _, stderr) = run(&["serve", "--runtime.worker-threads", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--runtime.worker-threads"), "{stderr}");
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
        ["sysfs", "ethtool", "pfc_storm", "netlink", "fec", "process"]
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

/// The full job of the shipped scrape config: everything but the storm sampler, which the
/// fast job scrapes on its own (its peak gauge restarts at every scrape that takes it).
#[test]
fn exclude_params_run_every_other_collector() {
    let exporter = cx7_exporter(&["--no-collector.process"]);
    let (status, _, body) = exporter.get("/metrics?exclude[]=pfc_storm");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        collectors_reported(&body),
        ["sysfs", "ethtool", "netlink", "fec"]
    );
    assert!(body.contains("rdma_pfc_pause_duration_seconds_total{"));
    assert!(!body.contains("rdma_pfc_storms_detected_total"), "{body}");
    promtool_check_metrics(&body);
    // Known but off here (process, switch): nothing to exclude, so one config fits every agent.
    let (status, _, body) =
        exporter.get("/metrics?exclude[]=pfc_storm&exclude[]=process&exclude[]=switch");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        collectors_reported(&body),
        ["sysfs", "ethtool", "netlink", "fec"]
    );
    for (path, error) in [
        ("/metrics?exclude[]=bogus", "unknown collector \"bogus\""),
        (
            "/metrics?exclude[]=ethtool",
            "runs in one pass with sysfs, ethtool",
        ),
        (
            "/metrics?collect[]=sysfs&exclude[]=pfc_storm",
            "cannot be combined",
        ),
    ] {
        let (status, _, body) = exporter.get(path);
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(error), "{path}: {body}");
    }
}

#[test]
fn unknown_or_disabled_collect_names_are_a_400_with_the_names() {
    let exporter = cx7_exporter(&["--no-collector.process"]);
    let (status, _, body) = exporter.get("/metrics?collect[]=sysfs&collect[]=bogus");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown collector \"bogus\""), "{body}");
    assert!(
        body.contains(
            "sysfs, ethtool, pfc_storm, netlink, fec, transceiver, pods, nccl, switch, ib_fabric, probe, process"
        ),
        "{body}"
    );
    let (status, _, body) = exporter.get("/metrics?collect[]=process");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("enabled collectors: sysfs, ethtool, pfc_storm, netlink"),
        "{body}"
    );
}

#[test]
fn no_collector_flags_turn_collectors_off() {
    let exporter = cx7_exporter(&["--no-collector.ethtool", "--no-collector.process"]);
    let body = exporter.metrics();
    // Without driver statistics the storm sampler has nothing to sample.
    assert_eq!(collectors_reported(&body), ["sysfs", "netlink"]);
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
        // The signal is handled when its task runs: its log line is waited for, not slept for.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !exporter.logs().contains("SIGHUP") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(exporter.logs().contains("SIGHUP"), "{}", exporter.logs());
        let (status, _, _) = exporter.get("/healthz");
        assert_eq!(status, 200, "{}", exporter.logs());
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
    // More than the exporter serves at once, all from this host (127.0.0.1): it holds at most
    // its share (256); the excess is closed at once, the rest when their headers do not arrive
    // in time (10 s).
    let flood = half_open_connections(&exporter, 1000);
    assert!(flood.len() >= 256, "{}", flood.len());
    // A scraper on another host (127.0.0.2) gets its answer at once, every time.
    let scraper = reqwest::blocking::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let response = scraper.get(exporter.url("/metrics")).send();
        let status = response.map(|r| r.status().as_u16());
        assert_eq!(
            status.as_ref().ok(),
            Some(&200),
            "a scrape from another host behind 1 000 half-open connections: {status:?}"
        );
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "scrape latency behind 1 000 half-open connections from one host: median {:?}, max {:?}",
        latencies[2], latencies[4]
    );
    let _more = half_open_connections(&exporter, 50);
    let exit = exporter.terminate(std::time::Duration::from_secs(25));
    assert!(
        exit.is_some_and(|s| s.success()),
        "half-open connections held the process after SIGTERM: {exit:?}"
    );
}

/// GET `path` with `headers` over a fresh connection; returns status, headers and raw body
/// (not decompressed: reqwest is built without gzip here).
pub(crate) fn get_raw(
    exporter: &Exporter,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut request = reqwest::blocking::Client::new().get(exporter.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().expect("HTTP request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().unwrap().to_vec())
}

pub(crate) fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    // Every member: a body with pre-encoded blocks is several (`exposition::body::Body`).
    std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(bytes), &mut text)
        .expect("gzip members of UTF-8 text");
    text
}

/// Prometheus always sends `Accept-Encoding: gzip`; the answer is gzipped unless the client's
/// q-values refuse it, and says that it varies by both negotiated headers.
#[test]
fn metrics_are_gzipped_when_the_client_accepts_gzip() {
    let exporter = quirks_exporter(&[]);
    for (accept_encoding, gzipped) in [
        (Some("gzip"), true),
        (Some("br;q=1.0, gzip;q=0.8, *;q=0.1"), true),
        (Some("gzip;q=0"), false),
        (Some("gzip;q=0.5, identity"), false),
        (Some("*;q=0"), false),
        (Some("deflate"), false),
        (None, false),
    ] {
        let headers: Vec<(&str, &str)> = accept_encoding
            .map(|v| ("Accept-Encoding", v))
            .into_iter()
            .collect();
        let (status, response, body) = get_raw(&exporter, "/metrics", &headers);
        assert_eq!(status, 200, "{accept_encoding:?}");
        assert_eq!(
            response["vary"], "Accept, Accept-Encoding",
            "{accept_encoding:?}"
        );
        let encoding = response
            .get("content-encoding")
            .map(|v| v.to_str().unwrap());
        let text = if gzipped {
            assert_eq!(encoding, Some("gzip"), "{accept_encoding:?}");
            gunzip(&body)
        } else {
            assert_eq!(encoding, None, "{accept_encoding:?}");
            String::from_utf8(body).unwrap()
        };
        assert!(
            text.contains("rdma_devices 3"),
            "{accept_encoding:?}: {text}"
        );
    }
}

/// `Accept` is read by its q-values, as Prometheus writes it, not searched for a substring.
#[test]
fn the_format_is_negotiated_by_q_values() {
    let exporter = quirks_exporter(&[]);
    for (accept, openmetrics) in [
        // Prometheus 3.
        ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", true),
        // A scrape config preferring the text format (scrape_protocols: [PrometheusText0.0.4, OpenMetricsText1.0.0]).
        ("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,*/*;q=0.3", false),
        ("application/openmetrics-text;q=0, */*", false),
        ("application/openmetrics-text;version=9.9.9, text/plain;q=0.1", false),
        ("text/plain;q=0.1, application/openmetrics-text;q=0.2", true),
    ] {
        let (status, content_type, body) = get_with(&exporter.url("/metrics"), &[("Accept", accept)]);
        assert_eq!(status, 200, "{accept}");
        assert_eq!(
            content_type.starts_with("application/openmetrics-text"),
            openmetrics,
            "{accept}: {content_type}"
        );
        assert_eq!(body.ends_with("# EOF\n"), openmetrics, "{accept}");
    }
}

/// Sends raw request bytes on a new connection; returns the status line.
fn raw_status(exporter: &Exporter, request: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(&exporter.address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or("").to_string()
}

/// Header and query values no client should send get an answer (a 200 where the value can be
/// ignored, a 400 where it names something), never a dropped connection or a 5xx.
#[test]
fn hostile_header_and_query_values_get_an_answer() {
    let exporter = quirks_exporter(&[]);
    let long_accept = format!(
        "Accept: {}\r\n",
        "application/openmetrics-text;q=0.5;x=".repeat(1500)
    );
    let headers: Vec<Vec<u8>> = vec![
        b"Accept: \xff\xfe;q=\xff, */*;q=NaN\r\n".to_vec(),
        b"Accept: application/openmetrics-text;q=1e400;version=\"\r\n".to_vec(),
        b"Accept: ;;;,,,/,*/,/*\r\n".to_vec(),
        long_accept.into_bytes(),
        b"Accept-Encoding: gzip;q=NaN, *;q=-1, \xff\r\n".to_vec(),
        b"Accept-Encoding: gzip;q=0.0000001\r\n".to_vec(),
        b"Authorization: Basic !!!!\xff\r\n".to_vec(),
        b"X-Prometheus-Scrape-Timeout-Seconds: \xff\xff\r\n".to_vec(),
    ];
    for header in &headers {
        let mut request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".to_vec();
        request.extend_from_slice(header);
        request.extend_from_slice(b"\r\n");
        let status = raw_status(&exporter, &request);
        assert!(
            status.starts_with("HTTP/1.1 200"),
            "{:?}: {status:?}",
            String::from_utf8_lossy(&header[..header.len().min(80)])
        );
    }
    for (target, want) in [
        ("/metrics?collect[]=%FF%FE", "400"),
        ("/metrics?collect[]=&collect[]=", "400"),
        ("/metrics?collect%5B%5D=sysfs", "200"),
        ("/metrics?%%%=%%%&&&==", "200"),
        (
            "/metrics?collect[]=sysfs&collect[]=sysfs&collect[]=sysfs",
            "200",
        ),
        ("/probe?target=%00", "400"),
        ("/probe?target=a&target=b&module=%FF", "400"),
        ("/probe?module=x", "400"),
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let status = raw_status(&exporter, request.as_bytes());
        assert!(
            status.starts_with(&format!("HTTP/1.1 {want}")),
            "{target}: {status:?}"
        );
    }
    let samples = parse_exposition(&exporter.metrics());
    assert_eq!(
        value_of(&samples, "rdma_exporter_http_panics_total", &[]),
        Some(0.0)
    );
}

/// A kept-alive connection that sends nothing more is closed once it has been idle for the
/// header-read timeout (10 s): idle clients cannot hold connection slots for ever.
#[test]
fn idle_keep_alive_connections_are_closed() {
    use std::io::{Read, Write};
    let exporter = quirks_exporter(&[]);
    let mut stream = std::net::TcpStream::connect(&exporter.address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.ends_with(b"OK\n") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buffer[..n]);
    }
    let idle = std::time::Instant::now();
    let n = stream.read(&mut buffer).expect("closed, not timed out");
    assert_eq!(n, 0, "nothing more is sent, the connection is closed");
    let after = idle.elapsed();
    assert!(
        after >= std::time::Duration::from_secs(5) && after < std::time::Duration::from_secs(20),
        "closed after {after:?} idle"
    );
}

/// Many probes of one switch at once cost the switch one poll: those that arrive while its
/// poll runs wait for that poll's result. The target here never answers (each poll lasts its
/// 1 s timeout), so every probe of a round arrives while the first one's poll runs.
#[test]
fn concurrent_probes_of_one_target_share_one_poll() {
    use common::gnmi_target::{serve, Behaviour, FakeSwitch, Transport};
    let _exclusive = exclusive(module_path!());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let switch = FakeSwitch::new(None);
    let address = runtime.block_on(serve(switch.clone(), Transport::Plain));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "node: {{enabled: false}}\nswitch_polling: on_demand\nswitches:\n\
             \x20 - {{name: sonic1, address: '{address}', protocol: gnmi, profile: sonic, interval: 2s, timeout: 1s, gnmi: {{mode: once}}}}\n"
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", path_str(&config)]);
    let url = exporter.url("/probe?target=sonic1");
    let probes = 200;
    let round = |check: &(dyn Fn(&str) + Sync)| {
        let barrier = std::sync::Barrier::new(probes);
        std::thread::scope(|scope| {
            for _ in 0..probes {
                scope.spawn(|| {
                    barrier.wait();
                    let (status, _, body) = get_with(&url, &[]);
                    assert_eq!(status, 200, "{body}");
                    check(&body);
                });
            }
        });
    };
    switch.set(Behaviour::Silent);
    let started = std::time::Instant::now();
    round(&|body| {
        assert!(
            body.contains("rdma_switch_up{switch=\"sonic1\"} 0"),
            "{body}"
        )
    });
    let silent_polls = switch.subscribed_at.lock().unwrap().len();
    eprintln!(
        "{probes} concurrent probes of a silent target: {silent_polls} polls, {:?}",
        started.elapsed()
    );
    assert!(
        (1..=probes / 20).contains(&silent_polls),
        "{silent_polls} polls for {probes} probes"
    );

    // A shared poll's result is a whole answer for every probe, gzipped when asked.
    switch.set(Behaviour::Normal);
    round(&|body| {
        assert!(
            body.contains("rdma_switch_up{switch=\"sonic1\"} 1"),
            "{body}"
        )
    });
    let polls = switch.subscribed_at.lock().unwrap().len() - silent_polls;
    eprintln!("{probes} concurrent probes of a healthy target: {polls} polls");
    assert!(polls < probes / 2, "{polls} polls for {probes} probes");
    let (status, headers, body) = get_raw(
        &exporter,
        "/probe?target=sonic1",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(status, 200);
    assert_eq!(headers["content-encoding"], "gzip");
    assert!(gunzip(&body).contains("rdma_switch_port_pfc_frames_total{"));
}
