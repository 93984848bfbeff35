//! The landing page and `/api/v1/fabric` without a browser: the JSON's shape on a real node
//! tree, hostile names escaped in the page and the JSON, basic auth on both, their cost (they
//! reuse the last walk: no sysfs walk per request), and the probes' verdicts in the demo.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rdma_fabric_exporter::config::Config;
use rdma_fabric_exporter::node::config::EthtoolSourceKind;
use tower::ServiceExt;

const HOSTILE: &str = "<script>alert(1)";

/// The cx7-roce node with mlx5_0 renamed to a name that is markup.
fn hostile_tree() -> tempfile::TempDir {
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&fixture("cx7-roce"), tree.path());
    let class = tree.path().join("sys/class/infiniband");
    std::fs::rename(class.join("mlx5_0"), class.join(HOSTILE)).unwrap();
    tree
}

fn json(exporter: &Exporter) -> serde_json::Value {
    let (status, content_type, body) = exporter.get("/api/v1/fabric");
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "application/json");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn the_fabric_json_of_a_node_and_its_page_with_hostile_names() {
    let tree = hostile_tree();
    let exporter = Exporter::on_node(&tree.path().join("sys"), &tree.path().join("ethtool"), &[]);
    // Nothing scraped yet: the endpoint reads the node once; rates need a second read.
    let first = json(&exporter);
    assert_eq!(first["mode"], "node");
    assert!(first["scenario"].is_null());
    let host = &first["hosts"][0];
    assert!(host["rate_window_seconds"].is_null(), "{host}");
    let nics = host["nics"].as_array().unwrap();
    assert_eq!(nics.len(), 10, "{host}");
    // serde_json escapes; the name round-trips exactly.
    let hostile = nics.iter().find(|n| n["device"] == HOSTILE).unwrap();
    assert_eq!(hostile["netdev"], "ens1f0np0");
    assert_eq!(hostile["status"], "no-rate");
    let mlx5_2 = nics.iter().find(|n| n["device"] == "mlx5_2").unwrap();
    assert_eq!(mlx5_2["state"], "4: ACTIVE");
    assert_eq!(mlx5_2["link_layer"], "Ethernet");
    assert!(mlx5_2["rate_bytes_per_second"].as_f64().unwrap() > 0.0);
    assert!(first["switches"].as_array().unwrap().is_empty());
    assert!(first["storm_sources"].as_array().unwrap().is_empty());
    // No probe collector here: no probes.
    assert!(first["probes"].is_null(), "{}", first["probes"]);

    // A scrape is a second read: the endpoint now has rates, between the two.
    std::thread::sleep(std::time::Duration::from_millis(200));
    exporter.metrics();
    let second = json(&exporter);
    let host = &second["hosts"][0];
    assert!(
        host["rate_window_seconds"].as_f64().unwrap() > 0.0,
        "{host}"
    );
    let mlx5_2 = host["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["device"] == "mlx5_2")
        .unwrap();
    let rates = &mlx5_2["rates"];
    // A fixture tree does not move: every rate is 0, none is missing.
    assert_eq!(rates["rx_bytes_per_second"], 0.0, "{rates}");
    assert_eq!(rates["pause"], serde_json::json!([]));
    assert_eq!(mlx5_2["status"], "ok", "{mlx5_2}");

    let (status, content_type, page) = exporter.get("/");
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"), "{content_type}");
    assert!(page.contains("&lt;script&gt;alert(1)"), "escaped name");
    assert!(!page.contains(HOSTILE), "raw name in the page");
    // The page's one script is its own, by src, with its policy.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains("<script src=\"/assets/fabric.js\">"));
    let (status, content_type, script) = exporter.get("/assets/fabric.js");
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/javascript"),
        "{content_type}"
    );
    assert!(script.contains("textContent"));
    assert!(!script.contains("innerHTML"), "names go in as text only");
    let response = reqwest::blocking::get(exporter.url("/")).unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
}

#[test]
fn basic_auth_covers_the_page_its_script_and_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret-pw", 4).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
    let exporter = Exporter::on_node(
        &fixture("cx7-roce/sys"),
        &fixture("cx7-roce/ethtool"),
        &["--web.config.file", path_str(&web)],
    );
    let client = reqwest::blocking::Client::new();
    for path in [
        "/",
        "/api/v1/fabric",
        "/assets/fabric.js",
        "/assets/fabric.css",
    ] {
        let denied = client.get(exporter.url(path)).send().unwrap();
        assert_eq!(denied.status(), 401, "{path}");
        let wrong = client
            .get(exporter.url(path))
            .basic_auth("alice", Some("wrong"))
            .send()
            .unwrap();
        assert_eq!(wrong.status(), 401, "{path}");
        let allowed = client
            .get(exporter.url(path))
            .basic_auth("alice", Some("s3cret-pw"))
            .send()
            .unwrap();
        assert_eq!(allowed.status(), 200, "{path}");
        let body = allowed.text().unwrap();
        assert!(
            !body.contains(&hash) && !body.contains("s3cret-pw"),
            "{path}"
        );
    }
}

fn node_config(sys: &std::path::Path, ethtool: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.node.sysfs_path = sys.to_path_buf();
    config.node.ethtool.source = EthtoolSourceKind::Files;
    config.node.ethtool.stats_dir = Some(ethtool.to_path_buf());
    // No background readers: only requests walk here.
    config.node.pfc_storm.enabled = false;
    config.node.netlink.enabled = false;
    config
}

async fn get(router: &axum::Router, path: &str) -> (u16, Vec<u8>) {
    let request = axum::http::Request::get(path)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, body.to_vec())
}

/// The endpoint costs no walk of its own while a recent scrape's is there, and one walk in all
/// for many requests at once when there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_and_the_page_reuse_the_last_walk() {
    let config = node_config(&fixture("cx7-roce/sys"), &fixture("cx7-roce/ethtool"));
    let state = Arc::new(rdma_fabric_exporter::app::app_state(&config, None, None));
    let node = state.node.clone().unwrap();
    let router = rdma_fabric_exporter::server::router(state);

    // Twenty at once, nothing read yet: one walk serves them all.
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let router = router.clone();
            tokio::spawn(async move { get(&router, "/api/v1/fabric").await })
        })
        .collect();
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200);
        let view: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(view["hosts"][0]["nics"].as_array().unwrap().len(), 10);
    }
    assert_eq!(node.walks(), 1);

    // A scrape walks; the page and the JSON after it read that walk.
    assert_eq!(get(&router, "/metrics").await.0, 200);
    assert_eq!(node.walks(), 2);
    for _ in 0..20 {
        assert_eq!(get(&router, "/api/v1/fabric").await.0, 200);
        assert_eq!(get(&router, "/").await.0, 200);
    }
    assert_eq!(node.walks(), 2);
}

/// `/api/v1/fabric`'s `probes` once its window is long enough to name anything (30 s of
/// probing), polled every 2 s until `done` says so or `deadline`.
fn probes_until(
    demo: &Exporter,
    deadline: Instant,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    loop {
        let probes = json(demo)["probes"].clone();
        assert!(probes.is_object(), "the demo's hosts probe: {probes}");
        if probes["localized"] == true && done(&probes) {
            return probes;
        }
        assert!(Instant::now() < deadline, "{probes:#}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The loss verdicts (kind, switch or host). `responder` verdicts are left out: they say the
/// probe loop answers late, which a loaded test machine makes true of any scenario (the idle
/// loop answers within its 2 ms poll).
fn verdicts(probes: &serde_json::Value) -> Vec<(String, String)> {
    probes["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] != "responder")
        .map(|v| {
            let name = v["switch"].as_str().or(v["host"].as_str()).unwrap_or("");
            (v["kind"].as_str().unwrap().to_string(), name.to_string())
        })
        .collect()
}

/// In `leaf-spine-loss` with three leaves (leaf1's uplink to one spine drops 2 % of the flows
/// hashed onto it), the page names leaf1's uplinks and nothing else, with the failing paths
/// between the leaves; in `healthy`, nothing. Both from the start of the fault (60 s into the
/// cycle: it lasts 180 s).
#[test]
fn the_fabric_json_names_a_lossy_uplink_and_nothing_when_healthy() {
    let _exclusive = exclusive(module_path!());
    let demo = |scenario: &str| {
        Exporter::start_subcommand(
            "demo",
            &[
                "--scenario",
                scenario,
                "--leaves",
                "3",
                "--start-at",
                "60",
                "--switch-interval",
                "2s",
            ],
        )
    };
    let lossy = demo("leaf-spine-loss");
    let healthy = demo("healthy");
    let deadline = Instant::now() + Duration::from_secs(150);

    let named = |p: &serde_json::Value| verdicts(p).iter().any(|(kind, _)| kind == "uplink");
    let probes = probes_until(&lossy, deadline, named);
    assert_eq!(
        verdicts(&probes),
        [("uplink".to_string(), "leaf1".to_string())],
        "{probes:#}"
    );
    assert_eq!(probes["live_ports"], 32, "4 hosts of 8 NICs");
    let verdict = probes["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "uplink")
        .unwrap();
    assert!(
        verdict["explained_ratio"].as_f64().unwrap() >= 0.8,
        "{verdict}"
    );
    assert!(
        verdict["mean_path_loss"].as_f64().unwrap() < 0.2,
        "{verdict}"
    );
    assert!(
        verdict["host"].is_null() && verdict["device"].is_null(),
        "{verdict}"
    );
    let evidence = verdict["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("cross leaf1's uplinks") && evidence.contains("less than 20%"),
        "{evidence}"
    );
    // The failing paths are drawn from host/device to host/device, with their loss share.
    let failing = probes["failing_paths"].as_array().unwrap();
    assert!(
        failing.len() >= 3 && probes["failing_path_count"].as_u64().unwrap() >= 3,
        "{probes:#}"
    );
    for path in failing {
        assert!(path["from"]["host"]
            .as_str()
            .unwrap()
            .starts_with("gpu-node-"));
        assert!(path["to"]["device"].as_str().unwrap().starts_with("mlx5_"));
        assert!(path["lost"].as_u64().unwrap() > 0);
        let share = path["loss_share"].as_f64().unwrap();
        assert!(share > 0.0 && share <= 1.0, "{path}");
    }
    // The page says it in words, where the storm sources' evidence is.
    let (status, _, page) = lossy.get("/");
    assert_eq!(status, 200);
    let section = &page[page.find("id=\"probes\"").expect("a probes section")..];
    assert!(section.contains("uplinks of leaf1"), "{section}");

    let probes = probes_until(&healthy, deadline, |_| true);
    assert_eq!(verdicts(&probes), [], "{probes:#}");
}

/// A demo of four hosts of six NICs in `scenario`, from boot.
fn six_nic_demo(scenario: &str) -> Exporter {
    Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            scenario,
            "--hosts",
            "4",
            "--nics-per-host",
            "6",
            "--switch-interval",
            "2s",
        ],
    )
}

/// The page's peer outliers as (host, device), once every NIC has a rate.
fn peer_outliers(demo: &Exporter) -> Option<(Vec<(String, String)>, serde_json::Value)> {
    let view = json(demo);
    let rated = view["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|h| h["nics"].as_array().unwrap())
        .all(|n| n["rates"].is_object());
    let named = view["peer_outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let text = |k: &str| o[k].as_str().unwrap().to_string();
            (text("host"), text("device"))
        })
        .collect();
    rated.then(|| (named, view["peer_outliers"].clone()))
}

/// In `gray-nic`, the page marks gpu-node-03's mlx5_1 as worse than its rail on the signals
/// its walks carry, and nothing else; in `healthy`, nothing, over several windows.
#[test]
fn the_page_marks_the_gray_nic_and_nothing_when_healthy() {
    let _exclusive = exclusive(module_path!());
    let gray = six_nic_demo("gray-nic");
    let healthy = six_nic_demo("healthy");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (named, outliers) = loop {
        if let Some((named, outliers)) = peer_outliers(&gray).filter(|(n, _)| !n.is_empty()) {
            break (named, outliers);
        }
        assert!(Instant::now() < deadline, "no outlier: {:#}", json(&gray));
        std::thread::sleep(Duration::from_secs(2));
    };
    assert_eq!(
        named,
        [("gpu-node-03".to_string(), "mlx5_1".to_string())],
        "{outliers:#}"
    );
    let signals: Vec<&str> = outliers[0]["signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["signal"].as_str().unwrap())
        .collect();
    for wanted in [
        "transport_errors",
        "cnp_handled",
        "pfc_paused",
        "fec_corrected_bits",
    ] {
        assert!(signals.contains(&wanted), "{wanted}: {outliers:#}");
    }
    assert_eq!(outliers[0]["rail"], "mlx5_1");
    assert_eq!(outliers[0]["peers"], 4);
    // The page says it in words, in its section and on the NIC's row.
    let (status, _, page) = gray.get("/");
    assert_eq!(status, 200);
    let section = &page[page.find("id=\"outliers\"").expect("an outliers section")..];
    assert!(
        section.contains(
            "◆ gpu-node-03 mlx5_1 port 1</strong>: stands out from the 4 NICs of rail mlx5_1"
        ),
        "{section}"
    );
    assert_eq!(page.matches(" ◆ peer outlier</td>").count(), 1, "{page}");

    // Healthy: three windows with every NIC rated, none marked (the page walks again when its
    // last walk is 5 s old).
    let mut windows = 0;
    while windows < 3 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(60),
            "healthy never rated"
        );
        if let Some((named, outliers)) = peer_outliers(&healthy) {
            assert_eq!(named, [] as [(String, String); 0], "{outliers:#}");
            windows += 1;
        }
        std::thread::sleep(Duration::from_secs(6));
    }
}
