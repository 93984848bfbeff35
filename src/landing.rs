//! The landing page: what the agent sees (devices, ports) and what went wrong recently.

use std::fmt::Write;
use std::time::SystemTime;

use crate::node::NodeCollector;

fn escape(text: &str) -> String {
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

fn age(at: SystemTime) -> String {
    match SystemTime::now().duration_since(at) {
        Ok(d) => format!("{:.1} s ago", d.as_secs_f64()),
        Err(_) => "just now".into(),
    }
}

/// Renders the page. Reads the node once if nothing has scraped it yet, so a newcomer sees data.
pub fn render(telemetry_path: &str, node: Option<&NodeCollector>) -> String {
    let mut html = String::new();
    let path = escape(telemetry_path);
    let _ = write!(
        html,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>rdma-fabric-exporter</title>\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}tr.down td{{background:#fdd}}</style></head><body>\
         <h1>rdma-fabric-exporter</h1><p>Version {}. <a href=\"{path}\">Metrics</a> · \
         <a href=\"/healthz\">Health</a></p>",
        env!("CARGO_PKG_VERSION")
    );
    let Some(node) = node else {
        html.push_str("<p>The node collector is disabled.</p></body></html>");
        return html;
    };
    let mut last = node.last_scrape();
    if last.at.is_none() {
        node.scrape(|_, _| ());
        last = node.last_scrape();
    }
    let _ = write!(
        html,
        "<h2>RDMA devices</h2><p>sysfs root <code>{}</code>, last read {}.</p>",
        escape(&node.config().sysfs_root.display().to_string()),
        last.at.map_or_else(|| "never".into(), age)
    );
    if !last.infiniband_present {
        html.push_str("<p>No <code>class/infiniband</code> here: no RDMA driver is loaded.</p>");
    } else {
        html.push_str("<table><tr><th>device</th><th>port</th><th>link layer</th><th>state</th><th>physical state</th><th>rate</th><th>netdev</th><th>firmware</th></tr>");
        for device in &last.snapshot.devices {
            for port in &device.ports {
                let state = |s: &Option<(u32, String)>| {
                    s.as_ref()
                        .map_or("?".to_string(), |(id, name)| format!("{id}: {name}"))
                };
                // Anything but ACTIVE / LinkUp is what an operator looks for first.
                let healthy = port.state.as_ref().is_some_and(|(id, _)| *id == 4)
                    && port.phys_state.as_ref().is_some_and(|(id, _)| *id == 5);
                let _ = write!(
                    html,
                    "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    if healthy { "" } else { " class=\"down\"" },
                    escape(&device.name),
                    port.number,
                    escape(port.link_layer.as_deref().unwrap_or("?")),
                    escape(&state(&port.state)),
                    escape(&state(&port.phys_state)),
                    port.rate_bytes_per_second
                        .map_or("?".into(), |r| format!("{} Gb/s", r * 8.0 / 1e9)),
                    escape(port.netdev.as_deref().unwrap_or("")),
                    escape(device.fw_ver.as_deref().unwrap_or("")),
                );
            }
        }
        html.push_str("</table>");
    }
    html.push_str("<h2>Recent read errors</h2>");
    if last.recent_errors.is_empty() {
        html.push_str("<p>None.</p>");
    } else {
        html.push_str("<table><tr><th>when</th><th>device</th><th>reason</th><th>detail</th></tr>");
        for error in last.recent_errors.iter().rev() {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                age(error.at),
                escape(&error.device),
                escape(error.reason),
                escape(&error.detail)
            );
        }
        html.push_str("</table>");
    }
    html.push_str("</body></html>");
    html
}

/// The `demo` page: where each simulated host's agent and the switches are served.
pub fn render_demo<'a>(telemetry_path: &str, hosts: impl Iterator<Item = &'a str>) -> String {
    let path = escape(telemetry_path);
    let mut html = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>rdma-fabric-exporter demo</title>\
         <style>body{{font-family:sans-serif;margin:2em}}</style></head><body>\
         <h1>rdma-fabric-exporter demo</h1><p>Version {}. A simulated fabric: \
         <a href=\"{path}\">switches</a> · <a href=\"/sd\">Prometheus HTTP service discovery</a> · \
         <a href=\"/healthz\">Health</a></p><h2>Hosts</h2><ul>",
        crate::build::VERSION
    );
    for host in hosts {
        let host = escape(host);
        let _ = write!(html, "<li><a href=\"/hosts/{host}{path}\">{host}</a></li>");
    }
    html.push_str("</ul></body></html>\n");
    html
}
