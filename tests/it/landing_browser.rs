//! The demo's landing page in a real browser: headless Chromium (Debian's `chromium`) loads it
//! during `pfc-storm` and during `healthy`, runs its script, and the test reads the DOM the
//! script built (the storm source host and NIC named in the drawing and in words) and the
//! screenshots (the drawing is not blank, and the two scenarios differ); and during
//! `leaf-spine-loss` on three leaves, the failing probe paths and leaf1's uplinks drawn as the
//! suspect, with the evidence in words.
//!
//! `UPDATE_SCREENSHOT=1 cargo test --test it landing_browser::` also writes the storm's
//! screenshot to `docs/img/demo-pfc-storm.png`, the one README shows.

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const HOSTS: [&str; 4] = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"];
/// Chromium gets this long for one page; then its whole process group is killed.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);
const WINDOW: &str = "--window-size=1400,1000";
/// The committed screenshot must stay small (README).
const MAX_SCREENSHOT_BYTES: u64 = 200 * 1024;

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `url` with `extra` flags; everything it writes (profile, caches,
/// temporary files) goes below `dir`. Returns its standard output.
fn run_chromium(binary: &Path, dir: &Path, extra: &[&str], url: &str) -> Result<String, String> {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let stdout_path = dir.join("stdout");
    let stderr_path = dir.join("stderr");
    let mut child = Command::new(binary)
        .args([
            "--headless=new",
            // Root in CI containers: Chromium's sandbox refuses to run as root.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
            WINDOW,
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(extra)
        .arg(url)
        .env("HOME", &home)
        .env("TMPDIR", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        // Its own process group: the renderers and helpers it forks end with it.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{} cannot start: {e}", binary.display()))?;
    let group = child.id() as i32;
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: kill(2) of the process group this test created (its leader is our child, and
    // the group id stays reserved while any member lives); ESRCH when none is left.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    match status {
        Some(status) if status.success() => Ok(std::fs::read_to_string(&stdout_path).unwrap()),
        Some(status) => Err(format!("chromium exited with {status}: {stderr}")),
        None => Err(format!(
            "chromium did not finish within {BROWSER_TIMEOUT:?}: {stderr}"
        )),
    }
}

/// A demo in the scenario's fault, with the leaves polled and two walks of every host behind
/// the page, so that its first view already has rates.
fn demo_with_rates(scenario: &str) -> Exporter {
    let demo = Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            scenario,
            "--start-at",
            "70",
            // Polls time out after half the interval: 1 s holds on a loaded machine.
            "--switch-interval",
            "2s",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = demo.get("/api/v1/fabric");
        assert_eq!(status, 200, "{body}");
        let view: serde_json::Value = serde_json::from_str(&body).unwrap();
        let switches = view["switches"].as_array().unwrap();
        if !switches.is_empty() && switches.iter().all(|s| s["up"] == true) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the leaves never came up: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The page read a walk of each host above; a scrape 1.5 s later is the second.
    std::thread::sleep(Duration::from_millis(1500));
    for host in HOSTS {
        assert_eq!(demo.get(&format!("/hosts/{host}/metrics")).0, 200);
    }
    demo
}

struct Loaded {
    dom: String,
    pixels: Vec<u8>,
    width: u32,
    png: PathBuf,
}

/// The page after its script ran, and its screenshot (kept under `dir`).
fn load(binary: &Path, demo: &Exporter, dir: &Path, name: &str) -> Result<Loaded, String> {
    let url = demo.url("/");
    let dom_dir = dir.join(format!("{name}-dom"));
    let dom = run_chromium(binary, &dom_dir, &["--dump-dom"], &url)?;
    let png = dir.join(format!("{name}.png"));
    let shot_dir = dir.join(format!("{name}-shot"));
    run_chromium(
        binary,
        &shot_dir,
        &[&format!("--screenshot={}", png.display())],
        &url,
    )?;
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    pixels.truncate(info.buffer_size());
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    // Always RGB or RGBA from Chromium: keep RGB.
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let rgb = pixels
        .chunks(channels)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    Ok(Loaded {
        dom,
        pixels: rgb,
        width: info.width,
        png,
    })
}

fn count(pixels: &[u8], predicate: impl Fn(u8, u8, u8) -> bool) -> usize {
    pixels
        .chunks(3)
        .filter(|p| predicate(p[0], p[1], p[2]))
        .count()
}

/// The storm source's colour (#c00000, with antialiasing).
fn storm_red(r: u8, g: u8, b: u8) -> bool {
    r > 160 && g < 70 && b < 70
}

/// The inline SVG the script drew, from the dumped DOM.
fn drawing(dom: &str) -> &str {
    let start = dom
        .find("<svg id=\"fabric-svg\"")
        .expect("the script drew no SVG");
    let end = dom[start..].find("</svg>").map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

/// Chromium writes large PNGs (every antialiased shade): the committed copy has its pixels
/// rounded to the 216 colours of the 6x6x6 cube, as an indexed PNG with the best compression.
fn write_small_png(target: &Path, loaded: &Loaded) {
    let height = (loaded.pixels.len() / 3) as u32 / loaded.width;
    let level = |v: u8| (u16::from(v) + 25) / 51;
    let indices: Vec<u8> = loaded
        .pixels
        .chunks(3)
        .map(|p| (level(p[0]) * 36 + level(p[1]) * 6 + level(p[2])) as u8)
        .collect();
    let palette: Vec<u8> = (0..216u16)
        .flat_map(|i| [i / 36, i / 6 % 6, i % 6].map(|l| (l * 51) as u8))
        .collect();
    let file = std::io::BufWriter::new(std::fs::File::create(target).unwrap());
    let mut encoder = png::Encoder::new(file, loaded.width, height);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_palette(palette);
    encoder.set_compression(png::Compression::High);
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(&indices).unwrap();
    writer.finish().unwrap();
}

#[test]
fn the_demo_page_draws_the_storm_and_its_source_in_a_real_browser() {
    let _exclusive = exclusive(module_path!());
    let Some(binary) = chromium() else {
        return skip_or_fail("chromium is not installed (Debian package `chromium`)");
    };
    let dir = tempfile::tempdir().unwrap();

    let storm_demo = demo_with_rates("pfc-storm");
    let storm = match load(&binary, &storm_demo, dir.path(), "pfc-storm") {
        Ok(loaded) => loaded,
        Err(e) => return skip_or_fail(&format!("headless chromium does not run here: {e}")),
    };
    drop(storm_demo);
    let svg = drawing(&storm.dom);
    // The source, by host and NIC: marked in the drawing, and named with its evidence.
    let host_start = svg
        .find("data-host=\"gpu-node-01\"")
        .expect("gpu-node-01 drawn");
    let host_end = svg[host_start..]
        .find("data-host=\"gpu-node-02\"")
        .map_or(svg.len(), |e| host_start + e);
    let source_host = &svg[host_start..host_end];
    assert!(
        source_host.contains("data-status=\"storm-source\" data-device=\"mlx5_2\""),
        "gpu-node-01 mlx5_2 is not drawn as the source: {source_host}"
    );
    assert!(
        source_host.contains("storm source: mlx5_2"),
        "{source_host}"
    );
    assert_eq!(
        svg.matches("class=\"nic storm-source\"").count(),
        1,
        "one source"
    );
    assert!(svg.contains("STORM SOURCE tx"), "the link's label says it");
    assert!(svg.contains("PAUSED rx"), "the paused neighbours say it");
    let storm_box = storm.dom.find("id=\"storm\"").unwrap();
    let words = &storm.dom[storm_box..];
    assert!(
        words.contains("gpu-node-01 mlx5_2 (ens3f0np0) pauses priority 3"),
        "{words}"
    );
    assert!(words.contains("while receiving"), "{words}");
    assert!(
        words.contains("it hangs off leaf1 port"),
        "LLDP names its switch port: {words}"
    );
    assert!(storm.dom.contains("<code>pfc-storm</code>: fault"));
    assert!(storm.dom.contains("Live: redrawn every"), "the poll ran");

    let healthy_demo = demo_with_rates("healthy");
    let healthy = load(&binary, &healthy_demo, dir.path(), "healthy").unwrap();
    drop(healthy_demo);
    let svg = drawing(&healthy.dom);
    assert!(!svg.contains("storm-source\" data-device"), "no source");
    assert!(!svg.contains("PAUSED"), "nothing paused");
    assert!(svg.contains("✓ ok rx"), "links labelled ok");
    assert!(healthy.dom.contains("None: no NIC pauses its switch port"));
    assert!(healthy.dom.contains("<code>healthy</code>"));

    // Pixels: a drawing, not a blank page; red only where a storm is; the two differ.
    assert_eq!(storm.width, healthy.width);
    let total = storm.pixels.len() / 3;
    for (name, loaded) in [("pfc-storm", &storm), ("healthy", &healthy)] {
        let inked = count(&loaded.pixels, |r, g, b| r < 200 || g < 200 || b < 200);
        assert!(
            inked * 100 > total * 3,
            "{name}: only {inked} of {total} pixels are not near-white ({})",
            loaded.png.display()
        );
    }
    let red_storm = count(&storm.pixels, storm_red);
    let red_healthy = count(&healthy.pixels, storm_red);
    // The legend's storm swatch is red in both.
    assert!(
        red_storm > red_healthy + 500,
        "storm-red pixels: {red_storm} in the storm, {red_healthy} when healthy"
    );
    let differing = storm
        .pixels
        .chunks(3)
        .zip(healthy.pixels.chunks(3))
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        differing * 100 > total,
        "only {differing} of {total} pixels differ"
    );
    println!(
        "screenshots {} and {}: {red_storm} storm-red pixels vs {red_healthy}, {differing} of {total} pixels differ",
        storm.png.display(),
        healthy.png.display()
    );

    if std::env::var_os("UPDATE_SCREENSHOT").is_some() {
        let target = project_root().join("docs/img/demo-pfc-storm.png");
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        write_small_png(&target, &storm);
    }
    let committed = project_root().join("docs/img/demo-pfc-storm.png");
    let size = std::fs::metadata(&committed).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 0 && size < MAX_SCREENSHOT_BYTES,
        "{} is {size} bytes (UPDATE_SCREENSHOT=1 writes it)",
        committed.display()
    );
}

#[test]
fn the_demo_page_draws_the_failing_probe_paths_and_the_suspect_uplinks() {
    let _exclusive = exclusive(module_path!());
    let Some(binary) = chromium() else {
        return skip_or_fail("chromium is not installed (Debian package `chromium`)");
    };
    let dir = tempfile::tempdir().unwrap();
    let demo = Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            "leaf-spine-loss",
            "--leaves",
            "3",
            "--start-at",
            "60",
            "--switch-interval",
            "2s",
        ],
    );
    // Until the JSON names leaf1's uplinks: 30 s of probing at least, the leaves polled.
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let (status, _, body) = demo.get("/api/v1/fabric");
        assert_eq!(status, 200, "{body}");
        let view: serde_json::Value = serde_json::from_str(&body).unwrap();
        let named = view["probes"]["verdicts"].as_array().is_some_and(|v| {
            v.iter()
                .any(|v| v["kind"] == "uplink" && v["switch"] == "leaf1")
        });
        if named {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no uplink verdict: {:#}",
            view["probes"]
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let dom = match run_chromium(
        &binary,
        &dir.path().join("dom"),
        &["--dump-dom"],
        &demo.url("/"),
    ) {
        Ok(dom) => dom,
        Err(e) => return skip_or_fail(&format!("headless chromium does not run here: {e}")),
    };
    drop(demo);
    let svg = drawing(&dom);
    // leaf1's uplinks drawn as the suspect, labelled; the other leaves' not.
    assert!(
        svg.contains("<g class=\"uplink suspect\" data-switch=\"leaf1\">"),
        "leaf1's uplinks are not drawn as the suspect: {svg}"
    );
    assert_eq!(svg.matches("class=\"uplink suspect\"").count(), 1, "{svg}");
    assert_eq!(svg.matches("class=\"uplink\"").count(), 2, "{svg}");
    assert!(svg.contains("◎ uplinks of leaf1"), "{svg}");
    assert!(svg.contains("spine layer"), "{svg}");
    // No NIC, host or leaf is (a loaded machine may make responders slow: not the network).
    for kind in ["nic", "host", "leaf"] {
        let ring = format!("class=\"suspect-ring\" data-kind=\"{kind}\"");
        assert!(!svg.contains(&ring), "{kind}: {svg}");
    }
    // The failing paths, NIC to NIC, each titled with what it lost.
    let paths = svg.matches("class=\"probe-path\"").count();
    assert!(paths >= 3, "{paths} failing paths drawn");
    assert!(svg.contains("probes ("), "{svg}");
    // The evidence in words, beside the storm sources'; the legend says what the marks mean.
    let words = &dom[dom.find("id=\"probes\"").expect("a probes section")..];
    assert!(
        words.contains("uplink: uplinks of leaf1") && words.contains("cross leaf1's uplinks"),
        "{words}"
    );
    assert!(dom.contains("failing probe path") && dom.contains("probe suspect"));
}
