//! The landing page of `serve` and `demo`: the fabric drawn as inline SVG by a small script
//! (`assets/fabric.js`, embedded) that polls `/api/v1/fabric`, over tables rendered here from
//! the same view, so that the page says everything without JavaScript too. Every name is
//! HTML-escaped: device, host and switch names come from outside.

use std::fmt::Write;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::fabric_json::{FabricView, HostView, NicView, Status, SwitchView, PATH};
use super::fabric_probes::ProbesView;
use crate::probe::localize::Kind;

/// The drawing script and its style, served from the binary (no CDN, no library).
pub const SCRIPT: &str = include_str!("assets/fabric.js");
pub const STYLE: &str = include_str!("assets/fabric.css");
pub const SCRIPT_PATH: &str = "/assets/fabric.js";
pub const STYLE_PATH: &str = "/assets/fabric.css";

/// The page's own policy: its script and style from here, its data from here, nothing else.
/// A `Content-Security-Policy` in the web config replaces it.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The links a page starts with: the endpoints of this process.
pub struct Links<'a> {
    pub telemetry_path: &'a str,
    /// The demo's per-host agents (`/hosts/<host><telemetry path>`); empty for `serve`.
    pub demo_hosts: &'a [String],
}

fn opt(value: Option<&str>) -> String {
    escape(value.unwrap_or("?"))
}

fn rate(bytes_per_second: Option<f64>) -> String {
    bytes_per_second.map_or("?".into(), |r| format!("{} Gb/s", r * 8.0 / 1e9))
}

fn gbps(bytes_per_second: Option<f64>) -> String {
    bytes_per_second.map_or("–".into(), |r| format!("{:.1} Gb/s", r * 8.0 / 1e9))
}

fn per_second(value: Option<f64>) -> String {
    value.map_or("–".into(), |v| format!("{v:.0}/s"))
}

/// The page for `view`.
pub fn render(view: &FabricView, links: &Links<'_>) -> String {
    let demo = view.mode == "demo";
    let path = escape(links.telemetry_path);
    let mut html = String::with_capacity(16 * 1024);
    let title = if demo {
        "rdma-fabric-exporter demo"
    } else {
        "rdma-fabric-exporter"
    };
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><link rel=\"stylesheet\" href=\"{STYLE_PATH}\"></head>\
         <body data-api=\"{PATH}\" data-mode=\"{mode}\"><h1>{title}</h1><p>Version {version}. ",
        mode = view.mode,
        version = escape(view.version),
    );
    if demo {
        let _ = write!(
            html,
            "A simulated fabric: <a href=\"{path}\">switches</a> · \
             <a href=\"/sd\">Prometheus HTTP service discovery</a> · "
        );
    } else {
        let _ = write!(html, "<a href=\"{path}\">Metrics</a> · ");
    }
    let _ = write!(
        html,
        "<a href=\"/healthz\">Health</a> · <a href=\"{PATH}\">this page as JSON</a></p>"
    );
    if !links.demo_hosts.is_empty() {
        // One line: the drawing should be in view without scrolling.
        html.push_str("<nav aria-label=\"Hosts\"><p>Each host's node agent: ");
        let hosts: Vec<String> = links
            .demo_hosts
            .iter()
            .map(|host| {
                let host = escape(host);
                format!("<a href=\"/hosts/{host}{path}\">{host}</a>")
            })
            .collect();
        html.push_str(&hosts.join(" · "));
        html.push_str("</p></nav>");
    }
    html.push_str("<section id=\"scenario\" aria-live=\"polite\">");
    html.push_str(&scenario(view));
    html.push_str("</section>");
    // The verdict in words before the drawing: what a reader (or a screen reader) wants first.
    html.push_str("<section id=\"storm\" aria-live=\"polite\">");
    html.push_str(&storm_sources(view));
    html.push_str("</section>");
    html.push_str("<section id=\"outliers\" aria-live=\"polite\">");
    html.push_str(&peer_outliers(view));
    html.push_str("</section>");
    html.push_str("<section id=\"probes\" aria-live=\"polite\">");
    html.push_str(&probe_suspects(view));
    html.push_str("</section>");
    html.push_str(
        "<section id=\"drawing-section\"><h2>Fabric</h2>\
         <div id=\"drawing\">\
         <p class=\"note\">The drawing needs JavaScript; the tables below say the same and are \
         current as of this page's load.</p></div>",
    );
    html.push_str("<div id=\"legend\"><h3>Legend</h3><ul>");
    for status in Status::ALL {
        let _ = write!(
            html,
            "<li><span class=\"swatch {}\" aria-hidden=\"true\"></span>{}</li>",
            status.as_str(),
            escape(status.legend())
        );
    }
    let _ = write!(
        html,
        "<li><span class=\"swatch outlier\" aria-hidden=\"true\"></span>{}</li>",
        escape(OUTLIER_LEGEND)
    );
    if view.probes.is_some() {
        for (class, words) in PROBE_LEGEND {
            let _ = write!(
                html,
                "<li><span class=\"swatch {class}\" aria-hidden=\"true\"></span>{}</li>",
                escape(words)
            );
        }
    }
    html.push_str("</ul></div></section>");
    html.push_str("<section id=\"tables\">");
    html.push_str(&tables(view));
    html.push_str("</section>");
    let _ = writeln!(
        html,
        "<script src=\"{SCRIPT_PATH}\"></script></body></html>"
    );
    html
}

/// The scenario line (demo only).
pub fn scenario(view: &FabricView) -> String {
    match &view.scenario {
        Some(s) => format!(
            "<h2>Scenario <code>{}</code>: {}</h2><p>{:.0} s into a {:.0} s cycle (60 s healthy, \
             180 s of the fault, 60 s of recovery). During the fault: {}</p>",
            escape(s.name),
            escape(s.phase),
            s.seconds_into_cycle,
            s.cycle_seconds,
            escape(s.signature)
        ),
        None => String::new(),
    }
}

/// The storm sources with their evidence, or that there is none.
pub fn storm_sources(view: &FabricView) -> String {
    let mut html = String::from("<h2>PFC storm source</h2>");
    if view.storm_sources.is_empty() {
        html.push_str("<p class=\"calm\">✓ None: no NIC pauses its switch port while receiving almost nothing.</p>");
        return html;
    }
    html.push_str("<ul class=\"sources\">");
    for source in &view.storm_sources {
        let _ = write!(
            html,
            "<li><strong>⚠ {} {}</strong>: {}</li>",
            escape(&source.host),
            escape(&source.device),
            escape(&source.evidence)
        );
    }
    html.push_str("</ul>");
    html
}

/// What the gray-failure mark means (the legend's line and the section's calm line).
pub(crate) const OUTLIER_LEGEND: &str = "◆ peer outlier: far worse than the other NICs of its rail on retransmissions, CNPs handled, rx pause, FEC corrections or bytes sent (a gray failure; RdmaNicPeerOutlier holds it for 30 minutes)";

/// The NICs that stand out from their rail, with the signals they stand out on.
pub fn peer_outliers(view: &FabricView) -> String {
    let mut html = String::from("<h2>Peer outliers</h2>");
    if view.peer_outliers.is_empty() {
        html.push_str(
            "<p class=\"calm\">✓ None: no NIC stands out from the other NICs of its rail.</p>",
        );
        return html;
    }
    html.push_str("<ul class=\"outliers\">");
    for outlier in &view.peer_outliers {
        let _ = write!(
            html,
            "<li data-host=\"{host}\" data-device=\"{device}\"><strong>◆ {host} {device} port {port}</strong>: {}</li>",
            escape(&outlier.evidence),
            host = escape(&outlier.host),
            device = escape(&outlier.device),
            port = escape(&outlier.port),
        );
    }
    html.push_str("</ul>");
    html
}

/// The legend of what the probes add to the drawing.
const PROBE_LEGEND: [(&str, &str); 2] = [
    (
        "probe-path",
        "⇢ failing probe path: the probes between these two NICs lost some in the window (thicker: more)",
    ),
    (
        "suspect",
        "◎ probe suspect: the NIC, host, leaf, leaf uplinks or spine layer most failing paths share (docs/localization.md); ⏱ a slow responder",
    ),
];

/// What a verdict names, in a few words.
fn suspect_name(v: &super::fabric_probes::VerdictView) -> String {
    let or = |s: &Option<String>| s.as_deref().unwrap_or("?").to_string();
    let port = v.port.map_or("?".into(), |p| p.to_string());
    match v.kind {
        Kind::Nic => format!("NIC {} {} port {port}", or(&v.host), or(&v.device)),
        Kind::Host => format!("host {}", or(&v.host)),
        Kind::Leaf => format!("leaf {}", or(&v.switch)),
        Kind::Uplink => format!("uplinks of {}", or(&v.switch)),
        Kind::Spine => "the spine layer".into(),
        Kind::Responder => format!(
            "slow responder {} {} port {port}",
            or(&v.host),
            or(&v.device)
        ),
    }
}

/// The probes' verdicts with their evidence (where hosts probe).
pub(crate) fn probe_suspects(view: &FabricView) -> String {
    let Some(probes) = &view.probes else {
        return String::new();
    };
    let mut html = String::from("<h2>Probe suspects</h2>");
    let _ = write!(
        html,
        "<p class=\"{}\">{}</p>",
        if probes.failing_path_count == 0 {
            "calm"
        } else {
            "note"
        },
        escape(&probes.summary)
    );
    if probes.verdicts.is_empty() {
        return html;
    }
    html.push_str("<ul class=\"suspects\">");
    for verdict in &probes.verdicts {
        let _ = write!(
            html,
            "<li data-kind=\"{}\"><strong>◎ {}: {}</strong>: {}</li>",
            verdict.kind.as_str(),
            verdict.kind.as_str(),
            escape(&suspect_name(verdict)),
            escape(&verdict.evidence)
        );
    }
    html.push_str("</ul>");
    html
}

/// The static tables: every host's ports, the switches, the read errors.
pub fn tables(view: &FabricView) -> String {
    let mut html = String::new();
    if view.mode == "node" && view.hosts.is_empty() {
        html.push_str("<p>The node collector is disabled: only the switches are shown.</p>");
    }
    for host in &view.hosts {
        host_tables(&mut html, view, host);
    }
    if let Some(probes) = view.probes.as_ref().filter(|p| !p.failing_paths.is_empty()) {
        failing_paths_table(&mut html, probes);
    }
    if !view.switches.is_empty() {
        switches_table(&mut html, &view.switches);
    }
    html
}

/// A host's heading, its ports and its recent read errors.
fn host_tables(html: &mut String, view: &FabricView, host: &HostView) {
    let _ = write!(
        html,
        "<h2>{} <small>RDMA devices</small></h2><p>sysfs root <code>{}</code>, last read {}; rates {}.</p>",
        escape(&host.name),
        escape(&host.sysfs_root),
        host.last_read_seconds_ago
            .map_or("never".into(), |s| format!("{s:.1} s ago")),
        host.rate_window_seconds
            .map_or("need a second read (no rate yet)".into(), |s| format!("over the last {s:.1} s")),
    );
    if !host.infiniband_present {
        html.push_str("<p>No <code>class/infiniband</code> here: no RDMA driver is loaded.</p>");
        return;
    }
    html.push_str(
        "<table class=\"ports\"><thead><tr><th>device</th><th>port</th><th>link layer</th>\
         <th>state</th><th>physical state</th><th>rate</th><th>netdev</th><th>firmware</th>\
         <th>switch port</th><th>status</th><th>rx</th><th>tx</th><th>PFC paused (share of time)</th>\
         <th>storm sampler</th><th>ECN marks</th><th>CNPs sent / handled / ignored</th><th>errors</th></tr></thead><tbody>",
    );
    for nic in &host.nics {
        let outlier = view
            .peer_outliers
            .iter()
            .any(|o| o.host == host.name && o.device == nic.device && o.port == nic.port);
        nic_row(html, nic, outlier);
    }
    html.push_str("</tbody></table>");
    read_errors_table(html, host);
}

/// One row of a host's ports table; `outlier`: the NIC is its rail's peer outlier.
fn nic_row(html: &mut String, nic: &NicView, outlier: bool) {
    let rates = nic.rates.as_ref();
    let pause = rates.map_or("–".into(), |r| {
        if r.pause.is_empty() {
            "none".to_string()
        } else {
            r.pause
                .iter()
                .map(|p| format!("p{} {} {:.0}%", p.priority, p.direction, p.share * 100.0))
                .collect::<Vec<_>>()
                .join(", ")
        }
    });
    let sampler = if nic.sampler.is_empty() {
        "no pause".to_string()
    } else {
        nic.sampler
            .iter()
            .map(|s| {
                format!(
                    "p{} {} {:.0}%{}",
                    s.priority,
                    s.direction,
                    s.paused_share * 100.0,
                    if s.in_storm { " STORM" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let switch = nic.switch.as_ref().map_or("–".into(), |s| {
        format!(
            "{} {}{}",
            escape(&s.switch),
            escape(&s.port),
            if s.up == Some(false) { " (down)" } else { "" }
        )
    });
    let _ = write!(
        html,
        "<tr class=\"{status}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{switch}</td><td>{}</td><td>{}</td><td>{}</td><td>{pause}</td>\
         <td>{sampler}</td><td>{}</td><td>{} / {} / {}</td><td>{}</td></tr>",
        escape(&nic.device),
        escape(&nic.port),
        opt(nic.link_layer.as_deref()),
        opt(nic.state.as_deref()),
        opt(nic.phys_state.as_deref()),
        rate(nic.rate_bytes_per_second),
        escape(nic.netdev.as_deref().unwrap_or("")),
        escape(nic.firmware.as_deref().unwrap_or("")),
        escape(&nic.label) + if outlier { " ◆ peer outlier" } else { "" },
        gbps(rates.and_then(|r| r.rx_bytes_per_second)),
        gbps(rates.and_then(|r| r.tx_bytes_per_second)),
        per_second(rates.and_then(|r| r.ecn_marked_per_second)),
        per_second(rates.and_then(|r| r.cnp_sent_per_second)),
        per_second(rates.and_then(|r| r.cnp_handled_per_second)),
        per_second(rates.and_then(|r| r.cnp_ignored_per_second)),
        per_second(rates.and_then(|r| r.errors_per_second)),
        status = nic.status.as_str(),
    );
}

fn read_errors_table(html: &mut String, host: &HostView) {
    let _ = write!(
        html,
        "<h3>Recent read errors on {}</h3>",
        escape(&host.name)
    );
    if host.read_errors.is_empty() {
        html.push_str("<p>None.</p>");
        return;
    }
    html.push_str("<table><thead><tr><th>when</th><th>device</th><th>reason</th><th>detail</th></tr></thead><tbody>");
    for error in &host.read_errors {
        let _ = write!(
            html,
            "<tr><td>{:.1} s ago</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            error.seconds_ago,
            escape(&error.device),
            escape(error.reason),
            escape(&error.detail)
        );
    }
    html.push_str("</tbody></table>");
}

/// The worst probe paths that lost probes, of `probes`' failing ones.
fn failing_paths_table(html: &mut String, probes: &ProbesView) {
    let _ = write!(
        html,
        "<h2>Failing probe paths</h2><p>{} of {} paths between live ports lost probes over the \
         last {:.0} s; the worst {} below.</p><table class=\"probe-paths\"><thead><tr>\
         <th>from</th><th>to</th><th>sent</th><th>lost</th><th>lost share</th></tr></thead><tbody>",
        probes.failing_path_count,
        probes.paths,
        probes.window_seconds,
        probes.failing_paths.len(),
    );
    for path in &probes.failing_paths {
        let _ = write!(
            html,
            "<tr><td>{} {} port {}</td><td>{} {} port {}</td><td>{}</td><td>{}</td><td>{:.1}%</td></tr>",
            escape(&path.from.host),
            escape(&path.from.device),
            path.from.port,
            escape(&path.to.host),
            escape(&path.to.device),
            path.to.port,
            path.sent,
            path.lost,
            path.loss_share * 100.0
        );
    }
    html.push_str("</tbody></table>");
}

fn switches_table(html: &mut String, switches: &[SwitchView]) {
    html.push_str("<h2>Switches</h2><table class=\"switches\"><thead><tr><th>switch</th><th>state</th><th>reason</th><th>last poll</th><th>ports with an LLDP neighbour</th></tr></thead><tbody>");
    for switch in switches {
        let neighbours = switch
            .ports
            .iter()
            .filter(|p| p.neighbor_host.is_some())
            .count();
        let _ = write!(
            html,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{neighbours}</td></tr>",
            if switch.up { "ok" } else { "down" },
            escape(&switch.name),
            if switch.up { "✓ up" } else { "✕ down" },
            escape(switch.reason.unwrap_or("–")),
            switch
                .last_success_seconds_ago
                .map_or("never".into(), |s| format!("{s:.1} s ago")),
        );
    }
    html.push_str("</tbody></table>");
}

/// The page as a response, with its content security policy.
pub fn response(view: &FabricView, links: &Links<'_>) -> Response {
    let mut response = axum::response::Html(render(view, links)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `/api/v1/fabric`'s answer.
pub fn json_response(view: &FabricView) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        super::fabric_json::to_json(view),
    )
        .into_response()
}

/// The embedded script or style.
pub fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::localize::PortId;
    use crate::web::fabric_json::{HostView, NicView};
    use crate::web::fabric_probes::{FailingPathView, ProbesView, VerdictView};

    fn hostile_view() -> FabricView {
        let evil = "<script>alert(1)</script>";
        FabricView {
            version: "0",
            mode: "node",
            scenario: None,
            hosts: vec![HostView {
                name: evil.into(),
                sysfs_root: "/sys".into(),
                infiniband_present: true,
                last_read_seconds_ago: None,
                rate_window_seconds: None,
                nics: vec![NicView {
                    device: evil.into(),
                    port: "1".into(),
                    netdev: Some(evil.into()),
                    link_layer: Some("Ethernet".into()),
                    state: Some("4: ACTIVE".into()),
                    phys_state: Some("5: LinkUp".into()),
                    up: true,
                    rate_bytes_per_second: Some(12.5e9),
                    firmware: Some(evil.into()),
                    rates: None,
                    rx_utilization: None,
                    sampler: Vec::new(),
                    switch: None,
                    status: Status::NoRate,
                    label: "… no rate yet".into(),
                }],
                read_errors: Vec::new(),
            }],
            switches: Vec::new(),
            storm_sources: Vec::new(),
            peer_outliers: Vec::new(),
            probes: Some(hostile_probes(evil)),
        }
    }

    fn hostile_probes(evil: &str) -> ProbesView {
        let port = PortId {
            host: evil.into(),
            device: evil.into(),
            port: 1,
        };
        ProbesView {
            window_seconds: 120.0,
            localized: true,
            live_ports: 2,
            paths: 2,
            failing_path_count: 1,
            failing_paths: vec![FailingPathView {
                from: port.clone(),
                to: port,
                sent: 10,
                lost: 1,
                loss_share: 0.1,
            }],
            verdicts: vec![VerdictView {
                kind: Kind::Nic,
                host: Some(evil.into()),
                device: Some(evil.into()),
                port: Some(1),
                switch: Some(evil.into()),
                switch_port: Some(evil.into()),
                failing_paths: 1,
                explained_ratio: 1.0,
                mean_path_loss: Some(0.1),
                background_loss: 0.0,
                confidence: 1.0,
                answer_delay_seconds: None,
                evidence: evil.into(),
                hurts: Vec::new(),
            }],
            summary: evil.into(),
        }
    }

    #[test]
    fn hostile_names_are_escaped_in_the_page_and_the_json() {
        let view = hostile_view();
        let page = render(
            &view,
            &Links {
                telemetry_path: "/metrics",
                demo_hosts: &["<script>x</script>".to_string()],
            },
        );
        // The page's one script is its own, by src.
        assert_eq!(page.matches("<script").count(), 1, "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("100 Gb/s"));
        assert!(page.contains("<h2>Probe suspects</h2>") && page.contains("Failing probe paths"));
        assert!(page.contains("◎ nic: NIC &lt;script&gt;"), "{page}");
        let json = String::from_utf8(super::super::fabric_json::to_json(&view)).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            parsed["hosts"][0]["nics"][0]["device"],
            "<script>alert(1)</script>"
        );
    }
}
