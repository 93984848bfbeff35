//! `--exporter URL`: how this node's ports fare in the exporter's probes between NICs
//! (docs/metrics.md, "Probes between NICs"). Every other check reads the node; this one asks
//! the exporter running on it, and only when told where it is. Two scrapes of
//! `/metrics?collect[]=probe` (with the `sysfs` pass for the PFC and ECN counters, where it is
//! enabled), `--exporter-interval` apart: the probes lost and the mean network RTT between
//! them, against the same since the exporter started, and whether PFC paused the port or ECN
//! marked its traffic meanwhile. A rise of the RTT with PFC pauses is congestion (queues), not
//! a fault; lost probes are what `RdmaProbeSuspect` localizes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::diag::ecn_tune::classify::PFC_NEAR_ZERO;
use crate::diag::ecn_tune::evidence::{probe_rtt_rose, rtt_text, PAUSING_ITS_SWITCH};
use crate::diag::ecn_tune::query::{form_encode, Client, Endpoint, QueryError};

use super::report::{Finding, Severity};

/// Deadline of one scrape (the `sysfs` pass of a large node takes a few seconds).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(20);
/// The exporter's collectors asked for, the probe's first: the others only add the PFC and
/// ECN counters (`sysfs` reads the ethtool statistics in the same pass), and are dropped from
/// the request where the exporter has them off.
const COLLECTORS: [&str; 3] = ["probe", "sysfs", "ethtool"];

/// One port's counters at one scrape, as the exporter serves them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PortCounts {
    /// `rdma_probe_up`.
    pub up: Option<f64>,
    /// Probes sent and lost, all path kinds.
    pub sent: f64,
    pub lost: f64,
    /// `rdma_probe_network_rtt_seconds` sum and count.
    pub rtt_sum: f64,
    pub rtt_count: f64,
    /// `rdma_probe_port_info`'s clock.
    pub clock: Option<String>,
    /// Seconds paused by PFC per (direction, priority); empty when not served.
    pub pfc_paused: BTreeMap<(String, String), f64>,
    /// ECN marks received, CNPs sent and handled, summed; `None` when not served.
    pub ecn_signals: Option<f64>,
}

/// Every probing port of one scrape, by device and port.
pub type Ports = BTreeMap<(String, u32), PortCounts>;

/// `name{labels} value`: one sample line of a text exposition.
fn sample_line(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(mut inside) = rest.strip_prefix('{') {
        loop {
            inside = inside.trim_start_matches([',', ' ']);
            if let Some(after) = inside.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = inside.find('=')?;
            let key = inside[..eq].trim().to_string();
            let quoted = inside[eq + 1..].trim_start().strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '\\' => {
                        let (_, escaped) = chars.next()?;
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                    '"' => break i,
                    c => value.push(c),
                }
            };
            labels.insert(key, value);
            inside = &quoted[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some((name, labels, value))
}

/// The probing ports of a text exposition (Prometheus' text format 0.0.4) and their PFC and
/// ECN counters. Ports with PFC or ECN counters but no probe series are left out.
pub fn parse(text: &str) -> Ports {
    let mut all: Ports = BTreeMap::new();
    let mut probing = std::collections::BTreeSet::new();
    for (name, labels, value) in text.lines().filter_map(sample_line) {
        let (Some(device), Some(port)) = (
            labels.get("device"),
            labels.get("port").and_then(|p| p.parse::<u32>().ok()),
        ) else {
            continue;
        };
        let key = (device.clone(), port);
        let counts = all.entry(key.clone()).or_default();
        let is_probe = name.starts_with("rdma_probe_");
        match name {
            "rdma_probe_up" => counts.up = Some(value),
            "rdma_probe_sent_total" => counts.sent += value,
            "rdma_probe_lost_total" => counts.lost += value,
            "rdma_probe_network_rtt_seconds_sum" => counts.rtt_sum = value,
            "rdma_probe_network_rtt_seconds_count" => counts.rtt_count = value,
            "rdma_probe_port_info" => {
                counts.clock = labels.get("clock").filter(|c| !c.is_empty()).cloned();
            }
            "rdma_pfc_pause_duration_seconds_total" => {
                let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
                *counts
                    .pfc_paused
                    .entry((get("direction"), get("priority")))
                    .or_default() += value;
            }
            "rdma_hw_np_ecn_marked_roce_packets_total"
            | "rdma_hw_np_cnp_sent_total"
            | "rdma_hw_rp_cnp_handled_total" => {
                *counts.ecn_signals.get_or_insert(0.0) += value;
            }
            _ => {}
        }
        if is_probe {
            probing.insert(key);
        }
    }
    all.retain(|key, _| probing.contains(key));
    all
}

/// What one scrape of the exporter gave.
#[derive(Debug)]
pub enum Scrape {
    Ports(Ports),
    /// The probe collector is off in this exporter.
    NotProbing(String),
    /// The exporter could not be read: the finding says why.
    Failed(Finding),
}

/// `/metrics?collect[]=...` for `names`.
fn metrics_path(names: &[&str]) -> String {
    let query: Vec<String> = names
        .iter()
        .map(|n| format!("{}={n}", form_encode("collect[]")))
        .collect();
    format!("/metrics?{}", query.join("&"))
}

/// A GET of a path below the exporter's URL: the status and the body.
pub type Get<'a> = dyn FnMut(&str) -> Result<(u16, Vec<u8>), QueryError> + 'a;

/// One scrape through `get` (a path to the status and body): the probe collector with as many
/// of the others as the exporter has on, each a 400 naming it (`collector "x" is not enabled`)
/// takes off.
pub fn scrape(url: &str, get: &mut Get) -> Scrape {
    let mut names: Vec<&str> = COLLECTORS.to_vec();
    loop {
        let (status, body) = match get(&metrics_path(&names)) {
            Ok(answer) => answer,
            Err(e) => return Scrape::Failed(unreachable(url, &e)),
        };
        let text = String::from_utf8_lossy(&body);
        if status == 200 {
            return Scrape::Ports(parse(&text));
        }
        let off = names
            .iter()
            .position(|n| text.contains(&format!("collector {n:?} is not enabled")));
        match off {
            Some(0) if status == 400 => return Scrape::NotProbing(first_line(&text)),
            Some(i) if status == 400 => {
                names.remove(i);
            }
            _ => {
                let finding = Finding::host(
                    "probe",
                    Severity::Warn,
                    format!(
                        "the exporter at {url} answered HTTP {status}: {}",
                        first_line(&text)
                    ),
                );
                return Scrape::Failed(if status == 401 || status == 403 {
                    finding.with_fix(
                        "it has basic auth on (--web.config.file): give the user and password in the URL, http://user:password@host:9866",
                    )
                } else {
                    finding.with_fix(
                        "give the exporter's base URL (http://host:9866, the part before /metrics)",
                    )
                });
            }
        }
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

fn unreachable(url: &str, e: &QueryError) -> Finding {
    let message = match e {
        QueryError::Unreachable { message, .. } => {
            format!("cannot reach the exporter at {url}: {message}")
        }
        QueryError::Timeout { timeout, .. } => {
            format!("the exporter at {url} did not answer within {timeout:?}")
        }
        other => other.to_string(),
    };
    Finding::host("probe", Severity::Warn, message).with_fix(
        "run doctor where the exporter runs and give its address (--web.listen-address, :9866 by default; in Kubernetes the node agent pod's IP)",
    )
}

/// The check: two scrapes of the exporter at `url`, `interval` apart, judged per port.
pub fn check(exporter: Endpoint, interval: Duration) -> Result<Vec<Finding>, QueryError> {
    let client = Client::new(exporter, SCRAPE_TIMEOUT)?.with_tool("doctor");
    let url = client.url().to_string();
    let mut get = |path: &str| client.get_path(path, "text/plain; version=0.0.4");
    let before = scrape(&url, &mut get);
    let first_at = Instant::now();
    let Scrape::Ports(before) = before else {
        return Ok(vec![not_ports(&url, before)]);
    };
    if before.is_empty() {
        return Ok(vec![no_ports(&url)]);
    }
    std::thread::sleep(interval);
    let after = scrape(&url, &mut get);
    let seconds = first_at.elapsed().as_secs_f64();
    let Scrape::Ports(after) = after else {
        return Ok(vec![not_ports(&url, after)]);
    };
    if after.is_empty() {
        return Ok(vec![no_ports(&url)]);
    }
    Ok(judge(&before, &after, seconds))
}

fn not_ports(url: &str, scrape: Scrape) -> Finding {
    match scrape {
        Scrape::Failed(finding) => finding,
        Scrape::NotProbing(why) => Finding::host(
            "probe",
            Severity::Info,
            format!("the exporter at {url} does not probe ({why}): no probes to read"),
        )
        .with_fix("--collector.probe or probe.enabled: true turns probing on (docs/deploy.md, \"Probing between NICs\")"),
        Scrape::Ports(_) => no_ports(url),
    }
}

fn no_ports(url: &str) -> Finding {
    Finding::host(
        "probe",
        Severity::Info,
        format!("the exporter at {url} probes, but no port yet (just started, or no device it could open: its log says why)"),
    )
}

/// Each port of `after`: its probe loss and its RTT, over the `seconds` between the scrapes.
pub fn judge(before: &Ports, after: &Ports, seconds: f64) -> Vec<Finding> {
    let mut findings = Vec::new();
    for ((device, port), now) in after {
        // A counter that went back: the exporter restarted in between, its counts start at 0.
        let then = before
            .get(&(device.clone(), *port))
            .filter(|b| b.sent <= now.sent && b.rtt_count <= now.rtt_count)
            .cloned()
            .unwrap_or_default();
        findings.extend(judge_port(device, *port, &then, now, seconds));
    }
    findings
}

fn judge_port(
    device: &str,
    port: u32,
    then: &PortCounts,
    now: &PortCounts,
    seconds: f64,
) -> Vec<Finding> {
    let finding =
        |check, severity, message: String| Finding::port(check, device, port, severity, message);
    if now.up == Some(0.0) {
        return vec![finding(
            "probe-loss",
            Severity::Warn,
            "not probing: its device is gone (rdma_probe_up 0)".into(),
        )
        .with_fix(
            "the exporter stops probing a removed device; restart it once the device is back",
        )];
    }
    let secs = format!("{seconds:.0} s");
    let (sent, lost) = (now.sent - then.sent, (now.lost - then.lost).max(0.0));
    let since_start = format!(
        "{:.0} of {:.0} lost since the exporter started",
        now.lost, now.sent
    );
    let loss = if lost > 0.0 {
        finding(
            "probe-loss",
            Severity::Warn,
            format!(
                "losing probes: see RdmaProbeSuspect; {lost:.0} of {sent:.0} lost in the last {secs} ({:.1} %), {since_start}",
                100.0 * lost / sent.max(lost)
            ),
        )
        .with_fix(
            "a path from this port drops packets: the localizer's rdma_localization_verdict and RdmaProbeSuspect name the NIC, host, leaf, uplink or spine the lost probes point at (docs/localization.md), rdma_probe_target_lost_total the targets",
        )
    } else if sent <= 0.0 {
        finding(
            "probe-loss",
            Severity::Info,
            format!("sent no probe in the last {secs} ({since_start}): no targets yet?"),
        )
    } else {
        finding(
            "probe-loss",
            Severity::Ok,
            format!("{sent:.0} probes in the last {secs}, none lost ({since_start})"),
        )
    };
    let mut findings = vec![loss];
    let answered = now.rtt_count - then.rtt_count;
    if answered <= 0.0 {
        return findings;
    }
    let rtt = (now.rtt_sum - then.rtt_sum) / answered;
    let baseline = (then.rtt_count > 0.0).then(|| then.rtt_sum / then.rtt_count);
    let stated = match baseline {
        Some(b) => format!(
            "mean network RTT {} in the last {secs}, {} since the exporter started",
            rtt_text(rtt),
            rtt_text(b)
        ),
        None => format!("mean network RTT {} in the last {secs}", rtt_text(rtt)),
    };
    let rose = baseline.is_some_and(|b| probe_rtt_rose(rtt, b, now.clock.as_deref()));
    if !rose {
        findings.push(finding("probe-rtt", Severity::Ok, stated));
        return findings;
    }
    let share = |(k, v): (&(String, String), &f64)| {
        (v - then.pfc_paused.get(k).copied().unwrap_or(0.0)) / seconds
    };
    let paused = now.pfc_paused.iter().map(share).max_by(f64::total_cmp);
    let storming = now
        .pfc_paused
        .iter()
        .filter(|((direction, _), _)| direction == "tx")
        .map(share)
        .any(|p| p > PAUSING_ITS_SWITCH);
    let ecn = match (now.ecn_signals, then.ecn_signals) {
        (Some(n), Some(t)) => Some(n - t > 0.0),
        _ => None,
    };
    let software = if now.clock.as_deref() == Some("software") {
        "; this port stamps probes with the host's clock, so a busy host adds to it too"
    } else {
        ""
    };
    let message = match (paused, ecn) {
        (Some(p), _) if storming => format!(
            "RTT high while this port pauses its switch {:.0} % of the time: queues behind its own PFC storm (RdmaPfcStormNic), a fault of this host, not congestion; {stated}",
            p * 100.0
        ),
        (Some(p), _) if p >= PFC_NEAR_ZERO => format!(
            "RTT high while PFC pauses: congestion (queues), not a fault; {stated}, PFC paused {:.2} % of the time",
            p * 100.0
        ),
        (_, Some(true)) => format!(
            "RTT high while ECN marks: congestion (queues) below the PFC threshold, not a fault; {stated}"
        ),
        (Some(_), Some(false)) => format!(
            "RTT rose with neither PFC nor ECN moving: not congestion; {stated}: with lost probes see RdmaProbeSuspect, else a reroute onto a longer path{software}"
        ),
        (Some(_), None) => format!(
            "RTT rose without PFC pauses; {stated}; no ECN counters to show queues below the PFC threshold: if ECN marked nothing either, not congestion: with lost probes see RdmaProbeSuspect, else a reroute onto a longer path{software}"
        ),
        (None, _) => format!(
            "RTT rose; {stated}; the exporter serves no PFC pause counters for this port to tell congestion from a fault (its sysfs and ethtool collectors){software}"
        ),
    };
    findings.push(finding("probe-rtt", Severity::Info, message));
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrape of one port, mlx5_0 port 1.
    fn exposition(sent: u64, lost: u64, rtt_sum: f64, rtt_count: u64, paused: f64) -> String {
        format!(
            r#"# HELP rdma_probe_up 1 while the port probes.
# TYPE rdma_probe_up gauge
rdma_probe_up{{device="mlx5_0",port="1"}} 1
rdma_probe_port_info{{device="mlx5_0",port="1",netdev="eth2",rail="0",gid="::ffff:10.0.0.1",qpn="2",clock="hardware"}} 1
rdma_probe_sent_total{{device="mlx5_0",port="1",path="host"}} {}
rdma_probe_sent_total{{device="mlx5_0",port="1",path="rail"}} {}
rdma_probe_lost_total{{device="mlx5_0",port="1",path="host"}} 0
rdma_probe_lost_total{{device="mlx5_0",port="1",path="rail"}} {lost}
rdma_probe_network_rtt_seconds_bucket{{device="mlx5_0",port="1",le="+Inf"}} {rtt_count}
rdma_probe_network_rtt_seconds_sum{{device="mlx5_0",port="1"}} {rtt_sum}
rdma_probe_network_rtt_seconds_count{{device="mlx5_0",port="1"}} {rtt_count}
rdma_pfc_pause_duration_seconds_total{{device="mlx5_0",port="1",netdev="eth2",priority="3",direction="rx"}} {paused}
rdma_pfc_pause_duration_seconds_total{{device="mlx5_0",port="1",netdev="eth2",priority="0",direction="rx"}} 0
rdma_hw_np_ecn_marked_roce_packets_total{{device="mlx5_0",port="1"}} 5
rdma_pfc_pause_duration_seconds_total{{device="mlx5_1",port="1",netdev="eth3",priority="3",direction="rx"}} 9
"#,
            sent / 2,
            sent - sent / 2,
        )
    }

    fn findings(before: &str, after: &str) -> Vec<Finding> {
        judge(&parse(before), &parse(after), 10.0)
    }

    fn of<'a>(findings: &'a [Finding], check: &str) -> &'a Finding {
        findings
            .iter()
            .find(|f| f.check == check)
            .unwrap_or_else(|| panic!("no {check}: {findings:#?}"))
    }

    #[test]
    fn the_exposition_is_read_per_port() {
        let ports = parse(&exposition(1000, 3, 0.009, 997, 1.5));
        // mlx5_1 has PFC counters but does not probe: left out.
        assert_eq!(ports.len(), 1, "{ports:#?}");
        let p = &ports[&("mlx5_0".to_string(), 1)];
        assert_eq!((p.sent, p.lost), (1000.0, 3.0));
        assert_eq!((p.rtt_sum, p.rtt_count), (0.009, 997.0));
        assert_eq!(p.up, Some(1.0));
        assert_eq!(p.clock.as_deref(), Some("hardware"));
        assert_eq!(p.pfc_paused[&("rx".into(), "3".into())], 1.5);
        assert_eq!(p.ecn_signals, Some(5.0));
        // Escapes in label values, timestamps after the value, and lines that are not samples.
        let (name, labels, value) =
            sample_line(r#"m{a="x\"y\\z",b="q,r}"} 2.5 1700000000000"#).unwrap();
        assert_eq!((name, value), ("m", 2.5));
        assert_eq!(labels["a"], "x\"y\\z");
        assert_eq!(labels["b"], "q,r}");
        assert_eq!(sample_line("up 1").unwrap().2, 1.0);
        assert!(sample_line("# TYPE up gauge").is_none());
        assert!(sample_line(r#"m{a="unterminated} 1"#).is_none());
    }

    #[test]
    fn a_quiet_port_is_ok_with_its_numbers() {
        let f = findings(
            &exposition(1000, 0, 0.009, 1000, 1.0),
            &exposition(1240, 0, 0.011_16, 1240, 1.0),
        );
        let loss = of(&f, "probe-loss");
        assert_eq!(loss.severity, Severity::Ok);
        assert_eq!(
            loss.message,
            "240 probes in the last 10 s, none lost (0 of 1240 lost since the exporter started)"
        );
        let rtt = of(&f, "probe-rtt");
        assert_eq!(rtt.severity, Severity::Ok);
        assert_eq!(
            rtt.message,
            "mean network RTT 9.0 µs in the last 10 s, 9.0 µs since the exporter started"
        );
    }

    #[test]
    fn an_rtt_that_rose_while_pfc_paused_is_congestion() {
        // 240 answers of 48 µs, paused 1.5 s of 10 on priority 3.
        let f = findings(
            &exposition(1000, 0, 0.009, 1000, 1.0),
            &exposition(1240, 0, 0.009 + 240.0 * 48e-6, 1240, 2.5),
        );
        let rtt = of(&f, "probe-rtt");
        assert_eq!(rtt.severity, Severity::Info, "not a fault");
        assert!(
            rtt.message
                .starts_with("RTT high while PFC pauses: congestion (queues), not a fault; mean network RTT 48.0 µs in the last 10 s, 9.0 µs since the exporter started, PFC paused 15.00 %"),
            "{}",
            rtt.message
        );
        assert_eq!(of(&f, "probe-loss").severity, Severity::Ok);
    }

    #[test]
    fn an_rtt_that_rose_while_the_port_storms_is_its_own_fault() {
        let tx = |seconds: f64| {
            format!(
                "rdma_pfc_pause_duration_seconds_total{{device=\"mlx5_0\",port=\"1\",netdev=\"eth2\",priority=\"3\",direction=\"tx\"}} {seconds}\n"
            )
        };
        let f = findings(
            &(exposition(1000, 0, 0.009, 1000, 1.0) + &tx(100.0)),
            &(exposition(1240, 0, 0.009 + 240.0 * 48e-6, 1240, 1.0) + &tx(109.0)),
        );
        let rtt = of(&f, "probe-rtt");
        assert!(
            rtt.message.starts_with(
                "RTT high while this port pauses its switch 90 % of the time: queues behind its own PFC storm (RdmaPfcStormNic)"
            ),
            "{}",
            rtt.message
        );
    }

    #[test]
    fn an_rtt_that_rose_without_pfc_or_ecn_is_not_congestion() {
        let f = findings(
            &exposition(1000, 0, 0.009, 1000, 1.0),
            &exposition(1240, 0, 0.009 + 240.0 * 48e-6, 1240, 1.0),
        );
        let rtt = of(&f, "probe-rtt");
        assert!(
            rtt.message
                .starts_with("RTT rose with neither PFC nor ECN moving: not congestion"),
            "{}",
            rtt.message
        );
        assert!(rtt.message.contains("RdmaProbeSuspect"), "{}", rtt.message);
        // Without the PFC and ECN counters (collectors off) it says it cannot tell.
        let strip = |text: String| {
            text.lines()
                .filter(|l| !l.starts_with("rdma_pfc") && !l.starts_with("rdma_hw"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let f = findings(
            &strip(exposition(1000, 0, 0.009, 1000, 1.0)),
            &strip(exposition(1240, 0, 0.009 + 240.0 * 48e-6, 1240, 1.0)),
        );
        assert!(
            of(&f, "probe-rtt")
                .message
                .contains("no PFC pause counters for this port"),
            "{f:#?}"
        );
    }

    #[test]
    fn lost_probes_send_to_rdma_probe_suspect() {
        let f = findings(
            &exposition(1000, 3, 0.009, 997, 1.0),
            &exposition(1240, 27, 0.011_16, 1213, 1.0),
        );
        let loss = of(&f, "probe-loss");
        assert_eq!(loss.severity, Severity::Warn);
        assert!(
            loss.message.starts_with(
                "losing probes: see RdmaProbeSuspect; 24 of 240 lost in the last 10 s (10.0 %), 27 of 1240 lost since the exporter started"
            ),
            "{}",
            loss.message
        );
        assert!(loss
            .fix
            .as_deref()
            .unwrap()
            .contains("docs/localization.md"));
    }

    #[test]
    fn a_restarted_exporter_and_a_gone_device() {
        // The counters went back: the second scrape's counts are all since the restart.
        let f = findings(
            &exposition(5000, 0, 0.045, 5000, 1.0),
            &exposition(240, 0, 0.002_16, 240, 0.0),
        );
        assert_eq!(
            of(&f, "probe-loss").message,
            "240 probes in the last 10 s, none lost (0 of 240 lost since the exporter started)"
        );
        assert_eq!(
            of(&f, "probe-rtt").message,
            "mean network RTT 9.0 µs in the last 10 s"
        );
        let gone = exposition(240, 0, 0.002_16, 240, 0.0).replace(
            r#"rdma_probe_up{device="mlx5_0",port="1"} 1"#,
            r#"rdma_probe_up{device="mlx5_0",port="1"} 0"#,
        );
        let f = findings(&gone, &gone);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warn);
        assert!(f[0].message.contains("device is gone"), "{}", f[0].message);
    }

    #[test]
    fn collectors_the_exporter_has_off_are_dropped_from_the_scrape() {
        let mut asked = Vec::new();
        let mut get = |path: &str| {
            asked.push(path.to_string());
            if path.contains("=ethtool") {
                return Ok((
                    400,
                    b"collector \"ethtool\" is not enabled here; enabled collectors: sysfs, probe\n"
                        .to_vec(),
                ));
            }
            Ok((200, exposition(10, 0, 0.0001, 10, 0.0).into_bytes()))
        };
        let scraped = scrape("http://node:9866", &mut get);
        assert!(
            matches!(&scraped, Scrape::Ports(p) if p.len() == 1),
            "{scraped:?}"
        );
        assert_eq!(
            asked,
            [
                "/metrics?collect%5B%5D=probe&collect%5B%5D=sysfs&collect%5B%5D=ethtool",
                "/metrics?collect%5B%5D=probe&collect%5B%5D=sysfs",
            ]
        );
        // No probe collector: information, not a problem.
        let mut off = |_: &str| {
            Ok((
                400,
                b"collector \"probe\" is not enabled here; enabled collectors: sysfs\n".to_vec(),
            ))
        };
        let scraped = scrape("http://node:9866", &mut off);
        assert!(matches!(scraped, Scrape::NotProbing(_)), "{scraped:?}");
        let finding = not_ports("http://node:9866", scraped);
        assert_eq!(finding.severity, Severity::Info);
        assert!(
            finding.message.starts_with("the exporter at http://node:9866 does not probe (collector \"probe\" is not enabled here"),
            "{}",
            finding.message
        );
        // Basic auth: the fix says how to give the password.
        let mut auth = |_: &str| Ok((401, b"Unauthorized\n".to_vec()));
        let Scrape::Failed(finding) = scrape("http://node:9866", &mut auth) else {
            panic!()
        };
        assert_eq!(finding.severity, Severity::Warn);
        assert!(finding.fix.unwrap().contains("user:password@"));
    }
}
