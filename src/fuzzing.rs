//! The bodies of the fuzz targets (`fuzz/fuzz_targets/`). They live in the library so that
//! `tests/fuzz_regressions.rs` replays saved inputs through the same code on the stable
//! toolchain. Each takes arbitrary bytes and must not panic; besides, each asserts what holds for
//! every input, so a wrong answer is a finding as much as a crash is.

use std::fmt::Write;
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use crate::nccl::report::{self, Report};
use crate::nccl::{jobs, Evidence, LogParser};
use crate::node::ethtool::{parse_ethtool_text, EthtoolError};
use crate::node::ethtool_ioctl::{decode_names, decode_stats, decode_strings, ETH_GSTRING_LEN};
use crate::node::parse;
use crate::node::rdma_netlink::{decode, nldev, wire};
use crate::probe::packet::{Packet, LEN};
use crate::probe::responder::{Limits, Responder, Source, Verdict};
use crate::switch::gnmi::proto::subscribe_response::Response;
use crate::switch::gnmi::proto::typed_value::Value as Typed;
use crate::switch::gnmi::{check_document, collect_update, parse_path, proto, render, GnmiUpdate};
use crate::switch::poll_error::PollErrorReason;
use crate::switch::profile::{parse_oid, Metric, Profile, Profiles, SampleValue, SnmpValue};
use crate::yaml::{parse_duration, ConfigError};

/// A fuzz target's body: any bytes in, a panic on a finding.
pub type Target = fn(&[u8]);

/// Every target by the name of its fuzz target and of its `fuzz/regressions/` directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("sysfs_value", sysfs_value),
    ("config", config),
    ("nccl_log", nccl_log),
    ("ethtool_strings", ethtool_strings),
    ("ethtool_text", ethtool_text),
    ("snmp_values", snmp_values),
    ("gnmi_values", gnmi_values),
    ("gnmi_json", gnmi_json),
    ("rdma_netlink", rdma_netlink),
    ("ib_diags_text", ib_diags_text),
    ("probe_packet", probe_packet),
    ("transceiver_pages", transceiver_pages),
];

/// Payloads from a broken or hostile probe peer: `data` in chunks of a source byte and a
/// payload. Each payload decodes or is refused; a decoded packet encodes back to the same
/// meaningful bytes; a responder fed them all in one instant answers no more than its bound.
pub fn probe_packet(data: &[u8]) {
    let limits = Limits {
        per_source: 8,
        total: 20,
        sources: 4,
        unknown: 2,
    };
    let mut responder = Responder::new(limits, 0);
    let mut answers = 0;
    for chunk in data.chunks(LEN + 1) {
        let Some((&from, payload)) = chunk.split_first() else {
            continue;
        };
        if let Ok(packet) = Packet::decode(payload) {
            let again = packet.encode();
            assert_eq!(Packet::decode(&again), Ok(packet));
            assert_eq!(again[..6], payload[..6]);
            assert_eq!(again[8..24], payload[8..24]);
        }
        let source = Source::from_gid([from; 16], u32::from(from));
        // Odd source bytes stand for sources outside the peer set.
        if let Verdict::Answer(_) = responder.receive(payload, source, 0, from % 2 == 0) {
            answers += 1;
        }
    }
    assert!(answers <= limits.total, "{answers} answers");
    assert!(responder.tracked_sources() <= limits.sources);
}

/// One sysfs attribute file's bytes through every parser of `node::parse`.
pub fn sysfs_value(data: &[u8]) {
    let text = parse::attribute_text(data);
    match (&text, std::str::from_utf8(data)) {
        (Ok(value), Ok(all)) => {
            assert!(!value.is_empty() && value.trim() == *value && all.contains(value));
        }
        (Err(parse::ValueError::NotUtf8), Err(_)) => {}
        (Err(parse::ValueError::Empty), Ok(all)) => assert!(all.trim().is_empty()),
        (other, utf8) => panic!("attribute_text: {other:?}, input UTF-8: {}", utf8.is_ok()),
    }
    assert_eq!(parse::text(data), text.clone().map(str::to_string));

    match parse::counter(data) {
        // Whatever spelling was accepted, the kernel's spellings of the number read back.
        Ok(n) => {
            assert_eq!(parse::counter(format!("{n}\n").as_bytes()), Ok(n));
            assert_eq!(parse::counter(format!("0x{n:x}\n").as_bytes()), Ok(n));
        }
        Err(e) => {
            assert!(!e.reason().as_label().is_empty());
            if let Err(first) = &text {
                assert_eq!(&e, first, "counter and attribute_text disagree");
            }
        }
    }
    // Any u64, printed as the kernel prints it, is a counter.
    if let Some(head) = data.first_chunk::<8>() {
        let n = u64::from_le_bytes(*head);
        assert_eq!(parse::counter(format!("{n}\n").as_bytes()), Ok(n));
    }

    if let Ok((id, name)) = parse::state(data) {
        assert_eq!(name, name.trim());
        assert_eq!(
            parse::state(format!("{id}: {name}\n").as_bytes()),
            Ok((id, name))
        );
    }
    if let Ok(rate) = parse::rate_bytes_per_second(data) {
        assert!(
            rate.is_finite() && rate >= 0.0,
            "rate {rate} from {:?}",
            String::from_utf8_lossy(data)
        );
    }
}

/// A config file: parsed, its problems placed in the text, and every duration spelling in it.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.yml");
    match crate::config::parse(path, text) {
        Ok(config) => {
            let origin = crate::config::Origin {
                path: path.to_path_buf(),
                text: Some(text.to_string()),
            };
            for e in origin.errors(crate::config::problems(&config)).0 {
                assert!(e.to_string().starts_with("fuzz.yml:"), "{e}");
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.starts_with("fuzz.yml:"), "{message}");
            if let ConfigError::At { line, column, .. } = e {
                // libyaml breaks lines at \n, \r, NEL, LS and PS, and reports an error at the
                // end of a text without a final break on the line after the last.
                let breaks = text
                    .chars()
                    .filter(|c| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'))
                    .count();
                assert!(
                    line <= breaks + 2,
                    "line {line} of {breaks} breaks: {message}"
                );
                assert!(column <= text.chars().count() + 1, "{message}");
            }
        }
    }
    durations(text);
}

/// `parse_duration` on the text, and on every unit with the text's digits: a number that does
/// not fit is an error, never a wrapped or saturated duration.
fn durations(text: &str) {
    if let Ok(duration) = parse_duration(text) {
        assert!(!duration.is_zero());
    }
    let digits: String = text.chars().filter(char::is_ascii_digit).take(20).collect();
    let Ok(n) = digits.parse::<u64>() else {
        return;
    };
    let positive = |d: Duration| (!d.is_zero()).then_some(d);
    assert_eq!(
        parse_duration(&format!("{n}ms")).ok(),
        positive(Duration::from_millis(n))
    );
    for (unit, seconds) in [("s", 1), ("m", 60), ("h", 3600)] {
        let expected = n
            .checked_mul(seconds)
            .map(Duration::from_secs)
            .and_then(positive);
        assert_eq!(
            parse_duration(&format!("{n}{unit}")).ok(),
            expected,
            "{n}{unit}"
        );
    }
}

/// An NCCL debug log through the parser, the verdicts and both report formats.
pub fn nccl_log(data: &[u8]) {
    let mut parser = LogParser::new();
    parser.feed("fuzz.log", data);
    let processes = parser.finish();
    let lines = data.split(|b| *b == b'\n').count();
    for process in &processes {
        let evidence = process
            .networks
            .iter()
            .map(|(_, e)| e)
            .chain(&process.hca_evidence)
            .chain(&process.gdr_evidence)
            .chain(&process.channel_evidence)
            .chain(process.signals.iter().map(|(_, e)| e))
            .chain(process.settings.values().map(|(_, e)| e));
        for Evidence { file, line, text } in evidence {
            assert_eq!(file, "fuzz.log");
            assert!((1..=lines).contains(line), "line {line} of {lines}");
            // Shortened to 240 characters plus "...".
            assert!(text.chars().count() <= 243, "{text:?}");
        }
    }
    let jobs = jobs(&processes);
    assert_eq!(
        jobs.iter().map(|j| j.processes.len()).sum::<usize>(),
        processes.len(),
        "every process belongs to exactly one job"
    );
    let proto_triage = crate::nccl::triage::triage(vec![crate::nccl::triage::run(
        "fuzz.log",
        [("fuzz.log", data)],
        false,
    )]);
    let report = Report {
        jobs,
        stalls: crate::nccl::stall::stalls("fuzz.log", &String::from_utf8_lossy(data)),
        hangs: crate::nccl::hang::hangs(
            "fuzz.log",
            &String::from_utf8_lossy(data),
            std::time::Duration::from_secs(1),
        ),
        proto_triage,
        exit_code: 0,
    };
    report::text(&report);
    serde_json::to_string(&report).expect("a report serializes");
}

/// GSTRINGS/GSTATS payloads: the first byte is a claimed record count, the rest the payload.
/// Mismatched lengths must be errors; matching ones must decode record for record.
pub fn ethtool_strings(data: &[u8]) {
    let Some((&claimed, payload)) = data.split_first() else {
        return;
    };
    for count in [usize::from(claimed), payload.len() / ETH_GSTRING_LEN] {
        match decode_strings(payload, count) {
            Ok(names) => {
                assert_eq!(payload.len(), count * ETH_GSTRING_LEN);
                assert_eq!(names.len(), count);
                for (name, raw) in names.iter().zip(payload.chunks(ETH_GSTRING_LEN)) {
                    assert!(!name.contains('\0'), "{name:?}");
                    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
                    if let Ok(exact) = std::str::from_utf8(&raw[..end]) {
                        assert_eq!(name, exact);
                    }
                }
                // The shared-list decoder gives the same names, fresh or against itself.
                let fresh = decode_names(payload, count, None).expect("same length check");
                assert!(fresh
                    .iter()
                    .map(|n| &**n)
                    .eq(names.iter().map(String::as_str)));
                let shared = decode_names(payload, count, Some(&fresh)).expect("same check");
                assert_eq!(shared, fresh);
            }
            Err(e) => assert_ne!(payload.len(), count * ETH_GSTRING_LEN, "{e}"),
        }
    }
    for count in [usize::from(claimed), payload.len() / 8] {
        match decode_stats(payload, count) {
            Ok(values) => {
                assert_eq!(values.len(), count);
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
                assert_eq!(bytes, payload);
            }
            Err(e) => assert_ne!(payload.len(), count * 8, "{e}"),
        }
    }
}

/// `ethtool -S` text (the `files` source): what parses prints back to the same statistics.
pub fn ethtool_text(data: &[u8]) {
    let path = Path::new("fuzz.txt");
    match parse_ethtool_text(path, data) {
        Ok(stats) => {
            let mut printed = String::from("NIC statistics:\n");
            for (name, value) in &stats {
                assert_eq!(name, name.trim_ascii());
                writeln!(printed, "     {name}: {value}").expect("writing to a String");
            }
            let again = parse_ethtool_text(path, printed.as_bytes()).expect("printed stats parse");
            assert_eq!(again, stats);
        }
        Err(EthtoolError::Parse { line, .. }) => {
            let lines = data.split(|b| *b == b'\n').count();
            assert!((1..=lines).contains(&line), "line {line} of {lines}");
        }
        Err(other) => panic!("not a parse error: {other}"),
    }
}

static PROFILES: LazyLock<Profiles> =
    LazyLock::new(|| Profiles::builtin().expect("the built-in profiles load"));

/// Varbinds in snmprec form (`oid|tag|value` lines, as `tests/fixtures/snmprec/`) decoded by
/// every built-in profile.
pub fn snmp_values(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        let mut fields = line.splitn(3, '|');
        let (Some(oid), Some(tag), Some(raw)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(oid) = parse_oid(oid) else {
            continue;
        };
        let dotted: Vec<String> = oid.iter().map(u32::to_string).collect();
        assert_eq!(parse_oid(&dotted.join(".")).as_ref(), Ok(&oid));
        let value = snmprec_value(tag, raw);
        for name in PROFILES.names() {
            check_varbind(PROFILES.get(name).expect("a listed name"), &oid, &value);
        }
    }
}

/// The snmprec tags of the types a switch answers (`4x` is hex-encoded octets).
fn snmprec_value(tag: &str, raw: &str) -> SnmpValue {
    let other = || SnmpValue::Other(format!("{tag}|{raw}"));
    match tag {
        "2" => raw.parse().map_or_else(|_| other(), SnmpValue::Integer),
        "4" => SnmpValue::OctetString(raw.as_bytes().to_vec()),
        "4x" => (0..raw.len())
            .step_by(2)
            .map(|at| {
                raw.get(at..at + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .map_or_else(other, SnmpValue::OctetString),
        "65" => raw.parse().map_or_else(|_| other(), SnmpValue::Counter32),
        "66" => raw.parse().map_or_else(|_| other(), SnmpValue::Gauge32),
        "70" => raw.parse().map_or_else(|_| other(), SnmpValue::Counter64),
        _ => other(),
    }
}

fn check_varbind(profile: &Profile, oid: &[u32], value: &SnmpValue) {
    let Some(result) = profile.decode(oid, value) else {
        return;
    };
    // Only a column whose OID prefixes the row and whose index fills the rest claims it.
    let claimants: Vec<_> = profile
        .columns
        .iter()
        .filter(|c| oid.starts_with(&c.oid) && oid.len() == c.oid.len() + c.index.len())
        .collect();
    let sample = match result {
        Ok(sample) => sample,
        Err(e) => {
            assert!(claimants.iter().any(|c| c.name == e.column), "{e}");
            return;
        }
    };
    assert!(
        claimants.iter().any(|c| c.metric == sample.metric),
        "{sample:?}"
    );
    assert!(sample.key.priority.is_none_or(|p| p < 8), "{sample:?}");
    let raw = match value {
        SnmpValue::Counter32(v) | SnmpValue::Gauge32(v) => Some(u64::from(*v)),
        SnmpValue::Counter64(v) => Some(*v),
        SnmpValue::Integer(v) => u64::try_from(*v).ok(),
        SnmpValue::OctetString(_) | SnmpValue::Other(_) => None,
    };
    match (&sample.value, value) {
        (SampleValue::Text(text), SnmpValue::OctetString(_)) => {
            assert!(sample.metric.is_text() && text.trim() == text, "{sample:?}");
        }
        // TruthValue: 1 true, 2 false.
        (SampleValue::Gauge(g), SnmpValue::Integer(v)) if sample.metric == Metric::PfcEnabled => {
            assert_eq!((*v, *g), if *v == 1 { (1, 1) } else { (2, 0) });
        }
        (SampleValue::Gauge(g), _) if sample.metric == Metric::PriorityQueue => {
            assert_eq!(u64::try_from(*g).ok(), raw);
        }
        (SampleValue::Gauge(g), SnmpValue::Integer(v)) => {
            assert_eq!((sample.metric, g), (Metric::OperStatus, v));
        }
        (SampleValue::Counter(c), _) => assert_eq!(Some(*c), raw),
        (SampleValue::Seconds(s), _) => assert!(s.is_finite() && *s >= 0.0, "{s}"),
        (decoded, given) => panic!("{given:?} decoded as {decoded:?}"),
    }
}

/// A gNMI SubscribeResponse as protobuf bytes: its updates flattened to leaves (typed values
/// and JSON documents), then decoded by every built-in profile with a gNMI section.
pub fn gnmi_values(data: &[u8]) {
    use prost::Message;
    let Ok(answer) = proto::SubscribeResponse::decode(data) else {
        return;
    };
    let Some(Response::Update(notification)) = answer.response else {
        return;
    };
    let prefix = notification.prefix.as_ref();
    for deleted in &notification.delete {
        let root = render(prefix, Some(deleted));
        assert!(root.is_empty() || root.starts_with('/'), "{root:?}");
    }
    let mut leaves = Vec::new();
    for update in &notification.update {
        collect_checked(prefix, update, &mut leaves);
    }
    check_gnmi_decode(&leaves);
}

/// A JSON_IETF value: the first line is the update's path as a profile writes it
/// (`COUNTERS_DB:COUNTERS/Ethernet*`), the rest the document.
pub fn gnmi_json(data: &[u8]) {
    let (path, json) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&[][..], data),
    };
    let update = proto::Update {
        path: std::str::from_utf8(path)
            .ok()
            .and_then(|p| parse_path(p).ok()),
        val: Some(proto::TypedValue {
            value: Some(Typed::JsonIetfVal(json.to_vec())),
        }),
        duplicates: 0,
    };
    let mut leaves = Vec::new();
    if collect_checked(None, &update, &mut leaves) {
        let document: serde_json::Value =
            serde_json::from_slice(json).expect("collect_update parsed it");
        assert!(leaves.len() <= scalars(&document));
    }
    check_gnmi_decode(&leaves);
}

/// `collect_update`, checking that every leaf lies at or below the update's path (the leaf
/// cache replaces documents by that path), that only a bad JSON value fails, and that the
/// leaf cap's count before parsing (`check_document`) is not below the leaves a document
/// flattens to. Returns whether the update was read.
fn collect_checked(
    prefix: Option<&proto::Path>,
    update: &proto::Update,
    leaves: &mut Vec<GnmiUpdate>,
) -> bool {
    let before = leaves.len();
    match collect_update(prefix, update, leaves) {
        Ok(root) => {
            for leaf in &leaves[before..] {
                let below = leaf.path.strip_prefix(&root).is_some_and(|rest| {
                    rest.is_empty() || rest.starts_with('/') || rest.starts_with('[')
                });
                assert!(below, "{:?} outside {root:?}", leaf.path);
            }
            // A bare scalar document is one leaf and no member: the one miscount allowed.
            let added = leaves.len() - before;
            if added > 1 {
                assert!(
                    check_document(update, added - 1).is_err(),
                    "{added} leaves pass a cap of {}",
                    added - 1
                );
            }
            true
        }
        Err(e) => {
            assert_eq!(e.reason, PollErrorReason::Decode, "{e}");
            assert_eq!(leaves.len(), before, "a failed update added leaves");
            false
        }
    }
}

/// Non-null scalars of a JSON document: the most leaves it can flatten to.
fn scalars(json: &serde_json::Value) -> usize {
    match json {
        serde_json::Value::Null => 0,
        serde_json::Value::Object(map) => map.values().map(scalars).sum(),
        serde_json::Value::Array(items) => items.iter().map(scalars).sum(),
        _ => 1,
    }
}

fn check_gnmi_decode(leaves: &[GnmiUpdate]) {
    for name in PROFILES.names() {
        let profile = PROFILES.get(name).expect("a listed name");
        if profile.gnmi.is_empty() {
            continue;
        }
        let decoded = profile.gnmi.decode(leaves);
        // Ports are numbered 1, 2, ... in order of appearance, each with one if_name.
        let ports: Vec<u32> = decoded
            .samples
            .iter()
            .filter(|s| s.metric == Metric::IfName)
            .map(|s| s.key.ifindex)
            .collect();
        assert!(
            ports.iter().zip(1..).all(|(ifindex, n)| *ifindex == n),
            "{name}: {ports:?}"
        );
        for sample in &decoded.samples {
            assert!(
                (1..=ports.len()).contains(&(sample.key.ifindex as usize)),
                "{name}: {sample:?} of {} ports",
                ports.len()
            );
            assert!(sample.key.priority.is_none_or(|p| p < 8), "{sample:?}");
            match &sample.value {
                SampleValue::Seconds(s) => assert!(s.is_finite() && *s >= 0.0, "{sample:?}"),
                SampleValue::Text(t) if sample.metric != Metric::IfName => {
                    assert_eq!(t, t.trim());
                }
                _ => {}
            }
        }
        for error in &decoded.errors {
            assert!(!error.column.is_empty(), "{error}");
        }
    }
}

/// Kernel answers on NETLINK_RDMA (`tests/fixtures/netlink/` shapes) through every nldev
/// decoder. Whatever decodes stays within what the bytes can hold (each QP entry takes at least
/// 28 bytes, each counter or summary entry 20), and requests built from the bytes decode back.
pub fn rdma_netlink(data: &[u8]) {
    if let Ok(answer) = decode::answer(data, None) {
        for m in &answer.messages {
            assert!(
                ![wire::NLMSG_NOOP, wire::NLMSG_ERROR, wire::NLMSG_DONE].contains(&m.header.kind)
            );
            assert!(m.payload.len() + wire::NLMSG_HDRLEN <= data.len());
        }
    }
    let _ = decode::ends_answer(data, 0);
    if let Ok(devices) = decode::decode_answer(nldev::CMD_GET, data, None, decode::devices) {
        assert!(devices.len() * (wire::NLMSG_HDRLEN + 8) <= data.len());
    }
    if let Ok(devices) = decode::decode_answer(nldev::CMD_RES_GET, data, None, decode::resources) {
        let entries: usize = devices.iter().map(|d| d.summary.len()).sum();
        assert!(entries * 20 <= data.len());
    }
    if let Ok(qps) = decode::decode_answer(nldev::CMD_RES_QP_GET, data, None, decode::queue_pairs) {
        assert!(qps.len() * 28 <= data.len());
    }
    if let Ok(stats) =
        decode::decode_answer(nldev::CMD_STAT_GET, data, None, decode::port_statistics)
    {
        let counters: usize = stats.iter().map(|s| s.counters.len()).sum();
        assert!(counters * 20 <= data.len());
    }
    // A request of u32 attributes taken from the bytes decodes to what was encoded.
    let attrs: Vec<(u16, u32)> = data
        .chunks_exact(6)
        .take(16)
        .map(|c| {
            let kind = u16::from_ne_bytes([c[0], c[1]]) & 0x3fff;
            (kind, u32::from_ne_bytes([c[2], c[3], c[4], c[5]]))
        })
        .collect();
    let request = wire::encode_request(nldev::msg_type(nldev::CMD_STAT_GET), 5, 9, &attrs);
    let message = wire::messages(&request)
        .next()
        .expect("one message")
        .expect("a request frames");
    let back: Vec<(u16, u32)> = wire::attrs(message.payload)
        .map(|a| a.expect("an encoded attribute"))
        .map(|a| (a.kind, a.u32().expect("a u32")))
        .collect();
    assert_eq!(back, attrs);
}

/// Module memory as `data`'s 128-byte chunks, in the order a module read asks for them: lower
/// memory at 0x50, upper pages 00h, 01h, 02h, 03h and 11h, then A2h; a chunk past the end is a
/// page the module does not have, and the last chunk may be short. Through the whole read (the
/// identifier picks SFF-8472, SFF-8636 or CMIS) and each decoder on its own. Besides not
/// panicking: at most 8 lanes, numbered from 1 in order; every value finite; text labels
/// printable ASCII.
pub fn transceiver_pages(data: &[u8]) {
    use crate::node::optics::{
        cmis, read_module, sff8472, sff8636, ModulePages, ModuleReading, PageError, PageRequest,
    };

    #[derive(Debug)]
    struct Chunks<'a>(Vec<&'a [u8]>);

    impl ModulePages for Chunks<'_> {
        fn read(&self, _: &str, request: PageRequest) -> Result<Vec<u8>, PageError> {
            let index = match (request.i2c_address, request.offset, request.page) {
                (0x50, 0, _) => 0,
                (0x50, 128, 0x00) => 1,
                (0x50, 128, 0x01) => 2,
                (0x50, 128, 0x02) => 3,
                (0x50, 128, 0x03) => 4,
                (0x50, 128, 0x11) => 5,
                (0x51, 0, 0) => 6,
                _ => return Err(PageError::NoPage(request)),
            };
            self.0
                .get(index)
                .map(|chunk| chunk.to_vec())
                .ok_or(PageError::NoPage(request))
        }
    }

    fn check(module: &ModuleReading) {
        for text in [
            &module.vendor,
            &module.part_number,
            &module.revision,
            &module.serial_number,
        ] {
            assert!(text.bytes().all(|b| (0x20..0x7F).contains(&b)), "{text:?}");
        }
        let Some(d) = &module.diagnostics else { return };
        assert!(d.lanes.len() <= 8);
        for (i, lane) in d.lanes.iter().enumerate() {
            assert_eq!(usize::from(lane.lane), i + 1);
        }
        let thresholds = crate::node::optics::Quantity::ALL
            .iter()
            .filter_map(|q| d.thresholds.get(*q))
            .flat_map(|levels| levels.labelled().map(|(_, v)| v));
        let values = d
            .lanes
            .iter()
            .flat_map(|l| [l.tx_power_watts, l.rx_power_watts, l.bias_current_amperes])
            .chain([d.temperature_celsius, d.supply_voltage_volts])
            .flatten()
            .chain(thresholds);
        for value in values {
            assert!(value.is_finite(), "{value}");
        }
    }

    let chunks: Vec<&[u8]> = data.chunks(128).collect();
    if let Ok(Some(module)) = read_module(&Chunks(chunks.clone()), "eth0") {
        check(&module);
    }
    let page = |i: usize| chunks.get(i).copied();
    let lower = page(0).unwrap_or(&[]);
    let upper_00 = page(1).unwrap_or(&[]);
    for decoded in [
        sff8472::decode(lower, page(6)),
        sff8636::decode(lower, upper_00, page(4)),
        cmis::decode(cmis::Pages {
            lower,
            page_00: upper_00,
            page_01: page(2),
            page_02: page(3),
            page_11: page(5),
        }),
    ]
    .into_iter()
    .flatten()
    {
        check(&decoded);
    }
}

/// Any text as a saved infiniband-diags output: detection, every tool's parser, the merge, the
/// `ib-report` findings and both report formats. Besides not panicking: the merged nodes are
/// sorted and unique by GUID, each node's ports by number, and every finding names a port.
pub fn ib_diags_text(data: &[u8]) {
    use crate::ib::diags::{detect, iblinkinfo, ibnetdiscover, ibqueryerrors, merge, perfquery};
    let text = String::from_utf8_lossy(data);
    let _ = ibnetdiscover::parse(&text);
    let _ = iblinkinfo::parse(&text);
    let _ = perfquery::parse(&text);
    let _ = ibqueryerrors::parse(&text);
    let Ok(parsed) = detect::parse_any(&text) else {
        return;
    };
    let merged = merge::merge(&[parsed]);
    let nodes = &merged.scan.nodes;
    assert!(
        nodes.windows(2).all(|w| w[0].guid < w[1].guid),
        "nodes sorted by GUID"
    );
    for node in nodes {
        assert!(
            node.ports.windows(2).all(|w| w[0].number < w[1].number),
            "ports of {} sorted and unique",
            node.guid
        );
    }
    let found = crate::diag::ib_report::findings::find(&merged, 0.01);
    for e in &found.error_ports {
        assert!(!e.counters.is_empty());
    }
    serde_json::to_string(&found).expect("findings serialize");
}
