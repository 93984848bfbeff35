//! A scan's switch-port families (`rdma_ib_switch_port_*_total`, `rdma_ib_link_*`), encoded once
//! when the scan ends and served by every scrape until the next one as they are
//! ([`crate::exposition::body`]). A 2 000-switch subnet has 128 000 switch ports and millions of
//! series: encoding them per scrape took seconds, a copy takes a fraction of that.
//!
//! The sample lines are written here, once per scan: they are the same in both formats, so they
//! are kept once and each format adds its own HELP and TYPE lines (`exposition::header`). The
//! layout is the exposition writer's, byte for byte (a test compares the two): families sorted by
//! name, samples in scan order, label values escaped as it escapes them.
//!
//! Each family remembers where each switch's lines start, so that one switch's families
//! (`/ib/switch?target=`) are a copy of its lines ([`PortFamilies::switch`]).

use std::fmt::Write as _;

use axum::body::Bytes;
use rustc_hash::FxHashMap;

use super::counters::CounterName;
use super::model::{counter_metric_stem, FabricScan, Guid, IbNode, IbPort, LinkSpeed, LinkWidth};
use super::selection::Selection;
use crate::exposition::body::{GzipOnce, PreEncoded};
use crate::exposition::{escape_label_value, Format, Kind};

const COUNTER_HELP: &str = "Switch port counter from PortCounters/PortCountersExtended, as the subnet scan last read it (data counters in bytes; the narrow IBTA counters stop at their maximum).";

/// The gauges of a port's link: name, help, and the value from the port.
type LinkGauge = (
    &'static str,
    &'static str,
    fn(&IbPort) -> Option<GaugeValue>,
);

#[derive(Debug, Clone, Copy)]
enum GaugeValue {
    Lanes(u64),
    Gbps(f64),
}

const LINK_GAUGES: [LinkGauge; 4] = [
    (
        "rdma_ib_link_width_active_lanes",
        "Lanes the switch port's link trained at (1X = 1, 4X = 4).",
        |p| lanes(p.active_width),
    ),
    (
        "rdma_ib_link_width_enabled_lanes",
        "The widest width enabled on the switch port, in lanes: what the link should train at.",
        |p| lanes(p.enabled_width),
    ),
    (
        "rdma_ib_link_speed_active_gbps",
        "Data rate of one lane of the switch port's link at its active speed, in Gb/s (NDR = 100, HDR = 50).",
        |p| gbps(p.active_speed),
    ),
    (
        "rdma_ib_link_speed_enabled_gbps",
        "Data rate of one lane at the fastest speed enabled on the switch port, in Gb/s.",
        |p| gbps(p.enabled_speed),
    ),
];

const LINK_INFO: &str = "rdma_ib_link_info";
const LINK_INFO_HELP: &str =
    "A switch port's link: the node and port at the far end, and the active width and speed.";

fn lanes(width: Option<LinkWidth>) -> Option<GaugeValue> {
    width.map(|w| GaugeValue::Lanes(u64::from(w.0)))
}

fn gbps(speed: Option<LinkSpeed>) -> Option<GaugeValue> {
    speed.map(|s| GaugeValue::Gbps(s.lane_bits_per_second() / 1e9))
}

/// Data and packet counters: left out in errors-only mode, which keeps the error and congestion
/// counters (symbol errors, discards, PortXmitWait...) at a fraction of the series.
pub(crate) fn is_traffic_counter(ibta_name: &str) -> bool {
    ibta_name.ends_with("Data") || ibta_name.ends_with("Pkts")
}

/// What errors-only mode writes of a port, sized for subnets of thousands of switches (series
/// per design in docs/infiniband.md, "Scale"): the error and congestion counters that are not
/// zero (a counter only grows, so a series, once there, stays until the counters are reset; a
/// zero counter says nothing a missing one does not), the link's `rdma_ib_link_info`, and the
/// width and speed gauges only of a link that trained below what is enabled (what
/// `RdmaIbLinkDegraded` compares). A healthy port is its link and its PortXmitWait.
fn errors_only_keeps(ibta_name: &str, value: u64) -> bool {
    value > 0 && !is_traffic_counter(ibta_name)
}

/// Whether the port's link trained narrower or slower than enabled.
fn is_degraded(port: &IbPort) -> bool {
    let below = |active: Option<GaugeValue>, enabled: Option<GaugeValue>| match (active, enabled) {
        (Some(GaugeValue::Lanes(a)), Some(GaugeValue::Lanes(e))) => a < e,
        (Some(GaugeValue::Gbps(a)), Some(GaugeValue::Gbps(e))) => a < e,
        _ => false,
    };
    below(lanes(port.active_width), lanes(port.enabled_width))
        || below(gbps(port.active_speed), gbps(port.enabled_speed))
}

#[derive(Debug)]
struct Family {
    /// The exposed name, `_total`/`_info` included.
    exposed: String,
    kind: Kind,
    help: &'static str,
    /// Every sample line, newline included.
    samples: String,
    /// `(switch, offset)`: where in `samples` the lines of each switch that has any start,
    /// switches numbered in the order they were written ([`PortFamilies::switches`]).
    switch_starts: Vec<(u32, usize)>,
}

impl Family {
    /// The lines of switch number `switch`, if it has any.
    fn lines_of(&self, switch: u32) -> Option<&str> {
        let i = self
            .switch_starts
            .binary_search_by_key(&switch, |&(s, _)| s)
            .ok()?;
        let start = self.switch_starts[i].1;
        let end = self
            .switch_starts
            .get(i + 1)
            .map_or(self.samples.len(), |&(_, offset)| offset);
        Some(&self.samples[start..end])
    }
}

impl Family {
    fn header(&self, format: Format, out: &mut Vec<u8>) {
        crate::exposition::header(out, format, &self.exposed, self.kind, self.help);
    }
}

/// A switch whose ports were written: its GUID and NodeDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchId {
    pub guid: Guid,
    pub description: String,
}

/// One scan's switch-port families, in both formats.
#[derive(Debug)]
pub struct PortFamilies {
    /// Sorted by exposed name, as prometheus-client writes families.
    families: Vec<Family>,
    /// The switches written, in scan order (by GUID).
    switches: Vec<SwitchId>,
    /// Whether the errors-only selection of series was applied.
    errors_only: bool,
    series: usize,
    gzip: GzipOnce,
}

impl PortFamilies {
    /// Encodes the ports of the switches `selection` keeps (so that instances that split a
    /// fabric export each port once); without the data and packet counters when `errors_only`.
    pub fn encode(scan: &FabricScan, errors_only: bool, selection: &Selection) -> PortFamilies {
        PortFamilies::encode_switches(
            scan.switches()
                .filter(|s| selection.keeps_switch(s.guid, &s.description)),
            errors_only,
        )
    }

    /// Encodes the ports of `switches`, in that order.
    pub(crate) fn encode_switches<'a>(
        switches: impl Iterator<Item = &'a IbNode>,
        errors_only: bool,
    ) -> PortFamilies {
        let mut writer = Writer::default();
        let mut written = Vec::new();
        for switch in switches {
            writer.switch = written.len() as u32;
            for port in &switch.ports {
                writer.port(switch, port, errors_only);
            }
            written.push(SwitchId {
                guid: switch.guid,
                description: switch.description.clone(),
            });
        }
        let mut families = writer.families;
        families.sort_by(|a, b| a.exposed.cmp(&b.exposed));
        // The text is kept until the next scan: not the room its strings grew into.
        for family in &mut families {
            family.samples.shrink_to_fit();
        }
        PortFamilies {
            families,
            switches: written,
            errors_only,
            series: writer.series,
            gzip: GzipOnce::default(),
        }
    }

    /// Sample lines written.
    pub fn series(&self) -> usize {
        self.series
    }

    /// The switches written, in the order of their lines.
    pub fn switches(&self) -> &[SwitchId] {
        &self.switches
    }

    pub fn errors_only(&self) -> bool {
        self.errors_only
    }

    /// The families of switch number `switch` ([`PortFamilies::switches`]) alone, copied from
    /// these: the same lines a scrape serves of it.
    pub fn switch(&self, switch: usize) -> Option<PortFamilies> {
        let id = self.switches.get(switch)?.clone();
        let mut series = 0;
        let families = self
            .families
            .iter()
            .filter_map(|family| {
                let lines = family.lines_of(switch as u32)?;
                series += lines.bytes().filter(|&b| b == b'\n').count();
                Some(Family {
                    exposed: family.exposed.clone(),
                    kind: family.kind,
                    help: family.help,
                    samples: lines.to_owned(),
                    switch_starts: vec![(0, 0)],
                })
            })
            .collect();
        Some(PortFamilies {
            families,
            switches: vec![id],
            errors_only: self.errors_only,
            series,
            gzip: GzipOnce::default(),
        })
    }

    fn text(&self, format: Format) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len_hint());
        self.write(format, &mut out);
        out
    }
}

impl PreEncoded for PortFamilies {
    fn write(&self, format: Format, out: &mut Vec<u8>) {
        for family in &self.families {
            family.header(format, out);
            out.extend_from_slice(family.samples.as_bytes());
        }
    }

    fn len_hint(&self) -> usize {
        self.families
            .iter()
            .map(|f| f.samples.len() + 2 * f.exposed.len() + f.help.len() + 32)
            .sum()
    }

    fn gzip(&self, format: Format) -> Bytes {
        self.gzip.get(format, || self.text(format))
    }
}

/// Appends the sample lines of each port to its families.
#[derive(Default)]
struct Writer {
    families: Vec<Family>,
    by_name: FxHashMap<String, usize>,
    /// By [`CounterName::index`]: (family index, factor to bytes).
    counters: Vec<Option<(usize, u64)>>,
    /// The number of the switch being written.
    switch: u32,
    /// `{switch="…",switch_guid="…",port="…"` without the closing brace: a port's labels.
    labels: String,
    series: usize,
}

impl Writer {
    fn family(&mut self, exposed: &str, kind: Kind, help: &'static str) -> usize {
        if let Some(&index) = self.by_name.get(exposed) {
            return index;
        }
        self.families.push(Family {
            exposed: exposed.to_owned(),
            kind,
            help,
            samples: String::new(),
            switch_starts: Vec::new(),
        });
        self.by_name
            .insert(exposed.to_owned(), self.families.len() - 1);
        self.families.len() - 1
    }

    fn counter_family(&mut self, name: CounterName) -> (usize, u64) {
        if let Some(Some(known)) = self.counters.get(name.index()) {
            return *known;
        }
        let (stem, factor) = counter_metric_stem(name.as_str());
        // The prefix as one literal: docs/metrics.md names this file as where it is built.
        let exposed = format!("{}{stem}_total", "rdma_ib_switch_port_");
        let index = self.family(&exposed, Kind::Counter, COUNTER_HELP);
        if self.counters.len() <= name.index() {
            self.counters.resize(name.index() + 1, None);
        }
        self.counters[name.index()] = Some((index, factor));
        (index, factor)
    }

    /// One sample: the family's name, the port's labels, `extra` labels, the value.
    fn sample(&mut self, family: usize, extra: &str, value: &dyn std::fmt::Display) {
        let family = &mut self.families[family];
        if family.switch_starts.last().map(|&(s, _)| s) != Some(self.switch) {
            family
                .switch_starts
                .push((self.switch, family.samples.len()));
        }
        let out = &mut family.samples;
        out.push_str(&family.exposed);
        out.push_str(&self.labels);
        out.push_str(extra);
        let _ = writeln!(out, "}} {value}");
        self.series += 1;
    }

    fn port(&mut self, switch: &IbNode, port: &IbPort, errors_only: bool) {
        self.labels.clear();
        self.labels.push_str("{switch=\"");
        self.labels
            .push_str(&escape_label_value(&switch.description));
        let _ = write!(
            self.labels,
            "\",switch_guid=\"{}\",port=\"{}\"",
            switch.guid, port.number
        );
        for (name, value) in port.counters.ids() {
            if errors_only && !errors_only_keeps(name.as_str(), value) {
                continue;
            }
            let (family, factor) = self.counter_family(name);
            self.sample(family, "", &value.saturating_mul(factor));
        }
        if let Some(remote) = &port.remote {
            let family = self.family(LINK_INFO, Kind::Info, LINK_INFO_HELP);
            let mut extra = String::from(",remote=\"");
            extra.push_str(&escape_label_value(&remote.description));
            let _ = write!(
                extra,
                "\",remote_guid=\"{}\",remote_port=\"{}\",width=\"{}\",speed=\"{}\"",
                remote.guid,
                remote.port,
                port.active_width.map(|w| w.to_string()).unwrap_or_default(),
                port.active_speed.map(|s| s.as_label()).unwrap_or_default()
            );
            self.sample(family, &extra, &1);
        }
        if errors_only && !is_degraded(port) {
            return;
        }
        for (name, help, value) in LINK_GAUGES {
            let Some(value) = value(port) else { continue };
            let family = self.family(name, Kind::Gauge, help);
            match value {
                GaugeValue::Lanes(v) => self.sample(family, "", &v),
                // `{:?}` keeps the `.0` of a whole number, as prometheus-client writes floats.
                GaugeValue::Gbps(v) => self.sample(family, "", &format_args!("{v:?}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{Families, Value};
    use crate::ib::model::{Guid, NodeKind, RemoteEnd};
    use crate::ib::selection::Shard;
    use std::borrow::Cow;

    /// The same families built sample by sample with [`Families`] and encoded by
    /// prometheus-client, as every scrape did before: the reference the cached text must equal.
    fn reference(scan: &FabricScan, errors_only: bool, selection: &Selection) -> Families<'static> {
        let mut families = Families::default();
        for switch in scan
            .switches()
            .filter(|s| selection.keeps_switch(s.guid, &s.description))
        {
            for port in &switch.ports {
                let labels = || {
                    vec![
                        ("switch", Cow::Owned(switch.description.clone())),
                        ("switch_guid", Cow::Owned(switch.guid.to_string())),
                        ("port", Cow::Owned(port.number.to_string())),
                    ]
                };
                for (name, value) in port.counters.iter() {
                    if errors_only && !errors_only_keeps(name, value) {
                        continue;
                    }
                    let (stem, factor) = counter_metric_stem(name);
                    let exposed = format!("rdma_ib_switch_port_{stem}_total");
                    let value = Value::U64(value.saturating_mul(factor));
                    families
                        .add(&exposed, Kind::Counter, COUNTER_HELP, labels(), value)
                        .unwrap();
                }
                if let Some(remote) = &port.remote {
                    let mut info = labels();
                    info.extend([
                        ("remote", Cow::Owned(remote.description.clone())),
                        ("remote_guid", Cow::Owned(remote.guid.to_string())),
                        ("remote_port", Cow::Owned(remote.port.to_string())),
                        (
                            "width",
                            Cow::Owned(
                                port.active_width.map(|w| w.to_string()).unwrap_or_default(),
                            ),
                        ),
                        (
                            "speed",
                            Cow::Borrowed(
                                port.active_speed.map(|s| s.as_label()).unwrap_or_default(),
                            ),
                        ),
                    ]);
                    families.info(LINK_INFO, LINK_INFO_HELP, info);
                }
                if errors_only && !is_degraded(port) {
                    continue;
                }
                for (name, help, value) in LINK_GAUGES {
                    let value = match value(port) {
                        Some(GaugeValue::Lanes(v)) => Value::U64(v),
                        Some(GaugeValue::Gbps(v)) => Value::F64(v),
                        None => continue,
                    };
                    families.gauge(name, help, labels(), value);
                }
            }
        }
        families
    }

    fn by_prometheus_client(families: Families<'static>, format: Format) -> String {
        crate::exposition::prometheus_client_text(families, format)
    }

    fn text(ports: &PortFamilies, format: Format) -> String {
        String::from_utf8(ports.text(format)).unwrap()
    }

    /// Six switches of eight ports: linked and unlinked ports, speeds and widths that differ,
    /// counters that differ from port to port.
    fn demo_scan() -> FabricScan {
        let speeds = [
            LinkSpeed::Ndr,
            LinkSpeed::Hdr,
            LinkSpeed::Edr,
            LinkSpeed::Fdr,
        ];
        let nodes = (0..6u64)
            .map(|s| IbNode {
                guid: Guid(0xb83f_d203_0010_0000 + s),
                kind: NodeKind::Switch,
                description: format!("MF0;ib-leaf-{s:02}:MQM9700/U1"),
                ports: (1..=8u8)
                    .map(|p| {
                        let linked = p % 4 != 0;
                        let mut counters: crate::ib::model::CounterValues = [
                            "SymbolErrorCounter",
                            "LinkDownedCounter",
                            "PortXmitWait",
                            "PortXmitData",
                            "PortRcvPkts",
                            "PortXmitDiscards",
                        ]
                        .iter()
                        .enumerate()
                        .map(|(i, n)| (n, s * 1000 + u64::from(p) * 10 + i as u64))
                        .collect();
                        if p == 5 {
                            counters.insert("ExcessiveBufferOverrunErrors", 3);
                        }
                        IbPort {
                            number: p,
                            active_width: linked.then_some(LinkWidth(if p == 2 { 1 } else { 4 })),
                            enabled_width: Some(LinkWidth(4)),
                            active_speed: linked.then_some(speeds[usize::from(p) % 4]),
                            enabled_speed: Some(LinkSpeed::Ndr),
                            remote: linked.then(|| RemoteEnd {
                                guid: Guid(0xb83f_d203_0064_0000 + u64::from(p)),
                                port: 1,
                                description: format!("gpu-{s:02} mlx5_{p}"),
                                kind: NodeKind::Hca,
                            }),
                            counters,
                            ..IbPort::default()
                        }
                    })
                    .collect(),
            })
            .collect();
        FabricScan {
            nodes,
            ..FabricScan::default()
        }
    }

    /// The text of a scan with counter names the table knows and two it does not, byte for
    /// byte what the encoder wrote when a port's counters were a `BTreeMap<String, u64>`
    /// (`testdata/`, written by that encoder): interning the names changed no output.
    #[test]
    fn interned_counter_names_give_the_text_the_map_of_strings_gave() {
        let mut scan = demo_scan();
        let port = &mut scan.nodes[0].ports[2].counters;
        port.insert("VendorXmitStalls", 5);
        port.insert("AVendorCounter", 2);
        scan.nodes[1].ports[0].counters.insert("PortRcvErrors", 0);
        let golden = [
            (
                false,
                Format::OpenMetrics,
                include_str!("testdata/port-families-full.om"),
            ),
            (
                false,
                Format::PrometheusText,
                include_str!("testdata/port-families-full.txt"),
            ),
            (
                true,
                Format::OpenMetrics,
                include_str!("testdata/port-families-errors-only.om"),
            ),
            (
                true,
                Format::PrometheusText,
                include_str!("testdata/port-families-errors-only.txt"),
            ),
        ];
        for (errors_only, format, expected) in golden {
            let ports = PortFamilies::encode(&scan, errors_only, &Selection::default());
            assert!(
                text(&ports, format) == expected,
                "{format:?} errors_only={errors_only}"
            );
        }
    }

    /// One switch's families copied out of the text hold exactly its lines of every family.
    #[test]
    fn a_switch_copied_out_has_its_lines_of_every_family_and_no_others() {
        let scan = demo_scan();
        let all = PortFamilies::encode(&scan, false, &Selection::default());
        let full = text(&all, Format::PrometheusText);
        let mut series = 0;
        for (i, id) in all.switches().iter().enumerate() {
            let one = all.switch(i).unwrap();
            let label = format!("switch_guid=\"{}\"", id.guid);
            let got = text(&one, Format::PrometheusText);
            let samples = |t: &str| -> Vec<String> {
                t.lines()
                    .filter(|l| !l.starts_with('#') && l.contains(&label))
                    .map(str::to_owned)
                    .collect()
            };
            assert_eq!(samples(&got), samples(&full), "{id:?}");
            assert_eq!(one.series(), samples(&got).len());
            assert!(got
                .lines()
                .all(|l| l.starts_with('#') || l.contains(&label)));
            series += one.series();
        }
        assert_eq!(series, all.series());
        assert!(all.switch(all.switches().len()).is_none());
    }

    #[test]
    fn the_cached_text_is_what_prometheus_client_writes_in_both_formats() {
        let mut scan = demo_scan();
        // A hostile description, and counters only some ports have (a family that starts late).
        scan.nodes
            .iter_mut()
            .find(|n| n.kind == NodeKind::Switch)
            .unwrap()
            .description = "evil\"} 1\nrdma_fake 2 \\".into();
        let last = scan
            .nodes
            .iter_mut()
            .rev()
            .find(|n| n.kind == NodeKind::Switch)
            .unwrap();
        last.ports[0].counters.insert("PortRcvSwitchRelayErrors", 7);
        let shard = Selection {
            shard: Some(Shard { index: 1, count: 3 }),
            ..Selection::default()
        };
        for (errors_only, selection) in [
            (false, Selection::default()),
            (true, Selection::default()),
            (false, shard),
        ] {
            let ports = PortFamilies::encode(&scan, errors_only, &selection);
            assert!(ports.series() > 100, "{}", ports.series());
            for format in [Format::OpenMetrics, Format::PrometheusText] {
                let expected =
                    by_prometheus_client(reference(&scan, errors_only, &selection), format);
                let got = text(&ports, format);
                assert!(
                    got == expected,
                    "{format:?} errors_only={errors_only}: first difference at byte {}",
                    got.bytes()
                        .zip(expected.bytes())
                        .position(|(a, b)| a != b)
                        .unwrap_or(got.len().min(expected.len()))
                );
                assert_eq!(
                    got.lines().filter(|l| !l.starts_with('#')).count(),
                    ports.series()
                );
            }
        }
    }

    fn scan(description: &str) -> FabricScan {
        let port = IbPort {
            number: 3,
            active_width: Some(LinkWidth(2)),
            enabled_width: Some(LinkWidth(4)),
            active_speed: Some(LinkSpeed::Hdr),
            enabled_speed: Some(LinkSpeed::Ndr),
            remote: Some(RemoteEnd {
                guid: Guid(0xb83f_d203_0029_1a46),
                port: 1,
                description: "gpu-07 mlx5_0".into(),
                kind: NodeKind::Hca,
            }),
            counters: [
                ("PortXmitData", 10),
                ("PortXmitWait", 7),
                ("SymbolErrorCounter", 2),
            ]
            .into_iter()
            .collect(),
            ..IbPort::default()
        };
        FabricScan {
            nodes: vec![IbNode {
                guid: Guid(0x0002_c903_00a1_b2c3),
                kind: NodeKind::Switch,
                description: description.into(),
                ports: vec![port],
            }],
            ..FabricScan::default()
        }
    }

    #[test]
    fn ports_become_counters_links_and_width_speed_gauges() {
        let ports = PortFamilies::encode(
            &scan("MF0;leaf-01:MQM9700/U1"),
            false,
            &Selection::default(),
        );
        let out = text(&ports, Format::OpenMetrics);
        let labels =
            r#"{switch="MF0;leaf-01:MQM9700/U1",switch_guid="0002:c903:00a1:b2c3",port="3"}"#;
        for line in [
            format!("rdma_ib_switch_port_xmit_data_bytes_total{labels} 40"),
            format!("rdma_ib_switch_port_xmit_wait_total{labels} 7"),
            format!("rdma_ib_link_width_active_lanes{labels} 2"),
            format!("rdma_ib_link_width_enabled_lanes{labels} 4"),
            format!("rdma_ib_link_speed_active_gbps{labels} 50.0"),
            format!("rdma_ib_link_speed_enabled_gbps{labels} 100.0"),
            r#"rdma_ib_link_info{switch="MF0;leaf-01:MQM9700/U1",switch_guid="0002:c903:00a1:b2c3",port="3",remote="gpu-07 mlx5_0",remote_guid="b83f:d203:0029:1a46",remote_port="1",width="2X",speed="HDR"} 1"#.to_owned(),
        ] {
            assert!(out.contains(&line), "{line} not in:\n{out}");
        }
    }

    #[test]
    fn errors_only_keeps_the_link_the_counters_that_moved_and_a_degraded_links_gauges() {
        let mut scan = scan("s");
        scan.nodes[0].ports[0].counters.insert("PortRcvErrors", 0);
        let out = text(
            &PortFamilies::encode(&scan, true, &Selection::default()),
            Format::OpenMetrics,
        );
        assert!(!out.contains("xmit_data"), "{out}");
        assert!(
            out.contains("rdma_ib_switch_port_symbol_error_total{"),
            "{out}"
        );
        assert!(
            out.contains("rdma_ib_switch_port_xmit_wait_total{"),
            "{out}"
        );
        assert!(
            !out.contains("rdma_ib_switch_port_rcv_errors_total{"),
            "zero: {out}"
        );
        assert!(out.contains("rdma_ib_link_info{"), "{out}");
        // 2X HDR of an enabled 4X NDR: degraded, so its gauges are there.
        assert!(out.contains("rdma_ib_link_width_active_lanes{"), "{out}");
        let port = &mut scan.nodes[0].ports[0];
        port.active_width = port.enabled_width;
        port.active_speed = port.enabled_speed;
        let healthy = text(
            &PortFamilies::encode(&scan, true, &Selection::default()),
            Format::OpenMetrics,
        );
        assert!(
            !healthy.contains("_lanes{") && !healthy.contains("_gbps{"),
            "{healthy}"
        );
        assert!(healthy.contains("rdma_ib_link_info{"), "{healthy}");
    }

    #[test]
    fn hostile_descriptions_are_escaped() {
        let ports = PortFamilies::encode(
            &scan("evil\"} 1\nrdma_fake 2 \\"),
            false,
            &Selection::default(),
        );
        let out = text(&ports, Format::PrometheusText);
        assert!(!out.lines().any(|l| l.starts_with("rdma_fake")), "{out}");
        assert!(
            out.contains(r#"switch="evil\"} 1\nrdma_fake 2 \\""#),
            "{out}"
        );
    }

    #[test]
    fn the_gzip_member_is_made_once_per_format_and_holds_the_text() {
        use std::io::Read;
        let ports = PortFamilies::encode(&demo_scan(), false, &Selection::default());
        let gz = ports.gzip(Format::OpenMetrics);
        assert_eq!(gz, ports.gzip(Format::OpenMetrics), "the same bytes");
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut text)
            .unwrap();
        assert_eq!(text, ports.text(Format::OpenMetrics));
    }
}
