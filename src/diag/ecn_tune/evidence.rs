//! The evidence for every NIC and switch port over the window, from the exporter's recording
//! rules (`alerts/rdma-rules.yml`), and the signals the classifier reads from it.
//!
//! Every query is an instant query at the window's end over a range of the window's length:
//! `avg_over_time(rule[W])` is the level the rule held through the run (what the verdict is
//! judged on), `max_over_time(rule[W])` its peak (shown as evidence). A range query would fetch
//! every step only to average it here. The 1-minute rules serve where they exist (PFC pause,
//! utilization), so a window needs only a minute of history before it; the ECN and CNP rules are
//! 5-minute ratios, and a ratio of two rates over the same window stays true while the window
//! fills. Switch queues have no per-packet rule: their marks and transmitted packets are both
//! `rate(...[W])`, one window for numerator and denominator.

use std::collections::BTreeMap;

use serde::Serialize;

use super::classify::{classify, Signals, Verdict, ECN_FEEDBACK_LOW, PFC_NEAR_ZERO};
use super::nic_settings::NicSettings;
use super::query::{Labels, QueryError, Sample};
use super::window::Window;

/// Labels that describe a series of a port rather than name the port: dropped to key NICs.
const NIC_DETAIL_LABELS: [&str; 10] = [
    "__name__",
    "priority",
    "direction",
    "point",
    "netdev",
    "link_layer",
    "hca_type",
    "fw_ver",
    "board_id",
    "node_guid",
];
/// The same for switch ports.
const SWITCH_DETAIL_LABELS: [&str; 9] = [
    "__name__",
    "priority",
    "direction",
    "queue",
    "neighbor_host",
    "neighbor_port",
    "neighbor_port_description",
    "ifindex",
    "alias",
];
/// A port sending PAUSE continuously refreshes it every half of the longest pause (65535
/// quanta of 512 bit times): 2 x rate / (65535 x 512) frames per second when fully paused. Used
/// to read a switch's PFC frame counts as a share of time paused.
const QUANTA_BITS: f64 = 65_535.0 * 512.0;
/// A NIC that pauses its switch port more than this share of the time is a storm source or a
/// stuck receiver (the agent's storm rule uses 0.9; half is already no ECN question).
pub(crate) const PAUSING_ITS_SWITCH: f64 = 0.5;
/// Frames per second received from a neighbour that `RdmaSwitchPfcPauseSustained` pages on.
const SWITCH_RX_PFC_SUSTAINED: f64 = 10_000.0;
/// The probes' RTT rose in the window when it is more than this many times its baseline...
pub(crate) const PROBE_RTT_RISE_FACTOR: f64 = 1.5;
/// ...and at least this much more, seconds, where the NIC stamps the probes (`clock` label
/// `hardware`): a few microseconds are the path mix (a rotating sample of targets, same leaf or
/// over the spine), not queues...
pub(crate) const PROBE_RTT_RISE_MIN_SECONDS: f64 = 10e-6;
/// ...or this much where the host's clock times them (`software`, or not known): the probe
/// loop reads that clock at polls up to 100 µs apart, later on a busy host, so the mean moves
/// by tens of microseconds with the host's load alone (the demo's moves 10 -> 20 µs).
pub(crate) const PROBE_RTT_RISE_MIN_SECONDS_SOFTWARE: f64 = 100e-6;

/// Whether the probes' mean RTT rose from `before` to `now` by more than noise: both
/// [`PROBE_RTT_RISE_FACTOR`] times and the clock's floor.
pub(crate) fn probe_rtt_rose(now: f64, before: f64, clock: Option<&str>) -> bool {
    let floor = if clock == Some("hardware") {
        PROBE_RTT_RISE_MIN_SECONDS
    } else {
        PROBE_RTT_RISE_MIN_SECONDS_SOFTWARE
    };
    now > PROBE_RTT_RISE_FACTOR * before && now - before >= floor
}

/// Labels a NIC's probe series join its rows on (the probe families name the port by device
/// and port, as the NIC's own do; `job` may differ where the probes are scraped apart).
const PROBE_JOIN_LABELS: [&str; 4] = ["cluster", "instance", "device", "port"];

/// Something that answers instant queries (the Prometheus client, or a table in tests).
pub trait Source {
    fn query(&self, expr: &str, time: f64) -> Result<Vec<Sample>, QueryError>;
}

impl Source for super::query::Client {
    fn query(&self, expr: &str, time: f64) -> Result<Vec<Sample>, QueryError> {
        super::query::Client::query(self, expr, time)
    }
}

/// Average and peak of a rule over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stat {
    pub avg: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NicEvidence {
    /// Share of time paused by the switch (rx), on the most paused priority.
    pub pfc_rx_paused_ratio: Stat,
    pub pfc_rx_priority: Option<String>,
    /// Share of time this NIC paused its switch port (tx).
    pub pfc_tx_paused_ratio: Stat,
    pub tx_utilization: Stat,
    pub line_rate_gbps: Option<f64>,
    pub ecn_marked_per_second: Option<f64>,
    pub ecn_marked_per_packet: Option<f64>,
    pub cnp_sent_per_second: Option<f64>,
    pub cnp_sent_per_packet: Option<f64>,
    pub cnp_handled_per_second: Option<f64>,
    pub cnp_handled_per_packet: Option<f64>,
    pub cnp_ignored_per_second: Option<f64>,
    /// Mean network round trip of the port's probes in the window, seconds
    /// (`rdma_probe_network_rtt_seconds`, the responders' own delay taken out). Absent where
    /// the port does not probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_network_rtt_seconds: Option<f64>,
    /// The same before the run: the lowest 5-minute mean of the hour before the window
    /// (`rdma:probe_network_rtt_seconds:mean_rate5m`), the port's RTT with its queues emptiest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_network_rtt_baseline_seconds: Option<f64>,
    /// Where the probes' times come from (`hardware`, `software`: `rdma_probe_port_info`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_clock: Option<String>,
    /// What the NIC is set to: ECN reaction/notification points per priority and DCQCN
    /// parameters, where it reports them (`nic_settings.rs`).
    #[serde(skip_serializing_if = "NicSettings::is_empty")]
    pub nic_settings: NicSettings,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicRow {
    /// The labels that name the port (cluster, instance, job, device, port, ...).
    pub labels: Labels,
    pub netdev: Option<String>,
    pub evidence: NicEvidence,
    pub signals: Signals,
    pub verdict: Verdict,
    pub notes: Vec<String>,
}

impl NicRow {
    pub fn name(&self) -> String {
        let get = |k| label_or_unknown(&self.labels, k);
        format!(
            "{}{} {} port {}",
            cluster_prefix(&self.labels),
            get("instance"),
            get("device"),
            get("port")
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SwitchEvidence {
    /// PFC frames the switch sent to its neighbour (it paused the neighbour), most paused
    /// priority.
    pub pfc_frames_sent_per_second: Stat,
    pub pfc_priority: Option<String>,
    /// PFC frames the neighbour sent the switch.
    pub pfc_frames_received_per_second: Stat,
    pub ecn_marked_per_second: Option<f64>,
    pub transmitted_packets_per_second: Option<f64>,
    pub ecn_marked_per_packet: Option<f64>,
    pub received_bytes_per_second: Option<f64>,
    pub transmitted_bytes_per_second: Option<f64>,
    pub line_rate_gbps: Option<f64>,
    /// Where the line rate came from: `neighbour` (the LLDP neighbour NIC's port rate),
    /// `--line-rate`, or `fastest NIC` in the selection.
    pub line_rate_source: Option<&'static str>,
    /// PFC frames sent read as a share of time paused at that line rate.
    pub paused_ratio_estimate: Option<f64>,
    pub utilization: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwitchRow {
    pub labels: Labels,
    /// `host netdev` from LLDP, when the switch reports it.
    pub neighbor: Option<String>,
    pub evidence: SwitchEvidence,
    pub signals: Signals,
    pub verdict: Verdict,
    pub notes: Vec<String>,
}

impl SwitchRow {
    pub fn name(&self) -> String {
        let get = |k| label_or_unknown(&self.labels, k);
        let cluster = cluster_prefix(&self.labels);
        let priority = self
            .evidence
            .pfc_priority
            .as_ref()
            .map(|p| format!(" priority {p}"))
            .unwrap_or_default();
        format!("{cluster}{} {}{priority}", get("switch"), get("port"))
    }
}

/// A label's value in a row's name, `?` where the series has no such label.
fn label_or_unknown<'a>(labels: &'a Labels, key: &str) -> &'a str {
    labels.get(key).map(String::as_str).unwrap_or("?")
}

/// `<cluster>/` before a row's name where the series carries a cluster label.
fn cluster_prefix(labels: &Labels) -> String {
    labels
        .get("cluster")
        .map(|c| format!("{c}/"))
        .unwrap_or_default()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    pub nics: Vec<NicRow>,
    pub switch_ports: Vec<SwitchRow>,
    /// Notes about the whole run.
    pub notes: Vec<String>,
    /// The fastest NIC port rate seen, Gb/s.
    pub fastest_nic_gbps: Option<f64>,
    /// Series of the recording rules found: none means the rules are not loaded (or nothing
    /// matched), whatever raw counters there are.
    #[serde(skip)]
    pub rule_series: usize,
}

pub use crate::prom_query::{selector, user_matchers};

fn key(labels: &Labels, detail: &[&str]) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| !detail.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Series of one rule, keyed by port.
type ByKey = BTreeMap<Labels, Vec<Sample>>;

fn by_key(samples: Vec<Sample>, detail: &[&str]) -> ByKey {
    let mut map = ByKey::new();
    for s in samples {
        map.entry(key(&s.labels, detail)).or_default().push(s);
    }
    map
}

/// One value per key: the first series' (there is one per port for these rules).
fn single(map: &ByKey, key: &Labels) -> Option<f64> {
    map.get(key).and_then(|v| v.iter().find_map(|s| s.value))
}

/// The sum over a key's series (switch queues of one port), `None` if none has a value.
fn sum(map: &ByKey, key: &Labels) -> Option<f64> {
    let values: Vec<f64> = map.get(key)?.iter().filter_map(|s| s.value).collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The most paused priority in `direction`: its average, the highest peak, and its name.
fn most_paused(avg: &ByKey, max: &ByKey, key: &Labels, direction: &str) -> (Stat, Option<String>) {
    let in_direction =
        |s: &&Sample| s.labels.get("direction").map(String::as_str) == Some(direction);
    let best = avg.get(key).and_then(|series| {
        series
            .iter()
            .filter(in_direction)
            .filter_map(|s| s.value.map(|v| (v, s.labels.get("priority").cloned())))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    });
    let peak = max.get(key).and_then(|series| {
        series
            .iter()
            .filter(in_direction)
            .filter_map(|s| s.value)
            .max_by(f64::total_cmp)
    });
    match best {
        Some((v, priority)) => (
            Stat {
                avg: Some(v),
                max: peak,
            },
            // A priority is named only when it was paused at all.
            priority.filter(|p| !p.is_empty() && v > 0.0),
        ),
        None => (
            Stat {
                avg: None,
                max: peak,
            },
            None,
        ),
    }
}

/// What the run is asked about.
pub struct Ask<'a> {
    pub window: &'a Window,
    /// User matchers, without braces.
    pub matchers: &'a str,
    /// `--line-rate`, Gb/s: for switch ports whose neighbour is unknown.
    pub line_rate_gbps: Option<f64>,
}

struct Queries<'a> {
    source: &'a dyn Source,
    ask: &'a Ask<'a>,
}

impl Queries<'_> {
    /// `template` is the query written out, `%S` where the selector goes and `%W` for the
    /// window's length.
    fn run(&self, template: &str) -> Result<Vec<Sample>, QueryError> {
        let expr = template
            .replace("%S", &selector("", self.ask.matchers))
            .replace("%W", &self.ask.window.range());
        self.source.query(&expr, self.ask.window.end)
    }
}

/// Queries every rule the verdicts need and assembles a row per NIC and per switch port.
pub fn gather(source: &dyn Source, ask: &Ask) -> Result<Evidence, QueryError> {
    let q = Queries { source, ask };
    let nic = |template: &str| -> Result<ByKey, QueryError> {
        Ok(by_key(q.run(template)?, &NIC_DETAIL_LABELS))
    };
    let pfc_avg = nic("avg_over_time(rdma:nic_pfc_paused_ratio:rate1m%S[%W])")?;
    let pfc_max = nic("max_over_time(rdma:nic_pfc_paused_ratio:rate1m%S[%W])")?;
    let util_avg = nic("avg_over_time(rdma:nic_tx_utilization:ratio_rate1m%S[%W])")?;
    let util_max = nic("max_over_time(rdma:nic_tx_utilization:ratio_rate1m%S[%W])")?;
    let marks = nic("avg_over_time(rdma:nic_ecn_marked_per_second:rate5m%S[%W])")?;
    let marks_pp = nic("avg_over_time(rdma:nic_ecn_marked_per_packet:ratio_rate5m%S[%W])")?;
    let sent = nic("avg_over_time(rdma:nic_cnp_sent_per_second:rate5m%S[%W])")?;
    let sent_pp = nic("avg_over_time(rdma:nic_cnp_sent_per_packet:ratio_rate5m%S[%W])")?;
    let handled = nic("avg_over_time(rdma:nic_cnp_handled_per_second:rate5m%S[%W])")?;
    let handled_pp = nic("avg_over_time(rdma:nic_cnp_handled_per_packet:ratio_rate5m%S[%W])")?;
    let ignored = nic("avg_over_time(rdma:nic_cnp_ignored_per_second:rate5m%S[%W])")?;
    let rate = nic("max_over_time(rdma_port_rate_bytes_per_second%S[%W])")?;
    let info = q.run("max_over_time(rdma_port_info%S[%W])")?;
    let probes = probe_rtts(&q)?;
    let settings = super::nic_settings::gather(&|t| q.run(t), &|l| key(l, &NIC_DETAIL_LABELS))?;

    let mut netdevs: BTreeMap<Labels, String> = BTreeMap::new();
    for s in &info {
        if let Some(netdev) = s.labels.get("netdev").filter(|n| !n.is_empty()) {
            netdevs
                .entry(key(&s.labels, &NIC_DETAIL_LABELS))
                .or_insert_with(|| netdev.clone());
        }
    }
    for series in pfc_avg.values().flatten() {
        if let Some(netdev) = series.labels.get("netdev").filter(|n| !n.is_empty()) {
            netdevs
                .entry(key(&series.labels, &NIC_DETAIL_LABELS))
                .or_insert_with(|| netdev.clone());
        }
    }

    let keys: std::collections::BTreeSet<Labels> = util_avg
        .keys()
        .chain(pfc_avg.keys())
        .chain(sent_pp.keys())
        .cloned()
        .collect();
    let mut nics = Vec::new();
    for k in keys {
        let (rx, rx_priority) = most_paused(&pfc_avg, &pfc_max, &k, "rx");
        let (tx, _) = most_paused(&pfc_avg, &pfc_max, &k, "tx");
        let evidence = NicEvidence {
            pfc_rx_paused_ratio: rx,
            pfc_rx_priority: rx_priority,
            pfc_tx_paused_ratio: tx,
            tx_utilization: Stat {
                avg: single(&util_avg, &k),
                max: single(&util_max, &k),
            },
            line_rate_gbps: single(&rate, &k).map(|bytes| bytes * 8.0 / 1e9),
            ecn_marked_per_second: single(&marks, &k),
            ecn_marked_per_packet: single(&marks_pp, &k),
            cnp_sent_per_second: single(&sent, &k),
            cnp_sent_per_packet: single(&sent_pp, &k),
            cnp_handled_per_second: single(&handled, &k),
            cnp_handled_per_packet: single(&handled_pp, &k),
            cnp_ignored_per_second: single(&ignored, &k),
            probe_network_rtt_seconds: None,
            probe_network_rtt_baseline_seconds: None,
            probe_clock: None,
            nic_settings: settings.get(&k).cloned().unwrap_or_default(),
        };
        let evidence = probes.fill(&k, evidence);
        let signals = Signals {
            paused: evidence.pfc_rx_paused_ratio.avg,
            feedback_on_sent: evidence.cnp_handled_per_packet,
            feedback_on_received: evidence.cnp_sent_per_packet,
            utilization: evidence.tx_utilization.avg,
        };
        let verdict = classify(&signals);
        let notes = nic_notes(&evidence);
        nics.push(NicRow {
            netdev: netdevs.get(&k).cloned(),
            labels: k,
            evidence,
            signals,
            verdict,
            notes,
        });
    }
    let fastest_nic_gbps = nics
        .iter()
        .filter_map(|n| n.evidence.line_rate_gbps)
        .max_by(f64::total_cmp);

    let (switch_ports, switch_rule_series) = switch_rows(&q, &nics, fastest_nic_gbps)?;
    let rule_series = [&pfc_avg, &util_avg, &sent_pp, &handled_pp]
        .iter()
        .map(|m| m.values().map(Vec::len).sum::<usize>())
        .sum::<usize>()
        + switch_rule_series;
    let mut notes = Vec::new();
    let storm_sources: Vec<String> = nics
        .iter()
        .filter(|n| {
            n.evidence
                .pfc_tx_paused_ratio
                .avg
                .is_some_and(|p| p > PAUSING_ITS_SWITCH)
        })
        .map(NicRow::name)
        .collect();
    if !storm_sources.is_empty() {
        notes.push(format!(
            "{} pause their switch port most of the time: a PFC storm pauses the senders behind the same switch without CNPs, which looks like \"too high\"; deal with the storm first (RdmaPfcStormNic, RdmaPfcStormSource)",
            storm_sources.join(", ")
        ));
    }
    Ok(Evidence {
        nics,
        switch_ports,
        notes,
        fastest_nic_gbps,
        rule_series,
    })
}

/// The probes' mean network RTT per port, in the window and before it, and their clock;
/// keyed by [`PROBE_JOIN_LABELS`]. Empty where nothing probes.
#[derive(Default)]
struct ProbeRtts {
    window: BTreeMap<Vec<Option<String>>, f64>,
    baseline: BTreeMap<Vec<Option<String>>, f64>,
    clock: BTreeMap<Vec<Option<String>>, String>,
}

fn probe_key(labels: &Labels) -> Vec<Option<String>> {
    PROBE_JOIN_LABELS
        .iter()
        .map(|l| labels.get(*l).cloned())
        .collect()
}

impl ProbeRtts {
    fn fill(&self, nic: &Labels, mut e: NicEvidence) -> NicEvidence {
        let k = probe_key(nic);
        e.probe_network_rtt_seconds = self.window.get(&k).copied();
        e.probe_network_rtt_baseline_seconds = self.baseline.get(&k).copied();
        e.probe_clock = self.clock.get(&k).cloned();
        e
    }
}

/// The window's mean from the histogram itself (its sum and count over exactly the window: the
/// 5-minute rule averaged over the window would carry the minutes before the run into its
/// first five). The baseline is the lowest 5-minute mean of the hour before the run: queues
/// add to a path's RTT, so the RTT to compare with is the one with the queues emptiest; the
/// window just before a run is often the previous run of the tuning loop, and an hour's
/// average carries every other job's queues (`RdmaProbeNetworkRttHigh` averages the hour, for
/// a slower question: did the fabric change).
fn probe_rtts(q: &Queries) -> Result<ProbeRtts, QueryError> {
    let keyed = |samples: Vec<Sample>| -> BTreeMap<Vec<Option<String>>, f64> {
        let mut map = BTreeMap::new();
        for s in samples {
            if let Some(v) = s.value.filter(|v| *v >= 0.0) {
                map.entry(probe_key(&s.labels)).or_insert(v);
            }
        }
        map
    };
    let window = keyed(q.run(
        "rate(rdma_probe_network_rtt_seconds_sum%S[%W]) / (rate(rdma_probe_network_rtt_seconds_count%S[%W]) > 0)",
    )?);
    if window.is_empty() {
        return Ok(ProbeRtts::default());
    }
    let baseline =
        keyed(q.run("min_over_time(rdma:probe_network_rtt_seconds:mean_rate5m%S[1h] offset %W)")?);
    let mut clock = BTreeMap::new();
    for s in q.run("max_over_time(rdma_probe_port_info%S[%W])")? {
        if let Some(c) = s.labels.get("clock").filter(|c| !c.is_empty()) {
            clock
                .entry(probe_key(&s.labels))
                .or_insert_with(|| c.clone());
        }
    }
    Ok(ProbeRtts {
        window,
        baseline,
        clock,
    })
}

/// `12.3 µs`, `4.56 ms`.
pub(crate) fn rtt_text(seconds: f64) -> String {
    if seconds >= 1e-3 {
        format!("{:.2} ms", seconds * 1e3)
    } else {
        format!("{:.1} µs", seconds * 1e6)
    }
}

/// What a rise of the probes' RTT in the window means, given the port's PFC and ECN: queues
/// (congestion) or something else (a failing component, a reroute). Nothing when the port does
/// not probe, has no baseline, or its RTT did not rise.
fn probe_note(e: &NicEvidence) -> Option<String> {
    let (Some(now), Some(before)) = (
        e.probe_network_rtt_seconds,
        e.probe_network_rtt_baseline_seconds,
    ) else {
        return None;
    };
    if !probe_rtt_rose(now, before, e.probe_clock.as_deref()) {
        return None;
    }
    let rose = format!(
        "probe RTT rose from {} to {}",
        rtt_text(before),
        rtt_text(now)
    );
    let paused = [e.pfc_rx_paused_ratio.avg, e.pfc_tx_paused_ratio.avg]
        .into_iter()
        .flatten()
        .max_by(f64::total_cmp);
    let feedback: Vec<f64> = [
        e.ecn_marked_per_packet,
        e.cnp_sent_per_packet,
        e.cnp_handled_per_packet,
    ]
    .into_iter()
    .flatten()
    .collect();
    let ecn_moving = feedback.iter().any(|f| *f > ECN_FEEDBACK_LOW);
    let software = if e.probe_clock.as_deref() == Some("software") {
        "; this port stamps its probes with the host's clock, so a busy host adds to it too"
    } else {
        ""
    };
    let storming = e
        .pfc_tx_paused_ratio
        .avg
        .is_some_and(|p| p > PAUSING_ITS_SWITCH);
    Some(match paused {
        _ if storming => format!(
            "{rose} while this NIC pauses its switch most of the time: queues behind its own PFC storm (RdmaPfcStormNic), a fault of this host, not congestion"
        ),
        Some(p) if p >= PFC_NEAR_ZERO => format!(
            "{rose} with PFC pauses (paused {:.2} % of the time): congestion (queues), not a fault",
            p * 100.0
        ),
        None => format!(
            "{rose}; no PFC pause series to tell congestion (queues) from a fault (RdmaProbeSuspect, a reroute)"
        ),
        Some(_) if ecn_moving => format!(
            "{rose} with ECN marking and no PFC: congestion (queues) that ECN keeps below the PFC threshold, not a fault"
        ),
        Some(_) if feedback.is_empty() => format!(
            "{rose} without PFC pauses, and no ECN counters to show queues below the PFC threshold: if the switch marked nothing either, not congestion: look for lost probes (RdmaProbeSuspect) or a reroute onto a longer path{software}"
        ),
        Some(_) => format!(
            "{rose} while neither PFC nor ECN moved: not congestion; look for lost probes (RdmaProbeSuspect) or a reroute onto a longer path{software}"
        ),
    })
}

fn nic_notes(e: &NicEvidence) -> Vec<String> {
    // A point the NIC reports off explains the counters below it: first.
    let mut notes = super::nic_settings::notes(&e.nic_settings);
    if e.cnp_ignored_per_second.is_some_and(|v| v > 0.0) {
        notes.push(format!(
            "ignores {:.1} CNPs/s (rp_cnp_ignored): DCQCN is off on this NIC (RdmaEcnNotEnabled); enable it before moving any threshold",
            e.cnp_ignored_per_second.unwrap_or_default()
        ));
    }
    if e.ecn_marked_per_second.is_some_and(|v| v > 0.0) && e.cnp_sent_per_second == Some(0.0) {
        notes.push("receives ECN-marked packets but sends no CNP: its notification point is off (RdmaEcnMarkedNoCnp); enable it before moving any threshold".into());
    }
    if let Some(tx) = e
        .pfc_tx_paused_ratio
        .avg
        .filter(|p| *p > PAUSING_ITS_SWITCH)
    {
        notes.push(format!(
            "pauses its switch port {:.1} % of the time (tx): a stuck or slow receiver, not an ECN threshold (RdmaPfcStormNic)",
            tx * 100.0
        ));
    }
    if e.tx_utilization.avg.is_some()
        && e.ecn_marked_per_second.is_none()
        && e.cnp_sent_per_packet.is_none()
    {
        notes.push("no ECN or CNP counters for this NIC (rdma_hw_np_* / rp_*): its driver may not expose them".into());
    }
    notes.extend(probe_note(e));
    notes
}

fn switch_rows(
    q: &Queries,
    nics: &[NicRow],
    fastest_nic_gbps: Option<f64>,
) -> Result<(Vec<SwitchRow>, usize), QueryError> {
    let sw = |template: &str| -> Result<ByKey, QueryError> {
        Ok(by_key(q.run(template)?, &SWITCH_DETAIL_LABELS))
    };
    let pfc_avg = sw("avg_over_time(rdma:switch_port_pfc_frames_per_second:rate1m%S[%W])")?;
    let pfc_max = sw("max_over_time(rdma:switch_port_pfc_frames_per_second:rate1m%S[%W])")?;
    let marks = sw("rate(rdma_switch_queue_ecn_marked_packets_total%S[%W])")?;
    let transmitted = sw("rate(rdma_switch_queue_transmitted_packets_total%S[%W])")?;
    let rx_bytes = sw("rate(rdma_switch_port_received_bytes_total%S[%W])")?;
    let tx_bytes = sw("rate(rdma_switch_port_transmitted_bytes_total%S[%W])")?;
    let tx_unicast = sw("rate(rdma_switch_port_transmitted_unicast_packets_total%S[%W])")?;
    let neighbors = q.run("max_over_time(rdma_switch_port_neighbor_info%S[%W])")?;

    let mut neighbor_of: BTreeMap<Labels, (String, String)> = BTreeMap::new();
    for s in &neighbors {
        if let (Some(host), Some(port)) =
            (s.labels.get("neighbor_host"), s.labels.get("neighbor_port"))
        {
            if !host.is_empty() {
                neighbor_of
                    .entry(key(&s.labels, &SWITCH_DETAIL_LABELS))
                    .or_insert_with(|| (host.clone(), port.clone()));
            }
        }
    }
    let keys: std::collections::BTreeSet<Labels> =
        pfc_avg.keys().chain(marks.keys()).cloned().collect();
    let mut rows = Vec::new();
    for k in keys {
        let (sent, priority) = most_paused(&pfc_avg, &pfc_max, &k, "tx");
        let (received, _) = most_paused(&pfc_avg, &pfc_max, &k, "rx");
        let neighbor = neighbor_of.get(&k);
        let neighbor_nic = neighbor.and_then(|(host, netdev)| {
            nics.iter().find(|n| {
                n.labels.get("instance") == Some(host)
                    && n.netdev.as_ref() == Some(netdev)
                    && n.labels.get("cluster") == k.get("cluster")
            })
        });
        let (line_rate_gbps, line_rate_source) =
            match neighbor_nic.and_then(|n| n.evidence.line_rate_gbps) {
                Some(rate) => (Some(rate), Some("neighbour")),
                None => match (q.ask.line_rate_gbps, fastest_nic_gbps) {
                    (Some(rate), _) => (Some(rate), Some("--line-rate")),
                    (None, Some(rate)) => (Some(rate), Some("fastest NIC")),
                    (None, None) => (None, None),
                },
            };
        let marked = sum(&marks, &k);
        // The queues' own count where the profile reads one, else the port's (ifHCOutUcastPkts):
        // the marks are summed over the port's queues either way.
        let sent_packets = sum(&transmitted, &k).or_else(|| single(&tx_unicast, &k));
        let marked_per_packet = match (marked, sent_packets) {
            (Some(m), Some(t)) if t > 0.0 => Some(m / t),
            _ => None,
        };
        let rx = single(&rx_bytes, &k);
        let tx = single(&tx_bytes, &k);
        let rate_bytes = line_rate_gbps.map(|g| g * 1e9 / 8.0);
        let utilization = match (rx, tx, rate_bytes) {
            (Some(rx), Some(tx), Some(rate)) if rate > 0.0 => Some(rx.max(tx) / rate),
            (Some(v), None, Some(rate)) | (None, Some(v), Some(rate)) if rate > 0.0 => {
                Some(v / rate)
            }
            _ => None,
        };
        let paused_ratio_estimate = match (sent.avg, line_rate_gbps) {
            (Some(frames), Some(gbps)) if gbps > 0.0 => {
                Some((frames / (2.0 * gbps * 1e9 / QUANTA_BITS)).min(1.0))
            }
            _ => None,
        };
        let evidence = SwitchEvidence {
            pfc_frames_sent_per_second: sent,
            pfc_priority: priority,
            pfc_frames_received_per_second: received,
            ecn_marked_per_second: marked,
            transmitted_packets_per_second: sent_packets,
            ecn_marked_per_packet: marked_per_packet,
            received_bytes_per_second: rx,
            transmitted_bytes_per_second: tx,
            line_rate_gbps,
            line_rate_source,
            paused_ratio_estimate,
            utilization,
        };
        let signals = Signals {
            paused: paused_ratio_estimate,
            feedback_on_sent: marked_per_packet,
            feedback_on_received: marked_per_packet,
            utilization,
        };
        let verdict = classify(&signals);
        let mut notes = Vec::new();
        if received.avg.is_some_and(|f| f > SWITCH_RX_PFC_SUSTAINED) {
            notes.push(format!(
                "receives {:.0} PFC frames/s from its neighbour: the device behind it pauses the fabric (RdmaSwitchPfcPauseSustained), not an ECN threshold",
                received.avg.unwrap_or_default()
            ));
        }
        if line_rate_source == Some("fastest NIC") {
            notes.push("line rate assumed to be the fastest NIC's (no LLDP neighbour with a known rate): give --line-rate if this port is faster or slower".into());
        }
        if marked.is_some() && sent_packets.is_none() {
            notes.push("no transmitted-packet counter for the port or its queues: ECN marks cannot be put per packet, so the verdict lacks its ECN half".into());
        }
        rows.push(SwitchRow {
            labels: k,
            neighbor: neighbor.map(|(host, port)| format!("{host} {port}")),
            evidence,
            signals,
            verdict,
            notes,
        });
    }
    let rule_series = pfc_avg.values().map(Vec::len).sum();
    Ok((rows, rule_series))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::ecn_tune::classify::Class;

    /// Answers from a table of (metric in the expression, samples).
    struct Table(
        Vec<(&'static str, Vec<Sample>)>,
        std::cell::RefCell<Vec<String>>,
    );

    impl Source for Table {
        fn query(&self, expr: &str, _time: f64) -> Result<Vec<Sample>, QueryError> {
            self.1.borrow_mut().push(expr.to_string());
            Ok(self
                .0
                .iter()
                .filter(|(m, _)| {
                    expr.contains(&format!("({m}{{")) || expr.contains(&format!("({m}["))
                })
                .flat_map(|(_, s)| s.clone())
                .collect())
        }
    }

    fn s(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: Some(value),
        }
    }

    const NIC: [(&str, &str); 4] = [
        ("cluster", "a"),
        ("instance", "gpu-node-01"),
        ("device", "mlx5_0"),
        ("port", "1"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = NIC.to_vec();
        v.extend_from_slice(extra);
        v
    }

    fn window() -> Window {
        Window {
            start: 1000.0,
            end: 1600.0,
            source: "test".into(),
        }
    }

    /// A NIC paused by its switch with no CNPs, and the leaf port facing it, joined by LLDP.
    fn too_high_fabric() -> Table {
        let pfc = vec![
            s(
                &with(&[("priority", "3"), ("direction", "rx"), ("netdev", "eth2")]),
                0.15,
            ),
            s(
                &with(&[("priority", "0"), ("direction", "rx"), ("netdev", "eth2")]),
                0.0,
            ),
            s(
                &with(&[("priority", "3"), ("direction", "tx"), ("netdev", "eth2")]),
                0.0,
            ),
        ];
        let leaf = [
            ("cluster", "a"),
            ("switch", "leaf1"),
            ("port", "Ethernet1/1"),
        ];
        let leaf_with = |extra: &[(&'static str, &'static str)]| {
            let mut v = leaf.to_vec();
            v.extend_from_slice(extra);
            v
        };
        Table(
            vec![
                ("rdma:nic_pfc_paused_ratio:rate1m", pfc),
                ("rdma:nic_tx_utilization:ratio_rate1m", vec![s(&NIC, 0.7)]),
                (
                    "rdma:nic_cnp_handled_per_packet:ratio_rate5m",
                    vec![s(&NIC, 5e-8)],
                ),
                (
                    "rdma:nic_cnp_sent_per_packet:ratio_rate5m",
                    vec![s(&NIC, 5e-8)],
                ),
                ("rdma:nic_ecn_marked_per_second:rate5m", vec![s(&NIC, 1.0)]),
                ("rdma:nic_cnp_sent_per_second:rate5m", vec![s(&NIC, 0.5)]),
                ("rdma:nic_cnp_ignored_per_second:rate5m", vec![s(&NIC, 0.0)]),
                ("rdma_port_rate_bytes_per_second", vec![s(&NIC, 5e10)]),
                (
                    "rdma_port_info",
                    vec![s(&with(&[("netdev", "eth2"), ("fw_ver", "28.1")]), 1.0)],
                ),
                (
                    "rdma:switch_port_pfc_frames_per_second:rate1m",
                    vec![
                        s(
                            &leaf_with(&[("priority", "3"), ("direction", "tx")]),
                            3571.0,
                        ),
                        s(&leaf_with(&[("priority", "3"), ("direction", "rx")]), 0.0),
                    ],
                ),
                (
                    "rdma_switch_queue_ecn_marked_packets_total",
                    vec![s(&leaf_with(&[("queue", "3")]), 1.0)],
                ),
                (
                    "rdma_switch_queue_transmitted_packets_total",
                    vec![s(&leaf_with(&[("queue", "3")]), 8.4e6)],
                ),
                (
                    "rdma_switch_port_received_bytes_total",
                    vec![s(&leaf, 3.5e10)],
                ),
                (
                    "rdma_switch_port_transmitted_bytes_total",
                    vec![s(&leaf, 3.5e10)],
                ),
                (
                    "rdma_switch_port_neighbor_info",
                    vec![s(
                        &leaf_with(&[("neighbor_host", "gpu-node-01"), ("neighbor_port", "eth2")]),
                        1.0,
                    )],
                ),
            ],
            Default::default(),
        )
    }

    #[test]
    fn rows_are_keyed_by_port_and_joined_through_lldp() {
        let table = too_high_fabric();
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "cluster=\"a\"",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        assert_eq!(e.nics.len(), 1, "{:#?}", e.nics);
        let nic = &e.nics[0];
        assert_eq!(nic.name(), "a/gpu-node-01 mlx5_0 port 1");
        assert_eq!(nic.netdev.as_deref(), Some("eth2"));
        assert_eq!(nic.evidence.pfc_rx_priority.as_deref(), Some("3"));
        assert_eq!(nic.evidence.pfc_rx_paused_ratio.avg, Some(0.15));
        assert_eq!(nic.evidence.line_rate_gbps, Some(400.0));
        assert_eq!(nic.verdict.class, Class::TooHigh, "{}", nic.verdict.reason);

        assert_eq!(e.switch_ports.len(), 1);
        let port = &e.switch_ports[0];
        assert_eq!(port.name(), "a/leaf1 Ethernet1/1 priority 3");
        assert_eq!(port.neighbor.as_deref(), Some("gpu-node-01 eth2"));
        assert_eq!(port.evidence.line_rate_source, Some("neighbour"));
        let paused = port.evidence.paused_ratio_estimate.unwrap();
        assert!((paused - 0.15).abs() < 0.01, "{paused}");
        assert_eq!(
            port.verdict.class,
            Class::TooHigh,
            "{}",
            port.verdict.reason
        );

        // Every query carries the selector and the window, evaluated at its end.
        let asked = table.1.borrow();
        assert!(
            asked
                .iter()
                .all(|q| q.contains("cluster=\"a\"") && q.contains("[600s]")),
            "{asked:#?}"
        );
        assert!(asked.contains(
            &"avg_over_time(rdma:nic_pfc_paused_ratio:rate1m{cluster=\"a\"}[600s])".to_string()
        ));
    }

    #[test]
    fn a_broken_chain_and_a_storm_are_noted() {
        let mut table = too_high_fabric();
        for (metric, samples) in table.0.iter_mut() {
            if *metric == "rdma:nic_cnp_ignored_per_second:rate5m" {
                *samples = vec![s(&NIC, 120.0)];
            }
            if *metric == "rdma:nic_pfc_paused_ratio:rate1m" {
                samples.push(s(
                    &with(&[("priority", "3"), ("direction", "tx"), ("netdev", "eth2")]),
                    0.97,
                ));
                samples.retain(|x| !(x.labels["direction"] == "tx" && x.value == Some(0.0)));
            }
        }
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        let notes = e.nics[0].notes.join("\n");
        assert!(notes.contains("RdmaEcnNotEnabled"), "{notes}");
        assert!(notes.contains("RdmaPfcStormNic"), "{notes}");
        assert!(e.notes[0].contains("PFC storm"), "{:?}", e.notes);
    }

    #[test]
    fn what_the_nic_is_set_to_is_evidence_where_it_reports_it() {
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        // Not reported: no settings, no note about them.
        let e = gather(&too_high_fabric(), &ask).unwrap();
        assert_eq!(e.nics[0].evidence.nic_settings, NicSettings::default());
        assert!(
            !e.nics[0]
                .notes
                .iter()
                .any(|n| n.contains("ECN reaction point")),
            "{:?}",
            e.nics[0].notes
        );
        // Reported on: the settings, still no note; reported off: the note, on the same row.
        for (value, noted) in [(1.0, false), (0.0, true)] {
            let mut table = too_high_fabric();
            table.0.push((
                "rdma_ecn_enabled",
                vec![
                    s(
                        &with(&[("priority", "3"), ("point", "reaction"), ("netdev", "eth2")]),
                        value,
                    ),
                    s(
                        &with(&[
                            ("priority", "3"),
                            ("point", "notification"),
                            ("netdev", "eth2"),
                        ]),
                        1.0,
                    ),
                ],
            ));
            let e = gather(&table, &ask).unwrap();
            assert_eq!(e.nics.len(), 1, "the settings join the NIC's row");
            let nic = &e.nics[0];
            assert_eq!(nic.evidence.nic_settings.ecn.len(), 1);
            assert_eq!(
                nic.evidence.nic_settings.ecn[0].reaction,
                Some(value == 1.0)
            );
            let note = "ECN reaction point off on priority 3: DCQCN cannot slow this sender";
            assert_eq!(
                nic.notes.iter().any(|n| n.starts_with(note)),
                noted,
                "{:?}",
                nic.notes
            );
        }
    }

    #[test]
    fn a_switch_port_without_a_known_neighbour_falls_back_on_the_line_rate_given() {
        let mut table = too_high_fabric();
        table
            .0
            .retain(|(m, _)| *m != "rdma_switch_port_neighbor_info");
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: Some(100.0),
        };
        let e = gather(&table, &ask).unwrap();
        let port = &e.switch_ports[0];
        assert_eq!(port.evidence.line_rate_source, Some("--line-rate"));
        assert_eq!(port.neighbor, None);
        // 3571 frames/s at 100G is most of the time paused.
        assert!(port.evidence.paused_ratio_estimate.unwrap() > 0.5);
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        assert_eq!(
            e.switch_ports[0].evidence.line_rate_source,
            Some("fastest NIC")
        );
    }

    #[test]
    fn marks_per_packet_fall_back_on_the_ports_unicast_count() {
        let mut table = too_high_fabric();
        table
            .0
            .retain(|(m, _)| *m != "rdma_switch_queue_transmitted_packets_total");
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        assert_eq!(e.switch_ports[0].evidence.ecn_marked_per_packet, None);
        assert_ne!(e.switch_ports[0].verdict.class, Class::TooHigh);
        let leaf = [
            ("cluster", "a"),
            ("switch", "leaf1"),
            ("port", "Ethernet1/1"),
        ];
        table.0.push((
            "rdma_switch_port_transmitted_unicast_packets_total",
            vec![s(&leaf, 8.4e6)],
        ));
        let e = gather(&table, &ask).unwrap();
        let per_packet = e.switch_ports[0].evidence.ecn_marked_per_packet.unwrap();
        assert!((per_packet - 1.0 / 8.4e6).abs() < 1e-12, "{per_packet}");
        assert_eq!(e.switch_ports[0].verdict.class, Class::TooHigh);
    }

    #[test]
    fn no_priority_is_named_where_none_was_paused() {
        let mut table = too_high_fabric();
        for (metric, samples) in table.0.iter_mut() {
            if metric.contains("pfc") {
                for sample in samples.iter_mut() {
                    sample.value = Some(0.0);
                }
            }
        }
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        assert_eq!(e.nics[0].evidence.pfc_rx_priority, None);
        assert_eq!(e.nics[0].evidence.pfc_rx_paused_ratio.avg, Some(0.0));
        assert_eq!(e.switch_ports[0].evidence.pfc_priority, None);
        assert_eq!(e.switch_ports[0].name(), "a/leaf1 Ethernet1/1");
    }

    #[test]
    fn raw_counters_without_the_rules_are_counted_apart() {
        let mut table = too_high_fabric();
        table.0.retain(|(m, _)| !m.contains(':'));
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        // The switch's raw ECN counter still makes a row, but no rule answered.
        assert_eq!(e.switch_ports.len(), 1);
        assert_eq!(e.rule_series, 0);
        assert!(gather(&too_high_fabric(), &ask).unwrap().rule_series > 0);
    }

    #[test]
    fn nothing_in_prometheus_is_no_rows() {
        let table = Table(vec![], Default::default());
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "",
            line_rate_gbps: None,
        };
        let e = gather(&table, &ask).unwrap();
        assert!(e.nics.is_empty() && e.switch_ports.is_empty());
    }

    /// [`too_high_fabric`] with the NIC's probes: `rtt` in the window, `baseline` before it.
    fn probing(mut table: Table, rtt: f64, baseline: f64, clock: &'static str) -> Table {
        // The probe series carry their own job: the join is on cluster, instance, device, port.
        let probe = |extra: &[(&'static str, &'static str)]| {
            let mut v = with(&[("job", "rdma-probe")]);
            v.extend_from_slice(extra);
            v
        };
        table.0.push((
            "rdma_probe_network_rtt_seconds_sum",
            vec![s(&probe(&[]), rtt)],
        ));
        table.0.push((
            "rdma:probe_network_rtt_seconds:mean_rate5m",
            vec![s(&probe(&[]), baseline)],
        ));
        table.0.push((
            "rdma_probe_port_info",
            vec![s(&probe(&[("clock", clock), ("rail", "0")]), 1.0)],
        ));
        table
    }

    fn gathered(table: &Table) -> Evidence {
        let w = window();
        let ask = Ask {
            window: &w,
            matchers: "cluster=\"a\"",
            line_rate_gbps: None,
        };
        gather(table, &ask).unwrap()
    }

    fn probe_notes(e: &Evidence) -> Vec<&String> {
        e.nics[0]
            .notes
            .iter()
            .filter(|n| n.contains("probe RTT"))
            .collect()
    }

    /// Sets every NIC PFC series to `paused` and the ECN feedback per packet to `feedback`.
    fn with_pfc_and_ecn(mut table: Table, paused: f64, feedback: f64) -> Table {
        for (metric, samples) in table.0.iter_mut() {
            if *metric == "rdma:nic_pfc_paused_ratio:rate1m" {
                for sample in samples.iter_mut() {
                    sample.value = Some(paused);
                }
            }
            if metric.ends_with("_per_packet:ratio_rate5m") {
                *samples = vec![s(&NIC, feedback)];
            }
        }
        table
    }

    #[test]
    fn a_probe_rtt_that_rose_with_pfc_pauses_is_congestion() {
        // too_high_fabric: paused 15 % of the time by its switch.
        let table = probing(too_high_fabric(), 48e-6, 9e-6, "hardware");
        let e = gathered(&table);
        let nic = &e.nics[0].evidence;
        assert_eq!(nic.probe_network_rtt_seconds, Some(48e-6));
        assert_eq!(nic.probe_network_rtt_baseline_seconds, Some(9e-6));
        assert_eq!(nic.probe_clock.as_deref(), Some("hardware"));
        assert_eq!(
            probe_notes(&e),
            ["probe RTT rose from 9.0 µs to 48.0 µs with PFC pauses (paused 15.00 % of the time): congestion (queues), not a fault"]
        );
        // The verdict is the same as without probes: the note adds, it does not decide.
        let without = gathered(&too_high_fabric());
        assert_eq!(e.nics[0].verdict, without.nics[0].verdict);
        let asked = table.1.borrow();
        assert!(
            asked.contains(&"rate(rdma_probe_network_rtt_seconds_sum{cluster=\"a\"}[600s]) / (rate(rdma_probe_network_rtt_seconds_count{cluster=\"a\"}[600s]) > 0)".to_string()),
            "{asked:#?}"
        );
        assert!(
            asked.contains(&"min_over_time(rdma:probe_network_rtt_seconds:mean_rate5m{cluster=\"a\"}[1h] offset 600s)".to_string()),
            "{asked:#?}"
        );
        // A PFC pause the NIC sends (tx) counts as much as one it receives.
        let mut table = with_pfc_and_ecn(
            probing(too_high_fabric(), 48e-6, 9e-6, "hardware"),
            0.0,
            0.0,
        );
        for (metric, samples) in table.0.iter_mut() {
            if *metric == "rdma:nic_pfc_paused_ratio:rate1m" {
                for sample in samples.iter_mut() {
                    if sample.labels["direction"] == "tx" {
                        sample.value = Some(0.02);
                    }
                }
            }
        }
        let notes = probe_notes(&gathered(&table))
            .into_iter()
            .cloned()
            .collect::<Vec<_>>();
        assert!(
            notes[0].contains("with PFC pauses (paused 2.00 %"),
            "{notes:?}"
        );
        // Unless the NIC storms: then its pauses are the fault, not the network's queues.
        for (metric, samples) in table.0.iter_mut() {
            if *metric == "rdma:nic_pfc_paused_ratio:rate1m" {
                for sample in samples.iter_mut() {
                    if sample.labels["direction"] == "tx" {
                        sample.value = Some(0.9);
                    }
                }
            }
        }
        let notes = probe_notes(&gathered(&table))
            .into_iter()
            .cloned()
            .collect::<Vec<_>>();
        assert!(
            notes[0].contains("queues behind its own PFC storm (RdmaPfcStormNic)"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_probe_rtt_that_rose_without_pfc_or_ecn_is_not_congestion() {
        let table = with_pfc_and_ecn(
            probing(too_high_fabric(), 48e-6, 9e-6, "hardware"),
            0.0,
            1e-7,
        );
        let e = gathered(&table);
        assert_eq!(
            probe_notes(&e),
            ["probe RTT rose from 9.0 µs to 48.0 µs while neither PFC nor ECN moved: not congestion; look for lost probes (RdmaProbeSuspect) or a reroute onto a longer path"]
        );
        // On a software clock only a rise of 100 µs counts, and the busy host is named too.
        let e = gathered(&with_pfc_and_ecn(
            probing(too_high_fabric(), 48e-6, 9e-6, "software"),
            0.0,
            1e-7,
        ));
        assert!(probe_notes(&e).is_empty(), "{:?}", e.nics[0].notes);
        let e = gathered(&with_pfc_and_ecn(
            probing(too_high_fabric(), 480e-6, 90e-6, "software"),
            0.0,
            1e-7,
        ));
        assert_eq!(
            probe_notes(&e),
            ["probe RTT rose from 90.0 µs to 480.0 µs while neither PFC nor ECN moved: not congestion; look for lost probes (RdmaProbeSuspect) or a reroute onto a longer path; this port stamps its probes with the host's clock, so a busy host adds to it too"]
        );
        // ECN marking without PFC is congestion that ECN handles.
        let e = gathered(&with_pfc_and_ecn(
            probing(too_high_fabric(), 48e-6, 9e-6, "hardware"),
            0.0,
            5e-4,
        ));
        let notes = probe_notes(&e);
        assert!(
            notes[0].contains("with ECN marking and no PFC: congestion (queues)"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_probe_rtt_that_did_not_rise_enough_says_nothing() {
        // 1.5 times and 10 µs, both: 6 -> 12 µs is the path mix, 100 -> 140 µs is noise.
        for (rtt, baseline) in [(12e-6, 6e-6), (140e-6, 100e-6), (9e-6, 9e-6), (5e-6, 9e-6)] {
            let e = gathered(&probing(too_high_fabric(), rtt, baseline, "hardware"));
            assert!(
                probe_notes(&e).is_empty(),
                "{rtt} {baseline}: {:?}",
                e.nics[0].notes
            );
            assert_eq!(e.nics[0].evidence.probe_network_rtt_seconds, Some(rtt));
        }
        // No baseline (nothing probed in the hour before, or the rules not loaded): nothing.
        let mut table = probing(too_high_fabric(), 48e-6, 9e-6, "hardware");
        table
            .0
            .retain(|(m, _)| *m != "rdma:probe_network_rtt_seconds:mean_rate5m");
        let e = gathered(&table);
        assert!(probe_notes(&e).is_empty(), "{:?}", e.nics[0].notes);
        assert_eq!(e.nics[0].evidence.probe_network_rtt_baseline_seconds, None);
    }

    #[test]
    fn without_probe_series_nothing_changes() {
        let table = too_high_fabric();
        let e = gathered(&table);
        let nic = &e.nics[0];
        assert_eq!(nic.evidence.probe_network_rtt_seconds, None);
        assert_eq!(nic.evidence.probe_network_rtt_baseline_seconds, None);
        assert_eq!(nic.evidence.probe_clock, None);
        assert!(probe_notes(&e).is_empty(), "{:?}", nic.notes);
        // The JSON is what it was before probes existed.
        let json = serde_json::to_value(&nic.evidence).unwrap();
        assert!(json.get("probe_network_rtt_seconds").is_none(), "{json}");
        assert!(json.get("probe_clock").is_none(), "{json}");
        // Only the one probe query is asked when it finds nothing.
        let asked = table.1.borrow();
        assert_eq!(
            asked.iter().filter(|q| q.contains("probe")).count(),
            1,
            "{asked:#?}"
        );
        // Probes of another NIC (another instance) do not land on this one.
        let mut other = too_high_fabric();
        other.0.push((
            "rdma_probe_network_rtt_seconds_sum",
            vec![s(
                &[
                    ("cluster", "a"),
                    ("instance", "gpu-node-02"),
                    ("device", "mlx5_0"),
                    ("port", "1"),
                ],
                48e-6,
            )],
        ));
        let e = gathered(&other);
        assert_eq!(e.nics[0].evidence.probe_network_rtt_seconds, None);
        assert_eq!(e.nics.len(), 1, "probe series alone make no NIC row");
    }

    #[test]
    fn selectors() {
        assert_eq!(user_matchers("{cluster=\"a\"}").unwrap(), "cluster=\"a\"");
        assert_eq!(user_matchers(" cluster=\"a\", ").unwrap(), "cluster=\"a\"");
        assert_eq!(user_matchers("").unwrap(), "");
        assert!(user_matchers("{a=\"b\"}{c=\"d\"}").is_err());
        assert!(user_matchers("cluster").is_err());
        assert_eq!(
            selector("direction=\"rx\"", "cluster=\"a\""),
            "{direction=\"rx\",cluster=\"a\"}"
        );
        assert_eq!(selector("", ""), "");
    }
}
