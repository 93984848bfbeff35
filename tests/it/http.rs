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
